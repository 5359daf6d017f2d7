//! `loadgen run` flags.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cli::Args;
use crate::client::request::FLAGS_USAGE;
use crate::client::{RequestSpec, Target};
use crate::load::{LoadConfig, Mode};
use crate::units::HumanDuration;

/// Usage text of `loadgen run`.
pub fn usage() -> String {
    format!(
        "\
Usage: loadgen run --url http://HOST:PORT[/PATH] [OPTIONS]

Sends chat-completion requests over keep-alive HTTP/1.1 connections and
reports status counts and latency percentiles (HDR histograms).

Options:
  --url URL                 target; the path defaults to /v1/chat/completions
  --key KEY                 API key (Authorization: Bearer)
  --keys-file FILE          API keys, one a line, used in turn
  --rate R                  open loop: R requests/s on a fixed schedule, latency
                            counted from each request's intended send time
  --connections N           connections; without --rate, closed loop: each
                            sends its next request when the last ends [default: 64]
  --workers N               client threads, one runtime each [default: 1]
  --duration D              stop sending after D (10s, 500ms, 2m) [default: 10s
                            unless --requests is given]
  --requests N              stop sending after N requests
  --timeout D               fail a request without a complete response after D [default: 60s]
  --model M1,M2             model names, used in turn [default: gpt-4o]
{FLAGS_USAGE}  --json FILE               also write the report as JSON
  -h, --help                print this help
"
    )
}

/// What `loadgen run` was asked to do.
#[derive(Debug)]
pub enum Parsed {
    /// Run this load and report.
    Run {
        /// The load.
        config: Box<LoadConfig>,
        /// Where to write the JSON report.
        json: Option<PathBuf>,
    },
    /// Print the usage text.
    Help,
}

/// Parses `loadgen run` flags.
pub fn parse(args: &mut Args) -> Result<Parsed, String> {
    let mut url = None;
    let mut spec = RequestSpec::default();
    let mut rate = None;
    let mut connections = 64;
    let mut workers = 1;
    let mut duration = None;
    let mut requests = None;
    let mut timeout = Duration::from_secs(60);
    let mut json = None;
    while let Some(flag) = args.next_flag()? {
        if spec.parse_flag(&flag, args)? {
            continue;
        }
        match flag.as_str() {
            "url" => url = Some(args.value::<String>(&flag)?),
            "key" => spec.keys.push(args.value(&flag)?),
            "keys-file" => spec.keys.extend(read_keys(&args.value::<PathBuf>(&flag)?)?),
            "rate" => rate = Some(args.value::<f64>(&flag)?),
            "connections" => connections = args.value(&flag)?,
            "workers" => workers = args.value(&flag)?,
            "duration" => duration = Some(args.value::<HumanDuration>(&flag)?.0),
            "requests" => requests = Some(args.value(&flag)?),
            "timeout" => timeout = args.value::<HumanDuration>(&flag)?.0,
            "json" => json = Some(args.value(&flag)?),
            "help" => return Ok(Parsed::Help),
            other => return Err(format!("unknown option --{other}\n\n{}", usage())),
        }
    }
    let url = url.ok_or_else(|| format!("--url is required\n\n{}", usage()))?;
    if duration.is_none() && requests.is_none() {
        duration = Some(Duration::from_secs(10));
    }
    let config = LoadConfig {
        target: Target::parse(&url)?,
        spec,
        mode: rate.map_or(Mode::Closed, |rate| Mode::Open { rate }),
        connections,
        workers,
        duration,
        requests,
        timeout,
        ramp: Duration::ZERO,
    };
    config.validate()?;
    Ok(Parsed::Run {
        config: Box::new(config),
        json,
    })
}

/// Reads API keys, one a line; blank lines and `#` comments are skipped.
pub fn read_keys(path: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--keys-file {}: {e}", path.display()))?;
    let keys: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    if keys.is_empty() {
        return Err(format!("--keys-file {}: no keys in it", path.display()));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<Parsed, String> {
        parse(&mut Args::new(s.split_whitespace().map(String::from)))
    }

    fn config(s: &str) -> LoadConfig {
        match parse_str(s).unwrap() {
            Parsed::Run { config, .. } => *config,
            Parsed::Help => panic!("help"),
        }
    }

    #[test]
    fn open_and_closed_loop() {
        let c = config("--url http://127.0.0.1:9 --rate 500 --duration 2s --key k --stream");
        assert_eq!(c.mode, Mode::Open { rate: 500.0 });
        assert_eq!(c.duration, Some(Duration::from_secs(2)));
        assert_eq!(
            (c.spec.keys.as_slice(), c.spec.stream),
            (&["k".to_string()][..], true)
        );
        let c = config("--url http://127.0.0.1:9 --connections 8 --requests 100");
        assert_eq!((c.mode, c.connections), (Mode::Closed, 8));
        assert_eq!((c.duration, c.requests), (None, Some(100)));
        let c = config("--url http://127.0.0.1:9");
        assert_eq!(c.duration, Some(Duration::from_secs(10)), "ends by itself");
    }

    #[test]
    fn errors_are_clear() {
        assert!(parse_str("--rate 5")
            .unwrap_err()
            .starts_with("--url is required"));
        assert!(parse_str("--url http://127.0.0.1:9 --bogus")
            .unwrap_err()
            .contains("--bogus"));
        let err = parse_str("--url http://127.0.0.1:9 --keys-file /nonexistent").unwrap_err();
        assert!(err.starts_with("--keys-file /nonexistent"), "{err}");
        assert!(matches!(parse_str("--help"), Ok(Parsed::Help)));
    }

    #[test]
    fn keys_file_skips_blanks_and_comments() {
        let path = std::env::temp_dir().join(format!("loadgen-keys-{}", std::process::id()));
        std::fs::write(&path, "# keys\nsk-1\n\n  sk-2  \n").unwrap();
        assert_eq!(read_keys(&path).unwrap(), ["sk-1", "sk-2"]);
        std::fs::remove_file(path).unwrap();
    }
}
