//! `loadgen`: load generator and mock LLM provider for the gateway.

use std::process::ExitCode;

use loadgen::cli::Args;

const USAGE: &str = "\
Usage: loadgen <COMMAND> [OPTIONS]

Commands:
  mock       run a mock OpenAI/Anthropic-compatible LLM provider
  run        send load to a URL and report latency percentiles
  overhead   latency, max rate, CPU and memory the gateway adds over the mock
  scale      added latency and CPU from 10 to 1M keys and from 1 to 1,000 deployments
  soak       thousands of long-lived streams through the gateway, sampled each second
  overshoot  how far a concurrent burst overshoots a per-key budget
  fleet      how fast a change on one replica reaches the others (Postgres, Redis cooldowns)

Run `loadgen <COMMAND> --help` for the options of a command.
";

fn main() -> ExitCode {
    let mut args = Args::new(std::env::args().skip(1));
    let result = match args.next_word().as_deref() {
        Some("mock") => loadgen::mock::main(&mut args),
        Some("run") => loadgen::run::main(&mut args),
        Some("overhead") => loadgen::overhead::main(&mut args),
        Some("scale") => loadgen::scale::main(&mut args),
        Some("soak") => loadgen::soak::main(&mut args),
        Some("overshoot") => loadgen::overshoot::main(&mut args),
        Some("fleet") => loadgen::fleet::main(&mut args),
        Some("-h" | "--help" | "help") => {
            print!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(format!("unknown command {other:?}\n\n{USAGE}")),
        None => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", e.trim_end());
            ExitCode::from(2)
        }
    }
}
