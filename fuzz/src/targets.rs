//! One function per fuzz target. Each takes arbitrary bytes, drives one
//! parser of the gateway through its public API and panics when a property
//! fails; a parser's own panic is a finding too.

use bytes::Bytes;
use gateway::formats::{anthropic as client, Events, StreamTranslator, TranslateError};
use gateway::http1::{
    encode_chunk, parse_request_head, parse_response_head, BodyFraming, ChunkedDecoder, HeadError,
    ResponseFraming,
};
use gateway::inbound::form::{self, Prefix};
use gateway::inbound::form_tail::TailScanner;
use gateway::inbound::{Endpoint, LlmRequest, MediaAsk};
use gateway::providers::anthropic as provider;
use gateway::redis::resp;
use gateway::sse::UsageChunkFilter;
use serde_json::Value;

/// Split points derived from the input, so a target that feeds a decoder in
/// pieces is as deterministic as the input itself.
fn splits(data: &[u8]) -> Vec<usize> {
    let mut rng = fastrand::Rng::with_seed(data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    }));
    let mut cuts: Vec<usize> = (0..rng.usize(0..8))
        .map(|_| rng.usize(0..=data.len()))
        .collect();
    cuts.sort_unstable();
    cuts
}

/// The HTTP/1.1 request head parser: no panic; a parsed head lies inside the
/// input, its accessors work, and its framing is what its headers say.
pub fn request_head(data: &[u8]) {
    match parse_request_head(data, 100, 64 * 1024) {
        Ok((head, len)) => {
            assert!(len <= data.len() && len <= 64 * 1024);
            let _ = (head.method(), head.path(), head.query());
            for name in [
                "content-length",
                "transfer-encoding",
                "host",
                "authorization",
            ] {
                let _ = head.header(name);
            }
            if head.framing == BodyFraming::Chunked {
                let te = head.header("transfer-encoding").unwrap_or_default();
                assert!(te.trim().eq_ignore_ascii_case("chunked"), "{te:?}");
            }
            if matches!(head.framing, BodyFraming::Length(0)) {
                panic!("Length(0) must read as no body");
            }
            // The head alone parses to the same length.
            let again = parse_request_head(&data[..len], 100, 64 * 1024);
            assert!(matches!(again, Ok((_, l)) if l == len), "{again:?}");
        }
        Err(HeadError::Partial) => assert!(data.len() <= 64 * 1024),
        Err(_) => {}
    }
}

/// Feeds `data` to a fresh decoder at the cut points `cuts`, draining what
/// it consumed as the server does; returns the payload, the bytes consumed
/// in all, whether the body ended, and the error if any.
fn decode_in_pieces(data: &[u8], cuts: &[usize]) -> (Vec<u8>, usize, bool, Option<String>) {
    let mut decoder = ChunkedDecoder::default();
    let mut out = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut consumed = 0;
    let mut from = 0;
    for &to in cuts.iter().chain(std::iter::once(&data.len())) {
        pending.extend_from_slice(&data[from..to]);
        from = to;
        match decoder.decode(&pending, &mut out) {
            Ok(used) => {
                assert!(used <= pending.len());
                consumed += used;
                pending.drain(..used);
            }
            Err(e) => return (out, consumed, false, Some(e.to_string())),
        }
        if decoder.is_done() {
            break;
        }
    }
    (out, consumed, decoder.is_done(), None)
}

/// The chunked decoder: whole or in pieces, the same payload, length and
/// verdict; the payload is never longer than the input; a finished body
/// re-encoded decodes to itself.
pub fn chunked(data: &[u8]) {
    let whole = decode_in_pieces(data, &[]);
    let pieces = decode_in_pieces(data, &splits(data));
    assert_eq!(
        whole.3.is_some(),
        pieces.3.is_some(),
        "{whole:?} vs {pieces:?}"
    );
    if whole.3.is_none() {
        assert_eq!(whole, pieces);
    }
    assert!(whole.0.len() <= data.len());
    if whole.2 {
        let mut wire = Vec::new();
        encode_chunk(&whole.0, &mut wire);
        wire.extend_from_slice(gateway::http1::LAST_CHUNK);
        let again = decode_in_pieces(&wire, &[]);
        assert_eq!((again.0, again.1, again.2), (whole.0, wire.len(), true));
    }
}

/// Upstream response heads: no panic; a parsed head lies inside the input and
/// interim or bodiless statuses have no body.
pub fn response_head(data: &[u8]) {
    if let Ok(Some((head, len))) = parse_response_head(data) {
        assert!(len <= data.len());
        if (100..200).contains(&head.status) || head.status == 204 || head.status == 304 {
            assert_eq!(head.framing, ResponseFraming::Empty);
        }
        let _ = head.is_event_stream();
    }
}

/// The SSE usage-chunk filter: the same output whatever the read sizes;
/// events are only removed, never changed; without a `"usage"` field
/// nothing is removed.
pub fn sse(data: &[u8]) {
    let run = |cuts: &[usize]| {
        let mut filter = UsageChunkFilter::default();
        let mut out = Vec::new();
        let mut from = 0;
        for &to in cuts.iter().chain(std::iter::once(&data.len())) {
            filter.filter(&data[from..to], &mut out);
            from = to;
        }
        filter.finish(&mut out);
        out
    };
    let whole = run(&[]);
    assert_eq!(whole, run(&splits(data)));
    assert!(whole.len() <= data.len());
    if memchr_usage(data) {
        return;
    }
    assert_eq!(whole, data);
}

fn memchr_usage(data: &[u8]) -> bool {
    data.windows(7).any(|w| w == b"\"usage\"")
}

/// RESP replies: no panic; a parsed reply lies inside the input and parses
/// again from exactly its own bytes; an encoded command parses back.
pub fn resp(data: &[u8]) {
    if let Ok(Some((_, used))) = resp::parse(data) {
        assert!(used <= data.len() && used > 0);
        let again = resp::parse(&data[..used]);
        assert!(matches!(again, Ok(Some((_, u))) if u == used), "{again:?}");
    }
    let args: Vec<&[u8]> = data.split(|&b| b == 0).collect();
    let mut wire = Vec::new();
    resp::encode(&args, &mut wire);
    let (reply, used) = resp::parse(&wire)
        .expect("an encoded command is valid RESP")
        .expect("an encoded command is complete");
    assert_eq!(used, wire.len());
    let items: Vec<resp::Reply> = args
        .iter()
        .map(|a| resp::Reply::Bulk(Some(a.to_vec())))
        .collect();
    assert_eq!(reply, resp::Reply::Array(Some(items)));
}

/// The inbound body view and splice (`LlmRequest::parse`): the first byte
/// picks the endpoint, the rest is the body. An accepted body is forwarded
/// as valid JSON equal to the received one without the gateway's own
/// members (`fallbacks`, `num_retries`, `tags`, `cache`), and with another
/// model spliced in, equal to that with `model` replaced.
pub fn inbound(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let endpoint = match pick % 6 {
        0 => Endpoint::ChatCompletions,
        1 => Endpoint::Completions,
        2 => Endpoint::Embeddings,
        3 => Endpoint::Messages,
        4 => Endpoint::ImageGenerations,
        _ => Endpoint::AudioSpeech,
    };
    let Ok(req) = LlmRequest::parse(endpoint, Bytes::copy_from_slice(body)) else {
        return;
    };
    match (endpoint, &req.media) {
        (Endpoint::ImageGenerations, Some(MediaAsk::Image(ask))) => {
            assert!(ask.n >= 1, "{ask:?}");
            assert!(ask.size.is_none_or(|(w, h)| w >= 1 && h >= 1), "{ask:?}");
        }
        (Endpoint::AudioSpeech, Some(MediaAsk::Speech { .. })) => {}
        (Endpoint::ImageGenerations | Endpoint::AudioSpeech, other) => {
            panic!("a media request without its ask: {other:?}")
        }
        (_, other) => assert_eq!(*other, None, "only media requests have an ask"),
    }
    // Valid JSON that `Value` cannot hold (a number beyond f64, such as
    // 1e309) is forwarded as received: nothing to compare it with.
    let Ok(received) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    let mut expected = received.clone();
    let object = expected
        .as_object_mut()
        .expect("an accepted body is an object");
    for own in ["fallbacks", "num_retries", "tags", "cache"] {
        object.remove(own);
    }
    // LiteLLM's names are taken out of `metadata` (when it is an object).
    if let Some(Value::Object(metadata)) = object.get_mut("metadata") {
        metadata.retain(|k, _| k != "turn_off_message_logging" && !k.starts_with("user_api_key_"));
    }
    let forwarded: Value = serde_json::from_slice(&req.body).unwrap_or_else(|e| {
        panic!(
            "forwarded body is not JSON ({e}): {:?}",
            String::from_utf8_lossy(&req.body)
        )
    });
    assert_eq!(forwarded, expected, "forwarded body differs");
    let model: Value = serde_json::from_slice(&req.body[req.model_span.clone()])
        .expect("model span holds a JSON value");
    assert_eq!(model, Value::String(req.model.clone()));
    let spliced: Vec<u8> = req
        .body_with_model("up/\"x\"\n")
        .iter()
        .flat_map(|b| b.to_vec())
        .collect();
    let spliced: Value = serde_json::from_slice(&spliced).expect("spliced body is JSON");
    // `metadata` is the proxy's on every endpoint but Messages (and
    // Responses): it stays home, cut as the model is spliced in.
    if endpoint != Endpoint::Messages {
        expected
            .as_object_mut()
            .expect("an object")
            .remove("metadata");
    }
    expected["model"] = Value::String("up/\"x\"\n".into());
    assert_eq!(spliced, expected, "spliced body differs");
}

/// A multipart form (`LlmRequest::parse_form`, `/v1/audio/transcriptions`
/// and `/v1/images/edits`):
/// the first line is the content type, the rest the body. An accepted form
/// has a model whose span holds its text, and the model spliced in leaves
/// every other byte of the body as received. Read as a streamed upload is
/// (its first bytes up to the first file, then the rest piece by piece),
/// the verdict is the same however the rest is cut, and a form the stream
/// accepts is one the whole reading accepts.
pub fn form(data: &[u8]) {
    let Some(newline) = data.iter().position(|b| *b == b'\n') else {
        return;
    };
    let Ok(content_type) = std::str::from_utf8(&data[..newline]) else {
        return;
    };
    let body = &data[newline + 1..];
    if let Ok(boundary) = form::boundary(content_type) {
        form_streamed(boundary, body);
    }
    // An image edit form's own checks (image parts, prompt, n, size,
    // quality), half of the time.
    let endpoint = match body.len() % 2 {
        0 => Endpoint::AudioTranscriptions,
        _ => Endpoint::ImageEdits,
    };
    let parsed = LlmRequest::parse_form(endpoint, content_type, Bytes::copy_from_slice(body));
    let Ok(req) = parsed else {
        return;
    };
    assert_eq!(&body[req.model_span.clone()], req.model.as_bytes());
    let spliced: Vec<u8> = req
        .body_with_model("up-model")
        .iter()
        .flat_map(|b| b.to_vec())
        .collect();
    let mut expected = body[..req.model_span.start].to_vec();
    expected.extend_from_slice(b"up-model");
    expected.extend_from_slice(&body[req.model_span.end..]);
    assert_eq!(spliced, expected, "the splice changed other bytes");
}

/// [`form`]'s streamed reading of `body`.
fn form_streamed(boundary: &str, body: &[u8]) {
    let Ok(Prefix::File {
        content_start,
        parts,
        ..
    }) = form::until_file(body, boundary)
    else {
        return;
    };
    let rest = &body[content_start..];
    // Only whether the stream accepts the form is compared.
    let verdict = |step: usize| -> bool {
        let mut scanner = TailScanner::new(boundary, parts, form::IMAGE_EDIT_DECIDING);
        rest.chunks(step).all(|piece| scanner.feed(piece).is_ok()) && scanner.finish().is_ok()
    };
    let whole = verdict(rest.len().max(1));
    for step in [1, 2, 3, 7, 64] {
        assert_eq!(
            verdict(step),
            whole,
            "the stream's verdict changes when cut by {step}"
        );
    }
    if whole {
        assert!(
            form::read(body, boundary).is_ok(),
            "the stream accepts a form the whole reading refuses"
        );
    }
}

/// Runs stream translator `t` over `data` cut at `cuts`: its output, or
/// the error it stopped with.
fn translate_stream(
    mut t: Box<dyn StreamTranslator>,
    data: &[u8],
    cuts: &[usize],
) -> Result<Vec<u8>, TranslateError> {
    let mut out = Vec::new();
    let mut from = 0;
    for &to in cuts.iter().chain(std::iter::once(&data.len())) {
        t.feed(&data[from..to], &mut out)?;
        from = to;
    }
    t.finish(&mut out)?;
    Ok(out)
}

/// The events of a translated stream, each with `"created"` blanked (the
/// chunks carry the second they were made).
fn translated_events(out: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(out);
    assert!(
        text.is_empty() || text.ends_with("\n\n"),
        "a translated stream ends on an event boundary: {text:?}"
    );
    text.split("\n\n")
        .map(|e| match e.find("\"created\":") {
            Some(at) => {
                let digits = e[at + 10..]
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(0);
                format!("{}{}", &e[..at + 10], &e[at + 10 + digits..])
            }
            None => e.to_string(),
        })
        .collect()
}

/// The format translators (`formats`, `providers::anthropic`): the first
/// byte picks one, the rest is its input. Any input is an answer or an
/// error, never a panic; a translated body is JSON; a translated stream is
/// the same whatever the read sizes and ends on an event boundary.
pub fn translate(data: &[u8]) {
    let Some((&pick, input)) = data.split_first() else {
        return;
    };
    let json_or_err = |r: Result<Vec<u8>, String>| {
        if let Ok(body) = r {
            serde_json::from_slice::<Value>(&body).expect("a translated body is JSON");
        }
    };
    match pick % 6 {
        0 => json_or_err(
            provider::request_from_chat(input, "claude-x", 4096)
                .map(|(b, _)| b)
                .map_err(|e| e.to_string()),
        ),
        1 => json_or_err(client::to_chat(input, "gpt-x").map_err(|e| e.to_string())),
        2 => json_or_err(provider::response_to_chat(input).map_err(|e| e.0)),
        3 => json_or_err(client::from_chat(input).map_err(|e| e.0)),
        kind => {
            let make = || -> Box<dyn StreamTranslator> {
                if kind == 4 {
                    Box::new(Events::new(provider::MessagesToChat::new(true)))
                } else {
                    Box::new(Events::new(client::ChatToMessages::new()))
                }
            };
            let whole = translate_stream(make(), input, &[]);
            let split = translate_stream(make(), input, &splits(input));
            match (whole, split) {
                (Ok(a), Ok(b)) => assert_eq!(translated_events(&a), translated_events(&b)),
                (Err(_), Err(_)) => {}
                (a, b) => panic!("the split changed the outcome: {a:?} vs {b:?}"),
            }
        }
    }
}

/// Management bodies and queries: the first byte picks `/key/generate`'s
/// body (with `duration` and `budget_duration`) or `/spend/logs`' query
/// (with its dates); any input is an answer, never a panic.
pub fn admin(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    if pick % 2 == 0 {
        let _ = gateway::api::admin_fuzz::key_body(rest);
    } else if let Ok(query) = std::str::from_utf8(rest) {
        let _ = gateway::api::admin_fuzz::spend_query(query);
    }
}

/// Config loading: any text is a config or a start-up error, never a panic.
/// `os.environ/` references resolve to fixed values.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lookup = |name: &str| {
        name.len()
            .is_multiple_of(2)
            .then(|| format!("value-of-{name}"))
    };
    let _ = gateway::config::Config::parse(std::path::Path::new("fuzz.yaml"), text, &lookup);
}

/// AWS event-stream framing and the ConverseStream translator: the decoder
/// gives the same messages (or the same error) whatever the read sizes and
/// never buffers past a message; frames built from the input (event type
/// from its first byte, the rest as payload, pieces split at 0xff) go
/// through the translator without a panic, and it fails or succeeds alike
/// whatever the read sizes.
pub fn eventstream(data: &[u8]) {
    use gateway::providers::bedrock::ConverseToChat;
    use gateway::providers::eventstream::{encode_event, Decoder};
    let decode = |cuts: &[usize]| {
        let mut d = Decoder::new();
        let mut got = Vec::new();
        let mut from = 0;
        for &to in cuts.iter().chain(std::iter::once(&data.len())) {
            d.feed(&data[from..to], &mut |m| {
                got.push(m);
                Ok(())
            })?;
            from = to;
        }
        Ok::<_, gateway::providers::eventstream::FrameError>(got)
    };
    assert_eq!(decode(&[]), decode(&splits(data)));
    const TYPES: [&str; 7] = [
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
        "unknown",
    ];
    let frames: Vec<u8> = data
        .split(|&b| b == 0xff)
        .filter(|p| !p.is_empty())
        .flat_map(|p| encode_event(TYPES[usize::from(p[0]) % TYPES.len()], &p[1..]))
        .collect();
    let translate = |cuts: &[usize]| {
        let mut t = ConverseToChat::new(true);
        let mut out = Vec::new();
        let mut from = 0;
        for &to in cuts.iter().chain(std::iter::once(&frames.len())) {
            t.feed(&frames[from..to], &mut out)?;
            from = to;
        }
        t.finish(&mut out)?;
        Ok::<_, TranslateError>(out)
    };
    let whole = translate(&[]);
    assert_eq!(whole.is_ok(), translate(&splits(&frames)).is_ok());
    if let Ok(out) = whole {
        assert!(out.ends_with(b"data: [DONE]\n\n"));
    }
}

/// Cohere's translators (`providers::cohere`): the first byte picks one,
/// the rest is its input (a client's chat, embeddings or rerank body, or
/// Cohere's chat or embed answer, or its named event stream). Any input is
/// an answer or an error, never a panic; a translated body is JSON; a
/// translated stream is the same whatever the read sizes.
pub fn cohere(data: &[u8]) {
    use gateway::providers::cohere::{
        embed, request_from_chat, rerank, response_to_chat, CohereToChat,
    };
    let Some((&pick, input)) = data.split_first() else {
        return;
    };
    let json_or_err = |r: Result<Vec<u8>, String>| {
        if let Ok(body) = r {
            serde_json::from_slice::<Value>(&body).expect("a translated body is JSON");
        }
    };
    match pick % 6 {
        0 => json_or_err(
            request_from_chat(input, "command-r")
                .map(|(b, _)| b)
                .map_err(|e| e.to_string()),
        ),
        1 => json_or_err(embed::request(input, "embed-english-v3.0").map_err(|e| e.to_string())),
        2 => json_or_err(rerank::request(input, "rerank-v3.5").map_err(|e| e.to_string())),
        3 => json_or_err(response_to_chat(input).map_err(|e| e.0)),
        4 => json_or_err(embed::to_openai(input).map_err(|e| e.0)),
        _ => {
            let make =
                || -> Box<dyn StreamTranslator> { Box::new(Events::new(CohereToChat::new(true))) };
            let whole = translate_stream(make(), input, &[]);
            let split = translate_stream(make(), input, &splits(input));
            // A stream without `message-start`'s id gets a fresh one.
            let fresh_ids = |out: &[u8]| -> Vec<String> {
                translated_events(out)
                    .into_iter()
                    .map(|e| match e.find("\"id\":\"chatcmpl-") {
                        Some(at) => {
                            let from = at + "\"id\":\"chatcmpl-".len();
                            let end = e[from..].find('"').map_or(e.len(), |n| from + n);
                            format!("{}{}", &e[..from], &e[end..])
                        }
                        None => e,
                    })
                    .collect()
            };
            match (whole, split) {
                (Ok(a), Ok(b)) => assert_eq!(fresh_ids(&a), fresh_ids(&b)),
                (Err(_), Err(_)) => {}
                (a, b) => panic!("the split changed the outcome: {a:?} vs {b:?}"),
            }
        }
    }
}

/// The response cache's readers of outside input: a streamed answer put
/// together (`cache::stream::collect`, the first byte picks chat or text
/// completions) is a JSON object, plays back (`replay`) and is put together
/// again from its playback into the same answer; the body's `cache`
/// controls parse to controls or a 400, never a panic; the bytes as a
/// request body have a key exactly when they are JSON (the key's one-pass
/// reader accepts nothing serde_json refuses).
pub fn cache(data: &[u8]) {
    use gateway::cache::{control, stream};
    let Some((&first, sse)) = data.split_first() else {
        return;
    };
    let endpoint = match first % 2 {
        0 => Endpoint::ChatCompletions,
        _ => Endpoint::Completions,
    };
    let tokens = stream::Tokens {
        prompt: u64::from(first),
        completion: 7,
    };
    if let Some(body) = stream::collect(endpoint, sse, tokens) {
        let whole: Value = serde_json::from_slice(&body).expect("a collected answer is JSON");
        assert!(whole.is_object());
        let played = stream::replay(endpoint, &body, true).expect("a collected answer plays back");
        assert!(played.ends_with(b"data: [DONE]\n\n"));
        let again = stream::collect(endpoint, &played, stream::Tokens::default())
            .expect("a playback is put together again");
        let again: Value = serde_json::from_slice(&again).unwrap();
        assert_eq!(again, whole);
    }
    let parsed = serde_json::from_slice::<Value>(sse);
    let key = gateway::cache::key::key(endpoint, "g", gateway::cache::Owner::Everyone, sse, None);
    assert_eq!(key.is_ok(), parsed.is_ok(), "{key:?} vs {parsed:?}");
    if let Ok(v) = parsed {
        let _ = control::parse(Some(&v));
        let _ = control::of_key(&v);
    }
}

/// A pass-through route's path and query (`providers::passthrough`): the
/// first line is the request path, the rest the query. An accepted path
/// names a provider, and its upstream target stays below the base path:
/// it starts with it, holds no `.`/`..` segment (plain or encoded), no
/// empty segment, no encoded slash, and no byte outside visible ASCII,
/// and the caller's Gemini `key` never survives.
pub fn pass_through(data: &[u8]) {
    use gateway::providers::passthrough::{upstream_target, PassThroughProvider};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (path, query) = text.split_once('\n').unwrap_or((text, ""));
    let Some((provider, rest)) = PassThroughProvider::parse(path) else {
        return;
    };
    let base = "/base";
    let Ok(target) = upstream_target(provider, base, rest, query, Some("upstream")) else {
        return;
    };
    assert!(target.starts_with("/base/"), "left the base: {target}");
    let (upstream_path, upstream_query) = target.split_once('?').unwrap_or((&target, ""));
    assert!(
        target.bytes().all(|b| b.is_ascii_graphic()),
        "invisible bytes: {target:?}"
    );
    let segments: Vec<&str> = upstream_path[1..].split('/').collect();
    for (i, segment) in segments.iter().enumerate() {
        let lower = segment.to_ascii_lowercase();
        let decoded = lower.replace("%2e", ".");
        assert!(decoded != "." && decoded != "..", "a dot segment: {target}");
        assert!(
            !lower.contains("%2f") && !lower.contains("%5c"),
            "an encoded slash: {target}"
        );
        assert!(
            !segment.is_empty() || i + 1 == segments.len(),
            "an empty segment: {target}"
        );
    }
    if provider == PassThroughProvider::Gemini {
        let keys: Vec<&str> = upstream_query
            .split('&')
            .filter(|p| p.split('=').next() == Some("key"))
            .collect();
        assert_eq!(
            keys,
            ["key=upstream"],
            "the caller's key survived: {target}"
        );
    }
    if provider == PassThroughProvider::VertexAi {
        // The project and location put in the path are the target's, and
        // the path stays below a version.
        let settings = gateway::deployment::VertexSettings {
            project: "proj".into(),
            location: "us-central1".into(),
            auth: None,
        };
        let rest = target.strip_prefix(base).unwrap_or(&target);
        if let Ok(path) = gateway::providers::passthrough_cloud::vertex_path(&settings, rest) {
            let p = path.split('?').next().unwrap_or_default();
            assert!(
                p.starts_with("/v1/") || p.starts_with("/v1beta1/") || !p.starts_with("/projects/"),
                "no version: {path}"
            );
            let mut parts = p.split('/');
            while let Some(s) = parts.next() {
                match s {
                    "projects" => assert_eq!(parts.next(), Some("proj"), "{path}"),
                    "locations" => assert_eq!(parts.next(), Some("us-central1"), "{path}"),
                    _ => {}
                }
            }
        }
    }
}

/// LiteLLM's rerank request read and translated for Jina, Voyage,
/// Bedrock and Vertex AI, and their answers translated back: never a
/// panic, JSON out whenever they succeed, every index within the request's
/// documents.
pub fn rerank(data: &[u8]) {
    use gateway::providers::bedrock::rerank as bedrock;
    use gateway::providers::vertex::rank as vertex;
    use gateway::providers::{http_provider, rerank};
    let Some((&pick, input)) = data.split_first() else {
        return;
    };
    let json = |r: Result<Vec<u8>, String>| -> Option<Value> {
        r.ok()
            .map(|body| serde_json::from_slice::<Value>(&body).expect("a translated body is JSON"))
    };
    let documents = usize::from(pick >> 3);
    let answer = |out: Option<Value>| {
        let Some(out) = out else { return };
        for r in out["results"].as_array().expect("results") {
            let i = r["index"].as_u64().expect("an index");
            assert!(documents == 0 || (i as usize) < documents, "{out}");
        }
    };
    let kind = |k| http_provider(k).expect("an HTTP provider");
    match pick % 7 {
        0 => {
            if let Ok(ask) = rerank::Ask::parse(input) {
                assert!(!ask.documents.is_empty() && ask.texts().count() == ask.documents.len());
            }
        }
        1 => {
            json(
                bedrock::request(input, "arn:aws:bedrock:us-west-2::foundation-model/m")
                    .map_err(|e| e.to_string()),
            );
        }
        2 => {
            json(
                vertex::request(input, "semantic-ranker-default@latest").map_err(|e| e.to_string()),
            );
        }
        3 => answer(json(bedrock::to_cohere(input, documents).map_err(|e| e.0))),
        4 => answer(json(vertex::to_cohere(input, documents).map_err(|e| e.0))),
        5 => answer(json(
            kind(gateway::deployment::ProviderKind::Jina)
                .rerank_to_cohere(input, documents)
                .expect("Jina translates")
                .map_err(|e| e.0),
        )),
        _ => answer(json(
            kind(gateway::deployment::ProviderKind::Voyage)
                .rerank_to_cohere(input, documents)
                .expect("Voyage translates")
                .map_err(|e| e.0),
        )),
    }
}

/// The Files and Batch APIs' readers (`providers::files`): the first line
/// is a method and path, the second a query, the rest a batch output
/// file. An accepted operation's upstream target stays under the API's
/// path (an id only when [`valid_id`] accepts it: no `/`, no `..`); the
/// forwarded query holds only OpenAI's paging parameters, in visible
/// ASCII; a batch output's usage is read without a panic, counting no
/// more lines than the file has; a form's dropped parts leave a form.
///
/// [`valid_id`]: gateway::providers::files::valid_id
pub fn files(data: &[u8]) {
    use gateway::providers::files::{batch_usage, forwarded_query, valid_id, FilesApi, FilesOp};
    let mut lines = data.splitn(3, |&b| b == b'\n');
    let first = std::str::from_utf8(lines.next().unwrap_or_default()).unwrap_or("");
    let query = std::str::from_utf8(lines.next().unwrap_or_default()).unwrap_or("");
    let rest = lines.next().unwrap_or_default();
    let (method, path) = first.split_once(' ').unwrap_or(("GET", first));
    // LiteLLM's `/{provider}/v1/…` form names the same operation as the
    // path after `/v1`, and a provider that is one non-empty segment.
    if let Some((provider, op)) = FilesOp::parse_scoped(method, path) {
        assert!(
            !provider.is_empty() && !provider.contains('/'),
            "{provider:?}"
        );
        let tail = &path[1 + provider.len()..];
        assert_eq!(tail.get(..4), Some("/v1/"), "{path:?}");
        assert_eq!(FilesOp::parse(method, &tail[3..]), Some(op), "{path:?}");
    }
    if let Some(op) = FilesOp::parse(method, path) {
        if op.id().is_none_or(valid_id) {
            let forwarded = forwarded_query(query);
            assert!(
                forwarded.bytes().all(|b| b.is_ascii_graphic()),
                "invisible bytes: {forwarded:?}"
            );
            for pair in forwarded.split('&').filter(|p| !p.is_empty()) {
                let name = pair.split('=').next().unwrap_or("");
                assert!(
                    ["after", "limit", "order", "purpose"].contains(&name),
                    "forwarded {name:?}"
                );
            }
            for api in [FilesApi::OpenAi, FilesApi::Azure] {
                let target = api.target("/base", op, &forwarded, "2024-10-21");
                let path = target.split('?').next().unwrap_or("");
                assert!(path.starts_with("/base/"), "left the base: {target}");
                assert!(
                    !path.split('/').any(|s| s == ".." || s == "."),
                    "a dot segment: {target}"
                );
            }
        }
    }
    let used = batch_usage(rest);
    let newlines = rest.iter().filter(|&&b| b == b'\n').count() as u64;
    assert!(
        used.lines <= newlines + 1,
        "{} lines of {newlines}",
        used.lines
    );
    // The same file as a batch's input: every line bounded by its bytes.
    for line in rest.split(|&b| b == b'\n') {
        if let Some(bound) = gateway::providers::files::input_line_bound(line) {
            assert_eq!(bound.prompt_tokens, line.len() as u64);
            assert!(bound.candidates >= 1);
        }
    }
}

/// The image generation translators of Vertex AI's Imagen and Bedrock's
/// image models (`providers::vertex::imagen`, `providers::bedrock::images`):
/// the first byte picks one, the rest is its input (a client's request or
/// the provider's answer). Any input is an answer or an error, never a
/// panic; a translated body is JSON, an answer's `data` a list of
/// `b64_json` strings.
pub fn images(data: &[u8]) {
    use gateway::providers::bedrock::images as bedrock;
    use gateway::providers::vertex::imagen;
    let Some((&pick, input)) = data.split_first() else {
        return;
    };
    let request = |r: Result<Vec<u8>, gateway::error::GatewayError>| {
        if let Ok(body) = r {
            serde_json::from_slice::<Value>(&body).expect("a translated request is JSON");
        }
    };
    let answer = |r: Result<Vec<u8>, gateway::error::GatewayError>| {
        if let Ok(body) = r {
            let v: Value = serde_json::from_slice(&body).expect("a translated answer is JSON");
            let data = v["data"].as_array().expect("a data list");
            assert!(data.iter().all(|d| d["b64_json"].is_string()), "{v}");
        }
    };
    match pick % 8 {
        0 => request(imagen::request(input)),
        1 => request(bedrock::request(input, "amazon.titan-image-generator-v2:0")),
        2 => request(bedrock::request(input, "stability.sd3-large-v1:0")),
        3 => request(bedrock::request(input, "stability.stable-diffusion-xl-v1")),
        4 => answer(imagen::to_openai(input, 1)),
        5 => answer(bedrock::to_openai(input, 1)),
        6 => request(bedrock::request(input, "amazon.nova-canvas-v1:0")),
        _ => image_count(pick, input),
    }
}

/// [`gateway::spend::ImageCount`]: the same count whole or in pieces of
/// `1 + pick / 8` bytes, and for a JSON object whose `data` (its name
/// escaped or not) is a list of objects, that list's length.
fn image_count(pick: u8, input: &[u8]) {
    use gateway::spend::ImageCount;
    let mut whole = ImageCount::default();
    whole.feed(input);
    let mut pieces = ImageCount::default();
    for piece in input.chunks(1 + usize::from(pick / 8)) {
        pieces.feed(piece);
    }
    assert_eq!(whole.images(), pieces.images(), "split changed the count");
    if let Ok(Value::Object(answer)) = serde_json::from_slice::<Value>(input) {
        if let Some(Value::Array(data)) = answer.get("data") {
            if data.iter().all(Value::is_object) {
                assert_eq!(whole.images(), data.len() as u64, "the count of `data`");
            }
        }
    }
}

/// The realtime relay's readers: WebSocket frames through
/// [`gateway::websocket::Endpoint`] (the first byte picks the side, the
/// cap and how the rest is cut into reads), the upstream's handshake
/// answer, and each message's `response.done` usage. The same messages and
/// verdict whether the bytes come whole or in pieces; no message longer
/// than the cap; a failure closes with its code (a peer reads that close
/// back); an accepted handshake answer lies in the input; usage details
/// never exceed their totals.
pub fn websocket(data: &[u8]) {
    use gateway::providers::realtime::response_done_usage;
    use gateway::websocket::{check_upgrade_answer, payload, Endpoint, Message, UpgradeAnswer};
    let (&mode, rest) = data.split_first().unwrap_or((&0, &[]));
    let cap = 16 + usize::from(mode >> 3) * 128;
    let server = mode & 1 == 0;
    let piece = 1 + usize::from((mode >> 1) & 3);
    let new = || {
        if server {
            Endpoint::server(cap)
        } else {
            Endpoint::client(cap)
        }
    };
    let run = |pieces: &mut dyn Iterator<Item = &[u8]>| {
        let mut ep = new();
        let mut got = Vec::new();
        let mut failed = None;
        'feed: for p in pieces {
            ep.feed(p);
            loop {
                match ep.next_message() {
                    Ok(Some(m)) => got.push(m),
                    Ok(None) => break,
                    Err(f) => {
                        // A side already closing keeps the close it sent.
                        let code = (!ep.closing()).then_some(f.close_code());
                        ep.fail(&f);
                        failed = Some((code, ep.take_output()));
                        break 'feed;
                    }
                }
            }
        }
        (got, failed)
    };
    let (whole, verdict) = run(&mut std::iter::once(rest));
    let (cut, cut_verdict) = run(&mut rest.chunks(piece));
    assert_eq!(whole, cut, "messages differ by read size");
    assert_eq!(
        verdict.as_ref().map(|v| v.0),
        cut_verdict.as_ref().map(|v| v.0),
        "verdict differs by read size"
    );
    for m in &whole {
        let body = payload(m).unwrap_or_default();
        assert!(
            body.len() <= cap,
            "a {}-byte message over the cap {cap}",
            body.len()
        );
        if let Some(u) = response_done_usage(body) {
            assert!(u.tokens.cached_tokens <= u.tokens.prompt_tokens);
            assert!(u.audio.input <= u.tokens.prompt_tokens);
            assert!(u.audio.cached <= u.tokens.cached_tokens);
            assert!(u.audio.output <= u.tokens.completion_tokens);
        }
    }
    if let Some((code, close)) = verdict {
        // The peer of the failed side reads the close and its code.
        let mut peer = if server {
            Endpoint::client(1024)
        } else {
            Endpoint::server(1024)
        };
        peer.feed(&close);
        // Pongs to pings read before the failure may come first.
        loop {
            match peer.next_message() {
                Ok(Some(Message::Pong(_))) => {}
                Ok(Some(Message::Close(frame))) => {
                    if let Some(code) = code {
                        assert_eq!(frame.map(|f| u16::from(f.code)), Some(code));
                    }
                    break;
                }
                other => panic!("the close did not read back: {other:?}"),
            }
        }
    }
    if let Ok(Some(UpgradeAnswer::Accepted(n) | UpgradeAnswer::Refused { head_len: n, .. })) =
        check_upgrade_answer(rest, "dGhlIHNhbXBsZSBub25jZQ==")
    {
        assert!(n <= rest.len());
    }
}

/// The readers of an upstream answer's usage, what the LLM routes and the
/// provider pass-through routes charge from (`proxy::relay`'s tap): the
/// first byte picks one, the rest is the answer (OpenAI's body, its tail
/// or its SSE stream; Anthropic's body, tail or event stream; Bedrock's,
/// Gemini's or Cohere's body). Never a panic; a stream's usage is the same
/// whatever the read sizes; whatever is read costs a finite, non-negative
/// amount at any price.
pub fn usage(data: &[u8]) {
    use gateway::providers::{anthropic, bedrock, cohere, gemini};
    use gateway::spend::{self, StreamUsage, Usage};
    let Some((&pick, input)) = data.split_first() else {
        return;
    };
    let read: Option<Usage> = match pick % 8 {
        0 => spend::from_response_body(input),
        1 => spend::from_response_tail(input),
        2 => anthropic::usage_from_body(input),
        3 => anthropic::usage_from_tail(input),
        4 => bedrock::usage_from_body(input),
        5 => gemini::usage_from_body(input),
        6 => cohere::usage_from_body(input),
        _ => {
            let openai = |cuts: &[usize]| {
                let mut u = StreamUsage::new();
                let mut from = 0;
                for &to in cuts.iter().chain(std::iter::once(&input.len())) {
                    u.feed(&input[from..to]);
                    from = to;
                }
                u.finish(|| 7)
            };
            let messages = |cuts: &[usize]| {
                let mut u = anthropic::StreamUsage::default();
                let mut from = 0;
                for &to in cuts.iter().chain(std::iter::once(&input.len())) {
                    u.feed(&input[from..to]);
                    from = to;
                }
                u.finish(|| 7)
            };
            let cuts = splits(input);
            let whole = openai(&[]);
            assert_eq!(
                whole,
                openai(&cuts),
                "an SSE stream's usage moved with its reads"
            );
            let m = messages(&[]);
            assert_eq!(
                m,
                messages(&cuts),
                "a Messages stream's usage moved with its reads"
            );
            assert_costs(m);
            Some(whole.0)
        }
    };
    if let Some(u) = read {
        assert_costs(u);
    }
}

/// What `usage` costs at a price with every part set is finite and not
/// negative (cached and cache-written tokens beyond the prompt included).
fn assert_costs(usage: gateway::spend::Usage) {
    let price = gateway::spend::Price {
        input_per_token: 2.5e-6,
        output_per_token: 1e-5,
        cache_read_per_token: Some(1.25e-6),
        cache_creation_per_token: Some(3.75e-6),
        per_second: Some(1e-4),
        per_query: Some(2e-3),
    };
    let cost = gateway::spend::cost(usage, price);
    assert!(cost.is_finite() && cost >= 0.0, "{usage:?} costs {cost}");
}
