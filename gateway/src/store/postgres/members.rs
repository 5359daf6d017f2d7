//! Row patches (only the changed columns of a key, team or user), per-model
//! budget windows of keys, and team memberships (`LiteLLM_TeamTable.members` and `members_with_roles`,
//! `LiteLLM_UserTable.teams`) changed by single statements, so concurrent
//! changes of one team serialize on its row lock and none is lost, and
//! users listed a page at a time.

use super::notify;
use crate::store::{Change, MemberOp, MemberOutcome, Membership, RowKind, TeamMember};
use serde_json::{Map, Value};
use std::collections::HashMap;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Error};

/// `members_with_roles` as a JSON array (LiteLLM's column defaults to `{}`)
/// without the entry of user `$2`.
const OTHER_ROLES: &str = r#"(SELECT COALESCE(jsonb_agg(e), '[]'::jsonb)
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(members_with_roles) = 'array'
        THEN members_with_roles ELSE '[]'::jsonb END) AS e
    WHERE e->>'user_id' IS DISTINCT FROM $2::text)"#;

/// The stored email of user `$2` in `members_with_roles`.
const OLD_EMAIL: &str = r#"(SELECT e->>'user_email'
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(members_with_roles) = 'array'
        THEN members_with_roles ELSE '[]'::jsonb END) AS e
    WHERE e->>'user_id' = $2::text LIMIT 1)"#;

/// The new entry of user `$2`: email `$3` (else the stored one), role `$4`.
fn entry() -> String {
    format!(
        "jsonb_build_array(jsonb_build_object('user_id', $2::text, \
         'user_email', COALESCE($3::text, {OLD_EMAIL}), 'role', $4::text))"
    )
}

/// Applies `op` for `m` on team `team_id` and announces the team and the
/// user, in one transaction.
pub async fn change(
    c: &mut Client,
    team_id: &str,
    op: MemberOp,
    m: &TeamMember,
) -> Result<MemberOutcome, Error> {
    let members = "COALESCE(members, ARRAY[]::text[])";
    // On the roster: in `members`, or in `members_with_roles` alone (LiteLLM
    // keeps its roster there).
    let on_roster = format!(
        "($2::text = ANY({members}) OR (jsonb_typeof(members_with_roles) = 'array' \
         AND members_with_roles @> jsonb_build_array(jsonb_build_object('user_id', $2::text))))"
    );
    let team_sql = match op {
        MemberOp::Add => format!(
            r#"UPDATE "LiteLLM_TeamTable" SET members = array_append({members}, $2::text),
                members_with_roles = {OTHER_ROLES} || {entry},
                updated_at = CURRENT_TIMESTAMP
            WHERE team_id = $1::text AND NOT {on_roster}"#,
            entry = entry()
        ),
        MemberOp::Update => format!(
            r#"UPDATE "LiteLLM_TeamTable" SET members_with_roles = {OTHER_ROLES} || {entry},
                updated_at = CURRENT_TIMESTAMP
            WHERE team_id = $1::text AND {on_roster}"#,
            entry = entry()
        ),
        MemberOp::Remove => format!(
            r#"UPDATE "LiteLLM_TeamTable" SET members = array_remove({members}, $2::text),
                members_with_roles = {OTHER_ROLES}, updated_at = CURRENT_TIMESTAMP
            WHERE team_id = $1::text AND {on_roster}"#
        ),
    };
    let email = m.user_email.as_deref();
    let params: Vec<&(dyn ToSql + Sync)> = match op {
        MemberOp::Remove => vec![&team_id, &m.user_id],
        _ => vec![&team_id, &m.user_id, &email, &m.role],
    };
    let tx = c.transaction().await?;
    let changed = tx.execute(&team_sql, &params).await?;
    if changed == 0 {
        let exists = tx
            .query_opt(
                r#"SELECT 1 FROM "LiteLLM_TeamTable" WHERE team_id = $1"#,
                &[&team_id],
            )
            .await?
            .is_some();
        tx.rollback().await?;
        return Ok(if exists {
            MemberOutcome::Unchanged
        } else {
            MemberOutcome::NoTeam
        });
    }
    let teams = r#"COALESCE("LiteLLM_UserTable".teams, ARRAY[]::text[])"#;
    let user_sql = if op == MemberOp::Remove {
        format!(
            r#"UPDATE "LiteLLM_UserTable" SET teams = array_remove({teams}, $1::text),
                updated_at = CURRENT_TIMESTAMP
            WHERE user_id = $2::text"#
        )
    } else {
        format!(
            r#"INSERT INTO "LiteLLM_UserTable" (user_id, user_email, user_role, teams)
            VALUES ($2::text, $3::text, 'internal_user', ARRAY[$1::text])
            ON CONFLICT (user_id) DO UPDATE SET teams = CASE WHEN $1::text = ANY({teams})
                THEN {teams} ELSE array_append({teams}, $1::text) END"#
        )
    };
    tx.execute(&user_sql, &params[..params.len().min(3)])
        .await?;
    if op == MemberOp::Remove {
        // The member's spend and budget row link in the team go with it,
        // as LiteLLM deletes the membership.
        tx.execute(
            r#"DELETE FROM "LiteLLM_TeamMembership" WHERE team_id = $1 AND user_id = $2"#,
            &[&team_id, &m.user_id],
        )
        .await?;
    }
    notify(
        &tx,
        &[
            Change::Team(team_id.to_string()),
            Change::User(m.user_id.clone()),
        ],
    )
    .await?;
    tx.commit().await?;
    Ok(MemberOutcome::Changed)
}

/// `user_id`'s membership row in `team_id`, when it has one.
pub async fn membership(
    c: &Client,
    team_id: &str,
    user_id: &str,
) -> Result<Option<Membership>, Error> {
    let row = c
        .query_opt(
            r#"SELECT spend::float8 AS spend, budget_id FROM "LiteLLM_TeamMembership"
            WHERE team_id = $1 AND user_id = $2"#,
            &[&team_id, &user_id],
        )
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    Ok(Some(Membership {
        spend: row.try_get::<_, Option<f64>>("spend")?.unwrap_or(0.0),
        budget_id: row.try_get("budget_id")?,
    }))
}

/// Links the membership of `user_id` in `team_id` to `budget_id` (made
/// when missing) and announces the team, in one transaction.
pub async fn link_budget(
    c: &mut Client,
    team_id: &str,
    user_id: &str,
    budget_id: Option<&str>,
) -> Result<(), Error> {
    let tx = c.transaction().await?;
    tx.execute(
        r#"INSERT INTO "LiteLLM_TeamMembership" (user_id, team_id, budget_id)
        VALUES ($1::text, $2::text, $3::text)
        ON CONFLICT (user_id, team_id) DO UPDATE SET budget_id = EXCLUDED.budget_id"#,
        &[&user_id, &team_id, &budget_id],
    )
    .await?;
    notify(&tx, &[Change::Team(team_id.to_string())]).await?;
    tx.commit().await
}

/// Links the memberships of `user_ids` in `team_id` without a budget row
/// (made when missing) to `budget_id` and announces the team, in one
/// transaction.
pub async fn link_unlinked(
    c: &mut Client,
    team_id: &str,
    user_ids: &[String],
    budget_id: &str,
) -> Result<(), Error> {
    let tx = c.transaction().await?;
    tx.execute(
        r#"INSERT INTO "LiteLLM_TeamMembership" (user_id, team_id, budget_id)
        SELECT u, $1::text, $3::text FROM unnest($2::text[]) AS u
        ON CONFLICT (user_id, team_id) DO UPDATE SET budget_id = EXCLUDED.budget_id
        WHERE "LiteLLM_TeamMembership".budget_id IS NULL"#,
        &[&team_id, &user_ids, &budget_id],
    )
    .await?;
    notify(&tx, &[Change::Team(team_id.to_string())]).await?;
    tx.commit().await
}

/// The teams with a membership linked to `budget_id`.
pub async fn teams_of_budget(c: &Client, budget_id: &str) -> Result<Vec<String>, Error> {
    let rows = c
        .query(
            r#"SELECT DISTINCT team_id FROM "LiteLLM_TeamMembership" WHERE budget_id = $1"#,
            &[&budget_id],
        )
        .await?;
    rows.iter().map(|r| r.try_get(0)).collect()
}

/// The ids of at most two users with email `email`.
pub async fn users_with_email(c: &Client, email: &str) -> Result<Vec<String>, Error> {
    let rows = c
        .query(
            r#"SELECT user_id FROM "LiteLLM_UserTable" WHERE user_email = $1
            ORDER BY user_id LIMIT 2"#,
            &[&email],
        )
        .await?;
    rows.iter().map(|r| r.try_get(0)).collect()
}

/// Zeroes the spend of the memberships linked to `budget_ids` (budget
/// rows whose period just ended; LiteLLM's reset cascade), keeping their
/// lifetime in `total_spend`; returns the teams changed.
pub async fn reset_linked(
    tx: &tokio_postgres::Transaction<'_>,
    budget_ids: &[String],
) -> Result<Vec<String>, Error> {
    if budget_ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows = tx
        .query(
            r#"UPDATE "LiteLLM_TeamMembership"
            SET total_spend = GREATEST(total_spend, spend), spend = 0
            WHERE budget_id = ANY($1) RETURNING team_id"#,
            &[&budget_ids],
        )
        .await?;
    let mut teams: Vec<String> = rows
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    teams.sort();
    teams.dedup();
    Ok(teams)
}

/// The team's `members_with_roles`; entries that are not LiteLLM's
/// `Member` shape are skipped.
pub async fn roles(c: &Client, team_id: &str) -> Result<Vec<TeamMember>, Error> {
    let row = c
        .query_opt(
            r#"SELECT members_with_roles::jsonb AS m FROM "LiteLLM_TeamTable"
            WHERE team_id = $1"#,
            &[&team_id],
        )
        .await?;
    match row {
        Some(row) => Ok(members_of(row.try_get("m")?)),
        None => Ok(Vec::new()),
    }
}

/// The `members_with_roles` of each of `team_ids` that exists, in one
/// query.
pub async fn roles_of_teams(
    c: &Client,
    team_ids: &[String],
) -> Result<HashMap<String, Vec<TeamMember>>, Error> {
    let rows = c
        .query(
            r#"SELECT team_id, members_with_roles::jsonb AS m FROM "LiteLLM_TeamTable"
            WHERE team_id = ANY($1)"#,
            &[&team_ids],
        )
        .await?;
    rows.into_iter()
        .map(|row| Ok((row.try_get("team_id")?, members_of(row.try_get("m")?))))
        .collect()
}

/// The well-formed entries of a stored `members_with_roles` (anything but
/// an array, LiteLLM's `{}` default included, holds none).
fn members_of(value: Value) -> Vec<TeamMember> {
    let entries = match value {
        Value::Array(items) => items,
        _ => Vec::new(),
    };
    entries
        .into_iter()
        .filter_map(|e| serde_json::from_value::<TeamMember>(e).ok())
        .filter(|m| !m.user_id.is_empty())
        .collect()
}

/// Writes `fields` of row `id` (names checked against
/// [`RowKind::columns`] by the caller) from one JSON object through
/// `jsonb_populate_record`, which gives each value its column's type, and
/// announces the row; `false` when it does not exist.
pub async fn patch(
    c: &mut Client,
    kind: RowKind,
    id: &str,
    fields: &Map<String, Value>,
) -> Result<bool, Error> {
    let (table, id_column) = table_of(kind);
    let set: Vec<String> = fields
        .keys()
        .map(|column| format!("{column} = r.{column}"))
        .chain(std::iter::once(
            "updated_at = CURRENT_TIMESTAMP".to_string(),
        ))
        .collect();
    let sql = format!(
        "UPDATE {table} t SET {} FROM jsonb_populate_record(NULL::{table}, $2::jsonb) AS r \
         WHERE t.{id_column} = $1::text",
        set.join(", ")
    );
    let values = Value::Object(fields.clone());
    let tx = c.transaction().await?;
    let found = tx.execute(&sql, &[&id, &values]).await? > 0;
    if found {
        notify(&tx, &[kind.change(id)]).await?;
    }
    tx.commit().await?;
    Ok(found)
}

/// The table of rows of `kind` and its id column.
fn table_of(kind: RowKind) -> (&'static str, &'static str) {
    match kind {
        RowKind::Key => (r#""LiteLLM_VerificationToken""#, "token"),
        RowKind::Team => (r#""LiteLLM_TeamTable""#, "team_id"),
        RowKind::User => (r#""LiteLLM_UserTable""#, "user_id"),
    }
}

/// [`Store::start_model_window`](crate::store::Store::start_model_window):
/// `$1` id, `$2` model, `$3` window start; the row is announced.
pub async fn start_model_window(
    c: &mut Client,
    kind: RowKind,
    id: &str,
    model: &str,
    start: &str,
) -> Result<bool, Error> {
    let windows = crate::store::MODEL_WINDOWS;
    let (table, id_column) = table_of(kind);
    let sql = format!(
        r#"UPDATE {table} SET
            model_spend = CASE WHEN metadata #>> ARRAY['{windows}', $2::text] IS NULL
                THEN model_spend ELSE COALESCE(model_spend, '{{}}'::jsonb) - $2::text END,
            metadata = jsonb_set(
                CASE WHEN jsonb_typeof(metadata -> '{windows}') = 'object' THEN metadata
                    ELSE COALESCE(metadata, '{{}}'::jsonb) || jsonb_build_object('{windows}', '{{}}'::jsonb) END,
                ARRAY['{windows}', $2::text], to_jsonb($3::text))
        WHERE {id_column} = $1::text
            AND COALESCE(metadata #>> ARRAY['{windows}', $2::text], '') < $3::text"#
    );
    let tx = c.transaction().await?;
    let changed = tx.execute(&sql, &[&id, &model, &start]).await? > 0;
    if changed {
        notify(&tx, &[kind.change(id)]).await?;
    }
    tx.commit().await?;
    Ok(changed)
}
