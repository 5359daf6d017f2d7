//! Teams (`LiteLLM_TeamTable`) and users (`LiteLLM_UserTable`).
//!
//! LiteLLM's team `created_at` is NOT NULL: a team inserted without one gets
//! the insertion time, and an update without one keeps the stored time.

use super::convert::{as_map, json, naive, utc};
use super::notify;
use crate::store::{
    read_windows, windows_json, Change, TeamFilter, TeamOrder, TeamRecord, UserFilter, UserRecord,
};
use chrono::Utc;
use std::collections::HashSet;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Error, Row};

const SELECT_TEAM: &str = r#"SELECT team_id, team_alias, organization_id, models, members, spend::float8 AS spend,
    max_budget::float8 AS max_budget, budget_duration,
    budget_reset_at::timestamp AS budget_reset_at, tpm_limit::int8 AS tpm_limit,
    rpm_limit::int8 AS rpm_limit, max_parallel_requests::int8 AS max_parallel_requests, blocked,
    allowed_model_region, metadata::jsonb AS metadata, created_at::timestamp AS created_at,
    model_max_budget::jsonb AS model_max_budget, model_spend::jsonb AS model_spend,
    budget_limits::jsonb AS budget_limits, default_team_member_models,
    (SELECT m.aliases::jsonb FROM "LiteLLM_ModelTable" m WHERE m.id = model_id) AS model_aliases,
    (SELECT jsonb_object_agg(f.key, f.value) FROM jsonb_each(to_jsonb("LiteLLM_TeamTable")) f
        WHERE f.key IN ('router_settings', 'team_member_permissions')
        AND f.value NOT IN ('null'::jsonb, '{}'::jsonb, '[]'::jsonb, '""'::jsonb))
        AS litellm_fields
FROM "LiteLLM_TeamTable""#;

/// `$1` id, `$2..$14` fields, `$15` now, `$16` organization, `$17`
/// per-model budgets, `$18` budget windows, `$19` default member models,
/// `$20` spend.
const INSERT_TEAM: &str = r#"INSERT INTO "LiteLLM_TeamTable" (team_id, team_alias, models,
    members, max_budget, budget_duration, budget_reset_at, tpm_limit, rpm_limit,
    max_parallel_requests, blocked, allowed_model_region, metadata, created_at, updated_at,
    organization_id, model_max_budget, budget_limits, default_team_member_models, spend)
VALUES ($1::text, $2::text, $3::text[], $4::text[], $5::float8, $6::text, $7::timestamp,
    $8::int8, $9::int8, $10::int8, $11::bool, $12::text, $13::jsonb,
    COALESCE($14::timestamp, $15::timestamp), $15::timestamp, $16::text, $17::jsonb, $18::jsonb,
    $19::text[], $20::float8)
ON CONFLICT (team_id) DO NOTHING"#;

/// `$1` id, `$2..$14` fields, `$15` now, `$16` organization, `$17`
/// per-model budgets, `$18` budget windows, `$19` default member models.
const UPDATE_TEAM: &str = r#"UPDATE "LiteLLM_TeamTable" SET team_alias = $2::text,
    organization_id = $16::text, model_max_budget = $17::jsonb, budget_limits = $18::jsonb,
    default_team_member_models = $19::text[],
    models = $3::text[], members = $4::text[], max_budget = $5::float8,
    budget_duration = $6::text, budget_reset_at = $7::timestamp, tpm_limit = $8::int8,
    rpm_limit = $9::int8, max_parallel_requests = $10::int8, blocked = $11::bool,
    allowed_model_region = $12::text, metadata = $13::jsonb,
    created_at = COALESCE($14::timestamp, created_at), updated_at = $15::timestamp
WHERE team_id = $1::text"#;

const SELECT_USER: &str = r#"SELECT user_id, user_email, user_alias, user_role, teams, models,
    spend::float8 AS spend, max_budget::float8 AS max_budget, budget_duration,
    budget_reset_at::timestamp AS budget_reset_at, tpm_limit::int8 AS tpm_limit,
    rpm_limit::int8 AS rpm_limit, max_parallel_requests::int8 AS max_parallel_requests,
    metadata::jsonb AS metadata, created_at::timestamp AS created_at,
    model_max_budget::jsonb AS model_max_budget, model_spend::jsonb AS model_spend
FROM "LiteLLM_UserTable""#;

/// `$1` id, `$2..$14` fields, `$15` now, `$16` per-model budgets, `$17`
/// spend.
const INSERT_USER: &str = r#"INSERT INTO "LiteLLM_UserTable" (user_id, user_email, user_alias,
    user_role, teams, models, max_budget, budget_duration, budget_reset_at, tpm_limit, rpm_limit,
    max_parallel_requests, metadata, created_at, updated_at, model_max_budget, spend)
VALUES ($1::text, $2::text, $3::text, $4::text, $5::text[], $6::text[], $7::float8, $8::text,
    $9::timestamp, $10::int8, $11::int8, $12::int8, $13::jsonb, $14::timestamp, $15::timestamp,
    $16::jsonb, $17::float8)
ON CONFLICT (user_id) DO NOTHING"#;

/// `$1` id, `$2..$14` fields, `$15` now, `$16` per-model budgets.
const UPDATE_USER: &str = r#"UPDATE "LiteLLM_UserTable" SET user_email = $2::text,
    model_max_budget = $16::jsonb,
    user_alias = $3::text, user_role = $4::text, teams = $5::text[], models = $6::text[],
    max_budget = $7::float8, budget_duration = $8::text, budget_reset_at = $9::timestamp,
    tpm_limit = $10::int8, rpm_limit = $11::int8, max_parallel_requests = $12::int8,
    metadata = $13::jsonb, created_at = $14::timestamp, updated_at = $15::timestamp
WHERE user_id = $1::text"#;

/// A team by id.
pub async fn get_team(c: &Client, id: &str) -> Result<Option<TeamRecord>, Error> {
    let sql = format!("{SELECT_TEAM} WHERE team_id = $1");
    c.query_opt(&sql, &[&id])
        .await?
        .as_ref()
        .map(team)
        .transpose()
}

/// Every team, by id (byte order, as the in-memory store sorts).
pub async fn list_teams(c: &Client) -> Result<Vec<TeamRecord>, Error> {
    let sql = format!(r#"{SELECT_TEAM} ORDER BY team_id COLLATE "C""#);
    c.query(&sql, &[]).await?.iter().map(team).collect()
}

/// The teams [`TeamFilter`] selects (`$1` id, `$2` alias part, `$3`
/// search, `$4` organization, `$5` member, `$6` only those with limits),
/// as a literal for `concat!`.
macro_rules! team_filter {
    () => {
        r#"($1::text IS NULL OR team_id = $1)
    AND ($2::text IS NULL OR strpos(lower(COALESCE(team_alias, '')), lower($2)) > 0)
    AND ($3::text IS NULL OR team_id = $3 OR strpos(lower(COALESCE(team_alias, '')), lower($3)) > 0)
    AND ($4::text IS NULL OR organization_id = $4)
    AND ($5::text IS NULL OR $5 = ANY(members))
    AND (NOT $6::bool OR tpm_limit IS NOT NULL OR rpm_limit IS NOT NULL
        OR max_parallel_requests IS NOT NULL
        OR jsonb_typeof(metadata::jsonb -> 'model_rpm_limit') = 'object'
            AND metadata::jsonb -> 'model_rpm_limit' <> '{}'::jsonb
        OR jsonb_typeof(metadata::jsonb -> 'model_tpm_limit') = 'object'
            AND metadata::jsonb -> 'model_tpm_limit' <> '{}'::jsonb)"#
    };
}

/// How many teams the filter selects.
const COUNT_TEAMS: &str = concat!(
    r#"SELECT count(*) FROM "LiteLLM_TeamTable" WHERE "#,
    team_filter!()
);

/// The `ORDER BY` of a page of teams, as [`TeamOrder::sort`] orders them.
fn team_order(order: TeamOrder, descending: bool) -> String {
    let dir = if descending { "DESC" } else { "ASC" };
    let column = match order {
        TeamOrder::TeamId => return format!(r#"team_id COLLATE "C" {dir}"#),
        TeamOrder::TeamAlias => r#"team_alias COLLATE "C""#,
        TeamOrder::CreatedAt => "created_at",
        TeamOrder::Spend => "spend",
    };
    format!(r#"{column} {dir} NULLS LAST, team_id COLLATE "C""#)
}

/// One page of the teams `f` selects (`limit` from `offset`, in `order`),
/// and how many it selects in all.
pub async fn list_teams_page(
    c: &Client,
    f: &TeamFilter<'_>,
    order: TeamOrder,
    descending: bool,
    offset: i64,
    limit: i64,
) -> Result<(Vec<TeamRecord>, u64), Error> {
    let params: [&(dyn ToSql + Sync); 8] = [
        &f.team_id,
        &f.team_alias,
        &f.search,
        &f.organization_id,
        &f.user_id,
        &f.has_limits,
        &limit,
        &offset,
    ];
    let total: i64 = c.query_one(COUNT_TEAMS, &params[..6]).await?.try_get(0)?;
    if total == 0 || offset >= total {
        return Ok((Vec::new(), u64::try_from(total).unwrap_or(0)));
    }
    let sql = format!(
        "{SELECT_TEAM} WHERE {} ORDER BY {} LIMIT $7 OFFSET $8",
        team_filter!(),
        team_order(order, descending)
    );
    let teams = c
        .query(&sql, &params)
        .await?
        .iter()
        .map(team)
        .collect::<Result<_, _>>()?;
    Ok((teams, u64::try_from(total).unwrap_or(0)))
}

/// A user by id.
pub async fn get_user(c: &Client, id: &str) -> Result<Option<UserRecord>, Error> {
    let sql = format!("{SELECT_USER} WHERE user_id = $1");
    c.query_opt(&sql, &[&id])
        .await?
        .as_ref()
        .map(user)
        .transpose()
}

/// The users with these ids that exist.
pub async fn users(c: &Client, ids: &[String]) -> Result<Vec<UserRecord>, Error> {
    let sql = format!("{SELECT_USER} WHERE user_id = ANY($1)");
    c.query(&sql, &[&ids]).await?.iter().map(user).collect()
}

/// The teams of organizations `ids`, by organization then team id, at
/// most `per_org` of each.
pub async fn teams_of_orgs(
    c: &Client,
    ids: &[String],
    per_org: i64,
) -> Result<Vec<TeamRecord>, Error> {
    let sql = format!(
        r#"SELECT t.* FROM (SELECT *, row_number() OVER (PARTITION BY organization_id
            ORDER BY team_id COLLATE "C") AS gateway_rank FROM ({SELECT_TEAM} WHERE organization_id = ANY($1)) s) t
        WHERE gateway_rank <= $2 ORDER BY organization_id COLLATE "C", team_id COLLATE "C""#
    );
    c.query(&sql, &[&ids, &per_org])
        .await?
        .iter()
        .map(team)
        .collect()
}

/// The users [`UserFilter`] selects (`$1` search, `$2` email part, `$3`
/// role, `$4` team).
const USER_FILTER: &str = r#"($1::text IS NULL OR strpos(lower(user_id), lower($1)) > 0
        OR strpos(lower(COALESCE(user_email, '')), lower($1)) > 0)
    AND ($2::text IS NULL OR strpos(lower(COALESCE(user_email, '')), lower($2)) > 0)
    AND ($3::text IS NULL OR user_role = $3)
    AND ($4::text IS NULL OR $4 = ANY(teams))"#;

/// The users `f` selects newest first, `limit` from `offset`, and how
/// many it selects in all.
pub async fn list_users(
    c: &Client,
    f: &UserFilter<'_>,
    offset: i64,
    limit: i64,
) -> Result<(Vec<UserRecord>, i64), Error> {
    let params: [&(dyn ToSql + Sync); 6] =
        [&f.search, &f.user_email, &f.role, &f.team, &limit, &offset];
    let sql = format!(
        r#"{SELECT_USER} WHERE {USER_FILTER}
        ORDER BY created_at DESC NULLS LAST, user_id COLLATE "C" LIMIT $5 OFFSET $6"#
    );
    let users = c
        .query(&sql, &params)
        .await?
        .iter()
        .map(user)
        .collect::<Result<_, _>>()?;
    let count = format!(r#"SELECT count(*) FROM "LiteLLM_UserTable" WHERE {USER_FILTER}"#);
    let total: i64 = c.query_one(&count, &params[..4]).await?.try_get(0)?;
    Ok((users, total))
}

/// Inserts (`insert`, with its spend) or updates a team; `false` when the
/// insert collided or the update found nothing.
pub async fn write_team(c: &mut Client, t: &TeamRecord, insert: bool) -> Result<bool, Error> {
    let (reset, created, now) = (
        naive(t.budget_reset_at),
        naive(t.created_at),
        Utc::now().naive_utc(),
    );
    let metadata = json(&t.metadata);
    let model_max_budget = json(&t.model_max_budget);
    let windows = windows_json(&t.budget_limits);
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![
        &t.team_id,
        &t.team_alias,
        &t.models,
        &t.members,
        &t.max_budget,
        &t.budget_duration,
        &reset,
        &t.tpm_limit,
        &t.rpm_limit,
        &t.max_parallel_requests,
        &t.blocked,
        &t.allowed_model_region,
        &metadata,
        &created,
        &now,
        &t.organization_id,
        &model_max_budget,
        &windows,
        &t.default_team_member_models,
    ];
    let sql = if insert {
        params.push(&t.spend);
        INSERT_TEAM
    } else {
        UPDATE_TEAM
    };
    let tx = c.transaction().await?;
    if tx.execute(sql, &params).await? == 0 {
        return Ok(false);
    }
    let aliases = json(&t.model_aliases);
    let kept = tx.execute(UPDATE_ALIASES, &[&t.team_id, &aliases]).await?;
    if kept == 0 && !t.model_aliases.is_empty() {
        tx.execute(INSERT_ALIASES, &[&t.team_id, &aliases]).await?;
    }
    notify(&tx, &[Change::Team(t.team_id.clone())]).await?;
    tx.commit().await?;
    Ok(true)
}

/// A team's aliases written to the `LiteLLM_ModelTable` row it names.
const UPDATE_ALIASES: &str = r#"UPDATE "LiteLLM_ModelTable" SET aliases = $2::jsonb,
    updated_at = now()
WHERE id = (SELECT model_id FROM "LiteLLM_TeamTable" WHERE team_id = $1::text)"#;

/// A new `LiteLLM_ModelTable` row with a team's aliases, named by the team.
const INSERT_ALIASES: &str = r#"WITH m AS (INSERT INTO "LiteLLM_ModelTable" (aliases, created_by,
    updated_by) VALUES ($2::jsonb, 'default_user_id', 'default_user_id') RETURNING id)
UPDATE "LiteLLM_TeamTable" SET model_id = (SELECT id FROM m) WHERE team_id = $1::text"#;

/// Inserts (`insert`, with its spend) or updates a user; `false` when the
/// insert collided or the update found nothing.
pub async fn write_user(c: &mut Client, u: &UserRecord, insert: bool) -> Result<bool, Error> {
    let (reset, created, now) = (
        naive(u.budget_reset_at),
        naive(u.created_at),
        Utc::now().naive_utc(),
    );
    let metadata = json(&u.metadata);
    let model_max_budget = json(&u.model_max_budget);
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![
        &u.user_id,
        &u.user_email,
        &u.user_alias,
        &u.user_role,
        &u.teams,
        &u.models,
        &u.max_budget,
        &u.budget_duration,
        &reset,
        &u.tpm_limit,
        &u.rpm_limit,
        &u.max_parallel_requests,
        &metadata,
        &created,
        &now,
        &model_max_budget,
    ];
    let sql = if insert {
        params.push(&u.spend);
        INSERT_USER
    } else {
        UPDATE_USER
    };
    write(c, sql, &params, Change::User(u.user_id.clone())).await
}

/// Runs one insert or update and announces `change` if it touched a row.
async fn write(
    c: &mut Client,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    change: Change,
) -> Result<bool, Error> {
    let tx = c.transaction().await?;
    if tx.execute(sql, params).await? == 0 {
        return Ok(false);
    }
    notify(&tx, &[change]).await?;
    tx.commit().await?;
    Ok(true)
}

/// A team's aliases as its `LiteLLM_ModelTable` row holds them: an object,
/// or (as LiteLLM writes them, `json.dumps`ed) a string holding one.
fn aliases(v: Option<serde_json::Value>) -> serde_json::Map<String, serde_json::Value> {
    match v {
        Some(serde_json::Value::String(text)) => {
            serde_json::from_str::<serde_json::Map<_, _>>(&text).unwrap_or_default()
        }
        other => as_map(other),
    }
}

fn team(row: &Row) -> Result<TeamRecord, Error> {
    Ok(TeamRecord {
        team_id: row.try_get("team_id")?,
        team_alias: row.try_get("team_alias")?,
        organization_id: row.try_get("organization_id")?,
        models: row
            .try_get::<_, Option<Vec<String>>>("models")?
            .unwrap_or_default(),
        members: row
            .try_get::<_, Option<Vec<String>>>("members")?
            .unwrap_or_default(),
        spend: row.try_get::<_, Option<f64>>("spend")?.unwrap_or_default(),
        max_budget: row.try_get("max_budget")?,
        budget_duration: row.try_get("budget_duration")?,
        budget_reset_at: utc(row.try_get("budget_reset_at")?),
        tpm_limit: row.try_get("tpm_limit")?,
        rpm_limit: row.try_get("rpm_limit")?,
        max_parallel_requests: row.try_get("max_parallel_requests")?,
        blocked: row
            .try_get::<_, Option<bool>>("blocked")?
            .unwrap_or_default(),
        allowed_model_region: row.try_get("allowed_model_region")?,
        metadata: as_map(row.try_get("metadata")?),
        created_at: utc(row.try_get("created_at")?),
        model_max_budget: as_map(row.try_get("model_max_budget")?),
        model_spend: as_map(row.try_get("model_spend")?),
        budget_limits: read_windows(row.try_get("budget_limits")?),
        default_team_member_models: row
            .try_get::<_, Option<Vec<String>>>("default_team_member_models")?
            .unwrap_or_default(),
        model_aliases: aliases(row.try_get("model_aliases")?),
        litellm_fields: as_map(row.try_get("litellm_fields")?),
    })
}

fn user(row: &Row) -> Result<UserRecord, Error> {
    Ok(UserRecord {
        user_id: row.try_get("user_id")?,
        user_email: row.try_get("user_email")?,
        user_alias: row.try_get("user_alias")?,
        user_role: row.try_get("user_role")?,
        teams: row
            .try_get::<_, Option<Vec<String>>>("teams")?
            .unwrap_or_default(),
        models: row
            .try_get::<_, Option<Vec<String>>>("models")?
            .unwrap_or_default(),
        spend: row.try_get::<_, Option<f64>>("spend")?.unwrap_or_default(),
        max_budget: row.try_get("max_budget")?,
        budget_duration: row.try_get("budget_duration")?,
        budget_reset_at: utc(row.try_get("budget_reset_at")?),
        tpm_limit: row.try_get("tpm_limit")?,
        rpm_limit: row.try_get("rpm_limit")?,
        max_parallel_requests: row.try_get("max_parallel_requests")?,
        metadata: as_map(row.try_get("metadata")?),
        created_at: utc(row.try_get("created_at")?),
        model_max_budget: as_map(row.try_get("model_max_budget")?),
        model_spend: as_map(row.try_get("model_spend")?),
    })
}

/// Sets the spend of the row of `table` whose `id_column` is `id`, and
/// announces `change`; `false` if there is no such row.
pub async fn set_spend(
    c: &mut Client,
    table: &str,
    id_column: &str,
    id: &str,
    spend: f64,
    change: Change,
) -> Result<bool, Error> {
    // A spend reset also clears the spend per model.
    let sql = format!(
        "UPDATE {table} SET spend = $2::float8, model_spend = '{{}}'::jsonb WHERE {id_column} = $1"
    );
    write(c, &sql, &[&id, &spend], change).await
}

/// Deletes the rows of `table` with these ids and announces each; returns
/// the ids that existed, in the order asked.
pub async fn delete(
    c: &mut Client,
    table: &str,
    id_column: &str,
    ids: &[String],
    change: fn(String) -> Change,
) -> Result<Vec<String>, Error> {
    let tx = c.transaction().await?;
    let sql = format!("DELETE FROM {table} WHERE {id_column} = ANY($1) RETURNING {id_column}");
    let rows = tx.query(&sql, &[&ids]).await?;
    let existed: HashSet<String> = rows
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    let mut seen = HashSet::new();
    let deleted: Vec<String> = ids
        .iter()
        .filter(|id| existed.contains(*id) && seen.insert(id.as_str()))
        .cloned()
        .collect();
    let changes: Vec<Change> = deleted.iter().cloned().map(change).collect();
    notify(&tx, &changes).await?;
    tx.commit().await?;
    Ok(deleted)
}
