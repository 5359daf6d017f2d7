//! What a page of teams (`/v2/team/list`, `/team/list`) or organizations
//! (`/organization/list`) selects and in which order: one definition the
//! in-memory store applies directly and the Postgres store turns into SQL,
//! so both answer alike.

use super::{OrgRecord, TeamRecord, UserRecord};

/// Which teams a page shows: each field given must match.
#[derive(Debug, Clone, Copy, Default)]
pub struct TeamFilter<'a> {
    /// The team's id, exactly.
    pub team_id: Option<&'a str>,
    /// Part of the team's alias, ignoring case.
    pub team_alias: Option<&'a str>,
    /// LiteLLM's combined search: the id exactly, or part of the alias
    /// ignoring case.
    pub search: Option<&'a str>,
    /// The team's organization.
    pub organization_id: Option<&'a str>,
    /// A member of the team (its `members`).
    pub user_id: Option<&'a str>,
    /// Only teams with a rate limit: rpm, tpm, parallel requests, or per
    /// model (`metadata.model_rpm_limit`, `metadata.model_tpm_limit`).
    pub has_limits: bool,
}

impl TeamFilter<'_> {
    /// Whether `team` matches.
    pub fn matches(&self, team: &TeamRecord) -> bool {
        let alias = team.team_alias.as_deref().unwrap_or_default();
        self.team_id.is_none_or(|id| team.team_id == id)
            && self.team_alias.is_none_or(|a| contains_folded(alias, a))
            && self
                .search
                .is_none_or(|s| team.team_id == s || contains_folded(alias, s))
            && self
                .organization_id
                .is_none_or(|o| team.organization_id.as_deref() == Some(o))
            && self
                .user_id
                .is_none_or(|u| team.members.iter().any(|m| m == u))
            && (!self.has_limits || limited(team))
    }
}

/// Whether `team` has a rate limit of its own ([`TeamFilter::has_limits`]).
fn limited(team: &TeamRecord) -> bool {
    let per_model = |field: &str| {
        team.metadata
            .get(field)
            .and_then(|v| v.as_object())
            .is_some_and(|m| !m.is_empty())
    };
    team.rpm_limit.is_some()
        || team.tpm_limit.is_some()
        || team.max_parallel_requests.is_some()
        || per_model("model_rpm_limit")
        || per_model("model_tpm_limit")
}

/// The order of a page of teams (LiteLLM's `sort_by` values this gateway
/// serves); ties go by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TeamOrder {
    /// By id, byte order.
    TeamId,
    /// By alias (teams without one last).
    TeamAlias,
    /// By creation time (LiteLLM's default, newest first).
    CreatedAt,
    /// By spend.
    Spend,
}

impl TeamOrder {
    /// The order of LiteLLM's `sort_by` value, if served.
    pub fn parse(sort_by: &str) -> Option<TeamOrder> {
        Some(match sort_by {
            "team_id" => TeamOrder::TeamId,
            "team_alias" => TeamOrder::TeamAlias,
            "created_at" => TeamOrder::CreatedAt,
            "spend" => TeamOrder::Spend,
            _ => return None,
        })
    }

    /// Sorts `teams` in this order (`descending` reverses it, ties by id
    /// ascending), as the SQL of the Postgres store does.
    pub fn sort(self, teams: &mut [TeamRecord], descending: bool) {
        teams.sort_by(|a, b| {
            let ord = match self {
                TeamOrder::TeamId => a.team_id.cmp(&b.team_id),
                TeamOrder::TeamAlias => nulls_last(&a.team_alias, &b.team_alias, descending),
                TeamOrder::CreatedAt => nulls_last(&a.created_at, &b.created_at, descending),
                TeamOrder::Spend => a.spend.total_cmp(&b.spend),
            };
            let ord = if descending { ord.reverse() } else { ord };
            ord.then_with(|| a.team_id.cmp(&b.team_id))
        });
    }
}

/// `a` against `b` with `None` sorting last whichever the direction (the
/// caller reverses for descending, so `None` is made greatest or least).
fn nulls_last<T: Ord>(a: &Option<T>, b: &Option<T>, descending: bool) -> std::cmp::Ordering {
    use std::cmp::Ordering::{Greater, Less};
    match (a, b) {
        (Some(a), Some(b)) => a.cmp(b),
        (None, None) => std::cmp::Ordering::Equal,
        (None, Some(_)) => {
            if descending {
                Less
            } else {
                Greater
            }
        }
        (Some(_), None) => {
            if descending {
                Greater
            } else {
                Less
            }
        }
    }
}

/// Which organizations a page shows (LiteLLM's `/organization/list`
/// filters): each field given must match.
#[derive(Debug, Clone, Copy, Default)]
pub struct OrgFilter<'a> {
    /// The organization's id, exactly.
    pub org_id: Option<&'a str>,
    /// Part of its alias, ignoring case.
    pub org_alias: Option<&'a str>,
}

impl OrgFilter<'_> {
    /// Whether `org` matches.
    pub fn matches(&self, org: &OrgRecord) -> bool {
        self.org_id.is_none_or(|id| org.organization_id == id)
            && self
                .org_alias
                .is_none_or(|a| contains_folded(&org.organization_alias, a))
    }
}

/// Which users a page of `/user/list` shows (LiteLLM's filters): each
/// field given must match.
#[derive(Debug, Clone, Copy, Default)]
pub struct UserFilter<'a> {
    /// LiteLLM's combined search: part of the id or of the email,
    /// ignoring case.
    pub search: Option<&'a str>,
    /// Part of the email, ignoring case.
    pub user_email: Option<&'a str>,
    /// The role, exactly.
    pub role: Option<&'a str>,
    /// A team the user is in.
    pub team: Option<&'a str>,
}

impl UserFilter<'_> {
    /// Whether `user` matches.
    pub fn matches(&self, user: &UserRecord) -> bool {
        let email = user.user_email.as_deref().unwrap_or_default();
        self.search
            .is_none_or(|s| contains_folded(&user.user_id, s) || contains_folded(email, s))
            && self.user_email.is_none_or(|e| contains_folded(email, e))
            && self
                .role
                .is_none_or(|r| user.user_role.as_deref() == Some(r))
            && self.team.is_none_or(|t| user.teams.iter().any(|x| x == t))
    }
}

/// Whether `text` contains `part`, ignoring case (as Postgres's
/// `strpos(lower(..), lower(..))`).
fn contains_folded(text: &str, part: &str) -> bool {
    text.to_lowercase().contains(&part.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn team(id: &str, alias: Option<&str>, spend: f64) -> TeamRecord {
        TeamRecord {
            team_id: id.into(),
            team_alias: alias.map(Into::into),
            spend,
            ..TeamRecord::default()
        }
    }

    #[test]
    fn filters_by_id_alias_search_org_and_member() {
        let mut t = team("t-1", Some("Search Team"), 0.0);
        t.organization_id = Some("o".into());
        t.members = vec!["u".into()];
        let f = |f: TeamFilter| f.matches(&t);
        assert!(f(TeamFilter::default()));
        assert!(f(TeamFilter {
            team_alias: Some("ch te"),
            ..Default::default()
        }));
        assert!(!f(TeamFilter {
            team_alias: Some("t-1"),
            ..Default::default()
        }));
        assert!(f(TeamFilter {
            search: Some("t-1"),
            ..Default::default()
        }));
        assert!(!f(TeamFilter {
            search: Some("t-"),
            ..Default::default()
        }));
        assert!(f(TeamFilter {
            search: Some("SEARCH"),
            ..Default::default()
        }));
        assert!(f(TeamFilter {
            organization_id: Some("o"),
            user_id: Some("u"),
            ..Default::default()
        }));
        assert!(!f(TeamFilter {
            user_id: Some("v"),
            ..Default::default()
        }));
        assert!(!f(TeamFilter {
            team_id: Some("t-2"),
            ..Default::default()
        }));
        assert!(!f(TeamFilter {
            has_limits: true,
            ..Default::default()
        }));
        t.metadata
            .insert("model_rpm_limit".into(), serde_json::json!({"m": 1}));
        assert!(TeamFilter {
            has_limits: true,
            ..Default::default()
        }
        .matches(&t));
        t.metadata.clear();
        t.max_parallel_requests = Some(2);
        assert!(TeamFilter {
            has_limits: true,
            ..Default::default()
        }
        .matches(&t));
    }

    #[test]
    fn filters_users_by_search_email_role_and_team() {
        let user = UserRecord {
            user_id: "ann-1".into(),
            user_email: Some("Ann@Example.com".into()),
            user_role: Some("internal_user".into()),
            teams: vec!["t".into()],
            ..UserRecord::default()
        };
        let f = |f: UserFilter| f.matches(&user);
        assert!(f(UserFilter {
            search: Some("ANN-"),
            ..Default::default()
        }));
        assert!(f(UserFilter {
            search: Some("example"),
            ..Default::default()
        }));
        assert!(!f(UserFilter {
            user_email: Some("ann-1"),
            ..Default::default()
        }));
        assert!(f(UserFilter {
            role: Some("internal_user"),
            team: Some("t"),
            ..Default::default()
        }));
        assert!(!f(UserFilter {
            role: Some("proxy_admin"),
            ..Default::default()
        }));
        assert!(!f(UserFilter {
            team: Some("u"),
            ..Default::default()
        }));
    }

    #[test]
    fn orders_with_ties_by_id_and_missing_aliases_last() {
        let mut teams = vec![
            team("c", None, 1.0),
            team("b", Some("x"), 2.0),
            team("a", Some("y"), 1.0),
        ];
        TeamOrder::Spend.sort(&mut teams, true);
        let ids = |t: &[TeamRecord]| t.iter().map(|t| t.team_id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&teams), ["b", "a", "c"]);
        TeamOrder::TeamAlias.sort(&mut teams, false);
        assert_eq!(ids(&teams), ["b", "a", "c"]);
        TeamOrder::TeamAlias.sort(&mut teams, true);
        assert_eq!(ids(&teams), ["a", "b", "c"]);
        assert_eq!(TeamOrder::parse("max_budget"), None);
    }
}
