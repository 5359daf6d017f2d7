//! The rerank APIs LiteLLM's `/rerank` reaches besides Cohere's, with the
//! checks the real endpoints make:
//!
//! - Jina AI's and Voyage AI's `POST /v1/rerank`: the key in
//!   `Authorization: Bearer` picks the API ([`JINA_KEY`] or
//!   [`VOYAGE_KEY`]; another is 401 `{"detail"}`); `model`, `query` and
//!   `documents` are required. Jina takes strings or `{"text"}` objects
//!   and `top_n`, `return_documents` (default true), and answers `model`,
//!   `usage.total_tokens`, `results` with `document` as `{"text"}`. Voyage
//!   takes strings only, `top_k` (not `top_n`), `return_documents`
//!   (default false), `truncation`, refuses other fields, and answers
//!   `{"object": "list", "data", "model", "usage.total_tokens"}`.
//! - Bedrock Agent Runtime's `POST …/rerank`: SigV4 for service `bedrock`
//!   (as Converse's, see `bedrock`), one `TEXT` query, 1 to 1,000
//!   `INLINE` sources (`TEXT` with `textDocument.text` or `JSON` with
//!   `jsonDocument`), a `BEDROCK_RERANKING_MODEL` configuration whose
//!   `modelArn` is a foundation model's ARN (an id is a
//!   `ValidationException`) and `numberOfResults` from 1 to the sources;
//!   answers `results` of `index` and `relevanceScore`, no usage.
//! - Vertex AI's ranking API (Discovery Engine)
//!   `POST /v1/projects/{p}/locations/global/rankingConfigs/{c}:rank`: a
//!   bearer token of this mock (else 401 `UNAUTHENTICATED`) and its
//!   project, in the path and in `X-Goog-User-Project` when sent (else
//!   403); `query` and 1 to 200 `records` (each an `id` and a `title` or
//!   `content`) required, `topN`, `ignoreRecordDetailsInResponse`;
//!   answers `records` by score, with their `content` unless details are
//!   ignored.
//!
//! Scores: documents sharing words with the query rank first.

use serde_json::{json, Map, Value};

use super::{bedrock, to_json, vertex, Ctx, Reply, Usage};
use crate::mock::tokens;

/// The key Jina's API accepts.
pub const JINA_KEY: &str = "mock-jina-api-key";
/// The key Voyage's API accepts.
pub const VOYAGE_KEY: &str = "mock-voyage-api-key";
/// Most documents of one Jina, Voyage or Bedrock call.
const MAX_DOCUMENTS: usize = 1000;
/// Most records of one Vertex AI ranking call.
const MAX_RECORDS: usize = 200;

/// Which rerank API a path is, if any (Cohere's `/v2/rerank` is
/// `cohere`'s).
pub fn api(path: &str) -> Option<&'static str> {
    if path.ends_with("/v1/rerank") {
        Some("jina-voyage")
    } else if path.ends_with("/rerank") && !path.ends_with("/v2/rerank") {
        Some("bedrock")
    } else if path.ends_with(":rank") && path.contains("/rankingConfigs/") {
        Some("vertex")
    } else {
        None
    }
}

/// Answers a rerank request (see [`api`]).
pub fn handle(ctx: &Ctx<'_>, body: &Value) -> Reply {
    let answered = match api(ctx.req.path()) {
        Some("jina-voyage") => match bearer(ctx) {
            Some(JINA_KEY) => jina(body),
            Some(VOYAGE_KEY) => voyage(body),
            _ => Err(detail(401, "Unauthorized: invalid API key")),
        },
        Some("bedrock") => bedrock::check_signature(ctx).and_then(|()| bedrock_rerank(body)),
        Some("vertex") => vertex_rank(ctx, body),
        _ => Err(detail(404, "Not Found")),
    };
    answered.unwrap_or_else(|r| r)
}

fn bearer<'r>(ctx: &Ctx<'r>) -> Option<&'r str> {
    let auth = ctx.req.header("authorization")?;
    auth.get(..7)
        .filter(|s| s.eq_ignore_ascii_case("bearer "))
        .map(|_| auth[7..].trim())
}

/// An error in Jina's and Voyage's shape.
fn detail(status: u16, message: &str) -> Reply {
    Reply::json(status, to_json(&json!({ "detail": message })))
}

/// Scores of `texts` against `query`, as (index, score), best first.
fn ranked(query: &str, texts: &[&str]) -> Vec<(usize, f64)> {
    let words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
    let mut scored: Vec<(usize, f64)> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let text = t.to_lowercase();
            let hits = words.iter().filter(|w| text.contains(w.as_str())).count();
            (
                i,
                (hits as f64 + 1.0) / (words.len() as f64 + 2.0) - i as f64 * 1e-4,
            )
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    scored
}

fn tokens_of(query: &str, texts: &[&str]) -> u64 {
    texts
        .iter()
        .map(|t| tokens::estimate(t.chars().count()))
        .sum::<u64>()
        .saturating_add(tokens::estimate(query.chars().count()).saturating_mul(texts.len() as u64))
}

/// `model`, `query` and `documents` of a Jina or Voyage body; `strings`:
/// documents must be strings.
fn common(body: &Value, strings: bool) -> Result<(&str, Vec<&str>), Reply> {
    if body["model"].as_str().is_none_or(str::is_empty) {
        return Err(detail(422, "model: Field required"));
    }
    let Some(query) = body["query"].as_str() else {
        return Err(detail(422, "query: Field required"));
    };
    let Some(docs) = body["documents"].as_array().filter(|d| !d.is_empty()) else {
        return Err(detail(422, "documents: a non-empty list is required"));
    };
    if docs.len() > MAX_DOCUMENTS {
        return Err(detail(400, "too many documents"));
    }
    let texts = docs
        .iter()
        .map(|d| match d {
            Value::String(s) => Some(s.as_str()),
            Value::Object(o) if !strings => o.get("text").and_then(Value::as_str),
            _ => None,
        })
        .collect::<Option<Vec<&str>>>()
        .ok_or_else(|| detail(422, "documents: each document must be a string"))?;
    Ok((query, texts))
}

fn count(body: &Value, name: &str, default: usize) -> Result<usize, Reply> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_u64()
            .filter(|n| *n >= 1)
            .map(|n| (n as usize).min(default))
            .ok_or_else(|| detail(422, &format!("{name}: must be a positive integer"))),
    }
}

fn jina(body: &Value) -> Result<Reply, Reply> {
    let (query, texts) = common(body, false)?;
    let top = count(body, "top_n", texts.len())?;
    let documents = body["return_documents"].as_bool().unwrap_or(true);
    let results: Vec<Value> = ranked(query, &texts)
        .into_iter()
        .take(top)
        .map(|(index, score)| {
            let mut r = json!({"index": index, "relevance_score": score});
            if documents {
                r["document"] = json!({ "text": texts[index] });
            }
            r
        })
        .collect();
    let total = tokens_of(query, &texts);
    let answer =
        json!({"model": body["model"], "usage": {"total_tokens": total}, "results": results});
    Ok(Reply::ok(
        &answer,
        Usage {
            prompt: total,
            completion: 0,
        },
    ))
}

const VOYAGE_FIELDS: &[&str] = &[
    "model",
    "query",
    "documents",
    "top_k",
    "return_documents",
    "truncation",
];

fn voyage(body: &Value) -> Result<Reply, Reply> {
    if let Some(extra) = body
        .as_object()
        .and_then(|o| o.keys().find(|k| !VOYAGE_FIELDS.contains(&k.as_str())))
    {
        return Err(detail(400, &format!("Unexpected argument: {extra}")));
    }
    let (query, texts) = common(body, true)?;
    let top = count(body, "top_k", texts.len())?;
    let documents = body["return_documents"].as_bool().unwrap_or(false);
    let data: Vec<Value> = ranked(query, &texts)
        .into_iter()
        .take(top)
        .map(|(index, score)| {
            let mut r = json!({"relevance_score": score, "index": index});
            if documents {
                r["document"] = json!(texts[index]);
            }
            r
        })
        .collect();
    let total = tokens_of(query, &texts);
    let answer = json!({"object": "list", "data": data, "model": body["model"], "usage": {"total_tokens": total}});
    Ok(Reply::ok(
        &answer,
        Usage {
            prompt: total,
            completion: 0,
        },
    ))
}

fn validation(message: &str) -> Reply {
    bedrock::error(400, message)
}

fn bedrock_rerank(body: &Value) -> Result<Reply, Reply> {
    let queries = body["queries"].as_array().map_or(&[][..], Vec::as_slice);
    let [query] = queries else {
        return Err(validation("queries: exactly one query is required"));
    };
    let (Some("TEXT"), Some(query)) = (query["type"].as_str(), query["textQuery"]["text"].as_str())
    else {
        return Err(validation(
            "queries[0]: a TEXT query with textQuery.text is required",
        ));
    };
    let config = &body["rerankingConfiguration"];
    if config["type"] != "BEDROCK_RERANKING_MODEL" {
        return Err(validation(
            "rerankingConfiguration.type must be BEDROCK_RERANKING_MODEL",
        ));
    }
    let model = &config["bedrockRerankingConfiguration"];
    let arn = model["modelConfiguration"]["modelArn"]
        .as_str()
        .unwrap_or("");
    let valid_arn = arn
        .strip_prefix("arn:aws:bedrock:")
        .and_then(|r| r.split_once("::foundation-model/"))
        .is_some_and(|(region, id)| !region.is_empty() && !id.is_empty());
    if !valid_arn {
        return Err(validation(&format!(
            "1 validation error detected: Value '{arn}' at 'rerankingConfiguration.bedrockRerankingConfiguration.modelConfiguration.modelArn' failed to satisfy constraint: Member must satisfy regular expression pattern: (arn:aws:bedrock:[a-z0-9-]{{1,20}}::foundation-model/.*)"
        )));
    }
    let sources = body["sources"].as_array().map_or(&[][..], Vec::as_slice);
    if sources.is_empty() || sources.len() > MAX_DOCUMENTS {
        return Err(validation("sources: 1 to 1000 sources are required"));
    }
    let texts = sources
        .iter()
        .map(|s| {
            let inline = &s["inlineDocumentSource"];
            match (s["type"].as_str(), inline["type"].as_str()) {
                (Some("INLINE"), Some("TEXT")) => {
                    inline["textDocument"]["text"].as_str().map(str::to_string)
                }
                (Some("INLINE"), Some("JSON")) => inline
                    .get("jsonDocument")
                    .filter(|d| d.is_object())
                    .map(Value::to_string),
                _ => None,
            }
        })
        .collect::<Option<Vec<String>>>()
        .ok_or_else(|| {
            validation("sources: each source must be an INLINE TEXT or JSON document")
        })?;
    let wanted = model["numberOfResults"]
        .as_u64()
        .unwrap_or(texts.len() as u64);
    if wanted == 0 || wanted > texts.len() as u64 {
        return Err(validation(
            "numberOfResults must be between 1 and the number of sources",
        ));
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let results: Vec<Value> = ranked(query, &refs)
        .into_iter()
        .take(wanted as usize)
        .map(|(index, score)| json!({"index": index, "relevanceScore": score}))
        .collect();
    Ok(Reply::ok(
        &json!({ "results": results }),
        Usage {
            prompt: tokens_of(query, &refs),
            completion: 0,
        },
    ))
}

fn vertex_rank(ctx: &Ctx<'_>, body: &Value) -> Result<Reply, Reply> {
    let path = ctx.req.path();
    let project = path
        .strip_prefix("/v1/projects/")
        .and_then(|r| r.split_once("/locations/"))
        .map(|(p, _)| p)
        .unwrap_or_default();
    vertex::check_token(ctx.req, ctx.created, project)?;
    if let Some(quota) = ctx.req.header("x-goog-user-project") {
        if quota != project {
            return Err(vertex::permission_denied(quota));
        }
    }
    let invalid = |m: &str| super::gemini::error(400, m);
    let Some(query) = body["query"].as_str().filter(|q| !q.is_empty()) else {
        return Err(invalid("query is required"));
    };
    let records = body["records"].as_array().map_or(&[][..], Vec::as_slice);
    if records.is_empty() || records.len() > MAX_RECORDS {
        return Err(invalid("records: 1 to 200 records are required"));
    }
    let mut texts = Vec::with_capacity(records.len());
    for r in records {
        let (Some(_), Some(text)) = (
            r["id"].as_str(),
            r["content"].as_str().or(r["title"].as_str()),
        ) else {
            return Err(invalid("each record needs an id and a title or content"));
        };
        texts.push(text);
    }
    let top = match body.get("topN") {
        None => texts.len(),
        Some(v) => v
            .as_u64()
            .map(|n| (n as usize).min(texts.len()))
            .ok_or_else(|| invalid("topN must be an integer"))?,
    };
    let details = !body["ignoreRecordDetailsInResponse"]
        .as_bool()
        .unwrap_or(false);
    let out: Vec<Value> = ranked(query, &texts)
        .into_iter()
        .take(top)
        .map(|(i, score)| {
            let r = &records[i];
            let mut out = json!({"id": r["id"], "score": score});
            if details {
                let o: &mut Map<String, Value> = out.as_object_mut().expect("an object");
                for field in ["title", "content"] {
                    if let Some(v) = r.get(field) {
                        o.insert(field.into(), v.clone());
                    }
                }
            }
            out
        })
        .collect();
    Ok(Reply::ok(
        &json!({ "records": out }),
        Usage {
            prompt: tokens_of(query, &texts),
            completion: 0,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_api() {
        assert_eq!(api("/v1/rerank"), Some("jina-voyage"));
        assert_eq!(api("/rerank"), Some("bedrock"));
        assert_eq!(api("/v2/rerank"), None);
        assert_eq!(
            api("/v1/projects/p/locations/global/rankingConfigs/default_ranking_config:rank"),
            Some("vertex")
        );
    }
}
