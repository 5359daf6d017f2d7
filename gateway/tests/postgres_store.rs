//! The Postgres store against a real Postgres: each test creates its own
//! database (`gw_test_<random>`) through the admin URL in
//! `DATABASE_URL_ADMIN` (default `postgres://postgres@127.0.0.1:5432/postgres`)
//! and drops it afterwards. Postgres must be reachable (scripts/test.sh
//! starts it): these tests fail rather than skip without it.

use chrono::{DateTime, Duration, TimeZone, Utc};
use futures_util::StreamExt;
use gateway::auth::{hash_key, token_hex, KeyCache};
use gateway::control::ControlPlane;
use gateway::models::Models;
use gateway::router::RouterSettings;
use gateway::store::postgres::{PostgresStore, MIGRATIONS};
use gateway::store::{
    BudgetFields, BudgetWindow, Change, DailyQuery, DailyScope, EndUserBudget, EndUserRecord,
    EndUserUpdate, JsonText, KeyRecord, MemoryStore, ModelBudgets, ModelRecord, SpendFilter,
    SpendLogRow, Store, TeamRecord, UserRecord,
};
use gateway::sync::listener::{self, ListenConfig};
use gateway::sync::Caches;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use tokio_postgres::{AsyncMessage, NoTls};

const DEFAULT_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

fn admin_url() -> String {
    std::env::var("DATABASE_URL_ADMIN").unwrap_or_else(|_| DEFAULT_ADMIN_URL.to_string())
}

/// A scratch database, dropped (with its connections) when the test ends.
struct TestDb {
    name: String,
    url: String,
}

impl TestDb {
    async fn create() -> TestDb {
        let name = format!("gw_test_{:016x}", fastrand::u64(..));
        let admin = admin(&admin_url()).await;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create the test database");
        let url = with_dbname(&admin_url(), &name);
        TestDb { name, url }
    }

    /// A plain client on the test database.
    async fn client(&self) -> tokio_postgres::Client {
        admin(&self.url).await
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let admin = admin(&admin_url()).await;
                let _ = admin.batch_execute(&sql).await;
            });
        })
        .join();
    }
}

/// Connects, failing the test with a clear message when Postgres is down.
async fn admin(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| {
            panic!("Postgres at {url} must be reachable (scripts/test.sh starts it): {e}")
        });
    tokio::spawn(connection);
    client
}

/// `admin_url` with its database replaced by `name`.
fn with_dbname(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_part = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    format!("{host_part}/{name}{query}")
}

async fn store(db: &TestDb) -> PostgresStore {
    PostgresStore::connect(&db.url)
        .await
        .expect("connect and migrate")
}

/// Now, to the millisecond (Postgres keeps LiteLLM's TIMESTAMP(3)).
fn now_ms() -> DateTime<Utc> {
    Utc.timestamp_millis_opt(Utc::now().timestamp_millis())
        .unwrap()
}

fn map(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

fn full_key(plain: &str, created: DateTime<Utc>) -> KeyRecord {
    KeyRecord {
        token: token_hex(&hash_key(plain)),
        key_name: Some("sk-...abcd".into()),
        key_alias: Some(format!("alias-{plain}")),
        spend: 0.5,
        max_budget: Some(10.0),
        soft_budget: Some(8.0),
        // The row the gateway makes for a key's soft budget.
        budget_id: Some(format!("key-{}", token_hex(&hash_key(plain)))),
        budget_duration: Some("30d".into()),
        budget_reset_at: Some(created + Duration::days(30)),
        expires: Some(created + Duration::days(90)),
        models: vec!["gpt-4o".into(), "claude".into()],
        aliases: map(json!({"fast": "gpt-4o-mini"})),
        user_id: Some("u1".into()),
        team_id: Some("t1".into()),
        max_parallel_requests: Some(4),
        tpm_limit: Some(100_000),
        rpm_limit: Some(60),
        model_max_budget: map(json!({"gpt-4o": 5.0})),
        model_spend: Map::new(),
        model_rpm_limit: map(json!({"gpt-4o": 10})),
        model_tpm_limit: map(json!({"gpt-4o": 1000})),
        blocked: false,
        allowed_model_region: Some("eu".into()),
        allowed_routes: vec!["/chat/completions".into(), "info_routes".into()],
        allowed_cache_controls: vec!["no-cache".into(), "ttl".into()],
        budget_limits: vec![BudgetWindow {
            budget_duration: "1d".into(),
            max_budget: 1.5,
            reset_at: Some(created + Duration::days(1)),
        }],
        metadata: map(json!({"owner": "ops", "tags": ["a", "b"]})),
        created_at: Some(created),
        updated_at: Some(created),
        // Only LiteLLM writes them.
        litellm_fields: Map::new(),
    }
}

fn team(id: &str, created: DateTime<Utc>) -> TeamRecord {
    TeamRecord {
        team_id: id.into(),
        team_alias: Some(format!("team {id}")),
        organization_id: Some("org-1".into()),
        models: vec!["gpt-4o".into()],
        members: vec!["u1".into(), "u2".into()],
        spend: 1.0,
        max_budget: Some(100.0),
        budget_duration: Some("1mo".into()),
        budget_reset_at: Some(created + Duration::days(30)),
        tpm_limit: Some(1000),
        rpm_limit: Some(10),
        max_parallel_requests: Some(2),
        blocked: false,
        allowed_model_region: Some("us".into()),
        metadata: map(json!({"cost_center": 42})),
        created_at: Some(created),
        model_max_budget: map(json!({"gpt-4o": {"budget_limit": 2.5, "time_period": "1d"}})),
        model_spend: Map::new(),
        budget_limits: vec![BudgetWindow {
            budget_duration: "7d".into(),
            max_budget: 20.0,
            reset_at: None,
        }],
        default_team_member_models: vec!["gpt-4o".into()],
        model_aliases: map(json!({"fast": "gpt-4o"})),
        litellm_fields: Map::new(),
    }
}

fn user(id: &str, created: DateTime<Utc>) -> UserRecord {
    UserRecord {
        user_id: id.into(),
        user_email: Some(format!("{id}@example.com")),
        user_alias: Some(id.to_uppercase()),
        user_role: Some("internal_user".into()),
        teams: vec!["t1".into()],
        models: vec![],
        spend: 2.0,
        max_budget: Some(50.0),
        budget_duration: Some("7d".into()),
        budget_reset_at: Some(created + Duration::days(7)),
        tpm_limit: None,
        rpm_limit: Some(5),
        max_parallel_requests: None,
        metadata: Map::new(),
        created_at: Some(created),
        model_max_budget: map(json!({"gpt-4o": 1.5})),
        model_spend: Map::new(),
    }
}

/// Runs the same call on the in-memory and the Postgres store and asserts
/// they answer alike.
macro_rules! same {
    ($mem:expr, $pg:expr, $s:ident => $call:expr) => {{
        let m = {
            let $s = &$mem;
            $call.await.map_err(|e| e.to_string())
        };
        let p = {
            let $s = &$pg;
            $call.await.map_err(|e| e.to_string())
        };
        assert_eq!(m, p, "{}", stringify!($call));
    }};
}

#[tokio::test]
async fn migrations_apply_once_even_when_replicas_race() {
    let db = TestDb::create().await;
    let (a, b) = tokio::join!(
        PostgresStore::connect(&db.url),
        PostgresStore::connect(&db.url)
    );
    a.expect("first replica migrates");
    b.expect("second replica migrates");
    store(&db).await;
    let client = db.client().await;
    let versions: Vec<String> = client
        .query(
            "SELECT version FROM gateway_schema_migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let expected: Vec<String> = MIGRATIONS.iter().map(|(v, _)| v.to_string()).collect();
    assert_eq!(versions, expected);
    // The SQL itself is idempotent too: re-running it changes nothing.
    for (_, sql) in MIGRATIONS {
        client
            .batch_execute(sql)
            .await
            .expect("migration SQL re-runs");
    }
}

/// Rows written before 0005 have no `litellm_call_id`: 0008 fills it in
/// before dropping the duplicate `call_id` index, so `/spend/logs` (which
/// now looks calls up by `litellm_call_id`) still finds their calls.
#[tokio::test]
async fn calls_written_before_litellm_call_id_are_still_found_by_call_id() {
    let db = TestDb::create().await;
    let client = db.client().await;
    let before_0008 = MIGRATIONS
        .iter()
        .take_while(|(v, _)| *v != "0008_drop_duplicate_call_id_index");
    for (version, sql) in before_0008 {
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{version}: {e}"));
    }
    client
        .batch_execute(
            r#"INSERT INTO "LiteLLM_SpendLogs" (request_id, call_id, attempt, call_type,
                    api_key, "startTime", "endTime", model)
                VALUES ('old-1:2', 'old-1', 2, 'acompletion', 'k', '2025-01-01 10:00:00',
                    '2025-01-01 10:00:01', 'gpt-4o')"#,
        )
        .await
        .unwrap();
    let pg = store(&db).await;
    let rows = vec![spend_row("new-1", "k", 0.0, now_ms())];
    pg.record_spend(&rows, std::time::Duration::ZERO)
        .await
        .unwrap();
    for call in ["old-1", "new-1"] {
        let filter = SpendFilter {
            request_id: Some(call.into()),
            ..Default::default()
        };
        let logs = pg.spend_logs(&filter).await.unwrap();
        assert_eq!(logs.len(), 1, "{call}");
        assert_eq!(&*logs[0].call_id, call);
    }
    let duplicate: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_indexes WHERE indexname = 'gateway_spendlogs_call_id_idx'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(duplicate, 0, "the duplicate call_id index is dropped");
}

/// LiteLLM's tables as Prisma creates them (the parts the gateway uses, plus
/// a LiteLLM-only column and a foreign key), before the gateway ever ran.
const LITELLM_SCHEMA: &str = r#"
CREATE TABLE "LiteLLM_BudgetTable" (
    "budget_id" TEXT NOT NULL,
    "max_budget" DOUBLE PRECISION,
    "soft_budget" DOUBLE PRECISION,
    "max_parallel_requests" INTEGER,
    "tpm_limit" BIGINT,
    "rpm_limit" BIGINT,
    "model_max_budget" JSONB,
    "budget_duration" TEXT,
    "budget_reset_at" TIMESTAMP(3),
    "created_at" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "created_by" TEXT NOT NULL,
    "updated_at" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_by" TEXT NOT NULL,
    CONSTRAINT "LiteLLM_BudgetTable_pkey" PRIMARY KEY ("budget_id")
);
CREATE TABLE "LiteLLM_VerificationToken" (
    "token" TEXT NOT NULL,
    "key_name" TEXT,
    "key_alias" TEXT,
    "soft_budget_cooldown" BOOLEAN NOT NULL DEFAULT false,
    "spend" DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    "expires" TIMESTAMP(3),
    "models" TEXT[],
    "aliases" JSONB NOT NULL DEFAULT '{}',
    "config" JSONB NOT NULL DEFAULT '{}',
    "user_id" TEXT,
    "team_id" TEXT,
    "permissions" JSONB NOT NULL DEFAULT '{}',
    "max_parallel_requests" INTEGER,
    "metadata" JSONB NOT NULL DEFAULT '{}',
    "blocked" BOOLEAN,
    "tpm_limit" BIGINT,
    "rpm_limit" BIGINT,
    "max_budget" DOUBLE PRECISION,
    "budget_duration" TEXT,
    "budget_reset_at" TIMESTAMP(3),
    "model_spend" JSONB NOT NULL DEFAULT '{}',
    "model_max_budget" JSONB NOT NULL DEFAULT '{}',
    "budget_id" TEXT,
    "created_at" TIMESTAMP(3) DEFAULT CURRENT_TIMESTAMP,
    "created_by" TEXT,
    "updated_at" TIMESTAMP(3) DEFAULT CURRENT_TIMESTAMP,
    "updated_by" TEXT,
    CONSTRAINT "LiteLLM_VerificationToken_pkey" PRIMARY KEY ("token")
);
ALTER TABLE "LiteLLM_VerificationToken" ADD CONSTRAINT "LiteLLM_VerificationToken_budget_id_fkey"
    FOREIGN KEY ("budget_id") REFERENCES "LiteLLM_BudgetTable"("budget_id")
    ON DELETE SET NULL ON UPDATE CASCADE;
CREATE TABLE "LiteLLM_TeamTable" (
    "team_id" TEXT NOT NULL,
    "team_alias" TEXT,
    "admins" TEXT[],
    "members" TEXT[],
    "members_with_roles" JSONB NOT NULL DEFAULT '{}',
    "metadata" JSONB NOT NULL DEFAULT '{}',
    "max_budget" DOUBLE PRECISION,
    "spend" DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    "models" TEXT[],
    "max_parallel_requests" INTEGER,
    "tpm_limit" BIGINT,
    "rpm_limit" BIGINT,
    "budget_duration" TEXT,
    "budget_reset_at" TIMESTAMP(3),
    "blocked" BOOLEAN NOT NULL DEFAULT false,
    "created_at" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "model_spend" JSONB NOT NULL DEFAULT '{}',
    "model_max_budget" JSONB NOT NULL DEFAULT '{}',
    CONSTRAINT "LiteLLM_TeamTable_pkey" PRIMARY KEY ("team_id")
);
CREATE TABLE "LiteLLM_UserTable" (
    "user_id" TEXT NOT NULL,
    "user_alias" TEXT,
    "team_id" TEXT,
    "teams" TEXT[] DEFAULT ARRAY[]::TEXT[],
    "user_role" TEXT,
    "max_budget" DOUBLE PRECISION,
    "spend" DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    "user_email" TEXT,
    "models" TEXT[],
    "metadata" JSONB NOT NULL DEFAULT '{}',
    "max_parallel_requests" INTEGER,
    "tpm_limit" BIGINT,
    "rpm_limit" BIGINT,
    "budget_duration" TEXT,
    "budget_reset_at" TIMESTAMP(3),
    CONSTRAINT "LiteLLM_UserTable_pkey" PRIMARY KEY ("user_id")
);
CREATE TABLE "LiteLLM_SpendLogs" (
    "request_id" TEXT NOT NULL,
    "call_type" TEXT NOT NULL,
    "api_key" TEXT NOT NULL DEFAULT '',
    "spend" DOUBLE PRECISION NOT NULL DEFAULT 0.0,
    "total_tokens" INTEGER NOT NULL DEFAULT 0,
    "prompt_tokens" INTEGER NOT NULL DEFAULT 0,
    "completion_tokens" INTEGER NOT NULL DEFAULT 0,
    "startTime" TIMESTAMP(3) NOT NULL,
    "endTime" TIMESTAMP(3) NOT NULL,
    "completionStartTime" TIMESTAMP(3),
    "model" TEXT NOT NULL DEFAULT '',
    "model_id" TEXT DEFAULT '',
    "model_group" TEXT DEFAULT '',
    "api_base" TEXT DEFAULT '',
    "user" TEXT DEFAULT '',
    "metadata" JSONB DEFAULT '{}',
    "cache_hit" TEXT DEFAULT '',
    "cache_key" TEXT DEFAULT '',
    "request_tags" JSONB DEFAULT '[]',
    "team_id" TEXT,
    "end_user" TEXT,
    "requester_ip_address" TEXT,
    CONSTRAINT "LiteLLM_SpendLogs_pkey" PRIMARY KEY ("request_id")
);
CREATE INDEX "LiteLLM_SpendLogs_startTime_idx" ON "LiteLLM_SpendLogs"("startTime");
"#;

#[tokio::test]
async fn runs_on_a_database_litellm_created() {
    let db = TestDb::create().await;
    let client = db.client().await;
    client.batch_execute(LITELLM_SCHEMA).await.unwrap();
    let token = token_hex(&hash_key("sk-made-by-litellm"));
    client
        .batch_execute(&format!(
            r#"INSERT INTO "LiteLLM_BudgetTable" (budget_id, soft_budget, created_by, updated_by)
                VALUES ('b-uuid-1', 4.5, 'admin', 'admin');
            INSERT INTO "LiteLLM_TeamTable" (team_id, team_alias, models, max_budget, spend)
                VALUES ('team-lite', 'lite team', ARRAY['gpt-4o'], 100, 3);
            INSERT INTO "LiteLLM_VerificationToken" (token, key_name, key_alias, spend, models,
                    team_id, metadata, max_budget, budget_id, soft_budget_cooldown, tpm_limit)
                VALUES ('{token}', 'sk-...itellm', 'legacy', 1.25, ARRAY['gpt-4o'], 'team-lite',
                    '{{"model_rpm_limit": {{"gpt-4o": 7}}, "note": "kept"}}', 10, 'b-uuid-1',
                    true, 500);
            INSERT INTO "LiteLLM_SpendLogs" (request_id, call_type, api_key, spend, total_tokens,
                    "startTime", "endTime", model, "user", team_id)
                VALUES ('chatcmpl-1', 'acompletion', '{token}', 0.01, 30,
                    '2024-05-01 10:00:00', '2024-05-01 10:00:01', 'gpt-4o', '', 'team-lite');"#
        ))
        .await
        .unwrap();

    let pg = store(&db).await;
    let key = pg
        .get_key(&token)
        .await
        .unwrap()
        .expect("a LiteLLM key is found");
    assert_eq!(key.key_alias.as_deref(), Some("legacy"));
    assert_eq!(key.spend, 1.25);
    assert_eq!(key.max_budget, Some(10.0));
    assert_eq!(
        key.soft_budget,
        Some(4.5),
        "soft budget read from LiteLLM's budget row"
    );
    assert_eq!(key.models, vec!["gpt-4o".to_string()]);
    assert_eq!(key.tpm_limit, Some(500));
    assert!(!key.blocked, "LiteLLM's NULL blocked means not blocked");
    assert_eq!(
        key.model_rpm_limit,
        map(json!({"gpt-4o": 7})),
        "per-model limits read from metadata"
    );
    assert!(key.model_tpm_limit.is_empty());
    assert!(key.created_at.is_some());

    // A LiteLLM key authenticates: the cache finds it by the key's hash.
    let cache = KeyCache::default();
    let entry = cache.load(&pg, &token).await.unwrap().expect("cached");
    assert_eq!(
        entry.team.as_ref().map(|t| t.record.team_alias.clone()),
        Some(Some("lite team".into()))
    );
    assert!(cache.get(&hash_key("sk-made-by-litellm")).is_some());

    // LiteLLM's rows read as spend logs; its columns the gateway does not
    // know survive the gateway's writes.
    let logs = pg.spend_logs(&SpendFilter::default()).await.unwrap();
    assert_eq!(logs.len(), 1);
    assert_eq!(&*logs[0].call_id, "chatcmpl-1");
    assert_eq!(logs[0].attempt, 1);
    assert_eq!(logs[0].total_tokens, 30);
    let mut changed = key.clone();
    changed.soft_budget = Some(6.0);
    changed.blocked = true;
    assert!(pg.update_key(&changed).await.unwrap());
    let row = client
        .query_one(
            r#"SELECT k.soft_budget_cooldown, k.budget_id, b.soft_budget, k.metadata->>'note'
               FROM "LiteLLM_VerificationToken" k JOIN "LiteLLM_BudgetTable" b USING (budget_id)
               WHERE token = $1"#,
            &[&token],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0));
    assert_eq!(
        row.get::<_, String>(1),
        "b-uuid-1",
        "LiteLLM's budget row is updated in place"
    );
    assert_eq!(row.get::<_, f64>(2), 6.0);
    assert_eq!(row.get::<_, String>(3), "kept");
    assert_eq!(pg.get_key(&token).await.unwrap(), Some(changed.clone()));

    // Spend rows go into LiteLLM's INTEGER token columns.
    let rows = vec![spend_row("r-lite", &token, 0.5, now_ms())];
    pg.record_spend(&rows, std::time::Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(pg.get_key(&token).await.unwrap().unwrap().spend, 1.75);
    let deleted = pg.delete_keys(std::slice::from_ref(&token)).await.unwrap();
    assert_eq!(deleted, vec![token]);
}

#[tokio::test]
async fn keys_teams_and_users_round_trip_like_memory() {
    let db = TestDb::create().await;
    let (mem, pg) = (MemoryStore::default(), store(&db).await);
    let t0 = now_ms();
    let k1 = full_key("sk-one", t0);
    let mut k2 = KeyRecord {
        token: token_hex(&hash_key("sk-two")),
        created_at: Some(t0 + Duration::seconds(1)),
        ..Default::default()
    };
    k2.team_id = Some("t2".into());

    same!(mem, pg, s => s.insert_key(&k1));
    same!(mem, pg, s => s.insert_key(&k2));
    same!(mem, pg, s => s.insert_key(&k1)); // conflict in both
    same!(mem, pg, s => s.get_key(&k1.token));
    same!(mem, pg, s => s.get_key(&k2.token));
    same!(mem, pg, s => s.get_key("nope"));
    let mut tokens = Vec::new();
    for s in [&mem as &dyn Store, &pg as &dyn Store] {
        let mut seen = Vec::new();
        let count = s
            .key_tokens(&mut |t| seen.push(t.to_string()))
            .await
            .unwrap();
        seen.sort();
        assert_eq!(count, seen.len());
        tokens.push(seen);
    }
    assert_eq!(tokens[0], tokens[1], "key_tokens");
    assert_eq!(tokens[0].len(), 2);

    let mut k1b = k1.clone();
    k1b.spend = 99.0; // ignored by update
    k1b.soft_budget = None;
    k1b.blocked = true;
    k1b.models.clear();
    k1b.metadata = map(json!({"model_rpm_limit": {"x": 1}}));
    k1b.model_rpm_limit = Map::new();
    k1b.expires = None;
    same!(mem, pg, s => s.update_key(&k1b));
    same!(mem, pg, s => s.get_key(&k1.token));
    k1b.soft_budget = Some(1.5);
    same!(mem, pg, s => s.update_key(&k1b));
    same!(mem, pg, s => s.get_key(&k1.token));
    same!(mem, pg, s => s.update_key(&KeyRecord { token: "missing".into(), ..Default::default() }));
    same!(mem, pg, s => s.set_key_spend(&k1.token, 3.25));
    same!(mem, pg, s => s.set_key_spend("missing", 1.0));

    let mut renamed = k1b.clone();
    renamed.token = token_hex(&hash_key("sk-one-regenerated"));
    renamed.key_name = Some("sk-...regen".into());
    same!(mem, pg, s => s.rename_key(&k1.token, &renamed));
    same!(mem, pg, s => s.get_key(&k1.token));
    same!(mem, pg, s => s.get_key(&renamed.token));
    same!(mem, pg, s => s.rename_key("missing", &renamed));

    same!(mem, pg, s => s.list_keys(None, None));
    same!(mem, pg, s => s.list_keys(Some("u1"), None));
    same!(mem, pg, s => s.list_keys(None, Some("t2")));
    same!(mem, pg, s => s.list_keys(Some("u1"), Some("t2")));
    let gone = vec![k2.token.clone(), "missing".into(), k2.token.clone()];
    same!(mem, pg, s => s.delete_keys(&gone));
    same!(mem, pg, s => s.list_keys(None, None));
    same!(mem, pg, s => s.global_spend("2000-01-01"));

    let (t1, t2) = (team("t1", t0), team("a-team", t0));
    same!(mem, pg, s => s.insert_team(&t1));
    same!(mem, pg, s => s.insert_team(&t2));
    same!(mem, pg, s => s.insert_team(&t1));
    same!(mem, pg, s => s.get_team("t1"));
    let mut t1b = t1.clone();
    t1b.spend = 50.0;
    t1b.blocked = true;
    t1b.members = vec![];
    t1b.allowed_model_region = None;
    same!(mem, pg, s => s.update_team(&t1b));
    same!(mem, pg, s => s.get_team("t1"));
    same!(mem, pg, s => s.set_team_spend("t1", 7.0));
    same!(mem, pg, s => s.set_team_spend("none", 7.0));
    same!(mem, pg, s => s.list_teams());
    same!(mem, pg, s => s.delete_teams(&["t1".to_string(), "none".to_string()]));
    same!(mem, pg, s => s.list_teams());

    let (u1, u2) = (
        user("u1", t0),
        UserRecord {
            user_id: "u2".into(),
            ..Default::default()
        },
    );
    same!(mem, pg, s => s.insert_user(&u1));
    same!(mem, pg, s => s.insert_user(&u2));
    same!(mem, pg, s => s.insert_user(&u1));
    same!(mem, pg, s => s.get_user("u1"));
    same!(mem, pg, s => s.get_user("u2"));
    let mut u1b = u1.clone();
    u1b.user_email = None;
    u1b.teams = vec!["t1".into(), "t9".into()];
    u1b.created_at = None;
    same!(mem, pg, s => s.update_user(&u1b));
    same!(mem, pg, s => s.get_user("u1"));
    same!(mem, pg, s => s.set_user_spend("u1", 0.75));
    same!(mem, pg, s => s.get_user("u1"));
    same!(mem, pg, s => s.delete_users(&["u2".to_string(), "u2".to_string()]));
    same!(mem, pg, s => s.get_user("u2"));
}

fn spend_row(request_id: &str, api_key: &str, spend: f64, start: DateTime<Utc>) -> SpendLogRow {
    SpendLogRow {
        request_id: request_id.into(),
        call_id: request_id.split(':').next().unwrap_or(request_id).into(),
        attempt: 1,
        call_type: "acompletion".into(),
        api_key: api_key.into(),
        spend,
        total_tokens: 30,
        prompt_tokens: 10,
        completion_tokens: 20,
        start_time: start,
        completion_start_time: Some(start + Duration::milliseconds(120)),
        end_time: start + Duration::milliseconds(800),
        model: "gpt-4o-2024-08-06".into(),
        model_id: "dep-1".into(),
        model_group: "gpt-4o".into(),
        custom_llm_provider: "openai".into(),
        api_base: "https://api.openai.com/v1".into(),
        region: Some("eu".into()),
        user: Some("u1".into()),
        team_id: Some("t1".into()),
        status: "success".into(),
        status_code: 200,
        error_class: None,
        error_message: None,
        end_user: None,
        response_id: None,
        proxy_budget: false,
        cache_hit: true,
        cache_key: Some("ns:0123abcd".into()),
        request_tags: None,
        // Written into `metadata` and read back by both stores alike.
        guardrail_information: Some(std::sync::Arc::new(gateway::store::JsonText(
            serde_json::json!([{
                "guardrail_name": "pii", "guardrail_provider": "litellm_content_filter",
                "guardrail_mode": "pre_call", "guardrail_status": "success",
                "guardrail_response": "mask", "start_time": 1767225600.25,
                "end_time": 1767225600.5, "duration": 0.25,
            }])
            .to_string()
            .into(),
        ))),
        proxy_server_request: None,
        response: None,
    }
}

fn sorted(changes: Vec<Change>) -> Vec<String> {
    let mut payloads: Vec<String> = changes.iter().map(Change::payload).collect();
    payloads.sort();
    payloads
}

#[tokio::test]
async fn recording_spend_twice_counts_it_once() {
    let db = TestDb::create().await;
    let (mem, pg) = (MemoryStore::default(), store(&db).await);
    let t0 = now_ms();
    let key = full_key("sk-spender", t0);
    let other = KeyRecord {
        token: token_hex(&hash_key("sk-other")),
        ..Default::default()
    };
    for s in [&mem as &dyn Store, &pg as &dyn Store] {
        s.insert_key(&key).await.unwrap();
        s.insert_key(&other).await.unwrap();
        s.insert_team(&team("t1", t0)).await.unwrap();
        s.insert_user(&user("u1", t0)).await.unwrap();
    }
    let at = |ms: i64| t0 + Duration::milliseconds(ms);
    let mut failed = spend_row("call-1:2", &key.token, 0.0, at(1));
    failed.attempt = 2;
    failed.status = "failure".into();
    failed.status_code = 429;
    failed.error_class = Some("rate_limit".into());
    failed.error_message = Some("slow down\0now".into());
    let mut no_owner = spend_row("call-3", &other.token, 0.25, at(3));
    no_owner.user = None;
    no_owner.team_id = None;
    let mut huge = spend_row("call-4", "unknown-key", 1.0, at(4));
    huge.total_tokens = i64::MAX;
    let rows = vec![
        spend_row("call-1", &key.token, 0.125, at(0)),
        failed,
        spend_row("call-2", &key.token, 0.5, at(2)),
        spend_row("call-2", &key.token, 9.0, at(2)), // same id: the first wins
        no_owner,
        huge,
    ];

    for _ in 0..2 {
        let m = mem
            .record_spend(&rows, std::time::Duration::ZERO)
            .await
            .unwrap();
        let p = pg
            .record_spend(&rows, std::time::Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(sorted(m.announce), sorted(p.announce));
        assert_eq!(sorted(m.refresh), sorted(p.refresh.clone()));
        assert!(
            p.refresh.is_empty(),
            "the writer's cache counted these rows already"
        );
    }
    assert_eq!(
        pg.get_key(&key.token).await.unwrap().unwrap().spend,
        0.5 + 0.125 + 0.5
    );
    let stored = pg.get_key(&key.token).await.unwrap().unwrap();
    assert_eq!(
        stored.model_spent(&rows[0].model_group),
        0.125 + 0.5,
        "spend per model group"
    );
    same!(mem, pg, s => s.get_key(&key.token));
    same!(mem, pg, s => s.get_key(&other.token));
    same!(mem, pg, s => s.get_team("t1"));
    same!(mem, pg, s => s.get_user("u1"));
    same!(mem, pg, s => s.global_spend("2000-01-01"));

    let logs = pg.spend_logs(&SpendFilter::default()).await.unwrap();
    assert_eq!(logs.len(), 5, "each request id written once");
    assert_eq!(
        logs[1].error_message.as_deref(),
        Some("slow down\u{fffd}now")
    );
    assert_eq!(logs[4].total_tokens, i64::from(i32::MAX));
    let filters = [
        SpendFilter {
            api_key: Some(key.token.clone()),
            ..Default::default()
        },
        SpendFilter {
            user_id: Some("u1".into()),
            limit: Some(2),
            ..Default::default()
        },
        SpendFilter {
            team_id: Some("t1".into()),
            ..Default::default()
        },
        SpendFilter {
            request_id: Some("call-1".into()),
            ..Default::default()
        },
        SpendFilter {
            start: Some(at(2)),
            end: Some(at(4)),
            ..Default::default()
        },
        SpendFilter {
            limit: Some(-1),
            ..Default::default()
        },
        SpendFilter {
            limit: Some(2),
            offset: 2,
            ..Default::default()
        },
        SpendFilter {
            api_key: Some(key.token.clone()),
            limit: Some(1),
            offset: 1,
            ..Default::default()
        },
        SpendFilter {
            offset: 4,
            ..Default::default()
        },
        SpendFilter {
            offset: -3,
            ..Default::default()
        },
    ];
    for (i, f) in filters.iter().enumerate() {
        let mut m = mem.spend_logs(f).await.unwrap();
        for row in &mut m {
            if let Some(msg) = &mut row.error_message {
                *msg = msg.replace('\0', "\u{fffd}");
            }
            row.total_tokens = row.total_tokens.min(i64::from(i32::MAX));
        }
        assert_eq!(m, pg.spend_logs(f).await.unwrap(), "filter {i}");
    }
}

/// Every page of a daily table, sorted (Postgres pages by its random ids
/// within a day, memory by key).
async fn daily_rows(s: &dyn Store, scope: DailyScope) -> (i64, Vec<String>) {
    let page = s
        .daily_activity(&DailyQuery {
            scope,
            start: "2000-01-01".into(),
            end: "2999-12-31".into(),
            entities: None,
            exclude: Vec::new(),
            api_keys: None,
            model: None,
            offset: 0,
            limit: 1000,
        })
        .await
        .unwrap();
    let mut rows: Vec<String> = page.rows.iter().map(|r| format!("{r:?}")).collect();
    rows.sort();
    (page.total, rows)
}

/// LiteLLM's daily tables: a batch recorded twice (once by COPY, then
/// again by INSERT, which skips every row) counts once, a request id
/// repeated in a batch once, and rows counted without the log (LiteLLM's
/// `disable_spend_logs`) count too; user, team, organization (the team's),
/// end user and tag rows hold the same figures in Postgres as in memory.
#[tokio::test]
async fn daily_tables_add_up_like_memory() {
    let db = TestDb::create().await;
    let (mem, pg) = (MemoryStore::default(), store(&db).await);
    let t0 = now_ms();
    for s in [&mem as &dyn Store, &pg as &dyn Store] {
        s.insert_team(&team("t1", t0)).await.unwrap();
    }
    let at = |ms: i64| t0 + Duration::milliseconds(ms);
    let mut failed = spend_row("call-1:2", "k1", 0.0, at(1));
    failed.status = "failure".into();
    let mut tagged = spend_row("call-2", "k1", 0.5, at(2));
    tagged.end_user = Some("cust\0omer".to_string());
    tagged.request_tags = Some(vec!["prod".to_string(), "eu".into(), "prod".into()].into());
    let mut no_owner = spend_row("call-3", "k2", 0.25, at(3));
    no_owner.user = None;
    no_owner.team_id = None;
    let rows = vec![
        spend_row("call-1", "k1", 0.125, at(0)),
        failed,
        tagged,
        spend_row("call-2", "k1", 9.0, at(2)), // same id: the first wins
        no_owner,
    ];
    for _ in 0..2 {
        mem.record_spend(&rows, std::time::Duration::ZERO)
            .await
            .unwrap();
        pg.record_spend(&rows, std::time::Duration::ZERO)
            .await
            .unwrap();
    }
    let mut unlogged = spend_row("call-9", "k1", 1.0, at(9));
    unlogged.request_tags = Some(vec!["eu".to_string()].into());
    mem.count_spend(std::slice::from_ref(&unlogged))
        .await
        .unwrap();
    pg.count_spend(std::slice::from_ref(&unlogged))
        .await
        .unwrap();

    for scope in DailyScope::ALL {
        let (m, p) = (daily_rows(&mem, scope).await, daily_rows(&pg, scope).await);
        let m = (
            m.0,
            m.1.iter()
                .map(|r| r.replace("\\0", "\u{fffd}"))
                .collect::<Vec<_>>(),
        );
        assert_eq!(m, p, "{scope:?}");
    }
    let (total, users) = daily_rows(&pg, DailyScope::User).await;
    assert_eq!(total, 2, "u1 and the user ''");
    assert!(
        users.iter().any(|r| r.contains("spend: 1.625")
            && r.contains("api_requests: 4")
            && r.contains("failed_requests: 1")),
        "{users:?}"
    );
    let (_, orgs) = daily_rows(&pg, DailyScope::Organization).await;
    assert!(orgs.len() == 1 && orgs[0].contains("\"org-1\""), "{orgs:?}");
    let (_, tags) = daily_rows(&pg, DailyScope::Tag).await;
    assert_eq!(tags.len(), 2, "{tags:?}");
    assert!(
        tags.iter()
            .any(|r| r.contains("\"eu\"") && r.contains("spend: 1.5")),
        "{tags:?}"
    );
    // LiteLLM's unique key, NULL-free: every row conflicts with itself.
    let nulls: i64 = db
        .client()
        .await
        .query_one(
            r#"SELECT count(*) FROM "LiteLLM_DailyUserSpend" WHERE user_id IS NULL
                OR model IS NULL OR custom_llm_provider IS NULL
                OR mcp_namespaced_tool_name IS NULL OR endpoint IS NULL"#,
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(nulls, 0);
}

/// A batch of new rows goes by COPY, one holding a row already written by
/// INSERT (the COPY fails on it and the batch is written again): the two
/// ways must store the same values in every column.
#[tokio::test]
async fn copied_and_inserted_rows_hold_the_same_values() {
    let db = TestDb::create().await;
    let pg = store(&db).await;
    let t0 = now_ms();
    let key = full_key("sk-copied", t0);
    pg.insert_key(&key).await.unwrap();
    pg.insert_team(&team("t1", t0)).await.unwrap();
    pg.insert_user(&user("u1", t0)).await.unwrap();
    let odd = |id: &str| {
        // Sub-millisecond times: stored rounded, and the duration too.
        let start = t0 + Duration::microseconds(1_700);
        let mut r = spend_row(id, &key.token, 0.25, start);
        r.end_time = start + Duration::microseconds(2_500_500);
        r.completion_start_time = None;
        r.attempt = 2;
        r.status = "failure".into();
        r.status_code = 500;
        r.error_class = Some("api_error".into());
        r.error_message = Some("tab\there, line\nand \\N \\. \"quoted\" \0 é \u{1F600}\r".into());
        r.end_user = Some("end\tuser\\".into());
        r.region = None;
        r.total_tokens = i64::MAX;
        r.model_id = String::new().into();
        // `store_prompts_in_spend_logs`: JSON with escapes COPY must keep.
        r.proxy_server_request = Some(JsonText(
            r#"{"messages":[{"content":"tab\there \\N \"q\" é"}]}"#.into(),
        ));
        r.response = Some(JsonText(r#"{"id":"chatcmpl-1","choices":[]}"#.into()));
        r
    };
    let before = [key.spend, user("u1", t0).spend, team("t1", t0).spend];
    pg.record_spend(&[odd("copied")], std::time::Duration::ZERO)
        .await
        .unwrap();
    pg.record_spend(&[odd("inserted"), odd("copied")], std::time::Duration::ZERO)
        .await
        .unwrap();

    let client = db.client().await;
    let rows = client
        .query(
            r#"SELECT request_id, to_jsonb(s) - 'request_id' - 'call_id' - 'litellm_call_id'
                   - 'created_at' - 'updated_at'
               FROM "LiteLLM_SpendLogs" s ORDER BY request_id"#,
            &[],
        )
        .await
        .unwrap();
    let ids: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(ids, ["copied", "inserted"]);
    let (copied, inserted): (Value, Value) = (rows[0].get(1), rows[1].get(1));
    assert_eq!(copied, inserted);
    assert_eq!(copied["request_duration_ms"], json!(2501));
    assert_eq!(copied["total_tokens"], json!(i32::MAX));
    assert_eq!(copied["metadata"]["error_information"]["error_code"], "500");
    assert_eq!(copied["end_user"], "end\tuser\\");
    assert_eq!(
        copied["proxy_server_request"],
        json!({"messages": [{"content": "tab\there \\N \"q\" é"}]})
    );
    assert_eq!(
        copied["response"],
        json!({"id": "chatcmpl-1", "choices": []})
    );
    assert_eq!(copied["messages"], json!({}));
    let logs = pg.spend_logs(&SpendFilter::default()).await.unwrap();
    // Read back as the JSON stored (Postgres spaces it its own way).
    let json_of = |j: &Option<JsonText>| -> Value {
        serde_json::from_str(j.as_ref().unwrap().as_str()).unwrap()
    };
    for row in &logs {
        assert_eq!(
            json_of(&row.proxy_server_request),
            copied["proxy_server_request"]
        );
        assert_eq!(json_of(&row.response), copied["response"]);
    }
    assert_eq!(
        logs[0].error_message.as_deref(),
        Some("tab\there, line\nand \\N \\. \"quoted\" \u{fffd} é \u{1F600}\r")
    );
    assert_eq!(logs[0].end_time, logs[1].end_time);
    // Each row counted once, for its key, user and team alike.
    let spent = [
        pg.get_key(&key.token).await.unwrap().unwrap().spend,
        pg.get_user("u1").await.unwrap().unwrap().spend,
        pg.get_team("t1").await.unwrap().unwrap().spend,
    ];
    assert_eq!(spent, [before[0] + 0.5, before[1] + 0.5, before[2] + 0.5]);
}

/// A large batch goes by COPY in several pieces: every row is written and
/// counted once.
#[tokio::test]
async fn a_batch_copied_in_pieces_writes_every_row() {
    let db = TestDb::create().await;
    let pg = store(&db).await;
    let t0 = now_ms();
    let key = full_key("sk-pieces", t0);
    pg.insert_key(&key).await.unwrap();
    let rows: Vec<SpendLogRow> = (0..300)
        .map(|i| spend_row(&format!("piece-{i:03}"), &key.token, 0.5, t0))
        .collect();
    pg.record_spend(&rows, std::time::Duration::ZERO)
        .await
        .unwrap();
    let client = db.client().await;
    let stored = client
        .query(
            r#"SELECT request_id FROM "LiteLLM_SpendLogs" ORDER BY request_id"#,
            &[],
        )
        .await
        .unwrap();
    let got: Vec<String> = stored.iter().map(|r| r.get(0)).collect();
    let expected: Vec<String> = rows.iter().map(|r| r.request_id.to_string()).collect();
    assert_eq!(got, expected);
    assert_eq!(
        pg.get_key(&key.token).await.unwrap().unwrap().spend,
        key.spend + 150.0
    );
}

/// Rows that bend each column: NULLs and empties, unicode and escapes,
/// big, negative and zero numbers, sub-millisecond times.
fn bent_rows(prefix: &str, key: &str, t0: DateTime<Utc>) -> Vec<SpendLogRow> {
    let id = |n: usize| format!("{prefix}-{n}:1");
    let mut nulls = spend_row(&id(0), key, 0.0, t0 + Duration::microseconds(1_499));
    nulls.completion_start_time = None;
    (nulls.region, nulls.user, nulls.team_id) = (None, None, None);
    (nulls.cache_hit, nulls.cache_key) = (false, None);
    nulls.guardrail_information = None;
    let mut unicode = spend_row(&id(1), key, -0.000_125, t0 - Duration::days(9_000));
    unicode.model = "modèle-😀\t\\N".into();
    unicode.model_id = String::new().into();
    unicode.user = Some("ü\u{1}\r\n\\".into());
    unicode.end_user = Some("end\tuser\\".into());
    unicode.response_id = Some("chatcmpl-é".into());
    unicode.status = "failure".into();
    unicode.status_code = -1;
    unicode.error_class = Some("api_error".into());
    unicode.error_message = Some("tab\there \0 nul, \"q\" \\. é".into());
    unicode.proxy_server_request = Some(JsonText(
        r#"{"messages":[{"content":"tab\there \\N \"q\" é \u00e9"}]}"#.into(),
    ));
    unicode.response = Some(JsonText(r#"[1.5e300,-0,"😀",null,true]"#.into()));
    let mut big = spend_row(&id(2), key, 123_456_789.123_456_79, t0);
    (big.total_tokens, big.prompt_tokens, big.completion_tokens) = (i64::MAX, i64::MIN, 0);
    big.attempt = i32::MAX;
    big.end_time = t0 + Duration::days(30_000);
    let tiny = spend_row(&id(3), key, -1e-12, t0 + Duration::microseconds(999_999));
    vec![nulls, unicode, big, tiny]
}

/// The spend rows of `prefix`, each as JSON without its ids, in order.
async fn stored_rows(client: &tokio_postgres::Client, prefix: &str) -> Vec<Value> {
    let rows = client
        .query(
            r#"SELECT to_jsonb(s) - 'request_id' - 'call_id' - 'litellm_call_id'
                   - 'created_at' - 'updated_at'
               FROM "LiteLLM_SpendLogs" s WHERE request_id LIKE $1 ORDER BY request_id"#,
            &[&format!("{prefix}-%")],
        )
        .await
        .unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

/// The gateway's log lines while it lives (this thread's, as text).
#[derive(Clone, Default)]
struct Logged(Arc<std::sync::Mutex<Vec<u8>>>);

impl Logged {
    /// Captures this thread's log lines until the guard drops.
    fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let sink = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Logged {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Rows written by binary COPY (every column of a type it encodes) hold
/// what text COPY writes of the same rows, into a table with a column of
/// a type binary does not encode (a domain): every column alike.
#[tokio::test]
async fn binary_and_text_copies_hold_the_same_values() {
    let logged = Logged::default();
    let _capture = logged.capture();
    let db = TestDb::create().await;
    let binary = store(&db).await;
    let t0 = now_ms();
    let key = full_key("sk-binary", t0);
    binary.insert_key(&key).await.unwrap();
    binary
        .record_spend(
            &bent_rows("binary", &key.token, t0),
            std::time::Duration::ZERO,
        )
        .await
        .unwrap();
    let log = logged.text();
    assert!(!log.contains("COPY in text"), "binary COPY: {log}");
    assert!(!log.contains("refused"), "no fall-back: {log}");
    let client = db.client().await;
    client
        .batch_execute(
            r#"CREATE DOMAIN region_name AS text;
               ALTER TABLE "LiteLLM_SpendLogs" ALTER COLUMN region TYPE region_name;"#,
        )
        .await
        .unwrap();
    let text = store(&db).await;
    text.record_spend(
        &bent_rows("text", &key.token, t0),
        std::time::Duration::ZERO,
    )
    .await
    .unwrap();
    let log = logged.text();
    assert!(
        log.contains("COPY in text") && log.contains("column region is of type oid"),
        "{log}"
    );
    assert!(!log.contains("refused"), "{log}");

    let (by_binary, by_text) = (
        stored_rows(&client, "binary").await,
        stored_rows(&client, "text").await,
    );
    assert_eq!(by_binary.len(), 4);
    for (b, t) in by_binary.iter().zip(&by_text) {
        assert_eq!(b, t);
    }
    let big = &by_binary[2];
    assert_eq!(big["total_tokens"], json!(i32::MAX));
    assert_eq!(big["prompt_tokens"], json!(i32::MIN));
    assert_eq!(big["request_duration_ms"], json!(i32::MAX));
    assert_eq!(by_binary[1]["model"], "modèle-😀\t\\N");
    assert_eq!(
        by_binary[1]["error_message"],
        "tab\there \u{fffd} nul, \"q\" \\. é"
    );
    assert_eq!(by_binary[0]["completionStartTime"], Value::Null);
    assert_eq!(by_binary[0]["cache_hit"], "False");
    // Read back by the gateway alike, to the bit.
    let logs = binary.spend_logs(&SpendFilter::default()).await.unwrap();
    assert_eq!(logs.len(), 8);
    let by_id = |id: String| logs.iter().find(|l| *l.request_id == *id).unwrap();
    for n in 0..4 {
        let (b, t) = (by_id(format!("binary-{n}:1")), by_id(format!("text-{n}:1")));
        assert_eq!(b.spend.to_bits(), t.spend.to_bits(), "row {n}");
        assert_eq!((b.start_time, b.end_time), (t.start_time, t.end_time));
        assert_eq!(b.completion_start_time, t.completion_start_time);
        assert_eq!(b.guardrail_information, t.guardrail_information);
    }
    assert_eq!(by_id("binary-2:1".into()).spend, 123_456_789.123_456_79);
}

/// A table whose `spend` is `numeric` (not encoded in binary) still takes
/// the rows, in text, each once.
#[tokio::test]
async fn a_column_of_another_type_takes_the_rows_in_text() {
    let db = TestDb::create().await;
    let pg = store(&db).await;
    let t0 = now_ms();
    let key = full_key("sk-numeric", t0);
    pg.insert_key(&key).await.unwrap();
    let client = db.client().await;
    client
        .batch_execute(r#"ALTER TABLE "LiteLLM_SpendLogs" ALTER COLUMN spend TYPE numeric"#)
        .await
        .unwrap();
    let mut rows = bent_rows("numeric", &key.token, t0);
    // INSERT (the batch below, sent again) clamps token counts above only.
    rows[2].prompt_tokens = -5;
    pg.record_spend(&rows[..2], std::time::Duration::ZERO)
        .await
        .unwrap();
    pg.record_spend(&rows, std::time::Duration::ZERO)
        .await
        .unwrap();
    let stored = stored_rows(&client, "numeric").await;
    assert_eq!(stored.len(), 4);
    assert_eq!(stored[1]["spend"], json!(-0.000125));
}

#[tokio::test]
async fn a_key_update_is_notified_to_listeners() {
    let db = TestDb::create().await;
    let pg = store(&db).await;
    let (client, mut connection) = tokio_postgres::connect(&db.url, NoTls).await.unwrap();
    let (tx, mut notes) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = std::pin::pin!(futures_util::stream::poll_fn(
            move |cx| connection.poll_message(cx)
        ));
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notification(n) = message {
                let _ = tx.send(n);
            }
        }
    });
    client
        .batch_execute("LISTEN gateway_changes")
        .await
        .unwrap();

    let mut key = full_key("sk-watched", now_ms());
    pg.insert_key(&key).await.unwrap();
    key.blocked = true;
    pg.update_key(&key).await.unwrap();
    let mut payloads = Vec::new();
    while payloads.len() < 2 {
        let note = tokio::time::timeout(std::time::Duration::from_secs(5), notes.recv())
            .await
            .expect("notified within 5 s")
            .unwrap();
        assert_eq!(note.channel(), "gateway_changes");
        assert!(
            pg.sessions().contains(note.process_id()),
            "sent by the store's own session"
        );
        payloads.push(note.payload().to_string());
    }
    let expected = Change::Key(key.token.clone()).payload();
    assert_eq!(payloads, vec![expected.clone(), expected]);
    assert_eq!(
        Change::parse(&payloads[0]),
        Some(Change::Key(key.token.clone()))
    );
    drop(client);
}

/// Polls `check` for up to 10 s.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..200 {
        if check() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{what} did not happen within 10 s");
}

#[tokio::test]
async fn another_replica_sees_changes_through_its_listener() {
    let db = TestDb::create().await;
    let replica_a = store(&db).await;
    let replica_b = Arc::new(store(&db).await);
    let cache_b = Arc::new(KeyCache::default());
    let caches_b = Caches {
        keys: cache_b.clone(),
        models: no_models(),
    };
    let plain = "sk-shared";
    let mut key = full_key(plain, now_ms());
    key.team_id = None;
    key.user_id = None;
    replica_a.insert_key(&key).await.unwrap();
    cache_b
        .load(replica_b.as_ref(), &key.token)
        .await
        .unwrap()
        .unwrap();
    let control_b = listen(&db, replica_b.clone(), caches_b);

    key.blocked = true;
    replica_a.update_key(&key).await.unwrap();
    let hash = hash_key(plain);
    eventually("replica B sees the key blocked", || {
        cache_b.get(&hash).is_some_and(|e| e.record.blocked)
    })
    .await;

    // Cut B's listener off and delete the key meanwhile: after reconnecting,
    // B re-reads its cached keys and drops the deleted one.
    let admin = db.client().await;
    admin
        .batch_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = 'gateway-listener'",
        )
        .await
        .unwrap();
    replica_a.delete_keys(&[key.token.clone()]).await.unwrap();
    eventually("replica B drops the deleted key", || {
        cache_b.get(&hash).is_none()
    })
    .await;
    drop(control_b);
}

#[tokio::test]
async fn due_budgets_reset_like_memory() {
    let db = TestDb::create().await;
    let (mem, pg) = (MemoryStore::default(), store(&db).await);
    let now = now_ms();
    let past = Some(now - Duration::hours(1));
    let mut due_key = full_key("sk-due", now);
    due_key.budget_reset_at = past;
    due_key.budget_duration = Some("1h".into());
    let mut due_no_period = full_key("sk-due-once", now);
    due_no_period.budget_reset_at = past;
    due_no_period.budget_duration = None;
    let not_due = full_key("sk-later", now);
    let mut due_team = team("t-due", now);
    due_team.budget_reset_at = Some(now);
    let mut due_user = user("u-due", now);
    due_user.budget_reset_at = past;
    for s in [&mem as &dyn Store, &pg as &dyn Store] {
        for k in [&due_key, &due_no_period, &not_due] {
            s.insert_key(k).await.unwrap();
        }
        s.insert_team(&due_team).await.unwrap();
        s.insert_team(&team("t-later", now)).await.unwrap();
        s.insert_user(&due_user).await.unwrap();
        s.insert_user(&user("u-later", now)).await.unwrap();
    }
    let m = mem.reset_due_budgets(now, None).await.unwrap();
    let p = pg.reset_due_budgets(now, None).await.unwrap();
    assert_eq!(sorted(m), sorted(p.clone()));
    assert_eq!(p.len(), 4);
    for k in [&due_key, &due_no_period, &not_due] {
        same!(mem, pg, s => s.get_key(&k.token));
    }
    same!(mem, pg, s => s.list_teams());
    same!(mem, pg, s => s.get_user("u-due"));
    same!(mem, pg, s => s.get_user("u-later"));
    let again = pg.reset_due_budgets(now, None).await.unwrap();
    assert!(again.is_empty(), "a reset period is not reset twice");
}

/// A row settled before a budget reset but written after it (queued on a
/// core, spooled while Postgres was down, or sent by a slower replica) is
/// logged but not counted in the new period, for the key, its user and its
/// team; a row settled after the reset counts. Each store says which caches
/// must re-read the figure.
#[tokio::test]
async fn rows_settled_before_a_reset_do_not_count_in_the_new_period() {
    let db = TestDb::create().await;
    let (mem, pg) = (MemoryStore::default(), store(&db).await);
    let now = now_ms();
    let past = Some(now - Duration::hours(1));
    let mut key = full_key("sk-racer", now);
    key.budget_reset_at = past;
    key.budget_duration = Some("1h".into());
    let mut t1 = team("t1", now);
    t1.budget_reset_at = past;
    let mut u1 = user("u1", now);
    u1.budget_reset_at = past;
    for s in [&mem as &dyn Store, &pg as &dyn Store] {
        s.insert_key(&key).await.unwrap();
        s.insert_team(&t1).await.unwrap();
        s.insert_user(&u1).await.unwrap();
    }
    // Settled a second before the reset, written after it.
    let before = spend_row("call-before", &key.token, 0.25, now - Duration::seconds(2));
    for s in [&mem as &dyn Store, &pg as &dyn Store] {
        assert_eq!(s.reset_due_budgets(now, None).await.unwrap().len(), 3);
    }
    let m = mem
        .record_spend(std::slice::from_ref(&before), std::time::Duration::ZERO)
        .await
        .unwrap();
    let p = pg
        .record_spend(std::slice::from_ref(&before), std::time::Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(m, p);
    let counted = sorted(vec![
        Change::Key(key.token.clone()),
        Change::User("u1".into()),
        Change::Team("t1".into()),
    ]);
    assert_eq!(
        sorted(p.refresh),
        counted,
        "every cache that counted the row re-reads its figure, the writer's too"
    );
    assert_eq!(sorted(p.announce), counted);
    // Settled after the reset: counted.
    let after = spend_row("call-after", &key.token, 0.5, now + Duration::seconds(1));
    mem.record_spend(std::slice::from_ref(&after), std::time::Duration::ZERO)
        .await
        .unwrap();
    pg.record_spend(std::slice::from_ref(&after), std::time::Duration::ZERO)
        .await
        .unwrap();
    let stored = pg.get_key(&key.token).await.unwrap().unwrap();
    assert_eq!(stored.spend, 0.5, "only the new period's row counts");
    assert_eq!(stored.model_spent(&after.model_group), 0.5);
    assert_eq!(pg.get_team("t1").await.unwrap().unwrap().spend, 0.5);
    assert_eq!(pg.get_user("u1").await.unwrap().unwrap().spend, 0.5);
    same!(mem, pg, s => s.get_key(&key.token));
    same!(mem, pg, s => s.get_team("t1"));
    same!(mem, pg, s => s.get_user("u1"));
    let logs = pg.spend_logs(&SpendFilter::default()).await.unwrap();
    assert_eq!(logs.len(), 2, "both rows are logged");
}

/// Counts the row updates of `tables` from now on, with a row trigger per
/// table (deterministic, unlike the statistics views, which backends
/// flush when they like).
async fn count_updates(client: &tokio_postgres::Client, tables: &[&str]) {
    client
        .batch_execute(
            "CREATE TABLE test_row_updates (tbl text PRIMARY KEY, n bigint NOT NULL);
             CREATE FUNCTION test_count_row_update() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               INSERT INTO test_row_updates VALUES (TG_TABLE_NAME, 1)
                 ON CONFLICT (tbl) DO UPDATE SET n = test_row_updates.n + 1;
               RETURN NULL;
             END $$;",
        )
        .await
        .unwrap();
    for table in tables {
        client
            .batch_execute(&format!(
                r#"CREATE TRIGGER test_count_row_update AFTER UPDATE ON "{table}"
                   FOR EACH ROW EXECUTE FUNCTION test_count_row_update()"#
            ))
            .await
            .unwrap();
    }
}

/// Rows of `table` updated since [`count_updates`] began counting.
async fn rows_updated(client: &tokio_postgres::Client, table: &str) -> i64 {
    client
        .query_opt("SELECT n FROM test_row_updates WHERE tbl = $1", &[&table])
        .await
        .unwrap()
        .map_or(0, |row| row.get(0))
}

/// A batch gives each key, user and team it charges one new row version:
/// the period's spend, the spend per model group and (keys) the lifetime
/// `total_spend` and `last_active` go in one statement per table, not one
/// per column (at a thousand keys a batch, those updates were most of
/// Postgres's work). The lifetime total still counts a row of an earlier
/// budget period, which the period's spend leaves out.
#[tokio::test]
async fn a_batch_updates_each_charged_row_once() {
    let db = TestDb::create().await;
    let pg = store(&db).await;
    let now = now_ms();
    let mut keys = Vec::new();
    for i in 0..3 {
        let mut key = full_key(&format!("sk-once-{i}"), now);
        key.spend = 0.0;
        // No soft budget: its budget row is linked by an update.
        (key.soft_budget, key.budget_id) = (None, None);
        pg.insert_key(&key).await.unwrap();
        keys.push(key);
    }
    pg.insert_team(&team("t1", now)).await.unwrap();
    pg.insert_user(&user("u1", now)).await.unwrap();
    let client = db.client().await;
    // Key 0's budget period began now: a row settled before counts in its
    // lifetime total only.
    client
        .execute(
            "INSERT INTO gateway_budget_periods (scope, id, started_at) VALUES ('key', $1, $2)",
            &[&keys[0].token, &now.naive_utc()],
        )
        .await
        .unwrap();

    let mut rows = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        for j in 0..4 {
            let at = now + Duration::milliseconds(10 * j + 1);
            rows.push(spend_row(&format!("once-{i}-{j}"), &key.token, 0.25, at));
        }
    }
    let mut stale = spend_row(
        "once-stale",
        &keys[0].token,
        2.0,
        now - Duration::seconds(5),
    );
    stale.user = None;
    stale.team_id = None;
    rows.push(stale);
    count_updates(
        &client,
        &[
            "LiteLLM_VerificationToken",
            "LiteLLM_UserTable",
            "LiteLLM_TeamTable",
        ],
    )
    .await;
    pg.record_spend(&rows, std::time::Duration::ZERO)
        .await
        .unwrap();

    for (table, charged) in [
        ("LiteLLM_VerificationToken", 3),
        ("LiteLLM_UserTable", 1),
        ("LiteLLM_TeamTable", 1),
    ] {
        assert_eq!(
            rows_updated(&client, table).await,
            charged,
            "{table}: one new version of each charged row"
        );
    }
    for (i, key) in keys.iter().enumerate() {
        let stored = pg.get_key(&key.token).await.unwrap().unwrap();
        assert_eq!(stored.spend, 1.0, "key {i}: the period's rows");
        assert_eq!(stored.model_spent("gpt-4o"), 1.0, "key {i}");
        let row = client
            .query_one(
                r#"SELECT total_spend, last_active IS NOT NULL
                FROM "LiteLLM_VerificationToken" WHERE token = $1"#,
                &[&key.token],
            )
            .await
            .unwrap();
        let lifetime = if i == 0 { 3.0 } else { 1.0 };
        assert_eq!(row.get::<_, f64>(0), lifetime, "key {i}: every row counts");
        assert!(row.get::<_, bool>(1), "key {i} marked active");
    }
    let user = pg.get_user("u1").await.unwrap().unwrap();
    let team = pg.get_team("t1").await.unwrap().unwrap();
    assert_eq!(
        user.spend,
        2.0 + 3.0,
        "the user's own 2.0 and the rows' 3.0"
    );
    assert_eq!(
        team.spend,
        1.0 + 3.0,
        "the team's own 1.0 and the rows' 3.0"
    );
    for owner in [&user.model_spend, &team.model_spend] {
        assert_eq!(owner.get("gpt-4o").and_then(Value::as_f64), Some(3.0));
    }
}

/// `(updates, of which in place)` of `table` once a backend has published
/// at least `least` updates (no update ran there before).
async fn updates_in_place(client: &tokio_postgres::Client, table: &str, least: i64) -> (i64, i64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let row = client
            .query_one(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = $1",
                &[&table],
            )
            .await
            .unwrap();
        let (updated, hot): (i64, i64) = (row.get(0), row.get(1));
        if updated >= least || std::time::Instant::now() > deadline {
            return (updated, hot);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The tables every batch updates keep room on their pages (migration
/// 0029's fill factor), so a charged key's row and its daily row get
/// their new version on the same page, without a new entry in each of
/// their indexes (six on the keys, seven on each daily table). Tables of
/// full pages (the default) moved nearly every version to another page.
#[tokio::test]
async fn charged_rows_are_updated_in_place() {
    const KEYS: usize = 60;
    let db = TestDb::create().await;
    let pg = store(&db).await;
    let now = now_ms();
    let mut tokens = Vec::new();
    for i in 0..KEYS {
        let mut key = full_key(&format!("sk-in-place-{i}"), now);
        // No soft budget: its budget row is linked by an update.
        (key.soft_budget, key.budget_id) = (None, None);
        pg.insert_key(&key).await.unwrap();
        tokens.push(key.token);
    }
    let batch = |round: i64| -> Vec<SpendLogRow> {
        tokens
            .iter()
            .enumerate()
            .map(|(i, token)| {
                let mut row = spend_row(
                    &format!("in-place-{round}-{i}"),
                    token,
                    0.25,
                    now + Duration::milliseconds(round),
                );
                row.user = None;
                row.team_id = None;
                row
            })
            .collect()
    };
    pg.record_spend(&batch(1), std::time::Duration::ZERO)
        .await
        .unwrap();
    let client = db.client().await;
    // Nearly all in place: a row that happens to sit on a page its
    // neighbours filled still moves (one in sixty was seen), where full
    // pages moved nearly every one (about one in fifteen stayed).
    let mostly_in_place =
        |(updated, in_place): (i64, i64)| updated == KEYS as i64 && in_place * 10 >= updated * 9;
    let keys = updates_in_place(&client, "LiteLLM_VerificationToken", KEYS as i64).await;
    assert!(mostly_in_place(keys), "keys: (updates, in place) {keys:?}");
    // The first batch made the keys' daily rows; the second updates them.
    pg.record_spend(&batch(2), std::time::Duration::ZERO)
        .await
        .unwrap();
    let daily = updates_in_place(&client, "LiteLLM_DailyUserSpend", KEYS as i64).await;
    assert!(
        mostly_in_place(daily),
        "daily rows: (updates, in place) {daily:?}"
    );
}

#[tokio::test]
async fn a_replica_that_was_not_listening_catches_up_when_it_connects() {
    let db = TestDb::create().await;
    let replica_a = store(&db).await;
    let replica_b = Arc::new(store(&db).await);
    let cache_b = Arc::new(KeyCache::default());
    let (mut changed, deleted) = (
        full_key("sk-changed", now_ms()),
        full_key("sk-deleted", now_ms()),
    );
    for key in [&changed, &deleted] {
        replica_a.insert_key(key).await.unwrap();
        cache_b.load(replica_b.as_ref(), &key.token).await.unwrap();
    }
    // Changed and deleted while B hears nothing: only its catch-up (every
    // key that exists plus the tombstones) can tell it.
    changed.blocked = true;
    replica_a.update_key(&changed).await.unwrap();
    replica_a
        .delete_keys(std::slice::from_ref(&deleted.token))
        .await
        .unwrap();
    let caches_b = Caches {
        keys: cache_b.clone(),
        models: no_models(),
    };
    let control_b = listen(&db, replica_b.clone(), caches_b);
    eventually("replica B catches up", || {
        cache_b.get(&hash_key("sk-deleted")).is_none()
            && cache_b
                .get(&hash_key("sk-changed"))
                .is_some_and(|e| e.record.blocked)
    })
    .await;
    drop(control_b);
}

/// Starts replica B's control plane over `store`, its listener filling
/// `caches`; both stop when the returned handle is dropped.
fn listen(db: &TestDb, store: Arc<PostgresStore>, caches: Caches) -> ControlPlane {
    let config = ListenConfig {
        url: db.url.clone(),
        own_sessions: store.sessions(),
    };
    let control = ControlPlane::start(store).expect("start the control plane");
    control
        .spawn(move |ctx| listener::run(caches.on(ctx), config))
        .expect("start the listener");
    control
}

/// A model set without config deployments, reading through on misses.
fn no_models() -> Arc<Models> {
    Arc::new(Models::new(
        Vec::new(),
        RouterSettings::default(),
        true,
        None,
    ))
}

/// A stored `mock/` deployment of group `name`.
fn model(id: &str, name: &str, at: DateTime<Utc>) -> ModelRecord {
    ModelRecord {
        model_id: id.into(),
        model_name: name.into(),
        litellm_params: map(json!({"model": "mock/x", "mock_response": "hi", "api_key": "sk-up"})),
        model_info: map(json!({"id": id, "max_input_tokens": 100})),
        created_at: Some(at),
        created_by: Some("test".into()),
        updated_at: Some(at),
        updated_by: Some("test".into()),
    }
}

#[tokio::test]
async fn models_round_trip_like_memory() {
    let db = TestDb::create().await;
    let (mem, pg) = (MemoryStore::default(), store(&db).await);
    let at = now_ms();
    for s in [&mem as &dyn Store, &pg as &dyn Store] {
        let m1 = model("m1", "g", at);
        s.insert_model(&m1).await.unwrap();
        s.insert_model(&model("m2", "g", at)).await.unwrap();
        s.insert_model(&model("m3", "h", at)).await.unwrap();
        assert!(matches!(
            s.insert_model(&m1).await,
            Err(gateway::store::StoreError::Conflict(_))
        ));
        assert_eq!(s.get_model("m1").await.unwrap(), Some(m1.clone()));
        assert_eq!(s.get_model("nope").await.unwrap(), None);
        let named: Vec<String> = s
            .models_named("g")
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.model_id)
            .collect();
        assert_eq!(named, ["m1", "m2"]);
        assert_eq!(s.list_models().await.unwrap().len(), 3);

        let mut changed = model("m1", "g2", at + Duration::seconds(5));
        changed
            .litellm_params
            .insert("api_base".into(), json!("http://b"));
        changed.created_at = Some(at + Duration::days(1));
        assert!(s.update_model(&changed).await.unwrap());
        let read = s.get_model("m1").await.unwrap().unwrap();
        assert_eq!(read.model_name, "g2");
        assert_eq!(read.litellm_params["api_base"], "http://b");
        assert_eq!(read.created_at, Some(at), "creation is kept");
        assert_eq!(read.updated_at, changed.updated_at);
        assert!(!s.update_model(&model("nope", "g", at)).await.unwrap());

        assert!(s.delete_model("m2").await.unwrap());
        assert!(!s.delete_model("m2").await.unwrap());
        assert_eq!(s.models_named("g").await.unwrap(), Vec::new());
    }
}

#[tokio::test]
async fn a_model_change_reaches_another_replica_and_a_reconnect_reloads_them() {
    let db = TestDb::create().await;
    let replica_a = store(&db).await;
    let replica_b = Arc::new(store(&db).await);
    let models_b = no_models();
    let caches_b = Caches {
        keys: Arc::new(KeyCache::default()),
        models: models_b.clone(),
    };
    let control_b = listen(&db, replica_b.clone(), caches_b);
    // Written before B listens or after: B serves it either way.
    replica_a
        .insert_model(&model("m1", "g", now_ms()))
        .await
        .unwrap();
    let serves = |group: &'static str| {
        let models = models_b.clone();
        move || models.router().registry().has_group(group)
    };
    eventually("replica B serves the new model", serves("g")).await;
    assert_eq!(models_b.stored("m1").unwrap().model_name, "g");

    let mut renamed = model("m1", "g2", now_ms());
    renamed
        .litellm_params
        .insert("mock_response".into(), json!("bye"));
    replica_a.update_model(&renamed).await.unwrap();
    eventually("replica B serves the renamed model", serves("g2")).await;
    assert!(!models_b.router().registry().has_group("g"));

    // Cut B's listener off; a model added and one removed meanwhile are
    // caught up by the reload after the reconnect.
    let admin = db.client().await;
    admin
        .batch_execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = 'gateway-listener'",
        )
        .await
        .unwrap();
    replica_a.delete_model("m1").await.unwrap();
    admin
        .batch_execute(
            r#"INSERT INTO "LiteLLM_ProxyModelTable" (model_id, model_name, litellm_params)
               VALUES ('m9', 'direct', '{"model": "mock/d"}')"#,
        )
        .await
        .unwrap();
    eventually(
        "replica B serves the row written while it was deaf",
        serves("direct"),
    )
    .await;
    eventually("replica B drops the deleted model", || {
        !models_b.router().registry().has_group("g2")
    })
    .await;
    drop(control_b);
}

#[tokio::test]
async fn an_invalid_stored_row_keeps_the_deployment_it_replaced() {
    let store = MemoryStore::default();
    let models = no_models();
    store
        .insert_model(&model("m1", "g", now_ms()))
        .await
        .unwrap();
    models.refresh(&store, "m1").await.unwrap();
    assert!(models.router().registry().has_group("g"));
    let mut broken = model("m1", "g", now_ms());
    broken
        .litellm_params
        .insert("model".into(), json!("nope/x"));
    store.update_model(&broken).await.unwrap();
    models.refresh(&store, "m1").await.unwrap();
    let served = models.stored("m1").unwrap();
    assert_eq!(served.litellm_params["model"], "mock/x");
    assert_eq!(models.reload(&store).await.unwrap(), 1);
    store.delete_model("m1").await.unwrap();
    models.refresh(&store, "m1").await.unwrap();
    assert!(!models.router().registry().has_group("g"));
}

/// The proxy-wide default end-user budget row
/// (`litellm_settings.max_end_user_budget_id`) resets the end users riding
/// it (those linking no row of their own) when its period ends, as
/// LiteLLM's reset job does; an end user with its own row keeps its spend
/// until that row's period ends, and another row's period ending resets
/// no rider.
#[tokio::test]
async fn the_default_end_user_budget_row_resets_its_riders() {
    let db = TestDb::create().await;
    let (mem, pg) = (MemoryStore::default(), store(&db).await);
    let t0 = now_ms();
    let row = |id: &str, at: DateTime<Utc>| gateway::store::BudgetRecord {
        budget_id: id.into(),
        max_budget: Some(1.0),
        budget_duration: Some("1h".into()),
        budget_reset_at: Some(at),
        created_at: Some(t0),
        updated_at: Some(t0),
        ..Default::default()
    };
    let own = EndUserBudget {
        budget_id: "own".into(),
        max_budget: Some(5.0),
        budget_duration: Some("1d".into()),
        budget_reset_at: Some(t0 + Duration::days(1)),
        created_at: Some(t0),
        ..Default::default()
    };
    let linked = EndUserRecord {
        user_id: "linked".into(),
        ..Default::default()
    };
    same!(mem, pg, s => s.insert_budget(&row("default", t0 + Duration::hours(1))));
    same!(mem, pg, s => s.insert_budget(&row("other", t0 + Duration::minutes(30))));
    same!(mem, pg, s => s.insert_end_user(&linked, Some(&own)));
    let mut rows = Vec::new();
    for (i, user) in ["rider", "linked"].into_iter().enumerate() {
        let mut r = spend_row(&format!("r-default-{i}"), "tok", 0.75, t0);
        r.end_user = Some(user.into());
        rows.push(r);
    }
    same!(mem, pg, s => s.record_spend(&rows, std::time::Duration::ZERO));
    // Only "other" is due: nothing of the default's riders moves.
    let half = t0 + Duration::minutes(45);
    let m = sorted(mem.reset_due_budgets(half, Some("default")).await.unwrap());
    let p = sorted(pg.reset_due_budgets(half, Some("default")).await.unwrap());
    assert_eq!(m, p);
    assert!(m.is_empty(), "{m:?}");
    // The default's period ends: its rider is reset, the linked end user
    // is not, and the row's next reset is announced.
    let later = t0 + Duration::hours(2);
    let m = sorted(mem.reset_due_budgets(later, Some("default")).await.unwrap());
    let p = sorted(pg.reset_due_budgets(later, Some("default")).await.unwrap());
    assert_eq!(m, p);
    assert_eq!(m, ["budget:default", "end_user:rider"]);
    same!(mem, pg, s => s.get_end_user("rider"));
    let rider = pg.get_end_user("rider").await.unwrap().unwrap();
    assert_eq!(rider.spend, 0.0);
    let linked = pg.get_end_user("linked").await.unwrap().unwrap();
    assert_eq!(linked.spend, 0.75);
    let next = pg.budgets(Some(&["default".to_string()])).await.unwrap();
    assert!(
        next[0].budget_reset_at.is_some_and(|at| at > later),
        "{next:?}"
    );
    // Not reset twice in one period.
    assert!(pg
        .reset_due_budgets(later, Some("default"))
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn end_users_and_their_budget_rows_round_trip_like_memory() {
    let db = TestDb::create().await;
    let (mem, pg) = (MemoryStore::default(), store(&db).await);
    let t0 = now_ms();
    let budget = EndUserBudget {
        budget_id: "b1".into(),
        max_budget: Some(2.0),
        rpm_limit: Some(5),
        budget_duration: Some("1h".into()),
        budget_reset_at: Some(t0 + Duration::hours(1)),
        created_at: Some(t0),
        ..Default::default()
    };
    let rich = EndUserRecord {
        user_id: "rich".into(),
        alias: Some("Rich".into()),
        spend: 0.5,
        models: vec!["m".into()],
        ..Default::default()
    };
    let plain = EndUserRecord {
        user_id: "plain".into(),
        ..Default::default()
    };
    same!(mem, pg, s => s.insert_end_user(&rich, Some(&budget)));
    same!(mem, pg, s => s.insert_end_user(&plain, None));
    same!(mem, pg, s => s.insert_end_user(&plain, None)); // conflict in both
    same!(mem, pg, s => s.get_end_user("rich"));
    same!(mem, pg, s => s.get_end_user("nobody"));
    same!(mem, pg, s => s.budget_exists("b1"));
    same!(mem, pg, s => s.budget_exists("nope"));

    // Linking another end user to the budget row, then changing the row
    // through the first: both are stale.
    let link = EndUserUpdate {
        budget_id: Some("b1".into()),
        alias: Some("Plain".into()),
        ..Default::default()
    };
    same!(mem, pg, s => s.update_end_user("plain", &link, "unused"));
    let edit = EndUserUpdate {
        blocked: Some(true),
        budget: BudgetFields {
            max_budget: Some(3.0),
            ..Default::default()
        },
        ..Default::default()
    };
    same!(mem, pg, s => s.update_end_user("rich", &edit, "unused"));
    same!(mem, pg, s => s.update_end_user("ghost", &edit, "unused"));
    same!(mem, pg, s => s.get_end_user("plain"));
    same!(mem, pg, s => s.get_end_user("rich"));

    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let block = ids(&["new", "new", "plain"]);
    same!(mem, pg, s => s.set_end_users_blocked(&block, true));
    let unblock = ids(&["rich", "ghost"]);
    same!(mem, pg, s => s.set_end_users_blocked(&unblock, false));
    same!(mem, pg, s => s.list_end_users(0, 10, None));
    same!(mem, pg, s => s.list_end_users(0, 10, Some("PLA")));
    same!(mem, pg, s => s.list_end_users(1, 1, None));
    let mut restricted = Vec::new();
    for s in [&mem as &dyn Store, &pg as &dyn Store] {
        let mut seen = Vec::new();
        let n = s
            .restricted_end_users(&mut |id, blocked| seen.push((id.to_string(), blocked)))
            .await
            .unwrap();
        assert_eq!(n, seen.len());
        seen.sort();
        restricted.push(seen);
    }
    assert_eq!(restricted[0], restricted[1]);
    assert_eq!(
        restricted[0],
        [
            ("new".to_string(), true),
            ("plain".to_string(), true),
            ("rich".to_string(), false)
        ]
    );

    // Spend is added to the end user's row (created when missing); only
    // end users with a budget row are announced.
    let mut first = spend_row("r-eu-1", "tok", 0.25, t0);
    first.end_user = Some("rich".into());
    let mut second = spend_row("r-eu-2", "tok", 0.5, t0);
    second.end_user = Some("fresh".into());
    let rows = [first, second];
    same!(mem, pg, s => s.record_spend(&rows, std::time::Duration::ZERO));
    same!(mem, pg, s => s.record_spend(&rows, std::time::Duration::ZERO));
    same!(mem, pg, s => s.get_end_user("rich"));
    same!(mem, pg, s => s.get_end_user("fresh"));

    // The budget row's period ends: its end users' spend is zeroed.
    let later = t0 + Duration::hours(2);
    let m = sorted(mem.reset_due_budgets(later, None).await.unwrap());
    let p = sorted(pg.reset_due_budgets(later, None).await.unwrap());
    assert_eq!(m, p);
    assert_eq!(m, ["end_user:plain", "end_user:rich"]);
    same!(mem, pg, s => s.get_end_user("rich"));
    let logs = pg.spend_logs(&SpendFilter::default()).await.unwrap();
    assert_eq!(logs[0].end_user.as_deref(), Some("rich"));
    same!(mem, pg, s => s.delete_end_users(&unblock));
    same!(mem, pg, s => s.get_end_user("rich"));
}
