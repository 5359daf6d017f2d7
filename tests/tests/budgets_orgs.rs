//! LiteLLM's `/budget/*` and `/organization/*` (issue 16): the shapes,
//! status codes and messages of LiteLLM's answers, on the in-memory store
//! and on LiteLLM's tables in Postgres. Organizations own a budget row,
//! models, teams and members with roles; a team in an organization stays
//! within its models, budget and limits.

use e2e::{assert_error, chat_body, error_message, Gateway, Response, TestDb, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

fn mock_model(name: &str) -> Value {
    json!({
        "model_name": name,
        "litellm_params": {"model": format!("mock/{name}"), "mock_response": "hi",
            "input_cost_per_token": 0.000001, "output_cost_per_token": 0.000002},
        "model_info": {"id": format!("{name}-1")},
    })
}

/// A gateway on the in-memory store, or on a fresh Postgres database.
fn start(postgres: bool) -> (Option<TestDb>, Gateway) {
    let config = json!({
        "model_list": [mock_model("chat-fast"), mock_model("chat-deep")],
        "general_settings": {"master_key": MASTER_KEY},
    });
    if !postgres {
        return (None, Gateway::start_json(&config, &[]));
    }
    let db = TestDb::create();
    let gw = Gateway::start_json(&config, &[("DATABASE_URL", db.url())]);
    (Some(db), gw)
}

/// `method path` with the master key and a JSON body.
fn call(gw: &Gateway, method: &str, path: &str, body: &Value) -> Response {
    let auth = format!("Bearer {MASTER_KEY}");
    gw.call(
        method,
        path,
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
}

fn ok(resp: Response) -> Value {
    resp.expect_status(200).json()
}

/// The `param` of a 400 answer, checking its message contains `text`.
fn refused(resp: &Response, status: u16, text: &str) -> String {
    let err = assert_error(resp, status);
    assert!(error_message(&err).contains(text), "want {text:?}: {err:?}");
    err["param"].as_str().unwrap_or_default().to_string()
}

fn budgets(postgres: bool) {
    let (db, gw) = start(postgres);
    let b = ok(gw.post(
        "/budget/new",
        &json!({"budget_id": "b1", "max_budget": 10, "soft_budget": 8, "rpm_limit": 5,
                "tpd_limit": 100, "budget_duration": "30d",
                "model_max_budget": {"chat-fast": {"budget_limit": "0.5", "time_period": "1d"}}}),
    ));
    assert_eq!(
        (
            &b["budget_id"],
            &b["max_budget"],
            &b["rpm_limit"],
            &b["tpd_limit"]
        ),
        (&json!("b1"), &json!(10.0), &json!(5), &json!(100)),
        "{b}"
    );
    assert!(b["budget_reset_at"].is_string(), "{b}");
    assert_eq!(b["created_by"], "default_user_id", "{b}");
    let generated = ok(gw.post("/budget/new", &json!({"max_budget": 1})));
    assert_eq!(
        generated["budget_id"].as_str().unwrap().len(),
        36,
        "{generated}"
    );

    // LiteLLM's refusals.
    let dup = gw.post("/budget/new", &json!({"budget_id": "b1"}));
    refused(&dup, 400, "Budget with id 'b1' already exists.");
    let neg = gw.post("/budget/new", &json!({"max_budget": -1}));
    let msg = "max_budget must be a non-negative finite number. Received: -1.0";
    assert_eq!(refused(&neg, 400, msg), "max_budget");
    let bad = gw.post("/budget/new", &json!({"budget_duration": "often"}));
    refused(&bad, 400, "Invalid budget_duration 'often'");
    for (body, field) in [
        (json!({"max_budget": "ten"}), "max_budget"),
        (json!({"rpm_limit": 1.5}), "rpm_limit"),
        (json!({"max_budgett": 1}), "max_budgett"),
        (json!({"tpd_limit": 10_000_000_000_000_i64}), "tpd_limit"),
        (
            json!({"max_parallel_requests": 3_000_000_000_i64}),
            "max_parallel_requests",
        ),
        (json!({"max_budget": 2e9}), "max_budget"),
        (json!({"budget_id": "b".repeat(20_000)}), "budget_id"),
        (
            json!({"model_max_budget": {"m": {"budget_limit": "x"}}}),
            "model_max_budget",
        ),
    ] {
        assert_eq!(
            refused(&gw.post("/budget/new", &body), 400, ""),
            field,
            "{body}"
        );
    }

    // Updates change the fields given; a cleared duration clears the reset.
    let u = ok(gw.post(
        "/budget/update",
        &json!({"budget_id": "b1", "max_budget": 20, "budget_duration": null}),
    ));
    assert_eq!(
        (&u["max_budget"], &u["rpm_limit"]),
        (&json!(20.0), &json!(5)),
        "{u}"
    );
    assert!(
        u["budget_duration"].is_null() && u["budget_reset_at"].is_null(),
        "{u}"
    );
    refused(
        &gw.post("/budget/update", &json!({"max_budget": 1})),
        400,
        "budget_id is required",
    );
    assert_error(
        &gw.post("/budget/update", &json!({"budget_id": "nope"})),
        404,
    );

    let info = ok(gw.post("/budget/info", &json!({"budgets": ["b1", "nope"]})));
    assert_eq!(info.as_array().unwrap().len(), 1, "{info}");
    assert_eq!(info[0]["max_budget"], 20.0, "{info}");
    let empty = gw.post("/budget/info", &json!({"budgets": []}));
    refused(&empty, 400, "Specify list of budget id's to query");
    assert_eq!(ok(gw.get("/budget/list")).as_array().unwrap().len(), 2);
    let settings = ok(gw.get("/budget/settings?budget_id=b1"));
    let names: Vec<&str> = settings
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["field_name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "max_budget",
            "soft_budget",
            "max_parallel_requests",
            "tpm_limit",
            "rpm_limit",
            "tpd_limit",
            "budget_duration",
            "model_max_budget"
        ]
    );
    assert_eq!(
        (&settings[0]["field_value"], &settings[0]["field_type"]),
        (&json!(20.0), &json!("Float"))
    );
    assert_error(&gw.get("/budget/settings"), 400);

    if let Some(db) = &db {
        let row = db.query(
            r#"SELECT max_budget || ',' || soft_budget || ',' || created_by FROM "LiteLLM_BudgetTable" WHERE budget_id = 'b1'"#,
        );
        assert_eq!(row, "20,8,default_user_id");
    }

    let gone = ok(call(&gw, "POST", "/budget/delete", &json!({"id": "b1"})));
    assert_eq!(gone["budget_id"], "b1");
    assert_error(
        &call(&gw, "POST", "/budget/delete", &json!({"id": "b1"})),
        404,
    );
    assert_eq!(ok(gw.get("/budget/list")).as_array().unwrap().len(), 1);

    // Admins only.
    let key = ok(gw.post("/key/generate", &json!({})))["key"]
        .as_str()
        .unwrap()
        .to_string();
    let auth = format!("Bearer {key}");
    let resp = gw.call("GET", "/budget/list", &[("Authorization", &auth)], b"");
    assert_error(&resp, 403);
}

#[test]
fn budgets_in_memory() {
    budgets(false);
}

#[test]
fn budgets_in_postgres() {
    budgets(true);
}

fn organizations(postgres: bool) {
    let (db, gw) = start(postgres);
    ok(gw.post(
        "/budget/new",
        &json!({"budget_id": "shared", "max_budget": 3}),
    ));
    let org = ok(gw.post(
        "/organization/new",
        &json!({"organization_alias": "Acme", "models": ["chat-fast"], "max_budget": 100,
                "tpm_limit": 1000, "metadata": {"a": 1}, "model_rpm_limit": {"chat-fast": 5},
                "object_permission": {"vector_stores": []}, "tags": ["x"]}),
    ));
    let org_id = org["organization_id"].as_str().unwrap().to_string();
    assert_eq!(org_id.len(), 36, "{org}");
    assert_eq!(org["litellm_budget_table"]["max_budget"], 100.0, "{org}");
    assert_eq!(
        org["budget_id"], org["litellm_budget_table"]["budget_id"],
        "{org}"
    );
    assert_eq!(
        org["metadata"]["model_rpm_limit"],
        json!({"chat-fast": 5}),
        "{org}"
    );
    assert_eq!(
        (&org["spend"], &org["models"]),
        (&json!(0.0), &json!(["chat-fast"])),
        "{org}"
    );
    let named = ok(gw.post(
        "/organization/new",
        &json!({"organization_id": "org-2", "organization_alias": "Beta", "budget_id": "shared"}),
    ));
    assert_eq!(named["litellm_budget_table"]["max_budget"], 3.0, "{named}");

    assert_error(
        &gw.post(
            "/organization/new",
            &json!({"organization_id": "org-2", "organization_alias": "B"}),
        ),
        409,
    );
    for (body, field) in [
        (json!({"models": []}), "organization_alias"),
        (
            json!({"organization_alias": "x", "budget_id": "nope"}),
            "budget_id",
        ),
        (
            json!({"organization_alias": "x", "models": "chat-fast"}),
            "models",
        ),
        (
            json!({"organization_alias": "x", "max_budget": -2}),
            "max_budget",
        ),
        (
            json!({"organization_alias": "x", "blocked": "no"}),
            "blocked",
        ),
        (
            json!({"organization_alias": "x", "organisation": "typo"}),
            "organisation",
        ),
    ] {
        assert_eq!(
            refused(&gw.post("/organization/new", &body), 400, ""),
            field,
            "{body}"
        );
    }

    // Teams of the organization stay within its models and limits.
    let team = |body: Value| gw.post("/team/new", &body);
    let r = team(json!({"team_id": "t-deep", "organization_id": org_id, "models": ["chat-deep"]}));
    assert_eq!(
        refused(&r, 400, "not in organization's allowed models"),
        "models"
    );
    let r = team(json!({"team_id": "t-big", "organization_id": org_id, "tpm_limit": 5000}));
    assert_eq!(
        refused(&r, 400, "exceeds organization's tpm_limit"),
        "tpm_limit"
    );
    let r = team(json!({"team_id": "t-x", "organization_id": "nope"}));
    assert_eq!(
        refused(&r, 400, "Organization not found for organization_id=nope"),
        "organization_id"
    );
    let t = ok(team(
        json!({"team_id": "t-org", "organization_id": org_id, "models": ["chat-fast"]}),
    ));
    assert_eq!(t["organization_id"], org_id, "{t}");
    let moved = call(
        &gw,
        "POST",
        "/team/update",
        &json!({"team_id": "t-org", "organization_id": "org-2", "max_budget": 5}),
    );
    assert_eq!(
        refused(&moved, 400, "exceeds organization's max_budget"),
        "max_budget"
    );

    // The team's spend is added to its organization's, as LiteLLM adds it.
    let key = ok(gw.post("/key/generate", &json!({"team_id": "t-org"})))["key"]
        .as_str()
        .unwrap()
        .to_string();
    let auth = format!("Bearer {key}");
    let chat = gw.call(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        chat_body("chat-fast").to_string().as_bytes(),
    );
    assert_eq!(chat.status, 200, "{}", chat.text());
    let info_path = format!("/organization/info?organization_id={org_id}");
    e2e::eventually("the organization's spend", Duration::from_secs(10), || {
        let spend = ok(gw.get(&info_path))["spend"].as_f64().unwrap_or(0.0);
        (spend > 0.0).then_some(())
    });

    let info = ok(gw.get(&format!("/organization/info?organization_id={org_id}")));
    assert_eq!(info["teams"][0]["team_id"], "t-org", "{info}");
    assert_eq!(
        (&info["members"], &info["litellm_budget_table"]["tpm_limit"]),
        (&json!([]), &json!(1000)),
        "{info}"
    );
    let missing = gw.get("/organization/info?organization_id=nope");
    refused(&missing, 404, "Organization not found");
    let many = ok(gw.post(
        "/organization/info",
        &json!({"organizations": [org_id, "nope"]}),
    ));
    assert_eq!(many.as_array().unwrap().len(), 1, "{many}");
    refused(
        &gw.post("/organization/info", &json!({"organizations": []})),
        400,
        "Specify list of organization id's",
    );

    // Updates: alias and models on the row, metadata merged, budget
    // fields (also nested, as LiteLLM's UI sends them) on its budget row.
    let u = ok(call(
        &gw,
        "PATCH",
        "/organization/update",
        &json!({"organization_id": org_id, "organization_alias": "Acme 2", "max_budget": 50,
                "metadata": {"b": 2}}),
    ));
    assert_eq!(u["organization_alias"], "Acme 2", "{u}");
    assert_eq!(
        (&u["metadata"]["a"], &u["metadata"]["b"]),
        (&json!(1), &json!(2)),
        "{u}"
    );
    assert_eq!(u["litellm_budget_table"]["max_budget"], 50.0, "{u}");
    assert_eq!(u["teams"][0]["team_id"], "t-org", "{u}");
    let u = ok(call(
        &gw,
        "POST",
        "/organization/update",
        &json!({"organization_id": org_id, "litellm_budget_table": {"rpm_limit": 7}}),
    ));
    assert_eq!(
        (
            &u["litellm_budget_table"]["rpm_limit"],
            &u["litellm_budget_table"]["max_budget"]
        ),
        (&json!(7), &json!(50.0)),
        "{u}"
    );
    assert_error(
        &call(
            &gw,
            "PATCH",
            "/organization/update",
            &json!({"organization_id": "nope"}),
        ),
        404,
    );
    refused(
        &call(
            &gw,
            "PATCH",
            "/organization/update",
            &json!({"max_budget": 1}),
        ),
        400,
        "organization_id is required",
    );

    let listed = ok(gw.get("/organization/list?org_alias=acme"));
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(
        ok(gw.get("/organization/list")).as_array().unwrap().len(),
        2
    );
    assert_eq!(ok(gw.get("/organization/list?org_id=nope")), json!([]));

    // Members with LiteLLM's roles; a user row is made for a new member.
    let added = ok(gw.post(
        "/organization/member_add",
        &json!({"organization_id": org_id,
        "member": [{"user_id": "u1", "user_email": "u1@x.io", "role": "org_admin"},
                   {"user_id": "u2", "role": "internal_user"}],
        "max_budget_in_organization": 10}),
    ));
    assert_eq!(
        added["updated_users"].as_array().unwrap().len(),
        2,
        "{added}"
    );
    assert_eq!(
        added["updated_users"][0]["user_email"], "u1@x.io",
        "{added}"
    );
    let first = &added["updated_organization_memberships"][0];
    assert_eq!(
        (&first["user_email"], &first["organization_id"]),
        (&json!("u1@x.io"), &json!(org_id)),
        "{added}"
    );
    let roles: Vec<&Value> = added["updated_organization_memberships"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["user_role"])
        .collect();
    assert_eq!(
        roles,
        [&json!("org_admin"), &json!("internal_user")],
        "{added}"
    );
    ok(gw.get("/user/info?user_id=u2"));
    let again = gw.post(
        "/organization/member_add",
        &json!({"organization_id": org_id, "member": {"user_id": "u1", "role": "org_admin"}}),
    );
    assert_eq!(refused(&again, 400, "already a member"), "member");
    let bad = gw.post(
        "/organization/member_add",
        &json!({"organization_id": org_id, "member": [{"user_id": "u3", "role": "admin"}]}),
    );
    assert_eq!(refused(&bad, 400, ""), "member[0].role");
    assert_error(&gw.post("/organization/member_add", &json!({"organization_id": "nope", "member": {"user_id": "u3", "role": "internal_user"}})), 404);

    let m = ok(call(
        &gw,
        "PATCH",
        "/organization/member_update",
        &json!({"organization_id": org_id,
        "user_id": "u2", "role": "internal_user_viewer", "max_budget_in_organization": 5}),
    ));
    assert_eq!(
        (&m["user_role"], &m["litellm_budget_table"]["max_budget"]),
        (&json!("internal_user_viewer"), &json!(5.0)),
        "{m}"
    );
    assert!(m["budget_id"].is_string(), "{m}");
    let m = ok(call(
        &gw,
        "PATCH",
        "/organization/member_update",
        &json!({"organization_id": org_id,
        "user_email": "u1@x.io", "role": "internal_user"}),
    ));
    assert_eq!(
        (&m["user_id"], &m["user_role"]),
        (&json!("u1"), &json!("internal_user")),
        "{m}"
    );
    let r = call(
        &gw,
        "PATCH",
        "/organization/member_update",
        &json!({"organization_id": org_id, "user_id": "u1", "role": "proxy_admin"}),
    );
    assert_eq!(refused(&r, 400, "Invalid role. Must be one of"), "role");
    assert_error(
        &call(
            &gw,
            "PATCH",
            "/organization/member_update",
            &json!({"organization_id": org_id, "user_id": "u9", "role": "internal_user"}),
        ),
        404,
    );
    let r = call(
        &gw,
        "PATCH",
        "/organization/member_update",
        &json!({"organization_id": "nope", "user_id": "u1"}),
    );
    refused(&r, 400, "Organization not found for organization_id=nope");
    refused(
        &call(
            &gw,
            "DELETE",
            "/organization/member_delete",
            &json!({"organization_id": org_id}),
        ),
        400,
        "Either user id or user email must be provided",
    );

    let d = ok(call(
        &gw,
        "DELETE",
        "/organization/member_delete",
        &json!({"organization_id": org_id, "user_id": "u1"}),
    ));
    assert_eq!(
        (&d["user_id"], &d["organization_id"]),
        (&json!("u1"), &json!(org_id)),
        "{d}"
    );
    assert_error(
        &call(
            &gw,
            "DELETE",
            "/organization/member_delete",
            &json!({"organization_id": org_id, "user_id": "u1"}),
        ),
        404,
    );
    let info = ok(gw.get(&format!("/organization/info?organization_id={org_id}")));
    let members: Vec<&Value> = info["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["user_id"])
        .collect();
    assert_eq!(members, [&json!("u2")], "{info}");

    if let Some(db) = &db {
        let row = db.query(&format!(
            r#"SELECT organization_alias || ',' || array_to_string(models, '|') || ',' || (SELECT count(*) FROM "LiteLLM_OrganizationMembership" WHERE organization_id = '{org_id}') FROM "LiteLLM_OrganizationTable" WHERE organization_id = '{org_id}'"#
        ));
        assert_eq!(row, "Acme 2,chat-fast,1");
        let team_org =
            db.query(r#"SELECT organization_id FROM "LiteLLM_TeamTable" WHERE team_id = 't-org'"#);
        assert_eq!(team_org, org_id);
    }

    // A budget an organization uses is not deleted; deleting the
    // organization takes its teams and memberships, not its budget.
    let r = call(&gw, "POST", "/budget/delete", &json!({"id": "shared"}));
    assert_eq!(
        refused(&r, 400, "is the budget of organization 'org-2'"),
        "id"
    );
    assert_error(
        &call(
            &gw,
            "DELETE",
            "/organization/delete",
            &json!({"organization_ids": [org_id, "nope"]}),
        ),
        404,
    );
    let gone = ok(call(
        &gw,
        "DELETE",
        "/organization/delete",
        &json!({"organization_ids": [org_id]}),
    ));
    assert_eq!(gone[0]["organization_id"], org_id, "{gone}");
    assert_error(&gw.get("/team/info?team_id=t-org"), 404);
    assert_error(
        &gw.get(&format!("/organization/info?organization_id={org_id}")),
        404,
    );
    let budget_id = org["budget_id"].as_str().unwrap();
    let left = ok(gw.post("/budget/info", &json!({"budgets": [budget_id]})));
    assert_eq!(left.as_array().unwrap().len(), 1, "{left}");
    assert_eq!(
        ok(gw.get("/organization/list")).as_array().unwrap().len(),
        1
    );
}

#[test]
fn organizations_in_memory() {
    organizations(false);
}

#[test]
fn organizations_in_postgres() {
    organizations(true);
}

/// Concurrent changes of one organization never lose one another: members
/// added at once all join, and metadata given by concurrent updates is
/// merged in one statement each.
#[test]
fn concurrent_organization_changes_are_all_kept() {
    let (_db, gw) = start(true);
    let org = ok(gw.post("/organization/new", &json!({"organization_alias": "Busy"})));
    let org_id = org["organization_id"].as_str().unwrap().to_string();
    std::thread::scope(|s| {
        for i in 0..8 {
            let (gw, org_id) = (&gw, &org_id);
            s.spawn(move || {
                let member = json!({"user_id": format!("cu{i}"), "role": "internal_user"});
                let add = json!({"organization_id": org_id, "member": member});
                ok(gw.post("/organization/member_add", &add));
                let update = json!({"organization_id": org_id, "metadata": {format!("k{i}"): i}});
                ok(call(gw, "PATCH", "/organization/update", &update));
            });
        }
    });
    let info = ok(gw.get(&format!("/organization/info?organization_id={org_id}")));
    assert_eq!(info["members"].as_array().unwrap().len(), 8, "{info}");
    for i in 0..8 {
        assert_eq!(info["metadata"][format!("k{i}")], i, "{info}");
    }
}
