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
  --no-pin                  do not pin the gateway and the load side to separate CPUs
  --json FILE               also write the report (with the series) as JSON
  -h, --help                print this help

Each connection streams one response after another until --duration ends;
streams in flight then finish.
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
            "json" => s.json = Some(args.value(&flag)?),
            "help" => return Ok(Parsed::Help),
            other => return Err(format!("unknown option --{other}\n\n{USAGE}")),
        }
    }
    if s.streams == 0 || s.tokens == 0 || s.gateway_workers == 0 {
        return Err("--streams, --tokens and --gateway-workers must be at least 1".into());
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
}
