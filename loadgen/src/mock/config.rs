//! `loadgen mock` settings and their command-line parsing.

use std::path::PathBuf;

use crate::cli::Args;

/// Usage text of `loadgen mock`.
pub const USAGE: &str = "\
Usage: loadgen mock [OPTIONS]

A mock OpenAI/Anthropic-compatible LLM provider for gateway tests and benchmarks.

Options:
  --host HOST               address to bind [default: 127.0.0.1]
  --port PORT               port to bind; 0 picks a free one [default: 9000]
  --workers N               worker threads, one runtime + listener each [default: cores]
  --latency-ms MS           delay before every response head [default: 0]
  --ttft-ms MS              streams: delay before the first token [default: 0]
  --chunk-delay-ms MS       streams: delay between later tokens [default: 0]
  --completion-tokens N     completion length, capped by max_tokens [default: 16]
  --error-rate F            fraction (0..1) of requests failed with --error-status [default: 0]
  --error-status CODE       status of --error-rate failures [default: 500]
  --token-ttl-secs N        expires_in of OAuth tokens granted at POST …/token [default: 3599]
  --tls-cert PEM            serve HTTPS with this certificate chain (needs --tls-key)
  --tls-key PEM             private key for --tls-cert
  -h, --help                print this help

Prints `mock listening on ADDR:PORT` once every listener is bound.
Per-request headers override the defaults: x-mock-latency-ms, x-mock-ttft-ms,
x-mock-chunk-delay-ms, x-mock-completion-tokens, x-mock-status (+ x-mock-error-message),
x-mock-retry-after, x-mock-fault: reset | hang | reset-once:<id> | close-mid-body.
GET /_stats returns served-request counters; POST /_stats/reset zeroes them.
";

/// Settings of the mock provider.
#[derive(Debug, Clone, PartialEq)]
pub struct MockConfig {
    /// Address (IP or host name) to bind.
    pub host: String,
    /// Port to bind; `0` picks a free one shared by all workers.
    pub port: u16,
    /// Worker threads, each with its own runtime and `SO_REUSEPORT` listener.
    pub workers: usize,
    /// Default delay before the response head.
    pub latency_ms: u64,
    /// Default delay before the first streamed token.
    pub ttft_ms: u64,
    /// Default delay between later streamed tokens.
    pub chunk_delay_ms: u64,
    /// Default completion length.
    pub completion_tokens: u64,
    /// Fraction of requests answered with `error_status`.
    pub error_rate: f64,
    /// Status of randomly failed requests.
    pub error_status: u16,
    /// Lifetime of the OAuth access tokens granted (`POST …/token`).
    pub token_ttl_secs: u64,
    /// PEM certificate chain; with `tls_key`, serve HTTPS.
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for `tls_cert`.
    pub tls_key: Option<PathBuf>,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            host: "127.0.0.1".to_string(),
            port: 9000,
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            latency_ms: 0,
            ttft_ms: 0,
            chunk_delay_ms: 0,
            completion_tokens: 16,
            error_rate: 0.0,
            error_status: 500,
            token_ttl_secs: 3599,
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// What the command line asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// Run with this configuration.
    Run(MockConfig),
    /// Print [`USAGE`] and exit.
    Help,
}

impl MockConfig {
    /// Parses `loadgen mock` flags.
    pub fn from_args(args: &mut Args) -> Result<Parsed, String> {
        let mut c = MockConfig::default();
        while let Some(flag) = args.next_flag()? {
            match flag.as_str() {
                "host" => c.host = args.value(&flag)?,
                "port" => c.port = args.value(&flag)?,
                "workers" => c.workers = args.value(&flag)?,
                "latency-ms" => c.latency_ms = args.value(&flag)?,
                "ttft-ms" => c.ttft_ms = args.value(&flag)?,
                "chunk-delay-ms" => c.chunk_delay_ms = args.value(&flag)?,
                "completion-tokens" => c.completion_tokens = args.value(&flag)?,
                "error-rate" => c.error_rate = args.value(&flag)?,
                "error-status" => c.error_status = args.value(&flag)?,
                "token-ttl-secs" => c.token_ttl_secs = args.value(&flag)?,
                "tls-cert" => c.tls_cert = Some(args.value(&flag)?),
                "tls-key" => c.tls_key = Some(args.value(&flag)?),
                "help" => return Ok(Parsed::Help),
                other => return Err(format!("unknown option --{other}")),
            }
        }
        c.validate()?;
        Ok(Parsed::Run(c))
    }

    /// Checks cross-field constraints.
    pub fn validate(&self) -> Result<(), String> {
        if self.workers == 0 {
            return Err("--workers must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&self.error_rate) {
            return Err("--error-rate must be between 0 and 1".into());
        }
        if !(100..=999).contains(&self.error_status) {
            return Err("--error-status must be an HTTP status code".into());
        }
        if !(1..=86_400).contains(&self.token_ttl_secs) {
            return Err("--token-ttl-secs must be 1 to 86400".into());
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err("--tls-cert and --tls-key must be given together".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Parsed, String> {
        MockConfig::from_args(&mut Args::new(s.split_whitespace().map(String::from)))
    }

    #[test]
    fn parses_all_flags() {
        let Parsed::Run(c) = parse(
            "--host 0.0.0.0 --port 0 --workers 3 --latency-ms 1 --ttft-ms 2 --chunk-delay-ms 3 \
             --completion-tokens 4 --error-rate 0.5 --error-status 503 --tls-cert c.pem --tls-key k.pem",
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(c.host, "0.0.0.0");
        assert_eq!((c.port, c.workers), (0, 3));
        assert_eq!((c.latency_ms, c.ttft_ms, c.chunk_delay_ms), (1, 2, 3));
        assert_eq!(c.completion_tokens, 4);
        assert_eq!((c.error_rate, c.error_status), (0.5, 503));
        assert_eq!(c.tls_key, Some(PathBuf::from("k.pem")));
    }

    #[test]
    fn rejects_bad_input() {
        assert!(parse("--nope 1").is_err());
        assert!(parse("--error-rate 2").is_err());
        assert!(parse("--workers 0").is_err());
        assert!(parse("--tls-cert c.pem").is_err());
        assert_eq!(parse("--help"), Ok(Parsed::Help));
    }
}
