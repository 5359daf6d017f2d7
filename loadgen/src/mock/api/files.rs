//! OpenAI's Files API (`…/files`, `…/files/{id}`, `…/files/{id}/content`)
//! and Batch API (`…/batches`, `…/batches/{id}`, `…/batches/{id}/cancel`)
//! with their checks: a Bearer key (Azure paths under `/openai/`: an
//! `api-key` header and an `api-version` query parameter), a multipart
//! upload with a `file` part (with a file name) and a `purpose` among
//! OpenAI's, a `batch` file of JSON lines each with `custom_id`, `method`,
//! `url` and `body`, and no field OpenAI does not know (`model`,
//! `custom_llm_provider` are LiteLLM's, never OpenAI's); a batch needs an existing `batch` input file, a
//! supported `endpoint` and `completion_window: "24h"`. Objects have the
//! real shapes (`object: "file"`, `object: "batch"`, lists with `first_id`,
//! `last_id`, `has_more`). A batch is `validating` when created and
//! `completed` from its first retrieval on, with an output file of one
//! line per request: a chat completion (or embedding) with its `usage`
//! (prompt tokens: the request body's bytes / 4 + 1; completion tokens:
//! 7), as OpenAI's output files carry it. Every call that gets past the
//! credential check is counted in the stats (no tokens) under its key,
//! whatever its answer.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::{json, Value};

use super::transcriptions::parts;
use super::{Body, Event, Reply};
use crate::mock::http::Request;

/// OpenAI's upload purposes.
const PURPOSES: &[&str] = &[
    "assistants",
    "batch",
    "fine-tune",
    "vision",
    "user_data",
    "evals",
];

/// Endpoints a batch may target.
const ENDPOINTS: &[&str] = &[
    "/v1/chat/completions",
    "/v1/embeddings",
    "/v1/completions",
    "/v1/responses",
];

/// Fields an upload form may have.
const UPLOAD_FIELDS: &[&str] = &[
    "file",
    "purpose",
    "expires_after[anchor]",
    "expires_after[seconds]",
];

/// Fields a batch creation may have.
const BATCH_FIELDS: &[&str] = &[
    "input_file_id",
    "endpoint",
    "completion_window",
    "metadata",
    "output_expires_after",
];

/// Completion tokens of each answered batch line.
const LINE_COMPLETION_TOKENS: u64 = 7;

struct StoredFile {
    object: Value,
    content: Vec<u8>,
}

/// The mock's files and batches, shared by its workers.
#[derive(Default)]
pub struct Store {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    files: BTreeMap<String, StoredFile>,
    batches: BTreeMap<String, Value>,
}

impl Inner {
    fn id(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!(
            "{prefix}{:016x}",
            self.next.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        )
    }
}

/// Whether `method` on `path` is a Files or Batch API call.
pub fn is_files_path(method: &str, path: &str) -> bool {
    let tail = |p: &str| path.contains(p);
    matches!(method, "GET" | "POST" | "DELETE") && (tail("/files") || tail("/batches"))
}

fn error(status: u16, message: &str, param: Option<&str>) -> Reply {
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": null}});
    Reply::json(status, serde_json::to_vec(&body).unwrap_or_default())
}

fn ok(value: &Value) -> Reply {
    Reply::json(200, serde_json::to_vec(value).unwrap_or_default())
}

fn query<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    let q = req.target.split_once('?')?.1;
    q.split('&')
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The path after the API root (`/files/…`, `/batches/…`), or `None`.
fn api_path(path: &str) -> Option<&str> {
    let at = path
        .rfind("/files")
        .into_iter()
        .chain(path.rfind("/batches"))
        .min()?;
    Some(&path[at..])
}

/// Checks the credential as OpenAI (Bearer) or Azure (`api-key`,
/// `api-version`) does.
fn check_auth(req: &Request) -> Result<(), Reply> {
    if req.path().contains("/openai/") {
        if req.header("api-key").is_none_or(str::is_empty) {
            let body = json!({"error": {"code": "401", "message": "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}});
            return Err(Reply::json(
                401,
                serde_json::to_vec(&body).unwrap_or_default(),
            ));
        }
        if !req.path().contains("/openai/v1/") && query(req, "api-version").is_none() {
            let body = json!({"error": {"code": "404", "message": "Resource not found"}});
            return Err(Reply::json(
                404,
                serde_json::to_vec(&body).unwrap_or_default(),
            ));
        }
        return Ok(());
    }
    let bearer = req
        .header("authorization")
        .is_some_and(|a| a.len() > 7 && a[..7].eq_ignore_ascii_case("bearer "));
    if bearer {
        Ok(())
    } else {
        Err(error(401, "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", None))
    }
}

/// Answers a Files or Batch API call.
pub fn handle(store: &Store, req: &Request, now: u64) -> Reply {
    if let Err(refusal) = check_auth(req) {
        return refusal;
    }
    let mut reply = answer(store, req, now);
    reply.usage = Some(super::Usage {
        prompt: 0,
        completion: 0,
    });
    reply
}

fn answer(store: &Store, req: &Request, now: u64) -> Reply {
    let Some(path) = api_path(req.path()) else {
        return error(404, "Invalid URL", None);
    };
    let path = path.trim_end_matches('/');
    let mut inner = store.inner.lock().unwrap_or_else(|p| p.into_inner());
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    match (req.method.as_str(), segments.as_slice()) {
        ("POST", ["files"]) => upload(&mut inner, req, now),
        ("GET", ["files"]) => list_files(&inner, req),
        ("GET", ["files", id]) => match inner.files.get(*id) {
            Some(f) => ok(&f.object),
            None => no_file(id),
        },
        ("DELETE", ["files", id]) => match inner.files.remove(*id) {
            Some(_) => ok(&json!({"id": id, "object": "file", "deleted": true})),
            None => no_file(id),
        },
        ("GET", ["files", id, "content"]) => match inner.files.get(*id) {
            Some(f) => Reply {
                status: 200,
                body: Body::Binary {
                    content_type: "application/octet-stream",
                    pieces: f
                        .content
                        .chunks(4096)
                        .map(|c| Event {
                            delay_ms: 0,
                            data: c.to_vec(),
                        })
                        .collect(),
                },
                usage: None,
            },
            None => no_file(id),
        },
        ("POST", ["batches"]) => create_batch(&mut inner, req, now),
        ("GET", ["batches"]) => {
            let data: Vec<Value> = inner.batches.values().rev().cloned().collect();
            ok(&list(data))
        }
        ("GET", ["batches", id]) => retrieve_batch(&mut inner, id, now),
        ("POST", ["batches", id, "cancel"]) => match inner.batches.get_mut(*id) {
            Some(b) if b["status"] == "validating" || b["status"] == "in_progress" => {
                b["status"] = json!("cancelled");
                b["cancelled_at"] = json!(now);
                ok(b)
            }
            Some(b) => {
                let status = b["status"].as_str().unwrap_or("").to_string();
                error(
                    400,
                    &format!("Cannot cancel a batch with status '{status}'."),
                    None,
                )
            }
            None => no_batch(id),
        },
        _ => error(404, "Invalid URL", None),
    }
}

fn no_file(id: &str) -> Reply {
    error(404, &format!("No such File object: {id}"), Some("id"))
}

fn no_batch(id: &str) -> Reply {
    error(404, &format!("No batch found with id '{id}'."), None)
}

fn list(data: Vec<Value>) -> Value {
    json!({
        "object": "list",
        "first_id": data.first().map(|o| o["id"].clone()),
        "last_id": data.last().map(|o| o["id"].clone()),
        "has_more": false,
        "data": data,
    })
}

fn list_files(inner: &Inner, req: &Request) -> Reply {
    let purpose = query(req, "purpose");
    let limit = query(req, "limit")
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(10_000);
    let data: Vec<Value> = inner
        .files
        .values()
        .rev()
        .map(|f| f.object.clone())
        .filter(|o| purpose.is_none_or(|p| o["purpose"] == p))
        .take(limit)
        .collect();
    ok(&list(data))
}

fn upload(inner: &mut Inner, req: &Request, now: u64) -> Reply {
    let content_type = req.header("content-type").unwrap_or("");
    if !content_type.starts_with("multipart/form-data") {
        return error(
            400,
            &format!("Invalid Content-Type header ({content_type}), expected multipart/form-data."),
            None,
        );
    }
    let parts = match parts(content_type, &req.body) {
        Ok(p) => p,
        Err(why) => return error(400, &format!("Could not parse multipart form: {why}"), None),
    };
    if let Some(extra) = parts
        .iter()
        .find(|p| !UPLOAD_FIELDS.contains(&p.name.as_str()))
    {
        return error(
            400,
            &format!("Unrecognized request argument supplied: {}", extra.name),
            None,
        );
    }
    let Some(purpose) = parts
        .iter()
        .find(|p| p.name == "purpose" && p.filename.is_none())
        .map(|p| String::from_utf8_lossy(p.content).to_string())
    else {
        return error(
            400,
            "Missing required parameter: 'purpose'.",
            Some("purpose"),
        );
    };
    if !PURPOSES.contains(&purpose.as_str()) {
        return error(
            400,
            &format!("'{purpose}' is not one of {PURPOSES:?} - 'purpose'"),
            Some("purpose"),
        );
    }
    let Some(file) = parts
        .iter()
        .find(|p| p.name == "file" && p.filename.is_some())
    else {
        return error(400, "Missing required parameter: 'file'.", Some("file"));
    };
    let filename = file.filename.clone().unwrap_or_default();
    if purpose == "batch" {
        if !filename.ends_with(".jsonl") {
            return error(
                400,
                "Invalid file format for Batch API. Must be .jsonl",
                Some("file"),
            );
        }
        for (n, line) in file.content.split(|&b| b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let ok = serde_json::from_slice::<Value>(line).is_ok_and(|v| {
                v["custom_id"].is_string()
                    && v["method"] == "POST"
                    && v["url"].is_string()
                    && v["body"].is_object()
            });
            if !ok {
                return error(
                    400,
                    &format!("Invalid batch input on line {}: each line needs custom_id, method POST, url and body", n + 1),
                    Some("file"),
                );
            }
        }
    }
    let id = inner.id("file-");
    let object = json!({
        "id": id,
        "object": "file",
        "bytes": file.content.len(),
        "created_at": now,
        "expires_at": null,
        "filename": filename,
        "purpose": purpose,
        "status": "processed",
        "status_details": null,
    });
    inner.files.insert(
        id,
        StoredFile {
            object: object.clone(),
            content: file.content.to_vec(),
        },
    );
    ok(&object)
}

fn create_batch(inner: &mut Inner, req: &Request, now: u64) -> Reply {
    let Ok(body) = serde_json::from_slice::<Value>(&req.body) else {
        return error(
            400,
            "We could not parse the JSON body of your request.",
            None,
        );
    };
    if let Some(extra) = body
        .as_object()
        .and_then(|o| o.keys().find(|k| !BATCH_FIELDS.contains(&k.as_str())))
    {
        return error(
            400,
            &format!("Unrecognized request argument supplied: {extra}"),
            None,
        );
    }
    let Some(input) = body["input_file_id"].as_str() else {
        return error(
            400,
            "Missing required parameter: 'input_file_id'.",
            Some("input_file_id"),
        );
    };
    let endpoint = body["endpoint"].as_str().unwrap_or("");
    if !ENDPOINTS.contains(&endpoint) {
        return error(
            400,
            &format!("Invalid value for 'endpoint': {endpoint:?}"),
            Some("endpoint"),
        );
    }
    if body["completion_window"] != "24h" {
        return error(
            400,
            "Invalid value for 'completion_window': must be '24h'.",
            Some("completion_window"),
        );
    }
    let lines = match inner.files.get(input) {
        Some(f) if f.object["purpose"] == "batch" => f
            .content
            .split(|&b| b == b'\n')
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
            .count(),
        Some(_) => {
            return error(
                400,
                "The input file must have purpose 'batch'.",
                Some("input_file_id"),
            )
        }
        None => return no_file(input),
    };
    let id = inner.id("batch_");
    let batch = json!({
        "id": id,
        "object": "batch",
        "endpoint": endpoint,
        "errors": null,
        "input_file_id": input,
        "completion_window": "24h",
        "status": "validating",
        "output_file_id": null,
        "error_file_id": null,
        "created_at": now,
        "in_progress_at": null,
        "expires_at": now + 86_400,
        "finalizing_at": null,
        "completed_at": null,
        "failed_at": null,
        "expired_at": null,
        "cancelling_at": null,
        "cancelled_at": null,
        "request_counts": {"total": lines, "completed": 0, "failed": 0},
        "metadata": body.get("metadata").cloned().unwrap_or(Value::Null),
    });
    inner.batches.insert(id, batch.clone());
    ok(&batch)
}

/// The answer line for one batch input line.
fn answer_line(line: &Value, n: u64, now: u64) -> Value {
    let body = &line["body"];
    let model = body["model"].as_str().unwrap_or("mock");
    let prompt = serde_json::to_vec(body).map_or(0, |b| b.len() as u64) / 4 + 1;
    let embeddings = line["url"]
        .as_str()
        .is_some_and(|u| u.ends_with("/embeddings"));
    let answer = if embeddings {
        json!({
            "object": "list",
            "model": model,
            "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2, 0.3]}],
            "usage": {"prompt_tokens": prompt, "total_tokens": prompt},
        })
    } else {
        json!({
            "id": format!("chatcmpl-batch{n}"),
            "object": "chat.completion",
            "created": now,
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "mock batch answer"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": LINE_COMPLETION_TOKENS, "total_tokens": prompt + LINE_COMPLETION_TOKENS},
        })
    };
    json!({
        "id": format!("batch_req_{n}"),
        "custom_id": line["custom_id"],
        "response": {"status_code": 200, "request_id": format!("req_{n}"), "body": answer},
        "error": null,
    })
}

fn retrieve_batch(inner: &mut Inner, id: &str, now: u64) -> Reply {
    let Some(batch) = inner.batches.get(id).cloned() else {
        return no_batch(id);
    };
    if batch["status"] != "validating" {
        return ok(&batch);
    }
    // The first look at a batch finds it done.
    let input = batch["input_file_id"].as_str().unwrap_or("");
    let content = inner
        .files
        .get(input)
        .map(|f| f.content.clone())
        .unwrap_or_default();
    let mut output = Vec::new();
    let mut count = 0u64;
    for line in content.split(|&b| b == b'\n') {
        let Ok(line) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        count += 1;
        output.extend_from_slice(
            &serde_json::to_vec(&answer_line(&line, count, now)).unwrap_or_default(),
        );
        output.push(b'\n');
    }
    let output_id = inner.id("file-");
    inner.files.insert(
        output_id.clone(),
        StoredFile {
            object: json!({
                "id": output_id, "object": "file", "bytes": output.len(), "created_at": now,
                "expires_at": null, "filename": "batch_output.jsonl", "purpose": "batch_output",
                "status": "processed", "status_details": null,
            }),
            content: output,
        },
    );
    let Some(stored) = inner.batches.get_mut(id) else {
        return no_batch(id);
    };
    stored["status"] = json!("completed");
    stored["output_file_id"] = json!(output_id);
    stored["in_progress_at"] = json!(now);
    stored["finalizing_at"] = json!(now);
    stored["completed_at"] = json!(now);
    stored["request_counts"] = json!({"total": count, "completed": count, "failed": 0});
    ok(stored)
}
