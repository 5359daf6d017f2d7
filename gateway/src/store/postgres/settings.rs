//! LiteLLM's settings rows (`LiteLLM_Config`, `LiteLLM_CacheConfig`, and
//! how many prompts `LiteLLM_PromptTable` holds), read
//! when LiteLLM made those tables (the gateway's migrations do not).

use crate::store::cipher::ParamCipher;
use crate::store::settings::{object_of, StoredSettings, CONFIG_SECTIONS};
use tokio_postgres::{Client, Error};

/// The rows of LiteLLM's settings tables, where they exist.
pub async fn read(c: &Client, cipher: &ParamCipher) -> Result<StoredSettings, Error> {
    let tables = c
        .query_one(
            r#"SELECT to_regclass('"LiteLLM_Config"') IS NOT NULL,
                      to_regclass('"LiteLLM_CacheConfig"') IS NOT NULL,
                      to_regclass('"LiteLLM_PromptTable"') IS NOT NULL"#,
            &[],
        )
        .await?;
    let mut stored = StoredSettings::default();
    if tables.try_get::<_, bool>(0)? {
        let sections: Vec<&str> = CONFIG_SECTIONS.to_vec();
        let rows = c
            .query(
                r#"SELECT param_name, param_value::text FROM "LiteLLM_Config"
                   WHERE param_name = ANY($1) ORDER BY param_name"#,
                &[&sections],
            )
            .await?;
        for row in rows {
            let text: Option<String> = row.try_get(1)?;
            let value = text.and_then(|t| serde_json::from_str(&t).ok());
            if let Some(map) = value.and_then(object_of) {
                stored.config.push((row.try_get(0)?, map));
            }
        }
    }
    if tables.try_get::<_, bool>(1)? {
        let row = c
            .query_opt(
                r#"SELECT cache_settings::text FROM "LiteLLM_CacheConfig" WHERE id = 'cache_config'"#,
                &[],
            )
            .await?;
        if let Some(row) = row {
            let text: Option<String> = row.try_get(0)?;
            stored.cache = text
                .and_then(|t| serde_json::from_str(&t).ok())
                .and_then(object_of)
                .map(|mut map| {
                    cipher.open_params(&mut map);
                    map
                });
        }
    }
    if tables.try_get::<_, bool>(2)? {
        let row = c
            .query_one(
                r#"SELECT count(*),
                    (SELECT COALESCE(array_agg(p.prompt_id), ARRAY[]::text[]) FROM
                        (SELECT DISTINCT prompt_id FROM "LiteLLM_PromptTable"
                         ORDER BY prompt_id LIMIT $1) p)
                   FROM "LiteLLM_PromptTable""#,
                &[&PROMPT_IDS_NAMED],
            )
            .await?;
        stored.prompt_rows = row.try_get(0)?;
        stored.prompt_ids = row.try_get(1)?;
    }
    Ok(stored)
}

/// How many stored prompts a start-up refusal names.
const PROMPT_IDS_NAMED: i64 = 5;
