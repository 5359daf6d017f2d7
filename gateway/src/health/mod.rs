//! Deployment health, on the control plane: every deployment gets a minimal
//! real call (a one-token chat completion with LiteLLM's prompt; a wildcard
//! route, which has no model to ask for, a `GET /models`), all at once under
//! one timeout, and the answers sorted into LiteLLM's `healthy_endpoints` and
//! `unhealthy_endpoints` (no key, no header, only the fields LiteLLM shows).
//!
//! `GET /health` runs a check on demand. With
//! `general_settings.background_health_checks`, a check runs every
//! `health_check_interval` seconds instead: `/health` answers from its last
//! result, an unhealthy deployment is not picked by the router while the
//! group has another (see `Router::set_healthy`), and
//! `litellm_deployment_state` follows (0 healthy, 2 unhealthy).

pub mod settings;

use crate::deployment::Deployment;
use crate::inbound::{Endpoint, LlmRequest};
use crate::models::Models;
use crate::providers::{self, MockReply};
use crate::upstream::once as http_once;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use settings::HealthSettings;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

/// LiteLLM's `DEFAULT_HEALTH_CHECK_PROMPT`.
const PROMPT: &str = "test from litellm";
/// Probes in flight at once.
const CONCURRENCY: usize = 64;
/// Longest wait for a Vertex AI deployment's first access token.
const TOKEN_WAIT: Duration = Duration::from_secs(20);
/// Longest error message shown.
const MAX_ERROR: usize = 500;

/// One deployment's result.
#[derive(Debug, Clone)]
pub struct EndpointHealth {
    /// The deployment id (`model_id`).
    pub model_id: String,
    /// The model group.
    pub group: String,
    /// What LiteLLM shows of it (`model`, `api_base`, `custom_llm_provider`,
    /// `region_name`, `rpm`, `tpm`, `model_id`, and `error` when unhealthy).
    pub shown: Value,
    /// Whether it answered.
    pub healthy: bool,
}

/// The result of one check of every deployment.
#[derive(Debug, Clone, Default)]
pub struct HealthReport {
    /// Every deployment checked, in model-list order.
    pub endpoints: Vec<EndpointHealth>,
}

impl HealthReport {
    /// LiteLLM's body for the deployments `keep` accepts:
    /// `healthy_endpoints`, `unhealthy_endpoints` and their counts.
    pub fn body(&self, keep: impl Fn(&EndpointHealth) -> bool) -> (Value, usize) {
        let (healthy, unhealthy): (Vec<&EndpointHealth>, Vec<&EndpointHealth>) = self
            .endpoints
            .iter()
            .filter(|e| keep(e))
            .partition(|e| e.healthy);
        let shown = |list: &[&EndpointHealth]| -> Vec<Value> {
            list.iter().map(|e| e.shown.clone()).collect()
        };
        let count = healthy.len();
        let body = json!({
            "healthy_endpoints": shown(&healthy),
            "unhealthy_endpoints": shown(&unhealthy),
            "healthy_count": healthy.len(),
            "unhealthy_count": unhealthy.len(),
        });
        (body, count)
    }
}

/// Health checking: settings, TLS for the probes, and the last background
/// result.
pub struct Health {
    settings: HealthSettings,
    tls: Arc<rustls::ClientConfig>,
    metrics: Arc<crate::metrics::Metrics>,
    latest: Mutex<Option<Arc<HealthReport>>>,
}

impl Health {
    /// Checks under `settings`, reaching upstreams with `tls`, reporting
    /// deployment states to `metrics`.
    pub fn new(
        settings: HealthSettings,
        tls: Arc<rustls::ClientConfig>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Health {
        Health {
            settings,
            tls,
            metrics,
            latest: Mutex::new(None),
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &HealthSettings {
        &self.settings
    }

    /// The last background result, once there is one.
    pub fn latest(&self) -> Option<Arc<HealthReport>> {
        self.latest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Probes every deployment of `deps` concurrently (on the control
    /// plane); each probe ends within the timeout. Sets each one's
    /// `litellm_deployment_state`.
    pub async fn check(&self, deps: &[Arc<Deployment>]) -> HealthReport {
        self.metrics.attach_this_thread();
        let gate = Semaphore::new(CONCURRENCY);
        let probes =
            deps.iter().map(|dep| {
                let gate = &gate;
                async move {
                    let _permit = gate.acquire().await;
                    let result =
                        match tokio::time::timeout(self.settings.timeout, probe(dep, &self.tls))
                            .await
                        {
                            Ok(result) => result,
                            Err(_) => Err(format!(
                                "no answer within {} s",
                                self.settings.timeout.as_secs()
                            )),
                        };
                    crate::metrics::deployment_state(dep, if result.is_ok() { 0 } else { 2 });
                    shown(dep, result)
                }
            });
        HealthReport {
            endpoints: futures_util::future::join_all(probes).await,
        }
    }

    /// Probes `dep` once now, within the timeout (LiteLLM's
    /// `/health/test_connection`): what [`Health::check`] finds of it,
    /// leaving the router and the `litellm_deployment_state` metric alone.
    pub async fn test(&self, dep: &Deployment) -> EndpointHealth {
        let result = match tokio::time::timeout(self.settings.timeout, probe(dep, &self.tls)).await
        {
            Ok(result) => result,
            Err(_) => Err(format!(
                "no answer within {} s",
                self.settings.timeout.as_secs()
            )),
        };
        shown(dep, result)
    }

    /// The background loop: a check every interval, its result kept for
    /// `/health` and applied to the router.
    pub async fn run(self: Arc<Self>, models: Arc<Models>) {
        let mut tick = tokio::time::interval(self.settings.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let router = models.router();
            let report = self.check(router.registry().deployments()).await;
            let unhealthy = steer(&report, &models);
            tracing::info!(
                checked = report.endpoints.len(),
                unhealthy,
                "background health check done"
            );
            *self.latest.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(report));
        }
    }
}

/// Keeps the router off the deployments `report` found unhealthy (while
/// their group has another) and lets it back on those it found healthy;
/// returns how many were unhealthy. Applied to the router's current
/// snapshot: a swap during the check is not undone. With background checks
/// every check steers the router, the one a `/health` request makes before
/// the loop's first result included, so the answer, the
/// `litellm_deployment_state` metric and the routing agree.
pub fn steer(report: &HealthReport, models: &Models) -> usize {
    let router = models.router();
    let mut unhealthy = 0;
    for e in &report.endpoints {
        router.set_healthy(&e.model_id, e.healthy);
        unhealthy += usize::from(!e.healthy);
    }
    unhealthy
}

/// What LiteLLM shows of a deployment's result (`clean_endpoint_data`).
fn shown(dep: &Deployment, result: Result<(), String>) -> EndpointHealth {
    let mut m = Map::new();
    m.insert(
        "model".into(),
        json!(format!("{}/{}", dep.provider_name, dep.upstream_model)),
    );
    if let Some(base) = &dep.base {
        m.insert("api_base".into(), json!(base.url));
    }
    m.insert("custom_llm_provider".into(), json!(dep.provider_name));
    if let Some(region) = &dep.region {
        m.insert("region_name".into(), json!(region));
    }
    if let Some(rpm) = dep.rpm {
        m.insert("rpm".into(), json!(rpm));
    }
    if let Some(tpm) = dep.tpm {
        m.insert("tpm".into(), json!(tpm));
    }
    m.insert("model_id".into(), json!(&*dep.id));
    let healthy = result.is_ok();
    if let Err(error) = result {
        m.insert("error".into(), json!(redact(dep, error)));
    }
    EndpointHealth {
        model_id: dep.id.to_string(),
        group: dep.group.clone(),
        shown: Value::Object(m),
        healthy,
    }
}

/// `error` without the deployment's key, cut to [`MAX_ERROR`] characters.
fn redact(dep: &Deployment, error: String) -> String {
    let error = match dep.api_key.as_deref().filter(|k| k.len() >= 4) {
        Some(key) => error.replace(key, "***"),
        None => error,
    };
    error.chars().take(MAX_ERROR).collect()
}

/// One minimal call to `dep`; `Err` says why it is unhealthy.
async fn probe(dep: &Deployment, tls: &Arc<rustls::ClientConfig>) -> Result<(), String> {
    let body = json!({
        "model": dep.upstream_model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 1,
    });
    let req = LlmRequest::parse(Endpoint::ChatCompletions, Bytes::from(body.to_string()))
        .map_err(|e| e.to_string())?;
    if dep.provider == crate::deployment::ProviderKind::Unsupported {
        return Err(crate::config::unsupported_note(dep));
    }
    let Some(provider) = providers::http_provider(dep.provider) else {
        return match providers::mock_reply(&req, &dep.upstream_model, &dep.mock) {
            MockReply::Error { status, message } => Err(format!("status {status}: {message}")),
            MockReply::Success { .. } => Ok(()),
        };
    };
    let base = dep.base.as_ref().ok_or("the deployment has no api_base")?;
    if let Some(source) = dep.vertex.as_ref().and_then(|v| v.auth.as_ref()) {
        source
            .ready_on_control(tls, TOKEN_WAIT)
            .await
            .map_err(|e| e.to_string())?;
    }
    let upstream = provider
        .build_request(&req, &dep.upstream_model, dep)
        .map_err(|e| e.to_string())?;
    let (method, path, body): (&str, String, Vec<u8>) = if dep.is_wildcard() {
        ("GET", format!("{}/models", base.path), Vec::new())
    } else {
        let body = upstream
            .body
            .iter()
            .flat_map(|b| b.iter().copied())
            .collect();
        ("POST", upstream.path.clone(), body)
    };
    // The provider's headers already carry the deployment's extra headers.
    let headers = std::iter::once(("content-type", "application/json")).chain(
        upstream
            .headers
            .iter()
            .map(|(n, v)| (n.as_ref(), v.as_str())),
    );
    let mut request = http_once::head(base, method, &path, body.len(), headers);
    request.extend_from_slice(&body);
    let answer = http_once::exchange(base, &request, tls).await?;
    judge(&answer)
}

/// Healthy on a 2xx; otherwise the status and the upstream's message.
fn judge(answer: &http_once::Answer) -> Result<(), String> {
    if (200..300).contains(&answer.status) {
        return Ok(());
    }
    let message = serde_json::from_slice::<Value>(&answer.body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&answer.body).trim().to_string());
    Err(format!("status {}: {message}", answer.status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_judged_by_status_with_the_upstream_message() {
        let answer = |status, body: &[u8]| http_once::Answer {
            status,
            body: body.to_vec(),
        };
        assert!(judge(&answer(200, b"{}")).is_ok());
        let err = judge(&answer(401, b"{\"error\":{\"message\":\"bad key\"}}")).unwrap_err();
        assert_eq!(err, "status 401: bad key");
        assert_eq!(
            judge(&answer(502, b" down ")).unwrap_err(),
            "status 502: down"
        );
    }
}
