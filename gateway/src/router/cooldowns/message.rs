//! What replicas say to each other about cooldowns, and the Redis keys.
//!
//! A cooldown is announced on [`CHANNEL`] as a small JSON object naming the
//! replica that started it (so it ignores its own message), the deployment
//! and the end in unix milliseconds. The same end is kept in
//! `deployment:{id}:cooldown` with `PX` = the time left, for a replica that
//! starts later or missed the message; the allowed-fails counter is
//! `deployment:{id}:allowed_fails`. These are LiteLLM's key names.

use serde::{Deserialize, Serialize};

/// The pub/sub channel of cooldown announcements.
pub const CHANNEL: &str = "gateway:cooldowns";

/// A cooldown announced by one replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Announcement {
    /// The replica that started it.
    pub replica: String,
    /// The deployment's id.
    pub deployment: String,
    /// When it ends, in unix milliseconds.
    pub until_unix_ms: u64,
}

/// A message on [`CHANNEL`] that is not an [`Announcement`].
#[derive(Debug, thiserror::Error)]
#[error("not a cooldown announcement: {0}")]
pub struct MessageError(#[from] serde_json::Error);

impl Announcement {
    /// The message's bytes.
    pub fn encode(&self) -> Vec<u8> {
        // Three plain fields: serializing cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a message.
    pub fn decode(bytes: &[u8]) -> Result<Announcement, MessageError> {
        Ok(serde_json::from_slice(bytes)?)
    }
}

/// The key holding the cooldown end of deployment `id`.
pub fn cooldown_key(id: &str) -> String {
    format!("deployment:{id}:cooldown")
}

/// The key counting the failures of deployment `id` (fleet-wide).
pub fn allowed_fails_key(id: &str) -> String {
    format!("deployment:{id}:allowed_fails")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_round_trip() {
        let a = Announcement {
            replica: "r-1".into(),
            deployment: "gpt 4o \"eu\"/1".into(),
            until_unix_ms: 1_780_000_000_123,
        };
        let bytes = a.encode();
        assert_eq!(Announcement::decode(&bytes).unwrap(), a);
        let text = String::from_utf8(bytes).unwrap();
        assert_eq!(
            text,
            r#"{"replica":"r-1","deployment":"gpt 4o \"eu\"/1","until_unix_ms":1780000000123}"#
        );
    }

    #[test]
    fn bad_messages_are_errors_not_panics() {
        for bad in [
            &b""[..],
            b"hello",
            b"{\"replica\":\"r\"}",
            b"{\"replica\":\"r\",\"deployment\":\"d\",\"until_unix_ms\":-5}",
            b"\xff\xfe",
        ] {
            assert!(Announcement::decode(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn keys_are_litellms() {
        assert_eq!(cooldown_key("abc"), "deployment:abc:cooldown");
        assert_eq!(allowed_fails_key("abc"), "deployment:abc:allowed_fails");
    }
}
