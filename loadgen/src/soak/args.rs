//! `loadgen soak` flags.

use std::path::PathBuf;
use std::time::Duration;

use crate::cli::Args;
use crate::gateway_proc;
use crate::units::{ByteSize, HumanDuration};

/// Usage text of `loadgen soak`.
pub const USAGE: &str = "\
Usage: loadgen soak [OPTIONS]

Holds thousands of concurrent long-lived streams through the gateway (the
in-process mock paces tokens) and samples the gateway's RSS, CPU and open
file descriptors every second.

Options:
  --gateway-bin PATH        gateway binary [default: target/release/gateway]
  --gateway-workers N       gateway --workers [default: 1]
  --streams N               concurrent streams, one connection each [default: 2000]
  --token-interval-ms MS    mock delay before each token [default: 500]
  --tokens N                tokens per stream [default: 20]
  --duration D              open new streams for this long [default: 60s]
  --ramp D                  open the streams evenly over this period [default: 5s]
  --body-size SIZE          request body size [default: 1k]
  --plain N                 also N connections of non-streaming requests, one
                            after another (mixed traffic) [default: 0]
  --database-url URL        keys and spend in this (empty) Postgres database; at
                            the end every 2xx must have its success spend row
  --redis                   limits in a private redis-server: the load uses a
                            virtual key with rpm/tpm limits, so every request is
                            admitted through Redis
  --redis-restart-at D      kill and restart that redis-server this far into the
                            run [default: half of --duration]
  --key-churn-every D       create a key, use it, delete it (and check it is
                            refused) this often while the load runs
  --no-pin                  do not pin the gateway and the load side to separate CPUs
  --json FILE               also write the report (with the series) as JSON
  -h, --help                print this help

Each connection streams one response after another until --duration ends;
streams in flight then finish. The report gives the slope of RSS, open file
descriptors and CPU per request over the run after the ramp (flat is the
goal), and with --database-url the spend rows lost (zero is the goal).

The issue's soak, about 35 minutes:
  loadgen soak --duration 30m --streams 2000 --plain 50 --redis \
    --key-churn-every 5s --database-url postgres://postgres@127.0.0.1/soak
";

/// Settings of one soak.
#[derive(Debug, Clone)]
pub struct SoakArgs {
    /// The gateway binary.
    pub gateway_bin: PathBuf,
    /// Gateway worker threads.
    pub gateway_workers: usize,
    /// Concurrent streams.
    pub streams: usize,
    /// Delay before each token.
    pub token_interval: Duration,
    /// Tokens per stream.
    pub tokens: u64,
    /// How long new streams are opened.
    pub duration: Duration,
    /// Period over which the streams start.
    pub ramp: Duration,
    /// Request body size.
    pub body_size: usize,
    /// Pin the gateway and the load side to separate CPUs.
    pub pin: bool,
    /// Where to write the JSON report.
    pub json: Option<PathBuf>,
    /// Non-streaming connections beside the streams.
    pub plain: usize,
    /// Postgres for keys and spend.
    pub database_url: Option<String>,
    /// Limits in a private redis-server.
    pub redis: bool,
    /// When that server is killed and restarted; `None`: half the duration.
    pub redis_restart_at: Option<Duration>,
    /// How often a key is created, used and deleted.
    pub key_churn: Option<Duration>,
}

impl SoakArgs {
    /// When the private redis-server is restarted, if there is one.
    pub fn redis_restart(&self) -> Option<Duration> {
        self.redis
            .then(|| self.redis_restart_at.unwrap_or(self.duration / 2))
    }
}

/// What the command line asked for.
#[derive(Debug)]
pub enum Parsed {
    /// Soak with these settings.
    Run(Box<SoakArgs>),
    /// Print the usage text.
    Help,
}

/// Parses `loadgen soak` flags.
pub fn parse(args: &mut Args) -> Result<Parsed, String> {
    let mut s = SoakArgs {
        gateway_bin: gateway_proc::default_bin(),
        gateway_workers: 1,
        streams: 2000,
        token_interval: Duration::from_millis(500),
        tokens: 20,
        duration: Duration::from_secs(60),
        ramp: Duration::from_secs(5),
        body_size: 1024,
        pin: true,
        json: None,
        plain: 0,
        database_url: None,
        redis: false,
        redis_restart_at: None,
        key_churn: None,
    };
    while let Some(flag) = args.next_flag()? {
        match flag.as_str() {
            "gateway-bin" => s.gateway_bin = args.value(&flag)?,
            "gateway-workers" => s.gateway_workers = args.value(&flag)?,
            "streams" => s.streams = args.value(&flag)?,
            "token-interval-ms" => s.token_interval = Duration::from_millis(args.value(&flag)?),
            "tokens" => s.tokens = args.value(&flag)?,
            "duration" => s.duration = args.value::<HumanDuration>(&flag)?.0,
            "ramp" => s.ramp = args.value::<HumanDuration>(&flag)?.0,
            "body-size" => s.body_size = args.value::<ByteSize>(&flag)?.0,
            "no-pin" => s.pin = false,
            "plain" => s.plain = args.value(&flag)?,
            "database-url" => s.database_url = Some(args.value(&flag)?),
            "redis" => s.redis = true,
            "redis-restart-at" => s.redis_restart_at = Some(args.value::<HumanDuration>(&flag)?.0),
            "key-churn-every" => s.key_churn = Some(args.value::<HumanDuration>(&flag)?.0),
            "json" => s.json = Some(args.value(&flag)?),
            "help" => return Ok(Parsed::Help),
            other => return Err(format!("unknown option --{other}\n\n{USAGE}")),
        }
    }
    if s.streams == 0 || s.tokens == 0 || s.gateway_workers == 0 {
        return Err("--streams, --tokens and --gateway-workers must be at least 1".into());
    }
    if s.key_churn.is_some_and(|d| d.is_zero()) {
        return Err("--key-churn-every must be more than 0".into());
    }
    if s.redis_restart_at.is_some() && !s.redis {
        return Err("--redis-restart-at needs --redis".into());
    }
    Ok(Parsed::Run(Box::new(s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_settings() {
        let mut args = Args::new(
            "--streams 10 --token-interval-ms 50 --tokens 3 --duration 5s --ramp 1s --no-pin"
                .split_whitespace()
                .map(String::from),
        );
        let Parsed::Run(s) = parse(&mut args).unwrap() else {
            panic!("help")
        };
        assert_eq!((s.streams, s.tokens, s.pin), (10, 3, false));
        assert_eq!(s.token_interval, Duration::from_millis(50));
        assert_eq!(
            (s.duration, s.ramp),
            (Duration::from_secs(5), Duration::from_secs(1))
        );
        let mut bad = Args::new(["--streams".to_string(), "0".to_string()]);
        assert!(parse(&mut bad).is_err());
    }

    #[test]
    fn parses_the_fault_and_churn_options() {
        let mut args = Args::new(
            "--duration 10m --plain 5 --redis --key-churn-every 2s --database-url postgres://h/db"
                .split_whitespace()
                .map(String::from),
        );
        let Parsed::Run(s) = parse(&mut args).unwrap() else {
            panic!("help")
        };
        assert_eq!(s.plain, 5);
        assert_eq!(s.redis_restart(), Some(Duration::from_secs(300)));
        assert_eq!(s.key_churn, Some(Duration::from_secs(2)));
        assert_eq!(s.database_url.as_deref(), Some("postgres://h/db"));
        let mut bad = Args::new("--redis-restart-at 5s".split_whitespace().map(String::from));
        assert!(parse(&mut bad).is_err(), "a restart needs --redis");
    }
}
