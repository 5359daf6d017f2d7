"""A LiteLLM database made and read by LiteLLM's own code (tests/tests/litellm_db.rs).

    litellm_db.py setup DATABASE_URL MOCK_API_BASE   -> prints the fixture as JSON
    litellm_db.py verify DATABASE_URL FIXTURE_JSON    -> exits 0 when LiteLLM reads the gateway's rows
    litellm_db.py settings DATABASE_URL SETTINGS_JSON -> LiteLLM's stored settings rows written

`settings` builds the schema as `setup` does (once) and writes what LiteLLM's admin
UI saves: `{"cache_settings": {...}}` as the `LiteLLM_CacheConfig` row
(every string sealed with `encrypt_value_helper`, as its
`update_cache_settings` does) and `{"config": {"general_settings": {...},
...}}` as `LiteLLM_Config` rows (`param_name`, `param_value`), in place of
the rows there were.

`setup` builds the schema from the SQL migrations shipped in the
litellm-proxy-extras package (in order, with psql), then inserts keys
(including blocked, expired and over-budget ones), a team, a user, a team
membership, an end user and two models in LiteLLM's shape: tokens hashed with
LiteLLM's `hash_token`, every string of `litellm_params` encrypted with
LiteLLM's `encrypt_value_helper` (one model with the default NaCl SecretBox,
one with `encryption_algorithm: aes-256-gcm`).

`setup` also inserts a budget, an organization using it and a membership,
in LiteLLM's shape.

`verify` also checks LiteLLM's daily tables the gateway filled: they add up
to its spend log, LiteLLM's own daily-spend writer (`build_bulk_upsert`)
upserts into the very rows the gateway wrote (same unique key, NULL-free),
and the gateway's `/user/daily/activity` answer parses as LiteLLM's
`SpendAnalyticsPaginatedResponse`.

`verify` reads back what the gateway wrote through LiteLLM's parsers: its
pydantic `LiteLLM_SpendLogs` and `LiteLLM_VerificationToken` types, its
`decrypt_value_helper` for the params of the model the gateway stored on
/model/new, and its `LiteLLM_OrganizationTable`, `LiteLLM_BudgetTableFull`
and `LiteLLM_OrganizationMembershipTable` types for the organization, budget
and memberships the gateway made on /organization/*.

LiteLLM's proxy server module cannot be imported here (it needs the proxy's
optional dependencies and Prisma), so it is stubbed with the two globals the
encryption helpers read: `master_key` and `general_settings`.
"""

import json
import os
import subprocess
import sys
import tempfile
import types
from datetime import datetime, timedelta, timezone

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
SALT_KEY = os.environ["LITELLM_SALT_KEY"]

_proxy_server = types.ModuleType("litellm.proxy.proxy_server")
_proxy_server.master_key = None
_proxy_server.general_settings = {}
sys.modules["litellm.proxy.proxy_server"] = _proxy_server

import litellm_proxy_extras  # noqa: E402
from litellm.models.budget import LiteLLM_BudgetTableFull  # noqa: E402
from litellm.models.team_membership import LiteLLM_TeamMembership  # noqa: E402
from litellm.proxy.auth.team_grants import TeamModelAliasTable  # noqa: E402
from litellm.models.organization import LiteLLM_OrganizationTable  # noqa: E402
from litellm.models.organization_membership import LiteLLM_OrganizationMembershipTable  # noqa: E402
from litellm.models.end_user import LiteLLM_EndUserTable  # noqa: E402
from litellm.models.spend_logs import LiteLLM_SpendLogs  # noqa: E402
from litellm.types.utils import StandardLoggingGuardrailInformation  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402
from litellm.models.verification_token import LiteLLM_VerificationToken  # noqa: E402
from litellm.proxy._types import hash_token  # noqa: E402
from litellm.proxy.db.daily_spend_bulk_upsert import (  # noqa: E402
    DAILY_SPEND_TABLES,
    build_bulk_upsert,
    merge_by_conflict_key,
)
from litellm.types.proxy.management_endpoints.common_daily_activity import (  # noqa: E402
    SpendAnalyticsPaginatedResponse,
)
from litellm.proxy.common_utils.encrypt_decrypt_utils import (  # noqa: E402
    decrypt_value_helper,
    encrypt_value_helper,
)


def psql(url, sql=None, file=None):
    """Runs SQL with psql (stop on the first error); returns stdout."""
    cmd = ["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", url]
    cmd += ["-f", file] if file else ["-c", sql]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"psql failed ({out.returncode}): {out.stderr}")
    return out.stdout


def rows(url, sql):
    """The rows of a SELECT as dicts (row_to_json)."""
    out = psql(url, f"SELECT row_to_json(t) FROM ({sql}) t")
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def lit(value):
    """A SQL literal of a JSON-able value or string."""
    if value is None:
        return "NULL"
    if not isinstance(value, str):
        value = json.dumps(value)
    return "'" + value.replace("'", "''") + "'"


def sql_value(v):
    """A SQL value: JSON objects as jsonb, booleans and numbers bare."""
    if isinstance(v, dict):
        return f"{lit(v)}::jsonb"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return lit(v)


def inline(sql, params):
    """`sql` with its `$n` parameters written in as literals (psql binds none)."""
    for i in range(len(params), 0, -1):
        value = params[i - 1]
        literal = "NULL" if value is None else lit(value) if isinstance(value, str) else repr(value)
        sql = sql.replace(f"${i}::", f"{literal}::")
    return sql


def verify_daily(url, fx, logs):
    """LiteLLM's daily tables as the gateway filled them (see the docstring)."""
    users = rows(url, 'SELECT * FROM "LiteLLM_DailyUserSpend" ORDER BY id')
    assert users, "the gateway wrote no daily user rows"
    spent = sum(r["spend"] for r in logs)
    assert abs(sum(r["spend"] for r in users) - spent) < 1e-9, (users, spent)
    assert sum(r["api_requests"] for r in users) == len(logs), (users, len(logs))
    failed = sum(1 for r in logs if r["status"] == "failure")
    assert sum(r["failed_requests"] for r in users) == failed, users
    for r in users:
        for col in ("user_id", "model", "custom_llm_provider", "mcp_namespaced_tool_name", "endpoint"):
            assert r[col] is not None, f"{col} NULL: LiteLLM's upsert would never meet this row: {r}"
    teams = rows(url, f"SELECT * FROM \"LiteLLM_DailyTeamSpend\" WHERE team_id = {lit(fx['team_id'])}")
    team_spent = sum(r["spend"] for r in logs if r["team_id"] == fx["team_id"])
    assert abs(sum(r["spend"] for r in teams) - team_spent) < 1e-9, (teams, team_spent)
    end_users = rows(url, f"SELECT * FROM \"LiteLLM_DailyEndUserSpend\" WHERE end_user_id = {lit(fx['end_user_id'])}")
    end_user_spent = sum(r["spend"] for r in logs if r.get("end_user") == fx["end_user_id"])
    assert abs(sum(r["spend"] for r in end_users) - end_user_spent) < 1e-9, (end_users, end_user_spent)

    # The gateway's answer, through LiteLLM's response type.
    answer = SpendAnalyticsPaginatedResponse(**fx["user_daily_activity"])
    assert abs(answer.metadata.total_spend - spent) < 1e-9, answer.metadata
    assert answer.metadata.total_api_requests == len(logs), answer.metadata
    assert any(day.breakdown.api_keys for day in answer.results), answer.results

    # LiteLLM's writer meets the gateway's row: one more request on it.
    table = DAILY_SPEND_TABLES["user"]
    row = users[0]
    txn = {c: row[c] or None for c in ("user_id", "date", "api_key", "model", "model_group",
                                        "custom_llm_provider", "mcp_namespaced_tool_name", "endpoint")}
    txn.update(spend=1.0, prompt_tokens=2, completion_tokens=3, api_requests=1, successful_requests=1)
    sql, params = build_bulk_upsert(table, merge_by_conflict_key(table, [txn]))
    psql(url, inline(sql, params))
    after = rows(url, 'SELECT * FROM "LiteLLM_DailyUserSpend" ORDER BY id')
    assert len(after) == len(users), "LiteLLM's upsert inserted a row beside the gateway's"
    [same] = [r for r in after if r["id"] == row["id"]]
    assert abs(same["spend"] - (row["spend"] + 1.0)) < 1e-9, (row, same)
    assert same["api_requests"] == row["api_requests"] + 1, (row, same)
    return f"{len(users)} daily user rows add up; LiteLLM's daily writer upserts into them"


def apply_migrations(url):
    root = os.path.join(os.path.dirname(litellm_proxy_extras.__file__), "migrations")
    names = sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "migration.sql")))
    assert names, f"no migrations under {root}"
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        # One session; Prisma runs each file outside a transaction (some use
        # CREATE INDEX CONCURRENTLY), and so does this.
        f.write("SET synchronous_commit TO off;\nSET client_min_messages TO error;\n")
        for name in names:
            f.write(f"\\i '{os.path.join(root, name, 'migration.sql')}'\n")
    try:
        psql(url, file=f.name)
    finally:
        os.unlink(f.name)
    return len(names)


def encrypt_params(params, algorithm):
    _proxy_server.general_settings = {"encryption_algorithm": algorithm} if algorithm else {}
    try:
        return {k: encrypt_value_helper(v) if isinstance(v, str) else v for k, v in params.items()}
    finally:
        _proxy_server.general_settings = {}


def setup(url, api_base):
    migrations = apply_migrations(url)
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    fx = {
        "migrations": migrations,
        "team_id": "team-lite",
        "user_id": "user-lite",
        "end_user_id": "end-user-lite",
        "end_user_spend": 0.25,
        "keys": {
            "good": "sk-lite-good",
            "blocked": "sk-lite-blocked",
            "expired": "sk-lite-expired",
            "spent": "sk-lite-spent",
            "narrow": "sk-lite-narrow",
            "tiered": "sk-lite-tiered",
        },
        "good_spend": 0.5,
        "good_total_spend": 7.0,
        "models": {
            "secretbox": {"name": "lite-secretbox", "id": "m-secretbox", "api_key": "sk-upstream-secretbox"},
            "gcm": {"name": "lite-gcm", "id": "m-gcm", "api_key": "sk-upstream-gcm"},
        },
    }
    psql(
        url,
        f"""INSERT INTO "LiteLLM_TeamTable" (team_id, team_alias, admins, members, members_with_roles,
                max_budget, spend, models, tpm_limit, rpm_limit, blocked, created_at, updated_at)
            VALUES ('team-lite', 'Lite team', ARRAY[]::text[], ARRAY['user-lite'],
                {lit([{"user_id": "user-lite", "role": "user"}])}::jsonb,
                100, 2.0, ARRAY[]::text[], 100000, 1000, false, now(), now());
        INSERT INTO "LiteLLM_UserTable" (user_id, user_alias, teams, user_role, max_budget, spend, models)
            VALUES ('user-lite', 'Lite user', ARRAY['team-lite'], 'internal_user', 50, 1.0, ARRAY[]::text[]);
        INSERT INTO "LiteLLM_TeamMembership" (user_id, team_id, spend, total_spend)
            VALUES ('user-lite', 'team-lite', 0.25, 0.25);
        INSERT INTO "LiteLLM_UserTable" (user_id, teams, user_role, models)
            VALUES ('user-lite-scoped', ARRAY['team-lite'], 'internal_user', ARRAY[]::text[]);
        INSERT INTO "LiteLLM_BudgetTable" (budget_id, allowed_models, rpm_limit, created_by, updated_by)
            VALUES ('budget-lite-member', ARRAY['lite-gcm'], 1000, 'litellm', 'litellm');
        INSERT INTO "LiteLLM_TeamMembership" (user_id, team_id, spend, total_spend, budget_id)
            VALUES ('user-lite-scoped', 'team-lite', 0, 0, 'budget-lite-member');
        INSERT INTO "LiteLLM_BudgetTable" (budget_id, max_budget, tpm_limit, created_by, updated_by)
            VALUES ('budget-lite', 40, 5000, 'litellm', 'litellm');
        INSERT INTO "LiteLLM_OrganizationTable" (organization_id, organization_alias, budget_id, models,
                metadata, spend, created_by, updated_by)
            VALUES ('org-lite', 'Lite org', 'budget-lite', ARRAY['lite-gcm'], '{{"tier": "gold"}}'::jsonb, 1.5,
                'litellm', 'litellm');
        INSERT INTO "LiteLLM_OrganizationMembership" (user_id, organization_id, user_role)
            VALUES ('user-lite', 'org-lite', 'org_admin');
        INSERT INTO "LiteLLM_BudgetTable" (budget_id, max_budget, rpm_limit, created_by, updated_by)
            VALUES ('budget-lite-eu', 10.0, 1000, 'litellm', 'litellm'),
                   ('budget-lite-small', 0.5, NULL, 'litellm', 'litellm');
        INSERT INTO "LiteLLM_EndUserTable" (user_id, alias, spend, blocked, budget_id)
            VALUES ('end-user-lite', 'Lite end user', 0.25, false, 'budget-lite-eu'),
                   ('end-user-spent', NULL, 1.0, false, 'budget-lite-small'),
                   ('end-user-blocked', NULL, 0, true, NULL),
                   ('end-user-riding', NULL, 1.0, false, NULL);
        """,
    )
    # The team's model aliases, as LiteLLM's /team/new writes them: a
    # LiteLLM_ModelTable row holding json.dumps(aliases), named by model_id.
    psql(
        url,
        f"""WITH m AS (INSERT INTO "LiteLLM_ModelTable" (aliases, created_by, updated_by)
                VALUES ({lit(json.dumps({"lite-fast": "lite-gcm"}))}::text::jsonb, 'litellm', 'litellm')
                RETURNING id)
            UPDATE "LiteLLM_TeamTable" SET model_id = (SELECT id FROM m) WHERE team_id = 'team-lite'""",
    )
    keys = [
        # name, extra columns
        ("good", {"spend": fx["good_spend"], "total_spend": fx["good_total_spend"], "max_budget": 10.0,
                  "rpm_limit": 1000, "tpm_limit": 1000000,
                  "model_max_budget": {"lite-gcm": {"budget_limit": 5.0, "time_period": "30d"}}}),
        ("blocked", {"blocked": True}),
        ("expired", {"expires": (now - timedelta(hours=1)).isoformat()}),
        ("spent", {"spend": 2.0, "max_budget": 1.0}),
        ("narrow", {"models": ["lite-gcm"]}),
        # LiteLLM's /key/generate keeps end_user_budget_id in metadata.
        ("tiered", {"metadata": {"owner": "litellm", "end_user_budget_id": "budget-lite-small"}}),
    ]
    for name, extra in keys:
        token = hash_token(fx["keys"][name])
        cols = {
            "token": token,
            "key_name": "sk-...lite",
            "key_alias": f"lite-{name}",
            "user_id": "user-lite",
            "team_id": "team-lite",
            "metadata": {"owner": "litellm"},
            "created_by": "litellm",
            "updated_by": "litellm",
            **extra,
        }
        models = cols.pop("models", [])
        names = ", ".join(f'"{c}"' for c in cols) + ", models"
        values = ", ".join(sql_value(v) for v in cols.values())
        psql(url, f'INSERT INTO "LiteLLM_VerificationToken" ({names}) VALUES ({values}, ARRAY{models!r}::text[])')
    for algorithm, model in (("", fx["models"]["secretbox"]), ("aes-256-gcm", fx["models"]["gcm"])):
        params = encrypt_params(
            {"model": "openai/gpt-4o", "api_base": api_base, "api_key": model["api_key"], "input_cost_per_token": 1e-6,
             "output_cost_per_token": 2e-6},
            algorithm,
        )
        assert params["api_key"] != model["api_key"]
        assert params["model"] != "openai/gpt-4o"
        assert params["api_key"].startswith("v2:gcm:") == (algorithm == "aes-256-gcm")
        psql(
            url,
            f"""INSERT INTO "LiteLLM_ProxyModelTable" (model_id, model_name, litellm_params, model_info,
                    created_by, updated_by)
                VALUES ({lit(model["id"])}, {lit(model["name"])}, {lit(params)}::jsonb,
                    {lit({"id": model["id"]})}::jsonb, 'litellm', 'litellm')""",
        )
    # A model LiteLLM blocked: not served there, nor here.
    params = encrypt_params({"model": "openai/gpt-4o", "api_base": api_base, "api_key": "sk-upstream-blocked"}, "")
    psql(
        url,
        f"""INSERT INTO "LiteLLM_ProxyModelTable" (model_id, model_name, litellm_params, model_info, blocked,
                created_by, updated_by)
            VALUES ('m-blocked', 'lite-blocked', {lit(params)}::jsonb, '{{"id": "m-blocked"}}'::jsonb, true,
                'litellm', 'litellm')""",
    )
    print(json.dumps(fx))


def verify(url, fx):
    checks = []
    # Spend logs, through LiteLLM's pydantic type.
    logs = rows(url, 'SELECT * FROM "LiteLLM_SpendLogs" ORDER BY "startTime"')
    assert logs, "the gateway wrote no spend rows"
    good = hash_token(fx["keys"]["good"])
    for row in logs:
        for col in ("metadata", "request_tags", "messages", "response"):
            if row.get(col) is not None and not isinstance(row[col], str):
                row[col] = json.dumps(row[col])
        parsed = LiteLLM_SpendLogs(**row)
        assert parsed.request_id and parsed.call_type, row
        assert row["litellm_call_id"], f"litellm_call_id missing: {row}"
        assert row["status"] in ("success", "failure"), row
        assert isinstance(row["request_duration_ms"], int), row
        meta = json.loads(row["metadata"])
        assert meta.get("user_api_key") == parsed.api_key, meta
        assert isinstance(json.loads(row["request_tags"]), list), row
    ours = [r for r in logs if r["api_key"] == good and r["status"] == "success"]
    assert len(ours) >= 2, f"want the good key's rows: {logs}"
    guardrail_runs = TypeAdapter(list[StandardLoggingGuardrailInformation])
    for r in ours:
        meta = json.loads(r["metadata"])
        assert meta.get("user_api_key_team_id") == fx["team_id"], meta
        assert meta.get("user_api_key_user_id") == fx["user_id"], meta
        # The gateway's default-on guardrail ran: its record as LiteLLM's
        # type reads it (a wrong type or status is refused).
        [run] = guardrail_runs.validate_python(meta["guardrail_information"])
        assert run["guardrail_name"] == "pii-mask", run
        assert run["guardrail_mode"] == "pre_call", run
        assert run["guardrail_status"] == "success", run
        assert run["end_time"] >= run["start_time"] and run["duration"] >= 0, run
        assert r["spend"] > 0 and r["prompt_tokens"] > 0 and r["total_tokens"] > 0, r
        # store_prompts_in_spend_logs: the request in proxy_server_request,
        # the answer in response, messages empty, as LiteLLM writes them.
        request, answer = r["proxy_server_request"], json.loads(r["response"])
        assert request["model"] and request["messages"], r
        assert answer["choices"][0]["message"]["content"], r
        assert json.loads(r["messages"]) == {}, r
    checks.append(f"{len(logs)} spend rows parsed, prompts and answers kept")
    spent = sum(r["spend"] for r in logs if r["api_key"] == good)

    # The good key, through LiteLLM's pydantic type: spend added to what
    # LiteLLM had, limits and model_max_budget as LiteLLM wrote them.
    [key] = rows(url, f"SELECT * FROM \"LiteLLM_VerificationToken\" WHERE token = {lit(good)}")
    token = LiteLLM_VerificationToken(**key)
    assert abs(token.spend - (fx["good_spend"] + spent)) < 1e-9, (token.spend, spent)
    assert abs(token.total_spend - (fx["good_total_spend"] + spent)) < 1e-9, (token.total_spend, spent)
    assert token.max_budget == 10.0 and token.rpm_limit == 1000 and token.tpm_limit == 1000000, token
    assert token.model_max_budget == {"lite-gcm": {"budget_limit": 5.0, "time_period": "30d"}}, token.model_max_budget
    # LiteLLM's metadata is kept; the gateway adds only its per-model budget
    # windows (model_max_budget's time_period), under its own name.
    metadata = dict(token.metadata)
    windows = metadata.pop("gateway_model_budget_windows", {})
    assert metadata == {"owner": "litellm"}, token.metadata
    assert set(windows) <= {"lite-secretbox", "lite-gcm"}, windows
    assert token.last_active is not None, "last_active not set"
    assert set(token.model_spend) == {"lite-secretbox", "lite-gcm"}, token.model_spend
    checks.append(f"key spend {token.spend:.6f} = {fx['good_spend']} + {spent:.6f}")

    # Team, user and membership spend added (every key here is the user's,
    # in the team).
    team_spent = sum(r["spend"] for r in logs if r["team_id"] == fx["team_id"])
    user_spent = sum(r["spend"] for r in logs if r["user"] == fx["user_id"])
    assert team_spent > spent, (team_spent, spent)
    [team] = rows(url, "SELECT spend FROM \"LiteLLM_TeamTable\" WHERE team_id = 'team-lite'")
    assert abs(team["spend"] - (2.0 + team_spent)) < 1e-9, team
    [user] = rows(url, "SELECT spend FROM \"LiteLLM_UserTable\" WHERE user_id = 'user-lite'")
    assert abs(user["spend"] - (1.0 + user_spent)) < 1e-9, user
    member_spent = sum(r["spend"] for r in logs if r["team_id"] == fx["team_id"] and r["user"] == fx["user_id"])
    [member] = rows(
        url, "SELECT spend, total_spend FROM \"LiteLLM_TeamMembership\" WHERE user_id = 'user-lite' AND team_id = 'team-lite'"
    )
    assert abs(member["spend"] - (0.25 + member_spent)) < 1e-9, member
    assert abs(member["total_spend"] - (0.25 + member_spent)) < 1e-9, member
    checks.append("team, user and membership spend added")

    # The end user's spend added to what LiteLLM recorded, read through
    # LiteLLM's pydantic type with its budget row.
    end_user_spent = sum(r["spend"] for r in logs if r.get("end_user") == fx["end_user_id"])
    assert end_user_spent > 0, f"no spend row names the end user: {logs}"
    [end_user] = rows(url, f"SELECT * FROM \"LiteLLM_EndUserTable\" WHERE user_id = {lit(fx['end_user_id'])}")
    [budget] = rows(url, "SELECT * FROM \"LiteLLM_BudgetTable\" WHERE budget_id = 'budget-lite-eu'")
    end_user["litellm_budget_table"] = budget
    parsed_end_user = LiteLLM_EndUserTable(**end_user)
    assert abs(parsed_end_user.spend - (fx["end_user_spend"] + end_user_spent)) < 1e-9, (parsed_end_user, end_user_spent)
    assert parsed_end_user.litellm_budget_table.max_budget == 10.0, parsed_end_user
    assert parsed_end_user.blocked is False, parsed_end_user
    checks.append(f"end user spend {parsed_end_user.spend:.6f} = {fx['end_user_spend']} + {end_user_spent:.6f}")

    # The model the gateway stored on /model/new, opened by LiteLLM.
    new = fx["new_model"]
    [model] = rows(url, f"SELECT * FROM \"LiteLLM_ProxyModelTable\" WHERE model_id = {lit(new['id'])}")
    assert model["model_name"] == new["name"], model
    assert model["blocked"] is False and model["created_by"] and model["updated_by"], model
    params = model["litellm_params"]
    for k, v in params.items():
        if isinstance(v, str):
            assert decrypt_value_helper(value=v, key=k) is not None, f"{k} not encrypted as LiteLLM does: {v}"
    assert params["api_key"] != new["api_key"], "api_key stored in plain text"
    assert decrypt_value_helper(value=params["api_key"], key="api_key") == new["api_key"]
    assert decrypt_value_helper(value=params["model"], key="model") == "openai/gpt-4o"
    checks.append("model params opened by LiteLLM")

    # The organization, its budget and memberships the gateway made.
    org_fx = fx["gateway_org"]
    [org] = rows(url, f"SELECT * FROM \"LiteLLM_OrganizationTable\" WHERE organization_id = {lit(org_fx['id'])}")
    [budget] = rows(url, f"SELECT * FROM \"LiteLLM_BudgetTable\" WHERE budget_id = {lit(org['budget_id'])}")
    parsed_org = LiteLLM_OrganizationTable(**org, litellm_budget_table=budget)
    assert parsed_org.organization_alias == org_fx["alias"], parsed_org
    assert parsed_org.models == org_fx["models"] and parsed_org.spend == 0.0, parsed_org
    assert parsed_org.metadata == org_fx["metadata"], parsed_org.metadata
    assert parsed_org.litellm_budget_table.max_budget == org_fx["max_budget"], parsed_org.litellm_budget_table
    parsed_budget = LiteLLM_BudgetTableFull(**budget)
    assert parsed_budget.budget_duration == "30d" and parsed_budget.budget_reset_at is not None, parsed_budget
    assert budget["created_by"] and budget["updated_by"], budget
    members = rows(url, f"SELECT * FROM \"LiteLLM_OrganizationMembership\" WHERE organization_id = {lit(org_fx['id'])}")
    parsed = [LiteLLM_OrganizationMembershipTable(**m) for m in members]
    assert [(m.user_id, m.user_role) for m in parsed] == [(fx["user_id"], "internal_user")], parsed
    [member_budget] = rows(url, f"SELECT * FROM \"LiteLLM_BudgetTable\" WHERE budget_id = {lit(parsed[0].budget_id)}")
    assert LiteLLM_BudgetTableFull(**member_budget).max_budget == org_fx["member_budget"], member_budget
    checks.append("organization, budget and membership parsed by LiteLLM")

    # The member limits and team aliases the gateway wrote, read by LiteLLM.
    [membership] = rows(
        url, "SELECT * FROM \"LiteLLM_TeamMembership\" WHERE user_id = 'user-lite' AND team_id = 'team-lite'"
    )
    [member_row] = rows(url, f"SELECT * FROM \"LiteLLM_BudgetTable\" WHERE budget_id = {lit(membership['budget_id'])}")
    parsed_member = LiteLLM_TeamMembership(**membership, litellm_budget_table=LiteLLM_BudgetTableFull(**member_row))
    wanted = fx["member_limits"]
    assert parsed_member.safe_get_team_member_rpm_limit() == wanted["rpm_limit"], parsed_member
    assert parsed_member.safe_get_team_member_tpm_limit() == wanted["tpm_limit"], parsed_member
    table = parsed_member.litellm_budget_table
    assert table.allowed_models == wanted["allowed_models"], table
    assert table.temp_budget_increase == wanted["temp_budget_increase"], table
    assert table.active_temp_budget_increase(datetime.now(timezone.utc)) == wanted["temp_budget_increase"], table
    assert set(table.model_max_budget) == set(wanted["model_max_budget"]), table
    [team] = rows(url, "SELECT * FROM \"LiteLLM_TeamTable\" WHERE team_id = 'team-lite'")
    [model_row] = rows(url, f"SELECT * FROM \"LiteLLM_ModelTable\" WHERE id = {team['model_id']}")
    parsed_aliases = TeamModelAliasTable(model_aliases=model_row["aliases"]).model_aliases
    assert dict(parsed_aliases) == fx["team_aliases"], parsed_aliases
    checks.append("member limits and team aliases parsed by LiteLLM")
    checks.append(verify_daily(url, fx, logs))
    print("; ".join(checks))


def settings(url, wanted):
    if psql(url, """SELECT to_regclass('"LiteLLM_CacheConfig"') IS NULL""").strip() == "t":
        apply_migrations(url)
    psql(url, 'DELETE FROM "LiteLLM_CacheConfig"; DELETE FROM "LiteLLM_Config"')
    cache = wanted.get("cache_settings")
    if cache is not None:
        sealed = {k: encrypt_value_helper(v) if isinstance(v, str) else v for k, v in cache.items()}
        psql(
            url,
            'INSERT INTO "LiteLLM_CacheConfig" (id, cache_settings, updated_at) '
            f"VALUES ('cache_config', {lit(json.dumps(sealed))}::jsonb, now())",
        )
    for name, value in (wanted.get("config") or {}).items():
        psql(
            url,
            'INSERT INTO "LiteLLM_Config" (param_name, param_value) '
            f"VALUES ({lit(name)}, {lit(json.dumps(value))}::jsonb)",
        )


def main():
    cmd, url = sys.argv[1], sys.argv[2]
    if cmd == "settings":
        settings(url, json.loads(sys.argv[3]))
    elif cmd == "setup":
        setup(url, sys.argv[3])
    elif cmd == "verify":
        verify(url, json.loads(sys.argv[3]))
    else:
        raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
