//! Load generation and mock upstreams for benchmarking the gateway.
//!
//! Subcommands live in their own modules; [`mock`] is the mock LLM provider,
//! [`load`] the engine the measuring subcommands share.
#![warn(missing_docs)]

pub mod affinity;
pub mod cli;
pub mod client;
pub mod command_stats;
pub mod fdlimit;
pub mod fleet;
pub mod fleet_cooldowns;
pub mod gateway_proc;
pub mod harness;
pub mod latency;
pub mod limit_overshoot;
pub mod load;
pub mod mock;
pub mod nginx_proc;
pub mod output;
pub mod overhead;
pub mod overshoot;
pub mod postgres_procs;
pub mod procfs;
pub mod redis_proc;
pub mod redis_target;
pub mod rt;
pub mod run;
pub mod scale;
pub mod schedule;
pub mod soak;
pub mod units;
