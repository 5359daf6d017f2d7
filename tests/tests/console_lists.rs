//! The console's lists at scale (issue 34): LiteLLM's paged
//! `/v2/team/list` and `/v2/model/info`, `/organization/list` filtered and
//! paged on the server, `/user/list` searched, the unpaged LiteLLM lists bounded, and the spend
//! log indexed by key and time (LiteLLM's index, migration 0031) so a
//! key's Logs page reads its newest rows in order.

use e2e::{assert_error, error_message, Gateway, TestDb, MASTER_KEY};
use serde_json::{json, Value};

/// A gateway with five deployments of three model groups, on `db` if given.
fn gateway(db: Option<&TestDb>) -> Gateway {
    let deployment = |name: &str, id: &str| {
        json!({"model_name": name, "model_info": {"id": id},
            "litellm_params": {"model": "mock/local", "mock_response": "hi"}})
    };
    let config = json!({
        "model_list": [
            deployment("chat-fast", "fast-1"), deployment("chat-fast", "fast-2"),
            deployment("chat-smart", "smart-1"), deployment("embed-small", "embed-1"),
            deployment("Chat-Large", "large-1"),
        ],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let envs: Vec<(&str, &str)> = db
        .map(|db| ("DATABASE_URL", db.url()))
        .into_iter()
        .collect();
    Gateway::start_json(&config, &envs)
}

/// The JSON of a 200 answer.
fn ok(resp: e2e::http::Response) -> Value {
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()
}

/// The ids of `list`'s objects under `field`.
fn ids(list: &Value, field: &str) -> Vec<String> {
    list.as_array()
        .expect("a list")
        .iter()
        .map(|t| t[field].as_str().unwrap().to_string())
        .collect()
}

/// Twelve teams (`t-00` to `t-11`, aliases "Team 0" to "Team 11", spend
/// 0 to 11), the even ones of organization `org-a`, `t-03` with member
/// `alice` (an admin) and `bob`: paged, searched and sorted by the server.
fn v2_team_list(db: Option<&TestDb>) {
    let gw = gateway(db);
    ok(gw.post(
        "/organization/new",
        &json!({"organization_id": "org-a", "organization_alias": "A"}),
    ));
    for i in 0..12 {
        let mut body = json!({"team_id": format!("t-{i:02}"), "team_alias": format!("Team {i}")});
        if i % 2 == 0 {
            body["organization_id"] = json!("org-a");
        }
        if i == 3 {
            body["members_with_roles"] =
                json!([{"user_id": "alice", "role": "admin"}, {"user_id": "bob", "role": "user"}]);
        }
        ok(gw.post("/team/new", &body));
    }
    let page = |q: &str| ok(gw.get(&format!("/v2/team/list?{q}")));

    let first = page("page_size=5&sort_by=team_id");
    assert_eq!(
        (
            &first["total"],
            &first["page"],
            &first["page_size"],
            &first["total_pages"]
        ),
        (&json!(12), &json!(1), &json!(5), &json!(3)),
        "{first}"
    );
    assert_eq!(
        ids(&first["teams"], "team_id"),
        ["t-00", "t-01", "t-02", "t-03", "t-04"]
    );
    let last = page("page_size=5&page=3&sort_by=team_id&sort_order=desc");
    assert_eq!(ids(&last["teams"], "team_id"), ["t-01", "t-00"], "{last}");
    // LiteLLM's default: 10 a page, newest first.
    let newest = page("");
    assert_eq!(newest["teams"].as_array().unwrap().len(), 10, "{newest}");
    assert_eq!(newest["teams"][0]["team_id"], "t-11", "{newest}");
    let by_spend = page("sort_by=team_alias&sort_order=asc&page_size=3");
    assert_eq!(ids(&by_spend["teams"], "team_id"), ["t-00", "t-01", "t-10"]);

    // Search: the id exactly, or part of the alias ignoring case.
    let found = page("search=t-07");
    assert_eq!(ids(&found["teams"], "team_id"), ["t-07"]);
    assert_eq!(page("search=t-0")["total"], 0);
    let found = page("search=tEAm%201&sort_by=team_id");
    assert_eq!(ids(&found["teams"], "team_id"), ["t-01", "t-10", "t-11"]);
    assert_eq!(page("team_alias=team%201")["total"], 3);
    assert_eq!(page("team_id=t-05")["total"], 1);
    let of_org = page("organization_id=org-a&page_size=100");
    assert_eq!(of_org["total"], 6, "{of_org}");
    // Teams with a rate limit (the console's Limits page).
    ok(gw.post("/team/update", &json!({"team_id": "t-04", "rpm_limit": 5})));
    ok(gw.post(
        "/team/update",
        &json!({"team_id": "t-09", "metadata": {"model_tpm_limit": {"chat-fast": 9}}}),
    ));
    let limited = page("has_limits=true&sort_by=team_id");
    assert_eq!(
        ids(&limited["teams"], "team_id"),
        ["t-04", "t-09"],
        "{limited}"
    );
    let of_alice = page("user_id=alice");
    assert_eq!(ids(&of_alice["teams"], "team_id"), ["t-03"]);
    // Each team with its members' roles.
    let roles = roles_of(&of_alice["teams"][0]);
    assert!(
        roles.contains(&("alice".into(), "admin".into())),
        "{roles:?}"
    );

    for q in [
        "page_size=101",
        "page=0",
        "sort_by=max_budget",
        "sort_order=up",
        "status=deleted",
    ] {
        assert_error(&gw.get(&format!("/v2/team/list?{q}")), 400);
    }
    // LiteLLM's unpaged list keeps its shape and filters.
    let all = ok(gw.get("/team/list"));
    assert_eq!(all.as_array().unwrap().len(), 12, "{all}");
    let of_org = ok(gw.get("/team/list?organization_id=org-a"));
    assert_eq!(of_org.as_array().unwrap().len(), 6, "{of_org}");
    let of_bob = ok(gw.get("/team/list?user_id=bob"));
    assert_eq!(ids(&of_bob, "team_id"), ["t-03"]);
    // With its members' real roles, as the paged list shows them.
    let both = [
        ("alice".into(), "admin".into()),
        ("bob".into(), "user".into()),
    ];
    assert_eq!(roles_of(&of_bob[0]), both, "{of_bob}");
    let t03 = all
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["team_id"] == "t-03");
    assert_eq!(roles_of(t03.unwrap()), both, "{all}");
    // So do a user's teams on /user/info and an organization's teams.
    ok(gw.post("/user/new", &json!({"user_id": "carol"})));
    let admin = json!({"team_id": "t-04", "member": {"user_id": "carol", "role": "admin"}});
    ok(gw.post("/team/member_add", &admin));
    let info = ok(gw.get("/user/info?user_id=carol"));
    let carol = [("carol".into(), "admin".into())];
    assert_eq!(roles_of(&info["teams"][0]), carol, "{info}");
    let org = ok(gw.get("/organization/info?organization_id=org-a"));
    let t04 = org["teams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["team_id"] == "t-04");
    assert_eq!(roles_of(t04.expect("t-04 in org-a")), carol, "{org}");
}

/// A team's `members_with_roles` as (user id, role) pairs.
fn roles_of(team: &Value) -> Vec<(String, String)> {
    team["members_with_roles"]
        .as_array()
        .expect("members_with_roles")
        .iter()
        .map(|m| {
            (
                m["user_id"].as_str().unwrap().into(),
                m["role"].as_str().unwrap().into(),
            )
        })
        .collect()
}

#[test]
fn v2_team_list_pages_searches_and_sorts_in_memory() {
    v2_team_list(None);
}

#[test]
fn v2_team_list_pages_searches_and_sorts_on_postgres() {
    let db = TestDb::create();
    v2_team_list(Some(&db));
}

/// 10,001 teams: `/team/list` refuses to answer with all of them and
/// names `/v2/team/list`, which pages through them; a filter that narrows
/// them is answered whole.
#[test]
fn the_unpaged_team_list_is_bounded() {
    let db = TestDb::create();
    let gw = gateway(Some(&db));
    db.query(
        r#"INSERT INTO "LiteLLM_TeamTable" (team_id, team_alias, organization_id, created_at, updated_at)
        SELECT 'bulk-' || lpad(i::text, 5, '0'), 'Bulk ' || i,
            CASE WHEN i <= 3 THEN 'org-few' END, now(), now()
        FROM generate_series(1, 10001) AS i"#,
    );
    let refused = gw.get("/team/list");
    let err = assert_error(&refused, 400);
    assert!(error_message(&err).contains("/v2/team/list"), "{err:?}");
    let few = ok(gw.get("/team/list?organization_id=org-few"));
    assert_eq!(
        ids(&few, "team_id"),
        ["bulk-00001", "bulk-00002", "bulk-00003"]
    );
    let last = ok(gw.get("/v2/team/list?page=101&page_size=100&sort_by=team_id"));
    assert_eq!(
        (&last["total"], &last["total_pages"]),
        (&json!(10001), &json!(101))
    );
    assert_eq!(ids(&last["teams"], "team_id"), ["bulk-10001"]);
}

/// Organizations filtered by id and alias and, with `page_size`, paged
/// with their count (as `/v2/team/list` is); each with its own members
/// (with their users' emails), teams and budget, read for the whole page
/// at once.
fn organization_list(db: Option<&TestDb>) {
    let gw = gateway(db);
    for (id, alias, budget) in [
        ("o-1", "Acme", 10),
        ("o-2", "Beta", 20),
        ("o-3", "acme labs", 30),
    ] {
        ok(gw.post(
            "/organization/new",
            &json!({"organization_id": id, "organization_alias": alias, "max_budget": budget}),
        ));
    }
    for (team, org) in [("of-o1", "o-1"), ("of-o3-b", "o-3"), ("of-o3-a", "o-3")] {
        ok(gw.post(
            "/team/new",
            &json!({"team_id": team, "organization_id": org}),
        ));
    }
    for (org, user) in [("o-1", "ann"), ("o-3", "bob"), ("o-3", "ann")] {
        ok(gw.post(
            "/organization/member_add",
            &json!({"organization_id": org,
                "member": {"user_id": user, "user_email": format!("{user}@x.io"), "role": "internal_user"}}),
        ));
    }
    let list = |q: &str| ok(gw.get(&format!("/organization/list?{q}")));
    assert_eq!(ids(&list(""), "organization_id"), ["o-1", "o-2", "o-3"]);
    assert_eq!(
        ids(&list("org_alias=ACME"), "organization_id"),
        ["o-1", "o-3"]
    );
    assert_eq!(ids(&list("org_id=o-2"), "organization_id"), ["o-2"]);
    let page = |q: &str| {
        let answer = list(q);
        let shown = ids(&answer["organizations"], "organization_id");
        let counts = (
            &answer["total"],
            &answer["page"],
            &answer["page_size"],
            &answer["total_pages"],
        );
        let counts = (
            counts.0.clone(),
            counts.1.clone(),
            counts.2.clone(),
            counts.3.clone(),
        );
        (shown, counts)
    };
    assert_eq!(
        page("page_size=2"),
        (
            vec!["o-1".to_string(), "o-2".to_string()],
            (json!(3), json!(1), json!(2), json!(2))
        )
    );
    assert_eq!(
        page("page_size=2&page=2"),
        (
            vec!["o-3".to_string()],
            (json!(3), json!(2), json!(2), json!(2))
        )
    );
    assert_eq!(
        page("page_size=2&page=3"),
        (Vec::new(), (json!(3), json!(3), json!(2), json!(2)))
    );
    assert_eq!(
        page("page_size=25&org_alias=acme").1,
        (json!(2), json!(1), json!(25), json!(1))
    );
    assert_eq!(page("page_size=25&org_alias=none").1 .0, json!(0));
    // Every organization of a page with its own members, teams and budget.
    let all = list("page_size=25");
    let orgs = all["organizations"].as_array().unwrap();
    let teams: Vec<Vec<String>> = orgs.iter().map(|o| ids(&o["teams"], "team_id")).collect();
    assert_eq!(
        teams,
        [vec!["of-o1"], vec![], vec!["of-o3-a", "of-o3-b"]],
        "{all}"
    );
    let members: Vec<Vec<(String, String)>> = orgs
        .iter()
        .map(|o| {
            o["members"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    let email = m["user_email"].as_str().unwrap_or_default().to_string();
                    (m["user_id"].as_str().unwrap().to_string(), email)
                })
                .collect()
        })
        .collect();
    let member = |u: &str| (u.to_string(), format!("{u}@x.io"));
    assert_eq!(
        members,
        [
            vec![member("ann")],
            vec![],
            vec![member("ann"), member("bob")]
        ],
        "{all}"
    );
    let budgets: Vec<&Value> = orgs
        .iter()
        .map(|o| &o["litellm_budget_table"]["max_budget"])
        .collect();
    assert_eq!(budgets, [&json!(10.0), &json!(20.0), &json!(30.0)], "{all}");
    // The unpaged form (LiteLLM's) carries the same.
    assert_eq!(list("")[2]["members"], orgs[2]["members"]);
    let first = list("org_id=o-1");
    assert_eq!(ids(&first[0]["teams"], "team_id"), ["of-o1"], "{first}");
    for q in [
        "page=2",
        "page_size=0",
        "page_size=101",
        "page=0&page_size=2",
    ] {
        assert_error(&gw.get(&format!("/organization/list?{q}")), 400);
    }
}

#[test]
fn organization_list_filters_and_pages_in_memory() {
    organization_list(None);
}

#[test]
fn organization_list_filters_and_pages_on_postgres() {
    let db = TestDb::create();
    organization_list(Some(&db));
}

/// `/user/list` with LiteLLM's filters: `search` (part of the id or
/// email), `user_email`, `role`, `team`, each counted in `total`.
fn user_list(db: Option<&TestDb>) {
    let gw = gateway(db);
    ok(gw.post("/team/new", &json!({"team_id": "tu"})));
    for (id, email, role) in [
        ("ann", "Ann@Example.com", "internal_user"),
        ("bob", "bob@other.org", "proxy_admin"),
        ("annex", "x@example.com", "internal_user_viewer"),
    ] {
        ok(gw.post(
            "/user/new",
            &json!({"user_id": id, "user_email": email, "user_role": role}),
        ));
    }
    ok(gw.post(
        "/team/member_add",
        &json!({"team_id": "tu", "member": {"user_id": "bob", "role": "user"}}),
    ));
    let users = |q: &str| {
        let answer = ok(gw.get(&format!("/user/list?{q}")));
        let mut found = ids(&answer["users"], "user_id");
        found.sort();
        assert_eq!(answer["total"], json!(found.len()), "{q}: {answer}");
        found
    };
    assert_eq!(users("search=ANN"), ["ann", "annex"]);
    assert_eq!(users("search=other.ORG"), ["bob"]);
    assert_eq!(users("user_email=example.com"), ["ann", "annex"]);
    assert_eq!(users("role=proxy_admin"), ["bob"]);
    assert_eq!(users("team=tu"), ["bob"]);
    assert_eq!(users("search=ann&role=internal_user"), ["ann"]);
    assert!(users("search=nobody").is_empty());
}

#[test]
fn user_list_searches_in_memory() {
    user_list(None);
}

#[test]
fn user_list_searches_on_postgres() {
    let db = TestDb::create();
    user_list(Some(&db));
}

/// `/v2/model/info` in LiteLLM's shape: pages of `size`, `search` by
/// part of the model name ignoring case, `modelId`.
#[test]
fn v2_model_info_pages_and_searches() {
    let gw = gateway(None);
    let page = |q: &str| ok(gw.get(&format!("/v2/model/info?{q}")));
    let all = page("");
    assert_eq!(
        (
            &all["total_count"],
            &all["current_page"],
            &all["total_pages"],
            &all["size"]
        ),
        (&json!(5), &json!(1), &json!(1), &json!(50)),
        "{all}"
    );
    let model_ids = |v: &Value| -> Vec<String> {
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["model_info"]["id"].as_str().unwrap().to_string())
            .collect()
    };
    let unpaged = ok(gw.get("/model/info"));
    assert_eq!(model_ids(&all), model_ids(&unpaged));
    let second = page("size=2&page=2");
    assert_eq!(model_ids(&second), model_ids(&all)[2..4]);
    assert_eq!(second["total_pages"], 3, "{second}");
    let chat = page("search=CHAT");
    assert_eq!(chat["total_count"], 4, "{chat}");
    assert_eq!(model_ids(&page("search=large")), ["large-1"]);
    assert_eq!(model_ids(&page("modelId=smart-1")), ["smart-1"]);
    assert_eq!(page("modelId=none")["total_count"], 0);
    assert!(page("page=9")["data"].as_array().unwrap().is_empty());
    for q in ["size=0", "size=501", "page=0", "teamId=t"] {
        assert_error(&gw.get(&format!("/v2/model/info?{q}")), 400);
    }
}

/// LiteLLM's `(api_key, "startTime")` index replaces the gateway's on
/// `api_key` alone, and a key's page (the statement the Logs page sends
/// for a key) reads it newest first instead of sorting all of the key's
/// rows.
#[test]
fn the_spend_log_is_indexed_by_key_and_time() {
    let db = TestDb::create();
    let gw = gateway(Some(&db));
    let indexes = db.query(
        r#"SELECT string_agg(indexname, ',' ORDER BY indexname) FROM pg_indexes
        WHERE tablename = 'LiteLLM_SpendLogs'"#,
    );
    assert!(
        indexes.contains("LiteLLM_SpendLogs_api_key_startTime_idx"),
        "{indexes}"
    );
    assert!(
        !indexes.contains("gateway_spendlogs_api_key_idx"),
        "{indexes}"
    );
    db.query(
        r#"INSERT INTO "LiteLLM_SpendLogs" (request_id, api_key, "startTime", "endTime", model, status)
        SELECT 'row-' || i, 'key-' || (i % 100), t, t, 'm', 'success'
        FROM generate_series(1, 50000) AS i,
            LATERAL (SELECT timestamp '2026-01-01' + i * interval '1 second' AS t) AS at;
        ANALYZE "LiteLLM_SpendLogs""#,
    );
    let plan = db.query(
        r#"EXPLAIN SELECT request_id FROM "LiteLLM_SpendLogs" WHERE api_key = 'key-7'
        ORDER BY "startTime" DESC, request_id DESC LIMIT 101"#,
    );
    assert!(
        plan.contains("Index Scan Backward using \"LiteLLM_SpendLogs_api_key_startTime_idx\""),
        "{plan}"
    );
    let page = ok(gw.get("/gateway/logs?api_key=key-7&page_size=3"));
    let rows: Vec<&str> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(rows, ["row-49907", "row-49807", "row-49707"], "{page}");
}
