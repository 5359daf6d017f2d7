//! Image generation in the cloud providers' own APIs, with their checks
//! and shapes (credentials are checked by the caller: a Google access token
//! for Vertex AI, a SigV4 signature for Bedrock):
//!
//! - Vertex AI Imagen, `…/publishers/google/models/imagen…:predict`:
//!   exactly one instance with a non-empty string `prompt`; `parameters`
//!   with `sampleCount` 1 to 4 and `aspectRatio` one of Imagen's; answers
//!   `predictions` of `{"mimeType","bytesBase64Encoded"}`, one a sample; a
//!   prompt containing `filtered` has its last sample withheld (Imagen's
//!   `raiFilteredReason`).
//! - Bedrock InvokeModel `…/model/{id}/invoke` for Titan Image Generator
//!   (`taskType` `TEXT_IMAGE`, `textToImageParams.text` of 1 to 512
//!   characters, `imageGenerationConfig` with `numberOfImages` 1 to 5,
//!   `width`/`height` multiples of 64, `quality` `standard` or `premium`;
//!   extraneous keys refused; answers `images`), Nova Canvas (`taskType`
//!   `TEXT_IMAGE`, `COLOR_GUIDED_GENERATION` or `INPAINTING` with that
//!   task's parameters object, whose `text` is 1 to 1024 characters;
//!   `imageGenerationConfig` with `numberOfImages` 1 to 5, `width`/`height`
//!   multiples of 16 from 320 to 4096, `quality` `standard` or `premium`,
//!   `cfgScale` 1.1 to 10, `seed`; extraneous keys refused at both levels;
//!   a text containing `filtered` is AWS's 400 "blocked by our content
//!   filters"; answers `images` and `error` null), Stability SD3 / Stable
//!   Image (`prompt` required, Stability's keys only; answers `seeds`,
//!   `finish_reasons`, `images`; a prompt containing `filtered` is
//!   refused by the content filter in `finish_reasons`) and SDXL
//!   (`text_prompts` required; answers `artifacts`).

use serde_json::{json, Value};

use super::{bedrock, gemini, Reply, Usage};

/// A 1×1 transparent PNG, base64: every image the mock makes.
const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

/// Imagen's aspect ratios.
const RATIOS: [&str; 5] = ["1:1", "3:4", "4:3", "9:16", "16:9"];

/// Whether a Vertex AI model is an Imagen model.
pub fn is_imagen(model: &str) -> bool {
    model.starts_with("imagen") || model.starts_with("imagegeneration")
}

/// Answers `:predict` for an Imagen model.
pub fn imagen(body: &Value) -> Reply {
    let instances = body["instances"].as_array();
    let Some([instance]) = instances.map(Vec::as_slice) else {
        return gemini::error(400, "instances must hold exactly one instance");
    };
    let Some(prompt) = instance["prompt"].as_str().filter(|p| !p.is_empty()) else {
        return gemini::error(400, "instances[0].prompt is required");
    };
    let parameters = &body["parameters"];
    if !parameters.is_null() && !parameters.is_object() {
        return gemini::error(400, "parameters must be an object");
    }
    let samples = match &parameters["sampleCount"] {
        Value::Null => 4,
        v => match v.as_u64().filter(|n| (1..=4).contains(n)) {
            Some(n) => n,
            None => return gemini::error(400, "sampleCount must be 1 to 4"),
        },
    };
    match &parameters["aspectRatio"] {
        Value::Null => {}
        Value::String(r) if RATIOS.contains(&r.as_str()) => {}
        _ => return gemini::error(400, "aspectRatio must be one of 1:1, 3:4, 4:3, 9:16, 16:9"),
    }
    let mut predictions: Vec<Value> = (0..samples)
        .map(|_| json!({"mimeType": "image/png", "bytesBase64Encoded": PNG}))
        .collect();
    if prompt.contains("filtered") {
        if let Some(last) = predictions.last_mut() {
            *last =
                json!({"raiFilteredReason": "The image was filtered by the mock's safety filter."});
        }
    }
    Reply::ok(
        &json!({"predictions": predictions}),
        Usage {
            prompt: 0,
            completion: 0,
        },
    )
}

/// Whether a Bedrock model id is an image model the mock serves.
pub fn is_bedrock_image(id: &str) -> bool {
    id.contains("amazon.titan-image")
        || id.contains("amazon.nova-canvas")
        || id.contains("stability.")
}

/// Nova Canvas's tasks and each one's parameters object.
const NOVA_TASKS: [(&str, &str); 3] = [
    ("TEXT_IMAGE", "textToImageParams"),
    ("COLOR_GUIDED_GENERATION", "colorGuidedGenerationParams"),
    ("INPAINTING", "inpaintingParams"),
];

/// Answers InvokeModel for Amazon Nova Canvas.
fn nova_canvas(obj: &serde_json::Map<String, Value>) -> Reply {
    let malformed = |why: &str| bedrock::error(400, &format!("Malformed input request: {why}"));
    let task = obj.get("taskType").and_then(Value::as_str).unwrap_or("");
    let Some((_, params_name)) = NOVA_TASKS.iter().find(|(t, _)| *t == task) else {
        return malformed("#/taskType: TEXT_IMAGE, COLOR_GUIDED_GENERATION or INPAINTING expected");
    };
    let known = ["taskType", params_name, "imageGenerationConfig"];
    if let Some(k) = obj.keys().find(|k| !known.contains(&k.as_str())) {
        return malformed(&format!("extraneous key [{k}] is not permitted"));
    }
    let params = &obj.get(*params_name).cloned().unwrap_or(Value::Null);
    let text = params["text"].as_str().unwrap_or("");
    if text.is_empty() || text.chars().count() > 1024 {
        return malformed(&format!(
            "#/{params_name}/text: 1 to 1024 characters expected"
        ));
    }
    let config = obj
        .get("imageGenerationConfig")
        .cloned()
        .unwrap_or(json!({}));
    let Some(config) = config.as_object() else {
        return malformed("#/imageGenerationConfig: object expected");
    };
    let known = [
        "numberOfImages",
        "width",
        "height",
        "quality",
        "cfgScale",
        "seed",
    ];
    if let Some(k) = config.keys().find(|k| !known.contains(&k.as_str())) {
        return malformed(&format!(
            "#/imageGenerationConfig: extraneous key [{k}] is not permitted"
        ));
    }
    let images = match config.get("numberOfImages") {
        None => 1,
        Some(v) => match v.as_u64().filter(|n| (1..=5).contains(n)) {
            Some(n) => n,
            None => return malformed("#/imageGenerationConfig/numberOfImages: 1 to 5 expected"),
        },
    };
    for side in ["width", "height"] {
        if let Some(v) = config.get(side) {
            if !v
                .as_u64()
                .is_some_and(|n| n % 16 == 0 && (320..=4096).contains(&n))
            {
                return malformed(&format!(
                    "#/imageGenerationConfig/{side}: a multiple of 16 from 320 to 4096 expected"
                ));
            }
        }
    }
    if let Some(q) = config.get("quality") {
        if !matches!(q.as_str(), Some("standard" | "premium")) {
            return malformed("#/imageGenerationConfig/quality: standard or premium expected");
        }
    }
    if let Some(c) = config.get("cfgScale") {
        if !c.as_f64().is_some_and(|c| (1.1..=10.0).contains(&c)) {
            return malformed("#/imageGenerationConfig/cfgScale: 1.1 to 10 expected");
        }
    }
    if text.contains("filtered") {
        return bedrock::error(
            400,
            "This request has been blocked by our content filters. Please adjust your text prompt to submit a new request.",
        );
    }
    let images: Vec<&str> = (0..images).map(|_| PNG).collect();
    Reply::ok(
        &json!({"images": images, "error": null}),
        Usage {
            prompt: 0,
            completion: 0,
        },
    )
}

/// Answers InvokeModel for an image model `id`.
pub fn bedrock_invoke(id: &str, body: &Value) -> Reply {
    let Some(obj) = body.as_object() else {
        return bedrock::error(400, "Malformed input request");
    };
    let extraneous = |known: &[&str]| {
        obj.keys().find(|k| !known.contains(&k.as_str())).map(|k| {
            bedrock::error(
                400,
                &format!("Malformed input request: extraneous key [{k}] is not permitted"),
            )
        })
    };
    if id.contains("amazon.nova-canvas") {
        return nova_canvas(obj);
    }
    if id.contains("amazon.titan-image") {
        if let Some(refusal) =
            extraneous(&["taskType", "textToImageParams", "imageGenerationConfig"])
        {
            return refusal;
        }
        if obj.get("taskType").and_then(Value::as_str) != Some("TEXT_IMAGE") {
            return bedrock::error(400, "Malformed input request: taskType must be TEXT_IMAGE");
        }
        let text = body["textToImageParams"]["text"].as_str().unwrap_or("");
        if text.is_empty() || text.chars().count() > 512 {
            return bedrock::error(
                400,
                "Malformed input request: textToImageParams.text must be 1 to 512 characters",
            );
        }
        let config = &body["imageGenerationConfig"];
        let images = match &config["numberOfImages"] {
            Value::Null => 1,
            v => match v.as_u64().filter(|n| (1..=5).contains(n)) {
                Some(n) => n,
                None => {
                    return bedrock::error(
                        400,
                        "Malformed input request: numberOfImages must be 1 to 5",
                    )
                }
            },
        };
        for side in ["width", "height"] {
            if let Some(v) = config.get(side) {
                if !v
                    .as_u64()
                    .is_some_and(|n| n % 64 == 0 && (320..=4096).contains(&n))
                {
                    return bedrock::error(
                        400,
                        &format!("Malformed input request: {side} must be a multiple of 64 from 320 to 4096"),
                    );
                }
            }
        }
        if let Some(q) = config.get("quality") {
            if !matches!(q.as_str(), Some("standard" | "premium")) {
                return bedrock::error(
                    400,
                    "Malformed input request: quality must be standard or premium",
                );
            }
        }
        let images: Vec<&str> = (0..images).map(|_| PNG).collect();
        return Reply::ok(
            &json!({"images": images, "error": null}),
            Usage {
                prompt: 0,
                completion: 0,
            },
        );
    }
    if id.contains("sd3") || id.contains("stable-image") {
        if let Some(refusal) = extraneous(&[
            "prompt",
            "mode",
            "aspect_ratio",
            "negative_prompt",
            "seed",
            "output_format",
            "image",
            "strength",
        ]) {
            return refusal;
        }
        let Some(prompt) = obj
            .get("prompt")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
        else {
            return bedrock::error(
                400,
                "Malformed input request: required key [prompt] not found",
            );
        };
        if prompt.contains("filtered") {
            return Reply::ok(
                &json!({"seeds": [42], "finish_reasons": ["Filter reason: prompt"], "images": [null]}),
                Usage {
                    prompt: 0,
                    completion: 0,
                },
            );
        }
        return Reply::ok(
            &json!({"seeds": [42], "finish_reasons": [null], "images": [PNG]}),
            Usage {
                prompt: 0,
                completion: 0,
            },
        );
    }
    if let Some(refusal) = extraneous(&[
        "text_prompts",
        "width",
        "height",
        "cfg_scale",
        "seed",
        "steps",
        "style_preset",
        "sampler",
        "samples",
    ]) {
        return refusal;
    }
    let prompts = body["text_prompts"].as_array();
    if !prompts.is_some_and(|p| !p.is_empty() && p.iter().all(|t| t["text"].is_string())) {
        return bedrock::error(400, "Malformed input request: text_prompts is required");
    }
    Reply::ok(
        &json!({"result": "success", "artifacts": [{"seed": 42, "base64": PNG, "finishReason": "SUCCESS"}]}),
        Usage {
            prompt: 0,
            completion: 0,
        },
    )
}
