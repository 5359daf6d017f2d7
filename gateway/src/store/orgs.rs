//! Rows of LiteLLM's budget and organization tables (`/budget/*`,
//! `/organization/*`), with LiteLLM's column names. Both stores keep them as
//! these records; Postgres reads and writes them as JSON rows (`to_jsonb`,
//! `jsonb_populate_record`), so a column LiteLLM has and these records lack
//! is left as it is.

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// `LiteLLM_BudgetTable`: limits shared by organizations (and, in LiteLLM,
/// keys, end users and memberships).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct BudgetRecord {
    /// Id.
    pub budget_id: String,
    /// Hard budget, USD.
    pub max_budget: Option<f64>,
    /// Alert threshold, USD.
    pub soft_budget: Option<f64>,
    /// Concurrent requests.
    pub max_parallel_requests: Option<i64>,
    /// Tokens per minute.
    pub tpm_limit: Option<i64>,
    /// Requests per minute.
    pub rpm_limit: Option<i64>,
    /// Tokens per day (LiteLLM charges batch submissions to it).
    pub tpd_limit: Option<i64>,
    /// Per-model budgets, LiteLLM's `{model: {budget_limit, time_period}}`.
    pub model_max_budget: Option<Map<String, Value>>,
    /// Budget period, e.g. `30d`.
    pub budget_duration: Option<String>,
    /// Next reset.
    #[serde(deserialize_with = "utc_or_naive")]
    pub budget_reset_at: Option<DateTime<Utc>>,
    /// Per-member model scope (LiteLLM's team-member budgets).
    pub allowed_models: Option<Vec<String>>,
    /// Temporary increase of `max_budget`, USD.
    pub temp_budget_increase: Option<f64>,
    /// When the temporary increase ends.
    #[serde(deserialize_with = "utc_or_naive")]
    pub temp_budget_expiry: Option<DateTime<Utc>>,
    /// Creation time.
    #[serde(deserialize_with = "utc_or_naive")]
    pub created_at: Option<DateTime<Utc>>,
    /// Who created it.
    pub created_by: String,
    /// Last change.
    #[serde(deserialize_with = "utc_or_naive")]
    pub updated_at: Option<DateTime<Utc>>,
    /// Who changed it last.
    pub updated_by: String,
}

/// `LiteLLM_OrganizationTable`: owns a budget row, models and teams.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct OrgRecord {
    /// Id.
    pub organization_id: String,
    /// Name.
    pub organization_alias: String,
    /// Its `LiteLLM_BudgetTable` row.
    pub budget_id: String,
    /// Free-form metadata.
    pub metadata: Map<String, Value>,
    /// Model groups its teams may use; empty means all.
    pub models: Vec<String>,
    /// Spend so far, USD.
    pub spend: f64,
    /// Spend per model, USD.
    pub model_spend: Map<String, Value>,
    /// LiteLLM's object permissions (MCP servers, vector stores), kept as is.
    pub object_permission_id: Option<String>,
    /// Creation time.
    #[serde(deserialize_with = "utc_or_naive")]
    pub created_at: Option<DateTime<Utc>>,
    /// Who created it.
    pub created_by: String,
    /// Last change.
    #[serde(deserialize_with = "utc_or_naive")]
    pub updated_at: Option<DateTime<Utc>>,
    /// Who changed it last.
    pub updated_by: String,
}

/// `LiteLLM_OrganizationMembership`: a user's role in an organization.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct OrgMembership {
    /// The member.
    pub user_id: String,
    /// The organization.
    pub organization_id: String,
    /// `org_admin`, `internal_user` or `internal_user_viewer`.
    pub user_role: Option<String>,
    /// The member's spend in the organization, USD.
    pub spend: Option<f64>,
    /// The member's budget row in the organization.
    pub budget_id: Option<String>,
    /// Creation time.
    #[serde(deserialize_with = "utc_or_naive")]
    pub created_at: Option<DateTime<Utc>>,
    /// Last change.
    #[serde(deserialize_with = "utc_or_naive")]
    pub updated_at: Option<DateTime<Utc>>,
}

/// A time as RFC 3339, or without a zone (UTC), as Postgres's `to_jsonb`
/// writes a `TIMESTAMP` and Python's `isoformat` a naive datetime.
pub fn parse_time(text: &str) -> Result<DateTime<Utc>, chrono::ParseError> {
    match DateTime::parse_from_rfc3339(text) {
        Ok(t) => Ok(t.with_timezone(&Utc)),
        Err(e) => NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
            .or_else(|_| NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f"))
            .map(|t| t.and_utc())
            .map_err(|_| e),
    }
}

/// [`parse_time`] of a JSON string; `null` is none.
fn utc_or_naive<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|text| parse_time(&text).map_err(serde::de::Error::custom))
        .transpose()
}

/// A table whose rows [`Store::patch_org_row`](super::Store::patch_org_row)
/// writes: [`BudgetRecord`]s or [`OrgRecord`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrgTable {
    /// `LiteLLM_BudgetTable`, by `budget_id`.
    Budget,
    /// `LiteLLM_OrganizationTable`, by `organization_id`.
    Organization,
}

impl OrgTable {
    /// The columns a patch of this table may write.
    pub fn columns(self) -> &'static [&'static str] {
        match self {
            OrgTable::Budget => &[
                "max_budget",
                "soft_budget",
                "max_parallel_requests",
                "tpm_limit",
                "rpm_limit",
                "tpd_limit",
                "model_max_budget",
                "budget_duration",
                "budget_reset_at",
                "allowed_models",
                "temp_budget_increase",
                "temp_budget_expiry",
                "updated_by",
            ],
            OrgTable::Organization => &[
                "organization_alias",
                "models",
                "metadata",
                "object_permission_id",
                "updated_by",
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Timelike;

    #[test]
    fn reads_postgres_and_rfc3339_times() {
        let b: BudgetRecord = serde_json::from_value(serde_json::json!({
            "budget_id": "b", "created_at": "2026-01-02T03:04:05.678",
            "updated_at": "2026-01-02T03:04:05Z", "budget_reset_at": null, "extra": 1,
        }))
        .unwrap();
        assert_eq!(
            b.created_at.unwrap().to_rfc3339(),
            "2026-01-02T03:04:05.678+00:00"
        );
        assert_eq!(
            b.updated_at,
            b.created_at.map(|t| t.with_nanosecond(0).unwrap())
        );
        assert_eq!(b.budget_reset_at, None);
        let bad = serde_json::from_value::<OrgRecord>(serde_json::json!({"created_at": "soon"}));
        assert!(bad.is_err());
    }
}
