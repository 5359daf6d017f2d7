//! What a budget alert says: LiteLLM's `WebhookEvent` for webhooks, a line of
//! text for Slack. Keys appear by their sha256 only, never in plain text.

use super::Channel;
use crate::auth::KeyEntry;
use crate::budget::Budget;

/// Which threshold was crossed (LiteLLM's `event` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Spend reached the soft budget; requests still pass.
    SoftBudgetCrossed,
    /// The hard budget refused a request.
    BudgetCrossed,
}

impl Event {
    /// The `event` field of the webhook payload.
    fn name(self) -> &'static str {
        match self {
            Event::SoftBudgetCrossed => "soft_budget_crossed",
            Event::BudgetCrossed => "budget_crossed",
        }
    }

    /// The message of the `gateway::alerts` log line.
    pub fn log_text(self) -> &'static str {
        match self {
            Event::SoftBudgetCrossed => "soft budget crossed",
            Event::BudgetCrossed => "budget crossed",
        }
    }
}

/// One budget alert, built on the request path from the key and the budget
/// that crossed, delivered by the control plane.
#[derive(Debug, Clone)]
pub struct BudgetAlert {
    /// What happened.
    pub event: Event,
    /// Whose budget: `key`, `user` or `team`.
    pub scope: &'static str,
    /// That budget's spend, USD.
    pub spend: f64,
    /// Its hard limit, USD.
    pub max_budget: Option<f64>,
    /// Its soft limit, USD.
    pub soft_budget: Option<f64>,
    /// sha256 hex of the key whose request crossed it.
    pub token: String,
    /// The key's alias.
    pub key_alias: Option<String>,
    /// The key's abbreviated form (`sk-...abcd`), for the message only.
    pub key_name: Option<String>,
    /// The key's user.
    pub user_id: Option<String>,
    /// The key's team.
    pub team_id: Option<String>,
}

impl BudgetAlert {
    /// The alert for `budget` (the `scope` budget of `key`) crossing a threshold.
    pub fn new(event: Event, scope: &'static str, budget: &Budget, key: &KeyEntry) -> Self {
        let record = &key.record;
        BudgetAlert {
            event,
            scope,
            spend: budget.spent_usd(),
            max_budget: budget.max_usd(),
            soft_budget: budget.soft_usd(),
            token: record.token.clone(),
            key_alias: record.key_alias.clone(),
            key_name: record.key_name.clone(),
            user_id: record.user_id.clone(),
            team_id: record.team_id.clone(),
        }
    }

    /// The human-readable line (LiteLLM's `event_message`; Slack's `text`).
    pub fn message(&self) -> String {
        let who = match self.scope {
            "user" => format!("user {}", quoted(self.user_id.as_deref())),
            "team" => format!("team {}", quoted(self.team_id.as_deref())),
            _ => match (&self.key_alias, &self.key_name) {
                (Some(alias), _) => format!("key \"{alias}\""),
                (None, Some(name)) => format!("key {name}"),
                (None, None) => format!("key {}", short_token(&self.token)),
            },
        };
        let usd = |v: Option<f64>| v.map_or_else(|| "none".to_string(), |v| format!("${v:.6}"));
        match self.event {
            Event::SoftBudgetCrossed => format!(
                "Soft Budget Crossed: {who} has spent ${:.6}, soft budget {}, max budget {}",
                self.spend,
                usd(self.soft_budget),
                usd(self.max_budget)
            ),
            Event::BudgetCrossed => format!(
                "Budget Crossed: {who} has spent ${:.6} of its max budget {}; requests are refused",
                self.spend,
                usd(self.max_budget)
            ),
        }
    }

    /// The POST body for `channel`.
    pub fn body(&self, channel: Channel) -> Vec<u8> {
        let value = match channel {
            Channel::Webhook => serde_json::json!({
                "spend": self.spend,
                "max_budget": self.max_budget,
                "soft_budget": self.soft_budget,
                "token": self.token,
                "key_alias": self.key_alias,
                "user_id": self.user_id,
                "team_id": self.team_id,
                "event": self.event.name(),
                "event_group": self.scope,
                "event_message": self.message(),
            }),
            Channel::Slack => serde_json::json!({ "text": self.message() }),
        };
        value.to_string().into_bytes()
    }
}

fn quoted(id: Option<&str>) -> String {
    id.map_or_else(|| "(unknown)".to_string(), |id| format!("\"{id}\""))
}

/// The first characters of a hashed token: enough to find it, short to read.
fn short_token(token: &str) -> &str {
    token.get(..12).unwrap_or(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::KeyRecord;
    use serde_json::Value;

    fn key(alias: Option<&str>) -> KeyEntry {
        KeyEntry {
            budget_throttle: None,
            record: KeyRecord {
                token: "ab".repeat(32),
                key_alias: alias.map(str::to_string),
                key_name: Some("sk-...wxyz".into()),
                user_id: Some("u1".into()),
                team_id: Some("t1".into()),
                ..Default::default()
            },
            budget: Budget::new(Some(1.0), Some(0.5), 0.6),
            team: None,
            user: None,
            model_budgets: Vec::new(),
            member_budget: None,
            member_model_budgets: Vec::new(),
            member_row: None,
            counter_names: Default::default(),
        }
    }

    #[test]
    fn webhook_payload_has_litellms_shape() {
        let k = key(Some("ci"));
        let alert = BudgetAlert::new(Event::SoftBudgetCrossed, "key", &k.budget, &k);
        let v: Value = serde_json::from_slice(&alert.body(Channel::Webhook)).unwrap();
        assert_eq!(v["event"], "soft_budget_crossed");
        assert_eq!(v["event_group"], "key");
        assert_eq!(v["token"], "ab".repeat(32));
        assert_eq!(v["key_alias"], "ci");
        assert_eq!(
            (v["user_id"].as_str(), v["team_id"].as_str()),
            (Some("u1"), Some("t1"))
        );
        assert!((v["spend"].as_f64().unwrap() - 0.6).abs() < 1e-9);
        assert!((v["max_budget"].as_f64().unwrap() - 1.0).abs() < 1e-9);
        assert!((v["soft_budget"].as_f64().unwrap() - 0.5).abs() < 1e-9);
        let message = v["event_message"].as_str().unwrap();
        assert!(
            message.starts_with("Soft Budget Crossed: key \"ci\""),
            "{message}"
        );
        assert_eq!(v.as_object().unwrap().len(), 10, "{v}");
    }

    #[test]
    fn team_refusal_and_slack_text() {
        let k = key(None);
        let team = Budget::new(Some(2.0), None, 2.0);
        let alert = BudgetAlert::new(Event::BudgetCrossed, "team", &team, &k);
        let v: Value = serde_json::from_slice(&alert.body(Channel::Webhook)).unwrap();
        assert_eq!(
            (v["event"].as_str(), v["event_group"].as_str()),
            (Some("budget_crossed"), Some("team"))
        );
        assert!(v["soft_budget"].is_null());
        let slack: Value = serde_json::from_slice(&alert.body(Channel::Slack)).unwrap();
        assert_eq!(slack, serde_json::json!({ "text": alert.message() }));
        assert!(
            alert.message().starts_with("Budget Crossed: team \"t1\""),
            "{}",
            alert.message()
        );
    }

    #[test]
    fn a_key_without_alias_is_named_by_its_short_form() {
        let k = key(None);
        let alert = BudgetAlert::new(Event::SoftBudgetCrossed, "key", &k.budget, &k);
        assert!(
            alert.message().contains("key sk-...wxyz"),
            "{}",
            alert.message()
        );
    }
}
