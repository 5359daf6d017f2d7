//! LiteLLM's `budget_limits` on keys and teams: several budget windows at
//! once, each with its own budget and period (`[{"budget_duration": "1d",
//! "max_budget": 1.0, "reset_at": ...}, ...]`), stored as JSONB.

use super::records::parse_duration;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One window of `budget_limits` (LiteLLM's `BudgetLimitEntry`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BudgetWindow {
    /// The window's length (`1d`, `7d`, `1h`, ...).
    pub budget_duration: String,
    /// What the window may spend, USD.
    pub max_budget: f64,
    /// When the window set at creation (or the last change) ends.
    #[serde(default)]
    pub reset_at: Option<DateTime<Utc>>,
}

impl BudgetWindow {
    /// When the window holding `now` ends (Unix ms): windows follow each
    /// other from `reset_at` by whole periods, so every replica computes
    /// the same one without writing anything; without `reset_at`, windows
    /// are aligned to the epoch. `None` when the duration does not parse.
    pub fn end_ms(&self, now: DateTime<Utc>) -> Option<i64> {
        let period = parse_duration(&self.budget_duration)
            .ok()?
            .num_milliseconds();
        let period = period.max(1);
        let now = now.timestamp_millis();
        let anchor = self.reset_at.map_or(0, |t| t.timestamp_millis());
        if now < anchor {
            return Some(anchor);
        }
        let passed = now.checked_sub(anchor)?.checked_div(period)?;
        passed
            .checked_add(1)?
            .checked_mul(period)?
            .checked_add(anchor)
    }
}

/// The windows of a `budget_limits` column: an array, or LiteLLM's JSON
/// text of one (its key update writes `json.dumps(...)`); anything else,
/// or an entry that is not a window, reads as none (logged).
pub fn read_windows(value: Option<Value>) -> Vec<BudgetWindow> {
    let value = match value {
        Some(Value::String(text)) => serde_json::from_str(&text).ok(),
        other => other,
    };
    match value {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => serde_json::from_value(v).unwrap_or_else(|e| {
            tracing::warn!("budget_limits that are not budget windows are not enforced: {e}");
            Vec::new()
        }),
    }
}

/// The windows as the `budget_limits` column: NULL when there are none,
/// as LiteLLM leaves it.
pub fn windows_json(windows: &[BudgetWindow]) -> Option<Value> {
    if windows.is_empty() {
        return None;
    }
    serde_json::to_value(windows).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn windows_follow_each_other_from_reset_at() {
        let w = BudgetWindow {
            budget_duration: "1d".into(),
            max_budget: 1.0,
            reset_at: Some(at("2026-01-02T00:00:00Z")),
        };
        let end = |now| {
            DateTime::<Utc>::from_timestamp_millis(w.end_ms(at(now)).unwrap())
                .unwrap()
                .to_rfc3339()
        };
        assert_eq!(end("2026-01-01T10:00:00Z"), "2026-01-02T00:00:00+00:00");
        assert_eq!(end("2026-01-02T00:00:00Z"), "2026-01-03T00:00:00+00:00");
        assert_eq!(end("2026-01-05T23:59:59Z"), "2026-01-06T00:00:00+00:00");
        let bad = BudgetWindow {
            budget_duration: "soon".into(),
            ..w.clone()
        };
        assert_eq!(bad.end_ms(Utc::now()), None);
    }

    #[test]
    fn reads_litellms_forms_of_the_column() {
        let array = serde_json::json!([
            {"budget_duration": "1d", "max_budget": 2.5, "reset_at": "2026-01-02T00:00:00+00:00"}
        ]);
        let windows = read_windows(Some(array.clone()));
        assert_eq!(windows.len(), 1);
        assert_eq!(windows[0].max_budget, 2.5);
        assert_eq!(windows[0].reset_at, Some(at("2026-01-02T00:00:00Z")));
        assert_eq!(
            read_windows(Some(Value::String(array.to_string()))),
            windows
        );
        assert!(read_windows(None).is_empty());
        assert!(read_windows(Some(serde_json::json!({"x": 1}))).is_empty());
        assert_eq!(windows_json(&[]), None);
    }
}
