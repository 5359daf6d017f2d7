//! What an LLM request reports about itself, in one place for the request
//! path: Prometheus metrics (`metrics`) and OpenTelemetry traces (`otel`).
//! Each phase is one call here; each is a no-op for what is switched off.

use crate::auth::Principal;
use crate::deployment::Deployment;
use crate::http1::{RequestHead, ResponseHead};
use crate::metrics::{Finish, RequestMetrics};
use crate::otel::RequestTrace;
use crate::store::SpendLogRow;
use std::sync::Arc;
use std::time::Instant;

/// Where an upstream attempt went: its labels and attributes are read from
/// here (the router's snapshot), not copied from the spend row.
pub struct Upstream<'a> {
    /// The deployment called.
    pub deployment: &'a Arc<Deployment>,
    /// The model group it served.
    pub group: &'a str,
    /// The model name sent to its provider.
    pub model: &'a str,
    /// Whether any price applies to it (else it was served at cost 0).
    pub priced: bool,
}

/// One request's metrics and trace.
#[derive(Default)]
pub struct Telemetry {
    metrics: RequestMetrics,
    trace: RequestTrace,
}

impl Telemetry {
    /// A request that arrived at `received_at` with `head` (its
    /// `traceparent` is continued).
    pub fn begin(head: &RequestHead, received_at: Instant) -> Telemetry {
        Telemetry {
            metrics: RequestMetrics::default(),
            trace: RequestTrace::begin(head, received_at),
        }
    }

    /// The authenticated caller; `master_token` is the master key's hash.
    pub fn identify(&mut self, principal: &Principal, master_token: Option<&Arc<str>>) {
        self.metrics.identify(principal, master_token.map(|t| &**t));
        self.trace.identify(principal, master_token);
    }

    /// The body's end user and the requested model group (`known`: some
    /// group or wildcard serves it).
    pub fn requested(&mut self, end_user: Option<&str>, model: &str, known: impl FnOnce() -> bool) {
        self.metrics.requested(end_user, model, known);
    }

    /// The `traceparent` header for the attempt about to be sent upstream.
    pub fn traceparent(&mut self) -> Option<String> {
        self.trace.traceparent()
    }

    /// The response cache's answer for model group `group`: a hit (with
    /// the stored answer's total tokens) or a miss.
    pub fn cache(&mut self, group: &str, hit: bool, tokens: u64) {
        self.metrics.cache(group, hit, tokens);
        self.trace.cache(hit);
    }

    /// The upstream's response head of the attempt under way.
    pub fn upstream_head(&mut self, head: &ResponseHead) {
        self.metrics.upstream_head(head);
    }

    /// One upstream attempt to `upstream` ended, as its spend row says.
    pub fn attempt(
        &mut self,
        principal: &Principal,
        row: &SpendLogRow,
        upstream: Upstream<'_>,
        (fallback_depth, stream): (u32, bool),
    ) {
        let Upstream {
            deployment,
            group,
            model,
            priced,
        } = upstream;
        self.metrics.attempt(
            principal,
            row,
            (&**deployment, group, model, priced),
            fallback_depth,
            stream,
        );
        self.trace
            .attempt(row, (deployment, group, model), fallback_depth);
    }

    /// What the request's guardrails did (`call_id`: the request's):
    /// LiteLLM's guardrail metrics and a trace span per run.
    pub fn guardrails(&mut self, call_id: &str, log: &crate::guardrails::log::Log) {
        log.each(|run| {
            self.metrics.guardrail(
                &run.guardrail.name,
                run.hook.as_str(),
                run.outcome.as_str(),
                run.took.as_secs_f64(),
            );
            self.trace.guardrail(call_id, run);
        });
    }

    /// The request ended.
    pub fn finish(&mut self, end: Finish<'_>) {
        self.trace.finish(&end);
        self.metrics.finish(end);
    }
}
