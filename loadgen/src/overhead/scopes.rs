//! `--scopes N`: the scopes each request is counted in, from the key alone
//! (1) up to the key, its user, its team and the request's end user (4),
//! each with rpm and tpm limits it never reaches (the team's also a
//! parallel limit), so Redis's cost per request can be compared across 1 to
//! 4 scopes.

use crate::gateway_proc;
use crate::harness::Harness;

/// The most scopes a request can be counted in here.
pub const MAX_SCOPES: usize = 4;

/// The key's user (scope 2).
const USER: &str = "loadgen-user";
/// The key's team (scope 3).
const TEAM: &str = "loadgen-team";
/// The end user every request names in `user` (scope 4).
pub const END_USER: &str = "loadgen-end-user";

/// Limits no run reaches, as the key's.
const LIMITS: &str = "\"rpm_limit\":1000000000,\"tpm_limit\":1000000000000";

/// Makes the user, team and end user the first `scopes` scopes after the
/// key need, on `harness`'s gateway; the members a key's `/key/generate`
/// body adds to belong to them (`,"user_id":...,"team_id":...`).
pub fn make_owners(scopes: usize, harness: &Harness) -> Result<String, String> {
    let gateway = &harness.gateway;
    let mut owners = String::new();
    if scopes >= 2 {
        gateway.admin_post("/user/new", &format!("{{\"user_id\":\"{USER}\",{LIMITS}}}"))?;
        owners.push_str(&format!(",\"user_id\":\"{USER}\""));
    }
    if scopes >= 3 {
        gateway.admin_post(
            "/team/new",
            &format!(
                "{{\"team_id\":\"{TEAM}\",\"models\":[\"{}\"],{LIMITS},\"max_parallel_requests\":1000000}}",
                gateway_proc::MODEL
            ),
        )?;
        owners.push_str(&format!(",\"team_id\":\"{TEAM}\""));
    }
    if scopes >= 4 {
        gateway.admin_post(
            "/customer/new",
            &format!("{{\"user_id\":\"{END_USER}\",{LIMITS}}}"),
        )?;
    }
    Ok(owners)
}
