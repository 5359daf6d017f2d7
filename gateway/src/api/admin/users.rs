//! `/user/*`: internal users. As in LiteLLM, `/user/new` also issues a key
//! for the new user.

use super::accepted;
use super::body::{after, bad_field, missing, parse, parse_accepting, Patch};
use super::db::{self, run, store_err};
use super::issue::{create, ensure_alias_free, issued, new_record, random_key};
use super::object;
use super::query::Query;
use crate::error::GatewayError;
use crate::state::Worker;
use crate::store::{Change, KeyRecord, MemberOp, RowKind, TeamMember, UserFilter, UserRecord};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// The roles LiteLLM gives users.
const ROLES: [&str; 4] = [
    "proxy_admin",
    "proxy_admin_viewer",
    "internal_user",
    "internal_user_viewer",
];

/// The body of `/user/new` and `/user/update` (LiteLLM's `NewUserRequest`
/// and `UpdateUserRequest`, the fields this gateway enforces).
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UserRequest {
    user_id: Option<String>,
    user_email: Patch<String>,
    user_alias: Patch<String>,
    user_role: Patch<String>,
    models: Patch<Vec<String>>,
    spend: Patch<f64>,
    max_budget: Patch<f64>,
    budget_duration: Patch<String>,
    tpm_limit: Patch<i64>,
    rpm_limit: Patch<i64>,
    max_parallel_requests: Patch<i64>,
    metadata: Patch<Map<String, Value>>,
    teams: Option<Vec<String>>,
    auto_create_key: Option<bool>,
    key_alias: Option<String>,
    duration: Option<String>,
    aliases: Option<Map<String, Value>>,
    model_max_budget: Patch<Map<String, Value>>,
}

impl UserRequest {
    /// Takes `spend`, checked.
    fn take_spend(&mut self) -> Result<Option<f64>, GatewayError> {
        let mut spend = None;
        std::mem::take(&mut self.spend).apply_amount("spend", &mut spend)?;
        Ok(spend)
    }

    /// Refuses the fields only `/user/new` takes.
    fn only_updates(&self) -> Result<(), GatewayError> {
        let new_only = [
            ("teams", self.teams.is_some()),
            ("auto_create_key", self.auto_create_key.is_some()),
            ("key_alias", self.key_alias.is_some()),
            ("duration", self.duration.is_some()),
            ("aliases", self.aliases.is_some()),
        ];
        match new_only.iter().find(|(_, given)| *given) {
            Some((name, _)) => Err(bad_field(name, "only /user/new takes this field")),
            None => Ok(()),
        }
    }

    /// The settings of the key `/user/new` issues; `None` when
    /// `auto_create_key` is false.
    fn take_key_fields(&mut self) -> Option<NewUserKey> {
        if !self.auto_create_key.take().unwrap_or(true) {
            return None;
        }
        Some(NewUserKey {
            key_alias: self.key_alias.take(),
            duration: self.duration.take(),
            aliases: self.aliases.take().unwrap_or_default(),
        })
    }

    /// Applies the given user fields to `u` as of `now`.
    fn apply(self, u: &mut UserRecord, now: DateTime<Utc>) -> Result<(), GatewayError> {
        if let Patch::Set(role) = &self.user_role {
            if !ROLES.contains(&role.as_str()) {
                return Err(bad_field("user_role", format!("must be one of {ROLES:?}")));
            }
        }
        self.user_email.apply(&mut u.user_email);
        self.user_alias.apply(&mut u.user_alias);
        self.user_role.apply(&mut u.user_role);
        self.models.apply_or_default(&mut u.models);
        self.max_budget
            .apply_amount("max_budget", &mut u.max_budget)?;
        self.budget_duration
            .apply_period(&mut u.budget_duration, &mut u.budget_reset_at, now)?;
        self.tpm_limit.apply_limit("tpm_limit", &mut u.tpm_limit)?;
        self.rpm_limit.apply_limit("rpm_limit", &mut u.rpm_limit)?;
        self.max_parallel_requests
            .apply_limit("max_parallel_requests", &mut u.max_parallel_requests)?;
        self.metadata.apply_or_default(&mut u.metadata);
        if let Patch::Set(budgets) = &self.model_max_budget {
            super::keys::per_model_budgets(budgets)?;
        }
        self.model_max_budget
            .apply_or_default(&mut u.model_max_budget);
        Ok(())
    }
}

/// The settings of a new user's key.
struct NewUserKey {
    key_alias: Option<String>,
    duration: Option<String>,
    aliases: Map<String, Value>,
}

impl NewUserKey {
    /// A key for `user`; returns it plain and as a row. Unlike LiteLLM it
    /// does not copy the user's models: the user's row governs them, so
    /// `/user/update` changes what the key may call.
    fn issue(
        self,
        user: &UserRecord,
        now: DateTime<Utc>,
    ) -> Result<(String, KeyRecord), GatewayError> {
        let plain = random_key()?;
        let mut key = new_record(&plain, now);
        key.user_id = Some(user.user_id.clone());
        key.key_alias = self.key_alias;
        key.aliases = self.aliases;
        if let Some(d) = self.duration {
            key.expires = Some(after("duration", now, &d)?);
        }
        Ok((plain, key))
    }
}

/// `POST /user/new`: `user_id` is a new uuid when not given; the user joins
/// `teams` (which must exist); the answer carries the new key as `key`.
pub async fn new(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let (mut req, _): (UserRequest, _) = parse_accepting(body, accepted::USER)?;
    let user_id = match req.user_id.take() {
        Some(id) if id.is_empty() => return Err(bad_field("user_id", "must not be empty")),
        Some(id) => id,
        None => uuid::Uuid::new_v4().to_string(),
    };
    let now = Utc::now();
    let mut user = UserRecord {
        user_id,
        teams: req.teams.take().unwrap_or_default(),
        spend: req.take_spend()?.unwrap_or(0.0),
        created_at: Some(now),
        ..Default::default()
    };
    let mut seen = std::collections::HashSet::new();
    user.teams.retain(|t| seen.insert(t.clone()));
    let key_fields = req.take_key_fields();
    req.apply(&mut user, now)?;
    let key = key_fields.map(|f| f.issue(&user, now)).transpose()?;
    let (user, key) = run(worker, move |ctx| async move {
        let mut teams = Vec::new();
        for id in &user.teams {
            match ctx.store().get_team(id).await.map_err(store_err)? {
                Some(team) => teams.push(team),
                None => return Err(bad_field("teams", format!("team '{id}' does not exist"))),
            }
        }
        if let Some((_, k)) = &key {
            ensure_alias_free(&ctx, k.key_alias.as_deref(), &k.token).await?;
        }
        ctx.store().insert_user(&user).await.map_err(store_err)?;
        let mut changes = vec![Change::User(user.user_id.clone())];
        let member = TeamMember {
            user_id: user.user_id.clone(),
            user_email: user.user_email.clone(),
            role: "user".into(),
        };
        for team in teams {
            // One statement per team: a concurrent change of the team is kept.
            ctx.store()
                .change_team_member(&team.team_id, MemberOp::Add, &member)
                .await
                .map_err(store_err)?;
            changes.push(Change::Team(team.team_id));
        }
        ctx.publish(&changes).await;
        if let Some((_, k)) = &key {
            create(&ctx, k).await?;
        }
        Ok((user, key))
    })
    .await?;
    let mut out = match &key {
        Some((plain, k)) => issued(k, plain, None),
        None => Map::from_iter([("key".to_string(), Value::Null)]),
    };
    out.extend(object(&user));
    Ok(Value::Object(out))
}

/// `GET /user/info?user_id=`: the user, its keys and its teams.
pub async fn info(worker: &Worker, mut q: Query) -> Result<Value, GatewayError> {
    let user_id = q.take("user_id").ok_or_else(|| missing("user_id"))?;
    q.finish()?;
    let id = user_id.clone();
    let (user, keys, teams) = run(worker, move |ctx| async move {
        let user = db::user(&ctx, &id).await?;
        let keys = ctx
            .store()
            .list_keys(Some(&id), None)
            .await
            .map_err(store_err)?;
        let mut teams = Vec::new();
        for team in &user.teams {
            teams.extend(ctx.store().get_team(team).await.map_err(store_err)?);
        }
        let teams = super::members::teams_with_roles(&ctx, &teams).await?;
        Ok((user, keys, teams))
    })
    .await?;
    let keys: Vec<Value> = keys.iter().map(|k| Value::Object(object(k))).collect();
    Ok(json!({
        "user_id": user_id,
        "user_info": object(&user),
        "keys": keys,
        "teams": teams,
    }))
}

/// `POST /user/update`: the fields given change; `spend` sets the spend.
pub async fn update(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let (mut req, _): (UserRequest, _) = parse_accepting(body, accepted::USER)?;
    req.only_updates()?;
    let user_id = req.user_id.take().ok_or_else(|| missing("user_id"))?;
    let spend = req.take_spend()?;
    let user = run(worker, move |ctx| async move {
        let old = db::user(&ctx, &user_id).await?;
        let mut user = old.clone();
        req.apply(&mut user, Utc::now())?;
        let store = ctx.store();
        let written = db::write_changes(&ctx, RowKind::User, &user_id, (&old, &user), || async {
            store.update_user(&user).await
        })
        .await?;
        if !written {
            return Err(GatewayError::NotFound(format!("User {user_id}")));
        }
        if let Some(spend) = spend {
            ctx.store()
                .set_user_spend(&user_id, spend)
                .await
                .map_err(store_err)?;
        }
        ctx.publish(&[Change::User(user_id.clone())]).await;
        db::user(&ctx, &user_id).await
    })
    .await?;
    if let Some(spend) = spend {
        crate::budget::fleet::set_spend(&worker.shared.limiter, "user", &user.user_id, spend).await;
    }
    Ok(json!({"user_id": user.user_id, "data": object(&user)}))
}

/// The most users one `/user/list` page holds (LiteLLM's cap).
const MAX_PAGE_SIZE: i64 = 100;

/// `GET /user/list?page=&page_size=&user_ids=`: users newest first, a page
/// at a time (LiteLLM's defaults: page 1 of 25), those LiteLLM's filters
/// select (`search`: part of the id or email, `user_email`: part of the
/// email, both ignoring case; `role`; `team`), or those `user_ids`
/// (comma-separated) names. LiteLLM's `sort_by`/`sort_order` are accepted
/// and the order stays newest first; its organization and SSO filters are
/// refused rather than ignored.
pub async fn list(worker: &Worker, mut q: Query) -> Result<Value, GatewayError> {
    let page: i64 = q.take_parsed("page")?.unwrap_or(1);
    let page_size: i64 = q.take_parsed("page_size")?.unwrap_or(25);
    if !(1..=1_000_000).contains(&page) {
        return Err(bad_field("page", "must be from 1 to 1000000"));
    }
    if !(1..=MAX_PAGE_SIZE).contains(&page_size) {
        return Err(bad_field(
            "page_size",
            format!("must be from 1 to {MAX_PAGE_SIZE}"),
        ));
    }
    let ids: Option<Vec<String>> = q.take("user_ids").map(|v| {
        v.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    });
    for ignored in ["sort_by", "sort_order"] {
        q.take(ignored);
    }
    let text = |q: &mut Query, name: &str| q.take(name).filter(|v| !v.is_empty());
    let (search, user_email) = (text(&mut q, "search"), text(&mut q, "user_email"));
    let (role, team) = (text(&mut q, "role"), text(&mut q, "team"));
    for unsupported in ["organization_id", "organization_ids", "sso_user_ids"] {
        if q.take(unsupported).is_some() {
            return Err(bad_field(unsupported, "this filter is not supported here"));
        }
    }
    q.finish()?;
    let offset = (page - 1) * page_size;
    let (users, total) = run(worker, move |ctx| async move {
        match ids {
            Some(ids) => {
                let mut users = Vec::new();
                for id in ids.iter().take(MAX_PAGE_SIZE as usize) {
                    users.extend(ctx.store().get_user(id).await.map_err(store_err)?);
                }
                let total = users.len() as i64;
                let page = users
                    .into_iter()
                    .skip(offset as usize)
                    .take(page_size as usize)
                    .collect::<Vec<_>>();
                Ok((page, total))
            }
            None => {
                let filter = UserFilter {
                    search: search.as_deref(),
                    user_email: user_email.as_deref(),
                    role: role.as_deref(),
                    team: team.as_deref(),
                };
                ctx.store()
                    .list_users(filter, offset, page_size)
                    .await
                    .map_err(store_err)
            }
        }
    })
    .await?;
    let users: Vec<Value> = users.iter().map(|u| Value::Object(object(u))).collect();
    let total_pages = (total + page_size - 1) / page_size;
    Ok(json!({
        "users": users,
        "total": total,
        "page": page,
        "page_size": page_size,
        "total_pages": total_pages,
    }))
}

/// The body of `/user/delete`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteUsers {
    user_ids: Vec<String>,
}

/// `POST /user/delete`: the users, their keys and their team memberships;
/// 404 when none existed.
pub async fn delete(worker: &Worker, body: &[u8]) -> Result<Value, GatewayError> {
    let DeleteUsers { user_ids } = parse(body)?;
    if user_ids.is_empty() {
        return Err(bad_field("user_ids", "name at least one"));
    }
    let asked = user_ids.join(", ");
    let gone = run(worker, move |ctx| async move {
        let mut changes = Vec::new();
        for id in &user_ids {
            let Some(user) = ctx.store().get_user(id).await.map_err(store_err)? else {
                continue;
            };
            let keys = ctx
                .store()
                .list_keys(Some(id), None)
                .await
                .map_err(store_err)?;
            let tokens: Vec<String> = keys.into_iter().map(|k| k.token).collect();
            let deleted = ctx.store().delete_keys(&tokens).await.map_err(store_err)?;
            changes.extend(deleted.into_iter().map(Change::Key));
            let member = TeamMember {
                user_id: id.clone(),
                ..Default::default()
            };
            for team_id in &user.teams {
                ctx.store()
                    .change_team_member(team_id, MemberOp::Remove, &member)
                    .await
                    .map_err(store_err)?;
                changes.push(Change::Team(team_id.clone()));
            }
        }
        let gone = ctx
            .store()
            .delete_users(&user_ids)
            .await
            .map_err(store_err)?;
        changes.extend(gone.iter().cloned().map(Change::User));
        ctx.publish(&changes).await;
        Ok(gone)
    })
    .await?;
    if gone.is_empty() {
        return Err(GatewayError::NotFound(format!("Users {asked}")));
    }
    Ok(json!({ "deleted_users": gone }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issues_a_key_for_a_new_user_unless_told_not_to() {
        let now = Utc::now();
        let user = UserRecord {
            user_id: "u1".into(),
            models: vec!["m".into()],
            ..Default::default()
        };
        let mut req: UserRequest = parse(br#"{"key_alias": "a", "duration": "1h"}"#).unwrap();
        let fields = req.take_key_fields().unwrap();
        let (plain, key) = fields.issue(&user, now).unwrap();
        assert!(plain.starts_with("sk-"));
        assert_eq!(key.user_id.as_deref(), Some("u1"));
        assert!(key.models.is_empty(), "the user's row governs models");
        assert_eq!(key.expires, Some(now + chrono::Duration::hours(1)));
        let mut req: UserRequest = parse(br#"{"auto_create_key": false}"#).unwrap();
        assert!(req.take_key_fields().is_none());
    }

    #[test]
    fn checks_roles_and_update_only_fields() {
        let req: UserRequest = parse(br#"{"user_role": "king"}"#).unwrap();
        let err = req
            .apply(&mut UserRecord::default(), Utc::now())
            .unwrap_err();
        assert_eq!(err.param(), Some("user_role"));
        let req: UserRequest = parse(br#"{"user_id": "u", "teams": ["t"]}"#).unwrap();
        assert_eq!(req.only_updates().unwrap_err().param(), Some("teams"));
    }

    #[test]
    fn names_out_of_range_numbers_and_durations() {
        let now = Utc::now();
        for (body, field) in [
            (r#"{"max_budget": 1e300}"#, "max_budget"),
            (r#"{"budget_duration": "100000000d"}"#, "budget_duration"),
            (r#"{"tpm_limit": 1000000000000000}"#, "tpm_limit"),
            (r#"{"rpm_limit": -1}"#, "rpm_limit"),
            (r#"{"max_parallel_requests": -1}"#, "max_parallel_requests"),
        ] {
            let req: UserRequest = parse(body.as_bytes()).unwrap();
            let err = req.apply(&mut UserRecord::default(), now).unwrap_err();
            assert_eq!(err.param(), Some(field), "{body}");
        }
        let mut req: UserRequest = parse(br#"{"spend": -1}"#).unwrap();
        assert_eq!(req.take_spend().unwrap_err().param(), Some("spend"));
        let mut req: UserRequest = parse(br#"{"duration": "100000000d"}"#).unwrap();
        let fields = req.take_key_fields().unwrap();
        let err = fields.issue(&UserRecord::default(), now).unwrap_err();
        assert_eq!(err.param(), Some("duration"));
    }
}
