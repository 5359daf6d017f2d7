//! `/team/*`: teams. A team's member list (user ids) is the truth; the
//! `teams` list of each member's user row follows it.

use super::accepted;
use super::body::{bad_field, missing, parse, parse_accepting, Patch};
use super::budgets::BudgetFields;
use super::db::{self, run, store_err, Ctx};
use super::members::{team_json_with_roles, teams_with_roles};
use super::object;
use super::query::Query;
use crate::error::GatewayError;
use crate::state::Worker;
use crate::store::{Change, MemberOp, RowKind, TeamFilter, TeamMember, TeamOrder, TeamRecord};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// The body of `/team/new` and `/team/update` (LiteLLM's `NewTeamRequest`
/// and `UpdateTeamRequest`, the fields this gateway enforces).
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TeamRequest {
    team_id: Option<String>,
    team_alias: Patch<String>,
    organization_id: Patch<String>,
    models: Patch<Vec<String>>,
    max_budget: Patch<f64>,
    budget_duration: Patch<String>,
    tpm_limit: Patch<i64>,
    rpm_limit: Patch<i64>,
    max_parallel_requests: Patch<i64>,
    members: Option<Vec<String>>,
    members_with_roles: Option<Vec<Member>>,
    metadata: Patch<Map<String, Value>>,
    blocked: Patch<bool>,
    allowed_model_region: Patch<String>,
    model_max_budget: Patch<Map<String, Value>>,
    budget_limits: Patch<Vec<Value>>,
    team_member_budget: Patch<f64>,
    team_member_budget_duration: Patch<String>,
    team_member_rpm_limit: Patch<i64>,
    team_member_tpm_limit: Patch<i64>,
    team_member_model_max_budget: Patch<Map<String, Value>>,
    default_team_member_models: Patch<Vec<String>>,
    model_aliases: Patch<Map<String, Value>>,
    /// Fields LiteLLM keeps in `metadata` ([`parse_accepting`]).
    #[serde(skip)]
    extra_metadata: Map<String, Value>,
}

/// Member ids, and the roles given with them.
type Members = (Vec<String>, Vec<TeamMember>);

/// One of `members_with_roles`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Member {
    user_id: Option<String>,
    user_email: Option<String>,
    role: String,
}

impl TeamRequest {
    /// Parses a body, accepting LiteLLM's fields this gateway does not
    /// enforce ([`accepted::TEAM`]).
    fn read(body: &[u8]) -> Result<TeamRequest, GatewayError> {
        super::body::refuse_when_set(body, accepted::TEAM_REFUSED)?;
        let (mut req, extra): (TeamRequest, _) = parse_accepting(body, accepted::TEAM)?;
        // Enforced from `metadata` (LiteLLM's `model_per_team` limits).
        for name in ["model_rpm_limit", "model_tpm_limit"] {
            if let Some(Value::Object(limits)) = extra.get(name) {
                super::keys::per_model_limits(name, limits)?;
            }
        }
        super::keys::output_estimates(&extra)?;
        req.extra_metadata = extra;
        Ok(req)
    }

    /// The member ids of `members` and `members_with_roles`, in order without
    /// repeats, and the roles given; `None` when the body has neither. With
    /// `by_email`, an entry named by `user_email` alone is kept among the
    /// roles with an empty `user_id` (its user is found or made later, as
    /// LiteLLM's `/team/new` does); else it is a 400.
    fn take_members(&mut self, by_email: bool) -> Result<Option<Members>, GatewayError> {
        if self.members.is_none() && self.members_with_roles.is_none() {
            return Ok(None);
        }
        let mut roles = Vec::new();
        let mut ids = self.members.take().unwrap_or_default();
        let with_roles = self.members_with_roles.take().unwrap_or_default();
        for (i, m) in with_roles.into_iter().enumerate() {
            let at = format!("members_with_roles[{i}]");
            if !matches!(m.role.as_str(), "admin" | "user") {
                return Err(bad_field(
                    &format!("{at}.role"),
                    "must be 'admin' or 'user'",
                ));
            }
            let email_only =
                m.user_id.is_none() && m.user_email.as_ref().is_some_and(|e| !e.is_empty());
            if by_email && email_only {
                roles.push(TeamMember {
                    user_id: String::new(),
                    user_email: m.user_email,
                    role: m.role,
                });
                continue;
            }
            let Some(id) = m.user_id else {
                let email = m.user_email.unwrap_or_default();
                return Err(bad_field(
                    &format!("{at}.user_id"),
                    format!(
                        "members are named by user_id (user_email '{email}' alone is not enough)"
                    ),
                ));
            };
            ids.push(id.clone());
            roles.push(TeamMember {
                user_id: id,
                user_email: m.user_email,
                role: m.role,
            });
        }
        let mut seen = std::collections::HashSet::new();
        ids.retain(|id| seen.insert(id.clone()));
        Ok(Some((ids, roles)))
    }

    /// Fills what the request leaves out from the configured defaults, as
    /// LiteLLM does: an absent or null budget or limit, an absent duration.
    fn apply_defaults(&mut self, d: &crate::config::TeamDefaults) {
        if let (Some(v), false) = (d.max_budget, matches!(self.max_budget, Patch::Set(_))) {
            self.max_budget = Patch::Set(v);
        }
        if let (Some(v), false) = (&d.budget_duration, self.budget_duration.is_given()) {
            self.budget_duration = Patch::Set(v.clone());
        }
        if let (Some(v), false) = (d.tpm_limit, matches!(self.tpm_limit, Patch::Set(_))) {
            self.tpm_limit = Patch::Set(v);
        }
        if let (Some(v), false) = (d.rpm_limit, matches!(self.rpm_limit, Patch::Set(_))) {
            self.rpm_limit = Patch::Set(v);
        }
    }

    /// Takes the team's member defaults (`team_member_budget`,
    /// `team_member_budget_duration`, `team_member_rpm_limit`,
    /// `team_member_tpm_limit`, `team_member_model_max_budget`) as the
    /// fields of its member budget row; `None` when none is given.
    fn take_member_defaults(&mut self) -> Option<BudgetFields> {
        let given = self.team_member_budget.is_given()
            || self.team_member_budget_duration.is_given()
            || self.team_member_rpm_limit.is_given()
            || self.team_member_tpm_limit.is_given()
            || self.team_member_model_max_budget.is_given();
        given.then(|| BudgetFields {
            max_budget: std::mem::take(&mut self.team_member_budget),
            budget_duration: std::mem::take(&mut self.team_member_budget_duration),
            rpm_limit: std::mem::take(&mut self.team_member_rpm_limit),
            tpm_limit: std::mem::take(&mut self.team_member_tpm_limit),
            model_max_budget: std::mem::take(&mut self.team_member_model_max_budget),
            ..BudgetFields::default()
        })
    }

    /// Applies the given fields to `t` as of `now`.
    fn apply(self, t: &mut TeamRecord, now: DateTime<Utc>) -> Result<(), GatewayError> {
        self.team_alias.apply(&mut t.team_alias);
        self.organization_id.apply(&mut t.organization_id);
        self.models.apply_or_default(&mut t.models);
        self.max_budget
            .apply_amount("max_budget", &mut t.max_budget)?;
        self.budget_duration
            .apply_period(&mut t.budget_duration, &mut t.budget_reset_at, now)?;
        self.tpm_limit.apply_limit("tpm_limit", &mut t.tpm_limit)?;
        self.rpm_limit.apply_limit("rpm_limit", &mut t.rpm_limit)?;
        self.max_parallel_requests
            .apply_limit("max_parallel_requests", &mut t.max_parallel_requests)?;
        self.metadata.apply_or_default(&mut t.metadata);
        t.metadata.extend(self.extra_metadata);
        self.blocked.apply_or_default(&mut t.blocked);
        self.allowed_model_region.apply(&mut t.allowed_model_region);
        if let Patch::Set(budgets) = &self.model_max_budget {
            super::keys::per_model_budgets(budgets)?;
        }
        self.model_max_budget
            .apply_or_default(&mut t.model_max_budget);
        self.default_team_member_models
            .apply_or_default(&mut t.default_team_member_models);
        if let Patch::Set(aliases) = &self.model_aliases {
            if let Some((name, _)) = aliases.iter().find(|(_, group)| !group.is_string()) {
                return Err(super::body::bad_field(
                    "model_aliases",
                    format!("the alias '{name}' must name a model group (a string)"),
                ));
            }
        }
        self.model_aliases.apply_or_default(&mut t.model_aliases);
        super::keys::apply_windows(self.budget_limits, &mut t.budget_limits, now)?;
        Ok(())
    }
}

/// A team's row plus `members_with_roles` listing every id of its
/// `members` as `user` (the stored roles are added by
/// [`team_json_with_roles`]).
pub fn team_json(t: &TeamRecord) -> Value {
    let mut out = object(t);
    let members: Vec<Value> = t
        .members
        .iter()
        .map(|id| json!({"user_id": id, "user_email": null, "role": "user"}))
        .collect();
    out.insert("members_with_roles".into(), members.into());
    Value::Object(out)
}

/// Adds `team_id` to the `teams` of users who joined and removes it from
/// those who left; ids that name no user are skipped. Returns the changes.
pub async fn sync_members(
    ctx: &Ctx,
    team_id: &str,
    before: &[String],
    after: &[String],
) -> Result<Vec<Change>, GatewayError> {
    let mut changes = Vec::new();
    let joined = after.iter().filter(|id| !before.contains(id));
    let left = before.iter().filter(|id| !after.contains(id));
    for (id, member) in joined
        .map(|id| (id, true))
        .chain(left.map(|id| (id, false)))
    {
        let Some(mut user) = ctx.store().get_user(id).await.map_err(store_err)? else {
            continue;
        };
        user.teams.retain(|t| t != team_id);
        if member {
            user.teams.push(team_id.to_string());
        }
        // Only `teams` is written: a concurrent change of the user's other
        // fields is kept.
        let fields = Map::from_iter([("teams".to_string(), Value::from(user.teams))]);
        ctx.store()
            .patch(RowKind::User, id, &fields)
            .await
            .map_err(store_err)?;
        changes.push(Change::User(id.clone()));
    }
    Ok(changes)
}

/// Stores the roles of `members_with_roles` (their members are in the team
/// already).
async fn set_roles(ctx: &Ctx, team_id: &str, roles: &[TeamMember]) -> Result<(), GatewayError> {
    for m in roles {
        ctx.store()
            .change_team_member(team_id, MemberOp::Update, m)
            .await
            .map_err(store_err)?;
    }
    Ok(())
}

/// The `metadata` member naming a team's member budget row (LiteLLM's).
pub const MEMBER_BUDGET_ID: &str = "team_member_budget_id";

/// Writes a team's member defaults (`fields`) to its member budget row,
/// as LiteLLM's `TeamMemberBudgetHandler`: the row `metadata`
/// [`MEMBER_BUDGET_ID`] names is updated, else a new one is made and named
/// there. Budget fields are checked as `/budget/new` checks them.
async fn write_member_defaults(
    ctx: &Ctx,
    team: &mut TeamRecord,
    fields: BudgetFields,
) -> Result<(), GatewayError> {
    let now = Utc::now();
    let columns = fields.columns(now)?;
    let existing = team
        .metadata
        .get(MEMBER_BUDGET_ID)
        .and_then(Value::as_str)
        .map(str::to_string);
    if let Some(id) = existing {
        let store = ctx.store();
        if store
            .patch_org_row(crate::store::OrgTable::Budget, &id, &columns)
            .await
            .map_err(store_err)?
        {
            return Ok(());
        }
    }
    let id = match &team.team_alias {
        Some(alias) => format!(
            "team-{}-budget-{}",
            alias.replace(' ', "-"),
            uuid::Uuid::new_v4().simple()
        ),
        None => format!("team-budget-{}", uuid::Uuid::new_v4().simple()),
    };
    let row = super::budgets::new_record(id.clone(), columns, "default_user_id", now)?;
    ctx.store().insert_budget(&row).await.map_err(store_err)?;
    team.metadata
        .insert(MEMBER_BUDGET_ID.into(), Value::String(id));
    Ok(())
}

/// The `team_id` of a team as JSON.
fn team_id_of(team: &Value) -> Value {
    team.get("team_id").cloned().unwrap_or(Value::Null)
}

/// `POST /team/new`: `team_id` is a new uuid when not given.
pub async fn new(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let mut req = TeamRequest::read(body)?;
    req.apply_defaults(&worker.shared.team_defaults);
    let (members, mut roles) = req.take_members(true)?.unwrap_or_default();
    let team_id = match req.team_id.take() {
        Some(id) if id.is_empty() => return Err(bad_field("team_id", "must not be empty")),
        Some(id) => id,
        None => uuid::Uuid::new_v4().to_string(),
    };
    let now = Utc::now();
    let mut team = TeamRecord {
        team_id,
        members,
        created_at: Some(now),
        ..Default::default()
    };
    let member_defaults = req.take_member_defaults();
    let backfill = member_defaults.is_some();
    req.apply(&mut team, now)?;
    // The member budget row names the team's id in no column: a stale
    // `team_member_budget_id` in the given metadata is not trusted.
    team.metadata.remove(MEMBER_BUDGET_ID);
    run(worker, move |ctx| async move {
        if let Some(org) = &team.organization_id {
            super::orgs::check_team(&ctx, &team, org).await?;
        }
        if let Some(fields) = member_defaults {
            // No member budget row for a team that cannot be made.
            if ctx
                .store()
                .get_team(&team.team_id)
                .await
                .map_err(store_err)?
                .is_some()
            {
                return Err(GatewayError::Conflict(format!("team {}", team.team_id)));
            }
            write_member_defaults(&ctx, &mut team, fields).await?;
        }
        // Members named by email alone: found or made, as on member_add.
        for m in roles.iter_mut().filter(|m| m.user_id.is_empty()) {
            let email = m.user_email.clone().unwrap_or_default();
            m.user_id = super::members::user_by_email(&ctx, &email).await?;
            if !team.members.contains(&m.user_id) {
                team.members.push(m.user_id.clone());
            }
        }
        ctx.store().insert_team(&team).await.map_err(store_err)?;
        let mut changes = vec![Change::Team(team.team_id.clone())];
        changes.extend(sync_members(&ctx, &team.team_id, &[], &team.members).await?);
        set_roles(&ctx, &team.team_id, &roles).await?;
        if backfill {
            super::member_budgets::backfill(&ctx, &team).await?;
        }
        ctx.publish(&changes).await;
        let roles = ctx
            .store()
            .team_members(&team.team_id)
            .await
            .map_err(store_err)?;
        Ok(team_json_with_roles(&team, &roles))
    })
    .await
}

/// `GET /team/info?team_id=`: the team and its keys.
pub async fn info(worker: &Worker, mut q: Query) -> Result<Value, GatewayError> {
    let team_id = q.take("team_id").ok_or_else(|| missing("team_id"))?;
    q.finish()?;
    let id = team_id.clone();
    let (team, keys) = run(worker, move |ctx| async move {
        let team = db::team(&ctx, &id).await?;
        let roles = ctx.store().team_members(&id).await.map_err(store_err)?;
        let keys = ctx
            .store()
            .list_keys(None, Some(&id))
            .await
            .map_err(store_err)?;
        Ok((team_json_with_roles(&team, &roles), keys))
    })
    .await?;
    let keys: Vec<Value> = keys.iter().map(|k| Value::Object(object(k))).collect();
    Ok(json!({"team_id": team_id, "team_info": team, "keys": keys}))
}

/// `POST /team/update`: the fields given change; `members` (or
/// `members_with_roles`) replaces the member list.
pub async fn update(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let mut req = TeamRequest::read(body)?;
    let team_id = req.team_id.take().ok_or_else(|| missing("team_id"))?;
    let members = req.take_members(false)?;
    let org_given = req.organization_id.is_given();
    let member_defaults = req.take_member_defaults();
    let backfill = member_defaults.is_some();
    let team = run(worker, move |ctx| async move {
        let old = db::team(&ctx, &team_id).await?;
        let mut team = old.clone();
        let before = team.members.clone();
        req.apply(&mut team, Utc::now())?;
        // The member budget row stays the one the team had (the proxy's
        // key: LiteLLM restores it when the given metadata leaves it out).
        match old.metadata.get(MEMBER_BUDGET_ID) {
            Some(id) => team.metadata.insert(MEMBER_BUDGET_ID.into(), id.clone()),
            None => team.metadata.remove(MEMBER_BUDGET_ID),
        };
        if let Some(fields) = member_defaults {
            write_member_defaults(&ctx, &mut team, fields).await?;
        }
        if let (true, Some(org)) = (org_given, &team.organization_id) {
            super::orgs::check_team(&ctx, &team, org).await?;
        }
        let mut roles = Vec::new();
        if let Some((members, given)) = members {
            team.members = members;
            roles = given;
        }
        let store = ctx.store();
        let written = db::write_changes(&ctx, RowKind::Team, &team_id, (&old, &team), || async {
            store.update_team(&team).await
        })
        .await?;
        if !written {
            return Err(GatewayError::NotFound(format!("Team {team_id}")));
        }
        let team = db::team(&ctx, &team_id).await?;
        let mut changes = vec![Change::Team(team_id.clone())];
        changes.extend(sync_members(&ctx, &team_id, &before, &team.members).await?);
        set_roles(&ctx, &team_id, &roles).await?;
        if backfill {
            // Members who joined before the defaults were set are linked
            // to their row, as LiteLLM backfills them.
            super::member_budgets::backfill(&ctx, &team).await?;
        }
        ctx.publish(&changes).await;
        let roles = ctx
            .store()
            .team_members(&team_id)
            .await
            .map_err(store_err)?;
        Ok(team_json_with_roles(&team, &roles))
    })
    .await?;
    Ok(json!({"team_id": team_id_of(&team), "data": team}))
}

/// The body of `/team/delete`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteTeams {
    team_ids: Vec<String>,
}

/// Deletes the teams, their keys and their place in members' `teams`;
/// the ids that existed and the changes to publish.
pub(super) async fn delete_rows(
    ctx: &Ctx,
    team_ids: &[String],
) -> Result<(Vec<String>, Vec<Change>), GatewayError> {
    let mut changes = Vec::new();
    if team_ids.is_empty() {
        return Ok((Vec::new(), changes));
    }
    for id in team_ids {
        let Some(team) = ctx.store().get_team(id).await.map_err(store_err)? else {
            continue;
        };
        let keys = ctx
            .store()
            .list_keys(None, Some(id))
            .await
            .map_err(store_err)?;
        let tokens: Vec<String> = keys.into_iter().map(|k| k.token).collect();
        let deleted = ctx.store().delete_keys(&tokens).await.map_err(store_err)?;
        changes.extend(deleted.into_iter().map(Change::Key));
        changes.extend(sync_members(ctx, id, &team.members, &[]).await?);
    }
    let gone = ctx
        .store()
        .delete_teams(team_ids)
        .await
        .map_err(store_err)?;
    changes.extend(gone.iter().cloned().map(Change::Team));
    Ok((gone, changes))
}

/// `POST /team/delete`: the teams, their keys and their place in members'
/// `teams`; 404 when none existed.
pub async fn delete(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let DeleteTeams { team_ids } = parse(body)?;
    if team_ids.is_empty() {
        return Err(bad_field("team_ids", "name at least one"));
    }
    let asked = team_ids.join(", ");
    let gone = run(worker, move |ctx| async move {
        let (gone, changes) = delete_rows(&ctx, &team_ids).await?;
        ctx.publish(&changes).await;
        Ok(gone)
    })
    .await?;
    if gone.is_empty() {
        return Err(GatewayError::NotFound(format!("Teams {asked}")));
    }
    Ok(json!({ "deleted_teams": gone }))
}

/// Most teams `GET /team/list` (LiteLLM's unpaged list) answers with:
/// past this many matching teams it is a 400 naming `/v2/team/list`, so
/// one call never holds 100,000 teams in memory (about 1 KB each).
pub const MAX_UNPAGED_TEAMS: u64 = 10_000;

/// Most teams a page of `/v2/team/list` holds (LiteLLM's `le=100`).
const MAX_TEAM_PAGE: u64 = 100;

/// `GET /team/list?user_id=&organization_id=`: every team (those with the
/// member, of the organization), by id, each with its members' roles, at
/// most [`MAX_UNPAGED_TEAMS`].
pub async fn list(worker: &Worker, mut q: Query) -> Result<Value, GatewayError> {
    let user_id = q.take("user_id");
    let organization_id = q.take("organization_id");
    q.finish()?;
    let (teams, total) = run(worker, move |ctx| async move {
        let filter = TeamFilter {
            user_id: user_id.as_deref(),
            organization_id: organization_id.as_deref(),
            ..TeamFilter::default()
        };
        let (teams, total) = ctx
            .store()
            .list_teams_page(filter, TeamOrder::TeamId, false, 0, MAX_UNPAGED_TEAMS + 1)
            .await
            .map_err(store_err)?;
        if total > MAX_UNPAGED_TEAMS {
            return Ok((Vec::new(), total));
        }
        Ok((teams_with_roles(&ctx, &teams).await?, total))
    })
    .await?;
    if total > MAX_UNPAGED_TEAMS {
        return Err(bad_field(
            "page",
            format!(
                "{total} teams match, more than /team/list answers with ({MAX_UNPAGED_TEAMS}): \
                 page through them with /v2/team/list?page=&page_size="
            ),
        ));
    }
    Ok(Value::Array(teams))
}

/// `GET /v2/team/list`: LiteLLM's paged team list (`page`, `page_size` up
/// to 100, `team_id`, `team_alias` and `search` (id exactly or part of the
/// alias), `organization_id`, `user_id`, `sort_by` of `team_id`,
/// `team_alias`, `created_at` (the default, newest first) or `spend`,
/// `sort_order`; and this gateway's `has_limits=true`: only teams with a
/// rate limit, the console's Limits page), each team with its members'
/// roles, as `{teams, total, page, page_size, total_pages}`.
pub async fn list_v2(worker: &Worker, mut q: Query) -> Result<Value, GatewayError> {
    let page: u64 = q.take_parsed("page")?.unwrap_or(1);
    let page_size: u64 = q.take_parsed("page_size")?.unwrap_or(10);
    if !(1..=1_000_000).contains(&page) {
        return Err(bad_field("page", "must be from 1 to 1000000"));
    }
    if !(1..=MAX_TEAM_PAGE).contains(&page_size) {
        return Err(bad_field(
            "page_size",
            format!("must be from 1 to {MAX_TEAM_PAGE}"),
        ));
    }
    let sort_by = q.take("sort_by");
    let order = match sort_by.as_deref() {
        None | Some("") => TeamOrder::CreatedAt,
        Some(by) => TeamOrder::parse(by).ok_or_else(|| {
            bad_field(
                "sort_by",
                "must be team_id, team_alias, created_at or spend here",
            )
        })?,
    };
    let descending = match q.take("sort_order").as_deref() {
        Some(o) if o.eq_ignore_ascii_case("desc") => true,
        Some(o) if o.eq_ignore_ascii_case("asc") => false,
        Some(_) => return Err(bad_field("sort_order", "must be asc or desc")),
        // LiteLLM's default order is the newest first.
        None => sort_by.is_none(),
    };
    if q.take("status").is_some() {
        return Err(bad_field(
            "status",
            "deleted teams are not kept by this gateway",
        ));
    }
    if q.take("search_team_id_match").is_some_and(|m| m != "exact") {
        return Err(bad_field(
            "search_team_id_match",
            "only exact is supported here",
        ));
    }
    let text = |q: &mut Query, name: &str| q.take(name).filter(|v| !v.is_empty());
    let (team_id, team_alias, search) = (
        text(&mut q, "team_id"),
        text(&mut q, "team_alias"),
        text(&mut q, "search"),
    );
    let (organization_id, user_id) = (text(&mut q, "organization_id"), text(&mut q, "user_id"));
    let has_limits = q.take_parsed::<bool>("has_limits")?.unwrap_or(false);
    q.finish()?;
    let offset = (page - 1) * page_size;
    let (teams, total) = run(worker, move |ctx| async move {
        let filter = TeamFilter {
            team_id: team_id.as_deref(),
            team_alias: team_alias.as_deref(),
            search: search.as_deref(),
            organization_id: organization_id.as_deref(),
            user_id: user_id.as_deref(),
            has_limits,
        };
        let (teams, total) = ctx
            .store()
            .list_teams_page(filter, order, descending, offset, page_size)
            .await
            .map_err(store_err)?;
        Ok((teams_with_roles(&ctx, &teams).await?, total))
    })
    .await?;
    Ok(json!({
        "teams": teams,
        "total": total,
        "page": page,
        "page_size": page_size,
        "total_pages": total.div_ceil(page_size),
    }))
}

/// The body of `/team/block` and `/team/unblock`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TeamRef {
    team_id: String,
}

/// `POST /team/block` and `/team/unblock`: the updated team; its keys are
/// refused (or allowed again) at once.
pub async fn set_blocked(
    worker: &Worker,
    body: &[u8],
    blocked: bool,
) -> Result<Value, GatewayError> {
    let TeamRef { team_id } = parse(body)?;
    run(worker, move |ctx| async move {
        let fields = Map::from_iter([("blocked".to_string(), Value::Bool(blocked))]);
        if !ctx
            .store()
            .patch(RowKind::Team, &team_id, &fields)
            .await
            .map_err(store_err)?
        {
            return Err(GatewayError::NotFound(format!("Team {team_id}")));
        }
        ctx.publish(&[Change::Team(team_id.clone())]).await;
        super::members::team_with_roles(&ctx, &team_id).await
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_members_and_checks_roles() {
        let mut req: TeamRequest = parse(
            br#"{"members": ["a"], "members_with_roles": [{"user_id": "b", "role": "admin"}, {"user_id": "a", "role": "user"}]}"#,
        )
        .unwrap();
        let (ids, roles) = req.take_members(false).unwrap().unwrap();
        assert_eq!(ids, vec!["a".to_string(), "b".to_string()]);
        assert_eq!((roles[0].role.as_str(), roles.len()), ("admin", 2));
        let mut req: TeamRequest =
            parse(br#"{"members_with_roles": [{"user_id": "b", "role": "owner"}]}"#).unwrap();
        assert_eq!(
            req.take_members(false).unwrap_err().param(),
            Some("members_with_roles[0].role")
        );
        let mut req: TeamRequest =
            parse(br#"{"members_with_roles": [{"user_email": "x@y", "role": "user"}]}"#).unwrap();
        assert_eq!(
            req.take_members(false).unwrap_err().param(),
            Some("members_with_roles[0].user_id")
        );
        let mut req: TeamRequest =
            parse(br#"{"members_with_roles": [{"user_email": "x@y", "role": "user"}]}"#).unwrap();
        let (ids, roles) = req.take_members(true).unwrap().unwrap();
        assert!(ids.is_empty() && roles[0].user_id.is_empty());
        let mut req: TeamRequest = parse(br#"{"team_alias": "t"}"#).unwrap();
        assert!(req.take_members(false).unwrap().is_none());
    }

    #[test]
    fn names_out_of_range_numbers_and_durations() {
        for (body, field) in [
            (r#"{"max_budget": 2e9}"#, "max_budget"),
            (r#"{"budget_duration": "100000000d"}"#, "budget_duration"),
            (r#"{"tpm_limit": 1000000000001}"#, "tpm_limit"),
            (r#"{"rpm_limit": -3}"#, "rpm_limit"),
            (r#"{"max_parallel_requests": -1}"#, "max_parallel_requests"),
        ] {
            let req: TeamRequest = parse(body.as_bytes()).unwrap();
            let err = req
                .apply(&mut TeamRecord::default(), Utc::now())
                .unwrap_err();
            assert_eq!(err.param(), Some(field), "{body}");
        }
    }

    #[test]
    fn shows_members_with_roles() {
        let t = TeamRecord {
            team_id: "t".into(),
            members: vec!["u1".into()],
            ..Default::default()
        };
        let v = team_json(&t);
        assert_eq!(v["members_with_roles"][0]["user_id"], "u1");
        assert_eq!(v["team_id"], "t");
    }
}
