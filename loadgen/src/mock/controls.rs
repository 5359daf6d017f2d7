//! Per-request behaviour: CLI defaults overridden by `x-mock-*` headers.

use super::config::MockConfig;
use super::http::Request;
use super::rng;

/// An injected connection-level failure (`x-mock-fault`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Close the connection at once (TCP RST) without answering.
    Reset,
    /// Never answer; hold the connection until the peer closes it.
    Hang,
    /// Like [`Fault::Reset`] for the first request carrying this id anywhere
    /// in the process; later ones are served normally.
    ResetOnce(String),
    /// Send the head and part of the body, then close.
    CloseMidBody,
}

/// The effective behaviour for one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Controls {
    /// Delay before the response head.
    pub latency_ms: u64,
    /// Streams: delay before the first token.
    pub ttft_ms: u64,
    /// Streams: delay between later tokens.
    pub chunk_delay_ms: u64,
    /// Completion length before the request's own cap.
    pub completion_tokens: u64,
    /// Forced status (`x-mock-status`): non-2xx answers with an error body,
    /// 2xx serves normally and bypasses `--error-rate`.
    pub status: Option<u16>,
    /// Message of the forced error (`x-mock-error-message`).
    pub error_message: Option<String>,
    /// Value of a `retry-after` header to add (`x-mock-retry-after`).
    pub retry_after: Option<String>,
    /// Injected fault (`x-mock-fault`).
    pub fault: Option<Fault>,
}

impl Controls {
    /// Reads the controls for `req`, starting from `cfg`'s defaults. Fails
    /// with a message when an `x-mock-*` header has an invalid value.
    pub fn from_request(req: &Request, cfg: &MockConfig) -> Result<Controls, String> {
        let mut c = Controls {
            latency_ms: cfg.latency_ms,
            ttft_ms: cfg.ttft_ms,
            chunk_delay_ms: cfg.chunk_delay_ms,
            completion_tokens: cfg.completion_tokens,
            ..Controls::default()
        };
        for (name, value) in &req.headers {
            let Some(knob) = name.strip_prefix("x-mock-") else {
                continue;
            };
            let value = value.trim();
            match knob {
                "latency-ms" => c.latency_ms = number(name, value)?,
                "ttft-ms" => c.ttft_ms = number(name, value)?,
                "chunk-delay-ms" => c.chunk_delay_ms = number(name, value)?,
                "completion-tokens" => c.completion_tokens = number(name, value)?,
                "status" => {
                    let status: u16 = number(name, value)?;
                    if !(100..=999).contains(&status) {
                        return Err(format!("{name}: status out of range: {value}"));
                    }
                    c.status = Some(status);
                }
                "error-message" => c.error_message = Some(value.to_string()),
                "retry-after" => c.retry_after = Some(value.to_string()),
                "fault" => c.fault = Some(fault(value)?),
                _ => {}
            }
        }
        Ok(c)
    }
}

impl Controls {
    /// The status of an injected error, if this request gets one: a non-2xx
    /// `x-mock-status`, else (unless `x-mock-status` is 2xx) `cfg.error_status`
    /// with probability `cfg.error_rate`.
    pub fn injected_error(&self, cfg: &MockConfig) -> Option<u16> {
        match self.status {
            Some(s) if (200..300).contains(&s) => None,
            Some(s) => Some(s),
            None => rng::chance(cfg.error_rate).then_some(cfg.error_status),
        }
    }
}

fn number<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{name}: not a valid number: {value:?}"))
}

fn fault(value: &str) -> Result<Fault, String> {
    match value {
        "reset" => Ok(Fault::Reset),
        "hang" => Ok(Fault::Hang),
        "close-mid-body" => Ok(Fault::CloseMidBody),
        _ => match value.strip_prefix("reset-once:") {
            Some(id) if !id.is_empty() => Ok(Fault::ResetOnce(id.to_string())),
            _ => Err(format!(
                "x-mock-fault: expected reset, hang, reset-once:<id> or close-mid-body, got {value:?}"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> Request {
        Request {
            method: "POST".into(),
            target: "/v1/chat/completions".into(),
            minor_version: 1,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: Vec::new(),
        }
    }

    #[test]
    fn defaults_then_overrides() {
        let cfg = MockConfig {
            latency_ms: 5,
            completion_tokens: 16,
            ..MockConfig::default()
        };
        let c = Controls::from_request(&req(&[]), &cfg).unwrap();
        assert_eq!((c.latency_ms, c.completion_tokens, c.status), (5, 16, None));
        let c = Controls::from_request(
            &req(&[
                ("x-mock-latency-ms", "7"),
                ("x-mock-completion-tokens", " 3 "),
                ("x-mock-status", "429"),
                ("x-mock-retry-after", "2"),
                ("x-mock-fault", "reset-once:abc"),
            ]),
            &cfg,
        )
        .unwrap();
        assert_eq!(c.latency_ms, 7);
        assert_eq!(c.completion_tokens, 3);
        assert_eq!(c.status, Some(429));
        assert_eq!(c.retry_after.as_deref(), Some("2"));
        assert_eq!(c.fault, Some(Fault::ResetOnce("abc".into())));
        let c = Controls::from_request(&req(&[("x-mock-status", "200")]), &cfg).unwrap();
        assert_eq!(c.status, Some(200));
        let always = MockConfig {
            error_rate: 1.0,
            error_status: 503,
            ..MockConfig::default()
        };
        assert_eq!(c.injected_error(&always), None);
        let c = Controls::from_request(&req(&[]), &cfg).unwrap();
        assert_eq!(c.injected_error(&always), Some(503));
        assert_eq!(c.injected_error(&cfg), None);
        let c = Controls::from_request(&req(&[("x-mock-status", "418")]), &cfg).unwrap();
        assert_eq!(c.injected_error(&always), Some(418));
    }

    #[test]
    fn invalid_values_are_errors() {
        let cfg = MockConfig::default();
        assert!(Controls::from_request(&req(&[("x-mock-latency-ms", "soon")]), &cfg).is_err());
        assert!(Controls::from_request(&req(&[("x-mock-status", "42")]), &cfg).is_err());
        assert!(Controls::from_request(&req(&[("x-mock-fault", "explode")]), &cfg).is_err());
        assert!(Controls::from_request(&req(&[("x-mock-fault", "reset-once:")]), &cfg).is_err());
    }
}
