//! Images by URL for providers that refuse URLs (seed 000): the gateway
//! fetches the image from a local HTTP image server and sends it inline to
//! the Bedrock and Gemini mocks, which check the base64 bytes against the
//! declared format and, for `mock-describe-images`, answer with what they
//! received. The image server is on 127.0.0.1, which the gateway refuses
//! unless `litellm_settings.user_url_allowed_hosts` names it: the tests
//! allow `127.0.0.1:<port>` only, so `localhost:<port>` and every other
//! loopback name stay refused.

use e2e::http::{request, Response};
use e2e::{assert_error, error_message, to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// A PNG header and a few bytes: what the mocks sniff as `png`.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDRmock-png-bytes";
/// A JPEG start: what the mocks sniff as `jpeg`.
const JPEG: &[u8] = b"\xff\xd8\xff\xe0\0\x10JFIFmock-jpeg-bytes";

/// What the image server saw.
#[derive(Default)]
struct Seen {
    /// Requests per path.
    hits: HashMap<String, usize>,
    /// Whether `/endless.png` was written to its end.
    endless_finished: bool,
}

/// A plain HTTP/1.1 image server with one behaviour per path.
struct ImageServer {
    port: u16,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
}

impl ImageServer {
    fn start() -> ImageServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind image server");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (seen.clone(), stop.clone());
        thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let s = s.clone();
                        thread::spawn(move || serve(stream, port, &s));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        ImageServer { port, seen, stop }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn hits(&self, path: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .hits
            .get(path)
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for ImageServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(mut stream: TcpStream, port: u16, seen: &Mutex<Seen>) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let path = head.split(' ').nth(1).unwrap_or("/").to_string();
    *seen.lock().unwrap().hits.entry(path.clone()).or_default() += 1;
    let ok = |ctype: &str, body: &[u8]| {
        let mut out = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(body);
        out
    };
    let redirect = |to: &str| {
        format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .into_bytes()
    };
    let reply = match path.as_str() {
        "/cat.png" | "/cached.png" | "/cat2.png" => ok("image/png", PNG),
        "/photo" => {
            // Chunked, with parameters on the type and no extension.
            let mut out = b"HTTP/1.1 200 OK\r\nContent-Type: Image/JPEG; q=1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec();
            for part in JPEG.chunks(7) {
                out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                out.extend_from_slice(part);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
            out
        }
        "/page.html" => ok("text/html", b"<html>not an image</html>"),
        "/missing.png" => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
        "/moved.png" => redirect("/cat2.png"),
        "/to-localhost.png" => redirect(&format!("http://localhost:{port}/cat.png")),
        "/to-metadata.png" => redirect("http://169.254.169.254/latest/meta-data/"),
        "/loop.png" => redirect("/loop.png"),
        "/declared-huge.png" => {
            b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 104857600\r\n\r\n"
                .to_vec()
        }
        "/endless.png" => {
            // 64 MiB without a declared length: the gateway must stop early.
            let head = "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nConnection: close\r\n\r\n";
            if stream.write_all(head.as_bytes()).is_err() || stream.write_all(PNG).is_err() {
                return;
            }
            let chunk = vec![0u8; 64 * 1024];
            for _ in 0..1024 {
                if stream.write_all(&chunk).is_err() {
                    return;
                }
            }
            seen.lock().unwrap().endless_finished = true;
            return;
        }
        "/700k-a.png" | "/700k-b.png" => {
            let mut body = PNG.to_vec();
            body.resize(700 * 1024, 0);
            ok("image/png", &body)
        }
        "/slow.png" => {
            thread::sleep(Duration::from_secs(4));
            ok("image/png", PNG)
        }
        _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
    };
    let _ = stream.write_all(&reply);
}

fn deployments(mock: &MockServer) -> Value {
    json!([
        {"model_name": "claude", "litellm_params": {
            "model": "bedrock/converse/anthropic.claude-3-5-sonnet-20240620-v1:0",
            "aws_bedrock_runtime_endpoint": format!("http://127.0.0.1:{}", mock.port()),
            "aws_access_key_id": "AKIDMOCK",
            "aws_secret_access_key": "mock-aws-secret-access-key",
            "aws_region_name": "us-east-1",
            "timeout": 10}},
        {"model_name": "flash", "litellm_params": {
            "model": "gemini/gemini-2.0-flash",
            "api_base": format!("http://127.0.0.1:{}", mock.port()),
            "api_key": "mock-gemini-api-key",
            "timeout": 10}},
        {"model_name": "sonnet", "litellm_params": {
            "model": "anthropic/claude-3-5-sonnet-20241022",
            "api_base": format!("http://127.0.0.1:{}", mock.port()),
            "api_key": "sk-ant-upstream",
            "timeout": 10}},
    ])
}

/// A gateway whose image fetching allows `allowed` hosts.
fn gateway(mock: &MockServer, allowed: &[String]) -> Gateway {
    let config = json!({
        "model_list": deployments(mock),
        "general_settings": {"master_key": MASTER_KEY},
        "litellm_settings": {"user_url_allowed_hosts": allowed},
        "gateway_settings": {"image_url_fetch": {"max_size_mb": 1, "timeout_ms": 1500}},
    });
    Gateway::start(&to_yaml(&config), &[])
}

/// A chat request with text and the image at `url`.
fn with_image(model: &str, url: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "mock-describe-images: what is this?"},
        {"type": "image_url", "image_url": {"url": url}},
    ]}]})
}

fn answer(resp: &Response) -> String {
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Asserts a 400 naming the image part, whose message contains `needle`.
fn refused(resp: &Response, needle: &str) {
    let err = assert_error(resp, 400);
    assert_eq!(err["param"], "messages[0].content[1].image_url", "{err:?}");
    assert_eq!(err["type"], "invalid_request_error");
    let message = error_message(&err);
    assert!(message.contains(needle), "{needle:?} not in {message:?}");
}

#[test]
fn images_by_url_reach_bedrock_and_gemini_inline_with_their_media_type() {
    let mock = MockServer::start(&[]);
    let images = ImageServer::start();
    let gw = gateway(&mock, &[format!("127.0.0.1:{}", images.port)]);

    let resp = gw.post(
        "/v1/chat/completions",
        &with_image("claude", &images.url("/cat.png")),
    );
    assert_eq!(answer(&resp), format!("image/png {}", PNG.len()));
    // Chunked, no extension, a type with parameters: the type comes from
    // the server's header.
    let resp = gw.post(
        "/v1/chat/completions",
        &with_image("flash", &images.url("/photo")),
    );
    assert_eq!(answer(&resp), format!("image/jpeg {}", JPEG.len()));
    // A relative redirect within the allowed host is followed.
    let resp = gw.post(
        "/v1/chat/completions",
        &with_image("flash", &images.url("/moved.png")),
    );
    assert_eq!(answer(&resp), format!("image/png {}", PNG.len()));
    assert_eq!(images.hits("/cat2.png"), 1);
    // The image as a bare string, in a Responses request bridged to Bedrock.
    let body = json!({"model": "claude", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "mock-describe-images"},
        {"type": "input_image", "image_url": images.url("/cat.png")},
    ]}]});
    let resp = gw.post("/v1/responses", &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(
        resp.text().contains(&format!("image/png {}", PNG.len())),
        "{}",
        resp.text()
    );
}

#[test]
fn loopback_is_refused_by_default_and_allowed_only_as_listed() {
    let mock = MockServer::start(&[]);
    let images = ImageServer::start();
    let strict = gateway(&mock, &[]);
    let resp = strict.post(
        "/v1/chat/completions",
        &with_image("claude", &images.url("/cat.png")),
    );
    refused(&resp, "loopback");
    let v6 = format!("http://[::1]:{}/cat.png", images.port);
    refused(
        &strict.post("/v1/chat/completions", &with_image("flash", &v6)),
        "loopback",
    );
    let mapped = format!("http://[::ffff:127.0.0.1]:{}/cat.png", images.port);
    refused(
        &strict.post("/v1/chat/completions", &with_image("flash", &mapped)),
        "loopback",
    );
    refused(
        &strict.post(
            "/v1/chat/completions",
            &with_image("claude", "http://169.254.169.254/latest/meta-data/"),
        ),
        "link-local",
    );
    // Other schemes are never fetched: the translator refuses them.
    let resp = strict.post(
        "/v1/chat/completions",
        &with_image("claude", "file:///etc/passwd"),
    );
    assert!(error_message(&assert_error(&resp, 400)).contains("base64 data URLs"));
    // Nothing was sent to the image server.
    assert_eq!(images.hits("/cat.png"), 0);

    let allowing = gateway(&mock, &[format!("127.0.0.1:{}", images.port)]);
    let resp = allowing.post(
        "/v1/chat/completions",
        &with_image("claude", &images.url("/cat.png")),
    );
    assert_eq!(answer(&resp), format!("image/png {}", PNG.len()));
    // Another name of the same address is not on the list.
    let by_name = format!("http://localhost:{}/cat.png", images.port);
    refused(
        &allowing.post("/v1/chat/completions", &with_image("claude", &by_name)),
        "loopback",
    );
    assert_eq!(images.hits("/cat.png"), 1);
}

#[test]
fn redirects_are_checked_hop_by_hop() {
    let mock = MockServer::start(&[]);
    let images = ImageServer::start();
    let gw = gateway(&mock, &[format!("127.0.0.1:{}", images.port)]);
    let post = |path: &str| {
        gw.post(
            "/v1/chat/completions",
            &with_image("claude", &images.url(path)),
        )
    };
    refused(&post("/to-localhost.png"), "loopback");
    refused(&post("/to-metadata.png"), "link-local");
    refused(&post("/loop.png"), "more than 5 redirects");
    assert_eq!(images.hits("/to-localhost.png"), 1);
    // The forbidden hop was never requested.
    assert_eq!(images.hits("/cat.png"), 0);
}

#[test]
fn oversized_non_image_missing_and_slow_images_are_refused() {
    let mock = MockServer::start(&[]);
    let images = ImageServer::start();
    let gw = gateway(&mock, &[format!("127.0.0.1:{}", images.port)]);
    let post = |path: &str| {
        gw.post(
            "/v1/chat/completions",
            &with_image("flash", &images.url(path)),
        )
    };
    refused(
        &post("/declared-huge.png"),
        "larger than the limit of 1048576 bytes",
    );
    refused(
        &post("/endless.png"),
        "larger than the limit of 1048576 bytes",
    );
    refused(&post("/page.html"), "does not serve an image");
    // Each fits the cap, not both: the request's images share it.
    let two = json!({"model": "flash", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": images.url("/700k-a.png")}},
        {"type": "image_url", "image_url": {"url": images.url("/700k-b.png")}},
    ]}]});
    let err = assert_error(&gw.post("/v1/chat/completions", &two), 400);
    assert_eq!(err["param"], "messages[0].content[1].image_url");
    assert!(error_message(&err).contains("together are larger than the limit of 1048576 bytes"));
    refused(&post("/missing.png"), "status 404");
    refused(&post("/slow.png"), "timed out after 1500ms");
    refused(
        &gw.post(
            "/v1/chat/completions",
            &with_image("flash", "http://no-such-host.invalid/x.png"),
        ),
        "could not be fetched",
    );
    // The endless body was abandoned after the cap, not read to its end.
    e2e::eventually(
        "the image server's write to fail",
        Duration::from_secs(10),
        || (images.hits("/endless.png") == 1).then_some(()),
    );
    thread::sleep(Duration::from_millis(200));
    assert!(!images.seen.lock().unwrap().endless_finished);
}

#[test]
fn a_cached_image_is_not_fetched_again() {
    let mock = MockServer::start(&[]);
    let images = ImageServer::start();
    let gw = gateway(&mock, &[format!("127.0.0.1:{}", images.port)]);
    // One connection: one core, whose cache holds the image.
    let mut conn = gw.connect();
    let auth = format!("Bearer {MASTER_KEY}");
    for model in ["claude", "flash", "claude"] {
        let body = with_image(model, &images.url("/cached.png")).to_string();
        let resp = conn.roundtrip(&request(
            "POST",
            "/v1/chat/completions",
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            body.as_bytes(),
        ));
        assert_eq!(answer(&resp), format!("image/png {}", PNG.len()));
    }
    assert_eq!(images.hits("/cached.png"), 1);
}
