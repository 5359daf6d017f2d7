//! LiteLLM's at-rest encryption of model parameters: every string in a
//! `LiteLLM_ProxyModelTable.litellm_params` row is sealed under a key
//! derived from `LITELLM_SALT_KEY` (else the master key), so a database
//! LiteLLM filled serves here and LiteLLM reads what the gateway writes.
//!
//! The formats, as LiteLLM's `encrypt_decrypt_utils.py` writes them:
//! - key: SHA-256 of the salt key's UTF-8 bytes (both algorithms);
//! - default (NaCl SecretBox, XSalsa20-Poly1305): URL-safe base64, padded,
//!   of `nonce(24) || tag(16) || ciphertext`;
//! - `general_settings.encryption_algorithm: aes-256-gcm`: `v2:gcm:` then
//!   URL-safe base64, padded, of `nonce(12) || ciphertext || tag(16)`, no AAD.
//!
//! Reading detects the format; a value that is neither (a row written in
//! plain text) is kept as it is, as LiteLLM does.

use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use base64::Engine;
use crypto_secretbox::aead::{Aead, KeyInit};
use crypto_secretbox::XSalsa20Poly1305;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The marker of AES-256-GCM values.
const GCM_PREFIX: &str = "v2:gcm:";
/// XSalsa20 nonce length.
const SECRETBOX_NONCE: usize = 24;
/// Poly1305 and GCM tag length.
const TAG: usize = 16;

/// The algorithm new values are sealed with
/// (`general_settings.encryption_algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Algorithm {
    /// LiteLLM's default, NaCl SecretBox (`xsalsa20-poly1305`).
    #[default]
    SecretBox,
    /// `aes-256-gcm`, written as `v2:gcm:...`.
    Aes256Gcm,
}

impl Algorithm {
    /// LiteLLM's setting value: `aes-256-gcm` (any case) selects AES-GCM,
    /// anything else the default.
    pub fn from_setting(value: Option<&str>) -> Algorithm {
        match value {
            Some(v) if v.eq_ignore_ascii_case("aes-256-gcm") => Algorithm::Aes256Gcm,
            _ => Algorithm::SecretBox,
        }
    }
}

/// Seals and opens model-parameter strings; without a key (no salt key and
/// no master key) values are stored and read as they are, as LiteLLM does.
#[derive(Clone, Default)]
pub struct ParamCipher {
    key: Option<[u8; 32]>,
    algorithm: Algorithm,
}

impl std::fmt::Debug for ParamCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParamCipher")
            .field("keyed", &self.key.is_some())
            .field("algorithm", &self.algorithm)
            .finish()
    }
}

impl ParamCipher {
    /// A cipher keyed from `salt_key` (`LITELLM_SALT_KEY`, else the master
    /// key) writing with `algorithm`.
    pub fn new(salt_key: Option<&str>, algorithm: Algorithm) -> ParamCipher {
        ParamCipher {
            key: salt_key.map(|k| Sha256::digest(k.as_bytes()).into()),
            algorithm,
        }
    }

    /// `value` sealed (LiteLLM's `encrypt_value_helper`); as it is without
    /// a key.
    pub fn seal(&self, value: &str) -> String {
        let Some(key) = &self.key else {
            return value.to_string();
        };
        match self.algorithm {
            Algorithm::SecretBox => {
                let mut nonce = [0u8; SECRETBOX_NONCE];
                fill_random(&mut nonce);
                let sealed = XSalsa20Poly1305::new(key.into())
                    .encrypt((&nonce).into(), value.as_bytes())
                    .expect("XSalsa20-Poly1305 seals any length a string has");
                let mut out = Vec::with_capacity(SECRETBOX_NONCE + sealed.len());
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&sealed);
                URL_SAFE.encode(out)
            }
            Algorithm::Aes256Gcm => {
                let mut nonce = [0u8; NONCE_LEN];
                fill_random(&mut nonce);
                let mut buf = value.as_bytes().to_vec();
                gcm_key(key)
                    .seal_in_place_append_tag(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::empty(),
                        &mut buf,
                    )
                    .expect("AES-256-GCM seals any length a string has");
                let mut out = Vec::with_capacity(NONCE_LEN + buf.len());
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&buf);
                format!("{GCM_PREFIX}{}", URL_SAFE.encode(out))
            }
        }
    }

    /// `value` opened, or `None` when it is not a value sealed under this
    /// key (plain text, another key, corrupt).
    pub fn open(&self, value: &str) -> Option<String> {
        let key = self.key.as_ref()?;
        let plain = if let Some(rest) = value.strip_prefix(GCM_PREFIX) {
            let mut sealed = URL_SAFE.decode(rest).ok()?;
            if sealed.len() < NONCE_LEN + TAG {
                return None;
            }
            let nonce = Nonce::try_assume_unique_for_key(&sealed[..NONCE_LEN]).ok()?;
            let body = &mut sealed[NONCE_LEN..];
            gcm_key(key)
                .open_in_place(nonce, Aad::empty(), body)
                .ok()?
                .to_vec()
        } else {
            let sealed = URL_SAFE
                .decode(value)
                .or_else(|_| STANDARD.decode(value))
                .ok()?;
            if sealed.len() < SECRETBOX_NONCE + TAG {
                return None;
            }
            let (nonce, body) = sealed.split_at(SECRETBOX_NONCE);
            XSalsa20Poly1305::new(key.into())
                .decrypt(nonce.into(), body)
                .ok()?
        };
        String::from_utf8(plain).ok()
    }

    /// `params` with every string value sealed, for a row to store.
    pub fn seal_params(&self, params: &Map<String, Value>) -> Map<String, Value> {
        params
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Value::String(s) => Value::String(self.seal(s)),
                    other => other.clone(),
                };
                (k.clone(), v)
            })
            .collect()
    }

    /// Opens every string value of a stored row's params in place; values
    /// that do not open are kept (rows written in plain text).
    pub fn open_params(&self, params: &mut Map<String, Value>) {
        if self.key.is_none() {
            return;
        }
        for v in params.values_mut() {
            if let Value::String(s) = v {
                if let Some(plain) = self.open(s) {
                    *s = plain;
                }
            }
        }
    }
}

/// The AES-256-GCM key.
fn gcm_key(key: &[u8; 32]) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key).expect("a 32-byte AES-256 key"))
}

/// Fills a nonce from the OS generator.
fn fill_random(buf: &mut [u8]) {
    getrandom::fill(buf).expect("the OS random generator is available");
}

#[cfg(test)]
mod tests {
    use super::*;

    // Produced by LiteLLM 1.110.2's encrypt_value_helper with the salt key
    // "sk-salt-test": "sk-upstream-secret" under each algorithm.
    const SECRETBOX_VALUE: &str =
        "DazhnzqCHVUg3s-2UKUoREB1rMUz4KE7JCqRfqWOH0agsluMnY2x2WVs4XJW3sJu_42ikWNa6zPRIA==";
    const GCM_VALUE: &str =
        "v2:gcm:CXNalvULMoSI_MLi_BCOvp2MTInBcYdEF117ln8y-Vp5GnjaI4Jj1CrbjKdnGw==";

    #[test]
    fn opens_what_litellm_sealed() {
        let c = ParamCipher::new(Some("sk-salt-test"), Algorithm::SecretBox);
        assert_eq!(
            c.open(SECRETBOX_VALUE).as_deref(),
            Some("sk-upstream-secret")
        );
        assert_eq!(c.open(GCM_VALUE).as_deref(), Some("sk-upstream-secret"));
        let other = ParamCipher::new(Some("sk-other"), Algorithm::SecretBox);
        assert_eq!(other.open(SECRETBOX_VALUE), None);
        assert_eq!(other.open(GCM_VALUE), None);
    }

    #[test]
    fn round_trips_both_algorithms_and_keeps_plain_text() {
        for algorithm in [Algorithm::SecretBox, Algorithm::Aes256Gcm] {
            let c = ParamCipher::new(Some("sk-1234"), algorithm);
            let sealed = c.seal("openai/gpt-4o");
            assert_ne!(sealed, "openai/gpt-4o");
            assert_eq!(
                sealed.starts_with(GCM_PREFIX),
                algorithm == Algorithm::Aes256Gcm
            );
            assert_eq!(c.open(&sealed).as_deref(), Some("openai/gpt-4o"));
            assert_eq!(c.open(""), None);
            assert_eq!(c.open("gpt-4o"), None);
            assert_eq!(c.open("v2:gcm:"), None);
        }
        let mut params = Map::new();
        params.insert("model".into(), "openai/gpt-4o".into());
        params.insert("rpm".into(), 10.into());
        let c = ParamCipher::new(Some("sk-1234"), Algorithm::SecretBox);
        let mut stored = c.seal_params(&params);
        assert_ne!(stored["model"], params["model"]);
        assert_eq!(stored["rpm"], 10);
        c.open_params(&mut stored);
        assert_eq!(stored, params);
        let keyless = ParamCipher::default();
        assert_eq!(keyless.seal_params(&params), params);
    }

    #[test]
    fn algorithm_setting() {
        assert_eq!(
            Algorithm::from_setting(Some("AES-256-GCM")),
            Algorithm::Aes256Gcm
        );
        assert_eq!(
            Algorithm::from_setting(Some("xsalsa20-poly1305")),
            Algorithm::SecretBox
        );
        assert_eq!(Algorithm::from_setting(None), Algorithm::SecretBox);
    }
}
