//! Phase 7, before translating: images named by http(s) URL that the
//! pick's provider refuses are fetched (`upstream::fetch`) and put back in
//! the request as base64 data URLs, which every translator reads. Only a
//! chat completions request (the internal form) carries `image_url` parts;
//! a request without any is untouched and costs one substring search.

use crate::deployment::ProviderKind;
use crate::error::GatewayError;
use crate::inbound::{Endpoint, LlmRequest};
use crate::providers::Provider;
use crate::state::Worker;
use crate::upstream::fetch::FetchError;
use bytes::Bytes;
use memchr::memmem::Finder;
use serde_json::Value;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::LazyLock;

/// A request with its images inlined for one kind of provider, reused by
/// later attempts on the same kind.
pub(super) struct Inlined {
    kind: ProviderKind,
    /// The request with data URLs in place of the URLs.
    pub req: LlmRequest,
    /// Its body with `stream_options.include_usage` added, for providers
    /// that take it (see `spend::inject_include_usage`).
    pub with_usage: Option<Bytes>,
}

/// `sent` with the images `provider` refuses by URL inlined, made once per
/// provider kind into `memo`; `None` when there are none (send `sent`).
pub(super) async fn inline<'m>(
    worker: &Worker,
    (provider, kind): (&dyn Provider, ProviderKind),
    sent: &LlmRequest,
    usage_chunk: bool,
    memo: &'m mut Option<Box<Inlined>>,
) -> Result<Option<&'m Inlined>, GatewayError> {
    if !may_name_images(sent) {
        return Ok(None);
    }
    // Boxed: fetching is rare and its future large; inline, every
    // request's future (streams held open included) would carry its size.
    Box::pin(fetch_and_inline(
        worker,
        (provider, kind),
        sent,
        usage_chunk,
        memo,
    ))
    .await
}

/// Whether `sent` may carry `image_url` parts: one substring search, with
/// a searcher built once (building one costs more than searching 1 KB).
fn may_name_images(sent: &LlmRequest) -> bool {
    static IMAGE_URL: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"image_url"));
    sent.endpoint == Endpoint::ChatCompletions && IMAGE_URL.find(&sent.body).is_some()
}

/// [`inline`] for a request that may name images.
async fn fetch_and_inline<'m>(
    worker: &Worker,
    (provider, kind): (&dyn Provider, ProviderKind),
    sent: &LlmRequest,
    usage_chunk: bool,
    memo: &'m mut Option<Box<Inlined>>,
) -> Result<Option<&'m Inlined>, GatewayError> {
    if memo.as_ref().is_some_and(|m| m.kind == kind) {
        return Ok(memo.as_deref());
    }
    let Ok(mut body) = serde_json::from_slice::<Value>(&sent.body) else {
        return Ok(None);
    };
    let refs = image_refs(&body, provider);
    if refs.is_empty() {
        return Ok(None);
    }
    // One at a time, within one deadline and one size budget for all.
    let fetcher = &worker.images;
    let mut budget = fetcher.budget();
    let mut fetched: HashMap<&str, Result<Rc<str>, FetchError>> = HashMap::new();
    for r in &refs {
        if fetched.contains_key(r.url.as_str()) {
            continue;
        }
        let data = fetcher.data_url(&r.url, &mut budget).await;
        let failed = data.is_err();
        fetched.insert(&r.url, data);
        if failed {
            break;
        }
    }
    for r in &refs {
        // URLs after the first failure were not fetched; it comes first.
        let Some(data) = fetched.get(r.url.as_str()) else {
            break;
        };
        let data = data.as_ref().map_err(|e| GatewayError::ImageUrl {
            param: format!("messages[{}].content[{}].image_url", r.message, r.part),
            reason: e.to_string(),
        })?;
        let part = &mut body["messages"][r.message]["content"][r.part];
        match part.get_mut("image_url") {
            Some(Value::Object(image)) => {
                image.insert("url".into(), Value::String(data.to_string()));
            }
            Some(slot) => *slot = Value::String(data.to_string()),
            None => {}
        }
    }
    let bytes = Bytes::from(serde_json::to_vec(&body).expect("a JSON value serializes"));
    let mut req = LlmRequest::parse(Endpoint::ChatCompletions, bytes)?;
    req.fallbacks = sent.fallbacks.clone();
    req.num_retries = sent.num_retries;
    req.end_user = sent.end_user.clone();
    req.forward_headers = sent.forward_headers.clone();
    let with_usage = usage_chunk
        .then(|| crate::spend::inject_include_usage(&req.body))
        .flatten()
        .map(Bytes::from);
    Ok(Some(memo.insert(Box::new(Inlined {
        kind,
        req,
        with_usage,
    }))))
}

/// Where an image URL to inline is: `messages[message].content[part]`.
#[derive(Debug, PartialEq)]
struct ImageRef {
    message: usize,
    part: usize,
    url: String,
}

/// The `image_url` parts whose http(s) URL `provider` refuses.
fn image_refs(body: &Value, provider: &dyn Provider) -> Vec<ImageRef> {
    let mut refs = Vec::new();
    let messages = body.get("messages").and_then(Value::as_array);
    for (i, m) in messages.into_iter().flatten().enumerate() {
        let parts = m.get("content").and_then(Value::as_array);
        for (j, part) in parts.into_iter().flatten().enumerate() {
            if part.get("type").and_then(Value::as_str) != Some("image_url") {
                continue;
            }
            let url = match part.get("image_url") {
                Some(Value::String(s)) => s.as_str(),
                Some(v) => v.get("url").and_then(Value::as_str).unwrap_or_default(),
                None => "",
            };
            let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
            if matches!(scheme.as_deref(), Some("http" | "https"))
                && provider.inlines_image_url(url)
            {
                refs.push(ImageRef {
                    message: i,
                    part: j,
                    url: url.to_string(),
                });
            }
        }
    }
    refs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::http_provider;
    use serde_json::json;

    #[test]
    fn finds_the_urls_each_provider_refuses() {
        let body = json!({"messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "https://a/x.png"}},
                {"type": "image_url", "image_url": "HTTP://b/y.jpg"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
                {"type": "image_url", "image_url": {"url": "gs://bucket/z.png"}},
            ]},
        ]});
        let at = |part: usize, url: &str| ImageRef {
            message: 1,
            part,
            url: url.into(),
        };
        let bedrock = http_provider(ProviderKind::Bedrock).unwrap();
        assert_eq!(
            image_refs(&body, bedrock),
            vec![at(1, "https://a/x.png"), at(2, "HTTP://b/y.jpg")]
        );
        let anthropic = http_provider(ProviderKind::Anthropic).unwrap();
        assert_eq!(image_refs(&body, anthropic), vec![at(2, "HTTP://b/y.jpg")]);
        let openai = http_provider(ProviderKind::OpenAiCompatible).unwrap();
        assert!(image_refs(&body, openai).is_empty());
    }
}
