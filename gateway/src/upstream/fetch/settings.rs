//! The settings of image fetching: LiteLLM's names where it has them
//! (`MAX_IMAGE_URL_DOWNLOAD_SIZE_MB`, `litellm_settings.user_url_allowed_hosts`),
//! `gateway_settings.image_url_fetch` for the rest.

use super::ssrf::AllowedHosts;
use serde::Deserialize;
use std::time::Duration;

/// Largest image fetched, LiteLLM's limit: 50 MB.
pub const MAX_IMAGE_MB: f64 = 50.0;

/// `gateway_settings.image_url_fetch` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageFetchFile {
    /// Largest image, MB (at most 50; 0 turns fetching off). Overrides
    /// `MAX_IMAGE_URL_DOWNLOAD_SIZE_MB`.
    pub max_size_mb: Option<f64>,
    /// Time for the whole fetch, redirects included, milliseconds.
    pub timeout_ms: Option<u64>,
    /// Time for each TCP connect, milliseconds.
    pub connect_timeout_ms: Option<u64>,
    /// Most redirects followed.
    pub max_redirects: Option<u8>,
    /// Bytes of inlined images each core keeps, MB.
    pub cache_mb: Option<u64>,
}

/// How images named by URL are fetched.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageFetchSettings {
    /// Largest image body, bytes; 0: fetching is off.
    pub max_bytes: usize,
    /// Time for the whole fetch.
    pub timeout: Duration,
    /// Time for each TCP connect.
    pub connect_timeout: Duration,
    /// Most redirects followed, each checked like the first URL.
    pub max_redirects: u8,
    /// Inlined images each core keeps (LiteLLM's 10).
    pub cache_entries: usize,
    /// Bytes of inlined images (data URLs) each core keeps.
    pub cache_bytes: usize,
    /// Hosts allowed whatever they resolve to.
    pub allowed_hosts: AllowedHosts,
    /// Whether resolved addresses are checked at all (LiteLLM's
    /// `litellm_settings.user_url_validation`, on unless set to false).
    pub check_addresses: bool,
}

impl Default for ImageFetchSettings {
    fn default() -> Self {
        ImageFetchSettings {
            max_bytes: mb(MAX_IMAGE_MB),
            timeout: Duration::from_secs(15),
            connect_timeout: Duration::from_secs(5),
            max_redirects: 5,
            cache_entries: 10,
            cache_bytes: 64 << 20,
            allowed_hosts: AllowedHosts::default(),
            check_addresses: true,
        }
    }
}

fn mb(n: f64) -> usize {
    (n * 1024.0 * 1024.0) as usize
}

impl ImageFetchSettings {
    /// Resolves the settings from the config file's sections and the
    /// environment (`lookup`).
    pub fn resolve(
        file: &ImageFetchFile,
        litellm_settings: Option<&serde_yaml::Value>,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let mut s = ImageFetchSettings::default();
        let env_mb = match lookup("MAX_IMAGE_URL_DOWNLOAD_SIZE_MB") {
            Some(v) => Some(v.trim().parse::<f64>().map_err(|_| {
                format!("MAX_IMAGE_URL_DOWNLOAD_SIZE_MB must be a number (got {v:?})")
            })?),
            None => None,
        };
        if let Some(n) = file.max_size_mb.or(env_mb) {
            if !(n.is_finite() && (0.0..=MAX_IMAGE_MB).contains(&n)) {
                return Err(format!(
                    "image_url_fetch.max_size_mb (or MAX_IMAGE_URL_DOWNLOAD_SIZE_MB) must be between 0 and {MAX_IMAGE_MB} (got {n})"
                ));
            }
            s.max_bytes = mb(n);
        }
        let ms = |name: &str, v: Option<u64>, default: Duration| match v {
            None => Ok(default),
            Some(n) if (1..=600_000).contains(&n) => Ok(Duration::from_millis(n)),
            Some(n) => Err(format!(
                "image_url_fetch.{name} must be between 1 and 600000 (got {n})"
            )),
        };
        s.timeout = ms("timeout_ms", file.timeout_ms, s.timeout)?;
        s.connect_timeout = ms(
            "connect_timeout_ms",
            file.connect_timeout_ms,
            s.connect_timeout,
        )?;
        if let Some(n) = file.max_redirects {
            if n > 10 {
                return Err(format!(
                    "image_url_fetch.max_redirects must be at most 10 (got {n})"
                ));
            }
            s.max_redirects = n;
        }
        if let Some(n) = file.cache_mb {
            if n > 4096 {
                return Err(format!(
                    "image_url_fetch.cache_mb must be at most 4096 (got {n})"
                ));
            }
            s.cache_bytes = (n as usize) << 20;
        }
        match litellm_settings.and_then(|l| l.get("user_url_validation")) {
            None => {}
            Some(serde_yaml::Value::Bool(b)) => s.check_addresses = *b,
            Some(_) => {
                return Err("litellm_settings.user_url_validation must be true or false".into())
            }
        }
        let hosts = litellm_settings.and_then(|l| l.get("user_url_allowed_hosts"));
        if let Some(hosts) = hosts {
            let list: Vec<String> = serde_yaml::from_value(hosts.clone()).map_err(|_| {
                "litellm_settings.user_url_allowed_hosts must be a list of host names".to_string()
            })?;
            s.allowed_hosts = AllowedHosts::parse(&list)
                .map_err(|e| format!("litellm_settings.user_url_allowed_hosts: {e}"))?;
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(file: &str, litellm: &str, env: Option<&str>) -> Result<ImageFetchSettings, String> {
        let file: ImageFetchFile = serde_yaml::from_str(file).unwrap();
        let litellm: serde_yaml::Value = serde_yaml::from_str(litellm).unwrap();
        let env = env.map(str::to_string);
        ImageFetchSettings::resolve(&file, Some(&litellm), &|n| {
            (n == "MAX_IMAGE_URL_DOWNLOAD_SIZE_MB")
                .then(|| env.clone())
                .flatten()
        })
    }

    #[test]
    fn defaults_env_file_and_bounds() {
        let d = resolve("{}", "{}", None).unwrap();
        assert_eq!(d, ImageFetchSettings::default());
        assert_eq!(d.max_bytes, 50 << 20);
        assert_eq!(resolve("{}", "{}", Some("2")).unwrap().max_bytes, 2 << 20);
        assert_eq!(resolve("{}", "{}", Some("0")).unwrap().max_bytes, 0);
        let s = resolve(
            "{max_size_mb: 1, timeout_ms: 500, max_redirects: 2, cache_mb: 1}",
            "{user_url_allowed_hosts: ['127.0.0.1']}",
            Some("20"),
        )
        .unwrap();
        assert_eq!(s.max_bytes, 1 << 20);
        assert_eq!(s.timeout, Duration::from_millis(500));
        assert_eq!((s.max_redirects, s.cache_bytes), (2, 1 << 20));
        assert!(s.allowed_hosts.permits("127.0.0.1", 1234));
        assert!(resolve("{max_size_mb: 51}", "{}", None).is_err());
        assert!(resolve("{}", "{}", Some("abc")).is_err());
        assert!(resolve("{timeout_ms: 0}", "{}", None).is_err());
        assert!(resolve("{max_redirects: 11}", "{}", None).is_err());
        assert!(resolve("{}", "{user_url_allowed_hosts: 3}", None).is_err());
        assert!(
            !resolve("{}", "{user_url_validation: false}", None)
                .unwrap()
                .check_addresses
        );
        assert!(resolve("{}", "{user_url_validation: 'no'}", None).is_err());
        assert!(resolve("{}", "{user_url_allowed_hosts: ['a/b']}", None).is_err());
    }
}
