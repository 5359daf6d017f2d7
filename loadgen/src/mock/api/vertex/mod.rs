//! Google's OAuth token endpoint and Vertex AI's checks, as the real
//! services make them.
//!
//! `POST …/token` takes a service-account JWT assertion
//! (`grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`), checks its
//! RS256 signature against the public key of the one account the mock
//! knows ([`SERVICE_ACCOUNT`], matched by `kid` and `iss`), its `aud` (this
//! endpoint's own URL), `scope` (cloud-platform) and times (`iat` not in
//! the future, `exp` not past and at most an hour after `iat`), and answers
//! `{"access_token","expires_in","token_type":"Bearer"}` or Google's
//! `{"error","error_description"}`. Tokens carry their expiry and a MAC
//! under a per-process secret, so every worker can check them.
//!
//! Vertex paths (`/v1/projects/{p}/locations/{l}/publishers/{google,anthropic}/models/{m}:…`)
//! need `Authorization: Bearer <token>` with an unexpired token of this
//! mock (else 401 `UNAUTHENTICATED`) and the account's project (else 403
//! `PERMISSION_DENIED`). Anthropic's models (`:rawPredict`,
//! `:streamRawPredict`) take a Messages body without `model` and with
//! `anthropic_version: "vertex-2023-10-16"`, streamed exactly when the
//! method is `streamRawPredict`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::hmac;
use ring::signature::{RsaKeyPair, UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256};
use serde_json::{json, Value};
use std::sync::OnceLock;

use super::{to_json, Ctx, Reply};
use crate::mock::http::Request;

/// The service-account key file of the account the mock knows.
pub const SERVICE_ACCOUNT: &str = include_str!("service_account.json");
/// A key file of the same account with a private key the mock does not
/// know: its assertions fail the signature check.
pub const UNKNOWN_KEY: &str = include_str!("unknown_key.json");
/// User credentials (`authorized_user`) the mock knows: their refresh
/// token is exchanged with `grant_type=refresh_token`.
pub const AUTHORIZED_USER: &str = include_str!("authorized_user.json");
/// The scope Vertex AI needs.
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

struct Known {
    email: String,
    key_id: String,
    project: String,
    public_key: Vec<u8>,
    mac: hmac::Key,
}

fn known() -> &'static Known {
    static KNOWN: OnceLock<Known> = OnceLock::new();
    KNOWN.get_or_init(|| {
        let v: Value = serde_json::from_str(SERVICE_ACCOUNT).expect("the mock's key file is JSON");
        let pem = v["private_key"].as_str().expect("the key file has a key");
        let der = rustls_pemfile::private_key(&mut pem.as_bytes())
            .ok()
            .flatten()
            .expect("the key file's key is PEM");
        let pair = RsaKeyPair::from_pkcs8(der.secret_der()).expect("the key is RSA PKCS#8");
        let rng = ring::rand::SystemRandom::new();
        Known {
            email: v["client_email"].as_str().unwrap_or_default().to_string(),
            key_id: v["private_key_id"].as_str().unwrap_or_default().to_string(),
            project: v["project_id"].as_str().unwrap_or_default().to_string(),
            public_key: pair.public().as_ref().to_vec(),
            mac: hmac::Key::generate(hmac::HMAC_SHA256, &rng).expect("random MAC key"),
        }
    })
}

/// Google's OAuth error answer.
fn oauth_error(error: &str, description: &str) -> Reply {
    Reply::json(
        400,
        to_json(&json!({"error": error, "error_description": description})),
    )
}

fn decode_json(part: &str) -> Option<Value> {
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).ok()?).ok()
}

/// `application/x-www-form-urlencoded` field `name` of `body`, decoded.
fn form_field(body: &[u8], name: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    text.split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| percent_decode(v))
}

fn percent_decode(v: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16);
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match bytes.get(i..i + 3) {
            Some([b'%', hi, lo]) => hex(*hi).zip(hex(*lo)).map(|(h, l)| (h * 16 + l) as u8),
            _ => None,
        };
        match (escaped, bytes[i]) {
            (Some(b), _) => {
                out.push(b);
                i += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, b) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Answers a token request made at `now` (Unix seconds) on a server
/// reached over `scheme`; granted tokens live `ttl` seconds. `Ok` holds
/// a granted token's answer.
pub fn token(req: &Request, scheme: &str, now: u64, ttl: u64) -> Result<Reply, Reply> {
    let form = req
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/x-www-form-urlencoded"));
    if !form {
        return Err(oauth_error(
            "invalid_request",
            "Content-Type must be application/x-www-form-urlencoded",
        ));
    }
    let grant = form_field(&req.body, "grant_type").unwrap_or_default();
    if grant == "refresh_token" {
        return refresh(req, now, ttl);
    }
    if grant != JWT_BEARER {
        return Err(oauth_error(
            "unsupported_grant_type",
            &format!("Invalid grant_type: {grant}"),
        ));
    }
    let assertion = form_field(&req.body, "assertion").unwrap_or_default();
    let parts: Vec<&str> = assertion.split('.').collect();
    let [header, claims, signature] = parts[..] else {
        return Err(oauth_error("invalid_grant", "Invalid JWT: malformed"));
    };
    let (Some(header), Some(claims)) = (decode_json(header), decode_json(claims)) else {
        return Err(oauth_error("invalid_grant", "Invalid JWT: malformed"));
    };
    let known = known();
    if header["alg"] != "RS256" {
        return Err(oauth_error(
            "invalid_grant",
            "Invalid JWT: alg must be RS256",
        ));
    }
    if claims["iss"] != known.email.as_str() {
        return Err(oauth_error("invalid_grant", "Invalid email or User ID"));
    }
    if header
        .get("kid")
        .is_some_and(|k| k != known.key_id.as_str())
    {
        return Err(oauth_error("invalid_grant", "Invalid JWT Signature."));
    }
    let signed = &assertion[..assertion.rfind('.').unwrap_or(0)];
    let signature = URL_SAFE_NO_PAD.decode(signature).unwrap_or_default();
    if UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, &known.public_key)
        .verify(signed.as_bytes(), &signature)
        .is_err()
    {
        return Err(oauth_error("invalid_grant", "Invalid JWT Signature."));
    }
    let host = req.header("host").unwrap_or_default();
    let audience = format!("{scheme}://{host}{}", req.path());
    if claims["aud"] != audience.as_str() {
        return Err(oauth_error(
            "invalid_grant",
            &format!("Invalid JWT: audience must be {audience}"),
        ));
    }
    let scopes = claims["scope"].as_str().unwrap_or_default();
    if !scopes.split(' ').any(|s| s == SCOPE) {
        return Err(oauth_error(
            "invalid_scope",
            "Invalid OAuth scope or ID token audience provided.",
        ));
    }
    let (Some(iat), Some(exp)) = (claims["iat"].as_u64(), claims["exp"].as_u64()) else {
        return Err(oauth_error(
            "invalid_grant",
            "Invalid JWT: iat and exp are required",
        ));
    };
    if iat > now + 300 || exp <= now || exp < iat || exp - iat > 3600 {
        return Err(oauth_error(
            "invalid_grant",
            "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.",
        ));
    }
    Ok(granted(&known.email, now, ttl))
}

/// A token for `sub` living `ttl` seconds from `now`.
fn granted(sub: &str, now: u64, ttl: u64) -> Reply {
    let known = known();
    let payload = URL_SAFE_NO_PAD.encode(json!({"sub": sub, "exp": now + ttl}).to_string());
    let tag = URL_SAFE_NO_PAD.encode(hmac::sign(&known.mac, payload.as_bytes()));
    let answer = json!({
        "access_token": format!("ya29.mock.{payload}.{tag}"),
        "expires_in": ttl,
        "token_type": "Bearer",
        "scope": SCOPE,
    });
    Reply::json(200, to_json(&answer))
}

/// `grant_type=refresh_token`: the client and its refresh token must be
/// [`AUTHORIZED_USER`]'s (else Google's `invalid_client`, 401, or
/// `invalid_grant`).
fn refresh(req: &Request, now: u64, ttl: u64) -> Result<Reply, Reply> {
    let user: Value = serde_json::from_str(AUTHORIZED_USER).expect("the mock's user file is JSON");
    let field = |name: &str| form_field(&req.body, name).unwrap_or_default();
    if field("client_id") != user["client_id"].as_str().unwrap_or_default()
        || field("client_secret") != user["client_secret"].as_str().unwrap_or_default()
    {
        return Err(Reply::json(
            401,
            to_json(
                &json!({"error": "invalid_client", "error_description": "The OAuth client was not found."}),
            ),
        ));
    }
    if field("refresh_token") != user["refresh_token"].as_str().unwrap_or_default() {
        return Err(oauth_error("invalid_grant", "Bad Request"));
    }
    Ok(granted(&field("client_id"), now, ttl))
}

/// Google's error answer for Vertex calls.
fn google_error(status: u16, message: &str) -> Reply {
    super::gemini::error(status, message)
}

/// Whether `bearer` is a token this mock granted that has not expired at
/// `now`.
fn token_valid(bearer: &str, now: u64) -> bool {
    let Some(rest) = bearer.strip_prefix("ya29.mock.") else {
        return false;
    };
    let Some((payload, tag)) = rest.split_once('.') else {
        return false;
    };
    let Ok(tag) = URL_SAFE_NO_PAD.decode(tag) else {
        return false;
    };
    if hmac::verify(&known().mac, payload.as_bytes(), &tag).is_err() {
        return false;
    }
    decode_json(payload)
        .and_then(|p| p["exp"].as_u64())
        .is_some_and(|exp| now < exp)
}

/// Checks a Google API call made at `now` for `project` (Discovery
/// Engine's ranking API): its bearer token, and that the project is the
/// account's.
pub fn check_token(req: &Request, now: u64, project: &str) -> Result<(), Reply> {
    let bearer = req
        .header("authorization")
        .and_then(|a| a.strip_prefix("Bearer "))
        .unwrap_or_default();
    if !token_valid(bearer, now) {
        return Err(google_error(
            401,
            "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
        ));
    }
    if project != known().project {
        return Err(permission_denied(project));
    }
    Ok(())
}

/// Google's refusal of a call on `project`, which the account may not use.
pub fn permission_denied(project: &str) -> Reply {
    google_error(
        403,
        &format!("Permission 'discoveryengine.rankingConfigs.rank' denied on resource '//discoveryengine.googleapis.com/projects/{project}' (or it may not exist)."),
    )
}

/// Checks a Vertex AI call made at `now`: its bearer token, and that its
/// path names the account's project, a location and `publisher`
/// (`google` for Gemini models, `anthropic` for Claude).
pub fn check(req: &Request, now: u64, publisher: &str) -> Result<(), Reply> {
    let bearer = req
        .header("authorization")
        .and_then(|a| a.strip_prefix("Bearer "))
        .unwrap_or_default();
    if !token_valid(bearer, now) {
        return Err(google_error(
            401,
            "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
        ));
    }
    let path = req.path();
    let mut segments = path.trim_start_matches('/').split('/');
    let version = segments.next().unwrap_or_default();
    let shape = [
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
    ];
    let [Some("projects"), Some(project), Some("locations"), Some(location), Some("publishers"), Some(found), Some("models")] =
        shape
    else {
        return Err(google_error(
            404,
            &format!("The requested URL {path} was not found on this server."),
        ));
    };
    if !matches!(version, "v1" | "v1beta1") || location.is_empty() || found != publisher {
        return Err(google_error(
            404,
            &format!("The requested URL {path} was not found on this server."),
        ));
    }
    if project != known().project {
        return Err(google_error(
            403,
            &format!("Permission 'aiplatform.endpoints.predict' denied on resource '//aiplatform.googleapis.com/projects/{project}/locations/{location}/publishers/google/models' (or it may not exist)."),
        ));
    }
    Ok(())
}

/// The model and whether the method streams, for an Anthropic-on-Vertex path.
pub fn raw_predict_path(path: &str) -> Option<(&str, bool)> {
    let (rest, method) = path.rsplit_once(':')?;
    let stream = match method {
        "rawPredict" => false,
        "streamRawPredict" => true,
        _ => return None,
    };
    let (_, model) = rest.rsplit_once("/publishers/anthropic/models/")?;
    Some((model, stream))
}

/// Answers `:rawPredict` / `:streamRawPredict` for an Anthropic model.
pub fn raw_predict(ctx: &Ctx<'_>, body: &Value) -> Reply {
    use super::anthropic;
    if let Err(refusal) = check(ctx.req, ctx.created, "anthropic") {
        return refusal;
    }
    let Some((model, stream)) = raw_predict_path(ctx.req.path()) else {
        return google_error(404, "unknown method");
    };
    if body["anthropic_version"] != "vertex-2023-10-16" {
        return anthropic::error(400, "anthropic_version: must be \"vertex-2023-10-16\"");
    }
    if body.get("model").is_some() {
        return anthropic::error(400, "model: Extra inputs are not permitted");
    }
    if super::wants_stream(body) != stream {
        return anthropic::error(400, "stream: must be true exactly for streamRawPredict");
    }
    let mut messages = body.clone();
    if let Some(o) = messages.as_object_mut() {
        o.remove("anthropic_version");
        o.insert("model".into(), Value::String(model.to_string()));
    }
    if let Err(refusal) = anthropic::check_fields(&messages, false) {
        return refusal;
    }
    anthropic::answer(ctx, &messages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::api::test_request;
    use gateway::google_auth::ServiceAccount;

    fn token_request(key_file: &str, aud: &str, now: u64) -> Request {
        let text = key_file.replace("https://oauth2.googleapis.com/token", aud);
        let account = ServiceAccount::from_json(&text).unwrap();
        let mut req = test_request(
            "/token",
            &[
                ("host", "127.0.0.1:9"),
                ("content-type", "application/x-www-form-urlencoded"),
            ],
        );
        req.body = format!(
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={}",
            account.assertion(now).unwrap()
        )
        .into_bytes();
        req
    }

    fn body(reply: &Reply) -> Value {
        let super::super::Body::Full(b) = &reply.body else {
            panic!()
        };
        serde_json::from_slice(b).unwrap()
    }

    #[test]
    fn assertions_are_verified_and_tokens_checked() {
        let now = 1_800_000_000;
        let ok = token(
            &token_request(SERVICE_ACCOUNT, "http://127.0.0.1:9/token", now),
            "http",
            now,
            60,
        )
        .unwrap();
        let grant = body(&ok);
        assert_eq!(grant["expires_in"], 60);
        let access = grant["access_token"].as_str().unwrap();
        let call = |bearer: &str, path: &str, at: u64| {
            let auth = format!("Bearer {bearer}");
            check(
                &test_request(path, &[("authorization", &auth)]),
                at,
                "google",
            )
        };
        let path = "/v1/projects/mock-project/locations/us-central1/publishers/google/models/m:generateContent";
        assert!(call(access, path, now + 59).is_ok());
        assert_eq!(call(access, path, now + 60).unwrap_err().status, 401);
        assert_eq!(call("ya29.forged", path, now).unwrap_err().status, 401);
        let forged = access.replace("ya29.mock.", "ya29.mock.x");
        assert_eq!(call(&forged, path, now).unwrap_err().status, 401);
        let other =
            "/v1/projects/other/locations/us-central1/publishers/google/models/m:generateContent";
        assert_eq!(call(access, other, now).unwrap_err().status, 403);
        let claude = "/v1/projects/mock-project/locations/us-central1/publishers/anthropic/models/c:generateContent";
        assert_eq!(call(access, claude, now).unwrap_err().status, 404);
        assert_eq!(
            call(access, "/v1/models/m:generateContent", now)
                .unwrap_err()
                .status,
            404
        );

        let refused = |req: Request, at: u64| body(&token(&req, "http", at, 60).unwrap_err());
        let e = refused(
            token_request(UNKNOWN_KEY, "http://127.0.0.1:9/token", now),
            now,
        );
        assert_eq!(e["error_description"], "Invalid JWT Signature.");
        let e = refused(
            token_request(SERVICE_ACCOUNT, "http://elsewhere/token", now),
            now,
        );
        assert!(e["error_description"]
            .as_str()
            .unwrap()
            .contains("audience"));
        let e = refused(
            token_request(SERVICE_ACCOUNT, "http://127.0.0.1:9/token", now),
            now + 7200,
        );
        assert!(e["error_description"]
            .as_str()
            .unwrap()
            .contains("short-lived"));
        let mut req = token_request(SERVICE_ACCOUNT, "http://127.0.0.1:9/token", now);
        let user = gateway::google_auth::Credentials::from_json(AUTHORIZED_USER).unwrap();
        req.body = user.token_request(now).unwrap().into_bytes();
        let access = body(&token(&req, "http", now, 60).unwrap())["access_token"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(call(&access, path, now).is_ok());
        req.body = req.body.iter().copied().chain(*b"x").collect();
        assert_eq!(refused(req.clone(), now)["error"], "invalid_grant");
        req.body = b"grant_type=password".to_vec();
        assert_eq!(refused(req, now)["error"], "unsupported_grant_type");
    }
}
