//! LiteLLM's delegated management rights: a team `admin` member (and an
//! `org_admin` of the team's organization) manages the team's members and
//! keys, blocks and deletes the team; an `org_admin` also changes the team's
//! settings, creates teams in its organization and manages the
//! organization's members (LiteLLM's `TeamAccess.allows` with
//! `TEAM_OR_ORG_ADMIN`, `_check_key_admin_access`, `verify_org_access`).
//! Asked only for a key that is no admin, after its own rights fell short;
//! what it grants is checked against the stored team and memberships.

use super::body::parse;
use super::db::{self, run, store_err, Ctx};
use super::query::Query;
use crate::auth::Principal;
use crate::error::GatewayError;
use crate::state::Worker;
use serde_json::{Map, Value};

/// LiteLLM's answer to a team call the caller has no right to.
const NO_TEAM_ACCESS: &str = "You do not have access to this team";
/// LiteLLM's answer to an organization call the caller has no right to.
const NO_ORG_ACCESS: &str = "You do not have access to this organization";
/// The most teams or keys one delegated call may name.
const MAX_TARGETS: usize = 100;

/// What a delegated call acts on.
#[derive(Debug, PartialEq)]
enum Target {
    /// Teams, each to be managed by the caller (members, block, delete).
    Teams(Vec<String>),
    /// A team's settings (`/team/update`): an org admin's, and a team
    /// admin's as far as `team_admin_editable_team_fields` grants; with
    /// the organization it moves the team to, if any, and the body.
    TeamSettings(String, Option<String>, Map<String, Value>),
    /// Keys (plain or hashed), each of a team the caller manages.
    Keys(Vec<String>),
    /// A new key for a team the caller manages, for `user` when given.
    NewKey { team: String, user: Option<String> },
    /// A new team in an organization; whether it asks for
    /// `require_trace_id`.
    NewTeam(String, bool),
    /// An organization's info or members.
    Org(String),
}

/// Whether `path` is one a team admin or org admin may be granted.
pub fn may_delegate(path: &str) -> bool {
    matches!(
        path,
        "/team/member_add"
            | "/team/member_delete"
            | "/team/member_update"
            | "/team/delete"
            | "/team/block"
            | "/team/unblock"
            | "/team/update"
            | "/team/info"
            | "/team/new"
            | "/key/generate"
            | "/key/update"
            | "/key/delete"
            | "/key/regenerate"
            | "/key/block"
            | "/key/unblock"
            | "/key/info"
            | "/key/list"
            | "/organization/info"
            | "/organization/update"
            | "/organization/member_add"
            | "/organization/member_update"
            | "/organization/member_delete"
    ) || (path.starts_with("/key/") && path.ends_with("/regenerate"))
}

/// The rows a delegated call at `path` acts on, read from its query and
/// body; `None` when the call names none a delegate may act on.
fn target(path: &str, q: &Query, body: &[u8]) -> Option<Target> {
    let fields: Map<String, Value> = parse(body).ok()?;
    let text = |name: &str| fields.get(name).and_then(Value::as_str).map(str::to_string);
    let list = |name: &str| -> Option<Vec<String>> {
        let items = fields.get(name)?.as_array()?;
        let names: Option<Vec<String>> = items
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect();
        names.filter(|n| !n.is_empty() && n.len() <= MAX_TARGETS)
    };
    let target = match path {
        "/team/member_add"
        | "/team/member_delete"
        | "/team/member_update"
        | "/team/block"
        | "/team/unblock" => Target::Teams(vec![text("team_id")?]),
        "/team/delete" => Target::Teams(list("team_ids")?),
        "/team/update" => {
            // Taking the team out of every organization is the proxy admin's.
            if fields
                .get("organization_id")
                .is_some_and(|v| !v.is_string())
            {
                return None;
            }
            Target::TeamSettings(text("team_id")?, text("organization_id"), fields.clone())
        }
        "/team/info" => Target::Teams(vec![q.get("team_id")?.to_string()]),
        "/team/new" => Target::NewTeam(
            text("organization_id")?,
            requires_trace_id(&fields, &Map::new()),
        ),
        "/key/generate" => Target::NewKey {
            team: text("team_id")?,
            user: text("user_id"),
        },
        "/key/update" | "/key/regenerate" | "/key/block" | "/key/unblock" => {
            Target::Keys(vec![text("key")?])
        }
        "/key/delete" => {
            if fields.get("key_aliases").is_some_and(|v| !v.is_null()) {
                return None;
            }
            Target::Keys(list("keys")?)
        }
        "/key/info" => Target::Keys(vec![q.get("key")?.to_string()]),
        "/key/list" => Target::Teams(vec![q.get("team_id")?.to_string()]),
        "/organization/info" => Target::Org(q.get("organization_id")?.to_string()),
        "/organization/update"
        | "/organization/member_add"
        | "/organization/member_update"
        | "/organization/member_delete" => Target::Org(text("organization_id")?),
        _ => {
            let key = path.strip_prefix("/key/")?.strip_suffix("/regenerate")?;
            Target::Keys(vec![text("key").unwrap_or_else(|| key.to_string())])
        }
    };
    Some(target)
}

/// Whether `caller`, a key that is no admin, may make the call at `path`
/// as a team admin or org admin: `Ok(true)` when LiteLLM grants it,
/// `Ok(false)` when no delegated right applies (the caller's own refusal
/// stands), an error when the call names rows the caller does not manage.
pub async fn authorize(
    worker: &Worker,
    caller: &Principal,
    path: &str,
    q: &Query,
    body: &[u8],
) -> Result<bool, GatewayError> {
    let Principal::Key(key) = caller else {
        return Ok(false);
    };
    let Some(user) = key.record.user_id.clone().filter(|u| !u.is_empty()) else {
        return Ok(false);
    };
    let Some(target) = target(path, q, body) else {
        return Ok(false);
    };
    let route = path.to_string();
    let granted = worker.shared.team_admin.clone();
    run(worker, move |ctx| async move {
        decide(&ctx, (&user, &granted), &route, target).await
    })
    .await
}

/// [`authorize`] on the control plane; `granted` is what team admins may
/// change of their team's settings.
async fn decide(
    ctx: &Ctx,
    (user, granted): (&str, &crate::config::TeamAdminFields),
    route: &str,
    target: Target,
) -> Result<bool, GatewayError> {
    let team_denied = || GatewayError::TeamAccessDenied(NO_TEAM_ACCESS.into());
    let org_denied = || GatewayError::TeamAccessDenied(NO_ORG_ACCESS.into());
    match target {
        Target::Teams(teams) => {
            for team in teams {
                if manages_team(ctx, user, &team).await? == Role::None {
                    return Err(team_denied());
                }
            }
            Ok(true)
        }
        Target::TeamSettings(team, moved_to, body) => match manages_team(ctx, user, &team).await? {
            // Moving the team needs org admin rights at its destination too.
            Role::OrgAdmin => {
                let row = db::team(ctx, &team).await?;
                trace_id_unchanged(&body, &row.metadata)?;
                match moved_to {
                    Some(org) if !org_admin(ctx, user, &org).await? => Err(org_denied()),
                    _ => Ok(true),
                }
            }
            Role::TeamAdmin => {
                let row = db::team(ctx, &team).await?;
                let defaults = match row
                    .metadata
                    .get(super::teams::MEMBER_BUDGET_ID)
                    .and_then(Value::as_str)
                {
                    Some(id) => {
                        let ids = [id.to_string()];
                        let rows = ctx.store().budgets(Some(&ids)).await.map_err(store_err)?;
                        rows.into_iter().next()
                    }
                    None => None,
                };
                super::team_admin_edit::check(granted, &body, (&row, defaults.as_ref()))?;
                Ok(true)
            }
            Role::None => Err(team_denied()),
        },
        Target::NewKey { team, user: owner } => {
            if manages_team(ctx, user, &team).await? == Role::None {
                return Err(team_denied());
            }
            if let Some(owner) = owner {
                let members = ctx.store().team_members(&team).await.map_err(store_err)?;
                if !members.iter().any(|m| m.user_id == owner) {
                    return Err(super::body::bad_field(
                        "user_id",
                        format!("User={owner} not assigned to team={team}"),
                    ));
                }
            }
            Ok(true)
        }
        Target::Keys(keys) => {
            let refused = || {
                GatewayError::TeamAccessDenied(format!(
                    "Only proxy admins, team admins, or org admins can call {route}. \
                     user_id={user}"
                ))
            };
            for given in keys {
                let row = ctx
                    .store()
                    .get_key(&db::token_of(&given))
                    .await
                    .map_err(store_err)?
                    .ok_or_else(|| GatewayError::NotFound(format!("Key {}", db::shown(&given))))?;
                let Some(team) = row.team_id.as_deref() else {
                    return Err(refused());
                };
                if manages_team(ctx, user, team).await? == Role::None {
                    return Err(refused());
                }
            }
            Ok(true)
        }
        Target::NewTeam(org, wants_trace_id) => {
            if !org_admin(ctx, user, &org).await? {
                Err(org_denied())
            } else if wants_trace_id {
                Err(GatewayError::TeamAccessDenied(TRACE_ID_ADMIN_ONLY.into()))
            } else {
                Ok(true)
            }
        }
        Target::Org(org) => {
            if org_admin(ctx, user, &org).await? {
                Ok(true)
            } else {
                Err(org_denied())
            }
        }
    }
}

/// LiteLLM's refusal of `require_trace_id` set or cleared by anyone but a
/// proxy admin.
const TRACE_ID_ADMIN_ONLY: &str = "Only proxy admins can set `require_trace_id` on a team.";

/// The `require_trace_id` a team request asks for (its field, else its
/// `metadata`'s when it sends `metadata`, else the stored one), as
/// LiteLLM's `check_require_trace_id_caller_permission` reads it.
fn requires_trace_id(body: &Map<String, Value>, stored: &Map<String, Value>) -> bool {
    let on = |m: &Map<String, Value>| m.get("require_trace_id") == Some(&Value::Bool(true));
    match (body.get("require_trace_id"), body.get("metadata")) {
        (Some(Value::Bool(b)), _) => *b,
        (_, Some(Value::Object(m))) => on(m),
        (_, Some(_)) => false,
        _ => on(stored),
    }
}

/// Refuses a delegated team change that sets or clears `require_trace_id`.
fn trace_id_unchanged(
    body: &Map<String, Value>,
    stored: &Map<String, Value>,
) -> Result<(), GatewayError> {
    let before = stored.get("require_trace_id") == Some(&Value::Bool(true));
    if requires_trace_id(body, stored) == before {
        Ok(())
    } else {
        Err(GatewayError::TeamAccessDenied(TRACE_ID_ADMIN_ONLY.into()))
    }
}

/// How the caller manages a team.
#[derive(Debug, PartialEq, Eq)]
enum Role {
    /// Not at all.
    None,
    /// As an `admin` member.
    TeamAdmin,
    /// As an `org_admin` of the team's organization (outranks team admin).
    OrgAdmin,
}

/// How `user` manages `team`; a team that does not exist is managed by
/// nobody (no way to probe team ids).
async fn manages_team(ctx: &Ctx, user: &str, team: &str) -> Result<Role, GatewayError> {
    let Some(row) = ctx.store().get_team(team).await.map_err(store_err)? else {
        return Ok(Role::None);
    };
    if let Some(org) = row.organization_id.as_deref() {
        if org_admin(ctx, user, org).await? {
            return Ok(Role::OrgAdmin);
        }
    }
    let members = ctx.store().team_members(team).await.map_err(store_err)?;
    let admin = members
        .iter()
        .any(|m| m.user_id == user && m.role == "admin");
    Ok(if admin { Role::TeamAdmin } else { Role::None })
}

/// Whether `user` is an `org_admin` of `org`.
async fn org_admin(ctx: &Ctx, user: &str, org: &str) -> Result<bool, GatewayError> {
    let members = ctx.store().org_members(org).await.map_err(store_err)?;
    Ok(members
        .iter()
        .any(|m| m.user_id == user && m.user_role.as_deref() == Some("org_admin")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(path: &str, query: &str, body: &str) -> Option<Target> {
        target(path, &Query::parse(query).unwrap(), body.as_bytes())
    }

    #[test]
    fn reads_what_each_call_acts_on() {
        assert_eq!(
            t("/team/member_add", "", r#"{"team_id":"t"}"#),
            Some(Target::Teams(vec!["t".into()]))
        );
        assert_eq!(
            t("/team/delete", "", r#"{"team_ids":["a","b"]}"#),
            Some(Target::Teams(vec!["a".into(), "b".into()]))
        );
        assert_eq!(
            t("/key/sk-1/regenerate", "", "{}"),
            Some(Target::Keys(vec!["sk-1".into()]))
        );
        assert_eq!(
            t("/key/generate", "", r#"{"team_id":"t","user_id":"u"}"#),
            Some(Target::NewKey {
                team: "t".into(),
                user: Some("u".into())
            })
        );
        assert_eq!(t("/key/generate", "", r#"{"user_id":"u"}"#), None);
        assert_eq!(t("/key/delete", "", r#"{"key_aliases":["a"]}"#), None);
        assert_eq!(
            t("/organization/info", "organization_id=o", ""),
            Some(Target::Org("o".into()))
        );
        assert_eq!(t("/team/update", "", "not json"), None);
        assert_eq!(
            t(
                "/team/update",
                "",
                r#"{"team_id":"t","organization_id":null}"#
            ),
            None
        );
        assert!(may_delegate("/key/sk-1/regenerate") && !may_delegate("/user/new"));
    }
}
