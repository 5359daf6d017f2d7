//! State the request path reads: [`Shared`] is built once and read by every
//! core without locks; [`Worker`] belongs to one core.

use crate::alerts::Alerts;
use crate::auth::Authenticator;
use crate::config::{Config, ServerLimits};
use crate::control::ControlPlane;
use crate::limits::Limiter;
use crate::local_signal::LocalSignal;
use crate::models::Models;
use crate::spend::writer::SpendWriter;
use crate::sync::Caches;
use crate::upstream::fetch::ImageFetcher;
use crate::upstream::UpstreamClient;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::watch;

/// Read-only state of the whole process.
pub struct Shared {
    /// Model groups, deployments and their live state, as a snapshot
    /// swapped when models are added, changed or removed at run time.
    pub models: Arc<Models>,
    /// Credential checks.
    pub auth: Authenticator,
    /// HTTP server limits.
    pub limits: ServerLimits,
    /// Upstream TLS configuration.
    pub tls: Arc<rustls::ClientConfig>,
    /// The control plane (the thread that owns the database).
    pub control: ControlPlane,
    /// The key cache and model set that control-plane jobs refresh.
    pub caches: Caches,
    /// The spend writer (spend rows to the database, else the spool).
    pub spend: SpendWriter,
    /// Budget alerts (log line, webhook and Slack POSTs).
    pub alerts: Alerts,
    /// Rate limits (rpm, tpm, parallel).
    pub limiter: Limiter,
    /// TLS the gateway terminates for clients, when configured.
    pub client_tls: Option<Arc<crate::downstream::ClientTls>>,
    /// Prometheus metrics (each core attaches its own tables).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Deployment health checks.
    pub health: Arc<crate::health::Health>,
    /// Whether a database is configured (else everything is in memory).
    pub database: bool,
    /// Defaults of teams `/team/new` creates (`litellm_settings`).
    pub team_defaults: crate::config::TeamDefaults,
    /// The team settings team admins may change
    /// (`general_settings.team_admin_editable_team_fields`).
    pub team_admin: crate::config::TeamAdminFields,
    /// Reloads of the config file.
    pub reloader: crate::reload::Reloader,
    /// OpenTelemetry traces (each core attaches its span buffer).
    pub tracer: Arc<crate::otel::Tracer>,
    /// How images named by URL are fetched.
    pub images: Arc<crate::upstream::fetch::ImageFetchSettings>,
    /// The response cache, when `litellm_settings.cache` is on (swapped
    /// when the stored cache settings change).
    pub cache: Arc<crate::cache::CacheSlot>,
    /// What a model without a price costs a caller with a budget.
    pub unpriced_models: crate::spend::UnpricedModels,
    /// `litellm_settings.default_estimated_output_tokens`.
    pub estimated_output_tokens: Option<u64>,
    /// `litellm_settings.block_requests_for_models_without_pricing`.
    pub block_unpriced: bool,
    /// `general_settings.dangerously_allow_mock_testing_request_params`.
    pub mock_testing_params: bool,
    /// `general_settings.enforced_params` (and the service accounts').
    pub enforced_params: crate::config::EnforcedParams,
    /// The configured guardrails.
    pub guardrails: Arc<crate::guardrails::Guardrails>,
    /// Which spend-log rows are kept (`disable_spend_logs`,
    /// `disable_error_logs`).
    pub spend_logs: crate::spend::SpendLogs,
    shutting_down: AtomicBool,
    shutdown_tx: watch::Sender<bool>,
    /// Where LiteLLM's provider pass-through routes go, and with which key.
    pub pass_through: Arc<crate::providers::passthrough::PassThroughTargets>,
    /// Which key created each file and batch.
    pub managed: crate::managed::Managed,
    /// This replica and the fleet its heartbeat last saw.
    pub replicas: Arc<crate::replicas::Replicas>,
    /// How often the batch poller runs; `None`: it does not.
    pub batch_polling: Option<std::time::Duration>,
}

impl Shared {
    /// Builds the process state from a validated config (whose deployments
    /// are already in the caches' model set), the key cache and model set,
    /// the control plane that fills both, the spend writer, and the rate
    /// limiter, and this replica among the fleet's.
    pub fn new(
        config: Config,
        tls: Arc<rustls::ClientConfig>,
        caches: Caches,
        control: ControlPlane,
        spend: SpendWriter,
        (limiter, replicas): (Limiter, Arc<crate::replicas::Replicas>),
    ) -> Self {
        let (shutdown_tx, _) = watch::channel(false);
        let metrics = crate::metrics::Metrics::new(config.metrics.clone());
        let reloader = crate::reload::Reloader::new(&config);
        Shared {
            managed: crate::managed::Managed::new(control.clone()),
            replicas,
            pass_through: config.pass_through.clone(),
            reloader,
            tracer: crate::otel::Tracer::new(config.otel.clone()),
            images: Arc::new(config.images.clone()),
            cache: Arc::new(crate::cache::CacheSlot::new(config.cache.clone())),
            unpriced_models: config.unpriced_models,
            estimated_output_tokens: config.estimated_output_tokens,
            block_unpriced: config.block_unpriced,
            mock_testing_params: config.mock_testing_params,
            enforced_params: config.enforced_params.clone(),
            guardrails: config.guardrails.clone(),
            spend_logs: config.spend_logs,
            batch_polling: config.batch_polling,
            health: Arc::new(crate::health::Health::new(
                config.health.clone(),
                tls.clone(),
                metrics.clone(),
            )),
            metrics,
            database: config.database_url.is_some(),
            team_defaults: config.team_defaults.clone(),
            team_admin: config.team_admin.clone(),
            auth: Authenticator::new(
                config.master_key.as_deref(),
                caches.keys.clone(),
                control.clone(),
                config.console,
            ),
            models: caches.models.clone(),
            caches,
            spend,
            limits: config.limits,
            alerts: Alerts::new(config.alerts, tls.clone(), control.clone()),
            tls,
            control,
            limiter,
            client_tls: None,
            shutting_down: AtomicBool::new(false),
            shutdown_tx,
        }
    }

    /// Terminates TLS for clients with `tls`.
    pub fn with_client_tls(mut self, tls: Arc<crate::downstream::ClientTls>) -> Self {
        self.client_tls = Some(tls);
        self
    }

    /// Starts a graceful shutdown: listeners stop, idle connections close,
    /// in-flight requests finish.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
        self.shutdown_tx.send_replace(true);
    }

    /// Whether shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// A receiver that wakes when shutdown begins (each core's accept loop
    /// holds one and passes it on to the core's [`Worker::shutdown`]).
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown_tx.subscribe()
    }
}

/// State of one core's runtime.
pub struct Worker {
    /// Process-wide state.
    pub shared: Arc<Shared>,
    /// This core's upstream pools.
    pub upstream: UpstreamClient,
    /// This core's image fetcher and its cache of recent images.
    pub images: ImageFetcher,
    /// Open client connections on this core.
    pub open_connections: Cell<usize>,
    /// This core's share of `max_connections`.
    pub max_connections: usize,
    /// Spend rows waiting for room in the control plane's queue.
    pub spend_backlog: std::cell::RefCell<Vec<crate::store::SpendLogRow>>,
    /// Upstream calls running on this core (a cut-off waits for their rows).
    pub attempts_in_flight: Cell<usize>,
    /// Fired by the core's accept loop when shutdown begins: idle
    /// connections close.
    pub shutdown: LocalSignal,
    /// Fired when the core's grace period is over: upstream calls still
    /// running stop, and each leaves a spend row saying it was cut off.
    pub cut_off: LocalSignal,
    /// This core's share of the local response cache (`type: local`).
    pub cache: crate::cache::CoreCache,
}

impl Worker {
    /// State for one of `workers` cores.
    pub fn new(shared: Arc<Shared>, workers: usize) -> Self {
        let max_connections = shared.limits.max_connections.div_ceil(workers.max(1));
        Worker {
            upstream: UpstreamClient::new(shared.tls.clone(), shared.limits.upstream_idle),
            images: ImageFetcher::new(shared.images.clone(), shared.tls.clone()),
            cache: match &*shared.cache.load() {
                Some(cache) => cache.core_cache(workers),
                None => crate::cache::CoreCache::idle(workers),
            },
            shared,
            open_connections: Cell::new(0),
            max_connections,
            spend_backlog: Default::default(),
            attempts_in_flight: Cell::new(0),
            shutdown: LocalSignal::default(),
            cut_off: LocalSignal::default(),
        }
    }
}
