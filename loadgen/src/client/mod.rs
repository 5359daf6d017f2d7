//! A minimal HTTP/1.1 client for load generation: where to send
//! ([`target`]), what to send ([`request`]) and one keep-alive connection
//! that times each exchange ([`conn`]). Response parsing reuses the
//! gateway's own wire-format code (`gateway::http1`).

pub mod conn;
pub mod request;
pub mod target;

pub use conn::{Connection, Failure, Response};
pub use request::{RequestMix, RequestSpec};
pub use target::Target;
