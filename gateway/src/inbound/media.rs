//! The fields the price of a media request depends on: an image
//! generation's (`/v1/images/generations`) or edit's (`/v1/images/edits`,
//! from its form) count, size and quality; a
//! speech request's (`/v1/audio/speech`) characters.

use crate::error::GatewayError;
use serde::Deserialize;

/// Longest `size` or `quality` accepted, in bytes (OpenAI's longest value
/// is nine).
const MAX_FIELD_BYTES: usize = 32;
/// Largest image side read from `size`, in pixels.
const MAX_SIDE: u64 = 100_000;

/// What a media request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MediaAsk {
    /// An image generation.
    Image(ImageAsk),
    /// Text to speech: the characters of `input` that are not white space
    /// (what LiteLLM bills per character).
    Speech {
        /// Characters billed.
        characters: u64,
    },
}

/// What an image generation asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageAsk {
    /// `n`: images asked for (1 when absent).
    pub n: u64,
    /// `size` as `width` and `height` when it names them (`1024x1024`);
    /// `None` when absent or another value (`auto`).
    pub size: Option<(u64, u64)>,
    /// `quality` (`standard`, `hd`, `low`, `medium`, `high`, `auto`), as sent.
    pub quality: Option<String>,
}

/// The members read (other members are skipped).
#[derive(Deserialize)]
struct View {
    size: Option<serde_json::Value>,
    quality: Option<serde_json::Value>,
}

/// A string member (`null`: absent) of at most [`MAX_FIELD_BYTES`],
/// without control characters.
fn checked<'a>(
    param: &'static str,
    v: &'a Option<serde_json::Value>,
) -> Result<Option<&'a str>, GatewayError> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s))
            if s.len() <= MAX_FIELD_BYTES && !s.chars().any(char::is_control) =>
        {
            Ok(Some(s))
        }
        Some(_) => Err(GatewayError::InvalidParam {
            param,
            message: format!("must be a short string such as {}", example(param)),
        }),
    }
}

fn example(param: &str) -> &'static str {
    if param == "size" {
        "\"1024x1024\""
    } else {
        "\"standard\" or \"high\""
    }
}

/// `WIDTHxHEIGHT` (also LiteLLM's `WIDTH-x-HEIGHT`), each side 1 to
/// [`MAX_SIDE`].
fn dimensions(size: &str) -> Option<(u64, u64)> {
    let (w, h) = size.split_once("-x-").or_else(|| size.split_once('x'))?;
    let side = |s: &str| s.parse::<u64>().ok().filter(|v| (1..=MAX_SIDE).contains(v));
    Some((side(w)?, side(h)?))
}

/// The characters of a speech request's `input` (a JSON string's raw
/// text, quotes included) that LiteLLM bills: those that are not white
/// space.
pub(super) fn speech(raw_input: &str) -> Result<MediaAsk, GatewayError> {
    let input: String =
        serde_json::from_str(raw_input).map_err(|_| GatewayError::InvalidParam {
            param: "input",
            message: "must be a string".into(),
        })?;
    let characters = input.chars().filter(|c| !c.is_whitespace()).count() as u64;
    Ok(MediaAsk::Speech { characters })
}

/// The image ask of an image edit's form fields: `n` (checked by the
/// caller), `size` and `quality` (short strings).
pub(super) fn form_image(
    n: Option<u64>,
    size: Option<&str>,
    quality: Option<&str>,
) -> Result<ImageAsk, GatewayError> {
    let as_value = |v: Option<&str>| v.map(|s| serde_json::Value::String(s.to_string()));
    let (size, quality) = (as_value(size), as_value(quality));
    let size = checked("size", &size)?;
    let quality = checked("quality", &quality)?;
    Ok(ImageAsk {
        n: n.unwrap_or(1),
        size: size.and_then(dimensions),
        quality: quality.map(str::to_string),
    })
}

/// Reads `size` and `quality` of `body` (a JSON object already parsed once
/// for its routing fields); `n` is the routing fields' (checked there).
pub(super) fn read(body: &[u8], n: Option<u64>) -> Result<ImageAsk, GatewayError> {
    let view: View =
        serde_json::from_slice(body).map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    let size = checked("size", &view.size)?;
    let quality = checked("quality", &view.quality)?;
    Ok(ImageAsk {
        n: n.unwrap_or(1),
        size: size.and_then(dimensions),
        quality: quality.map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_count_size_and_quality() {
        let ask = read(
            br#"{"prompt":"x","size":"1792x1024","quality":"hd"}"#,
            Some(2),
        )
        .unwrap();
        assert_eq!(
            ask,
            ImageAsk {
                n: 2,
                size: Some((1792, 1024)),
                quality: Some("hd".into())
            }
        );
        let ask = read(br#"{"prompt":"x","size":"auto"}"#, None).unwrap();
        assert_eq!((ask.n, ask.size, ask.quality), (1, None, None));
        assert_eq!(dimensions("256-x-256"), Some((256, 256)));
        assert_eq!(dimensions("0x5"), None);
        assert_eq!(dimensions("100001x5"), None);
    }

    #[test]
    fn speech_bills_characters_that_are_not_white_space() {
        assert_eq!(
            speech(r#""Hi there,\n world""#).unwrap(),
            MediaAsk::Speech { characters: 13 }
        );
        assert!(speech("[1]").is_err());
    }

    #[test]
    fn wrong_types_and_long_values_name_the_field() {
        for (body, param) in [
            (&br#"{"size":1024}"#[..], "size"),
            (br#"{"quality":true}"#, "quality"),
            (
                br#"{"quality":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}"#,
                "quality",
            ),
        ] {
            match read(body, None) {
                Err(GatewayError::InvalidParam { param: p, .. }) => assert_eq!(p, param),
                other => panic!("{other:?}"),
            }
        }
    }
}
