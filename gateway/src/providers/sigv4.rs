//! AWS Signature Version 4 for a request with a JSON body: the canonical
//! request, the string to sign, the derived signing key and the
//! `Authorization` header, as AWS's published test suite defines them
//! (checked against its vectors below). HMAC-SHA256 is RFC 2104 over
//! `sha2`.

use crate::deployment::Credentials;
use sha2::{Digest, Sha256};

/// What is signed besides the credentials.
#[derive(Debug)]
pub struct SigningInput<'a> {
    /// HTTP method.
    pub method: &'a str,
    /// The path as sent (each segment already percent-encoded once).
    pub path: &'a str,
    /// The canonical query string (sorted, encoded), empty if none.
    pub query: &'a str,
    /// Headers to sign besides `x-amz-date` and `x-amz-security-token`:
    /// lower-case names with their values (`host` among them).
    pub headers: &'a [(&'a str, &'a str)],
    /// The body.
    pub payload: &'a [&'a [u8]],
    /// `YYYYMMDD'T'HHMMSS'Z'`.
    pub amz_date: &'a str,
    /// Region, e.g. `us-east-1`.
    pub region: &'a str,
    /// Service, e.g. `bedrock`.
    pub service: &'a str,
    /// Whether the path is encoded once more in the canonical request, as
    /// every service but S3 requires.
    pub double_encode: bool,
}

/// HMAC-SHA256 (RFC 2104).
pub fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(data);
    let inner = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner);
    outer.finalize().into()
}

/// The signing key of `secret` for one day, region and service.
pub fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> [u8; 32] {
    let k_date = hmac_sha256(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac_sha256(&k_date, region.as_bytes());
    let k_service = hmac_sha256(&k_region, service.as_bytes());
    hmac_sha256(&k_service, b"aws4_request")
}

/// Characters left as they are by AWS's URI encoding.
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A path segment or query component encoded as AWS requires.
pub fn uri_encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, UNRESERVED).to_string()
}

/// `x-amz-date` for the Unix time `secs`.
pub fn amz_date(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0)
        .unwrap_or_default()
        .format("%Y%m%dT%H%M%SZ")
        .to_string()
}

/// The headers to add: `x-amz-date`, `x-amz-security-token` (temporary
/// credentials) and `authorization`.
pub fn sign(creds: &Credentials, input: &SigningInput<'_>) -> Vec<(&'static str, String)> {
    let mut headers: Vec<(String, String)> = input
        .headers
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    headers.push(("x-amz-date".into(), input.amz_date.to_string()));
    if let Some(token) = &creds.session_token {
        headers.push(("x-amz-security-token".into(), token.clone()));
    }
    let signature = signature(creds, input, &mut headers);
    let date = input.amz_date.get(..8).unwrap_or_default();
    let signed: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
    let mut out = vec![("x-amz-date", input.amz_date.to_string())];
    if let Some(token) = &creds.session_token {
        out.push(("x-amz-security-token", token.clone()));
    }
    out.push((
        "authorization",
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{date}/{}/{}/aws4_request, SignedHeaders={}, Signature={signature}",
            creds.access_key_id,
            input.region,
            input.service,
            signed.join(";")
        ),
    ));
    out
}

/// The hex signature of `input` with `headers` (all signed headers,
/// lower-case names, trimmed values; sorted here).
pub fn signature(
    creds: &Credentials,
    input: &SigningInput<'_>,
    headers: &mut [(String, String)],
) -> String {
    headers.sort_by(|a, b| a.0.cmp(&b.0));
    let mut payload = Sha256::new();
    for part in input.payload {
        payload.update(part);
    }
    let path = if input.double_encode {
        input
            .path
            .split('/')
            .map(uri_encode)
            .collect::<Vec<_>>()
            .join("/")
    } else {
        input.path.to_string()
    };
    let mut canonical = format!("{}\n{path}\n{}\n", input.method, input.query);
    for (n, v) in headers.iter() {
        canonical.push_str(n);
        canonical.push(':');
        canonical.push_str(v);
        canonical.push('\n');
    }
    canonical.push('\n');
    let signed: Vec<&str> = headers.iter().map(|(n, _)| n.as_str()).collect();
    canonical.push_str(&signed.join(";"));
    canonical.push('\n');
    canonical.push_str(&hex::encode(payload.finalize()));
    let date = input.amz_date.get(..8).unwrap_or_default();
    let scope = format!("{date}/{}/{}/aws4_request", input.region, input.service);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{scope}\n{}",
        input.amz_date,
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let key = signing_key(&creds.secret_access_key, date, input.region, input.service);
    hex::encode(hmac_sha256(&key, to_sign.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> Credentials {
        Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        }
    }

    fn input<'a>(method: &'a str, headers: &'a [(&'a str, &'a str)]) -> SigningInput<'a> {
        SigningInput {
            method,
            path: "/",
            query: "",
            headers,
            payload: &[],
            amz_date: "20150830T123600Z",
            region: "us-east-1",
            service: "service",
            double_encode: true,
        }
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        assert_eq!(
            hex::encode(hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6: a key longer than the block.
        assert_eq!(
            hex::encode(hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn signing_key_matches_aws_docs() {
        let key = signing_key(
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            "20120215",
            "us-east-1",
            "iam",
        );
        assert_eq!(
            hex::encode(key),
            "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"
        );
    }

    #[test]
    fn vanilla_vectors_of_the_aws_test_suite() {
        let host = [("host", "example.amazonaws.com")];
        let get = sign(&example(), &input("GET", &host));
        assert_eq!(get[0], ("x-amz-date", "20150830T123600Z".to_string()));
        assert_eq!(
            get[1].1,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
        let post = sign(&example(), &input("POST", &host));
        assert!(post[1].1.ends_with(
            "Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"
        ));
    }

    #[test]
    fn session_tokens_are_signed_and_sent() {
        let mut creds = example();
        creds.session_token = Some("tok".into());
        let out = sign(&creds, &input("POST", &[("host", "h")]));
        assert_eq!(out[1], ("x-amz-security-token", "tok".to_string()));
        assert!(out[2]
            .1
            .contains("SignedHeaders=host;x-amz-date;x-amz-security-token,"));
        assert!(!format!("{creds:?}").contains("EXAMPLEKEY"));
    }

    #[test]
    fn paths_are_encoded_twice_for_signing() {
        assert_eq!(uri_encode("a.b:0/c d"), "a.b%3A0%2Fc%20d");
        assert_eq!(amz_date(1_440_938_160), "20150830T123600Z");
    }
}
