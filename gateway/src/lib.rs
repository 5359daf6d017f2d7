//! A thread-per-core LLM API gateway that speaks the OpenAI API, drop-in
//! compatible with the LiteLLM proxy. See `docs/architecture.md` for the layer table.

pub mod alerts;
pub mod api;
pub mod auth;
pub mod budget;
pub mod cache;
pub mod config;
pub mod control;
pub mod deployment;
pub mod downstream;
pub mod error;
pub mod formats;
pub mod google_auth;
pub mod guardrails;
pub mod health;
pub mod http1;
pub mod inbound;
mod json_skim;
pub mod keyed_hash;
pub mod limits;
pub mod local_signal;
pub mod logging;
pub mod managed;
pub mod metrics;
pub mod models;
pub mod otel;
pub mod panic_guard;
pub mod providers;
pub mod proxy;
pub mod read_through;
pub mod redis;
pub mod reload;
pub mod replicas;
pub mod router;
pub mod server;
pub mod spend;
pub mod sse;
pub mod state;
pub mod store;
pub mod sync;
pub mod telemetry;
pub mod upstream;
pub mod websocket;

/// Version reported in `x-litellm-version` and the readiness probe.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
