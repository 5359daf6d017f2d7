//! Prometheus metrics with LiteLLM's families, types, label names and label
//! values (`litellm/integrations/prometheus.py`), exposed on `GET /metrics`.
//!
//! Each core records into its own tables (a thread-local [`store::CoreWriter`]):
//! no lock and no write to memory another core writes, on the request path.
//! A scrape reads every core's tables and merges them ([`render`]); it runs
//! off the cores. Label values are interned per core (a text at an address
//! seen before is found without hashing it) and a request's label set is
//! memoized with the series it resolved in each family, so a request hashes
//! its labels once per phase, and nothing is allocated for a series that
//! exists. The number of series per family is capped
//! ([`MetricsSettings::max_series`]): past it a counter or histogram
//! records on its `other` series, so totals stay exact, a gauge is not
//! recorded, and `gateway_metrics_series_dropped_total` counts both.
//!
//! The request path records through [`RequestMetrics`]; the router records
//! cooldowns ([`cooled_down`]); health checks set deployment states
//! ([`deployment_state`]).

mod families;
mod labels;
mod render;
mod request;
mod store;

pub use request::{Finish, RequestMetrics};

use crate::deployment::Deployment;
use serde::Deserialize;
use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use store::{Caps, CoreData, CoreWriter};

/// Series per family by default (LiteLLM has no cap by default).
const DEFAULT_MAX_SERIES: u64 = 10_000;
/// The largest cap an operator may set.
const MAX_MAX_SERIES: u64 = 1_000_000;

/// `gateway_settings.metrics`.
#[derive(Debug, Default, Deserialize)]
pub struct MetricsFile {
    /// Serve `/metrics` even without LiteLLM's `prometheus` callback.
    pub enabled: Option<bool>,
    /// Series per family (LiteLLM's
    /// `litellm_settings.prometheus_metrics_max_series_per_metric` wins).
    pub max_series_per_metric: Option<u64>,
}

/// How metrics are configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSettings {
    /// Whether anything is recorded and `/metrics` answers.
    pub enabled: bool,
    /// Whether `/metrics` needs an admin credential (LiteLLM's
    /// `litellm_settings.require_auth_for_metrics_endpoint`, default true).
    pub require_auth: bool,
    /// Distinct label sets per family across the process.
    pub max_series: usize,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        MetricsSettings {
            enabled: false,
            require_auth: true,
            max_series: DEFAULT_MAX_SERIES as usize,
        }
    }
}

impl MetricsSettings {
    /// Reads LiteLLM's switches from `litellm_settings` (`callbacks`,
    /// `success_callback` or `failure_callback` naming `prometheus`;
    /// `require_auth_for_metrics_endpoint`;
    /// `prometheus_metrics_max_series_per_metric`) and this gateway's
    /// `gateway_settings.metrics`. The error names the field.
    pub fn resolve(
        litellm_settings: Option<&serde_yaml::Value>,
        file: &MetricsFile,
    ) -> Result<MetricsSettings, String> {
        let get = |name: &str| litellm_settings.and_then(|s| s.get(name));
        let names_prometheus = |name: &str| match get(name) {
            Some(serde_yaml::Value::String(s)) => s.trim() == "prometheus",
            Some(serde_yaml::Value::Sequence(items)) => items
                .iter()
                .any(|i| i.as_str().is_some_and(|s| s.trim() == "prometheus")),
            _ => false,
        };
        let callback = ["callbacks", "success_callback", "failure_callback"]
            .iter()
            .any(|name| names_prometheus(name));
        let require_auth = match get("require_auth_for_metrics_endpoint") {
            None | Some(serde_yaml::Value::Null) => true,
            Some(v) => v.as_bool().ok_or(
                "litellm_settings.require_auth_for_metrics_endpoint must be true or false",
            )?,
        };
        let max = match get("prometheus_metrics_max_series_per_metric") {
            None | Some(serde_yaml::Value::Null) => file.max_series_per_metric,
            Some(v) => Some(v.as_u64().ok_or(
                "litellm_settings.prometheus_metrics_max_series_per_metric must be a whole number",
            )?),
        }
        .unwrap_or(DEFAULT_MAX_SERIES);
        if !(1..=MAX_MAX_SERIES).contains(&max) {
            return Err(format!(
                "the series cap per metric must be between 1 and {MAX_MAX_SERIES}, got {max}"
            ));
        }
        Ok(MetricsSettings {
            enabled: callback || file.enabled == Some(true),
            require_auth,
            max_series: max as usize,
        })
    }
}

/// The process's metrics: the settings and every thread's tables.
pub struct Metrics {
    settings: MetricsSettings,
    caps: Arc<Caps>,
    cores: Mutex<Vec<Arc<CoreData>>>,
}

thread_local! {
    /// This thread's tables, once attached.
    static CORE: RefCell<Option<CoreWriter>> = const { RefCell::new(None) };
}

impl Metrics {
    /// The metrics of a process configured with `settings`.
    pub fn new(settings: MetricsSettings) -> Arc<Metrics> {
        Arc::new(Metrics {
            caps: Arc::new(Caps::new(settings.max_series)),
            settings,
            cores: Mutex::default(),
        })
    }

    /// Whether metrics are recorded and served.
    pub fn enabled(&self) -> bool {
        self.settings.enabled
    }

    /// Whether `/metrics` needs an admin credential.
    pub fn require_auth(&self) -> bool {
        self.settings.require_auth
    }

    /// Gives the calling thread (a data-plane core, the control plane) its
    /// own tables, once; nothing when metrics are off.
    pub fn attach_this_thread(&self) {
        let attached = CORE.try_with(|c| c.try_borrow().map_or(true, |c| c.is_some()));
        if !self.enabled() || attached.unwrap_or(true) {
            return;
        }
        let (writer, data) = CoreWriter::new(self.caps.clone());
        self.lock().push(data);
        CORE.with(|c| *c.borrow_mut() = Some(writer));
    }

    /// The exposition of every thread's tables. Call it off the cores: its
    /// cost grows with the number of series.
    pub fn render(&self) -> String {
        let cores = self.lock().clone();
        render::render(&cores)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<CoreData>>> {
        self.cores.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs `f` on this thread's tables, if it has any (metrics on, thread
/// attached); never panics.
fn with_core(f: impl FnOnce(&mut CoreWriter)) {
    let _ = CORE.try_with(|c| {
        if let Ok(mut core) = c.try_borrow_mut() {
            if let Some(w) = core.as_mut() {
                f(w);
            }
        }
    });
}

/// The router cooled `dep` down after a failure with `status`: LiteLLM's
/// `litellm_deployment_cooled_down` and a complete outage in
/// `litellm_deployment_state` (labelled with the model group, as LiteLLM's
/// cooldown callback does).
pub fn cooled_down(dep: &Deployment, status: u16) {
    with_core(|w| {
        let mut v = labels::LabelValues::default();
        deployment_labels(w, dep, &dep.group, &mut v);
        let status = w.intern(itoa::Buffer::new().format(status));
        v.set(families::L::ExceptionStatus, status);
        let c = w.combo(&v);
        request::inc(w, families::Fam::DeploymentCooledDown, c, 1.0);
        let stamp = w.stamp();
        request::set(w, families::Fam::DeploymentState, c, 2.0, stamp);
    });
}

/// Sets `litellm_deployment_state` of `dep` (0 healthy, 1 partial outage,
/// 2 complete outage), as a health check found it.
pub fn deployment_state(dep: &Deployment, state: u8) {
    with_core(|w| {
        let mut v = labels::LabelValues::default();
        deployment_labels(w, dep, &dep.upstream_model, &mut v);
        let c = w.combo(&v);
        let stamp = w.stamp();
        request::set(
            w,
            families::Fam::DeploymentState,
            c,
            f64::from(state),
            stamp,
        );
    });
}

fn deployment_labels(
    w: &mut CoreWriter,
    dep: &Deployment,
    name: &str,
    v: &mut labels::LabelValues,
) {
    use families::L;
    let name = w.intern(name);
    v.set(L::LitellmModelName, name);
    v.set(L::ModelId, w.intern(&dep.id));
    let base = dep.base.as_ref().map_or(store::NONE, |b| w.intern(&b.url));
    v.set(L::ApiBase, base);
    v.set(L::ApiProvider, w.intern(&dep.provider_name));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(yaml: &str) -> Result<MetricsSettings, String> {
        let v: serde_yaml::Value = serde_yaml::from_str(yaml).unwrap();
        MetricsSettings::resolve(Some(&v), &MetricsFile::default())
    }

    #[test]
    fn litellm_callbacks_switch_metrics_on() {
        assert!(settings("callbacks: [\"prometheus\"]").unwrap().enabled);
        assert!(
            settings("success_callback: [langfuse, prometheus]")
                .unwrap()
                .enabled
        );
        assert!(settings("failure_callback: prometheus").unwrap().enabled);
        assert!(!settings("callbacks: [otel]").unwrap().enabled);
        let s = settings(
            "require_auth_for_metrics_endpoint: false\nprometheus_metrics_max_series_per_metric: 5",
        )
        .unwrap();
        assert_eq!((s.require_auth, s.max_series), (false, 5));
        assert!(settings("prometheus_metrics_max_series_per_metric: 0").is_err());
        assert!(settings("require_auth_for_metrics_endpoint: maybe").is_err());
        let on = MetricsFile {
            enabled: Some(true),
            max_series_per_metric: Some(7),
        };
        let s = MetricsSettings::resolve(None, &on).unwrap();
        assert_eq!((s.enabled, s.require_auth, s.max_series), (true, true, 7));
    }
}
