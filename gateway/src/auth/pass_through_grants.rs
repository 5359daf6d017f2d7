//! Who may call a config pass-through endpoint that asks for a key
//! (`general_settings.pass_through_endpoints` with `auth: true`), as
//! LiteLLM 1.110's `RouteChecks._require_auth_pass_through_access` decides
//! for every caller but a proxy admin: a route named by the key's or its
//! team's `denied_passthrough_routes` (kept in `metadata`) is refused even
//! when granted; otherwise the key's `allowed_passthrough_routes`, else its
//! team's, must name it (the path itself or a prefix of it at a `/`), or
//! the call is refused. Both refusals are LiteLLM's 403 with its message.

use super::Principal;
use crate::error::GatewayError;
use serde_json::{Map, Value};

/// Refuses `route` (the request's path) to `principal` unless its grants
/// allow it. A proxy admin (the master key, an admin's key) is never
/// held to them.
pub fn check(principal: &Principal, route: &str) -> Result<(), GatewayError> {
    let Principal::Key(key) = principal else {
        return Ok(());
    };
    if principal.is_admin() {
        return Ok(());
    }
    let team = key.team.as_ref().map(|t| &t.record.metadata);
    let sources = std::iter::once(&key.record.metadata).chain(team);
    for metadata in sources.clone() {
        if let Some(denied) =
            routes(metadata, "denied_passthrough_routes").find(|d| denies(route, d))
        {
            return Err(GatewayError::PassThroughRouteDenied(format!(
                "Key/team denied access to passthrough route {route}. Matched `{denied}` in `denied_passthrough_routes`."
            )));
        }
    }
    // LiteLLM's `key list or team list`: the key's when it names any.
    let own = routes(&key.record.metadata, "allowed_passthrough_routes").count() > 0;
    let granting = if own {
        Some(&key.record.metadata)
    } else {
        team
    };
    let granted =
        granting.is_some_and(|m| routes(m, "allowed_passthrough_routes").any(|a| allows(route, a)));
    if granted {
        return Ok(());
    }
    Err(GatewayError::PassThroughRouteDenied(format!(
        "Key/team not allowed to access passthrough route {route}. Configure `allowed_passthrough_routes` on the team or key."
    )))
}

/// The route strings of list `field` in `metadata`.
fn routes<'m>(metadata: &'m Map<String, Value>, field: &str) -> impl Iterator<Item = &'m str> {
    metadata
        .get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// LiteLLM's `_route_matches_allowed_route`: the route itself, or a path
/// below it (an entry written `/x/*` reads as `/x`).
fn allows(route: &str, allowed: &str) -> bool {
    let allowed = allowed.trim_end_matches('*').trim_end_matches('/');
    !allowed.is_empty()
        && (route == allowed
            || route
                .strip_prefix(allowed)
                .is_some_and(|rest| rest.starts_with('/')))
}

/// LiteLLM's `_route_matches_denied_route`: `/` denies every route, else
/// the entry (trailing `/` dropped) as an allowed route would match, or a
/// trailing-`*` pattern's prefix.
fn denies(route: &str, denied: &str) -> bool {
    if denied.trim_end_matches('/').is_empty() {
        return true;
    }
    allows(route, denied)
        || denied
            .strip_suffix('*')
            .is_some_and(|p| route.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_routes_as_litellm_does() {
        assert!(allows("/svc", "/svc"));
        assert!(allows("/svc/v1/x", "/svc"));
        assert!(!allows("/svc-2", "/svc"));
        assert!(!allows("/other", "/svc"));
        assert!(allows("/svc/v1", "/svc/*"));
        assert!(!allows("/svc", ""));
        assert!(denies("/anything", "/"));
        assert!(denies("/svc/v1", "/svc/"));
        assert!(denies("/svc/v1/x", "/svc/v1/*"));
        assert!(!denies("/svc2", "/svc"));
    }
}
