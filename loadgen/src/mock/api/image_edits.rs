//! `POST …/images/edits`: OpenAI's image edit API, a `multipart/form-data`
//! body with its checks: an `image` part (`image[]` for several; `png`,
//! `jpeg` or `webp` files), `prompt` required, `dall-e-3` refused (it does
//! not edit), then the same checks and answers as image generation (`n`,
//! `size`, `quality` among the family's values, `gpt-image` token usage).

use serde_json::{json, Map, Value};

use super::{image_generations, Ctx, Reply};

const FORMATS: &[&str] = &["png", "jpg", "jpeg", "webp"];

fn invalid(param: &str, message: &str) -> Reply {
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": null}});
    Reply::json(400, serde_json::to_vec(&body).unwrap_or_default())
}

/// Answers an image edit request (its body is the raw form).
pub fn handle(ctx: &Ctx<'_>) -> Reply {
    let content_type = ctx.req.header("content-type").unwrap_or("");
    if !content_type.starts_with("multipart/form-data") {
        return invalid(
            "",
            &format!("Invalid Content-Type header ({content_type}), expected multipart/form-data."),
        );
    }
    let parts = match super::transcriptions::parts(content_type, &ctx.req.body) {
        Ok(p) => p,
        Err(why) => return invalid("", &format!("Could not parse multipart form: {why}")),
    };
    let images: Vec<_> = parts
        .iter()
        .filter(|p| (p.name == "image" || p.name == "image[]") && p.filename.is_some())
        .collect();
    if images.is_empty() {
        return invalid("image", "Missing required parameter: 'image'.");
    }
    for image in &images {
        let name = image.filename.as_deref().unwrap_or("");
        let extension = name.rsplit('.').next().unwrap_or("").to_ascii_lowercase();
        if !FORMATS.contains(&extension.as_str()) {
            return invalid(
                "image",
                &format!("Invalid file '{name}': unsupported mimetype. Supported file formats are 'image/jpeg', 'image/png', and 'image/webp'."),
            );
        }
    }
    // The text fields as the JSON body image generation reads.
    let mut fields = Map::new();
    for part in parts.iter().filter(|p| p.filename.is_none()) {
        let text = String::from_utf8_lossy(part.content).to_string();
        let value = match part.name.as_str() {
            "n" => text.parse::<u64>().map_or(Value::String(text), Value::from),
            _ => Value::String(text),
        };
        fields.insert(part.name.clone(), value);
    }
    if fields
        .get("model")
        .and_then(Value::as_str)
        .is_some_and(|m| m.contains("dall-e-3"))
    {
        return invalid(
            "model",
            "Invalid model dall-e-3. The model does not support image edits.",
        );
    }
    image_generations::handle(ctx, &Value::Object(fields))
}
