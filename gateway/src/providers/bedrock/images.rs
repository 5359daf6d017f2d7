//! OpenAI's image generation on Bedrock's image models through
//! InvokeModel (`POST {endpoint}/model/{model-id}/invoke`, SigV4), as
//! LiteLLM translates it, for three families:
//!
//! - Amazon Titan Image Generator (`amazon.titan-image…`): `taskType`
//!   `TEXT_IMAGE`, `textToImageParams.text` the prompt (`negativeText`
//!   when given), `imageGenerationConfig` with `numberOfImages` = `n`,
//!   `width` and `height` from `size`, `quality` `premium` for OpenAI's
//!   `hd`/`high`/`premium` and `standard` for `standard`/`medium`/`low`
//!   (and Titan's `cfgScale`, `seed` when given); the answer's `images`.
//! - Amazon Nova Canvas (`amazon.nova-canvas…`): `taskType` (`TEXT_IMAGE`
//!   unless the request names `COLOR_GUIDED_GENERATION` or `INPAINTING`),
//!   that task's parameters object (`textToImageParams`,
//!   `colorGuidedGenerationParams`, `inpaintingParams`: the request's own,
//!   with `text` the prompt) and `imageGenerationConfig` (the request's
//!   own, with `numberOfImages` = `n`, `width`/`height` from `size`,
//!   `quality` as Titan's, and `cfgScale`, `seed` when given); the
//!   answer's `images` (an `error` without images is a content-policy
//!   400).
//! - Stability AI's SD3 and Stable Image models (`stability.sd3…`,
//!   `stability.stable-image…`): `prompt`, with Stability's own fields
//!   when given (`aspect_ratio`, `mode`, `negative_prompt`, `seed`,
//!   `output_format`); no OpenAI field maps (LiteLLM maps none). The
//!   answer's `images`; a `finish_reasons` entry (a content filter) is a
//!   400 of the content-policy class, as LiteLLM raises it.
//! - Stability's SDXL (`stability.stable-diffusion-xl…`): `text_prompts`
//!   of the prompt with weight 1, `width` and `height` from `size`, and
//!   `cfg_scale`, `seed`, `steps`, `style_preset`, `sampler` when given;
//!   the answer's `artifacts` (`base64`).
//!
//! Stability's models make one image a call: `n` above 1 is a 400 (the
//! gateway bills per image asked). The answer is OpenAI's `created` and
//! `data` of `b64_json`.

use crate::error::{ErrorClass, GatewayError};
use serde_json::{json, Map, Value};

/// An image model family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Titan,
    NovaCanvas,
    Stability3,
    StabilityXl,
}

/// The family of a Bedrock model id (LiteLLM's order of checks).
fn family(model: &str) -> Option<Family> {
    if model.contains("amazon.titan-image") {
        Some(Family::Titan)
    } else if model.contains("amazon.nova-canvas") {
        Some(Family::NovaCanvas)
    } else if !model.contains("stability.") {
        None
    } else if model.contains("sd3") || model.contains("stable-image") {
        Some(Family::Stability3)
    } else {
        Some(Family::StabilityXl)
    }
}

/// Whether a Bedrock model id names an image model the gateway translates.
pub fn is_image_model(model: &str) -> bool {
    family(model).is_some()
}

/// `width` and `height` of a `{width}x{height}` size.
fn dimensions(size: Option<&str>) -> Option<(u64, u64)> {
    let (w, h) = size?.split_once(['x', 'X'])?;
    Some((w.trim().parse().ok()?, h.trim().parse().ok()?))
}

/// The InvokeModel body for OpenAI's image generation request `body` on
/// `model`.
pub fn request(body: &[u8], model: &str) -> Result<Vec<u8>, GatewayError> {
    let ask: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    let prompt = ask
        .get("prompt")
        .and_then(Value::as_str)
        .ok_or(GatewayError::MissingParam("prompt"))?;
    let n = ask.get("n").and_then(Value::as_u64).unwrap_or(1);
    let size = dimensions(ask.get("size").and_then(Value::as_str));
    let copy = |out: &mut Map<String, Value>, names: &[&str]| {
        for name in names {
            if let Some(v) = ask.get(*name).filter(|v| !v.is_null()) {
                out.insert((*name).into(), v.clone());
            }
        }
    };
    let family = family(model).ok_or_else(|| GatewayError::InvalidParam {
        param: "model",
        message: format!("bedrock model {model:?} is not an image model"),
    })?;
    if matches!(family, Family::Stability3 | Family::StabilityXl) && n > 1 {
        return Err(GatewayError::InvalidParam {
            param: "n",
            message: format!("bedrock model {model:?} makes one image a request"),
        });
    }
    // Titan's and Nova Canvas's `imageGenerationConfig`, over `base`.
    let config = |mut config: Map<String, Value>| {
        config.insert("numberOfImages".into(), n.into());
        if let Some((w, h)) = size {
            config.insert("width".into(), w.into());
            config.insert("height".into(), h.into());
        }
        let quality = match ask.get("quality").and_then(Value::as_str) {
            Some("hd" | "premium" | "high") => Some("premium"),
            Some("standard" | "medium" | "low") => Some("standard"),
            _ => None,
        };
        if let Some(q) = quality {
            config.insert("quality".into(), q.into());
        }
        copy(&mut config, &["cfgScale", "seed"]);
        config
    };
    let out = match family {
        Family::NovaCanvas => nova_canvas(&ask, prompt, config)?,
        Family::Titan => {
            let config = config(Map::new());
            let mut text = json!({"text": prompt});
            if let Some(negative) = ask.get("negativeText").filter(|v| !v.is_null()) {
                text["negativeText"] = negative.clone();
            }
            json!({"taskType": "TEXT_IMAGE", "textToImageParams": text, "imageGenerationConfig": config})
        }
        Family::Stability3 => {
            let mut out = Map::new();
            out.insert("prompt".into(), prompt.into());
            copy(
                &mut out,
                &[
                    "aspect_ratio",
                    "mode",
                    "negative_prompt",
                    "seed",
                    "output_format",
                ],
            );
            Value::Object(out)
        }
        Family::StabilityXl => {
            let mut out = Map::new();
            out.insert(
                "text_prompts".into(),
                json!([{"text": prompt, "weight": 1}]),
            );
            if let Some((w, h)) = size {
                out.insert("width".into(), w.into());
                out.insert("height".into(), h.into());
            }
            copy(
                &mut out,
                &["cfg_scale", "seed", "steps", "style_preset", "sampler"],
            );
            Value::Object(out)
        }
    };
    Ok(out.to_string().into_bytes())
}

/// Nova Canvas's tasks and the name of each one's parameters object.
const NOVA_TASKS: [(&str, &str); 3] = [
    ("TEXT_IMAGE", "textToImageParams"),
    ("COLOR_GUIDED_GENERATION", "colorGuidedGenerationParams"),
    ("INPAINTING", "inpaintingParams"),
];

/// Nova Canvas's body for `ask`: its task, the task's parameters with
/// `text` the prompt (the prompt wins, so the text generated from is the
/// one the gateway's checks read), and `config` made over the request's
/// own `imageGenerationConfig`.
fn nova_canvas(
    ask: &Map<String, Value>,
    prompt: &str,
    config: impl Fn(Map<String, Value>) -> Map<String, Value>,
) -> Result<Value, GatewayError> {
    let object = |name: &'static str| match ask.get(name) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(o)) => Ok(o.clone()),
        Some(_) => Err(GatewayError::InvalidParam {
            param: name,
            message: format!("{name} must be an object"),
        }),
    };
    let task = match ask.get("taskType") {
        None | Some(Value::Null) => "TEXT_IMAGE",
        Some(Value::String(t)) => t.as_str(),
        Some(_) => "",
    };
    let (task, params_name) = NOVA_TASKS
        .iter()
        .find(|(name, _)| *name == task)
        .ok_or_else(|| GatewayError::InvalidParam {
            param: "taskType",
            message: "taskType must be TEXT_IMAGE, COLOR_GUIDED_GENERATION or INPAINTING".into(),
        })?;
    let mut params = object(params_name)?;
    params.insert("text".into(), prompt.into());
    let mut out = Map::new();
    out.insert("taskType".into(), (*task).into());
    out.insert((*params_name).into(), Value::Object(params));
    out.insert(
        "imageGenerationConfig".into(),
        Value::Object(config(object("imageGenerationConfig")?)),
    );
    Ok(Value::Object(out))
}

/// OpenAI's image answer (created at `created`, Unix seconds) for an
/// InvokeModel answer of an image model.
pub fn to_openai(body: &[u8], created: i64) -> Result<Vec<u8>, GatewayError> {
    let bad = |reason: &str| GatewayError::UpstreamProtocol {
        provider: "bedrock".into(),
        reason: reason.to_string(),
    };
    let answer: Value = serde_json::from_slice(body).map_err(|_| bad("the answer is not JSON"))?;
    let filtered: Vec<&str> = answer["finish_reasons"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !filtered.is_empty() {
        return Err(GatewayError::Upstream {
            status: 400,
            message: filtered.join("; "),
            error_type: Some("ValidationException".into()),
            provider_code: None,
            upstream_param: None,
            retry_after: None,
            class: ErrorClass::ContentPolicy,
        });
    }
    let refused = answer["error"].as_str().filter(|e| !e.is_empty());
    let none = answer["images"].as_array().is_none_or(Vec::is_empty);
    if let (Some(reason), true) = (refused, none) {
        // Nova Canvas says why it made nothing.
        return Err(GatewayError::Upstream {
            status: 400,
            message: reason.to_string(),
            error_type: Some("ValidationException".into()),
            provider_code: None,
            upstream_param: None,
            retry_after: None,
            class: ErrorClass::ContentPolicy,
        });
    }
    let images: Vec<&str> = if let Some(images) = answer.get("images") {
        images
            .as_array()
            .ok_or_else(|| bad("`images` is not a list"))?
            .iter()
            .map(|i| i.as_str().ok_or_else(|| bad("an image is not a string")))
            .collect::<Result<_, _>>()?
    } else if let Some(artifacts) = answer.get("artifacts") {
        artifacts
            .as_array()
            .ok_or_else(|| bad("`artifacts` is not a list"))?
            .iter()
            .map(|a| {
                a["base64"]
                    .as_str()
                    .ok_or_else(|| bad("an artifact has no base64"))
            })
            .collect::<Result<_, _>>()?
    } else {
        return Err(bad("the answer has no `images` or `artifacts`"));
    };
    let data: Vec<Value> = images.iter().map(|i| json!({"b64_json": i})).collect();
    Ok(json!({"created": created, "data": data})
        .to_string()
        .into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(out: Result<Vec<u8>, GatewayError>) -> Value {
        serde_json::from_slice(&out.unwrap()).unwrap()
    }

    #[test]
    fn families_get_their_own_bodies() {
        let ask = br#"{"model":"m","prompt":"a fox","n":2,"size":"1024x768","quality":"hd","seed":7,"user":"u"}"#;
        assert_eq!(
            body(request(ask, "amazon.titan-image-generator-v2:0")),
            json!({"taskType": "TEXT_IMAGE", "textToImageParams": {"text": "a fox"},
                   "imageGenerationConfig": {"numberOfImages": 2, "width": 1024, "height": 768, "quality": "premium", "seed": 7}})
        );
        let one =
            br#"{"model":"m","prompt":"a fox","size":"1024x768","seed":7,"aspect_ratio":"16:9"}"#;
        assert_eq!(
            body(request(one, "stability.sd3-large-v1:0")),
            json!({"prompt": "a fox", "aspect_ratio": "16:9", "seed": 7})
        );
        assert_eq!(
            body(request(one, "stability.stable-diffusion-xl-v1")),
            json!({"text_prompts": [{"text": "a fox", "weight": 1}], "width": 1024, "height": 768, "seed": 7})
        );
        assert_eq!(
            body(request(ask, "amazon.nova-canvas-v1:0")),
            json!({"taskType": "TEXT_IMAGE", "textToImageParams": {"text": "a fox"},
                   "imageGenerationConfig": {"numberOfImages": 2, "width": 1024, "height": 768, "quality": "premium", "seed": 7}})
        );
        let guided = br##"{"model":"m","prompt":"a fox","taskType":"COLOR_GUIDED_GENERATION","colorGuidedGenerationParams":{"colors":["#FF0000"],"text":"other"},"imageGenerationConfig":{"cfgScale":6.5,"numberOfImages":4}}"##;
        assert_eq!(
            body(request(guided, "us.amazon.nova-canvas-v1:0")),
            json!({"taskType": "COLOR_GUIDED_GENERATION",
                   "colorGuidedGenerationParams": {"colors": ["#FF0000"], "text": "a fox"},
                   "imageGenerationConfig": {"cfgScale": 6.5, "numberOfImages": 1}})
        );
        for bad in [
            br#"{"prompt":"x","taskType":"OUTPAINTING"}"#.as_slice(),
            br#"{"prompt":"x","taskType":7}"#,
            br#"{"prompt":"x","imageGenerationConfig":[1]}"#,
            br#"{"prompt":"x","textToImageParams":"t"}"#,
        ] {
            assert_eq!(
                request(bad, "amazon.nova-canvas-v1:0")
                    .unwrap_err()
                    .status(),
                400
            );
        }
        assert!(is_image_model("amazon.nova-canvas-v1:0"));
        let err = request(ask, "stability.stable-image-ultra-v1:0").unwrap_err();
        assert_eq!(err.status(), 400);
        assert!(request(ask, "amazon.titan-embed-text-v2:0").is_err());
        assert!(is_image_model("us.stability.stable-image-core-v1:1"));
        assert!(!is_image_model("anthropic.claude-3-haiku"));
    }

    #[test]
    fn answers_become_openais() {
        let titan = body(to_openai(br#"{"images":["AAA","BBB"],"error":null}"#, 5));
        assert_eq!(
            titan,
            json!({"created": 5, "data": [{"b64_json": "AAA"}, {"b64_json": "BBB"}]})
        );
        let sd3 = body(to_openai(
            br#"{"seeds":[1],"finish_reasons":[null],"images":["CCC"]}"#,
            5,
        ));
        assert_eq!(sd3["data"], json!([{"b64_json": "CCC"}]));
        let xl = body(to_openai(
            br#"{"result":"success","artifacts":[{"seed":1,"base64":"DDD","finishReason":"SUCCESS"}]}"#,
            5,
        ));
        assert_eq!(xl["data"], json!([{"b64_json": "DDD"}]));
        let filtered = to_openai(
            br#"{"seeds":[1],"finish_reasons":["Filter reason: prompt"],"images":[null]}"#,
            5,
        )
        .unwrap_err();
        assert_eq!(
            (filtered.status(), filtered.class()),
            (400, ErrorClass::ContentPolicy)
        );
        assert!(to_openai(b"{}", 5).is_err());
        let nova = body(to_openai(br#"{"images":["EEE"],"error":null}"#, 5));
        assert_eq!(nova["data"], json!([{"b64_json": "EEE"}]));
        let blocked =
            to_openai(br#"{"images":[],"error":"blocked by content filters"}"#, 5).unwrap_err();
        assert_eq!(
            (blocked.status(), blocked.class()),
            (400, ErrorClass::ContentPolicy)
        );
    }
}
