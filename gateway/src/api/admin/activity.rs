//! The answer of `/*/daily/activity` in LiteLLM's shape
//! (`SpendAnalyticsPaginatedResponse`): one result per day, newest first,
//! with its metrics and their breakdown by model, model group, provider,
//! endpoint, key and entity, and the page's totals in `metadata`. Pure.

use crate::store::{DailyCounts, DailyPage, DailyRow};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};

/// What the answer says about a key: LiteLLM's `KeyMetadata`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyInfo {
    /// `key_alias`.
    pub alias: Option<String>,
    /// `team_id`.
    pub team_id: Option<String>,
    /// `user_id`.
    pub user_id: Option<String>,
}

/// Metadata the answer carries: per key (`None` for a key not found) and
/// per entity (e.g. a team's `team_alias`).
#[derive(Debug, Default)]
pub struct Labels {
    /// By hashed key.
    pub keys: HashMap<String, Option<KeyInfo>>,
    /// By entity id.
    pub entities: HashMap<String, Map<String, Value>>,
}

/// LiteLLM's `SpendMetrics` of `c`.
fn metrics(c: &DailyCounts) -> Value {
    json!({
        "spend": c.spend,
        "flat_cost": 0.0,
        "ptu_hours": 0.0,
        "prompt_tokens": c.prompt_tokens,
        "completion_tokens": c.completion_tokens,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "compression_saved_tokens": 0,
        "compression_savings_spend": 0.0,
        "prompt_caching_savings_spend": 0.0,
        "gateway_injected_caching_savings_spend": 0.0,
        "autorouter_savings_spend": 0.0,
        "total_tokens": c.prompt_tokens.saturating_add(c.completion_tokens),
        "successful_requests": c.successful_requests,
        "failed_requests": c.failed_requests,
        "api_requests": c.api_requests,
        "total_response_time_ms": c.total_response_time_ms,
        "timed_requests": c.timed_requests,
    })
}

/// LiteLLM's `KeyMetadata` of a key.
fn key_metadata(labels: &Labels, api_key: &str) -> Value {
    match labels.keys.get(api_key) {
        Some(Some(k)) => json!({
            "key_alias": k.alias, "team_id": k.team_id, "user_id": k.user_id,
            "user_email": null, "key_exists": true,
        }),
        Some(None) => json!({
            "key_alias": null, "team_id": null, "user_id": null,
            "user_email": null, "key_exists": false,
        }),
        None => json!({
            "key_alias": null, "team_id": null, "user_id": null,
            "user_email": null, "key_exists": null,
        }),
    }
}

/// A breakdown bucket: its counts and, per key, theirs.
#[derive(Default)]
struct Bucket {
    counts: DailyCounts,
    keys: BTreeMap<String, DailyCounts>,
}

impl Bucket {
    fn add(&mut self, row: &DailyRow) {
        self.counts.add(&row.counts);
        self.keys
            .entry(row.key.api_key.clone())
            .or_default()
            .add(&row.counts);
    }

    /// LiteLLM's `MetricWithMetadata`.
    fn to_json(&self, labels: &Labels, metadata: Map<String, Value>) -> Value {
        let keys: Map<String, Value> = self
            .keys
            .iter()
            .map(|(k, c)| {
                let entry = json!({"metrics": metrics(c), "metadata": key_metadata(labels, k)});
                (k.clone(), entry)
            })
            .collect();
        json!({"metrics": metrics(&self.counts), "metadata": metadata, "api_key_breakdown": keys})
    }
}

/// One day's figures.
#[derive(Default)]
struct Day {
    counts: DailyCounts,
    models: BTreeMap<String, Bucket>,
    model_groups: BTreeMap<String, Bucket>,
    providers: BTreeMap<String, Bucket>,
    endpoints: BTreeMap<String, Bucket>,
    api_keys: BTreeMap<String, DailyCounts>,
    entities: BTreeMap<String, Bucket>,
}

impl Day {
    fn add(&mut self, row: &DailyRow) {
        let k = &row.key;
        self.counts.add(&row.counts);
        if !k.model.is_empty() {
            self.models.entry(k.model.clone()).or_default().add(row);
        }
        let group = if row.model_group.is_empty() {
            &k.model
        } else {
            &row.model_group
        };
        if !group.is_empty() {
            self.model_groups.entry(group.clone()).or_default().add(row);
        }
        let provider = match k.custom_llm_provider.as_str() {
            "" => "unknown",
            p => p,
        };
        self.providers
            .entry(provider.to_string())
            .or_default()
            .add(row);
        if !k.endpoint.is_empty() {
            self.endpoints
                .entry(k.endpoint.clone())
                .or_default()
                .add(row);
        }
        self.api_keys
            .entry(k.api_key.clone())
            .or_default()
            .add(&row.counts);
        let entity = match k.entity.as_str() {
            "" => "Unassigned",
            e => e,
        };
        self.entities
            .entry(entity.to_string())
            .or_default()
            .add(row);
    }

    fn to_json(&self, date: &str, labels: &Labels) -> Value {
        let buckets = |map: &BTreeMap<String, Bucket>,
                       meta: &dyn Fn(&str) -> Map<String, Value>| {
            map.iter()
                .map(|(name, b)| (name.clone(), b.to_json(labels, meta(name))))
                .collect::<Map<String, Value>>()
        };
        let none = |_: &str| Map::new();
        let entity = |e: &str| labels.entities.get(e).cloned().unwrap_or_default();
        let api_keys: Map<String, Value> = self
            .api_keys
            .iter()
            .map(|(k, c)| {
                let entry = json!({"metrics": metrics(c), "metadata": key_metadata(labels, k)});
                (k.clone(), entry)
            })
            .collect();
        json!({
            "date": date,
            "metrics": metrics(&self.counts),
            "breakdown": {
                "mcp_servers": {},
                "models": buckets(&self.models, &none),
                "model_groups": buckets(&self.model_groups, &none),
                "providers": buckets(&self.providers, &none),
                "endpoints": buckets(&self.endpoints, &none),
                "api_keys": api_keys,
                "entities": buckets(&self.entities, &entity),
                "guardrails": {},
            },
        })
    }
}

/// The answer for one page of rows (`page` from 1, `page_size` rows).
pub fn answer(page: &DailyPage, (number, size): (i64, i64), labels: &Labels) -> Value {
    let mut days: BTreeMap<&str, Day> = BTreeMap::new();
    let mut total = DailyCounts::default();
    for row in &page.rows {
        days.entry(&row.key.date).or_default().add(row);
        total.add(&row.counts);
    }
    let results: Vec<Value> = days
        .iter()
        .rev()
        .map(|(date, day)| day.to_json(date, labels))
        .collect();
    let total_pages = if size > 0 {
        page.total.div_euclid(size) + i64::from(page.total.rem_euclid(size) != 0)
    } else {
        0
    };
    json!({
        "results": results,
        "metadata": {
            "total_spend": total.spend,
            "total_flat_cost": 0.0,
            "total_ptu_hours": 0.0,
            "total_prompt_tokens": total.prompt_tokens,
            "total_completion_tokens": total.completion_tokens,
            "total_tokens": total.prompt_tokens.saturating_add(total.completion_tokens),
            "total_api_requests": total.api_requests,
            "total_successful_requests": total.successful_requests,
            "total_failed_requests": total.failed_requests,
            "total_cache_read_input_tokens": 0,
            "total_cache_creation_input_tokens": 0,
            "total_compression_saved_tokens": 0,
            "total_compression_savings_spend": 0.0,
            "total_prompt_caching_savings_spend": 0.0,
            "total_gateway_injected_caching_savings_spend": 0.0,
            "total_autorouter_savings_spend": 0.0,
            "total_response_time_ms": total.total_response_time_ms,
            "total_timed_requests": total.timed_requests,
            "page": number,
            "total_pages": total_pages,
            "has_more": number.saturating_mul(size) < page.total,
            "api_key_limit": null,
            "total_api_keys": null,
            "entity_total_api_keys": null,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::DailyKey;

    fn row(date: &str, entity: &str, key: &str, model: &str, spend: f64) -> DailyRow {
        DailyRow {
            key: DailyKey {
                entity: entity.into(),
                date: date.into(),
                api_key: key.into(),
                model: model.into(),
                custom_llm_provider: "openai".into(),
                endpoint: "/chat/completions".into(),
            },
            model_group: "group".into(),
            counts: DailyCounts {
                spend,
                prompt_tokens: 3,
                completion_tokens: 4,
                api_requests: 1,
                successful_requests: 1,
                ..Default::default()
            },
        }
    }

    /// Days newest first, each with its sums and breakdowns; the key that
    /// exists carries its alias, the missing one `key_exists: false`; the
    /// user `''` is `Unassigned`; totals and paging in `metadata`.
    #[test]
    fn answers_in_litellms_shape() {
        let page = DailyPage {
            total: 5,
            rows: vec![
                row("2026-01-02", "u1", "k1", "gpt-4o", 1.0),
                row("2026-01-02", "", "k2", "gpt-4o", 0.5),
                row("2026-01-01", "u1", "k1", "mini", 0.25),
            ],
        };
        let mut labels = Labels::default();
        labels.keys.insert(
            "k1".into(),
            Some(KeyInfo {
                alias: Some("prod".into()),
                ..Default::default()
            }),
        );
        labels.keys.insert("k2".into(), None);
        let mut meta = Map::new();
        meta.insert("user_email".into(), json!("a@b.c"));
        labels.entities.insert("u1".into(), meta);
        let v = answer(&page, (1, 3), &labels);
        let results = v["results"].as_array().unwrap();
        assert_eq!(results.len(), 2);
        let day = &results[0];
        assert_eq!(day["date"], "2026-01-02");
        assert_eq!(day["metrics"]["spend"], 1.5);
        assert_eq!(day["metrics"]["total_tokens"], 14);
        assert_eq!(day["metrics"]["api_requests"], 2);
        let b = &day["breakdown"];
        assert_eq!(b["models"]["gpt-4o"]["metrics"]["spend"], 1.5);
        assert_eq!(
            b["models"]["gpt-4o"]["api_key_breakdown"]["k2"]["metrics"]["spend"],
            0.5
        );
        assert_eq!(b["model_groups"]["group"]["metrics"]["api_requests"], 2);
        assert_eq!(b["providers"]["openai"]["metrics"]["spend"], 1.5);
        assert_eq!(b["endpoints"]["/chat/completions"]["metrics"]["spend"], 1.5);
        assert_eq!(b["api_keys"]["k1"]["metadata"]["key_alias"], "prod");
        assert_eq!(b["api_keys"]["k1"]["metadata"]["key_exists"], true);
        assert_eq!(b["api_keys"]["k2"]["metadata"]["key_exists"], false);
        assert_eq!(b["entities"]["u1"]["metadata"]["user_email"], "a@b.c");
        assert_eq!(b["entities"]["Unassigned"]["metrics"]["spend"], 0.5);
        assert_eq!(results[1]["date"], "2026-01-01");
        let m = &v["metadata"];
        assert_eq!(m["total_spend"], 1.75);
        assert_eq!(m["total_api_requests"], 3);
        assert_eq!(
            (m["page"].clone(), m["total_pages"].clone()),
            (json!(1), json!(2))
        );
        assert_eq!(m["has_more"], true);
        let last = answer(&page, (2, 3), &labels);
        assert_eq!(last["metadata"]["has_more"], false);
    }
}
