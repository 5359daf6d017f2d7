//! Where an upstream API lives: scheme, host, port and path prefix, parsed
//! from a URL, and the URL's form that may be shown.

use std::sync::Arc;

/// Scheme, authority and path prefix of a provider's API.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamBase {
    /// `https` when TLS is used.
    pub tls: bool,
    /// Host name (for SNI and the Host header), shared with the
    /// connection pool's key of each request.
    pub host: Arc<str>,
    /// TCP port.
    pub port: u16,
    /// Path prefix without trailing slash, e.g. `/v1`.
    pub path: String,
    /// The URL as configured without userinfo, query or fragment (see
    /// [`redact_url`]): what headers, errors, logs and spend rows show.
    pub url: String,
}

/// Parses `http(s)://host[:port][/path]`.
pub(crate) fn parse_base(url: &str) -> Result<UpstreamBase, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("not a URL ({e})"))?;
    let tls = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        Some(other) => return Err(format!("scheme \"{other}\" is not http or https")),
        None => return Err("missing http:// or https://".into()),
    };
    let host = uri.host().ok_or("missing host")?;
    let host = host.trim_start_matches('[').trim_end_matches(']').into();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let path = uri.path().trim_end_matches('/').to_string();
    Ok(UpstreamBase {
        tls,
        host,
        port,
        path,
        url: redact_url(url),
    })
}

/// `url` without its userinfo (`user:password@`), query and fragment, which
/// may carry credentials: the form of an `api_base` that is ever shown.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let path = tail.split(['?', '#']).next().unwrap_or_default();
    if scheme.is_empty() {
        format!("{host}{path}")
    } else {
        format!("{scheme}://{host}{path}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_base_credentials_are_never_kept_for_display() {
        for (given, shown) in [
            (
                "https://user:pa%40ss@api.example.com:8443/v1/?key=sk-1#f",
                "https://api.example.com:8443/v1/",
            ),
            ("http://token@h/v1", "http://h/v1"),
            ("http://h:1/v1?api-key=x", "http://h:1/v1"),
            ("http://h:1/v1/", "http://h:1/v1/"),
            ("http://[::1]:9/v1", "http://[::1]:9/v1"),
        ] {
            assert_eq!(redact_url(given), shown);
        }
        let base = parse_base("https://user:secret@api.example.com/v1?key=sk-1").unwrap();
        assert_eq!(base.url, "https://api.example.com/v1");
        assert_eq!(
            (&*base.host, base.path.as_str()),
            ("api.example.com", "/v1")
        );
    }
}
