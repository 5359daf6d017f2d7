//! `loadgen overshoot`: how far concurrent traffic gets past per-key
//! rpm/tpm/budget limits. Only its arguments exist until the gateway has
//! the limits to measure.

use crate::cli::Args;
use crate::missing::{self, Feature};
use crate::units::HumanDuration;

/// Usage text of `loadgen overshoot`.
pub const USAGE: &str = "\
Usage: loadgen overshoot [OPTIONS]

Measures how far concurrent requests overshoot per-key limits: creates
virtual keys with limits, sends more than they allow, and compares what the
mock served with what the limits permit.

Options:
  --gateway-bin PATH        gateway binary [default: target/release/gateway]
  --keys N                  virtual keys to create [default: 10]
  --rpm N                   requests-per-minute limit per key
  --tpm N                   tokens-per-minute limit per key
  --budget USD              budget per key
  --rate R                  requests/s over all keys [default: 1000]
  --duration D              length of the run [default: 60s]
  --json FILE               also write the report as JSON
  -h, --help                print this help

Needs per-key limits and virtual keys in the gateway; exits with status 2
and names the missing feature until then.
";

/// Entry point of `loadgen overshoot`.
pub fn main(args: &mut Args) -> Result<(), String> {
    let mut keys: u64 = 10;
    let mut limits = 0;
    let mut rate: f64 = 1000.0;
    while let Some(flag) = args.next_flag()? {
        match flag.as_str() {
            "keys" => keys = args.value(&flag)?,
            "rpm" | "tpm" => {
                args.value::<u64>(&flag)?;
                limits += 1;
            }
            "budget" => {
                args.value::<f64>(&flag)?;
                limits += 1;
            }
            "rate" => rate = args.value(&flag)?,
            "duration" => {
                args.value::<HumanDuration>(&flag)?;
            }
            "gateway-bin" | "json" => {
                args.value::<String>(&flag)?;
            }
            "help" => {
                print!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown option --{other}\n\n{USAGE}")),
        }
    }
    if keys == 0 || rate <= 0.0 {
        return Err("--keys and --rate must be positive".into());
    }
    if limits == 0 {
        return Err("give at least one of --rpm, --tpm or --budget".into());
    }
    missing::require("overshoot", Feature::KeyLimits)?;
    missing::require("overshoot", Feature::VirtualKeys)?;
    Err("overshoot is not implemented yet".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(s: &str) -> Result<(), String> {
        main(&mut Args::new(s.split_whitespace().map(String::from)))
    }

    #[test]
    fn parses_then_names_the_missing_feature() {
        let err = run("--keys 5 --rpm 60 --rate 200 --duration 10s").unwrap_err();
        assert!(
            err.starts_with("overshoot needs per-key rpm/tpm/budget limits (issue: rate limiting)"),
            "{err}"
        );
        assert!(run("--rpm x").unwrap_err().contains("--rpm"));
        assert!(run("--keys 5").unwrap_err().contains("--budget"));
    }
}
