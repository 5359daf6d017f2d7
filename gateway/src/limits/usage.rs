//! The fleet's current use of a request's limits, read from Redis without
//! changing anything: what the admin API's live limits show in `redis` and
//! `lease` mode (in `lease` mode a counter holds the units granted to the
//! replicas' leases, spent or not, as admissions see them).

use super::call::{LuaScript, ScriptCall};
use super::descriptor::{Descriptor, Kind};
use super::window::Window;

/// `usage.lua`: one counter's units in the window, or its live slots.
static USAGE_LUA: LuaScript = LuaScript::new(include_str!("usage.lua"));

/// The call reading descriptor `d`'s use in `window`.
pub fn usage_call(window: &Window, d: &Descriptor) -> ScriptCall {
    let args = match d.kind {
        Kind::Parallel => vec!["p".to_string()],
        Kind::Requests | Kind::Tokens => vec![
            "w".to_string(),
            window.bucket_secs.to_string(),
            window.buckets.to_string(),
        ],
    };
    ScriptCall {
        script: &USAGE_LUA,
        keys: vec![d.key.to_string()],
        args,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Scope;

    #[test]
    fn window_counters_are_read_over_the_limiters_window_and_slots_alone() {
        let window = Window::new(60);
        let rpm = Descriptor::new(Scope::ApiKey, "k", Kind::Requests, 5);
        let call = usage_call(&window, &rpm);
        assert_eq!(call.keys, ["{api_key:k}:requests"]);
        assert_eq!(
            call.args,
            [
                "w".to_string(),
                window.bucket_secs.to_string(),
                window.buckets.to_string()
            ]
        );
        let slots = Descriptor::new(Scope::Team, "t", Kind::Parallel, 2);
        assert_eq!(usage_call(&window, &slots).args, ["p"]);
    }
}
