//! `loadgen mock`: a mock OpenAI/Anthropic-compatible LLM provider built to
//! never be the bottleneck of a gateway benchmark.
//!
//! Thread-per-core: each worker thread runs its own monoio runtime and its
//! own `SO_REUSEPORT` listener. Responses are synthetic and cheap; behaviour
//! (latency, streaming pace, errors, connection faults) is set by CLI
//! defaults and per-request `x-mock-*` headers.

pub mod api;
pub mod config;
pub mod conn;
pub mod controls;
pub mod faults;
pub mod http;
pub mod listen;
pub mod rng;
pub mod server;
pub mod stats;
pub mod tls;
pub mod tokens;

use std::io::Write;

use crate::cli::Args;
pub use config::MockConfig;
pub use server::{start, MockServer};

/// Entry point of `loadgen mock`: parses flags, starts the server, prints
/// `mock listening on ADDR` and serves until killed.
pub fn main(args: &mut Args) -> Result<(), String> {
    let config = match MockConfig::from_args(args)? {
        config::Parsed::Run(c) => c,
        config::Parsed::Help => {
            print!("{}", config::USAGE);
            return Ok(());
        }
    };
    let server = start(config).map_err(|e| format!("mock: {e}"))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "mock listening on {}", server.addr()).map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())?;
    drop(out);
    server.join();
    Ok(())
}
