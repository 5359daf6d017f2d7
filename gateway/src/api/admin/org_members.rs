//! `/organization/member_add|member_update|member_delete`: rows of
//! `LiteLLM_OrganizationMembership`, one atomic store change each, with
//! LiteLLM's roles within an organization and its answers and messages. A
//! member's `max_budget_in_organization` is kept in a budget row of its own,
//! as LiteLLM keeps it (stored, not enforced here).

use super::body::{amount, bad_field, parse};
use super::budgets::{actor, budget_json, new_record};
use super::db::{run, store_err, Ctx};
use super::object;
use super::orgs::{find, membership_json};
use crate::auth::Principal;
use crate::error::GatewayError;
use crate::state::Worker;
use crate::store::{MemberOp, MemberOutcome, OrgMembership, OrgTable};
use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// LiteLLM's roles within an organization (`ROLES_WITHIN_ORG`).
const ROLES: [&str; 3] = ["org_admin", "internal_user", "internal_user_viewer"];

/// Checks a role of field `at`, with LiteLLM's message.
fn role(at: &str, role: &str) -> Result<(), GatewayError> {
    if ROLES.contains(&role) {
        return Ok(());
    }
    Err(bad_field(
        at,
        format!("Invalid role. Must be one of: {ROLES:?}"),
    ))
}

/// One of LiteLLM's `OrgMember`s.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberIn {
    #[serde(default)]
    user_id: Option<String>,
    #[serde(default)]
    user_email: Option<String>,
    role: String,
}

/// The body of `/organization/member_add` (`OrganizationMemberAddRequest`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberAdd {
    organization_id: String,
    /// One `OrgMember` or a list of them.
    member: Value,
    /// Accepted: LiteLLM's add ignores it too.
    #[serde(default)]
    max_budget_in_organization: Option<f64>,
}

/// The members of a `member` field, checked, with the user email of each.
fn members_of(
    org_id: &str,
    member: Value,
) -> Result<Vec<(OrgMembership, Option<String>)>, GatewayError> {
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
            let message = e.into_inner().to_string();
            let field = match message.strip_prefix("missing field `") {
                Some(rest) => format!("{at}.{}", rest.split('`').next().unwrap_or_default()),
                None => field,
            };
            bad_field(&field, message)
        })?;
        role(&format!("{at}.role"), &m.role)?;
        let Some(user_id) = m.user_id.filter(|id| !id.is_empty()) else {
            return Err(bad_field(
                &format!("{at}.user_id"),
                "members are named by user_id here (user_email alone is not enough)",
            ));
        };
        let membership = OrgMembership {
            user_id,
            organization_id: org_id.to_string(),
            user_role: Some(m.role),
            ..Default::default()
        };
        out.push((membership, m.user_email));
    }
    Ok(out)
}

/// `POST /organization/member_add`: LiteLLM's `OrganizationAddMemberResponse`;
/// a user row is created for a member who has none. A member already in the
/// organization is a 400.
pub async fn add(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let req: MemberAdd = parse(body)?;
    if let Some(v) = req.max_budget_in_organization {
        amount("max_budget_in_organization", v)?;
    }
    let org_id = req.organization_id;
    let members = members_of(&org_id, req.member)?;
    run(worker, move |ctx| async move {
        let org_missing = || GatewayError::NotFound(format!("Organization {org_id}"));
        let mut users = Vec::new();
        let mut memberships = Vec::new();
        for (m, email) in &members {
            match ctx
                .store()
                .change_org_member(MemberOp::Add, m, email.as_deref())
                .await
                .map_err(store_err)?
            {
                MemberOutcome::NoTeam => return Err(org_missing()),
                MemberOutcome::Unchanged => {
                    return Err(bad_field(
                        "member",
                        format!(
                            "user '{}' is already a member of organization '{org_id}'",
                            m.user_id
                        ),
                    ))
                }
                MemberOutcome::Changed => {}
            }
            let user = ctx.store().get_user(&m.user_id).await.map_err(store_err)?;
            if let Some(joined) = membership(&ctx, &org_id, &m.user_id).await? {
                let mut shown = membership_json(&joined, user.as_ref());
                shown["user"] = Value::Null;
                memberships.push(shown);
            }
            users.extend(user.map(|u| Value::Object(object(&u))));
        }
        Ok(json!({
            "organization_id": org_id,
            "updated_users": users,
            "updated_organization_memberships": memberships,
        }))
    })
    .await
}

/// The membership of `user_id` in `org_id`, if any.
async fn membership(
    ctx: &Ctx,
    org_id: &str,
    user_id: &str,
) -> Result<Option<OrgMembership>, GatewayError> {
    let all = ctx.store().org_members(org_id).await.map_err(store_err)?;
    Ok(all.into_iter().find(|m| m.user_id == user_id))
}

/// The body of `/organization/member_update` and `/organization/member_delete`
/// (`OrganizationMemberUpdateRequest`, `OrganizationMemberDeleteRequest`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberRef {
    organization_id: String,
    #[serde(default)]
    user_id: Option<String>,
    #[serde(default)]
    user_email: Option<String>,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    max_budget_in_organization: Option<f64>,
}

impl MemberRef {
    /// Parses a body; `user_id` or `user_email` is required.
    fn read(body: &[u8]) -> Result<MemberRef, GatewayError> {
        let r: MemberRef = parse(body)?;
        if r.user_id.is_none() && r.user_email.is_none() {
            return Err(bad_field(
                "user_id",
                "Either user id or user email must be provided",
            ));
        }
        Ok(r)
    }

    /// The member's user id: `user_id`, else the member of the organization
    /// whose user has `user_email` (LiteLLM's message when not exactly one).
    async fn user_id(&self, ctx: &Ctx) -> Result<String, GatewayError> {
        if let Some(id) = &self.user_id {
            return Ok(id.clone());
        }
        let email = self.user_email.clone().unwrap_or_default();
        let mut found = Vec::new();
        for m in ctx
            .store()
            .org_members(&self.organization_id)
            .await
            .map_err(store_err)?
        {
            let user = ctx.store().get_user(&m.user_id).await.map_err(store_err)?;
            if user.and_then(|u| u.user_email).as_deref() == Some(email.as_str()) {
                found.push(m.user_id);
            }
        }
        match <[String; 1]>::try_from(found) {
            Ok([id]) => Ok(id),
            Err(_) => Err(bad_field(
                "user_email",
                format!(
                    "Unique user not found for user_email={email}. Potential duplicate OR \
                     non-existent user_email in LiteLLM_UserTable. Use 'user_id' instead."
                ),
            )),
        }
    }
}

/// `PATCH /organization/member_update`: the member's role and budget in the
/// organization; the membership with its budget row.
pub async fn update(
    worker: &Worker,
    caller: &Principal,
    body: &[u8],
) -> Result<Value, GatewayError> {
    let req = MemberRef::read(body)?;
    if let Some(r) = &req.role {
        role("role", r)?;
    }
    if let Some(v) = req.max_budget_in_organization {
        amount("max_budget_in_organization", v)?;
    }
    let who = actor(caller);
    run(worker, move |ctx| async move {
        let org_id = req.organization_id.clone();
        if find(&ctx, &org_id).await?.is_none() {
            return Err(bad_field(
                "organization_id",
                format!("Organization not found for organization_id={org_id}"),
            ));
        }
        let user_id = req.user_id(&ctx).await?;
        let not_member =
            || GatewayError::NotFound(format!("Member {user_id} of organization {org_id}"));
        let current = membership(&ctx, &org_id, &user_id)
            .await?
            .ok_or_else(not_member)?;
        let mut change = OrgMembership {
            user_id: user_id.clone(),
            organization_id: org_id.clone(),
            user_role: req.role.clone(),
            ..Default::default()
        };
        if let Some(max) = req.max_budget_in_organization {
            let fields = Map::from_iter([
                ("max_budget".to_string(), json!(max)),
                ("updated_by".to_string(), json!(who)),
            ]);
            let patched = match &current.budget_id {
                Some(id) => ctx
                    .store()
                    .patch_org_row(OrgTable::Budget, id, &fields)
                    .await
                    .map_err(store_err)?,
                None => false,
            };
            if !patched {
                let now = Utc::now();
                let id = uuid::Uuid::new_v4().to_string();
                let mut columns = fields;
                columns.remove("updated_by");
                let budget = new_record(id.clone(), columns, &who, now)?;
                ctx.store()
                    .insert_budget(&budget)
                    .await
                    .map_err(store_err)?;
                change.budget_id = Some(id);
            }
        }
        let outcome = ctx
            .store()
            .change_org_member(MemberOp::Update, &change, None)
            .await
            .map_err(store_err)?;
        if outcome != MemberOutcome::Changed {
            return Err(not_member());
        }
        let m = membership(&ctx, &org_id, &user_id)
            .await?
            .ok_or_else(not_member)?;
        let user = ctx.store().get_user(&user_id).await.map_err(store_err)?;
        let mut out = membership_json(&m, user.as_ref());
        if let Some(id) = &m.budget_id {
            let ids = [id.clone()];
            let budget = ctx
                .store()
                .budgets(Some(&ids[..]))
                .await
                .map_err(store_err)?;
            out["litellm_budget_table"] = budget.first().map_or(Value::Null, budget_json);
        }
        out["user"] = Value::Null;
        Ok(out)
    })
    .await
}

/// `DELETE /organization/member_delete`: the deleted membership.
pub async fn delete(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let req = MemberRef::read(body)?;
    run(worker, move |ctx| async move {
        let org_id = req.organization_id.clone();
        if find(&ctx, &org_id).await?.is_none() {
            return Err(GatewayError::NotFound(format!("Organization {org_id}")));
        }
        let user_id = req.user_id(&ctx).await?;
        let not_member =
            || GatewayError::NotFound(format!("Member {user_id} of organization {org_id}"));
        let m = membership(&ctx, &org_id, &user_id)
            .await?
            .ok_or_else(not_member)?;
        match ctx
            .store()
            .change_org_member(MemberOp::Remove, &m, None)
            .await
            .map_err(store_err)?
        {
            MemberOutcome::Changed => Ok(Value::Object(object(&m))),
            _ => Err(not_member()),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_one_member_or_a_list_naming_bad_ones() {
        let one = members_of("o", json!({"user_id": "u", "role": "org_admin"})).unwrap();
        assert_eq!(one[0].0.user_role.as_deref(), Some("org_admin"));
        let list = members_of(
            "o",
            json!([{"user_id": "a", "role": "internal_user", "user_email": "a@x"},
                   {"user_id": "b", "role": "internal_user_viewer"}]),
        )
        .unwrap();
        assert_eq!((list.len(), list[0].1.as_deref()), (2, Some("a@x")));
        for (member, field) in [
            (json!([{"user_id": "a", "role": "admin"}]), "member[0].role"),
            (json!({"user_id": "a"}), "member.role"),
            (
                json!({"user_id": 5, "role": "internal_user"}),
                "member.user_id",
            ),
            (
                json!({"user_email": "x@y", "role": "internal_user"}),
                "member.user_id",
            ),
            (json!("u"), "member"),
            (json!([]), "member"),
        ] {
            let err = members_of("o", member.clone()).unwrap_err();
            assert_eq!(err.param(), Some(field), "{member}");
        }
    }
}
