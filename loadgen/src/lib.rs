//! Load generation and mock upstreams for benchmarking the gateway.
//!
//! Subcommands live in their own modules; [`mock`] is the mock LLM provider.
#![warn(missing_docs)]

pub mod cli;
pub mod mock;
pub mod rt;
