//! Embeddings in the providers' own APIs, with their checks and shapes:
//! Gemini's `…/models/{m}:batchEmbedContents` (API key; `requests` of
//! 1 to 100 entries whose `model` is `models/{m}` and whose `content` has
//! text parts), Vertex AI's `…/publishers/google/models/{m}:predict`
//! (Bearer token; `instances` of 1 to 250 `{"content"}`), and Bedrock's
//! InvokeModel `…/model/{id}/invoke` (SigV4; Titan `{"inputText"}`,
//! Cohere `{"texts","input_type"}`). Vectors are the mock's
//! (`embeddings::vector`). The same paths for Imagen and Bedrock's image
//! models are `cloud_images`'.

use serde_json::{json, Value};

use super::embeddings::{vector, DIMENSIONS};
use super::{bedrock, gemini, Ctx, Reply, Usage};
use crate::mock::tokens;

/// The method and model of a Google embeddings path.
pub fn google_path(path: &str) -> Option<(&str, &str)> {
    let (rest, method) = path.rsplit_once(':')?;
    if !matches!(method, "batchEmbedContents" | "predict") {
        return None;
    }
    let (_, model) = rest.rsplit_once("/models/")?;
    Some((method, model))
}

fn text_of(content: &Value) -> Option<&str> {
    let parts = content["parts"].as_array()?;
    (!parts.is_empty()).then_some(())?;
    parts
        .iter()
        .map(|p| p["text"].as_str())
        .collect::<Option<Vec<_>>>()?;
    parts[0]["text"].as_str()
}

/// Answers `:batchEmbedContents` (Gemini) or `:predict` (Vertex AI).
pub fn google(ctx: &Ctx<'_>, body: &Value) -> Reply {
    let Some((method, model)) = google_path(ctx.req.path()) else {
        return gemini::error(404, "unknown method");
    };
    if let Err(refusal) = gemini::check_credentials(ctx) {
        return refusal;
    }
    let vertex = ctx.req.path().contains("/projects/");
    if vertex && method == "predict" && super::cloud_images::is_imagen(model) {
        return super::cloud_images::imagen(body);
    }
    let texts: Vec<&str> = if vertex {
        if method != "predict" {
            return gemini::error(404, "unknown method");
        }
        let Some(instances) = body["instances"]
            .as_array()
            .filter(|i| (1..=250).contains(&i.len()))
        else {
            return gemini::error(400, "instances must hold 1 to 250 entries");
        };
        match instances
            .iter()
            .map(|i| i["content"].as_str())
            .collect::<Option<Vec<_>>>()
        {
            Some(t) => t,
            None => return gemini::error(400, "every instance needs a string content"),
        }
    } else {
        if method != "batchEmbedContents" {
            return gemini::error(404, "unknown method");
        }
        let Some(requests) = body["requests"]
            .as_array()
            .filter(|r| (1..=100).contains(&r.len()))
        else {
            return gemini::error(
                400,
                "* BatchEmbedContentsRequest.requests: must hold 1 to 100 requests",
            );
        };
        let want = format!("models/{model}");
        let mut texts = Vec::with_capacity(requests.len());
        for r in requests {
            if r["model"] != want.as_str() {
                return gemini::error(
                    400,
                    &format!(
                        "* BatchEmbedContentsRequest.model: the request's model must be {want}"
                    ),
                );
            }
            match text_of(&r["content"]) {
                Some(t) => texts.push(t),
                None => {
                    return gemini::error(
                        400,
                        "* EmbedContentRequest.content: must have text parts",
                    )
                }
            }
        }
        texts
    };
    let counts: Vec<u64> = texts.iter().map(|t| tokens::estimate(t.len())).collect();
    let prompt = counts.iter().sum();
    let answer = if vertex {
        let predictions: Vec<Value> = counts
            .iter()
            .enumerate()
            .map(|(i, n)| json!({"embeddings": {"statistics": {"truncated": false, "token_count": n}, "values": vector(i)}}))
            .collect();
        json!({"predictions": predictions, "metadata": {"billableCharacterCount": texts.iter().map(|t| t.len()).sum::<usize>()}})
    } else {
        let embeddings: Vec<Value> = (0..texts.len())
            .map(|i| json!({"values": vector(i)}))
            .collect();
        json!({ "embeddings": embeddings })
    };
    Reply::ok(
        &answer,
        Usage {
            prompt,
            completion: 0,
        },
    )
}

/// The model id of a Bedrock InvokeModel path.
pub fn invoke_path(path: &str) -> Option<String> {
    let rest = path.strip_suffix("/invoke")?;
    let (_, id) = rest.rsplit_once("/model/")?;
    bedrock::percent_decode(id)
}

/// Answers InvokeModel for Titan and Cohere embedding models.
pub fn bedrock_invoke(ctx: &Ctx<'_>, body: &Value) -> Reply {
    if let Err(refusal) = bedrock::check_signature(ctx) {
        return refusal;
    }
    let Some(id) = invoke_path(ctx.req.path()) else {
        return bedrock::error(404, "unknown operation");
    };
    if super::cloud_images::is_bedrock_image(&id) {
        return super::cloud_images::bedrock_invoke(&id, body);
    }
    let Some(obj) = body.as_object() else {
        return bedrock::error(400, "Malformed input request");
    };
    let extra = |known: &[&str]| obj.keys().find(|k| !known.contains(&k.as_str())).cloned();
    if id.contains("titan-embed") {
        if let Some(k) = extra(&["inputText", "dimensions", "normalize", "embeddingTypes"]) {
            return bedrock::error(
                400,
                &format!("Malformed input request: extraneous key [{k}] is not permitted"),
            );
        }
        let Some(text) = obj.get("inputText").and_then(Value::as_str) else {
            return bedrock::error(
                400,
                "Malformed input request: required key [inputText] not found",
            );
        };
        let n = tokens::estimate(text.len());
        let answer = json!({"embedding": vector(0), "inputTextTokenCount": n});
        return Reply::ok(
            &answer,
            Usage {
                prompt: n,
                completion: 0,
            },
        );
    }
    if id.contains("cohere.embed") {
        if let Some(k) = extra(&[
            "texts",
            "input_type",
            "truncate",
            "embedding_types",
            "images",
        ]) {
            return bedrock::error(
                400,
                &format!("Malformed input request: extraneous key [{k}] is not permitted"),
            );
        }
        let texts = obj
            .get("texts")
            .and_then(Value::as_array)
            .filter(|t| (1..=96).contains(&t.len()))
            .and_then(|t| t.iter().map(Value::as_str).collect::<Option<Vec<_>>>());
        let Some(texts) = texts else {
            return bedrock::error(
                400,
                "Malformed input request: texts must hold 1 to 96 strings",
            );
        };
        let kinds = [
            "search_document",
            "search_query",
            "classification",
            "clustering",
        ];
        if !obj
            .get("input_type")
            .and_then(Value::as_str)
            .is_some_and(|t| kinds.contains(&t))
        {
            return bedrock::error(400, "Malformed input request: input_type must be one of search_document, search_query, classification, clustering");
        }
        let embeddings: Vec<[f32; DIMENSIONS]> = (0..texts.len()).map(vector).collect();
        let prompt = texts.iter().map(|t| tokens::estimate(t.len())).sum();
        let answer = json!({"id": format!("mock-{}", ctx.id), "embeddings": embeddings, "response_type": "embeddings_floats", "texts": texts});
        return Reply::ok(
            &answer,
            Usage {
                prompt,
                completion: 0,
            },
        );
    }
    bedrock::error(
        400,
        &format!("The provided model identifier is invalid: {id}"),
    )
}
