#[test]
fn a_model_budget_with_a_time_period_opens_again_in_the_next_window() {
    let (db, gw) = start();
    let answer = admin(
        &gw,
        "/key/generate",
        json!({"model_max_budget": {"chat-fast": {"budget_limit": 1, "time_period": "2s"}}}),
    );
    let key = answer["key"].as_str().unwrap().to_string();
    let token = answer["token"].as_str().unwrap().to_string();
    let chat = |gw: &Gateway| {
        call_as(
            gw,
            &key,
            "POST",
            "/v1/chat/completions",
            Some(&chat_body("chat-fast")),
        )
    };
    chat(&gw).expect_status(200);
    // The key is cached: its first window is recorded (spend kept).
    let windows = |gw: &Gateway| {
        let info = gw
            .get(&format!("/key/info?key={key}"))
            .expect_status(200)
            .json();
        info["info"]["metadata"]["gateway_model_budget_windows"]["chat-fast"].clone()
    };
    let first = e2e::eventually("a first window", Duration::from_secs(10), || {
        windows(&gw).as_str().map(str::to_string)
    });
    // Spend past the model's budget, written as LiteLLM would, announced.
    db.query(&format!(
        r#"UPDATE "LiteLLM_VerificationToken" SET model_spend = '{{"chat-fast": 5}}' WHERE token = '{token}'; NOTIFY gateway_changes, 'key:{token}'"#
    ));
    let refused = e2e::eventually("the model budget refuses", Duration::from_secs(10), || {
        let r = chat(&gw);
        (r.status == 429).then_some(r)
    });
    let err = assert_error(&refused, 429);
    assert_eq!(err["type"], "budget_exceeded", "{err:?}");
    // The next window zeroes the model's spend and the key may call it again.
    e2e::eventually("the next window", Duration::from_secs(15), || {
        (chat(&gw).status == 200).then_some(())
    });
    let later = windows(&gw);
    assert!(
        later.as_str() > Some(first.as_str()),
        "{later} after {first}"
    );
    let info = gw
        .get(&format!("/key/info?key={key}"))
        .expect_status(200)
        .json();
    let spent = info["info"]["model_spend"]["chat-fast"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(spent < 1.0, "model spend reset: {info}");
}
