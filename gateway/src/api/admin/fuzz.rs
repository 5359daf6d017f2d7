//! Entry points for the `fuzz` crate: the pure parts of the management API
//! (key bodies with their durations, spend queries with their dates),
//! without a worker or a store.

use super::keys::KeyRequest;
use super::query::Query;
use crate::error::GatewayError;
use chrono::Utc;

/// Parses a `/key/generate`-style body and applies it to a fresh key row as
/// of now, as the handler does before anything is stored.
pub fn key_body(body: &[u8]) -> Result<(), GatewayError> {
    let req = KeyRequest::read(body)?;
    let now = Utc::now();
    let mut row = super::issue::new_record("sk-fuzz", now);
    req.apply(&mut row, now)
}

/// Parses a `/spend/logs` query string into its filter.
pub fn spend_query(raw: &str) -> Result<(), GatewayError> {
    super::spend::filter(Query::parse(raw)?).map(drop)
}
