//! The Redis client every Redis user of the gateway shares (the limiter,
//! budgets, shared cooldowns, the response cache, the replica heartbeat):
//! the RESP codec ([`resp`]), where a connection goes ([`endpoint`]: URL,
//! credentials, TLS), one connection's code ([`conn`]: log-in, Redis's
//! clock, scripts, pipelines, `NOSCRIPT` and `ASKING`) over either
//! runtime's socket ([`monoio_wire`] on the cores, [`tokio_wire`] on the
//! control plane), a Redis Cluster ([`slots`]: key slots and the slot map,
//! [`cluster`]: a connection per master, redirects), and LiteLLM's Redis
//! circuit breaker ([`breaker`]). It knows nothing of what the commands
//! mean.

pub mod breaker;
pub(crate) mod clock;
pub(crate) mod cluster;
pub(crate) mod conn;
pub(crate) mod endpoint;
pub mod error;
pub(crate) mod monoio_wire;
pub mod resp;
pub mod slots;
pub(crate) mod tokio_wire;

pub use breaker::{Breaker, BreakerSettings, BreakerState};
pub(crate) use cluster::ClusterLink;
pub(crate) use conn::{round_trip, Commands, Conn, Plain, Wire};
pub(crate) use endpoint::Endpoint;
pub use error::RemoteError;
pub(crate) use monoio_wire::MonoioWire;
pub use resp::Reply;
pub use slots::key_slot;
pub(crate) use tokio_wire::{control_endpoint, TokioWire};
