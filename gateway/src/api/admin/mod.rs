//! LiteLLM's management API: virtual keys, teams, users, models and spend, with
//! LiteLLM's paths and field names. Every endpoint needs the master key or an
//! admin key. Every database operation runs on the control plane, and every
//! change is published there, so the key caches of every replica see it
//! before the answer goes out.

pub(crate) mod accepted;
mod activity;
mod body;
mod budgets;
mod customers;
mod daily;
mod db;
mod delegated;
pub mod fuzz;
mod issue;
mod keys;
mod live_limits;
mod log_page;
mod member_budgets;
mod members;
mod model_groups;
mod models;
mod org_members;
mod org_routes;
mod orgs;
pub(super) mod query;
mod replicas;
mod spend;
mod team_admin_edit;
mod teams;
mod test_connection;
mod users;

use crate::auth::Principal;
use crate::downstream::{HeadBuilder, Responder};
use crate::error::GatewayError;
use crate::http1::RequestHead;
use crate::state::Worker;
use org_routes::OrgRoute;
use query::Query;
use serde::Serialize;
use serde_json::{Map, Value};

/// Whether `path` belongs to the management API.
pub fn is_admin_path(path: &str) -> bool {
    [
        "/key/",
        "/team/",
        "/user/",
        "/model/",
        "/spend/",
        "/model_group/",
        "/budget/",
        "/organization/",
        "/customer/",
        "/end_user/",
        "/tag/",
    ]
    .iter()
    .any(|prefix| path.starts_with(prefix))
        || path == "/global/spend"
        || path == "/gateway/limits"
        || path == "/gateway/logs"
        || path == "/gateway/replicas"
        || path == "/health/test_connection"
        || path == "/v2/team/list"
        || path == "/v2/model/info"
}

/// Whether `path` of the management API needs an admin: `/key/health` and
/// `/model_group/info` answer any valid key about itself, as in LiteLLM.
pub fn needs_admin(path: &str) -> bool {
    !matches!(path, "/key/health" | "/model_group/info")
}

/// Whether `path` is one an `internal_user`'s key may call about itself
/// (LiteLLM's self-service views): its user's keys, spend and teams (the
/// teams it is a member of), the `user_id` filter forced to its own.
pub fn own_view(path: &str) -> bool {
    matches!(
        path,
        "/key/list" | "/spend/logs" | "/gateway/logs" | "/user/daily/activity" | "/v2/team/list"
    )
}

/// Whether `path` only reads (LiteLLM's info, list and spend views): a
/// `proxy_admin_viewer`'s key may call these, about anyone.
pub fn read_only(path: &str) -> bool {
    path.ends_with("/info")
        || path.ends_with("/list")
        || path.ends_with("/daily/activity")
        || matches!(
            path,
            "/spend/logs"
                | "/gateway/logs"
                | "/global/spend"
                | "/gateway/limits"
                | "/gateway/replicas"
                | "/budget/settings"
        )
}

/// Whether `path` is one any key may call about its own rows (LiteLLM's
/// self-service reads): its key, its user, its teams, and the models.
pub fn self_service(path: &str) -> bool {
    matches!(
        path,
        "/key/info" | "/user/info" | "/team/info" | "/model/info" | "/v2/model/info"
    )
}

/// Whether `caller` may call `path` of the management API at all (its own
/// rows only, unless an admin or viewer: see [`own_rows`]).
pub fn may_call(caller: &Principal, path: &str) -> bool {
    let key = matches!(caller, Principal::Key(_));
    caller.is_admin()
        || !needs_admin(path)
        || (caller.admin_viewer() && read_only(path))
        || (key && self_service(path))
        || (own_view(path) && caller.internal_user().is_some())
        || (path == "/key/generate" && own_keys(caller).is_some())
}

/// Whether the body of a call at `path` is worth reading: the caller may
/// call it ([`may_call`]), or it is a key of a user who may hold a team
/// admin's or org admin's right there (checked once the body is read).
pub fn may_try(caller: &Principal, path: &str) -> bool {
    may_call(caller, path)
        || (delegated::may_delegate(path)
            && crate::proxy::key_of(caller)
                .is_some_and(|k| k.record.user_id.as_deref().is_some_and(|u| !u.is_empty())))
}

/// The user id of a key whose user has LiteLLM's `internal_user` role: it
/// may generate keys for itself.
fn own_keys(caller: &Principal) -> Option<&str> {
    let user = caller.internal_user()?;
    let viewer = crate::proxy::key_of(caller)
        .and_then(|k| k.user.as_ref())
        .is_some_and(|u| u.record.user_role.as_deref() == Some("internal_user_viewer"));
    (!viewer).then_some(user)
}

/// Pins a caller that is neither admin nor viewer to its own rows, as
/// LiteLLM does: `/key/info` about its own key (or none given: the
/// caller's), `/user/info` about its user, `/team/info` about its team or a
/// team its user is in, its own keys and spend (an internal user), keys
/// generated for itself only (an internal user: `user_id` its own,
/// `team_id` one of its teams).
fn own_rows(caller: &Principal, path: &str, q: &mut Query) -> Result<(), GatewayError> {
    let refused = || GatewayError::NotAdmin(format!("{path} about another's rows"));
    let Some(key) = crate::proxy::key_of(caller) else {
        return Err(refused());
    };
    let user = key.user.as_ref().map(|u| &u.record);
    match path {
        "/key/info" => match q.get("key") {
            Some(given) if db::token_of(given) != key.record.token => Err(refused()),
            _ => Ok(()),
        },
        "/user/info" => {
            let own = user.map(|u| u.user_id.as_str()).ok_or_else(refused)?;
            q.restrict("user_id", own).map_err(|()| refused())
        }
        "/team/info" => {
            let team = q.get("team_id").unwrap_or_default();
            let of_key = key.record.team_id.as_deref() == Some(team);
            let member = user.is_some_and(|u| u.teams.iter().any(|t| t == team));
            if of_key || member {
                Ok(())
            } else {
                Err(refused())
            }
        }
        "/model/info" | "/v2/model/info" | "/key/generate" => Ok(()),
        _ => {
            // An internal user's own view (may_call let nothing else through).
            let own = caller.internal_user().unwrap_or_default();
            q.restrict("user_id", own).map_err(|()| refused())
        }
    }
}

/// An internal user's `/key/generate` body, pinned to itself: `user_id`
/// absent or its own (set), `team_id` absent or a team it is in, no
/// `metadata.role` (an admin key) nor `disable_global_guardrails`.
fn own_key_body(caller: &Principal, body: &[u8]) -> Result<Vec<u8>, GatewayError> {
    let own = own_keys(caller).ok_or_else(|| GatewayError::NotAdmin("/key/generate".into()))?;
    let mut fields: Map<String, Value> = body::parse(body)?;
    match fields.get("user_id") {
        None | Some(Value::Null) => {}
        Some(v) if v.as_str() == Some(own) => {}
        Some(_) => {
            return Err(GatewayError::NotAdmin(
                "/key/generate for another user".into(),
            ))
        }
    }
    fields.insert("user_id".into(), Value::String(own.to_string()));
    no_admin_fields(&fields)?;
    if let Some(team) = fields.get("team_id").and_then(Value::as_str) {
        let teams = crate::proxy::key_of(caller)
            .and_then(|k| k.user.as_ref())
            .map(|u| &u.record.teams);
        if !teams.is_some_and(|t| t.iter().any(|t| t == team)) {
            return Err(GatewayError::NotAdmin(format!(
                "/key/generate for team {team}, which the user is not in"
            )));
        }
    }
    serde_json::to_vec(&fields).map_err(|_| GatewayError::Internal("key request"))
}

/// Refuses a `/key/generate` body of a caller that is no admin asking for
/// an admin key: `metadata.role = "admin"` makes one, and turning off the
/// global guardrails is the proxy admin's (LiteLLM's).
fn no_admin_fields(fields: &Map<String, Value>) -> Result<(), GatewayError> {
    let metadata = fields.get("metadata");
    let set = |v: Option<&Value>| v.is_some_and(|v| !v.is_null() && *v != Value::Bool(false));
    for (name, value) in [
        ("metadata.role", metadata.and_then(|m| m.get("role"))),
        (
            "disable_global_guardrails",
            fields.get("disable_global_guardrails"),
        ),
        (
            "metadata.disable_global_guardrails",
            metadata.and_then(|m| m.get("disable_global_guardrails")),
        ),
    ] {
        if set(value) {
            return Err(GatewayError::NotAdmin(format!("/key/generate with {name}")));
        }
    }
    Ok(())
}

/// Rights a caller that is neither admin nor viewer has at `path`: its
/// own (see [`own_rows`]), else a team admin's or org admin's
/// ([`delegated`]); with its own `/key/generate` body, when pinned to
/// itself.
async fn limited_rights(
    worker: &Worker,
    caller: &Principal,
    path: &str,
    q: &mut Query,
    body: &[u8],
) -> Result<Option<Vec<u8>>, GatewayError> {
    let delegate = |q: &Query| {
        let q = q.clone();
        async move {
            if !delegated::may_delegate(path) {
                return Ok(false);
            }
            let granted = delegated::authorize(worker, caller, path, &q, body).await?;
            if granted && path == "/key/generate" {
                no_admin_fields(&body::parse(body)?)?;
            }
            Ok::<bool, GatewayError>(granted)
        }
    };
    // A team's keys are listed for its admins, not only the caller's own.
    if path == "/key/list" && q.get("team_id").is_some() && delegate(q).await.unwrap_or(false) {
        return Ok(None);
    }
    let own = if may_call(caller, path) {
        own_rows(caller, path, q).and_then(|()| {
            (path == "/key/generate")
                .then(|| own_key_body(caller, body))
                .transpose()
        })
    } else {
        Err(GatewayError::NotAdmin(path.to_string()))
    };
    match own {
        Ok(own_body) => Ok(own_body),
        Err(refusal) => match delegate(q).await? {
            true => Ok(None),
            false => Err(refusal),
        },
    }
}

/// One management endpoint.
#[derive(Debug, PartialEq)]
enum Endpoint<'a> {
    KeyGenerate,
    KeyInfo,
    KeyUpdate,
    KeyDelete,
    /// With the key of `/key/{key}/regenerate`.
    KeyRegenerate(Option<&'a str>),
    KeyList,
    /// `true` for `/key/block`.
    KeyBlock(bool),
    TeamNew,
    TeamInfo,
    TeamUpdate,
    TeamDelete,
    TeamList,
    /// LiteLLM's paged `/v2/team/list`.
    TeamListV2,
    /// `true` for `/team/block`.
    TeamBlock(bool),
    TeamMemberAdd,
    TeamMemberDelete,
    TeamMemberUpdate,
    UserList,
    KeyHealth,
    ModelGroupInfo,
    UserNew,
    UserInfo,
    UserUpdate,
    UserDelete,
    ModelNew,
    ModelInfo,
    /// LiteLLM's paged `/v2/model/info`.
    ModelInfoV2,
    ModelUpdate,
    ModelDelete,
    /// LiteLLM's `/health/test_connection` ([`test_connection`]).
    TestConnection,
    SpendLogs,
    /// This gateway's `/gateway/logs` ([`log_page`]).
    LogPage,
    GlobalSpend,
    /// This gateway's `/gateway/limits` ([`live_limits`]).
    LiveLimits,
    /// This gateway's `/gateway/replicas` ([`replicas`]).
    Replicas,
    /// `/<scope>/daily/activity` ([`daily`]).
    DailyActivity(crate::store::DailyScope),
    /// `/budget/*` and `/organization/*` ([`org_routes`]).
    Org(OrgRoute),
    Customer(customers::Op),
}

impl<'a> Endpoint<'a> {
    /// The endpoint of a method and path, if any.
    fn parse(method: &str, path: &'a str) -> Option<Endpoint<'a>> {
        use Endpoint::*;
        if let Some(scope) = daily::scope_of(path) {
            return (method == "GET" || method == "HEAD").then_some(DailyActivity(scope));
        }
        if let Some(route) = org_routes::parse(method, path) {
            return Some(Org(route));
        }
        if let Some(op) = customers::route(method, path) {
            return Some(Customer(op));
        }
        let get = method == "GET" || method == "HEAD";
        let post = method == "POST";
        let endpoint = match path {
            "/key/generate" if post => KeyGenerate,
            "/key/info" if get => KeyInfo,
            "/key/update" if post => KeyUpdate,
            "/key/delete" if post => KeyDelete,
            "/key/regenerate" if post => KeyRegenerate(None),
            "/key/list" if get => KeyList,
            "/key/block" if post => KeyBlock(true),
            "/key/unblock" if post => KeyBlock(false),
            "/team/new" if post => TeamNew,
            "/team/info" if get => TeamInfo,
            "/team/update" if post => TeamUpdate,
            "/team/delete" if post => TeamDelete,
            "/team/list" if get => TeamList,
            "/v2/team/list" if get => TeamListV2,
            "/team/block" if post => TeamBlock(true),
            "/team/unblock" if post => TeamBlock(false),
            "/team/member_add" if post => TeamMemberAdd,
            "/team/member_delete" if post => TeamMemberDelete,
            "/team/member_update" if post => TeamMemberUpdate,
            "/user/list" if get => UserList,
            "/key/health" if post => KeyHealth,
            "/model_group/info" if get => ModelGroupInfo,
            "/user/new" if post => UserNew,
            "/user/info" if get => UserInfo,
            "/user/update" if post => UserUpdate,
            "/user/delete" if post => UserDelete,
            "/model/new" if post => ModelNew,
            "/model/info" if get => ModelInfo,
            "/v2/model/info" if get => ModelInfoV2,
            "/model/update" if post => ModelUpdate,
            "/model/delete" if post => ModelDelete,
            "/health/test_connection" if post => TestConnection,
            "/spend/logs" if get => SpendLogs,
            "/gateway/logs" if get => LogPage,
            "/global/spend" if get => GlobalSpend,
            "/gateway/limits" if get => LiveLimits,
            "/gateway/replicas" if get => Replicas,
            _ if post => {
                let key = path
                    .strip_prefix("/key/")?
                    .strip_suffix("/regenerate")
                    .filter(|k| !k.is_empty() && !k.contains('/'))?;
                KeyRegenerate(Some(key))
            }
            _ => return None,
        };
        Some(endpoint)
    }
}

/// A record as a JSON object.
fn object<T: Serialize>(record: &T) -> Map<String, Value> {
    match serde_json::to_value(record) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// Answers one management request at `path` (without `/v1`).
/// `caller` is the result of authenticating the head.
pub async fn handle(
    worker: &Worker,
    head: &RequestHead,
    path: &str,
    caller: Result<Principal, GatewayError>,
    body: &[u8],
    out: &mut Responder<'_>,
) {
    let _ = match answer(worker, head, path, caller, body).await {
        Ok(value) => {
            let body = serde_json::to_vec(&value).expect("json");
            out.send(200, HeadBuilder::new(200), "application/json", &body)
                .await
        }
        Err(err) => out.send_error(&err, None).await,
    };
}

async fn answer(
    worker: &Worker,
    head: &RequestHead,
    path: &str,
    caller: Result<Principal, GatewayError>,
    body: &[u8],
) -> Result<Value, GatewayError> {
    use Endpoint::*;
    let caller = caller?;
    if !may_try(&caller, path) {
        return Err(GatewayError::NotAdmin(path.to_string()));
    }
    let endpoint =
        Endpoint::parse(head.method(), path).ok_or_else(|| GatewayError::RouteNotFound {
            method: head.method().to_string(),
            path: head.path().to_string(),
        })?;
    let mut q = Query::parse(head.query())?;
    let viewer = caller.admin_viewer() && read_only(path);
    let mut own_body = None;
    if needs_admin(path) && !caller.is_admin() && !viewer {
        own_body = limited_rights(worker, &caller, path, &mut q, body).await?;
    }
    match endpoint {
        KeyGenerate => {
            let body = own_body.as_deref().unwrap_or(body);
            keys::generate(worker, body, caller.is_admin()).await
        }
        KeyInfo => keys::info(worker, head, q).await,
        KeyUpdate => keys::update(worker, body, caller.is_admin()).await,
        KeyDelete => keys::delete(worker, body).await,
        KeyRegenerate(key) => keys::regenerate(worker, key, body, caller.is_admin()).await,
        KeyList => keys::list(worker, q).await,
        KeyBlock(blocked) => keys::set_blocked(worker, body, blocked).await,
        TeamNew => teams::new(worker, body).await,
        TeamInfo => teams::info(worker, q).await,
        TeamUpdate => teams::update(worker, body).await,
        TeamDelete => teams::delete(worker, body).await,
        TeamList => teams::list(worker, q).await,
        TeamListV2 => teams::list_v2(worker, q).await,
        TeamBlock(blocked) => teams::set_blocked(worker, body, blocked).await,
        TeamMemberAdd => members::add(worker, body).await,
        TeamMemberDelete => members::delete(worker, body).await,
        TeamMemberUpdate => members::update(worker, body).await,
        UserList => users::list(worker, q).await,
        KeyHealth => {
            q.finish()?;
            Ok(serde_json::json!({"key": "healthy", "logging_callbacks": null}))
        }
        ModelGroupInfo => model_groups::info(worker, &caller, q),
        UserNew => users::new(worker, body).await,
        UserInfo => users::info(worker, q).await,
        UserUpdate => users::update(worker, body).await,
        UserDelete => users::delete(worker, body).await,
        ModelNew => models::new(worker, body).await,
        ModelInfo => models::info(worker, &caller, q).await,
        ModelInfoV2 => models::info_v2(worker, &caller, q),
        ModelUpdate => models::update(worker, body).await,
        ModelDelete => models::delete(worker, body).await,
        TestConnection => {
            q.finish()?;
            test_connection::test(worker, body).await
        }
        SpendLogs => spend::logs(worker, q).await,
        LogPage => log_page::page(worker, q).await,
        GlobalSpend => spend::global(worker, q).await,
        LiveLimits => live_limits::live(worker, q).await,
        Replicas => {
            q.finish()?;
            Ok(replicas::list(&worker.shared.replicas))
        }
        DailyActivity(scope) => daily::activity(worker, scope, q).await,
        Org(route) => org_routes::answer(worker, &caller, route, q, body).await,
        Customer(op) => customers::handle(worker, op, q, body).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_methods_and_paths() {
        assert_eq!(
            Endpoint::parse("POST", "/key/generate"),
            Some(Endpoint::KeyGenerate)
        );
        assert_eq!(Endpoint::parse("GET", "/key/generate"), None);
        assert_eq!(
            Endpoint::parse("HEAD", "/key/info"),
            Some(Endpoint::KeyInfo)
        );
        assert_eq!(
            Endpoint::parse("POST", "/key/sk-abc/regenerate"),
            Some(Endpoint::KeyRegenerate(Some("sk-abc")))
        );
        assert_eq!(
            Endpoint::parse("POST", "/key/regenerate"),
            Some(Endpoint::KeyRegenerate(None))
        );
        for path in ["/key//regenerate", "/key/a/b/regenerate", "/key/nope"] {
            assert_eq!(Endpoint::parse("POST", path), None, "{path}");
        }
        assert!(is_admin_path("/team/new") && is_admin_path("/global/spend"));
        assert_eq!(
            Endpoint::parse("GET", "/model/info"),
            Some(Endpoint::ModelInfo)
        );
        assert_eq!(Endpoint::parse("GET", "/model/new"), None);
        assert_eq!(
            Endpoint::parse("GET", "/v2/team/list"),
            Some(Endpoint::TeamListV2)
        );
        assert!(is_admin_path("/v2/team/list") && is_admin_path("/v2/model/info"));
        assert!(self_service("/v2/model/info") && read_only("/v2/team/list"));
        assert!(is_admin_path("/model/delete") && !is_admin_path("/models"));
        assert!(!is_admin_path("/chat/completions") && !is_admin_path("/key"));
    }
}
