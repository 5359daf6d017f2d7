//! Rows of LiteLLM's tables, with LiteLLM's field names so the management API
//! can serialize them as LiteLLM does.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::sync::Arc;

pub use super::budget_windows::BudgetWindow;

/// `LiteLLM_VerificationToken`: a virtual key. `token` is the sha256 (hex) of
/// the key; the key itself is never stored.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct KeyRecord {
    /// sha256 hex of the plain key.
    pub token: String,
    /// Abbreviated key for display (`sk-...abcd`).
    pub key_name: Option<String>,
    /// Operator's label.
    pub key_alias: Option<String>,
    /// Spend so far, USD.
    pub spend: f64,
    /// Hard budget, USD.
    pub max_budget: Option<f64>,
    /// Alert threshold, USD.
    pub soft_budget: Option<f64>,
    /// The `LiteLLM_BudgetTable` row it links (a `/budget/new` row, whose
    /// budget and limits fill in those the key leaves unset, or the
    /// gateway's `key-<token>` row holding its soft budget).
    #[serde(default)]
    pub budget_id: Option<String>,
    /// Budget period, e.g. `30d`.
    pub budget_duration: Option<String>,
    /// When spend next resets.
    pub budget_reset_at: Option<DateTime<Utc>>,
    /// When the key stops working.
    pub expires: Option<DateTime<Utc>>,
    /// Allowed model groups; empty means all.
    pub models: Vec<String>,
    /// Model aliases: requested name → group.
    pub aliases: Map<String, Value>,
    /// Owner.
    pub user_id: Option<String>,
    /// Team.
    pub team_id: Option<String>,
    /// Concurrent requests allowed.
    pub max_parallel_requests: Option<i64>,
    /// Tokens per minute.
    pub tpm_limit: Option<i64>,
    /// Requests per minute.
    pub rpm_limit: Option<i64>,
    /// Per-model budgets, USD: `{"gpt-4o": 0.5}` or LiteLLM's
    /// `{"gpt-4o": {"budget_limit": 0.5}}`.
    pub model_max_budget: Map<String, Value>,
    /// Spend per model group, USD (LiteLLM's `model_spend`).
    pub model_spend: Map<String, Value>,
    /// Per-model rpm limits.
    pub model_rpm_limit: Map<String, Value>,
    /// Per-model tpm limits.
    pub model_tpm_limit: Map<String, Value>,
    /// Refused while true.
    pub blocked: bool,
    /// Regions the key may be served from (`eu`, `us`, ...).
    pub allowed_model_region: Option<String>,
    /// Routes the key may call (paths, `/prefix/*` patterns or LiteLLM's
    /// route group names); empty means any its role allows.
    pub allowed_routes: Vec<String>,
    /// The cache controls its requests may set (LiteLLM's
    /// `allowed_cache_controls`; empty: any).
    #[serde(default)]
    pub allowed_cache_controls: Vec<String>,
    /// Concurrent budget windows (LiteLLM's `budget_limits`).
    #[serde(default)]
    pub budget_limits: Vec<BudgetWindow>,
    /// Free-form metadata.
    pub metadata: Map<String, Value>,
    /// Creation time.
    pub created_at: Option<DateTime<Utc>>,
    /// Last change.
    pub updated_at: Option<DateTime<Utc>>,
    /// Columns of its row that LiteLLM acts on and this gateway does not
    /// (`router_settings`, `budget_fallbacks`, `config`, `permissions`),
    /// as LiteLLM wrote them, when set: its requests are refused
    /// (`auth::unapplied`). The gateway never writes them.
    #[serde(skip)]
    pub litellm_fields: Map<String, Value>,
}

/// `LiteLLM_TeamTable`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TeamRecord {
    /// Id.
    pub team_id: String,
    /// Label.
    pub team_alias: Option<String>,
    /// The organization the team belongs to.
    #[serde(default)]
    pub organization_id: Option<String>,
    /// Allowed model groups; empty means all.
    pub models: Vec<String>,
    /// Member user ids.
    pub members: Vec<String>,
    /// Spend so far, USD.
    pub spend: f64,
    /// Hard budget, USD.
    pub max_budget: Option<f64>,
    /// Budget period.
    pub budget_duration: Option<String>,
    /// Next reset.
    pub budget_reset_at: Option<DateTime<Utc>>,
    /// Tokens per minute.
    pub tpm_limit: Option<i64>,
    /// Requests per minute.
    pub rpm_limit: Option<i64>,
    /// Concurrent requests.
    pub max_parallel_requests: Option<i64>,
    /// Refused while true.
    pub blocked: bool,
    /// Region constraint for the team's keys.
    pub allowed_model_region: Option<String>,
    /// Free-form metadata.
    pub metadata: Map<String, Value>,
    /// Creation time.
    pub created_at: Option<DateTime<Utc>>,
    /// Per-model budgets, USD, in LiteLLM's forms (as a key's).
    #[serde(default)]
    pub model_max_budget: Map<String, Value>,
    /// Spend per model group, USD (LiteLLM's `model_spend`).
    #[serde(default)]
    pub model_spend: Map<String, Value>,
    /// Concurrent budget windows (LiteLLM's `budget_limits`).
    #[serde(default)]
    pub budget_limits: Vec<BudgetWindow>,
    /// The models a member added without `allowed_models` of its own is
    /// restricted to (LiteLLM's `default_team_member_models`); empty: none.
    #[serde(default)]
    pub default_team_member_models: Vec<String>,
    /// The team's model aliases (requested name → model group), kept in
    /// the `LiteLLM_ModelTable` row its `model_id` names, as LiteLLM keeps
    /// them.
    #[serde(default)]
    pub model_aliases: Map<String, Value>,
    /// Columns of its row that LiteLLM acts on and this gateway does not
    /// (`router_settings`, `team_member_permissions`), as LiteLLM wrote
    /// them, when set: its keys' requests are refused (`auth::unapplied`).
    #[serde(skip)]
    pub litellm_fields: Map<String, Value>,
}

impl KeyRecord {
    /// Whether the key sets a rate limit itself: rpm, tpm or parallel
    /// requests, a per-model rpm or tpm limit (its columns or `metadata`,
    /// as [`KeyRecord::model_limit`] reads them) or a per-tag rpm limit
    /// (`metadata.tag_rpm_limit`). A shared budget row's limits are the
    /// row's, not the key's: [`KeyFilter`](super::KeyFilter) asks about
    /// them apart.
    pub fn has_limits(&self) -> bool {
        let named = |field: &str| {
            self.metadata
                .get(field)
                .and_then(Value::as_object)
                .is_some_and(|m| !m.is_empty())
        };
        self.rpm_limit.is_some()
            || self.tpm_limit.is_some()
            || self.max_parallel_requests.is_some()
            || !self.model_rpm_limit.is_empty()
            || !self.model_tpm_limit.is_empty()
            || ["model_rpm_limit", "model_tpm_limit", "tag_rpm_limit"]
                .into_iter()
                .any(named)
    }

    /// The `/budget/*` row the key shares, if any (not the gateway's own
    /// `key-<token>` row).
    pub fn shared_budget(&self) -> Option<&str> {
        self.budget_id
            .as_deref()
            .filter(|id| !id.starts_with(OWN_BUDGET_PREFIX))
    }

    /// Fills what the key leaves unset from its shared budget row, as
    /// LiteLLM's `UserAPIKeyAuth` does with the `litellm_budget_table_*`
    /// columns: `max_budget`, `soft_budget`, `tpm_limit`, `rpm_limit`,
    /// and `model_max_budget` when the key's is empty.
    pub fn fill_from_budget(&mut self, row: &super::BudgetRecord) {
        self.max_budget = self.max_budget.or(row.max_budget);
        self.soft_budget = self.soft_budget.or(row.soft_budget);
        self.tpm_limit = self.tpm_limit.or(row.tpm_limit);
        self.rpm_limit = self.rpm_limit.or(row.rpm_limit);
        if self.model_max_budget.is_empty() {
            if let Some(m) = &row.model_max_budget {
                self.model_max_budget = m.clone();
            }
        }
    }
}

impl KeyRecord {
    /// The budget row link as the store keeps it: the key's own row
    /// (`key-<token>` when made for it) exactly while it has a soft budget
    /// and links no shared row.
    pub fn normalize_budget_link(&mut self) {
        if self.shared_budget().is_some() {
            return;
        }
        self.budget_id = match (self.soft_budget, self.budget_id.take()) {
            (None, _) => None,
            (Some(_), Some(own)) => Some(own),
            (Some(_), None) => Some(format!("{OWN_BUDGET_PREFIX}{}", self.token)),
        };
    }
}

/// The prefix of the budget row the gateway makes for a key's soft budget
/// (`key-<token>`).
pub const OWN_BUDGET_PREFIX: &str = "key-";

impl TeamRecord {
    /// The team's per-model rpm or tpm limit (`field` is `model_rpm_limit`
    /// or `model_tpm_limit`), from `metadata`, where LiteLLM keeps it.
    pub fn model_limit(&self, field: &str, model: &str) -> Option<i64> {
        self.metadata
            .get(field)
            .and_then(|m| m.get(model))
            .and_then(Value::as_i64)
    }
}

/// `LiteLLM_UserTable`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct UserRecord {
    /// Id.
    pub user_id: String,
    /// Email.
    pub user_email: Option<String>,
    /// Label.
    pub user_alias: Option<String>,
    /// Role (`internal_user`, `proxy_admin`, ...).
    pub user_role: Option<String>,
    /// Teams the user is in.
    pub teams: Vec<String>,
    /// Allowed model groups; empty means all.
    pub models: Vec<String>,
    /// Spend so far, USD.
    pub spend: f64,
    /// Hard budget, USD.
    pub max_budget: Option<f64>,
    /// Budget period.
    pub budget_duration: Option<String>,
    /// Next reset.
    pub budget_reset_at: Option<DateTime<Utc>>,
    /// Tokens per minute.
    pub tpm_limit: Option<i64>,
    /// Requests per minute.
    pub rpm_limit: Option<i64>,
    /// Concurrent requests.
    pub max_parallel_requests: Option<i64>,
    /// Free-form metadata.
    pub metadata: Map<String, Value>,
    /// Creation time.
    pub created_at: Option<DateTime<Utc>>,
    /// Per-model budgets, USD, in LiteLLM's forms (as a key's).
    #[serde(default)]
    pub model_max_budget: Map<String, Value>,
    /// Spend per model group, USD (LiteLLM's `model_spend`).
    #[serde(default)]
    pub model_spend: Map<String, Value>,
}

/// `LiteLLM_SpendLogs`: one row per upstream attempt. What many rows share
/// (the deployment's names, the key) is reference-counted and the fixed
/// words are static, so a row costs its core few allocations and its
/// copies (the in-memory log, the spool) none of those strings again.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SpendLogRow {
    /// Unique per attempt: `<call id>` for the first, `<call id>:<n>` after.
    pub request_id: Arc<str>,
    /// The client request's id (`x-litellm-call-id`), shared by its attempts.
    pub call_id: Arc<str>,
    /// 1 for the first attempt.
    pub attempt: i32,
    /// `acompletion`, `atext_completion`, `aembedding`.
    pub call_type: Cow<'static, str>,
    /// Hashed key (LiteLLM stores the hash here).
    pub api_key: Arc<str>,
    /// Cost, USD.
    pub spend: f64,
    /// Prompt + completion tokens.
    pub total_tokens: i64,
    /// Prompt tokens.
    pub prompt_tokens: i64,
    /// Completion tokens.
    pub completion_tokens: i64,
    /// Start of the attempt.
    #[serde(rename = "startTime")]
    pub start_time: DateTime<Utc>,
    /// First response byte.
    #[serde(rename = "completionStartTime")]
    pub completion_start_time: Option<DateTime<Utc>>,
    /// End of the attempt.
    #[serde(rename = "endTime")]
    pub end_time: DateTime<Utc>,
    /// Upstream model name.
    pub model: Arc<str>,
    /// Deployment id.
    pub model_id: Arc<str>,
    /// Model group.
    pub model_group: Arc<str>,
    /// Provider.
    pub custom_llm_provider: Arc<str>,
    /// Provider base URL.
    pub api_base: Arc<str>,
    /// Deployment region.
    pub region: Option<Arc<str>>,
    /// Key owner.
    pub user: Option<String>,
    /// Key team.
    pub team_id: Option<String>,
    /// `success` or `failure`.
    pub status: Cow<'static, str>,
    /// HTTP status returned for this attempt.
    pub status_code: i32,
    /// Error class (`timeout`, `rate_limit`, ...), empty on success.
    pub error_class: Option<Cow<'static, str>>,
    /// Error message, empty on success.
    pub error_message: Option<String>,
    /// The request's end user (its `user`), LiteLLM's `end_user` column.
    #[serde(default)]
    pub end_user: Option<String>,
    /// The `id` of the answer the client received (`chatcmpl-…`,
    /// `msg_…`, `resp_…`), which LiteLLM keeps as `request_id`; the
    /// gateway's own `response_id` column, so `/spend/logs?request_id=`
    /// finds the row by it.
    #[serde(default)]
    pub response_id: Option<Arc<str>>,
    /// The row also counts against the proxy-wide budget
    /// (`litellm_settings.max_budget`), kept as the spend of the user row
    /// [`PROXY_BUDGET_USER`] as LiteLLM keeps it. Not a column.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub proxy_budget: bool,
    /// Whether the response cache answered (LiteLLM's `cache_hit` column,
    /// `"True"` or `"False"` as LiteLLM writes it).
    #[serde(default, with = "python_bool")]
    pub cache_hit: bool,
    /// The response cache's key of the request (LiteLLM's `cache_key`
    /// column): `Cache OFF` without a cache, `None` when the request was
    /// not looked up.
    #[serde(default)]
    pub cache_key: Option<Arc<str>>,
    /// The request's tags (its `metadata.tags`, then its key's and team's),
    /// LiteLLM's `request_tags`; none when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_tags: Option<Arc<[String]>>,
    /// What the request's guardrails did, LiteLLM's
    /// `metadata.guardrail_information` (a list: name, provider, mode,
    /// status, times) as JSON text; none when no guardrail ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guardrail_information: Option<Arc<JsonText>>,
    /// The request body as `store_prompts_in_spend_logs` keeps it
    /// (LiteLLM's `proxy_server_request` column); none when not kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_server_request: Option<JsonText>,
    /// The answer as `store_prompts_in_spend_logs` keeps it (LiteLLM's
    /// `response` column); none when not kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<JsonText>,
}

/// JSON text stored as written (a spend row's request or answer), shown
/// as the JSON it is.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonText(pub Box<str>);

impl JsonText {
    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Serialize for JsonText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let raw: &serde_json::value::RawValue =
            serde_json::from_str(&self.0).map_err(serde::ser::Error::custom)?;
        raw.serialize(s)
    }
}

impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(|v| JsonText(v.to_string().into()))
    }
}

/// A boolean as LiteLLM writes it in text columns (`str(True)`): `"True"`
/// or `"False"`; anything else reads as false.
pub(crate) mod python_bool {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `v` as its text.
    pub fn serialize<S: Serializer>(v: &bool, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(text(*v))
    }

    /// Reads a text (or nothing) as a boolean.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        let v = Option::<String>::deserialize(d)?;
        Ok(v.is_some_and(|s| s.eq_ignore_ascii_case("true")))
    }

    /// The text of `v`.
    pub fn text(v: bool) -> &'static str {
        match v {
            true => "True",
            false => "False",
        }
    }
}

/// The user row whose spend and budget are the proxy-wide budget's
/// (`litellm_settings.max_budget`, `budget_duration`), LiteLLM's
/// `litellm_proxy_budget_name`.
pub const PROXY_BUDGET_USER: &str = "litellm-proxy-budget";

/// Filters of `/spend/logs`.
#[derive(Debug, Clone, Default)]
pub struct SpendFilter {
    /// Hashed key.
    pub api_key: Option<String>,
    /// User id.
    pub user_id: Option<String>,
    /// Team id.
    pub team_id: Option<String>,
    /// Call id (every attempt of one request), a row's own request id, or
    /// the `id` of the answer the client received.
    pub request_id: Option<String>,
    /// Rows starting at or after.
    pub start: Option<DateTime<Utc>>,
    /// Rows starting before.
    pub end: Option<DateTime<Utc>>,
    /// Most rows returned.
    pub limit: Option<i64>,
    /// Matching rows skipped first (paging).
    pub offset: i64,
    /// Rows of this model group or this model (as the row names it).
    pub model: Option<String>,
    /// Rows of this status (`success` or `failure`).
    pub status: Option<String>,
}

/// A place in the spend log read newest first: the rows strictly older
/// than the row that started at `start` with `request_id` (rows that
/// started at the same instant go by `request_id`, descending).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogCursor {
    /// The row's `startTime`.
    pub start: DateTime<Utc>,
    /// The row's `request_id`.
    pub request_id: String,
}

impl LogCursor {
    /// The cursor just past `row`.
    pub fn after(row: &SpendLogRow) -> LogCursor {
        LogCursor {
            start: row.start_time,
            request_id: row.request_id.to_string(),
        }
    }
}

/// One page of the spend log, newest first (see `Store::spend_log_page`).
#[derive(Debug, Clone, Default)]
pub struct LogPage {
    /// The matching rows, newest first, at most the filter's `limit`.
    pub rows: Vec<SpendLogRow>,
    /// Where the next page starts; `None` when no older row matches.
    pub next: Option<LogCursor>,
    /// Whether the search stopped at its bound before the page was full:
    /// rows older than `next` were not looked at (they may match).
    pub partial: bool,
}

impl KeyRecord {
    /// The key's per-model rpm or tpm limit (`field` is `model_rpm_limit` or
    /// `model_tpm_limit`), from the column or, as LiteLLM also stores it,
    /// from `metadata`.
    pub fn model_limit(&self, field: &str, model: &str) -> Option<i64> {
        let column = match field {
            "model_rpm_limit" => &self.model_rpm_limit,
            _ => &self.model_tpm_limit,
        };
        column
            .get(model)
            .or_else(|| self.metadata.get(field).and_then(|m| m.get(model)))
            .and_then(Value::as_i64)
    }
}

/// A row with LiteLLM's `model_max_budget` and `model_spend` (a key, a team,
/// a user): its per-model budgets and their windows.
pub trait ModelBudgets {
    /// Its `model_max_budget`.
    fn model_max_budget(&self) -> &Map<String, Value>;
    /// Its `model_spend`.
    fn model_spend(&self) -> &Map<String, Value>;
    /// Its `metadata`, where the windows are recorded ([`MODEL_WINDOWS`]).
    fn metadata(&self) -> &Map<String, Value>;

    /// The budget of `model` in `model_max_budget`, in either of LiteLLM's forms.
    fn model_budget(&self, model: &str) -> Option<f64> {
        let v = self.model_max_budget().get(model)?;
        usd_value(v).or_else(|| v.get("budget_limit").and_then(usd_value))
    }

    /// The `time_period` of `model`'s entry in `model_max_budget`, if it
    /// has a valid one.
    fn model_budget_period(&self, model: &str) -> Option<Duration> {
        let text = self
            .model_max_budget()
            .get(model)?
            .get("time_period")?
            .as_str()?;
        parse_duration(text).ok()
    }

    /// The per-model budget windows in force: for each `model_max_budget`
    /// entry with a `time_period`, the start of its current window as of
    /// `now` (windows are aligned to multiples of the period since the Unix
    /// epoch, so every replica computes the same ones), as
    /// [`MODEL_WINDOWS`] records it, when that differs from what is
    /// recorded.
    fn due_model_windows(&self, now: DateTime<Utc>) -> Vec<(String, String)> {
        self.model_max_budget()
            .keys()
            .filter_map(|model| {
                let period = self.model_budget_period(model)?.num_seconds();
                let secs = now.timestamp();
                let start = secs.checked_sub(secs.rem_euclid(period.max(1)))?;
                let start = DateTime::<Utc>::from_timestamp(start, 0)?
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
                let recorded = self
                    .metadata()
                    .get(MODEL_WINDOWS)
                    .and_then(|w| w.get(model))
                    .and_then(Value::as_str);
                (recorded < Some(start.as_str())).then(|| (model.clone(), start))
            })
            .collect()
    }

    /// What the row spent on `model`, USD.
    fn model_spent(&self, model: &str) -> f64 {
        self.model_spend()
            .get(model)
            .and_then(Value::as_f64)
            .unwrap_or(0.0)
    }
}

macro_rules! model_budgets {
    ($($t:ty),*) => {$(
        impl ModelBudgets for $t {
            fn model_max_budget(&self) -> &Map<String, Value> {
                &self.model_max_budget
            }
            fn model_spend(&self) -> &Map<String, Value> {
                &self.model_spend
            }
            fn metadata(&self) -> &Map<String, Value> {
                &self.metadata
            }
        }
    )*};
}
model_budgets!(KeyRecord, TeamRecord, UserRecord);

/// The `metadata` member where the start of each per-model budget window
/// (`model_max_budget.{model}.time_period`) is recorded, by model.
pub const MODEL_WINDOWS: &str = "gateway_model_budget_windows";

/// A USD amount as LiteLLM stores it: a JSON number, or a string holding
/// one (LiteLLM's documented `{"budget_limit": "0.0001"}`); `None` for
/// anything else or a non-finite value.
pub fn usd_value(v: &Value) -> Option<f64> {
    let n = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    }?;
    n.is_finite().then_some(n)
}

/// `LiteLLM_ProxyModelTable`: a deployment added through `/model/new`.
/// `litellm_params` is kept as given (with its `os.environ/` references);
/// it is validated each time it is loaded.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ModelRecord {
    /// The deployment id (`model_info.id`).
    pub model_id: String,
    /// The group clients ask for.
    pub model_name: String,
    /// How to reach the provider, LiteLLM's names.
    pub litellm_params: Map<String, Value>,
    /// Metadata (`id`, token limits, prices, anything else).
    pub model_info: Map<String, Value>,
    /// Creation time.
    pub created_at: Option<DateTime<Utc>>,
    /// Who created it.
    pub created_by: Option<String>,
    /// Last change.
    pub updated_at: Option<DateTime<Utc>>,
    /// Who changed it last.
    pub updated_by: Option<String>,
}

impl ModelRecord {
    /// The row as a `model_list` entry (`model_info.id` set to the row's id).
    pub fn entry(&self) -> Value {
        let mut info = self.model_info.clone();
        info.insert("id".into(), Value::String(self.model_id.clone()));
        serde_json::json!({
            "model_name": self.model_name,
            "litellm_params": self.litellm_params,
            "model_info": info,
        })
    }
}

/// The longest duration accepted (100 years): past any key lifetime or
/// budget period, far inside chrono's and Postgres's date ranges.
pub const MAX_DURATION: Duration = Duration::days(36_525);

/// Why a duration was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationError {
    /// Not a positive count and a unit.
    Malformed,
    /// Longer than [`MAX_DURATION`].
    TooLong,
}

/// Parses LiteLLM's budget durations: `30s`, `10m`, `1h`, `30d`, `1w`,
/// `1mo` (30 days), with checked arithmetic and at most [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or(DurationError::Malformed)?;
    let (digits, unit) = s.split_at(split);
    let seconds_per: i64 = match unit {
        "s" => 1,
        "m" | "min" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        "mo" => 30 * 86_400,
        _ => return Err(DurationError::Malformed),
    };
    if digits.is_empty() || digits.bytes().all(|b| b == b'0') {
        return Err(DurationError::Malformed);
    }
    // More digits than an i64 holds is too long, not malformed.
    let n: i64 = digits.parse().map_err(|_| DurationError::TooLong)?;
    n.checked_mul(seconds_per)
        .and_then(Duration::try_seconds)
        .filter(|d| *d <= MAX_DURATION)
        .ok_or(DurationError::TooLong)
}

/// When a budget of `duration` that starts now resets; `None` without a
/// duration, or with one that does not parse or does not fit.
pub fn next_reset(duration: Option<&str>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let d = parse_duration(duration?).ok()?;
    now.checked_add_signed(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_litellm_durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::seconds(30)));
        assert_eq!(parse_duration("1h"), Ok(Duration::hours(1)));
        assert_eq!(parse_duration("30d"), Ok(Duration::days(30)));
        assert_eq!(parse_duration("2mo"), Ok(Duration::days(60)));
        assert_eq!(parse_duration("36525d"), Ok(MAX_DURATION));
        for bad in [
            "h", "0s", "000d", "5y", "", "-1d", "+1d", "1.5h", "1 d", "d1",
        ] {
            assert_eq!(parse_duration(bad), Err(DurationError::Malformed), "{bad}");
        }
    }

    #[test]
    fn refuses_durations_that_overflow_or_exceed_the_cap() {
        for huge in [
            "100000000d",
            "36526d",
            "9223372036854775807s",
            "9223372036854775807mo",
            "99999999999999999999999999w",
        ] {
            assert_eq!(parse_duration(huge), Err(DurationError::TooLong), "{huge}");
        }
        let now = Utc::now();
        assert_eq!(next_reset(Some("100000000d"), now), None);
        assert_eq!(next_reset(Some("nope"), now), None);
        assert_eq!(next_reset(Some("1d"), now), Some(now + Duration::days(1)));
        let end_of_time = DateTime::<Utc>::MAX_UTC;
        assert_eq!(next_reset(Some("1d"), end_of_time), None);
    }
}
