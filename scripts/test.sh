#!/usr/bin/env bash
# The project's test command: installs what a fresh Debian machine lacks,
# starts the local services later tests need, then runs format, lint, build
# and every test. Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '\n== %s\n' "$*"; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_updated=0
apt_install() {
    if [ "$apt_updated" -eq 0 ]; then
        as_root apt-get update -qq
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

# --- toolchain ---------------------------------------------------------------
if ! cargo fmt --version >/dev/null 2>&1; then
    log "installing rustfmt"
    rustup component add rustfmt
fi
if ! cargo clippy --version >/dev/null 2>&1; then
    log "installing clippy"
    rustup component add clippy
fi

# --- Python venv with the OpenAI and Anthropic SDKs (tests/tests/python_sdk.rs)
if ! .venv/bin/python -c 'import openai, anthropic' >/dev/null 2>&1; then
    log "creating .venv with the openai and anthropic packages"
    if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
        apt_install python3-venv
    fi
    rm -rf .venv
    python3 -m venv .venv
    echo '*' > .venv/.gitignore # keep the venv out of git
    .venv/bin/python -m pip install --quiet --disable-pip-version-check openai anthropic
fi
# The OpenAI SDK's realtime client runs over `websockets` (tests/tests/realtime.rs).
if ! .venv/bin/python -c 'import websockets' >/dev/null 2>&1; then
    log "installing websockets into .venv (the OpenAI SDK's realtime client)"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check websockets
fi

# --- LiteLLM's own packages, pinned (tests/tests/litellm_db.rs builds a
# LiteLLM database from litellm-proxy-extras' migrations and reads the
# gateway's rows back with litellm's parsers; pynacl and cryptography are
# what litellm's encryption helpers import).
LITELLM_PINS=(litellm==1.110.2 litellm-proxy-extras==0.4.110 pynacl==1.6.2 cryptography==50.0.2)
if ! .venv/bin/python - "${LITELLM_PINS[@]}" >/dev/null 2>&1 <<'PY'
import importlib.metadata as m, sys
for pin in sys.argv[1:]:
    name, version = pin.split("==")
    assert m.version(name) == version, pin
PY
then
    log "installing ${LITELLM_PINS[*]} into .venv"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check "${LITELLM_PINS[@]}"
fi

# --- headless Chromium and Selenium (tests/tests/console.rs drives the /ui
# console in a real browser through tests/python/test_console.py)
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    log "installing chromium and chromium-driver"
    apt_install chromium chromium-driver
fi
if ! .venv/bin/python -c 'import selenium' >/dev/null 2>&1; then
    log "installing selenium into .venv"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check selenium
fi

# --- the coding agents' CLIs from npm, pinned (tests/tests/coding_agents.rs
# runs `codex exec` and `claude -p` through the gateway); each ships its
# native binary in a platform package of the registry.
NODE_PINS=(@openai/codex@0.171.0 @anthropic-ai/claude-code@2.1.332)
command -v npm >/dev/null 2>&1 || apt_install nodejs npm
if ! node - tests/node "${NODE_PINS[@]}" >/dev/null 2>&1 <<'JS'
const [dir, ...pins] = process.argv.slice(2);
for (const pin of pins) {
    const at = pin.lastIndexOf("@");
    const pkg = require(require("path").resolve(dir, "node_modules", pin.slice(0, at), "package.json"));
    if (pkg.version !== pin.slice(at + 1)) process.exit(1);
}
JS
then
    log "installing ${NODE_PINS[*]} into tests/node"
    mkdir -p tests/node
    echo '*' > tests/node/.gitignore # keep the packages out of git
    npm install --prefix tests/node --no-save --no-audit --no-fund --loglevel=error "${NODE_PINS[@]}"
fi
for cli in codex claude; do
    tests/node/node_modules/.bin/$cli --version >/dev/null
done

# --- promtool (tests/tests/metrics.rs checks the /metrics exposition) -------
command -v promtool >/dev/null 2>&1 || apt_install --no-install-recommends prometheus

# --- services: Redis and PostgreSQL ------------------------------------------
# The rate-limit tests also start private redis-servers of their own, and
# tests/tests/cluster.rs a private three-master Redis Cluster (Redis >= 7
# for --cluster-port, joined with `redis-cli --cluster create`).
command -v redis-server >/dev/null 2>&1 || apt_install redis-server
command -v redis-cli >/dev/null 2>&1 || apt_install redis-tools
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    log "starting Redis"
    as_root mkdir -p /var/lib/redis /var/log/redis
    as_root redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 \
        --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
    for _ in $(seq 50); do
        redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null
fi
if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    log "starting PostgreSQL"
    command -v pg_ctlcluster >/dev/null 2>&1 || apt_install postgresql
    pg_version="$(ls /etc/postgresql | sort -V | tail -n 1)"
    as_root pg_ctlcluster --skip-systemctl-redirect "$pg_version" main start || true
    for _ in $(seq 100); do
        pg_isready -q -h 127.0.0.1 -p 5432 && break
        sleep 0.2
    done
    pg_isready -h 127.0.0.1 -p 5432
fi

# --- checks ------------------------------------------------------------------
log "documentation links"
python3 scripts/check_links.py

log "cargo fmt --check"
cargo fmt --all -- --check

log "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

log "cargo build --bins (the e2e tests run these binaries)"
cargo build --workspace --bins

if cargo nextest --version >/dev/null 2>&1; then
    # Doc tests first, so the run closes on nextest's summary of all tests.
    log "doc tests"
    cargo test --workspace --doc
    log "cargo nextest run"
    cargo nextest run --workspace
else
    log "cargo test"
    cargo test --workspace
fi
