//! One client connection: reads requests (pipelined ones in order), applies
//! the per-request controls and faults, and writes the replies.

use std::io;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use serde_json::Value;

use super::api::{self, errors, Body, Ctx, Reply, Route};
use super::controls::{Controls, Fault};
use super::faults;
use super::http::{self, BodyLen, Parse, Request};
use super::server::Worker;

/// Bytes requested from the socket per read.
const READ_CHUNK: usize = 16 * 1024;

/// Serves HTTP/1.1 on `io` until the peer goes away or a reply ends the
/// connection. `fd` is the underlying TCP socket (used for abortive resets).
pub async fn serve<S: AsyncReadRent + AsyncWriteRent>(io: S, fd: RawFd, worker: Rc<Worker>) {
    let mut conn = Conn {
        io,
        fd,
        worker,
        buf: Vec::with_capacity(READ_CHUNK),
        served: 0,
    };
    if let Next::Close = conn.run().await {
        let _ = conn.io.shutdown().await;
    }
}

/// What to do with the connection after a request.
enum Next {
    /// Read the next request.
    KeepAlive,
    /// Close gracefully (TLS close_notify, FIN).
    Close,
    /// Drop at once: a fault, a cut reply or a dead peer.
    Drop,
}

/// How much of a reply went out.
enum Sent {
    All,
    Cut,
}

/// Request data echoed back in `x-mock-received-*` headers.
struct Echo<'a> {
    authorization: &'a str,
    model: &'a str,
    content_length: usize,
    retry_after: Option<&'a str>,
}

const NO_ECHO: Echo<'static> = Echo {
    authorization: "",
    model: "",
    content_length: 0,
    retry_after: None,
};

struct Conn<S> {
    io: S,
    fd: RawFd,
    worker: Rc<Worker>,
    buf: Vec<u8>,
    /// Requests answered on this connection so far.
    served: u64,
}

impl<S: AsyncReadRent + AsyncWriteRent> Conn<S> {
    async fn run(&mut self) -> Next {
        let mut sent_continue = false;
        loop {
            match http::parse_request(&self.buf) {
                Ok(Parse::Complete(req, used)) => {
                    self.buf.drain(..used);
                    sent_continue = false;
                    match self.handle(req).await {
                        Next::KeepAlive => {}
                        other => return other,
                    }
                }
                Ok(Parse::Partial { expect_continue }) => {
                    if expect_continue && !sent_continue {
                        sent_continue = true;
                        if self.write(http::CONTINUE.to_vec()).await.is_err() {
                            return Next::Drop;
                        }
                    }
                    if !self.fill().await {
                        return Next::Drop;
                    }
                }
                Err(e) => {
                    self.served += 1;
                    let reply = errors::reply(e.status(), "invalid_request_error", e.message());
                    return match self.send(reply, &NO_ECHO, false, false).await {
                        Ok(_) => Next::Close,
                        Err(_) => Next::Drop,
                    };
                }
            }
        }
    }

    async fn handle(&mut self, req: Request) -> Next {
        self.served += 1;
        let worker = self.worker.clone();
        let shared = &worker.shared;
        let keep_alive = req.keep_alive();
        let route = api::route(&req.method, req.path());
        // Held until this call's answer is sent (or given up).
        let _in_flight = route
            .is_api_call()
            .then(|| shared.stats.record_received(self.worker.index));
        let mut echo = Echo {
            authorization: req.header("authorization").unwrap_or(""),
            model: "",
            content_length: req.body.len(),
            retry_after: None,
        };

        let reply = match route {
            Route::Stats => Some(Reply::json(200, api::to_json(&shared.stats.snapshot()))),
            // OTLP/HTTP's answer to a full success: an empty
            // ExportTraceServiceResponse (`{}` in its JSON encoding).
            Route::Traces => Some(Reply::json(200, b"{}".to_vec())),
            Route::StatsReset => {
                shared.stats.reset();
                Some(Reply::json(200, br#"{"ok":true}"#.to_vec()))
            }
            Route::Token => {
                let scheme = if shared.tls.is_some() {
                    "https"
                } else {
                    "http"
                };
                let ttl = shared.config.token_ttl_secs;
                Some(match api::vertex::token(&req, scheme, unix_now(), ttl) {
                    Ok(granted) => {
                        shared.stats.record_token_grant(self.worker.index);
                        granted
                    }
                    Err(refused) => refused,
                })
            }
            _ => None,
        };
        if let Some(reply) = reply {
            return self.finish(reply, &echo, keep_alive, false, None).await;
        }

        let controls = match Controls::from_request(&req, &shared.config) {
            Ok(c) => c,
            Err(msg) => {
                let reply = errors::bad_request(&msg);
                return self.finish(reply, &echo, keep_alive, false, None).await;
            }
        };
        echo.retry_after = controls.retry_after.as_deref();
        match &controls.fault {
            Some(Fault::Reset) => return self.reset(),
            Some(Fault::ResetOnce(id)) if shared.reset_once.first(id) => return self.reset(),
            Some(Fault::Hang) => {
                self.hang().await;
                return Next::Drop;
            }
            _ => {}
        }
        let cut = controls.fault == Some(Fault::CloseMidBody);

        let body = route
            .is_llm()
            .then(|| serde_json::from_slice::<Value>(&req.body));
        let model = match &body {
            Some(Ok(v)) => v.get("model").and_then(Value::as_str),
            _ => None,
        };
        echo.model = model.unwrap_or("");

        if controls.latency_ms > 0 {
            monoio::time::sleep(Duration::from_millis(controls.latency_ms)).await;
        }

        let reply = if let Some(status) = controls.injected_error(&shared.config) {
            shared.stats.record_failure(self.worker.index);
            match route {
                // Anthropic's endpoints fail in Anthropic's shape.
                Route::Messages | Route::CountTokens | Route::RawPredict => api::anthropic::error(
                    status,
                    controls.error_message.as_deref().unwrap_or("mock error"),
                ),
                Route::GenerateContent | Route::GoogleEmbed => api::gemini::error(
                    status,
                    controls.error_message.as_deref().unwrap_or("mock error"),
                ),
                Route::Converse | Route::Invoke => api::bedrock::error(
                    status,
                    controls.error_message.as_deref().unwrap_or("mock error"),
                ),
                Route::Cohere => api::cohere::error(
                    status,
                    controls.error_message.as_deref().unwrap_or("mock error"),
                ),
                _ => errors::injected(status, controls.error_message.as_deref()),
            }
        } else {
            match (route, &body) {
                (Route::NotFound, _) => errors::not_found(&req.method, req.path()),
                (Route::Models, _) => Reply::json(200, api::MODELS_BODY.to_vec()),
                (Route::Files, _) => api::files::handle(&shared.files, &req, unix_now()),
                (Route::Transcriptions | Route::Translations | Route::ImageEdits, _) => {
                    let ctx = Ctx {
                        id: shared.next_id(),
                        created: unix_now(),
                        model: "mock",
                        controls: &controls,
                        req: &req,
                    };
                    let reply = match route {
                        Route::ImageEdits => api::image_edits::handle(&ctx),
                        _ => api::transcriptions::handle(&ctx, route == Route::Translations),
                    };
                    match api::azure::deployment(req.path()) {
                        Some(_) => match api::azure::check(&ctx, &Value::Null) {
                            Ok(()) => reply,
                            Err(refusal) => refusal,
                        },
                        None => reply,
                    }
                }
                (_, Some(Ok(v))) if v.is_object() => {
                    let ctx = Ctx {
                        id: shared.next_id(),
                        created: unix_now(),
                        model: model.unwrap_or("mock"),
                        controls: &controls,
                        req: &req,
                    };
                    api::handle(route, &ctx, v)
                }
                (_, Some(Ok(_))) => errors::bad_request("request body must be a JSON object"),
                (_, Some(Err(e))) => errors::bad_request(&format!("invalid JSON body: {e}")),
                (_, None) => errors::not_found(&req.method, req.path()),
            }
        };
        let account = Account {
            model: model.unwrap_or("mock"),
            key: api_key(&req),
        };
        self.finish(reply, &echo, keep_alive, cut, Some(account))
            .await
    }

    /// Sends `reply`, records its usage once fully sent, and decides what
    /// happens to the connection.
    async fn finish(
        &mut self,
        reply: Reply,
        echo: &Echo<'_>,
        keep_alive: bool,
        cut: bool,
        account: Option<Account<'_>>,
    ) -> Next {
        let usage = reply.usage;
        match self.send(reply, echo, keep_alive, cut).await {
            Ok(Sent::All) => {
                if let (Some(u), Some(a)) = (usage, account) {
                    let stats = &self.worker.shared.stats;
                    stats.record(self.worker.index, a.model, a.key, u.prompt, u.completion);
                }
                if keep_alive {
                    Next::KeepAlive
                } else {
                    Next::Close
                }
            }
            Ok(Sent::Cut) | Err(_) => Next::Drop,
        }
    }

    /// Writes `reply`; with `cut`, only the head and part of the body.
    async fn send(
        &mut self,
        reply: Reply,
        echo: &Echo<'_>,
        keep_alive: bool,
        cut: bool,
    ) -> io::Result<Sent> {
        let keep_alive = keep_alive && !cut;
        let count = self.served.to_string();
        let content_length = echo.content_length.to_string();
        let headers = [
            ("x-mock-received-authorization", echo.authorization),
            ("x-mock-received-model", echo.model),
            ("x-mock-request-count", count.as_str()),
            ("x-mock-received-content-length", content_length.as_str()),
            ("retry-after", echo.retry_after.unwrap_or("")),
        ];
        let headers = &headers[..if echo.retry_after.is_some() { 5 } else { 4 }];
        let content_type = reply.content_type();
        match reply.body {
            Body::Full(body) => {
                let len = BodyLen::Fixed(body.len());
                let mut out =
                    http::response_head(reply.status, content_type, len, keep_alive, headers);
                if cut {
                    out.extend_from_slice(&body[..body.len() / 2]);
                    self.write(out).await?;
                    return Ok(Sent::Cut);
                }
                out.extend_from_slice(&body);
                self.write(out).await?;
            }
            Body::Stream(events)
            | Body::EventStream(events)
            | Body::Binary { pieces: events, .. } => {
                let head = http::response_head(
                    reply.status,
                    content_type,
                    BodyLen::Chunked,
                    keep_alive,
                    headers,
                );
                self.write(head).await?;
                let n = events.len();
                if n == 0 {
                    self.write(http::LAST_CHUNK.to_vec()).await?;
                }
                for (i, event) in events.into_iter().enumerate() {
                    if event.delay_ms > 0 {
                        monoio::time::sleep(Duration::from_millis(event.delay_ms)).await;
                    }
                    let mut frame = http::chunk(&event.data);
                    if i + 1 == n && !cut {
                        frame.extend_from_slice(http::LAST_CHUNK);
                    }
                    self.write(frame).await?;
                    if cut {
                        return Ok(Sent::Cut);
                    }
                }
            }
        }
        Ok(Sent::All)
    }

    /// Writes all of `data` and flushes it (TLS records go out at once).
    async fn write(&mut self, data: Vec<u8>) -> io::Result<()> {
        let (res, _) = self.io.write_all(data).await;
        res?;
        self.io.flush().await
    }

    /// Reads more bytes into the buffer; false on EOF or error.
    async fn fill(&mut self) -> bool {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 2 {
            self.buf.reserve(READ_CHUNK);
        }
        let buf = std::mem::take(&mut self.buf);
        let (start, end) = (buf.len(), buf.capacity());
        let (res, slice) = self.io.read(buf.slice_mut(start..end)).await;
        self.buf = slice.into_inner();
        matches!(res, Ok(n) if n > 0)
    }

    /// Arms an abortive close; the caller drops the connection.
    fn reset(&self) -> Next {
        faults::arm_reset(self.fd);
        Next::Drop
    }

    /// Discards input until the peer closes.
    async fn hang(&mut self) {
        loop {
            self.buf.clear();
            if !self.fill().await {
                return;
            }
        }
    }
}

/// Where a served request is counted.
struct Account<'a> {
    model: &'a str,
    key: Option<&'a str>,
}

/// The caller's key: the bearer token (or whole `Authorization` value), else
/// `x-api-key` (Anthropic), else `api-key` (Azure).
fn api_key(req: &Request) -> Option<&str> {
    if let Some(auth) = req.header("authorization") {
        let auth = auth.trim();
        return Some(match auth.get(..7) {
            Some(scheme) if scheme.eq_ignore_ascii_case("bearer ") => auth[7..].trim(),
            _ => auth,
        });
    }
    req.header("x-api-key")
        .or_else(|| req.header("api-key"))
        .map(str::trim)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
