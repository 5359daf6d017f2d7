//! OpenAI's image generation on Vertex AI's Imagen models
//! (`vertex_ai/imagen-…`, `vertex_ai/imagegeneration@…`) through the
//! predict API, as LiteLLM translates it.
//!
//! The request is a `POST …/publishers/google/models/{model}:predict`
//! (the chat models' path with method `predict`, see `vertex`) with the
//! deployment's Google access token. Its body: `instances` with the one
//! `prompt`, and `parameters`: `sampleCount` = `n` (1 when absent),
//! `aspectRatio` the ratio of Imagen's (`1:1`, `3:4`, `4:3`, `9:16`,
//! `16:9`) nearest to `size`, and Imagen's own parameters when the request
//! names them (`negativePrompt`, `seed`, `personGeneration`,
//! `safetySetting`, `addWatermark`, `enhancePrompt`, `sampleImageSize`,
//! `language`, `outputOptions`, and an explicit `aspectRatio`). OpenAI's
//! other fields (`quality`, `style`, `response_format`, `user`) have no
//! Imagen counterpart and are left out (Imagen answers base64 only). The
//! answer's `predictions` with `bytesBase64Encoded` become OpenAI's
//! `data` of `b64_json` (with `revised_prompt` when Imagen rewrote the
//! prompt); predictions withheld by Imagen's filters are not images.

use crate::error::GatewayError;
use serde_json::{json, Map, Value};

/// Imagen's own parameters, passed as the request names them.
const OWN_PARAMETERS: [&str; 10] = [
    "negativePrompt",
    "seed",
    "personGeneration",
    "safetySetting",
    "addWatermark",
    "enhancePrompt",
    "sampleImageSize",
    "language",
    "outputOptions",
    "aspectRatio",
];

/// Imagen's aspect ratios and their width over height.
const RATIOS: [(&str, f64); 5] = [
    ("1:1", 1.0),
    ("3:4", 0.75),
    ("4:3", 4.0 / 3.0),
    ("9:16", 9.0 / 16.0),
    ("16:9", 16.0 / 9.0),
];

/// Whether a Vertex AI model is an Imagen model (served through `predict`).
pub fn is_imagen(model: &str) -> bool {
    model.starts_with("imagen") || model.starts_with("imagegeneration")
}

/// The aspect ratio of Imagen's nearest to `size` (`{width}x{height}`), as
/// LiteLLM picks it (smallest distance of the ratios' logarithms); `None`
/// for a size that names no dimensions (`auto`).
fn aspect_ratio(size: &str) -> Option<&'static str> {
    let (w, h) = size.split_once(['x', 'X'])?;
    let (w, h): (f64, f64) = (w.trim().parse().ok()?, h.trim().parse().ok()?);
    if !(w.is_finite() && h.is_finite() && w > 0.0 && h > 0.0) {
        return None;
    }
    let wanted = (w / h).ln();
    RATIOS
        .iter()
        .min_by(|a, b| {
            (a.1.ln() - wanted)
                .abs()
                .total_cmp(&(b.1.ln() - wanted).abs())
        })
        .map(|(name, _)| *name)
}

/// The predict body for OpenAI's image generation request `body`.
pub fn request(body: &[u8]) -> Result<Vec<u8>, GatewayError> {
    let ask: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    let prompt = ask
        .get("prompt")
        .and_then(Value::as_str)
        .ok_or(GatewayError::MissingParam("prompt"))?;
    let mut parameters = Map::new();
    let n = ask.get("n").and_then(Value::as_u64).unwrap_or(1);
    parameters.insert("sampleCount".into(), n.into());
    if let Some(ratio) = ask
        .get("size")
        .and_then(Value::as_str)
        .and_then(aspect_ratio)
    {
        parameters.insert("aspectRatio".into(), ratio.into());
    }
    for name in OWN_PARAMETERS {
        if let Some(v) = ask.get(name).filter(|v| !v.is_null()) {
            parameters.insert(name.into(), v.clone());
        }
    }
    let out = json!({"instances": [{"prompt": prompt}], "parameters": parameters});
    Ok(out.to_string().into_bytes())
}

/// OpenAI's image answer (created at `created`, Unix seconds) for a
/// predict answer.
pub fn to_openai(body: &[u8], created: i64) -> Result<Vec<u8>, GatewayError> {
    let answer: Value =
        serde_json::from_slice(body).map_err(|e| GatewayError::UpstreamProtocol {
            provider: "vertex_ai".into(),
            reason: format!("the predict answer is not JSON: {e}"),
        })?;
    let predictions = match answer.get("predictions") {
        Some(Value::Array(p)) => p.as_slice(),
        // Every image withheld: Google leaves the list out.
        None | Some(Value::Null) => &[],
        Some(_) => {
            return Err(GatewayError::UpstreamProtocol {
                provider: "vertex_ai".into(),
                reason: "the predict answer's `predictions` is not a list".into(),
            })
        }
    };
    let data: Vec<Value> = predictions
        .iter()
        .filter_map(|p| {
            let image = p.get("bytesBase64Encoded")?.as_str()?;
            let mut out = json!({"b64_json": image});
            if let Some(prompt) = p.get("prompt").and_then(Value::as_str) {
                out["revised_prompt"] = prompt.into();
            }
            Some(out)
        })
        .collect();
    Ok(json!({"created": created, "data": data})
        .to_string()
        .into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_become_imagens_nearest_aspect_ratio() {
        assert_eq!(aspect_ratio("1024x1024"), Some("1:1"));
        assert_eq!(aspect_ratio("1792x1024"), Some("16:9"));
        assert_eq!(aspect_ratio("1024x1536"), Some("3:4"));
        assert_eq!(aspect_ratio("768x1408"), Some("9:16"));
        assert_eq!(aspect_ratio("auto"), None);
        assert_eq!(aspect_ratio("0x5"), None);
    }

    #[test]
    fn requests_and_answers_follow_the_predict_api() {
        let body = br#"{"model":"imagen","prompt":"a red fox","n":2,"size":"1792x1024","quality":"hd","negativePrompt":"blur","user":"u1"}"#;
        let out: Value = serde_json::from_slice(&request(body).unwrap()).unwrap();
        assert_eq!(
            out,
            json!({"instances": [{"prompt": "a red fox"}],
                   "parameters": {"sampleCount": 2, "aspectRatio": "16:9", "negativePrompt": "blur"}})
        );
        let answer = br#"{"predictions":[{"mimeType":"image/png","bytesBase64Encoded":"iVBO"},{"raiFilteredReason":"filtered"},{"bytesBase64Encoded":"AAAA","prompt":"a fox, red"}]}"#;
        let out: Value = serde_json::from_slice(&to_openai(answer, 7).unwrap()).unwrap();
        assert_eq!(
            out,
            json!({"created": 7, "data": [{"b64_json": "iVBO"}, {"b64_json": "AAAA", "revised_prompt": "a fox, red"}]})
        );
        let none: Value = serde_json::from_slice(&to_openai(b"{}", 1).unwrap()).unwrap();
        assert_eq!(none["data"], json!([]));
        assert!(to_openai(br#"{"predictions":3}"#, 1).is_err());
    }
}
