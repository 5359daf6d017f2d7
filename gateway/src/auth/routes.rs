//! A virtual key's `allowed_routes`, as LiteLLM checks them: each entry is
//! a path (the route itself or any route under it), a `/prefix/*` wildcard,
//! or the name of one of LiteLLM's route groups (`openai_routes`,
//! `llm_api_routes`, `info_routes`, `management_routes`, ...; the table in
//! `gateway/data/litellm_route_groups.tsv`), whose routes may hold
//! `{param}` segments. An empty list allows every route the key's role
//! allows.

use std::collections::HashMap;
use std::sync::OnceLock;

/// LiteLLM's route groups, `group<TAB>route` a line.
static ROUTE_GROUPS: &str = include_str!("../../data/litellm_route_groups.tsv");

/// Most entries one key's `allowed_routes` may hold.
pub const MAX_ALLOWED_ROUTES: usize = 256;
/// Longest entry of `allowed_routes`, in bytes.
pub const MAX_ROUTE_LEN: usize = 512;

/// The route groups, by name, parsed once.
fn groups() -> &'static HashMap<&'static str, Vec<&'static str>> {
    static GROUPS: OnceLock<HashMap<&'static str, Vec<&'static str>>> = OnceLock::new();
    GROUPS.get_or_init(|| {
        let mut groups: HashMap<&str, Vec<&str>> = HashMap::new();
        for line in ROUTE_GROUPS.lines() {
            if line.starts_with('#') {
                continue;
            }
            if let Some((group, route)) = line.split_once('\t') {
                groups.entry(group).or_default().push(route);
            }
        }
        groups
    })
}

/// Whether a key whose `allowed_routes` is `allowed` may call `path` (the
/// request's path, without its query).
pub fn key_may_call(allowed: &[String], path: &str) -> bool {
    if allowed.is_empty() {
        return true;
    }
    allowed.iter().any(|entry| {
        if let Some(routes) = groups().get(entry.as_str()) {
            return routes.iter().any(|route| group_route_matches(route, path));
        }
        path_entry_matches(entry, path)
    })
}

/// An entry that is not a group name: the route itself or one under it
/// (`/a` allows `/a/b`, not `/ab`), or a `/prefix/*` wildcard.
fn path_entry_matches(entry: &str, path: &str) -> bool {
    if let Some(prefix) = entry.strip_suffix('*') {
        return path.starts_with(prefix);
    }
    path == entry
        || path
            .strip_prefix(entry)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// A route of a group: exact, a `/prefix/*` wildcard, or a pattern whose
/// `{param}` segments match any one segment (`{param:path}` the rest).
fn group_route_matches(route: &str, path: &str) -> bool {
    if let Some(prefix) = route.strip_suffix('*') {
        return path.starts_with(prefix);
    }
    if !route.contains('{') {
        return route == path;
    }
    let mut want = route.split('/');
    let mut got = path.split('/');
    loop {
        match (want.next(), got.next()) {
            (None, None) => return true,
            (Some(w), Some(_)) if w.starts_with('{') && w.ends_with(":path}") => return true,
            (Some(w), Some(g)) if w.starts_with('{') && w.ends_with('}') => {
                if g.is_empty() {
                    return false;
                }
            }
            (Some(w), Some(g)) if w == g => {}
            _ => return false,
        }
    }
}

/// Checks an `allowed_routes` list from the management API: at most
/// [`MAX_ALLOWED_ROUTES`] entries, each a path starting with `/` or a
/// route group LiteLLM names (a misspelt group would lock the key out of
/// everything). The error says which entry is wrong.
pub fn check(allowed: &[String]) -> Result<(), String> {
    if allowed.len() > MAX_ALLOWED_ROUTES {
        return Err(format!(
            "allowed_routes holds at most {MAX_ALLOWED_ROUTES} entries, got {}",
            allowed.len()
        ));
    }
    for entry in allowed {
        if entry.is_empty() || entry.len() > MAX_ROUTE_LEN {
            return Err(format!(
                "allowed_routes entries are 1 to {MAX_ROUTE_LEN} bytes long"
            ));
        }
        if !entry.starts_with('/') && !groups().contains_key(entry.as_str()) {
            let mut names: Vec<&str> = groups().keys().copied().collect();
            names.sort_unstable();
            return Err(format!(
                "allowed_routes: {entry:?} is neither a path (starting with /) nor one of LiteLLM's route groups ({})",
                names.join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(entries: &[&str]) -> Vec<String> {
        entries.iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn an_empty_list_allows_everything() {
        assert!(key_may_call(&[], "/key/generate"));
    }

    #[test]
    fn paths_match_themselves_and_what_is_under_them() {
        let a = allowed(&["/chat/completions", "/fake-proxy"]);
        assert!(key_may_call(&a, "/chat/completions"));
        assert!(!key_may_call(&a, "/v1/chat/completions"));
        assert!(key_may_call(&a, "/fake-proxy/v1/chat/completions"));
        assert!(!key_may_call(&a, "/fake-proxy-600"));
        assert!(!key_may_call(&a, "/embeddings"));
    }

    #[test]
    fn wildcards_match_their_prefix() {
        let a = allowed(&["/anthropic/*"]);
        assert!(key_may_call(&a, "/anthropic/v1/messages"));
        assert!(!key_may_call(&a, "/openai/v1/chat/completions"));
    }

    #[test]
    fn groups_hold_litellms_routes_with_their_patterns() {
        let llm = allowed(&["llm_api_routes"]);
        for path in [
            "/v1/chat/completions",
            "/chat/completions",
            "/v1/embeddings",
            "/v1/messages",
        ] {
            assert!(key_may_call(&llm, path), "{path}");
        }
        assert!(!key_may_call(&llm, "/key/generate"));
        let info = allowed(&["info_routes"]);
        assert!(key_may_call(&info, "/key/info"));
        assert!(!key_may_call(&info, "/v1/chat/completions"));
        // `/threads/{thread_id}` in openai_routes.
        let openai = allowed(&["openai_routes"]);
        assert!(key_may_call(&openai, "/v1/threads/thread_49EIN5QF32s4"));
        assert!(!key_may_call(&openai, "/v1/threads/"));
    }

    #[test]
    fn patterns_match_one_segment_per_parameter() {
        assert!(group_route_matches("/a/{id}/b", "/a/x/b"));
        assert!(!group_route_matches("/a/{id}/b", "/a/x/y/b"));
        assert!(!group_route_matches("/a/{id}", "/a/x/b"));
        assert!(group_route_matches("/files/{path:path}", "/files/x/y/z"));
    }

    #[test]
    fn checks_names_and_sizes() {
        assert!(check(&allowed(&[
            "/chat/completions",
            "llm_api_routes",
            "/openai/*"
        ]))
        .is_ok());
        let err = check(&allowed(&["llm_routes"])).unwrap_err();
        assert!(
            err.contains("\"llm_routes\"") && err.contains("llm_api_routes"),
            "{err}"
        );
        assert!(check(&allowed(&[""])).is_err());
        assert!(check(&vec!["/x".to_string(); MAX_ALLOWED_ROUTES + 1]).is_err());
        assert!(check(&["/".repeat(MAX_ROUTE_LEN + 1)]).is_err());
    }
}
