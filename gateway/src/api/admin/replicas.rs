//! `GET /gateway/replicas` (this gateway's, for the console's Health
//! page): the replicas alive in the fleet, as this replica's last
//! heartbeat read them from Redis ([`crate::replicas`]), this one marked;
//! without Redis, this replica alone. Reads a snapshot, waits on nothing.

use crate::replicas::Replicas;
use serde_json::{json, Value};

/// The answer: `shared` (through Redis), `as_of` (the last read), `error`
/// (why the last heartbeat failed), and `replicas`, each with
/// `this_replica`.
pub fn list(replicas: &Replicas) -> Value {
    let fleet = replicas.fleet();
    let me = &replicas.me().id;
    let listed: Vec<Value> = fleet
        .replicas
        .iter()
        .map(|s| {
            let mut v = serde_json::to_value(s).unwrap_or_default();
            v["this_replica"] = json!(s.replica.id == *me);
            v
        })
        .collect();
    json!({
        "shared": replicas.shared(),
        "as_of": fleet.as_of,
        "error": fleet.error,
        "heartbeat_secs": crate::replicas::heartbeat::INTERVAL.as_secs(),
        "lapse_secs": crate::replicas::heartbeat::TTL.as_secs(),
        "replicas": listed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replicas::Replica;

    #[test]
    fn without_redis_it_lists_this_replica_alone() {
        let me = Replica::this_process("127.0.0.1:4000".into(), 2);
        let answer = list(&Replicas::new(me.clone(), false));
        assert_eq!(answer["shared"], false);
        assert_eq!(answer["as_of"], Value::Null);
        let listed = answer["replicas"].as_array().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0]["id"], me.id.as_str());
        assert_eq!(listed[0]["this_replica"], true);
        assert_eq!(listed[0]["address"], "127.0.0.1:4000");
        assert_eq!(listed[0]["version"], crate::VERSION);
    }
}
