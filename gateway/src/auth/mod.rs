//! Who is calling: the credential from the request headers, checked against
//! the master key. Virtual keys plug in behind [`Authenticator::authenticate`].

use crate::error::GatewayError;
use crate::http1::RequestHead;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// An authenticated caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Principal {
    /// The holder of `general_settings.master_key`.
    Master,
    /// No master key is configured: the gateway is open (LiteLLM's behaviour).
    Anonymous,
}

/// Checks credentials; holds only the sha256 of the master key.
#[derive(Debug)]
pub struct Authenticator {
    master_key_hash: Option<[u8; 32]>,
}

impl Authenticator {
    /// An authenticator for `master_key`; `None` leaves the gateway open.
    pub fn new(master_key: Option<&str>) -> Self {
        Authenticator {
            master_key_hash: master_key.map(hash),
        }
    }

    /// Authenticates the request's credential.
    pub fn authenticate(&self, head: &RequestHead) -> Result<Principal, GatewayError> {
        let Some(expected) = &self.master_key_hash else {
            return Ok(Principal::Anonymous);
        };
        let key = credential(head).ok_or(GatewayError::MissingKey)?;
        if bool::from(hash(key).ct_eq(expected)) {
            Ok(Principal::Master)
        } else {
            Err(GatewayError::InvalidKey(abbreviate(key)))
        }
    }
}

/// The key from `Authorization: Bearer`, `api-key` or `x-api-key`, as LiteLLM
/// accepts them.
fn credential(head: &RequestHead) -> Option<&str> {
    if let Some(v) = head.header("authorization") {
        let v = v.trim();
        let key = v
            .get(..7)
            .filter(|p| p.eq_ignore_ascii_case("bearer "))
            .map_or(v, |_| v[7..].trim());
        if !key.is_empty() {
            return Some(key);
        }
    }
    ["api-key", "x-api-key"]
        .iter()
        .filter_map(|h| head.header(h))
        .map(str::trim)
        .find(|k| !k.is_empty())
}

fn hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Enough of a key to recognise it, never enough to use it.
fn abbreviate(key: &str) -> String {
    let tail: String = key
        .chars()
        .rev()
        .take(4)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    if key.chars().count() <= 8 {
        "***".to_string()
    } else {
        format!("...{tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::parse_request_head;

    fn head(extra: &str) -> RequestHead {
        let raw = format!("POST / HTTP/1.1\r\n{extra}\r\n");
        parse_request_head(raw.as_bytes(), 100, 65536).unwrap().0
    }

    #[test]
    fn accepts_each_header_and_refuses_others() {
        let auth = Authenticator::new(Some("sk-master-1234"));
        for h in [
            "Authorization: Bearer sk-master-1234\r\n",
            "api-key: sk-master-1234\r\n",
            "x-api-key: sk-master-1234\r\n",
        ] {
            assert_eq!(
                auth.authenticate(&head(h)).unwrap(),
                Principal::Master,
                "{h}"
            );
        }
        assert!(matches!(
            auth.authenticate(&head("")),
            Err(GatewayError::MissingKey)
        ));
        let err = auth
            .authenticate(&head("Authorization: Bearer sk-wrong-key-9999\r\n"))
            .unwrap_err();
        assert!(err.to_string().ends_with("...9999") && !err.to_string().contains("wrong"));
        assert_eq!(
            Authenticator::new(None).authenticate(&head("")).unwrap(),
            Principal::Anonymous
        );
    }
}
