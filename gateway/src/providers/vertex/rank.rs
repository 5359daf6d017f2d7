//! LiteLLM's rerank on Vertex AI's ranking API (Discovery Engine's
//! `rank`; `vertex_ai/semantic-ranker-…` models).
//!
//! The request is a `POST
//! {base}/v1/projects/{project}/locations/global/rankingConfigs/default_ranking_config:rank`
//! on `https://discoveryengine.googleapis.com` (an `api_base` replaces
//! the host: LiteLLM ignores it here), with the deployment's Google
//! access token as `Authorization: Bearer` and the project as
//! `X-Goog-User-Project`. Its body: `model`, `query`, the documents as
//! `records` (`id` its index, `content` its text, `title` when the
//! document object has one: LiteLLM makes up a title of its first three
//! words, which changes the ranking), `topN` = `top_n`, and
//! `ignoreRecordDetailsInResponse` unless `return_documents` is true. The
//! answer's `records` (`id`, `score`, and `content` when asked) become
//! LiteLLM's results, highest score first; the call is billed one search
//! unit per 100 documents, as Google counts its ranking queries (LiteLLM
//! bills one per record returned).

use crate::error::GatewayError;
use crate::formats::TranslateError;
use crate::providers::rerank::{self, Ask};
use serde_json::{json, Value};

/// Where the ranking API lives when no `api_base` is given.
pub const DEFAULT_BASE: &str = "https://discoveryengine.googleapis.com";

/// Whether a Vertex AI model is one of the ranking API's.
pub fn is_ranker(model: &str) -> bool {
    model.starts_with("semantic-ranker")
}

/// The ranking config's path below a base path of `base` in `project`.
pub fn path(base: &str, project: &str) -> String {
    let base = base.trim_end_matches('/');
    let version = if base.is_empty() { "/v1" } else { base };
    format!(
        "{version}/projects/{}/locations/global/rankingConfigs/default_ranking_config:rank",
        crate::providers::sigv4::uri_encode(project)
    )
}

/// The `rank` body for LiteLLM's rerank request `body`, asking `model`.
pub fn request(body: &[u8], model: &str) -> Result<Vec<u8>, GatewayError> {
    let ask = Ask::parse(body)?;
    let records: Vec<Value> = ask
        .documents
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let mut record = json!({"id": i.to_string(), "content": rerank::text(d).unwrap_or("")});
            if let Some(title) = d.get("title").and_then(Value::as_str) {
                record["title"] = title.into();
            }
            record
        })
        .collect();
    let mut out = json!({
        "model": model,
        "query": ask.query,
        "records": records,
        "ignoreRecordDetailsInResponse": ask.return_documents != Some(true),
    });
    if let Some(n) = ask.top_n {
        out["topN"] = n.into();
    }
    Ok(out.to_string().into_bytes())
}

/// LiteLLM's answer for a `rank` answer to a call ranking `documents`
/// documents.
pub fn to_cohere(body: &[u8], documents: usize) -> Result<Vec<u8>, TranslateError> {
    let answer = rerank::read(body)?;
    let found = match answer.get("records") {
        Some(Value::Array(records)) => records.as_slice(),
        // Google leaves an empty list out.
        None => &[],
        Some(_) => return Err(TranslateError("rerank answer: bad `records`".into())),
    };
    let mut scored = found
        .iter()
        .map(|r| {
            let index = rerank::index(&r["id"], documents)?;
            let score = r.get("score").map_or(Ok(0.0), rerank::score)?;
            Ok((index, score, r.get("content")))
        })
        .collect::<Result<Vec<_>, TranslateError>>()?;
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    let results = scored
        .into_iter()
        .map(|(index, score, content)| rerank::result(index, score, content))
        .collect();
    Ok(rerank::answer(
        None,
        results,
        json!({ "search_units": rerank::search_units(documents) }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_answers_follow_the_ranking_api() {
        assert_eq!(
            path("", "my-proj"),
            "/v1/projects/my-proj/locations/global/rankingConfigs/default_ranking_config:rank"
        );
        let v: Value = serde_json::from_slice(
            &request(
                br#"{"model":"r","query":"q","documents":["a b c d",{"text":"e","title":"T"}],"top_n":1}"#,
                "semantic-ranker-default@latest",
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"model": "semantic-ranker-default@latest", "query": "q", "topN": 1,
                   "ignoreRecordDetailsInResponse": true,
                   "records": [{"id": "0", "content": "a b c d"}, {"id": "1", "content": "e", "title": "T"}]})
        );
        let out: Value = serde_json::from_slice(
            &to_cohere(
                br#"{"records":[{"id":"0","score":0.2},{"id":"1","score":0.9,"content":"e"}]}"#,
                2,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            out["results"],
            json!([{"index": 1, "relevance_score": 0.9, "document": {"text": "e"}}, {"index": 0, "relevance_score": 0.2}])
        );
        assert_eq!(out["meta"]["billed_units"]["search_units"], 1);
        assert!(to_cohere(br#"{"records":[{"id":"x","score":0.2}]}"#, 2).is_err());
    }
}
