//! Where alerts go: the channels listed in `general_settings.alerting` and
//! their URLs, read from the environment at start-up as LiteLLM does.

use std::fmt;

/// An alert channel LiteLLM names in `general_settings.alerting`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// LiteLLM's `WebhookEvent` JSON, POSTed to `WEBHOOK_URL`.
    Webhook,
    /// `{"text": ...}`, POSTed to the Slack incoming webhook `SLACK_WEBHOOK_URL`.
    Slack,
}

impl Channel {
    /// The channel of a `general_settings.alerting` entry, if supported.
    fn from_name(name: &str) -> Option<Channel> {
        match name {
            "webhook" => Some(Channel::Webhook),
            "slack" => Some(Channel::Slack),
            _ => None,
        }
    }

    /// The environment variable holding the channel's URL.
    fn env_var(self) -> &'static str {
        match self {
            Channel::Webhook => "WEBHOOK_URL",
            Channel::Slack => "SLACK_WEBHOOK_URL",
        }
    }
}

/// An `http(s)://` URL split for a hand-written HTTP/1.1 POST. Its `Debug`
/// shows the host only: a Slack webhook URL is a secret.
#[derive(Clone)]
pub struct AlertUrl {
    /// `https` when TLS is used.
    pub tls: bool,
    /// Host name or IP, for the connection and TLS server name.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Value of the `Host` header (host, plus the port when one was given).
    pub host_header: String,
    /// Request target: path and query, at least `/`.
    pub target: String,
}

impl AlertUrl {
    /// Parses `http(s)://host[:port][/path][?query]`. The error never repeats
    /// the URL, which may be a secret.
    pub fn parse(url: &str) -> Result<AlertUrl, String> {
        let uri: http::Uri = url.trim().parse().map_err(|_| "not a URL".to_string())?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            Some(_) => return Err("the scheme is not http or https".into()),
            None => return Err("missing http:// or https://".into()),
        };
        let authority = uri.authority().ok_or("missing host")?;
        if authority.as_str().contains('@') {
            return Err("user info in the URL is not supported".into());
        }
        let host = authority.host();
        if host.is_empty() {
            return Err("missing host".into());
        }
        let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
        Ok(AlertUrl {
            tls,
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
            host_header: authority.as_str().to_string(),
            target: uri.path_and_query().map_or("/", |p| p.as_str()).to_string(),
        })
    }
}

impl fmt::Debug for AlertUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}/…", self.host_header)
    }
}

/// One place alerts are sent to.
#[derive(Debug, Clone)]
pub struct AlertTarget {
    /// Which payload it takes.
    pub channel: Channel,
    /// Where it is POSTed.
    pub url: AlertUrl,
}

/// Resolves `general_settings.alerting` into targets, reading each listed
/// channel's URL with `lookup` (the environment). A supported channel without
/// its variable, or with a bad URL, is an error naming the variable;
/// channels this gateway does not send to are returned as warnings.
pub fn resolve(
    alerting: &[String],
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(Vec<AlertTarget>, Vec<String>), String> {
    let mut targets: Vec<AlertTarget> = Vec::new();
    let mut warnings = Vec::new();
    for name in alerting {
        let Some(channel) = Channel::from_name(name) else {
            warnings.push(format!(
                "general_settings.alerting: \"{name}\" is not supported by this gateway (supported: webhook, slack); ignored"
            ));
            continue;
        };
        if targets.iter().any(|t| t.channel == channel) {
            continue;
        }
        let var = channel.env_var();
        let url = lookup(var)
            .filter(|u| !u.trim().is_empty())
            .ok_or_else(|| {
                format!("\"{name}\" needs the environment variable {var}, which is not set")
            })?;
        let url = AlertUrl::parse(&url).map_err(|e| format!("{var} is not a valid URL: {e}"))?;
        targets.push(AlertTarget { channel, url });
    }
    Ok((targets, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls_for_a_raw_post() {
        let u = AlertUrl::parse("http://127.0.0.1:9000/hook?x=1").unwrap();
        assert_eq!(
            (
                u.tls,
                u.host.as_str(),
                u.port,
                u.host_header.as_str(),
                u.target.as_str()
            ),
            (false, "127.0.0.1", 9000, "127.0.0.1:9000", "/hook?x=1")
        );
        let u = AlertUrl::parse("https://hooks.slack.com/services/T0/B0/secret").unwrap();
        assert_eq!(
            (u.tls, u.port, u.host_header.as_str()),
            (true, 443, "hooks.slack.com")
        );
        assert_eq!(u.target, "/services/T0/B0/secret");
        assert_eq!(AlertUrl::parse("http://example.com").unwrap().target, "/");
        let u = AlertUrl::parse("http://[::1]:8080/h").unwrap();
        assert_eq!(
            (u.host.as_str(), u.host_header.as_str()),
            ("::1", "[::1]:8080")
        );
    }

    #[test]
    fn rejects_bad_urls_without_repeating_them() {
        for bad in [
            "hooks.slack.com/secret",
            "ftp://h/secret",
            "not a url secret",
            "http://u:secret@h/",
        ] {
            let err = AlertUrl::parse(bad).unwrap_err();
            assert!(!err.contains("secret"), "{bad}: {err}");
        }
        let u = AlertUrl::parse("https://hooks.slack.com/services/T0/B0/secret").unwrap();
        assert!(!format!("{u:?}").contains("secret"));
    }

    #[test]
    fn resolves_channels_from_the_environment() {
        let env = |n: &str| match n {
            "WEBHOOK_URL" => Some("http://127.0.0.1:1/hook".to_string()),
            "SLACK_WEBHOOK_URL" => Some("https://hooks.slack.com/services/x".to_string()),
            _ => None,
        };
        let names = ["webhook", "slack", "email", "webhook"].map(String::from);
        let (targets, warnings) = resolve(&names, &env).unwrap();
        let channels: Vec<Channel> = targets.iter().map(|t| t.channel).collect();
        assert_eq!(channels, [Channel::Webhook, Channel::Slack]);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("\"email\""), "{warnings:?}");

        let err = resolve(&["slack".into()], &|_| None).unwrap_err();
        assert!(err.contains("SLACK_WEBHOOK_URL"), "{err}");
        let err = resolve(&["webhook".into()], &|_| Some("nope".into())).unwrap_err();
        assert!(err.contains("WEBHOOK_URL is not a valid URL"), "{err}");
    }
}
