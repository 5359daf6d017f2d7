//! The gateway under test as a child process: a generated config that
//! routes `gpt-4o` to the mock, start-up until its health endpoint answers,
//! and a kill on drop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::affinity::CpuSet;

/// Master key written into the generated config.
pub const MASTER_KEY: &str = "sk-loadgen-bench";

/// Model group the generated config serves.
pub const MODEL: &str = "gpt-4o";

/// How long the gateway may take to answer its health endpoint.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);

/// How to start the gateway.
#[derive(Clone)]
pub struct GatewaySpec {
    /// The `gateway` binary.
    pub bin: PathBuf,
    /// `--workers`.
    pub workers: usize,
    /// Address of the mock provider it proxies to.
    pub upstream: SocketAddr,
    /// CPUs to pin it to, if any.
    pub cpus: Option<CpuSet>,
    /// Extra environment, e.g. `DATABASE_URL` for replicas sharing Postgres.
    pub env: Vec<(String, String)>,
    /// Deployments in the served group; above one, a fallback group is
    /// configured too (see [`config_yaml`]).
    pub deployments: usize,
}

/// A running gateway child process.
pub struct GatewayProcess {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
}

impl GatewayProcess {
    /// Writes the config, starts the binary and waits until
    /// `/health/liveliness` answers 200.
    pub fn start(spec: &GatewaySpec) -> Result<GatewayProcess, String> {
        GatewayProcess::start_with_config(spec, &config_yaml(spec.upstream, spec.deployments))
    }

    /// [`GatewayProcess::start`] with the config `yaml` instead of the
    /// generated one.
    pub fn start_with_config(spec: &GatewaySpec, yaml: &str) -> Result<GatewayProcess, String> {
        if !spec.bin.is_file() {
            return Err(format!(
                "gateway binary {} not found (build it with `cargo build --release -p gateway` or pass --gateway-bin)",
                spec.bin.display()
            ));
        }
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("loadgen-gateway-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let config = dir.join("config.yaml");
        std::fs::write(&config, yaml).map_err(|e| format!("{}: {e}", config.display()))?;
        let log = std::fs::File::create(dir.join("gateway.log"))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let port = free_port()?;
        let mut cmd = Command::new(&spec.bin);
        cmd.arg("--config")
            .arg(&config)
            .args(["--host", "127.0.0.1", "--port"])
            .arg(port.to_string())
            .arg("--workers")
            .arg(spec.workers.to_string())
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        if let Some(cpus) = spec.cpus {
            // SAFETY: the closure makes one async-signal-safe system call.
            unsafe {
                cmd.pre_exec(move || cpus.apply_to_current_thread());
            }
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", spec.bin.display()))?;
        let mut gateway = GatewayProcess {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            dir,
        };
        gateway.wait_ready()?;
        Ok(gateway)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "the gateway exited during start-up ({status}); its log:\n{}",
                    self.log_tail()
                ));
            }
            if health_ok(self.addr) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the gateway did not answer /health/liveliness within {STARTUP_TIMEOUT:?}; its log:\n{}",
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Creates a virtual key for the served model through `/key/generate`
    /// (authenticated by the master key) and returns it.
    pub fn generate_key(&self) -> Result<String, String> {
        self.generate_key_with(&format!("{{\"models\":[\"{MODEL}\"]}}"))
    }

    /// Creates a virtual key with the given `/key/generate` body.
    pub fn generate_key_with(&self, body: &str) -> Result<String, String> {
        let json = self.admin_post("/key/generate", body)?;
        json["key"]
            .as_str()
            .map(String::from)
            .ok_or_else(|| format!("POST /key/generate: no \"key\" in {json}"))
    }

    /// Sends `body` to the management route `path` with the master key;
    /// the JSON answer of a 200.
    pub fn admin_post(&self, path: &str, body: &str) -> Result<serde_json::Value, String> {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {MASTER_KEY}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let fail = |why: String| format!("POST {path}: {why}");
        let response =
            exchange_once(self.addr, request.as_bytes()).map_err(|e| fail(e.to_string()))?;
        let (head, body) = response
            .split_once("\r\n\r\n")
            .ok_or_else(|| fail("no complete response".into()))?;
        if !head.starts_with("HTTP/1.1 200") {
            let status = head.lines().next().unwrap_or_default();
            return Err(fail(format!("{status}: {body}")));
        }
        serde_json::from_str(body).map_err(|e| fail(format!("response is not JSON: {e}")))
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("gateway.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The gateway config: the model group on the mock with `deployments`
/// deployments, and a master key. With more than one, a one-deployment
/// fallback group and `router_settings.fallbacks` are added, so the router
/// does its full work (selection among several, a plan with fallbacks).
pub fn config_yaml(upstream: SocketAddr, deployments: usize) -> String {
    let mut yaml = String::from("model_list:\n");
    for i in 0..deployments.max(1) {
        yaml.push_str(&deployment_entry(upstream, MODEL, &format!("{MODEL}-{i}")));
    }
    if deployments > 1 {
        yaml.push_str(&deployment_entry(upstream, "fallback", "fallback-0"));
        yaml.push_str(&format!(
            "router_settings:\n  routing_strategy: simple-shuffle\n  num_retries: 2\n  fallbacks: [{{\"{MODEL}\": [\"fallback\"]}}]\n"
        ));
    }
    yaml.push_str(&format!("general_settings:\n  master_key: {MASTER_KEY}\n"));
    yaml
}

/// One `model_list` entry: an `openai/` deployment of group `group` on the
/// mock at `upstream`, with model id `id`.
pub fn deployment_entry(upstream: SocketAddr, group: &str, id: &str) -> String {
    format!(
        "  - model_name: {group}\n    litellm_params:\n      model: openai/{MODEL}\n      api_base: \"http://{upstream}/v1\"\n      api_key: sk-mock\n    model_info:\n      id: {id}\n"
    )
}

/// `gateway_settings.rate_limits.redis_timeout_ms: ms`, to append to a
/// config (none without `ms`).
pub fn redis_timeout_yaml(ms: Option<u64>) -> String {
    ms.map(|ms| format!("gateway_settings:\n  rate_limits:\n    redis_timeout_ms: {ms}\n"))
        .unwrap_or_default()
}

/// The API of the deployments the gateway routes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamApi {
    /// OpenAI's (`openai/`).
    OpenAi,
    /// Anthropic's Messages (`anthropic/`).
    Anthropic,
    /// AWS Bedrock's Converse (`bedrock/`), signed with SigV4.
    Bedrock,
    /// Google Vertex AI (`vertex_ai/`), with a service account's tokens.
    Vertex,
}

/// The gateway config with the model group on one `bedrock/` deployment on
/// the mock (which recomputes each SigV4 signature).
pub fn bedrock_config_yaml(upstream: SocketAddr) -> String {
    format!(
        "model_list:\n  - model_name: {MODEL}\n    litellm_params:\n      model: bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0\n      aws_bedrock_runtime_endpoint: \"http://{upstream}\"\n      aws_access_key_id: AKIDMOCK\n      aws_secret_access_key: {}\n      aws_region_name: us-east-1\n    model_info:\n      id: {MODEL}-bedrock\ngeneral_settings:\n  master_key: {MASTER_KEY}\n",
        crate::mock::api::bedrock::SECRET
    )
}

/// The gateway config with the model group on one `vertex_ai/` deployment
/// on the mock, whose token endpoint serves the service account's tokens
/// (the key inline, its `token_uri` pointed at the mock).
pub fn vertex_config_yaml(upstream: SocketAddr) -> String {
    let key = crate::mock::api::vertex::SERVICE_ACCOUNT.replace(
        "https://oauth2.googleapis.com/token",
        &format!("http://{upstream}/token"),
    );
    // A JSON string is a YAML double-quoted scalar.
    let key = serde_json::to_string(&key).expect("a string serializes");
    format!(
        "model_list:\n  - model_name: {MODEL}\n    litellm_params:\n      model: vertex_ai/gemini-2.0-flash\n      api_base: \"http://{upstream}\"\n      vertex_location: us-central1\n      vertex_credentials: {key}\n    model_info:\n      id: {MODEL}-vertex\ngeneral_settings:\n  master_key: {MASTER_KEY}\n"
    )
}

/// The gateway config with the model group on one `anthropic/` deployment
/// on the mock (whose Messages endpoint checks what Anthropic's does).
pub fn anthropic_config_yaml(upstream: SocketAddr) -> String {
    format!(
        "model_list:\n  - model_name: {MODEL}\n    litellm_params:\n      model: anthropic/{MODEL}\n      api_base: \"http://{upstream}\"\n      api_key: sk-mock\n    model_info:\n      id: {MODEL}-anthropic\ngeneral_settings:\n  master_key: {MASTER_KEY}\n"
    )
}

/// The default binary: `target/release/gateway` next to this executable's
/// target directory, else relative to the working directory.
pub fn default_bin() -> PathBuf {
    let sibling = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("gateway")));
    match sibling {
        Some(path) if path.is_file() => path,
        _ => Path::new("target/release/gateway").to_path_buf(),
    }
}

/// A port nobody listens on right now.
/// A TCP port free on 127.0.0.1 right now.
pub fn free_port() -> Result<u16, String> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| format!("cannot find a free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

/// Whether `GET /health/liveliness` answers 200.
fn health_ok(addr: SocketAddr) -> bool {
    let request = b"GET /health/liveliness HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n";
    exchange_once(addr, request).is_ok_and(|r| r.starts_with("HTTP/1.1 200"))
}

/// Sends one `Connection: close` request and reads the response to EOF.
pub fn exchange_once(addr: SocketAddr, request: &[u8]) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(request)?;
    let mut response = String::new();
    s.read_to_string(&mut response)?;
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_points_at_the_upstream() {
        let yaml = config_yaml("127.0.0.1:9100".parse().unwrap(), 1);
        assert!(yaml.contains("api_base: \"http://127.0.0.1:9100/v1\""));
        assert!(yaml.contains(&format!("master_key: {MASTER_KEY}")));
        let parsed = gateway::config::Config::parse(Path::new("c.yaml"), &yaml, &|_| None).unwrap();
        assert_eq!(parsed.deployments.len(), 1);
        let yaml = config_yaml("127.0.0.1:9100".parse().unwrap(), 3);
        let parsed = gateway::config::Config::parse(Path::new("c.yaml"), &yaml, &|_| None).unwrap();
        assert_eq!(parsed.deployments.len(), 4, "three plus the fallback");
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        let yaml = anthropic_config_yaml("127.0.0.1:9100".parse().unwrap());
        let parsed = gateway::config::Config::parse(Path::new("c.yaml"), &yaml, &|_| None).unwrap();
        assert_eq!(parsed.deployments[0].provider_name, "anthropic");
        let upstream = "127.0.0.1:9100".parse().unwrap();
        for (yaml, provider) in [
            (bedrock_config_yaml(upstream), "bedrock"),
            (vertex_config_yaml(upstream), "vertex_ai"),
        ] {
            let parsed = gateway::config::Config::parse(Path::new("c.yaml"), &yaml, &|_| None)
                .unwrap_or_else(|e| panic!("{provider}: {e}"));
            assert_eq!(parsed.deployments[0].provider_name, provider);
            assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        }
    }

    #[test]
    fn missing_binary_is_a_clear_error() {
        let spec = GatewaySpec {
            bin: "/nonexistent/gateway".into(),
            workers: 1,
            upstream: "127.0.0.1:1".parse().unwrap(),
            cpus: None,
            env: Vec::new(),
            deployments: 1,
        };
        let err = GatewayProcess::start(&spec).err().unwrap();
        assert!(err.contains("not found"), "{err}");
    }
}
