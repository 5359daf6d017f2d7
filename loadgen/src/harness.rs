//! The measuring set-up shared by `overhead` and `soak`: the load side
//! (this process: load generator and in-process mock) and the gateway child
//! process, pinned to separate CPUs when there are enough.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::affinity::{self, CpuSet, Split};
use crate::client::Target;
use crate::gateway_proc::{self, GatewayProcess, GatewaySpec, UpstreamApi};
use crate::mock::{self, MockConfig, MockServer};

/// What to start.
#[derive(Debug, Clone)]
pub struct HarnessSpec {
    /// The gateway binary.
    pub gateway_bin: PathBuf,
    /// Gateway worker threads (and CPUs, when pinned).
    pub gateway_workers: usize,
    /// Pin the gateway and the load side to separate CPUs.
    pub pin: bool,
    /// Mock behaviour (host, port and workers are chosen here).
    pub mock: MockConfig,
    /// Extra environment of the gateway (e.g. `REDIS_URL`); `{mock}` in a
    /// value becomes the mock's `host:port`.
    pub gateway_env: Vec<(String, String)>,
    /// Deployments in the served group (see `gateway_proc::config_yaml`).
    pub gateway_deployments: usize,
    /// The API of that group's deployments.
    pub gateway_api: UpstreamApi,
    /// YAML appended to the generated gateway config (e.g. a
    /// `litellm_settings` block turning on metrics or traces).
    pub gateway_extra_config: String,
}

/// A running mock and gateway.
pub struct Harness {
    /// The in-process mock provider.
    pub mock: MockServer,
    /// The gateway under test.
    pub gateway: GatewayProcess,
    /// The CPU split, when pinned.
    pub cpus: Option<Split>,
}

impl Harness {
    /// Pins this process (if asked and possible), starts the mock with one
    /// worker per load-side CPU, then the gateway.
    pub fn start(spec: &HarnessSpec) -> Result<Harness, String> {
        Harness::start_on(spec, Harness::split_for(spec), None)
    }

    /// The CPU split [`Harness::start`] would use for `spec` (none unless
    /// pinning is asked for and possible). Compute it once before starting
    /// harnesses one after another: once one has pinned this process, the
    /// CPUs this process sees are its load side only.
    pub fn split_for(spec: &HarnessSpec) -> Option<Split> {
        spec.pin
            .then(|| affinity::split(affinity::available_cpus(), spec.gateway_workers))
            .flatten()
    }

    /// Starts a mock and a gateway placed on `cpus` (from
    /// [`Harness::split_for`]), the gateway with the config `config(mock
    /// address)` instead of the one `spec.gateway_api` generates
    /// (`gateway_extra_config` is still appended).
    pub fn start_placed(
        spec: &HarnessSpec,
        cpus: Option<Split>,
        config: &dyn Fn(SocketAddr) -> String,
    ) -> Result<Harness, String> {
        Harness::start_on(spec, cpus, Some(config))
    }

    /// Starts a second mock and gateway placed as `first`'s: the gateway on
    /// `first`'s gateway CPUs, the mock on its load side. (Once `first` has
    /// pinned this process, the CPUs this process sees are the load side
    /// only, so [`Harness::start`] would no longer split them.)
    pub fn start_beside(spec: &HarnessSpec, first: &Harness) -> Result<Harness, String> {
        Harness::start_on(spec, first.cpus.clone(), None)
    }

    fn start_on(
        spec: &HarnessSpec,
        cpus: Option<Split>,
        config: Option<&dyn Fn(SocketAddr) -> String>,
    ) -> Result<Harness, String> {
        if let Some(split) = &cpus {
            CpuSet::of(split.load.iter().copied())
                .apply_to_current_thread()
                .map_err(|e| format!("cannot pin the load side: {e}"))?;
        }
        let mock = mock::start(MockConfig {
            host: "127.0.0.1".into(),
            port: 0,
            workers: cpus.as_ref().map_or(1, |s| s.load.len()),
            ..spec.mock.clone()
        })
        .map_err(|e| format!("cannot start the mock: {e}"))?;
        let gateway_spec = GatewaySpec {
            bin: spec.gateway_bin.clone(),
            workers: spec.gateway_workers,
            upstream: mock.addr(),
            cpus: cpus.as_ref().map(|s| CpuSet::of(s.gateway.iter().copied())),
            env: spec
                .gateway_env
                .iter()
                .map(|(k, v)| (k.clone(), v.replace("{mock}", &mock.addr().to_string())))
                .collect(),
            deployments: spec.gateway_deployments,
        };
        let mut yaml = match config {
            Some(config) => config(mock.addr()),
            None => match spec.gateway_api {
                UpstreamApi::OpenAi => {
                    gateway_proc::config_yaml(mock.addr(), spec.gateway_deployments)
                }
                UpstreamApi::Anthropic => gateway_proc::anthropic_config_yaml(mock.addr()),
                UpstreamApi::Bedrock => gateway_proc::bedrock_config_yaml(mock.addr()),
                UpstreamApi::Vertex => gateway_proc::vertex_config_yaml(mock.addr()),
            },
        };
        yaml.push_str(&spec.gateway_extra_config);
        let gateway = GatewayProcess::start_with_config(&gateway_spec, &yaml)?;
        Ok(Harness {
            mock,
            gateway,
            cpus,
        })
    }

    /// Chat completions straight at the mock.
    pub fn direct(&self) -> Target {
        local_target(self.mock.addr())
    }

    /// Chat completions through the gateway.
    pub fn through_gateway(&self) -> Target {
        local_target(self.gateway.addr())
    }

    /// One line saying where everything runs.
    pub fn placement(&self) -> String {
        match &self.cpus {
            Some(s) => format!(
                "gateway pinned to CPU {:?}, load generator + mock to CPU {:?}",
                s.gateway, s.load
            ),
            None => "not pinned: gateway, load generator and mock share all CPUs".to_string(),
        }
    }

    /// The CPUs the gateway is pinned to, for a proxy measured in its place.
    pub fn gateway_cpus(&self) -> Option<CpuSet> {
        self.cpus
            .as_ref()
            .map(|s| CpuSet::of(s.gateway.iter().copied()))
    }

    /// Number of CPUs the load side runs on.
    pub fn load_cpus(&self) -> usize {
        self.cpus
            .as_ref()
            .map_or_else(affinity::available_cpus, |s| s.load.len())
    }
}

/// Chat completions to `addr` on this machine.
pub fn local_target(addr: SocketAddr) -> Target {
    Target {
        addr,
        host: addr.to_string(),
        path: crate::client::target::DEFAULT_PATH.to_string(),
        tls: None,
    }
}
