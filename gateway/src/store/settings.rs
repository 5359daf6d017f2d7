//! LiteLLM's settings kept in the database: the `LiteLLM_Config` rows
//! (`general_settings`, `litellm_settings`, ... as its admin UI saves them
//! with `store_model_in_db`), the `LiteLLM_CacheConfig` row (the cache
//! settings its UI saves) and the prompts of `LiteLLM_PromptTable`, read at start-up (and the rows again while
//! serving, for the cache: `config::stored_reload`); what applies is the
//! config's decision (`config::stored`).

use serde_json::{Map, Value};

/// The sections of `LiteLLM_Config` LiteLLM merges into its config.
pub const CONFIG_SECTIONS: &[&str] = &[
    "general_settings",
    "litellm_settings",
    "router_settings",
    "environment_variables",
];

/// LiteLLM's settings found in the database.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoredSettings {
    /// `LiteLLM_Config` rows of [`CONFIG_SECTIONS`] that hold an object, by
    /// `param_name`.
    pub config: Vec<(String, Map<String, Value>)>,
    /// `LiteLLM_CacheConfig.cache_settings` of row `cache_config`, every
    /// string opened as LiteLLM's `decrypt_db_variables` opens it.
    pub cache: Option<Map<String, Value>>,
    /// How many rows `LiteLLM_PromptTable` holds (the prompts LiteLLM
    /// loads with `store_model_in_db`).
    pub prompt_rows: i64,
    /// The first few distinct `prompt_id`s of those rows, to name them.
    pub prompt_ids: Vec<String>,
}

impl StoredSettings {
    /// The `LiteLLM_Config` row `section`, if stored.
    pub fn section(&self, section: &str) -> Option<&Map<String, Value>> {
        self.config
            .iter()
            .find(|(name, _)| name == section)
            .map(|(_, v)| v)
    }
}

/// A stored JSON column as an object: Prisma writes some as a JSON string
/// holding the object's text (`json.dumps`), others as the object.
pub fn object_of(value: Value) -> Option<Map<String, Value>> {
    match value {
        Value::Object(map) => Some(map),
        Value::String(text) => match serde_json::from_str(&text).ok()? {
            Value::Object(map) => Some(map),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_stored_either_way_are_read() {
        let want = json!({"type": "redis"}).as_object().cloned();
        assert_eq!(object_of(json!({"type": "redis"})), want);
        assert_eq!(object_of(json!("{\"type\": \"redis\"}")), want);
        assert_eq!(object_of(json!("[1]")), None);
        assert_eq!(object_of(json!(3)), None);
    }
}
