//! Keys whose row, or whose team's row, holds a field LiteLLM acts on and
//! this gateway does not (LiteLLM wrote it: the management API refuses
//! them, `litellm_fields::KEY_REFUSED` and `TEAM_REFUSED`). Serving
//! such a key as if the field were absent would change what reaches the
//! model, so its requests are refused: a 400 naming the field and the key
//! or team, and one warning per key in the log.

use super::litellm_fields::{Refused, KEY_REFUSED, TEAM_REFUSED};
use super::KeyEntry;
use crate::error::GatewayError;
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::sync::Mutex;

/// Most keys remembered as warned about; past it the memory starts over
/// (a key may then be warned about again).
const MAX_WARNED: usize = 10_000;

/// Tokens of the keys already warned about. Taken only for a key that is
/// refused here, never on the path of a key that is served.
static WARNED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Refuses a key whose row or team row holds a field of [`KEY_REFUSED`] or
/// [`TEAM_REFUSED`] that asks for something (a column LiteLLM wrote, or
/// `metadata.<name>` where LiteLLM reads it there).
pub fn check(entry: &KeyEntry) -> Result<(), GatewayError> {
    let key = &entry.record;
    let owner = || {
        let name = key
            .key_alias
            .as_deref()
            .or(key.key_name.as_deref())
            .map_or_else(|| super::abbreviate(&key.token), str::to_string);
        format!("key {name}")
    };
    if let Some((field, why)) = first_set(KEY_REFUSED, &key.litellm_fields, &key.metadata) {
        return Err(refuse(&key.token, owner(), field, why));
    }
    let Some(team) = &entry.team else {
        return Ok(());
    };
    let record = &team.record;
    if let Some((field, why)) = first_set(TEAM_REFUSED, &record.litellm_fields, &record.metadata) {
        let owner = format!("team {} (of {})", record.team_id, owner());
        return Err(refuse(&key.token, owner, field, why));
    }
    Ok(())
}

/// The first field of `refused` set to something in `columns` (else, for
/// one LiteLLM also reads there, in `metadata`), as it is named, with what
/// LiteLLM does with it.
fn first_set(
    refused: &[Refused],
    columns: &Map<String, Value>,
    metadata: &Map<String, Value>,
) -> Option<(String, &'static str)> {
    refused.iter().find_map(|entry| {
        if columns.get(entry.name).is_some_and(|v| entry.asks(v)) {
            return Some((entry.name.to_string(), entry.why));
        }
        let inner = metadata.get(entry.name).filter(|_| entry.in_metadata);
        inner
            .is_some_and(|v| entry.asks(v))
            .then(|| (format!("metadata.{}", entry.name), entry.why))
    })
}

/// The refusal, warned about once per key.
fn refuse(token: &str, owner: String, field: String, why: &'static str) -> GatewayError {
    let first = {
        let mut warned = WARNED.lock().unwrap_or_else(|p| p.into_inner());
        let set = warned.get_or_insert_with(HashSet::new);
        if set.len() >= MAX_WARNED {
            set.clear();
        }
        set.insert(token.to_string())
    };
    if first {
        tracing::warn!(
            "{owner} has {field} set in the database, which this gateway does not apply: its \
             requests are refused until the field is cleared ({why})"
        );
    }
    GatewayError::UnappliedField { owner, field, why }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn names_the_first_field_that_asks_for_something() {
        let none = Map::new();
        let empty = map(json!({"router_settings": "{}", "permissions": {}}));
        assert_eq!(first_set(KEY_REFUSED, &empty, &none), None);
        let set = map(json!({"budget_fallbacks": {"gpt-4o": ["gpt-4o-mini"]}}));
        let (field, _) = first_set(KEY_REFUSED, &set, &none).unwrap_or_default();
        assert_eq!(field, "budget_fallbacks");
        let stored_as_text = map(json!({"router_settings": "{\"num_retries\": 3}"}));
        let (field, _) = first_set(KEY_REFUSED, &stored_as_text, &none).unwrap_or_default();
        assert_eq!(field, "router_settings");
        let caching = map(json!({"enable_prompt_caching": true}));
        let (field, _) = first_set(KEY_REFUSED, &none, &caching).unwrap_or_default();
        assert_eq!(field, "metadata.enable_prompt_caching");
        let off = map(json!({"enable_prompt_caching": false}));
        assert_eq!(first_set(KEY_REFUSED, &none, &off), None);
        // A team's baseline member permissions grant nothing more.
        let baseline = map(json!({"team_member_permissions": ["/key/info"]}));
        assert_eq!(first_set(TEAM_REFUSED, &baseline, &none), None);
        let more = map(json!({"team_member_permissions": ["/key/generate"]}));
        let (field, _) = first_set(TEAM_REFUSED, &more, &none).unwrap_or_default();
        assert_eq!(field, "team_member_permissions");
    }
}
