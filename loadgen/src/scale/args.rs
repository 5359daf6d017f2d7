//! Flags of `loadgen scale`.

use std::path::PathBuf;
use std::time::Duration;

use crate::cli::Args;
use crate::client::request::FLAGS_USAGE;
use crate::client::RequestSpec;
use crate::gateway_proc;
use crate::units::HumanDuration;

/// The usage text.
pub fn usage() -> String {
    format!(
        "\
Usage: loadgen scale [OPTIONS]

Added latency (p50, p99: through the gateway minus straight to the mock, in
alternating rounds) and gateway CPU per request at one open-loop rate while
the number of virtual keys and the number of deployments grow, each figure
with its ratio to the smallest setting. One gateway per setting.

Keys: N real virtual keys (sha256-hashed tokens in LiteLLM_VerificationToken,
written by one COPY into --database-url; the gateway reads them as it reads
keys /key/generate made). Each setting is measured twice: \"walk\" sends
request i with key i (wrapping at N), continuing across runs, so every key
not used yet is a cache miss read from Postgres (all of them once N exceeds
the requests sent); \"cached\" first sends one request with every key not
used yet (closed loop), so the cache holds all N, waits until the
gateway has written the spend row of every request so far, then walks them
again. Before each series the key and spend tables are vacuumed (as
autovacuum would have after the priming's updates, even where it is off).
Deployments: one model group of N openai/ deployments on the mock
(simple-shuffle, no fallbacks), the master key, no database.

Options:
  --gateway-bin PATH        gateway binary [default: target/release/gateway]
  --gateway-workers N       gateway worker threads [default: 1]
  --database-url URL        an empty Postgres database for the keys (needs psql);
                            without it, --keys must be none
  --keys LIST               key counts, e.g. 10,1k,100k,1M, or none [default: 10,1k,100k,1M]
  --deployments LIST        deployment counts, or none [default: 1,10,100,1000]
  --no-cached               keys: skip the \"cached\" measurement (and its priming)
  --rate R                  requests/s of the measured rounds [default: 1000]
  --duration D              length of each round, per target [default: 5s]
  --rounds N                direct/gateway rounds per setting [default: 2]
  --connections N           client connections [default: 64]
  --no-pin                  do not pin the gateway and the load side to separate CPUs
{FLAGS_USAGE}  --json FILE               also write the report as JSON
  -h, --help                print this help
"
    )
}

/// Settings of one `loadgen scale` session.
#[derive(Debug, Clone)]
pub struct ScaleArgs {
    /// The gateway binary.
    pub gateway_bin: PathBuf,
    /// Gateway worker threads.
    pub gateway_workers: usize,
    /// The scratch database the keys go into.
    pub database_url: Option<String>,
    /// Key counts, ascending.
    pub keys: Vec<usize>,
    /// Deployment counts, ascending.
    pub deployments: Vec<usize>,
    /// Measure keys with every key cached too.
    pub cached: bool,
    /// Rate of the measured rounds.
    pub rate: f64,
    /// Length of each round per target.
    pub duration: Duration,
    /// Rounds per setting.
    pub rounds: usize,
    /// Client connections.
    pub connections: usize,
    /// Pin gateway and load side to separate CPUs.
    pub pin: bool,
    /// Request shape (the model is the generated config's; keys are set
    /// per run).
    pub spec: RequestSpec,
    /// Where to write the JSON report.
    pub json: Option<PathBuf>,
}

/// What the command line asked for.
#[derive(Debug)]
pub enum Parsed {
    /// Measure with these settings.
    Run(Box<ScaleArgs>),
    /// Print the usage text.
    Help,
}

/// A count written as a number with an optional `k` (thousand) or `M`
/// (million) suffix: `10`, `1k`, `100k`, `1M`, `2.5k`.
pub fn parse_count(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (number, factor) = match s.strip_suffix(['k', 'K']) {
        Some(n) => (n, 1e3),
        None => match s.strip_suffix(['m', 'M']) {
            Some(n) => (n, 1e6),
            None => (s, 1.0),
        },
    };
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a count (e.g. 10, 1k, 100k, 1M)"))?;
    let n = n * factor;
    if !(n >= 1.0 && n.fract() == 0.0 && n <= 1e9) {
        return Err(format!("{s:?} is not a whole count from 1 to 1e9"));
    }
    Ok(n as usize)
}

/// A comma-separated list of counts (`none` is the empty list), sorted
/// ascending without duplicates.
pub fn parse_counts(s: &str) -> Result<Vec<usize>, String> {
    if s.trim() == "none" {
        return Ok(Vec::new());
    }
    let mut counts = s
        .split(',')
        .filter(|c| !c.trim().is_empty())
        .map(parse_count)
        .collect::<Result<Vec<_>, _>>()?;
    counts.sort_unstable();
    counts.dedup();
    if counts.is_empty() {
        return Err("an empty list (use none to skip)".into());
    }
    Ok(counts)
}

/// A count as the table shows it: `10`, `1k`, `100k`, `1M`.
pub fn fmt_count(n: usize) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

/// Parses `loadgen scale` flags.
pub fn parse(args: &mut Args) -> Result<Parsed, String> {
    let mut o = ScaleArgs {
        gateway_bin: gateway_proc::default_bin(),
        gateway_workers: 1,
        database_url: None,
        keys: vec![10, 1_000, 100_000, 1_000_000],
        deployments: vec![1, 10, 100, 1_000],
        cached: true,
        rate: 1000.0,
        duration: Duration::from_secs(5),
        rounds: 2,
        connections: 64,
        pin: true,
        spec: RequestSpec::default(),
        json: None,
    };
    while let Some(flag) = args.next_flag()? {
        if flag == "model" {
            return Err(format!(
                "--model: scale always asks for {}, the group its generated config serves",
                gateway_proc::MODEL
            ));
        }
        if o.spec.parse_flag(&flag, args)? {
            continue;
        }
        let list = |args: &mut Args| -> Result<Vec<usize>, String> {
            parse_counts(&args.value::<String>(&flag)?).map_err(|e| format!("--{flag}: {e}"))
        };
        match flag.as_str() {
            "gateway-bin" => o.gateway_bin = args.value(&flag)?,
            "gateway-workers" => o.gateway_workers = args.value(&flag)?,
            "database-url" => o.database_url = Some(args.value(&flag)?),
            "keys" => o.keys = list(args)?,
            "deployments" => o.deployments = list(args)?,
            "no-cached" => o.cached = false,
            "rate" => o.rate = args.value(&flag)?,
            "duration" => o.duration = args.value::<HumanDuration>(&flag)?.0,
            "rounds" => o.rounds = args.value(&flag)?,
            "connections" => o.connections = args.value(&flag)?,
            "no-pin" => o.pin = false,
            "json" => o.json = Some(args.value(&flag)?),
            "help" => return Ok(Parsed::Help),
            other => return Err(format!("unknown option --{other}\n\n{}", usage())),
        }
    }
    if o.rounds == 0 || o.gateway_workers == 0 || o.connections == 0 {
        return Err("--rounds, --gateway-workers and --connections must be at least 1".into());
    }
    if !(o.rate > 0.0 && o.rate.is_finite()) {
        return Err("--rate must be a positive number".into());
    }
    if !o.keys.is_empty() && o.database_url.is_none() {
        return Err(
            "--keys needs --database-url (an empty Postgres database), or --keys none".into(),
        );
    }
    if o.keys.is_empty() && o.deployments.is_empty() {
        return Err("nothing to measure: --keys none and --deployments none".into());
    }
    o.spec.models = vec![gateway_proc::MODEL.to_string()];
    Ok(Parsed::Run(Box::new(o)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(s: &str) -> Result<Parsed, String> {
        parse(&mut Args::new(s.split_whitespace().map(String::from)))
    }

    fn run(s: &str) -> ScaleArgs {
        match parse_str(s).unwrap() {
            Parsed::Run(o) => *o,
            Parsed::Help => panic!("help"),
        }
    }

    #[test]
    fn counts_take_suffixes() {
        assert_eq!(parse_count("10").unwrap(), 10);
        assert_eq!(parse_count("1k").unwrap(), 1_000);
        assert_eq!(parse_count("100K").unwrap(), 100_000);
        assert_eq!(parse_count("1M").unwrap(), 1_000_000);
        assert_eq!(parse_count("2.5k").unwrap(), 2_500);
        for bad in ["", "0", "-1", "1.5", "x", "1g", "2e9"] {
            assert!(parse_count(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_counts("1M,10, 1k,10").unwrap(),
            [10, 1_000, 1_000_000]
        );
        assert_eq!(parse_counts("none").unwrap(), Vec::<usize>::new());
        assert!(parse_counts(",").is_err());
        for n in [10, 1_000, 100_000, 1_000_000, 1_500, 7] {
            assert_eq!(parse_count(&fmt_count(n)).unwrap(), n);
        }
        assert_eq!(fmt_count(100_000), "100k");
        assert_eq!(fmt_count(1_500), "1500");
    }

    #[test]
    fn defaults_and_settings() {
        let o = run("--database-url postgres://x/y");
        assert_eq!(o.keys, [10, 1_000, 100_000, 1_000_000]);
        assert_eq!(o.deployments, [1, 10, 100, 1_000]);
        assert_eq!((o.rate, o.rounds, o.cached, o.pin), (1000.0, 2, true, true));
        assert_eq!(o.duration, Duration::from_secs(5));
        assert_eq!(o.spec.models, [gateway_proc::MODEL]);
        let o = run(
            "--keys none --deployments 1,5 --rate 200 --duration 2s --rounds 3 --no-pin \
             --no-cached --gateway-bin /x/gw --body-size 4k",
        );
        assert!(o.keys.is_empty());
        assert_eq!(o.deployments, [1, 5]);
        assert_eq!(
            (o.rate, o.rounds, o.cached, o.pin),
            (200.0, 3, false, false)
        );
        assert_eq!(o.gateway_bin, PathBuf::from("/x/gw"));
        assert_eq!(o.spec.body_size, 4096);
    }

    #[test]
    fn refuses_what_cannot_run() {
        let err = parse_str("").unwrap_err();
        assert!(err.contains("--database-url"), "{err}");
        let err = parse_str("--keys none --deployments none").unwrap_err();
        assert!(err.contains("nothing to measure"), "{err}");
        let err = parse_str("--keys none --deployments 0").unwrap_err();
        assert!(err.starts_with("--deployments"), "{err}");
        assert!(parse_str("--keys none --rate 0").is_err());
        assert!(parse_str("--keys none --model x")
            .unwrap_err()
            .contains("always asks for"));
        assert!(parse_str("--keys none --nope")
            .unwrap_err()
            .contains("unknown option"));
        assert!(matches!(parse_str("--help"), Ok(Parsed::Help)));
    }
}
