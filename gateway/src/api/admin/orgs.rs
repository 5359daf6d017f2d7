//! `/organization/new|update|info|list|delete`: rows of
//! `LiteLLM_OrganizationTable`, each owning a `LiteLLM_BudgetTable` row
//! (made from the request's budget fields when no `budget_id` is given),
//! models and teams. Bodies, answers and error messages are LiteLLM's
//! (`organization_endpoints.py`). An organization's budget and limits are
//! stored, not enforced on requests here; a team's `organization_id` is
//! checked against the organization's models, budget and limits as LiteLLM
//! checks it.

use super::body::{bad_field, missing, parse_accepting, Kind, Patch};
use super::budgets::{actor, budget_json, new_record, BudgetFields};
use super::db::{run, store_err, Ctx};
use super::object;
use super::query::Query;
use crate::auth::Principal;
use crate::error::GatewayError;
use crate::state::Worker;
use crate::store::{
    BudgetRecord, Change, OrgFilter, OrgMembership, OrgRecord, OrgTable, TeamRecord, UserRecord,
};
use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// Fields of `NewOrganizationRequest` LiteLLM accepts without a column
/// here (and documented ones its model ignores), type-checked and dropped
/// (`tags` kept in `metadata`, as on keys and teams).
const ACCEPTED: &[(&str, Kind)] = &[
    ("object_permission", Kind::Object),
    ("blocked", Kind::Bool),
    ("tags", Kind::List),
    ("model_aliases", Kind::Object),
    ("spend", Kind::Num),
    ("updated_by", Kind::Str),
];

/// The budget fields LiteLLM's UI nests in `litellm_budget_table` on
/// `/organization/update`.
const BUDGET_FIELDS: [&str; 12] = [
    "max_budget",
    "soft_budget",
    "max_parallel_requests",
    "tpm_limit",
    "rpm_limit",
    "tpd_limit",
    "model_max_budget",
    "budget_duration",
    "allowed_models",
    "temp_budget_increase",
    "temp_budget_expiry",
    "budget_reset_at",
];

/// The body of `/organization/new` (`NewOrganizationRequest`) and
/// `/organization/update` (`LiteLLM_OrganizationTableUpdate`).
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct OrgRequest {
    organization_id: Option<String>,
    organization_alias: Patch<String>,
    budget_id: Option<String>,
    models: Patch<Vec<String>>,
    metadata: Patch<Map<String, Value>>,
    max_budget: Patch<f64>,
    soft_budget: Patch<f64>,
    max_parallel_requests: Patch<i64>,
    tpm_limit: Patch<i64>,
    rpm_limit: Patch<i64>,
    tpd_limit: Patch<i64>,
    model_max_budget: Patch<Map<String, Value>>,
    budget_duration: Patch<String>,
    budget_reset_at: Patch<String>,
    allowed_models: Patch<Vec<String>>,
    temp_budget_increase: Patch<f64>,
    temp_budget_expiry: Patch<String>,
    /// Fields LiteLLM keeps in `metadata`.
    #[serde(skip)]
    extra_metadata: Map<String, Value>,
}

impl OrgRequest {
    /// Parses a body; the budget fields of a nested `litellm_budget_table`
    /// (LiteLLM's UI) count as given at the top, and `model_rpm_limit` and
    /// `model_tpm_limit` go to `metadata`, where LiteLLM keeps them.
    fn read(body: &[u8]) -> Result<OrgRequest, GatewayError> {
        let mut moved = Map::new();
        let mut flat = None;
        if let Ok(Value::Object(mut fields)) = serde_json::from_slice::<Value>(body) {
            match fields.remove("litellm_budget_table") {
                Some(Value::Object(nested)) => {
                    for (k, v) in nested {
                        if BUDGET_FIELDS.contains(&k.as_str()) {
                            fields.insert(k, v);
                        }
                    }
                }
                None | Some(Value::Null) => {}
                Some(_) => return Err(bad_field("litellm_budget_table", "must be an object")),
            }
            for name in ["model_rpm_limit", "model_tpm_limit"] {
                match fields.remove(name) {
                    Some(v @ Value::Object(_)) => {
                        moved.insert(name.to_string(), v);
                    }
                    None | Some(Value::Null) => {}
                    Some(_) => return Err(bad_field(name, "must be an object")),
                }
            }
            flat = serde_json::to_vec(&Value::Object(fields)).ok();
        }
        let (mut req, extra): (OrgRequest, _) =
            parse_accepting(flat.as_deref().unwrap_or(body), ACCEPTED)?;
        req.extra_metadata = extra;
        req.extra_metadata.extend(moved);
        Ok(req)
    }

    /// Takes the budget fields out.
    fn take_budget(&mut self) -> BudgetFields {
        BudgetFields {
            max_budget: std::mem::take(&mut self.max_budget),
            soft_budget: std::mem::take(&mut self.soft_budget),
            max_parallel_requests: std::mem::take(&mut self.max_parallel_requests),
            tpm_limit: std::mem::take(&mut self.tpm_limit),
            rpm_limit: std::mem::take(&mut self.rpm_limit),
            tpd_limit: std::mem::take(&mut self.tpd_limit),
            model_max_budget: std::mem::take(&mut self.model_max_budget),
            budget_duration: std::mem::take(&mut self.budget_duration),
            budget_reset_at: std::mem::take(&mut self.budget_reset_at),
            allowed_models: std::mem::take(&mut self.allowed_models),
            temp_budget_increase: std::mem::take(&mut self.temp_budget_increase),
            temp_budget_expiry: std::mem::take(&mut self.temp_budget_expiry),
        }
    }

    /// The metadata given, with the fields LiteLLM keeps there.
    fn metadata(&mut self) -> Option<Map<String, Value>> {
        let extra = std::mem::take(&mut self.extra_metadata);
        match std::mem::take(&mut self.metadata) {
            Patch::Set(mut m) => {
                m.extend(extra);
                Some(m)
            }
            Patch::Clear | Patch::Keep if extra.is_empty() => None,
            _ => Some(extra),
        }
    }
}

/// An organization as LiteLLM answers it: its row with its budget row
/// (`litellm_budget_table`), and with `members` and `teams` when given.
fn org_json(
    o: &OrgRecord,
    budget: Option<&BudgetRecord>,
    members_and_teams: Option<(Vec<Value>, Vec<Value>)>,
) -> Value {
    let mut out = object(o);
    out.insert("users".into(), Value::Null);
    out.insert("object_permission".into(), Value::Null);
    out.insert(
        "litellm_budget_table".into(),
        budget.map_or(Value::Null, budget_json),
    );
    if let Some((members, teams)) = members_and_teams {
        out.insert("members".into(), members.into());
        out.insert("teams".into(), teams.into());
    }
    Value::Object(out)
}

/// A membership as LiteLLM answers it, with its user's email.
pub(super) fn membership_json(m: &OrgMembership, user: Option<&crate::store::UserRecord>) -> Value {
    let mut out = object(m);
    out.insert(
        "user".into(),
        user.map_or(Value::Null, |u| Value::Object(object(u))),
    );
    out.insert("litellm_budget_table".into(), Value::Null);
    out.insert(
        "user_email".into(),
        user.and_then(|u| u.user_email.clone()).into(),
    );
    Value::Object(out)
}

/// The organization `id`, or `None`.
pub(super) async fn find(ctx: &Ctx, id: &str) -> Result<Option<OrgRecord>, GatewayError> {
    let ids = [id.to_string()];
    let mut orgs = ctx
        .store()
        .organizations(Some(&ids[..]))
        .await
        .map_err(store_err)?;
    Ok(orgs.pop())
}

/// The budget row `id`, if any.
async fn budget_of(ctx: &Ctx, id: &str) -> Result<Option<BudgetRecord>, GatewayError> {
    let ids = [id.to_string()];
    Ok(ctx
        .store()
        .budgets(Some(&ids[..]))
        .await
        .map_err(store_err)?
        .pop())
}

/// Organizations with their budgets, members (with their users) and teams,
/// in order: a fixed number of queries however many organizations and
/// members there are (budgets, memberships, users, teams, the teams'
/// roles).
async fn orgs_json(ctx: &Ctx, orgs: &[OrgRecord]) -> Result<Vec<Value>, GatewayError> {
    if orgs.is_empty() {
        return Ok(Vec::new());
    }
    let store = ctx.store();
    let org_ids: Vec<String> = orgs.iter().map(|o| o.organization_id.clone()).collect();
    let budget_ids: Vec<String> = orgs.iter().map(|o| o.budget_id.clone()).collect();
    let budgets: HashMap<String, BudgetRecord> = store
        .budgets(Some(&budget_ids))
        .await
        .map_err(store_err)?
        .into_iter()
        .map(|b| (b.budget_id.clone(), b))
        .collect();
    let memberships = store.members_of_orgs(&org_ids).await.map_err(store_err)?;
    let mut user_ids: Vec<String> = memberships.iter().map(|m| m.user_id.clone()).collect();
    user_ids.sort();
    user_ids.dedup();
    let users: HashMap<String, UserRecord> = store
        .users(&user_ids)
        .await
        .map_err(store_err)?
        .into_iter()
        .map(|u| (u.user_id.clone(), u))
        .collect();
    let mut members: HashMap<&str, Vec<Value>> = HashMap::new();
    for m in &memberships {
        let json = membership_json(m, users.get(&m.user_id));
        members
            .entry(m.organization_id.as_str())
            .or_default()
            .push(json);
    }
    let teams = store
        .teams_of_orgs(&org_ids, MAX_TEAMS_SHOWN)
        .await
        .map_err(store_err)?;
    let shown = super::members::teams_with_roles(ctx, &teams).await?;
    let mut teams_of: HashMap<&str, Vec<Value>> = HashMap::new();
    for (team, json) in teams.iter().zip(shown) {
        if let Some(org) = team.organization_id.as_deref() {
            teams_of.entry(org).or_default().push(json);
        }
    }
    Ok(orgs
        .iter()
        .map(|o| {
            let id = o.organization_id.as_str();
            let both = (
                members.remove(id).unwrap_or_default(),
                teams_of.remove(id).unwrap_or_default(),
            );
            org_json(o, budgets.get(&o.budget_id), Some(both))
        })
        .collect())
}

/// An organization with its budget, members (with their users) and teams.
async fn full_json(ctx: &Ctx, o: &OrgRecord) -> Result<Value, GatewayError> {
    let mut one = orgs_json(ctx, std::slice::from_ref(o)).await?;
    one.pop()
        .ok_or(GatewayError::Internal("organization answer"))
}

/// `POST /organization/new`: the organization and, unless `budget_id`
/// names one, a new budget row from the budget fields.
pub async fn new(worker: &Worker, caller: &Principal, body: &[u8]) -> Result<Value, GatewayError> {
    let mut req = OrgRequest::read(body)?;
    let alias = match std::mem::take(&mut req.organization_alias) {
        Patch::Set(a) => a,
        _ => return Err(missing("organization_alias")),
    };
    let now = Utc::now();
    let who = actor(caller);
    let columns = req.take_budget().columns(now)?;
    let org_id = match req.organization_id.take() {
        Some(id) if id.is_empty() => return Err(bad_field("organization_id", "must not be empty")),
        Some(id) => id,
        None => uuid::Uuid::new_v4().to_string(),
    };
    let budget = match req.budget_id.take() {
        Some(id) => Err(id),
        None => Ok(new_record(
            uuid::Uuid::new_v4().to_string(),
            columns,
            &who,
            now,
        )?),
    };
    let mut models = Vec::new();
    std::mem::take(&mut req.models).apply_or_default(&mut models);
    let org = OrgRecord {
        organization_id: org_id,
        organization_alias: alias,
        budget_id: match &budget {
            Ok(b) => b.budget_id.clone(),
            Err(id) => id.clone(),
        },
        metadata: req.metadata().unwrap_or_default(),
        models,
        created_at: Some(now),
        created_by: who.clone(),
        updated_at: Some(now),
        updated_by: who,
        ..Default::default()
    };
    run(worker, move |ctx| async move {
        // A new budget row goes in with the organization; a named one must
        // exist (LiteLLM's foreign key).
        let (budget, new_budget) = match budget {
            Ok(b) => (b.clone(), Some(b)),
            Err(id) => {
                let found = budget_of(&ctx, &id).await?;
                let found = found.ok_or_else(|| {
                    bad_field("budget_id", format!("budget '{id}' does not exist"))
                })?;
                (found, None)
            }
        };
        ctx.store()
            .insert_organization(&org, new_budget.as_ref())
            .await
            .map_err(store_err)?;
        Ok(org_json(&org, Some(&budget), None))
    })
    .await
}

/// `PATCH /organization/update`: alias, models and metadata (merged) on
/// the organization, budget fields on its budget row; the organization
/// with its members, teams and budget.
pub async fn update(
    worker: &Worker,
    caller: &Principal,
    body: &[u8],
) -> Result<Value, GatewayError> {
    let mut req = OrgRequest::read(body)?;
    let Some(org_id) = req.organization_id.take() else {
        return Err(bad_field("organization_id", "organization_id is required"));
    };
    let who = actor(caller);
    let mut budget = req.take_budget().columns(Utc::now())?;
    let mut fields = Map::new();
    match std::mem::take(&mut req.organization_alias) {
        Patch::Set(a) => {
            fields.insert("organization_alias".into(), a.into());
        }
        Patch::Clear => {
            return Err(bad_field(
                "organization_alias",
                "organization_alias cannot be cleared; it is required",
            ))
        }
        Patch::Keep => {}
    }
    match std::mem::take(&mut req.models) {
        Patch::Set(m) => {
            fields.insert("models".into(), json!(m));
        }
        Patch::Clear => {
            fields.insert("models".into(), json!([]));
        }
        Patch::Keep => {}
    }
    if let Some(m) = req.metadata() {
        fields.insert("metadata".into(), Value::Object(m));
    }
    fields.insert("updated_by".into(), json!(who));
    if !budget.is_empty() {
        budget.insert("updated_by".into(), json!(who));
    }
    run(worker, move |ctx| async move {
        let not_found = || GatewayError::NotFound(format!("Organization {org_id}"));
        let org = find(&ctx, &org_id).await?.ok_or_else(not_found)?;
        if !budget.is_empty() {
            ctx.store()
                .patch_org_row(OrgTable::Budget, &org.budget_id, &budget)
                .await
                .map_err(store_err)?;
        }
        if !ctx
            .store()
            .patch_org_row(OrgTable::Organization, &org_id, &fields)
            .await
            .map_err(store_err)?
        {
            return Err(not_found());
        }
        if !budget.is_empty() {
            let changes = teams_of(&ctx, |o| o.organization_id == org_id).await?;
            ctx.publish(&changes).await;
        }
        let org = find(&ctx, &org_id).await?.ok_or_else(not_found)?;
        full_json(&ctx, &org).await
    })
    .await
}

/// `GET /organization/info?organization_id=`: the organization with its
/// members, teams and budget.
pub async fn info(worker: &Worker, mut q: Query) -> Result<Value, GatewayError> {
    let id = q
        .take("organization_id")
        .ok_or_else(|| missing("organization_id"))?;
    q.finish()?;
    run(worker, move |ctx| async move {
        let org = find(&ctx, &id)
            .await?
            .ok_or_else(|| GatewayError::NotFound("Organization".into()))?;
        full_json(&ctx, &org).await
    })
    .await
}

/// The body of the deprecated `POST /organization/info`
/// (`OrganizationRequest`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OrgIds {
    organizations: Vec<String>,
}

/// `POST /organization/info` (deprecated in LiteLLM): the organizations
/// that exist of those named, with their budgets.
pub async fn info_many(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let OrgIds { organizations } = super::body::parse(body)?;
    if organizations.is_empty() {
        return Err(bad_field(
            "organizations",
            "Specify list of organization id's to query. Passed in=[]",
        ));
    }
    run(worker, move |ctx| async move {
        let orgs = ctx
            .store()
            .organizations(Some(organizations.as_slice()))
            .await
            .map_err(store_err)?;
        let mut out = Vec::with_capacity(orgs.len());
        for o in &orgs {
            let budget = budget_of(&ctx, &o.budget_id).await?;
            out.push(org_json(o, budget.as_ref(), None));
        }
        Ok(Value::Array(out))
    })
    .await
}

/// Most teams an organization is shown with (`/organization/info`, each
/// of `/organization/list`), by id: `/v2/team/list?organization_id=` pages
/// through all of them.
const MAX_TEAMS_SHOWN: u64 = 1_000;

/// Most organizations `GET /organization/list` answers with unpaged: past
/// this many matches it is a 400 asking for `page_size`.
const MAX_UNPAGED_ORGS: u64 = 1_000;

/// Most organizations a page of `/organization/list` holds.
const MAX_ORG_PAGE: u64 = 100;

/// `GET /organization/list?org_id=&org_alias=`: every organization (the
/// one with `org_id`; those whose alias contains `org_alias`, ignoring
/// case), by id, with members, teams and budget, as LiteLLM's. With
/// `page_size` (up to 100; this gateway's, LiteLLM's list is unpaged) one
/// page of them (`page`, from 1) as `{organizations, total, page,
/// page_size, total_pages}`; without, the list of at most
/// [`MAX_UNPAGED_ORGS`]. Either way a fixed number of queries.
pub async fn list(worker: &Worker, mut q: Query) -> Result<Value, GatewayError> {
    let org_id = q.take("org_id").filter(|v| !v.is_empty());
    let alias = q.take("org_alias").filter(|v| !v.is_empty());
    let page: Option<u64> = q.take_parsed("page")?;
    let page_size: Option<u64> = q.take_parsed("page_size")?;
    q.finish()?;
    if page.is_some_and(|p| !(1..=1_000_000).contains(&p)) {
        return Err(bad_field("page", "must be from 1 to 1000000"));
    }
    if page_size.is_some_and(|s| !(1..=MAX_ORG_PAGE).contains(&s)) {
        return Err(bad_field(
            "page_size",
            format!("must be from 1 to {MAX_ORG_PAGE}"),
        ));
    }
    let (offset, limit) = match page_size {
        Some(size) => ((page.unwrap_or(1) - 1) * size, size),
        None if page.is_some() => return Err(bad_field("page", "needs page_size")),
        None => (0, MAX_UNPAGED_ORGS + 1),
    };
    run(worker, move |ctx| async move {
        let filter = OrgFilter {
            org_id: org_id.as_deref(),
            org_alias: alias.as_deref(),
        };
        let (orgs, total) = ctx
            .store()
            .organizations_page(filter, offset, limit)
            .await
            .map_err(store_err)?;
        if page_size.is_none() && total > MAX_UNPAGED_ORGS {
            return Err(bad_field(
                "page_size",
                format!(
                    "{total} organizations match, more than /organization/list answers with \
                     unpaged ({MAX_UNPAGED_ORGS}): give page and page_size"
                ),
            ));
        }
        let shown = orgs_json(&ctx, &orgs).await?;
        Ok(match page_size {
            // This gateway's paged form (LiteLLM's list is unpaged): the
            // page with the count of matches, as `/v2/team/list` answers.
            Some(size) => json!({
                "organizations": shown,
                "total": total,
                "page": page.unwrap_or(1),
                "page_size": size,
                "total_pages": total.div_ceil(size),
            }),
            None => Value::Array(shown),
        })
    })
    .await
}

/// The body of `/organization/delete` (`DeleteOrganizationRequest`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteOrgs {
    organization_ids: Vec<String>,
}

/// The teams of the organizations `which` picks, as changes: their keys'
/// cached copies hold the organization's budget, read again on a change.
pub(super) async fn teams_of(
    ctx: &Ctx,
    which: impl Fn(&OrgRecord) -> bool,
) -> Result<Vec<Change>, GatewayError> {
    let store = ctx.store();
    let orgs: Vec<String> = store
        .organizations(None)
        .await
        .map_err(store_err)?
        .into_iter()
        .filter(|o| which(o))
        .map(|o| o.organization_id)
        .collect();
    if orgs.is_empty() {
        return Ok(Vec::new());
    }
    Ok(store
        .list_teams()
        .await
        .map_err(store_err)?
        .into_iter()
        .filter(|t| t.organization_id.as_ref().is_some_and(|o| orgs.contains(o)))
        .map(|t| Change::Team(t.team_id))
        .collect())
}

/// `DELETE /organization/delete`: the organizations with their teams (and
/// the teams' keys) and memberships; their budget rows stay. 404 naming
/// the first that does not exist, before anything is deleted.
pub async fn delete(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let DeleteOrgs { organization_ids } = super::body::parse(body)?;
    run(worker, move |ctx| async move {
        for id in &organization_ids {
            if find(&ctx, id).await?.is_none() {
                return Err(GatewayError::NotFound(format!("Organization={id}")));
            }
        }
        let mut deleted = Vec::new();
        for id in &organization_ids {
            let teams: Vec<String> = ctx
                .store()
                .list_teams()
                .await
                .map_err(store_err)?
                .into_iter()
                .filter(|t| t.organization_id.as_deref() == Some(id.as_str()))
                .map(|t| t.team_id)
                .collect();
            let changes = super::teams::delete_rows(&ctx, &teams).await?.1;
            ctx.publish(&changes).await;
            let Some(org) = ctx
                .store()
                .delete_organization(id)
                .await
                .map_err(store_err)?
            else {
                continue;
            };
            let budget = budget_of(&ctx, &org.budget_id).await?;
            deleted.push(org_json(
                &org,
                budget.as_ref(),
                Some((Vec::new(), Vec::new())),
            ));
        }
        Ok(Value::Array(deleted))
    })
    .await
}

/// LiteLLM's checks of a team in organization `org_id` (`/team/new`, and
/// `/team/update` moving a team): the organization exists, and the team's
/// models, budget and limits are within its own.
pub(super) async fn check_team(
    ctx: &Ctx,
    team: &TeamRecord,
    org_id: &str,
) -> Result<(), GatewayError> {
    let Some(org) = find(ctx, org_id).await? else {
        return Err(bad_field(
            "organization_id",
            format!("Organization not found for organization_id={org_id}"),
        ));
    };
    let budget = budget_of(ctx, &org.budget_id).await?.unwrap_or_default();
    let over = |name: &str, team: Option<f64>, org_limit: Option<f64>| match (team, org_limit) {
        (Some(t), Some(o)) if t > o => Err(bad_field(
            name,
            format!(
                "Team {name} ({t}) exceeds organization's {name} ({o}). Organization: {org_id}"
            ),
        )),
        _ => Ok(()),
    };
    over("max_budget", team.max_budget, budget.max_budget)?;
    if !org.models.is_empty() && !org.models.iter().any(|m| m == "all-proxy-models") {
        if let Some(m) = team.models.iter().find(|m| !org.models.contains(m)) {
            return Err(bad_field(
                "models",
                format!(
                    "Model '{m}' not in organization's allowed models. Organization allowed \
                     models={:?}. Organization: {org_id}",
                    org.models
                ),
            ));
        }
    }
    let f = |v: Option<i64>| v.map(|n| n as f64);
    over("tpm_limit", f(team.tpm_limit), f(budget.tpm_limit))?;
    over("rpm_limit", f(team.rpm_limit), f(budget.rpm_limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nested_budget_fields_and_metadata_fields() {
        let mut req = OrgRequest::read(
            br#"{"organization_id": "o", "litellm_budget_table": {"max_budget": 5, "budget_id": "x"},
                "model_rpm_limit": {"m": 1}, "tags": ["t"], "object_permission": {}}"#,
        )
        .unwrap();
        assert_eq!(req.max_budget, Patch::Set(5.0));
        assert_eq!(req.budget_id, None);
        let meta = req.metadata().unwrap();
        assert_eq!(meta["model_rpm_limit"], json!({"m": 1}));
        for (body, field) in [
            (r#"{"litellm_budget_table": 5}"#, "litellm_budget_table"),
            (r#"{"models": "m"}"#, "models"),
            (r#"{"blocked": "no"}"#, "blocked"),
            (r#"{"organisation_alias": "typo"}"#, "organisation_alias"),
        ] {
            let err = OrgRequest::read(body.as_bytes()).unwrap_err();
            assert_eq!(err.param(), Some(field), "{body}");
        }
    }
}
