//! `loadgen fleet`: several gateway replicas behind one load, checking that
//! limits and spend hold across the fleet. Only its arguments exist until
//! replicas share state.

use crate::cli::Args;
use crate::missing::{self, Feature};
use crate::units::HumanDuration;

/// Usage text of `loadgen fleet`.
pub const USAGE: &str = "\
Usage: loadgen fleet [OPTIONS]

Starts several gateway replicas sharing Redis and Postgres, spreads load
over them and checks that limits and spend hold fleet-wide.

Options:
  --gateway-bin PATH        gateway binary [default: target/release/gateway]
  --replicas N              gateway processes [default: 2]
  --keys N                  virtual keys to spread the load over [default: 10]
  --rate R                  requests/s over all replicas [default: 1000]
  --duration D              length of the run [default: 60s]
  --json FILE               also write the report as JSON
  -h, --help                print this help

Needs replicas that share state; exits with status 2 and names the missing
feature until then.
";

/// Entry point of `loadgen fleet`.
pub fn main(args: &mut Args) -> Result<(), String> {
    let mut replicas: usize = 2;
    let mut keys: u64 = 10;
    let mut rate: f64 = 1000.0;
    while let Some(flag) = args.next_flag()? {
        match flag.as_str() {
            "replicas" => replicas = args.value(&flag)?,
            "keys" => keys = args.value(&flag)?,
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
    if replicas < 2 {
        return Err("--replicas must be at least 2 (one replica is `loadgen overhead`)".into());
    }
    if keys == 0 || rate <= 0.0 {
        return Err("--keys and --rate must be positive".into());
    }
    missing::require("fleet", Feature::SharedFleetState)?;
    Err("fleet is not implemented yet".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(s: &str) -> Result<(), String> {
        main(&mut Args::new(s.split_whitespace().map(String::from)))
    }

    #[test]
    fn parses_then_names_the_missing_feature() {
        let err = run("--replicas 3 --rate 100 --duration 5s").unwrap_err();
        assert!(err.starts_with("fleet needs replicas sharing"), "{err}");
        assert!(run("--replicas 1").unwrap_err().contains("at least 2"));
        assert!(run("--bogus").unwrap_err().contains("--bogus"));
    }
}
