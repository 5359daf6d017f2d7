//! Whether traces are sent and where, read as LiteLLM reads them:
//! `litellm_settings.callbacks` (or `success_callback` / `failure_callback`)
//! naming `otel`, then `OTEL_EXPORTER_OTLP_PROTOCOL` or LiteLLM's
//! `OTEL_EXPORTER`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_ENDPOINT` or LiteLLM's `OTEL_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_HEADERS` or `OTEL_HEADERS`, and `OTEL_SERVICE_NAME`.

use crate::upstream::UpstreamBase;

/// How spans leave the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// One log line per span (target `gateway::otel`), LiteLLM's default.
    Console,
    /// OTLP over HTTP, protobuf body (`otlp_http`, `http/protobuf`).
    HttpProtobuf,
    /// OTLP over HTTP, JSON body (`http/json`).
    HttpJson,
}

/// The OTLP/HTTP default traces endpoint.
const DEFAULT_ENDPOINT: &str = "http://localhost:4318/v1/traces";
/// LiteLLM's `OTEL_SERVICE_NAME` default.
const DEFAULT_SERVICE: &str = "litellm";

/// The trace settings.
#[derive(Debug, Clone, PartialEq)]
pub struct OtelSettings {
    /// Whether requests are traced.
    pub enabled: bool,
    /// Where spans go.
    pub protocol: Protocol,
    /// The collector's traces URL (`/v1/traces`).
    pub endpoint: UpstreamBase,
    /// Headers of every export (`OTEL_HEADERS`: `k=v,k2=v2`).
    pub headers: Vec<(String, String)>,
    /// `service.name` of the resource.
    pub service_name: String,
}

impl OtelSettings {
    /// Reads the settings; `lookup` reads the environment. The error names
    /// the setting.
    pub fn resolve(
        litellm_settings: Option<&serde_yaml::Value>,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<OtelSettings, String> {
        let names_otel = |name: &str| match litellm_settings.and_then(|s| s.get(name)) {
            Some(serde_yaml::Value::String(s)) => s.trim() == "otel",
            Some(serde_yaml::Value::Sequence(items)) => items
                .iter()
                .any(|i| i.as_str().is_some_and(|s| s.trim() == "otel")),
            _ => false,
        };
        let enabled = ["callbacks", "success_callback", "failure_callback"]
            .iter()
            .any(|n| names_otel(n));
        let env = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let exporter = env("OTEL_EXPORTER_OTLP_PROTOCOL")
            .or_else(|| env("OTEL_EXPORTER"))
            .unwrap_or_else(|| "console".into());
        let protocol = match exporter.trim() {
            "console" => Protocol::Console,
            "otlp_http" | "http/protobuf" | "otlp" => Protocol::HttpProtobuf,
            "http/json" => Protocol::HttpJson,
            "otlp_grpc" | "grpc" if enabled => {
                return Err(format!(
                    "OTEL_EXPORTER={exporter}: gRPC export is not supported; use otlp_http (http/protobuf) or http/json"
                ))
            }
            other if enabled => {
                return Err(format!(
                    "OTEL_EXPORTER={other}: expected console, otlp_http, http/protobuf or http/json"
                ))
            }
            _ => Protocol::Console,
        };
        let (name, url) = match env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            Some(url) => ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url),
            None => match env("OTEL_EXPORTER_OTLP_ENDPOINT") {
                Some(url) => ("OTEL_EXPORTER_OTLP_ENDPOINT", traces_url(&url)),
                None => match env("OTEL_ENDPOINT") {
                    Some(url) => ("OTEL_ENDPOINT", traces_url(&url)),
                    None => ("the default endpoint", DEFAULT_ENDPOINT.to_string()),
                },
            },
        };
        let endpoint =
            crate::upstream::parse_base(url.trim()).map_err(|e| format!("{name}: {e}"))?;
        let headers = env("OTEL_EXPORTER_OTLP_HEADERS")
            .or_else(|| env("OTEL_HEADERS"))
            .map(|h| parse_headers(&h))
            .transpose()?
            .unwrap_or_default();
        Ok(OtelSettings {
            enabled,
            protocol,
            endpoint,
            headers,
            service_name: env("OTEL_SERVICE_NAME").unwrap_or_else(|| DEFAULT_SERVICE.into()),
        })
    }
}

/// LiteLLM's endpoint normalization: a base URL gets `/v1/traces`; one
/// ending in another signal's path has it replaced.
fn traces_url(url: &str) -> String {
    let url = url.trim().trim_end_matches('/');
    if url.ends_with("/v1/traces") {
        return url.to_string();
    }
    for other in ["/v1/metrics", "/v1/logs"] {
        if let Some(base) = url.strip_suffix(other) {
            return format!("{base}/v1/traces");
        }
    }
    format!("{url}/v1/traces")
}

/// `k=v,k2=v2` (values percent-decoded, as the OTel spec says).
fn parse_headers(text: &str) -> Result<Vec<(String, String)>, String> {
    text.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').ok_or_else(|| {
                "OTEL_HEADERS: expected key=value pairs separated by commas".to_string()
            })?;
            let v = percent_encoding::percent_decode_str(v.trim())
                .decode_utf8()
                .map_err(|_| {
                    "OTEL_HEADERS: a value is not UTF-8 once percent-decoded".to_string()
                })?;
            let k = k.trim();
            if k.is_empty() || !k.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                return Err(format!("OTEL_HEADERS: {k:?} is not a header name"));
            }
            Ok((k.to_string(), v.into_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(callbacks: &str, env: &[(&str, &str)]) -> Result<OtelSettings, String> {
        let settings: serde_yaml::Value = serde_yaml::from_str(callbacks).unwrap();
        let lookup = |name: &str| {
            env.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        };
        OtelSettings::resolve(Some(&settings), &lookup)
    }

    #[test]
    fn litellm_and_standard_variables_are_read() {
        let s = resolve(
            "callbacks: [otel]",
            &[
                ("OTEL_EXPORTER", "otlp_http"),
                ("OTEL_ENDPOINT", "http://collector:4318"),
                ("OTEL_HEADERS", "x-honeycomb-team=abc%3D,x-b=2"),
                ("OTEL_SERVICE_NAME", "gw"),
            ],
        )
        .unwrap();
        assert!(s.enabled);
        assert_eq!(s.protocol, Protocol::HttpProtobuf);
        assert_eq!(s.endpoint.url, "http://collector:4318/v1/traces");
        assert_eq!(s.headers[0], ("x-honeycomb-team".into(), "abc=".into()));
        assert_eq!(s.service_name, "gw");
        let s = resolve(
            "success_callback: [\"otel\"]",
            &[
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                ("OTEL_EXPORTER", "otlp_http"),
                (
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    "https://otel.example/v1/logs",
                ),
            ],
        )
        .unwrap();
        assert_eq!(s.protocol, Protocol::HttpJson);
        assert_eq!(s.endpoint.url, "https://otel.example/v1/traces");
        let s = resolve("callbacks: [prometheus]", &[]).unwrap();
        assert!(!s.enabled);
        assert_eq!(s.protocol, Protocol::Console);
        assert_eq!(s.endpoint.url, DEFAULT_ENDPOINT);
        assert!(resolve("callbacks: [otel]", &[("OTEL_EXPORTER", "otlp_grpc")]).is_err());
        assert!(resolve("callbacks: [otel]", &[("OTEL_HEADERS", "novalue")]).is_err());
        assert!(resolve("callbacks: [otel]", &[("OTEL_ENDPOINT", "ftp://x")]).is_err());
    }
}
