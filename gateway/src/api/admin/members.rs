//! `/team/member_add`, `/team/member_delete`, `/team/member_update`: one
//! membership at a time, each an atomic store change (concurrent calls on
//! one team never lose each other), roles kept in `members_with_roles`.
//! A member's own budget and limits (`max_budget_in_team`,
//! `budget_duration`, `tpm_limit`, `rpm_limit`, `allowed_models`,
//! `temp_budget_increase`/`temp_budget_expiry`, `model_max_budget`) go to
//! its budget row ([`super::member_budgets`]), which the request path
//! enforces. A member named by `user_email` alone is found by that email,
//! or made, as LiteLLM does.

use super::body::{bad_field, parse, Patch};
use super::db::{run, store_err, Ctx};
use super::member_budgets::{self, MemberLimits};
use super::object;
use super::teams::team_json;
use crate::error::GatewayError;
use crate::state::Worker;
use crate::store::{Change, MemberOp, MemberOutcome, TeamMember, UserRecord};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// One of LiteLLM's `Member`s.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberIn {
    user_id: Option<String>,
    user_email: Option<String>,
    #[serde(default = "default_role")]
    role: String,
}

fn default_role() -> String {
    "user".to_string()
}

/// The body of `/team/member_add` (`TeamMemberAddRequest`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberAdd {
    team_id: String,
    /// One `Member` or a list of them.
    member: Value,
    #[serde(default)]
    max_budget_in_team: Patch<f64>,
    #[serde(default)]
    budget_duration: Patch<String>,
    #[serde(default)]
    allowed_models: Patch<Vec<String>>,
}

/// The body of `/team/member_delete` and `/team/member_update`
/// (`TeamMemberDeleteRequest`, `TeamMemberUpdateRequest`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberRef {
    team_id: String,
    #[serde(default)]
    user_id: Option<String>,
    #[serde(default)]
    user_email: Option<String>,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    max_budget_in_team: Patch<f64>,
    #[serde(default)]
    tpm_limit: Patch<i64>,
    #[serde(default)]
    rpm_limit: Patch<i64>,
    #[serde(default)]
    budget_duration: Patch<String>,
    #[serde(default)]
    allowed_models: Patch<Vec<String>>,
    #[serde(default)]
    temp_budget_increase: Patch<f64>,
    #[serde(default)]
    temp_budget_expiry: Patch<String>,
    #[serde(default)]
    model_max_budget: Patch<Map<String, Value>>,
}

impl MemberRef {
    /// The per-member budget fields, taken out of the request.
    fn take_limits(&mut self) -> MemberLimits {
        MemberLimits {
            max_budget: std::mem::take(&mut self.max_budget_in_team),
            budget_duration: std::mem::take(&mut self.budget_duration),
            tpm_limit: std::mem::take(&mut self.tpm_limit),
            rpm_limit: std::mem::take(&mut self.rpm_limit),
            allowed_models: std::mem::take(&mut self.allowed_models),
            temp_budget_increase: std::mem::take(&mut self.temp_budget_increase),
            temp_budget_expiry: std::mem::take(&mut self.temp_budget_expiry),
            model_max_budget: std::mem::take(&mut self.model_max_budget),
        }
    }
}

/// Checks a role of field `at`.
fn role(at: &str, role: &str) -> Result<(), GatewayError> {
    match role {
        "admin" | "user" => Ok(()),
        _ => Err(bad_field(at, "must be 'admin' or 'user'")),
    }
}

/// The members of a `member` field, checked, with the field path of each
/// (a member named by `user_email` alone has an empty `user_id`).
fn members_of(member: Value) -> Result<(Vec<TeamMember>, bool), GatewayError> {
    let (items, many) = match member {
        Value::Array(items) => (items, true),
        one @ Value::Object(_) => (vec![one], false),
        _ => return Err(bad_field("member", "must be a member or a list of members")),
    };
    if items.is_empty() {
        return Err(bad_field("member", "name at least one member"));
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let at = if many {
            format!("member[{i}]")
        } else {
            "member".to_string()
        };
        let m: MemberIn = serde_path_to_error::deserialize(item).map_err(|e| {
            let inner = e.path().to_string();
            let field = if inner == "." {
                at.clone()
            } else {
                format!("{at}.{inner}")
            };
            bad_field(&field, e.into_inner().to_string())
        })?;
        role(&format!("{at}.role"), &m.role)?;
        let user_id = m.user_id.filter(|id| !id.is_empty());
        let user_email = m.user_email.filter(|e| !e.is_empty());
        if user_id.is_none() && user_email.is_none() {
            return Err(bad_field(
                &format!("{at}.user_id"),
                "either user_id or user_email is required",
            ));
        }
        out.push(TeamMember {
            user_id: user_id.unwrap_or_default(),
            user_email,
            role: m.role,
        });
    }
    Ok((out, many))
}

/// The user a member named by `user_email` alone is, as LiteLLM's
/// `add_new_member` finds it: the one user with that email, else a new
/// user (a uuid, role `internal_user`); several are a 400.
pub(super) async fn user_by_email(ctx: &Ctx, email: &str) -> Result<String, GatewayError> {
    let found = ctx
        .store()
        .users_with_email(email)
        .await
        .map_err(store_err)?;
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => {
            let user = UserRecord {
                user_id: uuid::Uuid::new_v4().to_string(),
                user_email: Some(email.to_string()),
                user_role: Some("internal_user".into()),
                created_at: Some(chrono::Utc::now()),
                ..UserRecord::default()
            };
            ctx.store().insert_user(&user).await.map_err(store_err)?;
            Ok(user.user_id)
        }
        _ => Err(bad_field(
            "user_email",
            "Multiple users with this email found in db. Please use 'user_id' instead.",
        )),
    }
}

/// The team with its roles, as LiteLLM shows it.
pub(super) async fn team_with_roles(ctx: &Ctx, team_id: &str) -> Result<Value, GatewayError> {
    let team = super::db::team(ctx, team_id).await?;
    let roles = ctx.store().team_members(team_id).await.map_err(store_err)?;
    Ok(team_json_with_roles(&team, &roles))
}

/// [`team_json`] with its stored `members_with_roles`, as LiteLLM answers
/// a team: the stored entries in their order (a team LiteLLM made keeps its
/// roster there alone, its `members` column empty), then the ids of
/// `members` that have no entry, as `user`.
pub fn team_json_with_roles(team: &crate::store::TeamRecord, roles: &[TeamMember]) -> Value {
    let mut out = team_json(team);
    let stored = roles
        .iter()
        .map(|m| json!({"user_id": m.user_id, "user_email": m.user_email, "role": m.role}));
    let rest = team
        .members
        .iter()
        .filter(|id| !roles.iter().any(|m| &m.user_id == *id))
        .map(|id| json!({"user_id": id, "user_email": null, "role": "user"}));
    out["members_with_roles"] = stored.chain(rest).collect::<Vec<_>>().into();
    out
}

/// `teams` as LiteLLM answers them, each with its stored
/// `members_with_roles` ([`team_json_with_roles`]), read in one query.
pub(super) async fn teams_with_roles(
    ctx: &Ctx,
    teams: &[crate::store::TeamRecord],
) -> Result<Vec<Value>, GatewayError> {
    let ids: Vec<String> = teams.iter().map(|t| t.team_id.clone()).collect();
    let mut roles = ctx
        .store()
        .members_of_teams(&ids)
        .await
        .map_err(store_err)?;
    Ok(teams
        .iter()
        .map(|team| {
            let roles = roles.remove(&team.team_id).unwrap_or_default();
            team_json_with_roles(team, &roles)
        })
        .collect())
}

/// `POST /team/member_add`: adds one member or a list; a member already in
/// the team is a 400 (for a list, only when all are). Each member added is
/// linked to a budget row as LiteLLM links it ([`member_budgets::for_new_member`]).
pub async fn add(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let req: MemberAdd = parse(body)?;
    let limits = MemberLimits {
        max_budget: req.max_budget_in_team,
        budget_duration: req.budget_duration,
        allowed_models: req.allowed_models,
        ..MemberLimits::default()
    }
    .checked()?;
    let (members, many) = members_of(req.member)?;
    let team_id = req.team_id;
    run(worker, move |ctx| async move {
        let team = super::db::team(&ctx, &team_id).await?;
        // No models of the member's own: the team's default member models,
        // as LiteLLM's `_process_team_members` seeds them.
        let mut limits = limits;
        let seeded = !matches!(limits.allowed_models, Patch::Set(_))
            && !team.default_team_member_models.is_empty();
        if seeded {
            limits.allowed_models = Patch::Set(team.default_team_member_models.clone());
        }
        let limits = limits;
        let roles = ctx
            .store()
            .team_members(&team_id)
            .await
            .map_err(store_err)?;
        let mut added = Vec::new();
        for mut m in members {
            if m.user_id.is_empty() {
                // Already in the team by that email: skipped, as LiteLLM does.
                if roles.iter().any(|r| r.user_email == m.user_email) {
                    continue;
                }
                m.user_id =
                    user_by_email(&ctx, m.user_email.as_deref().unwrap_or_default()).await?;
            }
            match ctx
                .store()
                .change_team_member(&team_id, MemberOp::Add, &m)
                .await
                .map_err(store_err)?
            {
                MemberOutcome::NoTeam => {
                    return Err(GatewayError::NotFound(format!("Team {team_id}")))
                }
                MemberOutcome::Unchanged => {}
                MemberOutcome::Changed => {
                    let budget = member_budgets::for_new_member(&ctx, &team, &limits).await?;
                    if let Some(id) = budget {
                        ctx.store()
                            .link_member_budget(&team_id, &m.user_id, Some(&id))
                            .await
                            .map_err(store_err)?;
                    }
                    added.push(m.user_id.clone());
                }
            }
        }
        let mut changes = vec![Change::Team(team_id.clone())];
        changes.extend(added.iter().cloned().map(Change::User));
        ctx.publish(&changes).await;
        if added.is_empty() {
            let message = if many {
                "all users are already in the team"
            } else {
                "the user is already in the team"
            };
            return Err(bad_field("member", message));
        }
        let mut users = Vec::new();
        let mut memberships = Vec::new();
        for id in &added {
            users.extend(ctx.store().get_user(id).await.map_err(store_err)?);
            let m = ctx
                .store()
                .membership(&team_id, id)
                .await
                .map_err(store_err)?;
            memberships.push(membership_json(&ctx, &team_id, id, m).await?);
        }
        let mut out = team_with_roles(&ctx, &team_id).await?;
        out["updated_users"] = users
            .iter()
            .map(|u| Value::Object(object(u)))
            .collect::<Vec<_>>()
            .into();
        out["updated_team_memberships"] = memberships.into();
        Ok(out)
    })
    .await
}

/// A membership as LiteLLM answers it (`LiteLLM_TeamMembership` with its
/// `litellm_budget_table`).
async fn membership_json(
    ctx: &Ctx,
    team_id: &str,
    user_id: &str,
    m: Option<crate::store::Membership>,
) -> Result<Value, GatewayError> {
    let m = m.unwrap_or_default();
    let budget = match &m.budget_id {
        Some(id) => ctx
            .store()
            .budgets(Some(std::slice::from_ref(id)))
            .await
            .map_err(store_err)?
            .first()
            .map(super::budgets::budget_json),
        None => None,
    };
    Ok(json!({
        "user_id": user_id,
        "team_id": team_id,
        "budget_id": m.budget_id,
        "spend": m.spend,
        "litellm_budget_table": budget,
    }))
}

/// The user id a `MemberRef` names (by `user_id`, else by the email stored
/// in the team's roles).
async fn resolve(ctx: &Ctx, r: &MemberRef) -> Result<String, GatewayError> {
    if let Some(id) = &r.user_id {
        return Ok(id.clone());
    }
    let Some(email) = &r.user_email else {
        return Err(bad_field(
            "user_id",
            "either user_id or user_email is required",
        ));
    };
    let roles = ctx
        .store()
        .team_members(&r.team_id)
        .await
        .map_err(store_err)?;
    roles
        .into_iter()
        .find(|m| m.user_email.as_deref() == Some(email))
        .map(|m| m.user_id)
        .ok_or_else(|| {
            bad_field(
                "user_email",
                format!("no member of the team has email '{email}'"),
            )
        })
}

/// `POST /team/member_delete`: the team without the member.
pub async fn delete(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let req: MemberRef = parse(body)?;
    if req.user_id.is_none() && req.user_email.is_none() {
        return Err(bad_field(
            "user_id",
            "either user_id or user_email is required",
        ));
    }
    run(worker, move |ctx| async move {
        let user_id = resolve(&ctx, &req).await?;
        let m = TeamMember {
            user_id: user_id.clone(),
            ..Default::default()
        };
        let team_id = req.team_id;
        match ctx
            .store()
            .change_team_member(&team_id, MemberOp::Remove, &m)
            .await
            .map_err(store_err)?
        {
            MemberOutcome::NoTeam => Err(bad_field(
                "team_id",
                format!("team '{team_id}' does not exist"),
            )),
            MemberOutcome::Unchanged => Err(bad_field(
                "user_id",
                format!("user '{user_id}' is not a member of team '{team_id}'"),
            )),
            MemberOutcome::Changed => {
                ctx.publish(&[Change::Team(team_id.clone()), Change::User(user_id)])
                    .await;
                team_with_roles(&ctx, &team_id).await
            }
        }
    })
    .await
}

/// `POST /team/member_update`: the member's role, budget and limits (LiteLLM's
/// `TeamMemberUpdateResponse`).
pub async fn update(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let mut req: MemberRef = parse(body)?;
    if let Some(r) = &req.role {
        role("role", r)?;
    }
    if req.user_id.is_none() && req.user_email.is_none() {
        return Err(bad_field(
            "user_id",
            "either user_id or user_email is required",
        ));
    }
    let limits = req.take_limits().checked()?;
    run(worker, move |ctx| async move {
        let user_id = resolve(&ctx, &req).await?;
        let team_id = req.team_id.clone();
        let roles = ctx
            .store()
            .team_members(&team_id)
            .await
            .map_err(store_err)?;
        let current = roles.iter().find(|m| m.user_id == user_id);
        let m = TeamMember {
            user_id: user_id.clone(),
            user_email: req.user_email.clone(),
            role: req
                .role
                .clone()
                .or_else(|| current.map(|c| c.role.clone()))
                .unwrap_or_else(default_role),
        };
        match ctx
            .store()
            .change_team_member(&team_id, MemberOp::Update, &m)
            .await
            .map_err(store_err)?
        {
            MemberOutcome::NoTeam => Err(GatewayError::NotFound(format!("Team {team_id}"))),
            MemberOutcome::Unchanged => Err(bad_field(
                "user_id",
                format!("user '{user_id}' is not a member of team '{team_id}'"),
            )),
            MemberOutcome::Changed => {
                let team = super::db::team(&ctx, &team_id).await?;
                member_budgets::update_member(&ctx, &team, &user_id, &limits).await?;
                ctx.publish(&[Change::Team(team_id.clone())]).await;
                let roles = ctx
                    .store()
                    .team_members(&team_id)
                    .await
                    .map_err(store_err)?;
                let email = roles
                    .iter()
                    .find(|r| r.user_id == user_id)
                    .and_then(|r| r.user_email.clone());
                Ok(json!({
                    "team_id": team_id,
                    "user_id": user_id,
                    "user_email": email,
                    "role": m.role,
                    "max_budget_in_team": given(&limits.max_budget),
                    "tpm_limit": given(&limits.tpm_limit),
                    "rpm_limit": given(&limits.rpm_limit),
                    "budget_duration": given(&limits.budget_duration),
                    "allowed_models": given(&limits.allowed_models),
                    "temp_budget_increase": given(&limits.temp_budget_increase),
                    "temp_budget_expiry": given(&limits.temp_budget_expiry),
                    "model_max_budget": given(&limits.model_max_budget),
                }))
            }
        }
    })
    .await
}

/// A field of the request as LiteLLM echoes it (`null` when not set).
fn given<T: serde::Serialize>(p: &Patch<T>) -> Value {
    match p {
        Patch::Set(v) => json!(v),
        Patch::Keep | Patch::Clear => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_one_member_or_a_list_naming_bad_ones() {
        let (one, many) = members_of(json!({"user_id": "u", "role": "admin"})).unwrap();
        assert!(!many);
        assert_eq!(one[0].role, "admin");
        let (list, many) = members_of(json!([{"user_id": "a"}, {"user_id": "b"}])).unwrap();
        assert!(many && list.len() == 2 && list[1].role == "user");
        let err = members_of(json!([{"user_id": "a"}, {"user_id": "b", "role": "owner"}]));
        assert_eq!(err.unwrap_err().param(), Some("member[1].role"));
        let err = members_of(json!({"user_id": 5}));
        assert_eq!(err.unwrap_err().param(), Some("member.user_id"));
        let (by_email, _) = members_of(json!({"user_email": "x@y"})).unwrap();
        assert!(by_email[0].user_id.is_empty() && by_email[0].user_email.as_deref() == Some("x@y"));
        let err = members_of(json!({"role": "user"}));
        assert_eq!(err.unwrap_err().param(), Some("member.user_id"));
        assert_eq!(members_of(json!("u")).unwrap_err().param(), Some("member"));
    }
}
