//! What each guardrail did on one request, as LiteLLM records it
//! (`StandardLoggingGuardrailInformation`): its name and type, the hook it
//! ran in, its outcome, when it started and how long it took. The proxy
//! keeps one [`Log`] per request and hands it to the spend row's
//! `metadata.guardrail_information`, the Prometheus guardrail families and
//! a trace span per run.

use super::{Guardrail, Kind};
use crate::error::GatewayError;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The hook a guardrail ran in (LiteLLM's `GuardrailEventHooks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// On the request, before it is routed.
    Pre,
    /// Beside the upstream call.
    During,
    /// On the answer, whole or streamed.
    Post,
}

impl Hook {
    /// LiteLLM's name: `pre_call`, `during_call`, `post_call`.
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Pre => "pre_call",
            Hook::During => "during_call",
            Hook::Post => "post_call",
        }
    }
}

/// What a guardrail decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The text passed unchanged.
    Passed,
    /// It rewrote (masked) the text, which then went on.
    Masked,
    /// It refused the text.
    Blocked,
    /// It could not judge (unreachable, timed out, answered garbage) and
    /// the request failed.
    Failed,
    /// It could not judge and its settings let the text pass unchecked
    /// (`unreachable_fallback: fail_open`, `fail_on_error: false`).
    FailedOpen,
}

impl Outcome {
    /// LiteLLM's `guardrail_status`: `success` for a pass or a mask,
    /// `guardrail_intervened` for a block, `guardrail_failed_to_respond`
    /// for a failure, whether the request failed or went on unchecked (as
    /// LiteLLM records a `fail_open` guardrail that let a request through
    /// unscanned).
    pub fn status(self) -> &'static str {
        match self {
            Outcome::Passed | Outcome::Masked => "success",
            Outcome::Blocked => "guardrail_intervened",
            Outcome::Failed | Outcome::FailedOpen => "guardrail_failed_to_respond",
        }
    }

    /// LiteLLM's `guardrail_response` summary of a run that let the text
    /// on (`allow`, `mask`); the refusal's message otherwise.
    pub fn summary(self) -> &'static str {
        match self {
            Outcome::Passed | Outcome::FailedOpen => "allow",
            Outcome::Masked => "mask",
            Outcome::Blocked => "block",
            Outcome::Failed => "error",
        }
    }

    /// This gateway's name of the outcome (a metric label):
    /// `passed`, `masked`, `blocked`, `failed`, `failed_open`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Masked => "masked",
            Outcome::Blocked => "blocked",
            Outcome::Failed => "failed",
            Outcome::FailedOpen => "failed_open",
        }
    }
}

/// One guardrail's run on one request (for a stream: over the whole
/// stream, its time the sum of its checks).
#[derive(Debug, Clone)]
pub struct Run {
    /// The guardrail.
    pub guardrail: Arc<Guardrail>,
    /// The hook it ran in.
    pub hook: Hook,
    /// What it decided.
    pub outcome: Outcome,
    /// When it started.
    pub start: SystemTime,
    /// How long it took.
    pub took: Duration,
}

impl Run {
    /// A run of `guardrail` in `hook` that started at `began` (a clock
    /// reading taken then) and ended now.
    pub fn ended(guardrail: &Arc<Guardrail>, hook: Hook, outcome: Outcome, began: Instant) -> Run {
        let took = began.elapsed();
        Run {
            guardrail: Arc::clone(guardrail),
            hook,
            outcome,
            start: SystemTime::now().checked_sub(took).unwrap_or(UNIX_EPOCH),
            took,
        }
    }

    /// Its start, in nanoseconds since the Unix epoch.
    pub fn start_unix_ns(&self) -> u64 {
        let since = self.start.duration_since(UNIX_EPOCH).unwrap_or_default();
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Its end, in nanoseconds since the Unix epoch.
    pub fn end_unix_ns(&self) -> u64 {
        let took = u64::try_from(self.took.as_nanos()).unwrap_or(u64::MAX);
        self.start_unix_ns().saturating_add(took)
    }

    /// LiteLLM's `StandardLoggingGuardrailInformation` of the run (times
    /// in seconds since the epoch, `duration` in seconds; never a text of
    /// the request) written as JSON text onto `out`, as serde_json writes
    /// the object (members in name order).
    fn write_information(&self, out: &mut Vec<u8>) {
        let (start, duration) = (self.start_secs(), self.took.as_secs_f64());
        let number = |out: &mut Vec<u8>, x: f64| {
            // Writing JSON into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut *out, &x);
        };
        let string = |out: &mut Vec<u8>, s: &str| {
            let _ = serde_json::to_writer(&mut *out, s);
        };
        out.extend_from_slice(b"{\"duration\":");
        number(out, duration);
        out.extend_from_slice(b",\"end_time\":");
        number(out, start + duration);
        out.extend_from_slice(b",\"guardrail_mode\":");
        string(out, self.hook.as_str());
        out.extend_from_slice(b",\"guardrail_name\":");
        string(out, &self.guardrail.name);
        out.extend_from_slice(b",\"guardrail_provider\":");
        string(out, self.guardrail.provider());
        out.extend_from_slice(b",\"guardrail_response\":");
        string(out, self.outcome.summary());
        out.extend_from_slice(b",\"guardrail_status\":");
        string(out, self.outcome.status());
        out.extend_from_slice(b",\"start_time\":");
        number(out, start);
        out.push(b'}');
    }

    /// Its start in seconds since the epoch.
    fn start_secs(&self) -> f64 {
        self.start_unix_ns() as f64 / 1e9
    }
}

/// A request's guardrail runs, shared by the parts of the request that
/// run them (a `during_call` check beside the call, a stream's guard):
/// one core's, never shared across threads. Nothing is allocated until a
/// guardrail runs.
#[derive(Debug, Default, Clone)]
pub struct Log(Option<Rc<RefCell<Vec<Run>>>>);

/// Most runs one request keeps (a fallback chain repeats its guardrails).
const MAX_RUNS: usize = 256;

impl Log {
    /// Adds a run.
    pub fn push(&mut self, run: Run) {
        let runs = self.0.get_or_insert_with(Default::default);
        let mut runs = runs.borrow_mut();
        if runs.len() < MAX_RUNS {
            runs.push(run);
        }
    }

    /// A handle on the same runs (created now if there were none).
    pub fn share(&mut self) -> Log {
        self.0.get_or_insert_with(Default::default);
        self.clone()
    }

    /// Whether no guardrail ran.
    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|r| r.borrow().is_empty())
    }

    /// Calls `f` with every run, in the order they ended.
    pub fn each(&self, mut f: impl FnMut(&Run)) {
        if let Some(runs) = &self.0 {
            for run in runs.borrow().iter() {
                f(run);
            }
        }
    }

    /// LiteLLM's `guardrail_information` as JSON text: every run's
    /// record, in order; `None` when no guardrail ran.
    /// Written straight from the runs (a spend row per request carries
    /// it; a `Value` of eight members per run cost more than the guardrail
    /// check it records).
    pub fn information(&self) -> Option<Box<str>> {
        let runs = self.0.as_ref()?.borrow();
        if runs.is_empty() {
            return None;
        }
        let mut out = Vec::with_capacity(256 * runs.len());
        out.push(b'[');
        for (i, run) in runs.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            run.write_information(&mut out);
        }
        out.push(b']');
        // serde_json writes UTF-8.
        String::from_utf8(out).ok().map(String::into_boxed_str)
    }
}

impl Guardrail {
    /// Its LiteLLM type (`guardrail_provider`).
    pub fn provider(&self) -> &'static str {
        match self.kind {
            Kind::Filter(_) => "litellm_content_filter",
            Kind::Api(_) => "generic_guardrail_api",
            Kind::Lakera(_) => "lakera_v2",
            Kind::Presidio(_) => "presidio",
            Kind::Moderation(_) => "openai_moderation",
            Kind::Bedrock(_) => "bedrock",
        }
    }
}

/// The outcome of a run whose result is `result` (`Ok(true)`: it
/// rewrote the text).
pub fn outcome_of(result: &Result<bool, GatewayError>) -> Outcome {
    match result {
        Ok(false) => Outcome::Passed,
        Ok(true) => Outcome::Masked,
        Err(err) => refusal_outcome(err),
    }
}

/// The outcome of a run that refused with `err`: a block or a failure.
pub fn refusal_outcome(err: &GatewayError) -> Outcome {
    match err {
        GatewayError::GuardrailBlocked { .. } => Outcome::Blocked,
        _ => Outcome::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guardrails::Guardrails;
    use serde_json::Value;

    fn guardrail() -> Arc<Guardrail> {
        let yaml = "- guardrail_name: pii\n  litellm_params: {guardrail: litellm_content_filter, mode: pre_call, patterns: [{pattern_type: prebuilt, pattern_name: email, action: MASK}]}";
        let g = Guardrails::from_config(Some(&serde_yaml::from_str(yaml).unwrap())).unwrap();
        g.list[0].clone()
    }

    #[test]
    fn a_run_is_recorded_with_litellms_names_and_shared_handles_see_it() {
        let mut log = Log::default();
        assert!(log.is_empty() && log.information().is_none());
        let mut beside = log.share();
        beside.push(Run::ended(
            &guardrail(),
            Hook::During,
            Outcome::Blocked,
            Instant::now(),
        ));
        log.push(Run::ended(
            &guardrail(),
            Hook::Pre,
            Outcome::Masked,
            Instant::now(),
        ));
        let info: Value = serde_json::from_str(&log.information().unwrap()).unwrap();
        let runs = info.as_array().unwrap();
        assert_eq!(runs.len(), 2, "the shared handle's run is in the log");
        assert_eq!(runs[0]["guardrail_name"], "pii");
        assert_eq!(runs[0]["guardrail_provider"], "litellm_content_filter");
        assert_eq!(runs[0]["guardrail_mode"], "during_call");
        assert_eq!(runs[0]["guardrail_status"], "guardrail_intervened");
        assert_eq!(runs[1]["guardrail_status"], "success");
        assert_eq!(runs[1]["guardrail_response"], "mask");
        let (start, end) = (
            runs[1]["start_time"].as_f64().unwrap(),
            runs[1]["end_time"].as_f64().unwrap(),
        );
        assert!(start > 1.7e9 && end >= start, "{start} {end}");
        assert!(runs[1]["duration"].as_f64().unwrap() >= 0.0);
    }

    #[test]
    fn outcomes_follow_the_result() {
        let block: Result<bool, GatewayError> = Err(GatewayError::GuardrailBlocked {
            message: "no".into(),
            detail: Value::Null,
        });
        let failed: Result<bool, GatewayError> = Err(GatewayError::Internal("down"));
        assert_eq!(
            outcome_of(&Ok::<bool, GatewayError>(false)),
            Outcome::Passed
        );
        assert_eq!(outcome_of(&Ok::<bool, GatewayError>(true)), Outcome::Masked);
        assert_eq!(outcome_of(&block), Outcome::Blocked);
        assert_eq!(outcome_of(&failed), Outcome::Failed);
    }

    #[test]
    fn a_fail_open_pass_is_recorded_as_a_failure_that_let_the_text_through() {
        let mut log = Log::default();
        log.push(Run::ended(
            &guardrail(),
            Hook::Pre,
            Outcome::FailedOpen,
            Instant::now(),
        ));
        let info: Value = serde_json::from_str(&log.information().unwrap()).unwrap();
        assert_eq!(info[0]["guardrail_status"], "guardrail_failed_to_respond");
        assert_eq!(info[0]["guardrail_response"], "allow");
        assert_eq!(Outcome::FailedOpen.as_str(), "failed_open");
        assert_ne!(Outcome::FailedOpen.as_str(), Outcome::Passed.as_str());
    }

    #[test]
    fn the_information_text_is_what_serde_json_writes_of_the_values() {
        let mut log = Log::default();
        for (hook, outcome) in [
            (Hook::Pre, Outcome::Passed),
            (Hook::During, Outcome::Failed),
            (Hook::Post, Outcome::Blocked),
        ] {
            let mut run = Run::ended(&guardrail(), hook, outcome, Instant::now());
            run.took = Duration::from_nanos(1_234_567);
            log.push(run);
        }
        // The records as they were built before: a `Value` per run.
        let mut values = Vec::new();
        log.each(|r| {
            let start = r.start_unix_ns() as f64 / 1e9;
            values.push(serde_json::json!({
                "guardrail_name": r.guardrail.name,
                "guardrail_provider": r.guardrail.provider(),
                "guardrail_mode": r.hook.as_str(),
                "guardrail_status": r.outcome.status(),
                "guardrail_response": r.outcome.summary(),
                "start_time": start,
                "end_time": start + r.took.as_secs_f64(),
                "duration": r.took.as_secs_f64(),
            }))
        });
        let text = log.information().unwrap();
        assert_eq!(&*text, Value::Array(values).to_string());
    }
}
