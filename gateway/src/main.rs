//! `gateway --config config.yaml [--host 0.0.0.0] [--port 4000] [--workers N] [--json-logs]
//! [--ssl_certfile_path cert.pem --ssl_keyfile_path key.pem]`

use gateway::config::Config;
use gateway::server;
use gateway::state::Shared;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Command-line options.
struct Options {
    config: PathBuf,
    host: String,
    port: u16,
    workers: usize,
    json_logs: bool,
    /// Client TLS: the PEM certificate chain and key (LiteLLM's flags, or
    /// `SSL_CERTFILE_PATH` / `SSL_KEYFILE_PATH`).
    tls: Option<(PathBuf, PathBuf)>,
}

const USAGE: &str = "usage: gateway --config <config.yaml> [--host 0.0.0.0] [--port 4000] [--workers N] [--json-logs] [--ssl_certfile_path <cert.pem> --ssl_keyfile_path <key.pem>]";

fn parse_args() -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let mut opts = Options {
        config: PathBuf::new(),
        host: "0.0.0.0".into(),
        port: 4000,
        workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
        json_logs: std::env::var("JSON_LOGS")
            .is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1"),
        tls: None,
    };
    let mut config = None;
    let env_path = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let mut certfile = env_path("SSL_CERTFILE_PATH");
    let mut keyfile = env_path("SSL_KEYFILE_PATH");
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or(format!("{name} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--config" | "-c" => config = Some(PathBuf::from(value("--config")?)),
            "--host" => opts.host = value("--host")?,
            "--port" | "-p" => {
                opts.port = value("--port")?
                    .parse()
                    .map_err(|e| format!("--port: {e}"))?
            }
            "--workers" | "--num_workers" => {
                opts.workers = value("--workers")?
                    .parse()
                    .map_err(|e| format!("--workers: {e}"))?;
                if opts.workers == 0 {
                    return Err("--workers must be at least 1".into());
                }
            }
            "--json-logs" | "--detailed_debug" if flag == "--json-logs" => opts.json_logs = true,
            "--ssl_certfile_path" | "--ssl-certfile-path" => {
                certfile = Some(PathBuf::from(value("--ssl_certfile_path")?))
            }
            "--ssl_keyfile_path" | "--ssl-keyfile-path" => {
                keyfile = Some(PathBuf::from(value("--ssl_keyfile_path")?))
            }
            "--help" | "-h" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    opts.config = config.ok_or(format!("--config is required\n{USAGE}"))?;
    opts.tls = match (certfile, keyfile) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => {
            return Err(format!(
                "client TLS needs both a certificate and a key (--ssl_certfile_path and --ssl_keyfile_path, or SSL_CERTFILE_PATH and SSL_KEYFILE_PATH)\n{USAGE}"
            ))
        }
    };
    Ok(opts)
}

/// mimalloc: about a tenth fewer instructions per request than glibc's
/// malloc on the request path (callgrind), and no page faults from trimming.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_arena_eager_commit` (not exported as a constant by
/// `libmimalloc-sys`; its place in `mi_option_e`).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// Commits arena memory as it is used rather than all at once: an idle
/// gateway stays near 15 MB of RSS instead of 29. mimalloc reads its options
/// in its own constructor (priority 101), before `main`, so this runs as a
/// constructor just ahead of it; it calls nothing that allocates. A
/// `MIMALLOC_ARENA_EAGER_COMMIT` in the environment still wins.
extern "C" fn lazy_allocator_commit() {
    // SAFETY: a NUL-terminated name; `getenv` and `mi_option_set` neither
    // allocate nor need anything initialised, and no other thread exists yet.
    unsafe {
        if libc::getenv(c"MIMALLOC_ARENA_EAGER_COMMIT".as_ptr()).is_null() {
            libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0);
        }
    }
}

#[used]
#[link_section = ".init_array.00100"]
static LAZY_ALLOCATOR_COMMIT: extern "C" fn() = lazy_allocator_commit;

fn main() -> ExitCode {
    let opts = match parse_args() {
        Ok(o) => o,
        Err(msg) => {
            // Not parsed: JSON when the arguments or the environment ask.
            let json = std::env::args().any(|a| a == "--json-logs")
                || std::env::var("JSON_LOGS")
                    .is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
            if json {
                gateway::logging::emergency(true, "gateway", &msg);
            } else {
                eprintln!("{msg}");
            }
            return ExitCode::from(2);
        }
    };
    let _log_guard = gateway::logging::init(opts.json_logs);
    gateway::panic_guard::install_hook();
    match run(opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            tracing::error!("{msg}");
            if !gateway::logging::json() {
                eprintln!("gateway: {msg}");
            }
            ExitCode::FAILURE
        }
    }
}

fn run(opts: Options) -> Result<(), String> {
    let mut config = Config::load(&opts.config).map_err(|e| e.to_string())?;
    for warning in &config.warnings {
        tracing::warn!("{}: {warning}", opts.config.display());
    }
    for problem in config.unsupported() {
        tracing::error!("{}: {problem}", opts.config.display());
    }
    let driver = server::choose_io_driver(std::env::var("GATEWAY_IO_DRIVER").ok().as_deref())
        .map_err(|e| e.to_string())?;
    let tls = gateway::upstream::client_config().map_err(|e| e.to_string())?;
    let client_tls = match &opts.tls {
        Some((cert, key)) => Some(Arc::new(
            gateway::downstream::ClientTls::load(cert, key)
                .map_err(|e| format!("client TLS: {e}"))?,
        )),
        None => None,
    };
    let listeners =
        server::bind_listeners(&opts.host, opts.port, opts.workers).map_err(|e| e.to_string())?;
    let addr = listeners[0].local_addr().map_err(|e| e.to_string())?;
    if config.master_key.is_none() {
        tracing::warn!(
            "general_settings.master_key is not set: every request is accepted without a key"
        );
    }
    let deployments = config.deployments.len();
    let keys = Arc::new(gateway::auth::KeyCache::default());
    if let Some(share) = config.budget_throttle {
        keys.set_budget_throttle(share);
    }
    let me = gateway::replicas::Replica::this_process(addr.to_string(), opts.workers);
    let (fleet, cooldowns) = gateway::router::cooldowns::shared(
        config.rate_limits.redis_url.as_deref(),
        &config.rate_limits.redis_cluster,
        &me.id,
    )
    .unzip();
    let replicas = Arc::new(gateway::replicas::Replicas::new(
        me,
        config.rate_limits.redis_url.is_some(),
    ));
    let models = Arc::new(
        gateway::models::Models::new(
            std::mem::take(&mut config.deployments),
            config.router.clone(),
            config.database_url.is_some(),
            fleet,
        )
        .with_env_policy(model_env_policy(&config)),
    );
    let caches = gateway::sync::Caches { keys, models };
    let (store, listen) = open_store(config.database_url.as_deref(), config.model_cipher.clone())?;
    let spool = gateway::spend::writer::SpoolConfig {
        dir: config.spool_dir.clone(),
        max_bytes: 1 << 30,
    };
    let (limiter, limiter_runner) = gateway::limits::Limiter::new(config.rate_limits.clone());
    log_limiter(limiter.settings());
    let control = gateway::control::ControlPlane::start(store)
        .map_err(|e| format!("cannot start the control plane: {e}"))?;
    let spend = start_services(
        &control,
        &caches,
        (spool, config.spend_logs),
        listen,
        (limiter_runner, limiter.breaker()),
        cooldowns,
    )
    .map_err(|e| format!("cannot start the control plane's services: {e}"))?;
    if let Some(url) = config.rate_limits.redis_url.clone() {
        let (replicas, cluster) = (replicas.clone(), config.rate_limits.redis_cluster.clone());
        control
            .spawn(move |_| gateway::replicas::heartbeat::run(replicas, url, cluster))
            .map_err(|e| format!("cannot start the replica heartbeat: {e}"))?;
    }
    seed_declared_keys(&control, std::mem::take(&mut config.virtual_keys))?;
    load_stored_models(&control, &caches.models)?;
    load_known_keys(&control, &caches.keys)?;
    let stored_reload = apply_stored_settings(&control, &mut config)?;
    if let Some(budget) = &config.proxy_budget {
        set_up_proxy_budget(&control, &caches.keys, budget.clone())?;
    }
    if let Some(id) = config.end_user_default_budget.clone() {
        caches.keys.end_users().defaults().set_proxy_wide(id);
    }
    let mut shared = Shared::new(
        config,
        tls,
        caches,
        control.clone(),
        spend.clone(),
        (limiter, replicas),
    );
    if let Some(client_tls) = client_tls {
        shared = shared.with_client_tls(client_tls);
    }
    let shared = Arc::new(shared);
    install_signal_handler(shared.clone())?;
    shared
        .tracer
        .start(&control, shared.tls.clone())
        .map_err(|e| format!("cannot start the trace exporter: {e}"))?;
    if let Some(reload) = stored_reload {
        let slot = shared.cache.clone();
        control
            .spawn(move |ctx| reload.run(ctx, slot))
            .map_err(|e| format!("cannot start the stored cache settings' reload: {e}"))?;
    }
    if shared.health.settings().background {
        let health = shared.health.clone();
        let models = shared.models.clone();
        control
            .spawn(move |_| health.run(models))
            .map_err(|e| format!("cannot start the background health checks: {e}"))?;
    }
    tracing::info!(
        io_driver = %driver,
        workers = opts.workers,
        deployments,
        version = gateway::VERSION,
        "listening on {}://{addr}",
        if opts.tls.is_some() { "https" } else { "http" }
    );
    server::run(shared, listeners, driver).map_err(|e| e.to_string())?;
    if !spend.drain() {
        tracing::error!(
            "spend rows may be lost: the writer did not finish within {:?}",
            gateway::spend::writer::DRAIN_TIMEOUT
        );
    }
    tracing::info!("shut down cleanly");
    Ok(())
}

/// What `os.environ/` references of models added through the API may
/// resolve: never the gateway's own secrets, and only the allow-listed names
/// when `gateway_settings.model_env_allowlist` is set.
fn model_env_policy(config: &Config) -> gateway::models::EnvPolicy {
    let env = |name: &str| std::env::var(name).unwrap_or_default();
    let mut policy = gateway::models::EnvPolicy::new(config.model_env_allowlist.clone())
        .refuse_value(config.master_key.as_deref().unwrap_or_default())
        .refuse_value(config.database_url.as_deref().unwrap_or_default())
        .refuse_value(config.rate_limits.redis_url.as_deref().unwrap_or_default())
        .refuse_url_password(config.database_url.as_deref().unwrap_or_default())
        .refuse_url_password(config.rate_limits.redis_url.as_deref().unwrap_or_default())
        .refuse_value(&env("LITELLM_SALT_KEY"))
        .refuse_value(&env("REDIS_PASSWORD"));
    for key in &config.virtual_keys {
        let mut hash = [0u8; 32];
        if hex::decode_to_slice(&key.token, &mut hash).is_ok() {
            policy = policy.refuse_hash(hash);
        }
    }
    policy
}

/// Says where rate limits are counted, so an operator sees it at start-up.
fn log_limiter(s: &gateway::limits::LimitSettings) {
    match s.mode {
        gateway::limits::Mode::Redis => tracing::info!(
            window_secs = s.window.secs,
            tpm_reservation = s.reservation,
            circuit_breaker = s.breaker.enabled,
            fallback = %s.fallback,
            "rate limits are counted in Redis, fleet-wide"
        ),
        gateway::limits::Mode::Lease => tracing::info!(
            window_secs = s.window.secs,
            tpm_reservation = s.reservation,
            circuit_breaker = s.breaker.enabled,
            fallback = %s.fallback,
            lease_fraction = s.lease.fraction,
            lease_ttl_ms = s.lease.ttl.as_millis() as u64,
            lease_max_ttl_ms = s.lease.max_ttl.as_millis() as u64,
            "rate limits are leased from Redis, fleet-wide, and spent in this process"
        ),
        gateway::limits::Mode::Local => tracing::info!(
            window_secs = s.window.secs,
            tpm_reservation = s.reservation,
            "rate limits are counted in this process (no Redis configured)"
        ),
    }
}

/// Starts the control plane's background services, in this order: the spend
/// writer, the cache sweeps, the Redis rate limiter's runner, cooldown
/// sharing, and (with Postgres) the change listener. Returns the writer.
fn start_services(
    control: &gateway::control::ControlPlane,
    caches: &gateway::sync::Caches,
    (spool, spend_logs): (
        gateway::spend::writer::SpoolConfig,
        gateway::spend::SpendLogs,
    ),
    listen: Option<gateway::sync::listener::ListenConfig>,
    (limiter, limiter_breaker): (
        Option<gateway::limits::remote::RemoteRunner>,
        Option<std::sync::Arc<gateway::redis::Breaker>>,
    ),
    cooldowns: Option<gateway::router::cooldowns::CooldownRunner>,
) -> Result<gateway::spend::writer::SpendWriter, gateway::control::ControlError> {
    let spend =
        gateway::spend::writer::SpendWriter::start(control, caches.clone(), spool, spend_logs)?;
    caches.start_sweeps(control)?;
    if let Some(limiter) = limiter {
        control.spawn(move |_| limiter.run())?;
    }
    if let Some(cooldowns) = cooldowns {
        let models = caches.models.clone();
        let breaker = limiter_breaker.clone();
        control.spawn(move |_| cooldowns.run(models, breaker))?;
    }
    if let Some(listen) = listen {
        let caches = caches.clone();
        control.spawn(move |ctx| gateway::sync::listener::run(caches.on(ctx), listen))?;
    }
    Ok(spend)
}

/// A store with, for Postgres, its change listener's settings.
type OpenedStore = (
    Arc<dyn gateway::store::Store>,
    Option<gateway::sync::listener::ListenConfig>,
);

/// The store: Postgres when a database URL is configured (connected and
/// migrated now, so a bad URL fails start-up), in memory otherwise; with the
/// change listener's settings for Postgres.
fn open_store(
    database_url: Option<&str>,
    cipher: gateway::store::cipher::ParamCipher,
) -> Result<OpenedStore, String> {
    use gateway::store::postgres::{redact_url, PostgresStore};
    let Some(url) = database_url else {
        tracing::warn!("no DATABASE_URL: keys, teams, users, models and spend live in memory; nothing created through the API survives a restart");
        return Ok((Arc::new(gateway::store::MemoryStore::default()), None));
    };
    let store = PostgresStore::open(url)
        .map_err(|e| format!("cannot use the database at {}: {e}", redact_url(url)))?
        .with_cipher(cipher);
    tracing::info!(database = %redact_url(url), "keys, teams, users, models and spend in Postgres");
    let listen = gateway::sync::listener::ListenConfig {
        url: url.to_string(),
        own_sessions: store.sessions(),
    };
    Ok((Arc::new(store), Some(listen)))
}

/// Writes the keys declared in `gateway_settings.virtual_keys` to the store
/// (the file wins over an older copy), before serving.
fn seed_declared_keys(
    control: &gateway::control::ControlPlane,
    keys: Vec<gateway::store::KeyRecord>,
) -> Result<(), String> {
    if keys.is_empty() {
        return Ok(());
    }
    let count = keys.len();
    let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(
        control.call(std::time::Duration::from_secs(30), move |ctx| async move {
            for key in &keys {
                if !ctx.store().update_key(key).await? {
                    ctx.store().insert_key(key).await?;
                }
            }
            Ok::<_, gateway::store::StoreError>(())
        }),
    )
    .map_err(|e| format!("cannot seed gateway_settings.virtual_keys: {e}"))?
    .map_err(|e| format!("cannot seed gateway_settings.virtual_keys: {e}"))?;
    tracing::info!(count, "virtual keys declared in the config are active");
    Ok(())
}

/// Applies LiteLLM's settings stored in the database (`LiteLLM_Config`,
/// `LiteLLM_CacheConfig`) as LiteLLM does at start-up, or stops the start
/// naming the stored setting that cannot be ignored. Returns what reads
/// the `LiteLLM_CacheConfig` row again while serving (with a database).
fn apply_stored_settings(
    control: &gateway::control::ControlPlane,
    config: &mut Config,
) -> Result<Option<gateway::config::StoredReload>, String> {
    if config.database_url.is_none() {
        return Ok(None);
    }
    let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .map_err(|e| e.to_string())?;
    let stored = rt
        .block_on(
            control.call(std::time::Duration::from_secs(30), |ctx| async move {
                ctx.store().stored_settings().await
            }),
        )
        .map_err(|e| format!("cannot read LiteLLM's stored settings: {e}"))?
        .map_err(|e| format!("cannot read LiteLLM's stored settings: {e}"))?;
    let env = std::env::var("STORE_MODEL_IN_DB").ok();
    let applied = config.apply_stored(&stored, env.as_deref())?;
    for note in &applied.notes {
        tracing::info!("{note}");
    }
    for warning in &applied.warnings {
        tracing::warn!("{warning}");
    }
    Ok(Some(gateway::config::StoredReload {
        basis: config.stored_basis(),
        seen: stored,
        store_model_in_db_env: env,
    }))
}

/// Serves the models stored through `/model/new` (on top of the config's)
/// before the first request.
fn load_stored_models(
    control: &gateway::control::ControlPlane,
    models: &Arc<gateway::models::Models>,
) -> Result<(), String> {
    let models = models.clone();
    let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .map_err(|e| e.to_string())?;
    let count = rt
        .block_on(
            control.call(std::time::Duration::from_secs(30), |ctx| async move {
                models.reload(ctx.store()).await
            }),
        )
        .map_err(|e| format!("cannot load the stored models: {e}"))?
        .map_err(|e| format!("cannot load the stored models: {e}"))?;
    if count > 0 {
        tracing::info!(count, "models added through the API are served");
    }
    Ok(())
}

/// Sets up the proxy-wide budget (`litellm_settings.max_budget`) on its user
/// row before the first request.
fn set_up_proxy_budget(
    control: &gateway::control::ControlPlane,
    keys: &Arc<gateway::auth::KeyCache>,
    budget: gateway::config::ProxyBudget,
) -> Result<(), String> {
    let keys = keys.clone();
    let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .map_err(|e| e.to_string())?;
    let (max_usd, duration) = (budget.max_usd, budget.duration.clone());
    rt.block_on(
        control.call(std::time::Duration::from_secs(30), move |ctx| async move {
            keys.set_up_proxy_budget(ctx.store(), max_usd, duration.as_deref())
                .await
        }),
    )
    .map_err(|e| format!("cannot set up litellm_settings.max_budget: {e}"))?
    .map_err(|e| format!("cannot set up litellm_settings.max_budget: {e}"))?;
    tracing::info!(
        max_budget = budget.max_usd,
        budget_duration = budget.duration.as_deref().unwrap_or("none"),
        "proxy-wide budget counted on user {}",
        gateway::store::PROXY_BUDGET_USER
    );
    Ok(())
}

/// Reads the set of keys the store holds before the first request, so an
/// unknown key is refused without the database from the start.
fn load_known_keys(
    control: &gateway::control::ControlPlane,
    keys: &Arc<gateway::auth::KeyCache>,
) -> Result<(), String> {
    let keys = keys.clone();
    let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .map_err(|e| e.to_string())?;
    let count = rt
        .block_on(
            control.call(std::time::Duration::from_secs(60), |ctx| async move {
                keys.reload_known(ctx.store()).await
            }),
        )
        .map_err(|e| format!("cannot load the known keys: {e}"))?
        .map_err(|e| format!("cannot load the known keys: {e}"))?;
    tracing::info!(count, "virtual keys in the store");
    Ok(())
}

/// SIGTERM/SIGINT start a graceful shutdown; a second one exits at once.
/// SIGHUP reloads the config file (on the control plane) and the client
/// TLS certificate.
fn install_signal_handler(shared: Arc<Shared>) -> Result<(), String> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
        .map_err(|e| e.to_string())?;
    std::thread::Builder::new()
        .name("gateway-signals".into())
        .spawn(move || {
            let mut seen = 0;
            for signal in signals.forever() {
                if signal == SIGHUP {
                    reload_client_tls(&shared);
                    tracing::info!("SIGHUP: reloading the config file");
                    let target = shared.clone();
                    let queued = shared.control.spawn(move |_| async move {
                        let _ = target
                            .reloader
                            .reload(&target.limiter, &target.alerts, &target.models)
                            .await;
                    });
                    if let Err(e) = queued {
                        tracing::error!(error = %e, "config reload not started");
                    }
                    continue;
                }
                seen += 1;
                if seen > 1 {
                    gateway::logging::emergency(
                        gateway::logging::json(),
                        "gateway",
                        &format!("second signal {signal}, exiting now"),
                    );
                    std::process::exit(1);
                }
                tracing::info!(
                    signal,
                    "shutting down: no new connections, finishing in-flight requests"
                );
                shared.begin_shutdown();
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Reads the client TLS certificate and key again (SIGHUP): new connections
/// get them; a bad file keeps the certificate in use and is logged.
fn reload_client_tls(shared: &Shared) {
    let Some(tls) = &shared.client_tls else {
        return;
    };
    match tls.reload() {
        Ok(()) => tracing::info!(
            cert = %tls.cert_path().display(),
            "client TLS certificate reloaded"
        ),
        Err(e) => {
            tracing::error!(error = %e, "client TLS certificate NOT reloaded; the one in use stays")
        }
    }
}
