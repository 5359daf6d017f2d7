//! Fetching an image a client names by URL, for providers that take only
//! inline data (seed 000: LiteLLM downloads it, at most 50 MB, and keeps
//! the last 10). It runs on the core's runtime without blocking it: DNS on
//! a short-lived thread (`dns`), sockets through io_uring, every step
//! within one deadline, base64 of large images on a thread. Each hop,
//! redirects included, is checked before any byte is sent: http or https
//! only, every resolved address public unless the host is allow-listed
//! (`ssrf`), and the connection goes to a checked address. The body must
//! be `image/*` and is read up to the size cap, never further.

mod cache;
mod settings;
pub mod ssrf;

pub use settings::{ImageFetchFile, ImageFetchSettings};

use super::conn::UpstreamConn;
use super::dns::Resolver;
use super::{exchange, Exchange, Request, UpstreamError, UpstreamResponse};
use base64::Engine;
use cache::ImageCache;
use monoio::net::TcpStream;
use rustls::pki_types::ServerName;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use url::{Host, Position, Url};

/// Why an image URL was not inlined; the client sees the message.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// `max_size_mb` (or `MAX_IMAGE_URL_DOWNLOAD_SIZE_MB`) is 0.
    #[error("image URLs are not fetched here (MAX_IMAGE_URL_DOWNLOAD_SIZE_MB=0); send the image as a base64 data URL")]
    Disabled,
    /// Not an http(s) URL with a host, or one with credentials.
    #[error("{0}")]
    BadUrl(String),
    /// The host resolves to an address the gateway may not reach.
    #[error("the image URL's host resolves to a {reason} address, which the gateway does not fetch from (an operator can allow the host in litellm_settings.user_url_allowed_hosts)")]
    Forbidden {
        /// The kind of network.
        reason: &'static str,
    },
    /// DNS, connect, TLS or the exchange failed.
    #[error("the image could not be fetched: {0}")]
    Unreachable(String),
    /// The deadline passed.
    #[error("fetching the image timed out after {}ms", .0.as_millis())]
    Timeout(Duration),
    /// An answer other than 200 (or a redirect).
    #[error("fetching the image failed: the server answered status {0}")]
    Status(u16),
    /// A body that is not `image/*`.
    #[error("the URL does not serve an image (content type {0:?})")]
    NotImage(String),
    /// A body above the cap, alone or with the request's other images.
    #[error("{} larger than the limit of {limit} bytes", if *.together { "the images of this request together are" } else { "the image is" })]
    TooLarge {
        /// The cap, bytes.
        limit: usize,
        /// Whether the request's other images took part of it.
        together: bool,
    },
    /// More redirects than allowed.
    #[error("more than {0} redirects")]
    TooManyRedirects(u8),
}

/// The image fetcher of one core, with its cache of recent images.
pub struct ImageFetcher {
    settings: Arc<ImageFetchSettings>,
    tls: monoio_rustls::TlsConnector,
    dns: Resolver,
    cache: RefCell<ImageCache>,
}

/// What one request may still fetch.
#[derive(Debug)]
pub struct FetchBudget {
    /// Image bytes left.
    bytes: usize,
    /// When every fetch of the request must be done.
    deadline: Instant,
}

/// Bodies above this are base64-encoded on a thread, not on the core.
const ENCODE_ON_CORE_MAX: usize = 256 * 1024;

impl ImageFetcher {
    /// A fetcher verifying servers with `tls`.
    pub fn new(settings: Arc<ImageFetchSettings>, tls: Arc<rustls::ClientConfig>) -> Self {
        ImageFetcher {
            cache: RefCell::new(ImageCache::new(
                settings.cache_entries,
                settings.cache_bytes,
            )),
            settings,
            tls: monoio_rustls::TlsConnector::from(tls),
            dns: Resolver::default(),
        }
    }

    /// The budget of one request: its images together are fetched within
    /// the timeout and weigh at most the size cap.
    pub fn budget(&self) -> FetchBudget {
        FetchBudget {
            bytes: self.settings.max_bytes,
            deadline: Instant::now() + self.settings.timeout,
        }
    }

    /// The image at `url` as a `data:<media type>;base64,...` URL, from the
    /// cache or fetched, charged to `budget`.
    pub async fn data_url(
        &self,
        url: &str,
        budget: &mut FetchBudget,
    ) -> Result<Rc<str>, FetchError> {
        let max = self.settings.max_bytes;
        if max == 0 {
            return Err(FetchError::Disabled);
        }
        let cached = self.cache.borrow_mut().get(url);
        if let Some(hit) = cached {
            let size = decoded_len(&hit);
            budget.bytes = budget.bytes.checked_sub(size).ok_or(FetchError::TooLarge {
                limit: max,
                together: true,
            })?;
            return Ok(hit);
        }
        let left = budget.deadline.saturating_duration_since(Instant::now());
        let limit = budget.bytes;
        let fetch = self.follow(url, limit, budget.deadline);
        let (media_type, body) = monoio::time::timeout(left, fetch)
            .await
            .map_err(|_| FetchError::Timeout(self.settings.timeout))?
            .map_err(|e| match e {
                FetchError::TooLarge { .. } => FetchError::TooLarge {
                    limit: max,
                    together: limit < max,
                },
                other => other,
            })?;
        budget.bytes = budget.bytes.saturating_sub(body.len());
        let data: Rc<str> = encode(&media_type, body).await.into();
        self.cache.borrow_mut().insert(url, data.clone());
        Ok(data)
    }

    /// GETs `url`, following redirects; the media type and the body.
    async fn follow(
        &self,
        url: &str,
        limit: usize,
        deadline: Instant,
    ) -> Result<(String, Vec<u8>), FetchError> {
        let mut target = Url::parse(url).map_err(|e| FetchError::BadUrl(format!("{e}")))?;
        let mut redirects = 0u8;
        loop {
            let mut resp = self.get(&target, deadline).await?;
            let status = resp.head.status;
            if matches!(status, 301 | 302 | 303 | 307 | 308) {
                let location = resp
                    .head
                    .location
                    .take()
                    .ok_or(FetchError::Status(status))?;
                if redirects == self.settings.max_redirects {
                    return Err(FetchError::TooManyRedirects(redirects));
                }
                redirects += 1;
                target = target
                    .join(&location)
                    .map_err(|e| FetchError::BadUrl(format!("redirect to a bad URL: {e}")))?;
                continue;
            }
            if status != 200 {
                return Err(FetchError::Status(status));
            }
            let media_type = image_media_type(resp.head.content_type.as_deref())?;
            let body = self.read_capped(&mut resp, limit, deadline).await?;
            return Ok((media_type, body));
        }
    }

    /// One GET of `url`, to a checked address; the response head.
    async fn get(&self, url: &Url, deadline: Instant) -> Result<UpstreamResponse, FetchError> {
        let tls = match url.scheme() {
            "http" => false,
            "https" => true,
            other => {
                return Err(FetchError::BadUrl(format!(
                    "image URLs must be http or https, not {other}"
                )))
            }
        };
        if !url.username().is_empty() || url.password().is_some() {
            return Err(FetchError::BadUrl(
                "image URLs with credentials are not fetched".into(),
            ));
        }
        let (Some(host), Some(port)) = (url.host(), url.port_or_known_default()) else {
            return Err(FetchError::BadUrl("the image URL has no host".into()));
        };
        let addrs: Vec<SocketAddr> = match &host {
            Host::Ipv4(ip) => vec![SocketAddr::new((*ip).into(), port)],
            Host::Ipv6(ip) => vec![SocketAddr::new((*ip).into(), port)],
            Host::Domain(name) => self
                .dns
                .resolve(name, port)
                .await
                .map_err(FetchError::Unreachable)?,
        };
        let host_name = match &host {
            Host::Ipv6(ip) => ip.to_string(),
            other => other.to_string(),
        };
        if self.settings.check_addresses && !self.settings.allowed_hosts.permits(&host_name, port) {
            for addr in &addrs {
                if let Some(reason) = ssrf::forbidden(addr.ip()) {
                    tracing::info!(host = %host_name, %addr, reason, "image URL refused: non-public address");
                    return Err(FetchError::Forbidden { reason });
                }
            }
        }
        let conn = self.connect(&addrs, &host_name, tls, deadline).await?;
        let mut head = format!(
            "GET {} HTTP/1.1\r\nHost: {}",
            &url[Position::BeforePath..Position::AfterQuery],
            &url[Position::BeforeHost..Position::AfterPort],
        );
        head.push_str(
            "\r\nAccept: image/*\r\nAccept-Encoding: identity\r\nUser-Agent: llm-gateway\r\nConnection: close\r\n\r\n",
        );
        let request = Request::assemble(head.into_bytes(), &[]);
        let mut conn = conn;
        match exchange(&mut conn, &request).await {
            Ok((head, buf)) => Ok(UpstreamResponse::new(head, conn, buf, None)),
            Err(Exchange::DiedBeforeResponse(e)) => Err(FetchError::Unreachable(e)),
            Err(Exchange::Failed(e)) => Err(FetchError::Unreachable(e.to_string())),
        }
    }

    /// A connection to the first of `addrs` (all checked) that answers.
    async fn connect(
        &self,
        addrs: &[SocketAddr],
        host: &str,
        tls: bool,
        deadline: Instant,
    ) -> Result<UpstreamConn, FetchError> {
        let mut last = String::from("no address");
        let mut tcp = None;
        for addr in addrs {
            let left = deadline.saturating_duration_since(Instant::now());
            let wait = left.min(self.settings.connect_timeout);
            match monoio::time::timeout(wait, TcpStream::connect_addr(*addr)).await {
                Ok(Ok(s)) => {
                    tcp = Some(s);
                    break;
                }
                Ok(Err(e)) => last = format!("connect to {host}: {e}"),
                Err(_) => last = format!("connect to {host}: timed out"),
            }
        }
        let tcp = tcp.ok_or(FetchError::Unreachable(last))?;
        let _ = tcp.set_nodelay(true);
        if !tls {
            return Ok(UpstreamConn::Plain(tcp));
        }
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| FetchError::Unreachable(format!("invalid TLS server name {host}: {e}")))?;
        let stream = self
            .tls
            .connect(name, tcp)
            .await
            .map_err(|e| FetchError::Unreachable(format!("TLS handshake with {host}: {e}")))?;
        Ok(UpstreamConn::Tls(Box::new(stream)))
    }

    /// The body, refused as soon as it passes `limit` bytes (a declared
    /// length above it is refused before reading).
    async fn read_capped(
        &self,
        resp: &mut UpstreamResponse,
        limit: usize,
        deadline: Instant,
    ) -> Result<Vec<u8>, FetchError> {
        let too_large = FetchError::TooLarge {
            limit,
            together: false,
        };
        let declared = resp.content_length();
        if declared.is_some_and(|n| n > limit as u64) {
            return Err(too_large);
        }
        let mut body = Vec::with_capacity(declared.map_or(64 * 1024, |n| n as usize));
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match resp.next_piece(&mut body, left).await {
                Ok(true) if body.len() > limit => return Err(too_large),
                Ok(true) => {}
                Ok(false) => return Ok(body),
                Err(UpstreamError::Timeout) => {
                    return Err(FetchError::Timeout(self.settings.timeout))
                }
                Err(e) => return Err(FetchError::Unreachable(e.to_string())),
            }
        }
    }
}

/// The media type of a `Content-Type` that names an image.
fn image_media_type(content_type: Option<&str>) -> Result<String, FetchError> {
    let value = content_type.unwrap_or_default();
    let essence = value.split(';').next().unwrap_or_default().trim();
    let essence = essence.to_ascii_lowercase();
    match essence.strip_prefix("image/") {
        Some(sub)
            if !sub.is_empty()
                && sub
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)) =>
        {
            Ok(essence)
        }
        _ => Err(FetchError::NotImage(value.to_string())),
    }
}

/// `data:<media type>;base64,<body>`; large bodies are encoded on a
/// thread so the core keeps serving.
async fn encode(media_type: &str, body: Vec<u8>) -> String {
    let prefix = format!("data:{media_type};base64,");
    if body.len() <= ENCODE_ON_CORE_MAX {
        return data_url(&prefix, &body);
    }
    let body = Arc::new(body);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (p, b) = (prefix.clone(), body.clone());
    let spawned = std::thread::Builder::new()
        .name("gateway-base64".into())
        .spawn(move || {
            let _ = tx.send(data_url(&p, &b));
        });
    match spawned {
        Ok(_) => match rx.await {
            Ok(data) => data,
            Err(_) => data_url(&prefix, &body),
        },
        Err(_) => data_url(&prefix, &body),
    }
}

/// The bytes a `data:...;base64,` URL holds.
fn decoded_len(data_url: &str) -> usize {
    let b64 = data_url.split_once(',').map_or("", |(_, d)| d);
    let pad = b64.bytes().rev().take_while(|&b| b == b'=').count();
    (b64.len() / 4 * 3).saturating_sub(pad)
}

fn data_url(prefix: &str, body: &[u8]) -> String {
    let mut out = String::with_capacity(prefix.len() + body.len().div_ceil(3) * 4);
    out.push_str(prefix);
    base64::engine::general_purpose::STANDARD.encode_string(body, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_must_be_images() {
        assert_eq!(
            image_media_type(Some("Image/PNG; charset=x")).unwrap(),
            "image/png"
        );
        assert_eq!(
            image_media_type(Some("image/svg+xml")).unwrap(),
            "image/svg+xml"
        );
        for bad in [
            None,
            Some("text/html"),
            Some("image/"),
            Some("image/a b"),
            Some("imagex/png"),
        ] {
            assert!(image_media_type(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn large_bodies_encode_off_the_core_to_the_same_data_url() {
        let rt = || {
            monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
                .enable_timer()
                .build()
                .expect("runtime")
        };
        let small = rt().block_on(encode("image/gif", b"GIF89a".to_vec()));
        assert_eq!(small, "data:image/gif;base64,R0lGODlh");
        let big = vec![7u8; ENCODE_ON_CORE_MAX + 3];
        let encoded = rt().block_on(encode("image/png", big.clone()));
        assert_eq!(encoded, data_url("data:image/png;base64,", &big));
        assert_eq!(decoded_len(&encoded), big.len());
        assert_eq!(decoded_len(&small), 6);
        assert_eq!(decoded_len("data:image/gif;base64,R0lGOA=="), 4);
    }
}
