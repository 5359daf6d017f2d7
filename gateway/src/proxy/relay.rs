//! Relaying a provider's response body to the client as it arrives, reading
//! usage on the side, and turning upstream failures into client errors.

use super::answer_id::AnswerId;
use crate::deployment::Deployment;
use crate::downstream::{HeadBuilder, Responder};
use crate::error::GatewayError;
use crate::formats::{Format, StreamTranslator};
use crate::providers::{anthropic, bedrock, cohere, gemini};
use crate::spend::{self, StreamUsage, Usage};
use crate::sse::UsageChunkFilter;
use crate::upstream::{UpstreamError, UpstreamResponse};
use std::time::{Duration, Instant};

/// Largest non-streamed body kept to read its `usage`.
const MAX_TAPPED_BODY: usize = 8 << 20;
/// Bytes kept of the end of a larger body, where its `usage` stands.
const TAPPED_TAIL: usize = 64 << 10;

/// Reads token usage from a response while it is relayed, in the format
/// the provider answers in.
pub(super) enum UsageTap {
    /// A JSON body in `format`, kept whole up to [`MAX_TAPPED_BODY`], then
    /// only its last [`TAPPED_TAIL`] bytes (`overflowed`).
    Body {
        bytes: Vec<u8>,
        overflowed: bool,
        format: Format,
        /// An image answer's images, counted as they pass.
        images: Option<spend::ImageCount>,
    },
    /// An OpenAI SSE stream, parsed event by event.
    Stream { usage: StreamUsage },
    /// An Anthropic Messages event stream.
    Messages { usage: anthropic::StreamUsage },
    /// A stream in a provider's own framing (Bedrock's event stream,
    /// Gemini's answers), translated to the internal form to read its usage.
    Translated {
        translator: Box<dyn StreamTranslator>,
        usage: StreamUsage,
    },
    /// An answer that reports no usage (generated audio): nothing is kept,
    /// the prompt is estimated.
    Off,
}

impl UsageTap {
    /// A tap for a streamed or plain response in `format`.
    pub(super) fn new(stream: bool, format: Format) -> Self {
        match (stream, format) {
            (false, format) => UsageTap::Body {
                bytes: Vec::new(),
                overflowed: false,
                format,
                images: None,
            },
            (true, Format::OpenAi | Format::Responses) => UsageTap::Stream {
                usage: StreamUsage::new(),
            },
            (true, Format::Anthropic) => UsageTap::Messages {
                usage: anthropic::StreamUsage::default(),
            },
            (true, Format::Bedrock) => UsageTap::Translated {
                translator: Box::new(bedrock::ConverseToChat::new(true)),
                usage: StreamUsage::new(),
            },
            (true, Format::Gemini) => UsageTap::Translated {
                translator: Box::new(crate::formats::Events::new(gemini::GeminiToChat::new(true))),
                usage: StreamUsage::new(),
            },
            (true, Format::Cohere) => UsageTap::Translated {
                translator: Box::new(crate::formats::Events::new(cohere::CohereToChat::new(true))),
                usage: StreamUsage::new(),
            },
        }
    }

    /// A tap that keeps nothing, for answers without usage.
    pub(super) fn off() -> Self {
        UsageTap::Off
    }

    /// A tap for OpenAI's image answer (whatever the provider's: it is
    /// fed the answer the client receives), counting its images.
    pub(super) fn images() -> Self {
        UsageTap::Body {
            bytes: Vec::new(),
            overflowed: false,
            format: Format::OpenAi,
            images: Some(spend::ImageCount::default()),
        }
    }

    /// The images an image answer returned; `None` from other taps.
    pub(super) fn images_returned(&self) -> Option<u64> {
        match self {
            UsageTap::Body {
                images: Some(count),
                ..
            } => Some(count.images()),
            _ => None,
        }
    }

    /// The seconds of audio a transcription's JSON answer reports: its
    /// `duration` (`verbose_json`), else `usage.seconds` (OpenAI's duration
    /// usage); 0 when it reports neither (a `text`, `srt` or `vtt` answer).
    pub(super) fn audio_seconds(&self) -> f64 {
        let UsageTap::Body { bytes, .. } = self else {
            return 0.0;
        };
        #[derive(serde::Deserialize)]
        struct Seconds {
            seconds: Option<f64>,
        }
        #[derive(serde::Deserialize)]
        struct Answer {
            duration: Option<f64>,
            usage: Option<Seconds>,
        }
        let Ok(answer) = serde_json::from_slice::<Answer>(bytes) else {
            return 0.0;
        };
        answer
            .duration
            .or(answer.usage.and_then(|u| u.seconds))
            .filter(|s| s.is_finite() && *s >= 0.0)
            .unwrap_or(0.0)
    }

    /// Sees relayed bytes.
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        match self {
            UsageTap::Off => {}
            UsageTap::Body {
                bytes: kept,
                overflowed,
                images,
                ..
            } => {
                if let Some(count) = images {
                    count.feed(bytes);
                }
                if !*overflowed && kept.len() + bytes.len() <= MAX_TAPPED_BODY {
                    kept.extend_from_slice(bytes);
                    return;
                }
                *overflowed = true;
                let piece = &bytes[bytes.len().saturating_sub(TAPPED_TAIL)..];
                let keep = TAPPED_TAIL - piece.len();
                kept.drain(..kept.len().saturating_sub(keep));
                kept.extend_from_slice(piece);
            }
            UsageTap::Stream { usage, .. } => usage.feed(bytes),
            UsageTap::Messages { usage } => usage.feed(bytes),
            UsageTap::Translated { translator, usage } => {
                // A broken stream is the relay's error; the tap keeps what
                // it read.
                let mut internal = Vec::new();
                let _ = translator.feed(bytes, &mut internal);
                usage.feed(&internal);
            }
        }
    }

    /// The usage reported by the provider, else estimated (the prompt
    /// from `prompt`).
    pub(super) fn finish(self, prompt: &spend::PromptEstimate) -> Usage {
        let estimate = || Usage {
            prompt_tokens: prompt.get(),
            ..Usage::default()
        };
        match self {
            UsageTap::Off => estimate(),
            UsageTap::Body {
                bytes,
                overflowed,
                format,
                ..
            } => {
                let reported = match (format, overflowed) {
                    (Format::OpenAi | Format::Responses, false) => {
                        spend::from_response_body(&bytes)
                    }
                    (Format::OpenAi | Format::Responses, true) => spend::from_response_tail(&bytes),
                    (Format::Anthropic, false) => anthropic::usage_from_body(&bytes),
                    (Format::Anthropic, true) => anthropic::usage_from_tail(&bytes),
                    (Format::Bedrock, false) => bedrock::usage_from_body(&bytes),
                    // Converse answers put `usage` after the message: a
                    // cut body is estimated.
                    (Format::Bedrock, true) => None,
                    (Format::Gemini, false) => gemini::usage_from_body(&bytes),
                    (Format::Gemini, true) => None,
                    (Format::Cohere, false) => cohere::usage_from_body(&bytes),
                    // Cohere answers put `usage` last, but a cut body is
                    // estimated, as Gemini's.
                    (Format::Cohere, true) => None,
                };
                reported.unwrap_or_else(estimate)
            }
            UsageTap::Stream { usage } => usage.finish(|| prompt.get()).0,
            UsageTap::Messages { usage } => usage.finish(|| prompt.get()),
            UsageTap::Translated {
                mut translator,
                mut usage,
            } => {
                let mut internal = Vec::new();
                let _ = translator.finish(&mut internal);
                usage.feed(&internal);
                usage.finish(|| prompt.get()).0
            }
        }
    }
}

/// Copies one response body from the provider to the client.
pub(super) struct Relay<'d> {
    dep: &'d Deployment,
    timeout: Duration,
    deadline: Instant,
    is_stream: bool,
    filter: Option<UsageChunkFilter>,
    translate: Option<Box<dyn StreamTranslator>>,
    /// Boxed: 312 B that every open stream would carry, guarded or not.
    guard: Option<Box<super::guard::StreamGuard>>,
    /// The core, for the guard's calls to guardrail services.
    worker: Option<&'d crate::state::Worker>,
}

impl<'d> Relay<'d> {
    /// A relay for `dep`'s response; `strip_usage` drops the usage chunk the
    /// gateway asked for on the client's behalf.
    pub(super) fn new(
        dep: &'d Deployment,
        timeout: Duration,
        deadline: Instant,
        is_stream: bool,
        strip_usage: bool,
    ) -> Self {
        Relay {
            dep,
            timeout,
            deadline,
            is_stream,
            filter: strip_usage.then(UsageChunkFilter::default),
            translate: None,
            guard: None,
            worker: None,
        }
    }

    /// Translates the stream into the client's format before it is
    /// filtered and sent.
    pub(super) fn translating(mut self, translate: Option<Box<dyn StreamTranslator>>) -> Self {
        self.translate = translate;
        self
    }

    /// Passes the stream, in the client's format, through its `post_call`
    /// guardrails last.
    pub(super) fn guarding(
        mut self,
        guard: Option<super::guard::StreamGuard>,
        worker: &'d crate::state::Worker,
    ) -> Self {
        self.guard = guard.map(Box::new);
        self.worker = Some(worker);
        self
    }

    /// Between pieces a stream may pause up to its timeout; a plain body must
    /// finish within the request's deadline.
    fn idle(&self) -> Duration {
        if self.is_stream {
            self.timeout
        } else {
            self.deadline.saturating_duration_since(Instant::now())
        }
    }

    /// Relays piece by piece, in chunked coding or raw under the provider's
    /// Content-Length; `answer` reads the id of what the client receives.
    pub(super) async fn run(
        &mut self,
        resp: &mut UpstreamResponse,
        out: &mut Responder<'_>,
        chunked: bool,
        (tap, answer): (&mut UsageTap, &mut AnswerId),
    ) -> Result<(), GatewayError> {
        loop {
            let mut piece = Vec::new();
            let more = resp
                .next_piece(&mut piece, self.idle())
                .await
                .map_err(|e| upstream_error(e, self.dep, self.timeout))?;
            tap.feed(&piece);
            if let Some(t) = &mut self.translate {
                let mut translated = Vec::with_capacity(piece.len() * 2);
                let done = t.feed(&piece, &mut translated).and_then(|()| {
                    if more {
                        Ok(())
                    } else {
                        t.finish(&mut translated)
                    }
                });
                done.map_err(|e| super::convert::translate_error(self.dep, e))?;
                piece = translated;
            }
            if let Some(filter) = &mut self.filter {
                let mut kept = Vec::with_capacity(piece.len());
                filter.filter(&piece, &mut kept);
                if !more {
                    filter.finish(&mut kept);
                }
                piece = kept;
            }
            if let Some(guard) = &mut self.guard {
                let mut checked = Vec::with_capacity(piece.len());
                let done = guard.feed(&piece, &mut checked).and_then(|()| {
                    if more {
                        Ok(())
                    } else {
                        guard.finish(&mut checked)
                    }
                });
                done.map_err(|e| super::convert::translate_error(self.dep, e))?;
                if let Some(worker) = self.worker {
                    super::guard::check_stream(worker, guard, &mut checked, !more).await;
                }
                piece = checked;
            }
            if !piece.is_empty() {
                answer.feed(&piece, self.is_stream);
                let written = if chunked {
                    out.send_chunk(&piece).await
                } else {
                    out.send_raw(piece).await
                };
                written.map_err(|_| GatewayError::Unavailable("client connection lost"))?;
            }
            // A guardrail's block ended the client's stream: the upstream
            // one is dropped (its connection closes) and what it generated
            // so far is billed.
            if !more || self.guard.as_ref().is_some_and(|g| g.blocked()) {
                return Ok(());
            }
        }
    }
}

pub(super) fn upstream_error(
    err: UpstreamError,
    dep: &Deployment,
    timeout: Duration,
) -> GatewayError {
    let provider = dep.provider_name.clone();
    let url = dep
        .base
        .as_ref()
        .map_or_else(String::new, |b| b.url.clone());
    match err {
        UpstreamError::Timeout => GatewayError::UpstreamTimeout {
            provider,
            deployment: dep.id.to_string(),
            after: timeout,
        },
        UpstreamError::Connect(reason) | UpstreamError::Io(reason) => {
            GatewayError::UpstreamUnreachable {
                provider,
                url,
                reason,
            }
        }
        UpstreamError::Protocol(reason) => GatewayError::UpstreamProtocol { provider, reason },
    }
}

/// Relays `resp`'s body to the client untouched as it arrives (with its
/// length when the upstream gave one, chunked otherwise), for routes that
/// answer as the provider answered (pass-through, file contents). `seen` is
/// shown every piece (a usage tap); `lost` turns an upstream failure into
/// the client's error; `idle` bounds each wait for the next piece.
pub(super) async fn relay_as_is(
    resp: &mut UpstreamResponse,
    (h, content_type): (HeadBuilder, &str),
    out: &mut Responder<'_>,
    idle: Duration,
    mut seen: impl FnMut(&[u8]),
    lost: impl Fn(UpstreamError) -> GatewayError,
) -> Result<(), GatewayError> {
    let status = resp.head.status;
    let io = |_| GatewayError::Unavailable("client connection lost");
    let fixed = resp.content_length();
    match fixed {
        Some(len) => out
            .start_fixed(status, h, content_type, len)
            .await
            .map_err(io)?,
        None => out
            .start_stream(status, h, content_type)
            .await
            .map_err(io)?,
    }
    let mut piece = Vec::new();
    loop {
        piece.clear();
        let more = resp.next_piece(&mut piece, idle).await.map_err(&lost)?;
        if !piece.is_empty() {
            seen(&piece);
            match fixed {
                Some(_) => out.send_raw(std::mem::take(&mut piece)).await.map_err(io)?,
                None => out.send_chunk(&piece).await.map_err(io)?,
            }
        }
        if !more {
            break;
        }
    }
    if fixed.is_none() {
        out.end_stream().await.map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relay_keeps_no_stream_guard_inline() {
        // Every open stream keeps its relay for minutes; the post_call
        // guard (over 300 B) is on the heap, and only for guarded streams.
        let guard = std::mem::size_of::<super::super::guard::StreamGuard>();
        assert!(guard > 128, "the guard is {guard} B");
        assert!(
            std::mem::size_of::<Relay<'static>>() < guard,
            "the relay is {} B",
            std::mem::size_of::<Relay<'static>>()
        );
    }

    #[test]
    fn usage_of_a_body_larger_than_the_tap_is_still_read() {
        let mut tap = UsageTap::new(false, Format::OpenAi);
        tap.feed(br#"{"choices":[{"message":{"content":""#);
        let filler = vec![b'x'; 1 << 20];
        for _ in 0..9 {
            tap.feed(&filler);
        }
        tap.feed(br#""}}],"usage":{"prompt_tokens":7,"completion_tokens":2400000}}"#);
        let body = bytes::Bytes::from_static(b"{}");
        let usage = tap.finish(&spend::PromptEstimate::new(body));
        assert_eq!(
            (usage.prompt_tokens, usage.completion_tokens),
            (7, 2_400_000)
        );
    }
}
