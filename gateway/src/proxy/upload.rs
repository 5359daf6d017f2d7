//! A multipart upload (audio transcriptions and translations, image
//! edits, `/v1/files` uploads) streamed to the upstream as it arrives, so a
//! 25 MB file costs one buffer of memory rather than the file.
//!
//! The form's first bytes are read up to its first file part's content
//! (bounded: [`MAX_PREFIX`]); the fields there (`model`, an edit's
//! `prompt`, a file upload's `purpose`: the [`Plan`]) route, admit and
//! price the call as a form read whole would.
//! The rest (the file and any later parts) goes to the upstream read by
//! read through one buffer, checked on the way ([`TailScanner`]): a
//! malformed tail, a field the gateway decides by arriving after the file
//! (the plan's list: other fields may come in any order), a slow or
//! vanished client each stop the upstream request before its end, so the
//! upstream never gets a whole request of it. The upstream request's
//! `Content-Length` is the client's with only the `model` field's change
//! (a file upload's: without its `model` and `custom_llm_provider` parts).
//!
//! A deciding field after the file is a 400 naming the order rather than a
//! spool: by then the call was routed, admitted and priced, and file bytes
//! went upstream; holding the file until the form ends to learn it is what
//! streaming avoids (a disk spool was not built).
//!
//! A form whose routing fields come after the file (some clients write the
//! file first) cannot be routed before the file arrives: it is read whole,
//! bounded by `max_request_size_mb`, as every form was before. LiteLLM reads
//! every form whole (Starlette parses it, then the file is read into
//! memory), whatever its order. A small body (at most [`STREAM_ABOVE`]) is
//! read whole too: it is one buffer's worth, and keeps retries.
//!
//! Once bytes of the file have gone to an upstream, no other attempt (retry,
//! fallback) can follow: they are not kept.

use crate::downstream::ClientStream;
use crate::error::GatewayError;
use crate::http1::RequestHead;
use crate::inbound::form::{self, Prefix};
use crate::inbound::form_tail::TailScanner;
use crate::inbound::Endpoint;
use crate::upstream::{BodySource, STREAMED_CHUNK};
use bytes::{Buf, Bytes};
use monoio::buf::IoBufMut;
use monoio::io::AsyncReadRent;
use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Bodies up to this many bytes are read whole, never streamed.
pub const STREAM_ABOVE: u64 = 256 << 10;
/// Most bytes read ahead of a form's first file part; a form whose first
/// file starts later is read whole (still bounded by the body limit).
const MAX_PREFIX: usize = 1 << 20;
/// Most bytes one read of a form's first bytes takes: the fields before
/// the file are a few hundred bytes, and the file bytes such a read
/// brings stay allocated with them until the upload ends, beside the
/// relay's [`STREAMED_CHUNK`] buffer.
const PREFIX_READ: usize = 64 << 10;

/// A request body as [`receive`] got it.
pub(crate) enum Received {
    /// Read whole.
    Whole(Bytes),
    /// Its form's first bytes, up to its first file's content, and the rest
    /// to stream.
    Streamed(Bytes, Box<StreamedBody>),
}

/// The rest of a streamed upload: the bytes after its prefix, read from
/// the client as the upstream takes them.
pub(crate) struct StreamedBody {
    /// Bytes of the rest already read with the prefix.
    pending: Bytes,
    /// Bytes still on the client's socket.
    remaining: u64,
    /// When the whole body must have arrived.
    deadline: Instant,
    /// The body timeout, for its error.
    timeout: Duration,
    scanner: TailScanner,
    /// Whether a byte of the rest was handed to an upstream.
    started: bool,
    /// Set once the whole body was read from the client.
    read_all: Rc<Cell<bool>>,
    /// Why the rest could not be read, once it failed.
    failure: Option<GatewayError>,
}

impl StreamedBody {
    /// Bytes of the rest, read or not.
    pub fn len(&self) -> u64 {
        self.pending.len() as u64 + self.remaining
    }

    /// Whether a byte of the rest went to an upstream: no other attempt
    /// can send it again.
    pub fn started(&self) -> bool {
        self.started
    }

    /// Becomes true once the whole body was read from the client (the
    /// connection can then serve another request).
    pub fn read_all(&self) -> Rc<Cell<bool>> {
        Rc::clone(&self.read_all)
    }

    /// Why reading the rest failed, if it did (taken once).
    pub fn take_failure(&mut self) -> Option<GatewayError> {
        self.failure.take()
    }

    /// The source an upstream send reads the rest from, off `stream`.
    pub fn source<'a>(&'a mut self, stream: &'a mut ClientStream) -> ClientTail<'a> {
        ClientTail { body: self, stream }
    }
}

/// A [`StreamedBody`] read off its client's connection.
pub(crate) struct ClientTail<'a> {
    body: &'a mut StreamedBody,
    stream: &'a mut ClientStream,
}

impl ClientTail<'_> {
    async fn next(&mut self, mut buf: Vec<u8>) -> (Result<(), GatewayError>, Vec<u8>) {
        let body = &mut *self.body;
        if !body.pending.is_empty() {
            let n = body.pending.len().min(STREAMED_CHUNK);
            buf.extend_from_slice(&body.pending[..n]);
            body.pending.advance(n);
        } else if body.remaining > 0 {
            let want = body.remaining.min(STREAMED_CHUNK as u64) as usize;
            if buf.capacity() < want {
                buf.reserve_exact(want);
            }
            let left = body.deadline.saturating_duration_since(Instant::now());
            let read = self.stream.read(buf.slice_mut(0..want));
            match monoio::time::timeout(left, read).await {
                Err(_) => {
                    return (
                        Err(GatewayError::ClientTimeout {
                            part: "request body",
                            after: body.timeout,
                        }),
                        Vec::new(),
                    )
                }
                Ok((Ok(0), back)) | Ok((Err(_), back)) => {
                    return (Err(closed_inside()), back.into_inner());
                }
                Ok((Ok(n), back)) => {
                    buf = back.into_inner();
                    body.remaining -= n as u64;
                }
            }
        } else {
            return (Ok(()), buf);
        }
        if let Err(err) = body.scanner.feed(&buf) {
            return (Err(err), buf);
        }
        // The last bytes go only when the form ended well: a malformed end
        // never completes the upstream's request.
        if body.pending.is_empty() && body.remaining == 0 {
            if let Err(err) = body.scanner.finish() {
                return (Err(err), buf);
            }
            body.read_all.set(true);
        }
        body.started = true;
        (Ok(()), buf)
    }
}

impl BodySource for ClientTail<'_> {
    async fn fill(&mut self, buf: Vec<u8>) -> (Result<(), ()>, Vec<u8>) {
        let (result, buf) = self.next(buf).await;
        match result {
            Ok(()) => (Ok(()), buf),
            Err(err) => {
                self.body.failure = Some(err);
                (Err(()), buf)
            }
        }
    }
}

fn closed_inside() -> GatewayError {
    GatewayError::BadHttp("connection closed inside the request body".into())
}

/// Which uploads stream and which late fields they refuse: a form streams
/// once its first bytes hold what routes, admits and prices it.
#[derive(Clone, Copy)]
pub(crate) struct Plan {
    /// Whether the fields before the first file are enough to route, admit
    /// and price the call before its file arrives.
    routable: fn(&form::Form) -> bool,
    /// The fields refused after the file ([`TailScanner`]).
    deciding: &'static [&'static str],
}

impl Plan {
    /// An LLM `endpoint`'s form: `model` before the file (and an edit's
    /// `prompt`).
    pub fn of(endpoint: Endpoint) -> Plan {
        match endpoint {
            Endpoint::ImageEdits => Plan {
                routable: |f| f.model.is_some() && f.prompt.is_some(),
                deciding: form::IMAGE_EDIT_DECIDING,
            },
            _ => Plan {
                routable: |f| f.model.is_some(),
                deciding: form::AUDIO_DECIDING,
            },
        }
    }

    /// A `/v1/files` upload: its required `purpose` before the file (the
    /// upstream is then the `model`'s or `custom_llm_provider`'s before
    /// it, or the path's, header's or default one).
    pub const FILE_UPLOAD: Plan = Plan {
        routable: |f| f.purpose.is_some(),
        deciding: form::FILE_UPLOAD_DECIDING,
    };
}

/// Reads the upload `head` announces (`length` bytes, `early` of them
/// read with the head) from `stream`: its prefix, to stream the rest, or
/// all of it (see the module doc). Within the body timeout; answers
/// `Expect: 100-continue` first.
pub(crate) async fn receive(
    stream: &mut ClientStream,
    head: &RequestHead,
    plan: Plan,
    (early, length): (Vec<u8>, u64),
    limits: &crate::config::ServerLimits,
) -> Result<Received, GatewayError> {
    let deadline = Instant::now() + limits.body_timeout;
    let timeout = limits.body_timeout;
    if head.expect_continue && early.is_empty() {
        let write = stream.write_all(&b"HTTP/1.1 100 Continue\r\n\r\n"[..]);
        match monoio::time::timeout(limits.write_timeout, write).await {
            Ok((Ok(_), _)) => {}
            _ => return Err(GatewayError::BadHttp("client stopped reading".into())),
        }
    }
    let length = usize::try_from(length).map_err(|_| GatewayError::BodyTooLarge {
        limit_bytes: limits.max_body_bytes,
    })?;
    let boundary = head
        .header("content-type")
        .and_then(|t| form::boundary(t).ok())
        .map(str::to_string);
    let mut body = early;
    if let Some(boundary) = boundary.filter(|_| length as u64 > STREAM_ABOVE) {
        loop {
            match form::until_file(&body, &boundary)? {
                Prefix::File {
                    form,
                    content_start,
                    parts,
                } if (plan.routable)(&form) => {
                    let remaining = (length - body.len()) as u64;
                    let mut prefix = Bytes::from(body);
                    let pending = prefix.split_off(content_start);
                    let rest = Box::new(StreamedBody {
                        pending,
                        remaining,
                        deadline,
                        timeout,
                        scanner: TailScanner::new(&boundary, parts, plan.deciding),
                        started: false,
                        read_all: Rc::new(Cell::new(false)),
                        failure: None,
                    });
                    return Ok(Received::Streamed(prefix, rest));
                }
                Prefix::More if body.len() < MAX_PREFIX.min(length) => {
                    let want = (MAX_PREFIX.min(length) - body.len()).min(PREFIX_READ);
                    body = read_more(stream, body, want, (deadline, timeout)).await?;
                }
                // Routed by fields after the file, ended early, or a long
                // prefix: read whole.
                _ => break,
            }
        }
    }
    body.reserve_exact(length.saturating_sub(body.len()));
    while body.len() < length {
        let want = length - body.len();
        body = read_more(stream, body, want, (deadline, timeout)).await?;
    }
    Ok(Received::Whole(Bytes::from(body)))
}

/// Appends at most `want` (> 0) bytes read from `stream` to `body`.
async fn read_more(
    stream: &mut ClientStream,
    mut body: Vec<u8>,
    want: usize,
    (deadline, timeout): (Instant, Duration),
) -> Result<Vec<u8>, GatewayError> {
    let at = body.len();
    if body.capacity() < at + want {
        body.reserve(want);
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let read = stream.read(body.slice_mut(at..at + want));
    match monoio::time::timeout(left, read).await {
        Err(_) => Err(GatewayError::ClientTimeout {
            part: "request body",
            after: timeout,
        }),
        Ok((Ok(0), _)) | Ok((Err(_), _)) => Err(closed_inside()),
        Ok((Ok(_), back)) => Ok(back.into_inner()),
    }
}
