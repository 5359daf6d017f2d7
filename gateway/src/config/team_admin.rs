//! `general_settings.team_admin_editable_team_fields`, as LiteLLM 1.110
//! reads it (`resolve_team_admin_editable_fields`): the team settings a
//! team `admin` member may change on `/team/update`, and the
//! `raise_max_budget` permission that lets it raise the team's
//! `max_budget`. Unset (LiteLLM's default): team admins change no team
//! setting. Names LiteLLM does not support, and its other permissions
//! (`projects`, `member_key_budgets`, `create_member_keys`: routes and
//! key edits this gateway does not delegate), are named in a start-up
//! warning and ignored, as LiteLLM ignores unsupported names.

use serde_yaml::Value;

/// The team settings LiteLLM lets a team admin be granted
/// (`SUPPORTED_TEAM_ADMIN_EDITABLE_TEAM_FIELDS`).
pub const EDITABLE: &[&str] = &[
    "tpm_limit",
    "rpm_limit",
    "max_budget",
    "soft_budget",
    "metadata",
    "team_member_budget",
    "team_member_budget_duration",
    "team_member_tpm_limit",
    "team_member_rpm_limit",
];

/// The permission to raise a team's `max_budget` (with `max_budget`).
pub const RAISE_MAX_BUDGET: &str = "raise_max_budget";

/// What team admins may change.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TeamAdminFields {
    fields: Vec<String>,
}

impl TeamAdminFields {
    /// Reads the setting from `general_settings`' other keys; names it does
    /// not act on go to `warnings`. An error when it is not a list of names.
    pub fn from_general(
        general: &std::collections::BTreeMap<String, Value>,
        warnings: &mut Vec<String>,
    ) -> Result<TeamAdminFields, String> {
        let Some(v) = general
            .get("team_admin_editable_team_fields")
            .filter(|v| !v.is_null())
        else {
            return Ok(TeamAdminFields::default());
        };
        let shape = || {
            "general_settings.team_admin_editable_team_fields must be a list of field names"
                .to_string()
        };
        let names = v
            .as_sequence()
            .ok_or_else(shape)?
            .iter()
            .map(|n| n.as_str().map(str::to_string).ok_or_else(shape))
            .collect::<Result<Vec<_>, _>>()?;
        let (kept, ignored): (Vec<String>, Vec<String>) = names
            .into_iter()
            .partition(|n| EDITABLE.contains(&n.as_str()) || n == RAISE_MAX_BUDGET);
        if !ignored.is_empty() {
            warnings.push(format!(
                "general_settings.team_admin_editable_team_fields: {} ignored (team admins may be given {} and {RAISE_MAX_BUDGET} here)",
                ignored.join(", "),
                EDITABLE.join(", ")
            ));
        }
        Ok(TeamAdminFields { fields: kept })
    }

    /// Whether team admins may change no team setting at all.
    pub fn none(&self) -> bool {
        !self.fields.iter().any(|f| EDITABLE.contains(&f.as_str()))
    }

    /// Whether team admins may change `field`.
    pub fn permits(&self, field: &str) -> bool {
        EDITABLE.contains(&field) && self.fields.iter().any(|f| f == field)
    }

    /// Whether team admins may raise the team's `max_budget` (granted
    /// only together with `max_budget`, as in LiteLLM).
    pub fn may_raise_max_budget(&self) -> bool {
        self.permits("max_budget") && self.fields.iter().any(|f| f == RAISE_MAX_BUDGET)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> (Result<TeamAdminFields, String>, Vec<String>) {
        let general: std::collections::BTreeMap<String, Value> =
            serde_yaml::from_str(yaml).unwrap();
        let mut warnings = Vec::new();
        (
            TeamAdminFields::from_general(&general, &mut warnings),
            warnings,
        )
    }

    #[test]
    fn reads_litellms_list() {
        let (fields, warnings) =
            read("team_admin_editable_team_fields: [max_budget, raise_max_budget, projects]");
        let fields = fields.unwrap();
        assert!(fields.permits("max_budget") && fields.may_raise_max_budget());
        assert!(!fields.permits("models") && !fields.none());
        assert!(warnings[0].contains("projects"), "{warnings:?}");
        let (only_raise, _) = read("team_admin_editable_team_fields: [raise_max_budget]");
        let only_raise = only_raise.unwrap();
        assert!(only_raise.none() && !only_raise.may_raise_max_budget());
        assert!(read("other: 1").0.unwrap().none());
        assert!(read("team_admin_editable_team_fields: max_budget")
            .0
            .is_err());
    }
}
