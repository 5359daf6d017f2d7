//! Which spend-log rows are kept (LiteLLM's `general_settings`
//! `disable_spend_logs` and `disable_error_logs`, read once at start-up),
//! and whether they keep the prompt and answer
//! (`store_prompts_in_spend_logs`, see [`super::prompts`]).
//! A row not kept still counts: the writer adds its spend to its key, user,
//! team, organization and end user as it does a kept row's, and only
//! `LiteLLM_SpendLogs` (so `/spend/logs`) goes without it. It also counts
//! in LiteLLM's daily tables, as a request, unless it is a failed attempt
//! without spend that `disable_error_logs` leaves out (LiteLLM then logs
//! nothing of the failure).

use crate::store::SpendLogRow;

/// The switches; the default keeps every row, without its prompt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpendLogs {
    /// `disable_spend_logs`: no row is kept.
    pub disable_spend_logs: bool,
    /// `disable_error_logs`: no row of a failed attempt (`status`
    /// `failure`) is kept.
    pub disable_error_logs: bool,
    /// `store_prompts_in_spend_logs` and `MAX_STRING_LENGTH_PROMPT_IN_DB`.
    pub prompts: super::prompts::PromptStorage,
}

impl SpendLogs {
    /// Reads the switches from `general_settings`: each `true` or `false`
    /// (LiteLLM acts on `true` only); anything else is the problem to
    /// report, naming the setting. `env` reads the environment (for
    /// `STORE_PROMPTS_IN_SPEND_LOGS` and `MAX_STRING_LENGTH_PROMPT_IN_DB`).
    pub fn parse(
        general: &std::collections::BTreeMap<String, serde_yaml::Value>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<SpendLogs, String> {
        let switch = |name: &str| match general.get(name) {
            None | Some(serde_yaml::Value::Null) => Ok(false),
            Some(serde_yaml::Value::Bool(on)) => Ok(*on),
            Some(_) => Err(format!("general_settings.{name} must be true or false")),
        };
        let mut prompts =
            super::prompts::PromptStorage::parse(general.get("store_prompts_in_spend_logs"), env);
        prompts.latest_turn = match general.get("spend_logs_prompt_storage") {
            None | Some(serde_yaml::Value::Null) => false,
            Some(serde_yaml::Value::String(s)) if s == "latest_turn" => true,
            Some(_) => {
                return Err(
                    "general_settings.spend_logs_prompt_storage must be latest_turn (LiteLLM's only value) or null".into(),
                )
            }
        };
        Ok(SpendLogs {
            disable_spend_logs: switch("disable_spend_logs")?,
            disable_error_logs: switch("disable_error_logs")?,
            prompts,
        })
    }

    /// Sets `litellm_settings.turn_off_message_logging` (`true` redacts
    /// messages in the rows that keep them; anything else does not, as
    /// LiteLLM reads it).
    pub fn with_message_logging(mut self, litellm: Option<&serde_yaml::Value>) -> SpendLogs {
        let off = litellm.and_then(|l| l.get("turn_off_message_logging"));
        self.prompts.redact_by_default = matches!(off, Some(serde_yaml::Value::Bool(true)));
        self
    }

    /// Whether `row` is written to the spend log.
    pub fn keeps(self, row: &SpendLogRow) -> bool {
        let failed = &*row.status == "failure";
        !(self.disable_spend_logs || (self.disable_error_logs && failed))
    }

    /// Whether `row` is written or counted anywhere: not a failed attempt
    /// without spend whose log `disable_error_logs` turns off.
    pub fn matters(self, row: &SpendLogRow) -> bool {
        row.spend != 0.0 || !(self.disable_error_logs && &*row.status == "failure")
    }
}
