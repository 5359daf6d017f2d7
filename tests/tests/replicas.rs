//! `GET /gateway/replicas` (the console's Health page): replicas sharing a
//! Redis find each other through their heartbeats, a stopped one drops off
//! once its heartbeat lapses, a Redis outage keeps the last list with the
//! error; without Redis a replica lists itself alone.

use std::time::Duration;

use e2e::{assert_error, eventually, Gateway, MASTER_KEY};
use serde_json::{json, Value};

fn gateway(envs: &[(&str, &str)]) -> Gateway {
    Gateway::start_json(
        &json!({
            "model_list": [{"model_name": "m", "litellm_params": {"model": "mock/m"}}],
            "general_settings": {"master_key": MASTER_KEY},
        }),
        envs,
    )
}

/// The replicas `gw` lists, by pid.
fn listed(gw: &Gateway) -> (Value, Vec<u32>) {
    let answer = gw.get("/gateway/replicas").expect_status(200).json();
    let mut pids: Vec<u32> = answer["replicas"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|r| u32::try_from(r["pid"].as_u64().expect("a pid")).unwrap())
        .collect();
    pids.sort_unstable();
    (answer, pids)
}

fn sorted(mut pids: Vec<u32>) -> Vec<u32> {
    pids.sort_unstable();
    pids
}

#[test]
fn replicas_sharing_redis_list_each_other_and_a_stopped_one_drops_off() {
    let redis = e2e::PrivateRedis::start();
    let url = redis.url();
    let envs = [("REDIS_URL", url.as_str())];
    let a = gateway(&envs);
    let b = gateway(&envs);
    let both = sorted(vec![a.pid(), b.pid()]);
    for gw in [&a, &b] {
        let answer = eventually("both replicas listed", Duration::from_secs(20), || {
            let (answer, pids) = listed(gw);
            (pids == both).then_some(answer)
        });
        assert_eq!(answer["shared"], true);
        assert_eq!(answer["error"], Value::Null);
        let mine: Vec<&Value> = answer["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["this_replica"] == true)
            .collect();
        assert_eq!(mine.len(), 1, "{answer}");
        assert_eq!(mine[0]["pid"], gw.pid());
        let address = mine[0]["address"].as_str().unwrap();
        assert_eq!(address, format!("127.0.0.1:{}", gw.port()));
        assert_eq!(mine[0]["workers"], 2);
        assert!(!mine[0]["version"].as_str().unwrap().is_empty());
        // Its heartbeat lives in Redis for the lapse time at most.
        let id = mine[0]["id"].as_str().unwrap();
        let e2e::redis::Reply::Int(ttl) =
            redis.command(&["PTTL", &format!("{{gateway:replicas}}:{id}")])
        else {
            panic!("PTTL answers an integer");
        };
        let lapse = answer["lapse_secs"].as_i64().unwrap() * 1000;
        assert!((1..=lapse).contains(&ttl), "{ttl}");
    }

    // B stops: once its heartbeat lapses, A lists itself alone, and B's id
    // leaves the set.
    let gone = b.pid();
    drop(b);
    eventually(
        "the stopped replica dropped",
        Duration::from_secs(30),
        || (listed(&a).1 == [a.pid()]).then_some(()),
    );
    let e2e::redis::Reply::Array(ids) = redis.command(&["SMEMBERS", "{gateway:replicas}"]) else {
        panic!("SMEMBERS answers an array");
    };
    assert_eq!(ids.len(), 1, "{ids:?} (B was {gone})");

    // Redis down: the last list stays, with the heartbeat's error; back up,
    // the error clears.
    redis.stop();
    let answer = eventually("the outage reported", Duration::from_secs(20), || {
        let (answer, _) = listed(&a);
        answer["error"].is_string().then_some(answer)
    });
    assert_eq!(answer["replicas"].as_array().unwrap().len(), 1);
    redis.restart();
    eventually("the outage cleared", Duration::from_secs(20), || {
        listed(&a).0["error"].is_null().then_some(())
    });
}

#[test]
fn without_redis_a_replica_lists_itself_alone_to_admins_only() {
    let gw = gateway(&[]);
    let (answer, pids) = listed(&gw);
    assert_eq!(pids, [gw.pid()]);
    assert_eq!(answer["shared"], false);
    assert_eq!(answer["replicas"][0]["this_replica"], true);
    assert_eq!(
        answer["replicas"][0]["address"],
        format!("127.0.0.1:{}", gw.port())
    );
    assert_error(&gw.get("/gateway/replicas?x=1"), 400);
    let key = gw.post("/key/generate", &json!({})).json()["key"]
        .as_str()
        .unwrap()
        .to_string();
    let auth = format!("Bearer {key}");
    let refused = gw.call("GET", "/gateway/replicas", &[("Authorization", &auth)], b"");
    assert_error(&refused, 403);
}
