//! Budgets (`LiteLLM_BudgetTable`), organizations
//! (`LiteLLM_OrganizationTable`) and their members
//! (`LiteLLM_OrganizationMembership`), read and written as JSON rows:
//! `to_jsonb` out, `jsonb_populate_record` in (which gives each value its
//! column's type), naming only the columns the record carries, so columns
//! LiteLLM has that the gateway does not know keep their values or defaults.
//! Every change is one statement or one transaction.

use crate::store::orgs::OrgTable;
use crate::store::{MemberOp, MemberOutcome, OrgFilter, OrgMembership};
use serde_json::{Map, Value};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Error, Transaction};

const BUDGETS: &str = r#""LiteLLM_BudgetTable""#;
const ORGS: &str = r#""LiteLLM_OrganizationTable""#;
const MEMBERS: &str = r#""LiteLLM_OrganizationMembership""#;

/// The table and id column of `table`.
fn names(table: OrgTable) -> (&'static str, &'static str) {
    match table {
        OrgTable::Budget => (BUDGETS, "budget_id"),
        OrgTable::Organization => (ORGS, "organization_id"),
    }
}

/// The rows of `table` with these ids (all when `None`), by id.
pub async fn select(
    c: &Client,
    table: OrgTable,
    ids: Option<&[String]>,
) -> Result<Vec<Value>, Error> {
    let (name, id) = names(table);
    let rows = match ids {
        Some(ids) => {
            let sql = format!(
                r#"SELECT jsonb_strip_nulls(to_jsonb(t)) FROM {name} t WHERE {id} = ANY($1) ORDER BY {id} COLLATE "C""#
            );
            c.query(&sql, &[&ids]).await?
        }
        None => {
            let sql = format!(
                r#"SELECT jsonb_strip_nulls(to_jsonb(t)) FROM {name} t ORDER BY {id} COLLATE "C""#
            );
            c.query(&sql, &[]).await?
        }
    };
    rows.iter().map(|r| r.try_get(0)).collect()
}

/// One page of the organizations `f` selects, by id (`limit` from
/// `offset`), and how many it selects in all.
pub async fn organizations_page(
    c: &Client,
    f: &OrgFilter<'_>,
    offset: i64,
    limit: i64,
) -> Result<(Vec<Value>, u64), Error> {
    const WHERE: &str = r#"($1::text IS NULL OR organization_id = $1)
    AND ($2::text IS NULL OR strpos(lower(organization_alias), lower($2)) > 0)"#;
    let params: [&(dyn ToSql + Sync); 4] = [&f.org_id, &f.org_alias, &limit, &offset];
    let count = format!("SELECT count(*) FROM {ORGS} WHERE {WHERE}");
    let total: i64 = c.query_one(&count, &params[..2]).await?.try_get(0)?;
    let total_u = u64::try_from(total).unwrap_or(0);
    if total == 0 || offset >= total {
        return Ok((Vec::new(), total_u));
    }
    let sql = format!(
        r#"SELECT jsonb_strip_nulls(to_jsonb(t)) FROM {ORGS} t WHERE {WHERE}
        ORDER BY organization_id COLLATE "C" LIMIT $3 OFFSET $4"#
    );
    let rows = c.query(&sql, &params).await?;
    let rows = rows
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    Ok((rows, total_u))
}

/// `INSERT INTO {name} (cols) SELECT cols FROM jsonb_populate_record(..)`
/// of the non-null members of `row` (so absent ones take their defaults);
/// `false` when the id is taken.
async fn insert_row(c: &Transaction<'_>, name: &str, row: &Value) -> Result<bool, Error> {
    let columns: Vec<&str> = match row {
        Value::Object(map) => map
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, _)| k.as_str())
            .collect(),
        _ => Vec::new(),
    };
    let list = columns.join(", ");
    let sql = format!(
        "INSERT INTO {name} ({list}) SELECT {list} FROM jsonb_populate_record(NULL::{name}, $1::jsonb) \
         ON CONFLICT DO NOTHING"
    );
    Ok(c.execute(&sql, &[row]).await? > 0)
}

/// Inserts a budget row; `false` when its id is taken.
pub async fn insert_budget(c: &mut Client, row: &Value) -> Result<bool, Error> {
    let tx = c.transaction().await?;
    let inserted = insert_row(&tx, BUDGETS, row).await?;
    tx.commit().await?;
    Ok(inserted)
}

/// Inserts `budget` (when given) then `org`, in one transaction; which
/// of them collided, if one did.
pub async fn insert_org(
    c: &mut Client,
    org: &Value,
    budget: Option<&Value>,
) -> Result<Result<(), &'static str>, Error> {
    let tx = c.transaction().await?;
    if let Some(budget) = budget {
        if !insert_row(&tx, BUDGETS, budget).await? {
            return Ok(Err("budget"));
        }
    }
    if !insert_row(&tx, ORGS, org).await? {
        return Ok(Err("organization"));
    }
    tx.commit().await?;
    Ok(Ok(()))
}

/// Writes `fields` (checked against [`OrgTable::columns`] by the caller) of
/// row `id` in one statement, `updated_at` with them; an organization's
/// `metadata` is merged into the stored one, as LiteLLM's update merges it.
/// `false` when the row does not exist.
pub async fn patch(
    c: &Client,
    table: OrgTable,
    id: &str,
    fields: &Map<String, Value>,
) -> Result<bool, Error> {
    let (name, id_column) = names(table);
    let set: Vec<String> = fields
        .keys()
        .map(|k| match (table, k.as_str()) {
            (OrgTable::Organization, "metadata") => {
                "metadata = COALESCE(t.metadata, '{}'::jsonb) || COALESCE(r.metadata, '{}'::jsonb)"
                    .to_string()
            }
            _ => format!("{k} = r.{k}"),
        })
        .chain(std::iter::once(
            "updated_at = CURRENT_TIMESTAMP".to_string(),
        ))
        .collect();
    let sql = format!(
        "UPDATE {name} t SET {} FROM jsonb_populate_record(NULL::{name}, $2::jsonb) AS r \
         WHERE t.{id_column} = $1::text",
        set.join(", ")
    );
    let values = Value::Object(fields.clone());
    Ok(c.execute(&sql, &[&id, &values]).await? > 0)
}

/// Deletes a budget row; the row as it was, when it existed.
pub async fn delete_budget(c: &Client, id: &str) -> Result<Option<Value>, Error> {
    let sql = format!(
        "DELETE FROM {BUDGETS} t WHERE budget_id = $1 RETURNING jsonb_strip_nulls(to_jsonb(t))"
    );
    c.query_opt(&sql, &[&id])
        .await?
        .map(|r| r.try_get(0))
        .transpose()
}

/// Deletes an organization and its memberships in one transaction, and
/// detaches its teams and keys (LiteLLM's foreign keys set them NULL); the
/// row as it was, when it existed.
pub async fn delete_org(c: &mut Client, id: &str) -> Result<Option<Value>, Error> {
    let tx = c.transaction().await?;
    tx.execute(
        &format!("DELETE FROM {MEMBERS} WHERE organization_id = $1"),
        &[&id],
    )
    .await?;
    for table in [r#""LiteLLM_TeamTable""#, r#""LiteLLM_VerificationToken""#] {
        let sql = format!("UPDATE {table} SET organization_id = NULL WHERE organization_id = $1");
        tx.execute(&sql, &[&id]).await?;
    }
    let sql = format!(
        "DELETE FROM {ORGS} t WHERE organization_id = $1 RETURNING jsonb_strip_nulls(to_jsonb(t))"
    );
    let row = tx.query_opt(&sql, &[&id]).await?;
    tx.commit().await?;
    row.map(|r| r.try_get(0)).transpose()
}

/// The memberships of an organization, by user id.
pub async fn members(c: &Client, org_id: &str) -> Result<Vec<Value>, Error> {
    let sql = format!(
        r#"SELECT jsonb_strip_nulls(to_jsonb(t)) FROM {MEMBERS} t WHERE organization_id = $1 ORDER BY user_id COLLATE "C""#
    );
    let rows = c.query(&sql, &[&org_id]).await?;
    rows.iter().map(|r| r.try_get(0)).collect()
}

/// The memberships of organizations `ids`, by organization then user id.
pub async fn members_of(c: &Client, ids: &[String]) -> Result<Vec<Value>, Error> {
    let sql = format!(
        r#"SELECT jsonb_strip_nulls(to_jsonb(t)) FROM {MEMBERS} t WHERE organization_id = ANY($1)
        ORDER BY organization_id COLLATE "C", user_id COLLATE "C""#
    );
    let rows = c.query(&sql, &[&ids]).await?;
    rows.iter().map(|r| r.try_get(0)).collect()
}

/// Applies one membership change; an added member's user row is created
/// when missing (LiteLLM's `internal_user`), in the same transaction.
pub async fn change_member(
    c: &mut Client,
    op: MemberOp,
    m: &OrgMembership,
    user_email: Option<&str>,
) -> Result<MemberOutcome, Error> {
    let tx = c.transaction().await?;
    let exists = tx
        .query_opt(
            &format!("SELECT 1 FROM {ORGS} WHERE organization_id = $1 FOR SHARE"),
            &[&m.organization_id],
        )
        .await?
        .is_some();
    if !exists {
        return Ok(MemberOutcome::NoTeam);
    }
    let (user, org) = (&m.user_id, &m.organization_id);
    let changed = match op {
        MemberOp::Add => {
            tx.execute(
                r#"INSERT INTO "LiteLLM_UserTable" (user_id, user_email, user_role, teams)
                VALUES ($1, $2, 'internal_user', ARRAY[]::text[]) ON CONFLICT (user_id) DO NOTHING"#,
                &[user, &user_email],
            )
            .await?;
            let sql = format!(
                "INSERT INTO {MEMBERS} (user_id, organization_id, user_role, spend, budget_id, \
                 created_at, updated_at) VALUES ($1, $2, $3, 0.0, $4, CURRENT_TIMESTAMP, \
                 CURRENT_TIMESTAMP) ON CONFLICT (user_id, organization_id) DO NOTHING"
            );
            tx.execute(&sql, &[user, org, &m.user_role, &m.budget_id])
                .await?
        }
        MemberOp::Update => {
            let sql = format!(
                "UPDATE {MEMBERS} SET user_role = COALESCE($3, user_role), \
                 budget_id = COALESCE($4, budget_id), updated_at = CURRENT_TIMESTAMP \
                 WHERE user_id = $1 AND organization_id = $2"
            );
            tx.execute(&sql, &[user, org, &m.user_role, &m.budget_id])
                .await?
        }
        MemberOp::Remove => {
            let sql = format!("DELETE FROM {MEMBERS} WHERE user_id = $1 AND organization_id = $2");
            tx.execute(&sql, &[user, org]).await?
        }
    };
    tx.commit().await?;
    Ok(if changed > 0 {
        MemberOutcome::Changed
    } else {
        MemberOutcome::Unchanged
    })
}
