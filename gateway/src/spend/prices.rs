//! What a call costs on a deployment: the deployment's configured prices
//! first, then the shipped table, LiteLLM's model price map
//! (`gateway/data/model_prices.tsv`, derived from LiteLLM's
//! `model_prices_and_context_window.json` by `scripts/refresh_prices.sh`;
//! MIT licence, see `gateway/data/LICENSE-litellm`). The table is parsed
//! once, on first use, into a map over the embedded text.

use super::tsv;
use crate::deployment::Deployment;
use crate::keyed_hash::KeyedHash;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::OnceLock;

/// USD per token (and per second, for hosts that bill by time), the units
/// spend tracking multiplies usage by.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Price {
    /// USD per prompt (input) token.
    pub input_per_token: f64,
    /// USD per completion (output) token.
    pub output_per_token: f64,
    /// USD per prompt token read from the provider's prompt cache
    /// (`cache_read_input_token_cost`); `None`: the input price.
    pub cache_read_per_token: Option<f64>,
    /// USD per prompt token written to the provider's prompt cache
    /// (`cache_creation_input_token_cost`); `None`: the input price.
    pub cache_creation_per_token: Option<f64>,
    /// USD per second of the call (`input_cost_per_second` +
    /// `output_cost_per_second`), added to the token cost.
    pub per_second: Option<f64>,
    /// USD per search unit of a rerank call (`input_cost_per_query`).
    pub per_query: Option<f64>,
}

/// A shipped table entry: the list price and the context window, so a
/// deployment without `model_info` still gets a cost, a reservation bound
/// and a context-window check.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ModelPrice {
    /// List price.
    pub price: Price,
    /// Most prompt tokens the model accepts, where published.
    pub max_input_tokens: Option<u64>,
    /// Most completion tokens one response can have, where published.
    pub max_output_tokens: Option<u64>,
}

/// The embedded table: `#` comment lines, then one tab-separated row per
/// lowercase model name: input, output, cache read, cache creation (USD per
/// token), input and output per second (USD), max input and max output
/// tokens; empty where LiteLLM has no value.
static TSV: &str = include_str!("../../data/model_prices.tsv");

/// Rerank prices per search unit: `#` comment lines, then one row per
/// lowercase model name and its `input_cost_per_query`; merged into the
/// table's rows by name.
static QUERY_TSV: &str = include_str!("../../data/query_prices.tsv");

/// The parsed table: rows sorted by full name, and for names that only
/// appear with a provider prefix, the part after the last `/` pointing at
/// the first such row in name order (sorted, for binary search; about
/// half a megabyte for the whole map).
struct Table {
    rows: Vec<(&'static str, ModelPrice)>,
    /// The row of each name: one hash per request's lookup instead of a
    /// dozen string comparisons.
    index: HashMap<&'static str, u32, KeyedHash>,
    bare: Vec<(&'static str, u32)>,
}

impl Table {
    fn get(&self, name: &str) -> Option<&ModelPrice> {
        let i = *self.index.get(name)?;
        Some(&self.rows[i as usize].1)
    }

    fn get_bare(&self, name: &str) -> Option<&ModelPrice> {
        let i = self.bare.binary_search_by(|(n, _)| (*n).cmp(name)).ok()?;
        Some(&self.rows[self.bare[i].1 as usize].1)
    }
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| parse(TSV, QUERY_TSV))
}

/// Parses the TSV; a malformed row is skipped (the refresh script writes
/// none, and a unit test checks every row parses), and of two rows with one
/// name the first is kept.
fn parse(text: &'static str, queries: &'static str) -> Table {
    let mut rows: Vec<(&'static str, ModelPrice)> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(parse_row)
        .collect();
    rows.sort_by(|a, b| a.0.cmp(b.0));
    rows.dedup_by(|b, a| a.0 == b.0);
    let mut added = false;
    for (name, per_query) in queries
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('\t'))
        .filter_map(|(n, p)| {
            Some((
                n,
                p.parse::<f64>()
                    .ok()
                    .filter(|p| p.is_finite() && *p >= 0.0)?,
            ))
        })
    {
        match rows.binary_search_by(|(n, _)| (*n).cmp(name)) {
            Ok(i) => rows[i].1.price.per_query = Some(per_query),
            Err(_) => {
                let mut row = ModelPrice::default();
                row.price.per_query = Some(per_query);
                rows.push((name, row));
                added = true;
            }
        }
    }
    if added {
        rows.sort_by(|a, b| a.0.cmp(b.0));
        rows.dedup_by(|b, a| a.0 == b.0);
    }
    rows.shrink_to_fit();
    let mut bare: Vec<(&'static str, u32)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, (name, _))| {
            let (_, base) = name.rsplit_once('/')?;
            let own_row = rows.binary_search_by(|(n, _)| (*n).cmp(base)).is_ok();
            (!base.is_empty() && !own_row).then_some((base, i as u32))
        })
        .collect();
    // Stable: of equal bare names the first full name stays first.
    bare.sort_by(|a, b| a.0.cmp(b.0));
    bare.dedup_by(|b, a| a.0 == b.0);
    bare.shrink_to_fit();
    let mut index = HashMap::with_capacity_and_hasher(rows.len(), KeyedHash::default());
    index.extend(
        rows.iter()
            .enumerate()
            .map(|(i, (name, _))| (*name, i as u32)),
    );
    Table { rows, index, bare }
}

/// One TSV row; `None` if malformed.
fn parse_row(line: &'static str) -> Option<(&'static str, ModelPrice)> {
    let mut cols = line.split('\t');
    let name = cols.next().filter(|n| !n.is_empty())?;
    let mut f = || tsv::price(&mut cols);
    let (input, output, read, write) = (f()?, f()?, f()?, f()?);
    let (in_sec, out_sec) = (f()?, f()?);
    let mut n = || -> Option<Option<u64>> {
        let c = cols.next()?;
        if c.is_empty() {
            return Some(None);
        }
        c.parse::<u64>().ok().filter(|v| *v > 0).map(Some)
    };
    let (max_in, max_out) = (n()?, n()?);
    // Time is billed only where tokens are not (transcription, hosted
    // endpoints), so a row with both is not charged twice.
    let per_second = match (input.or(output), in_sec, out_sec) {
        (Some(_), _, _) | (None, None, None) => None,
        (None, i, o) => Some(i.unwrap_or(0.0) + o.unwrap_or(0.0)),
    };
    Some((
        name,
        ModelPrice {
            price: Price {
                input_per_token: input.unwrap_or(0.0),
                output_per_token: output.unwrap_or(0.0),
                cache_read_per_token: read,
                cache_creation_per_token: write,
                per_second,
                per_query: None,
            },
            max_input_tokens: max_in,
            max_output_tokens: max_out,
        },
    ))
}

/// The shipped entry of `model`, for deployments whose config carries no
/// prices. Case is ignored. The full name is tried first
/// (`azure/gpt-4o`, `groq/llama-3.1-8b-instant`), then the part after the
/// last `/`, as a name or as the bare name of a provider-prefixed row; a
/// name not in the table falls back to the longest name it extends at a
/// `-` (`gpt-4o-mini-2024-07-18` → `gpt-4o-mini`, but `gpt-4omni` → none).
pub fn shipped(model: &str) -> Option<&'static ModelPrice> {
    let model = model.trim();
    let lower: Cow<'_, str> = if model.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(model.to_ascii_lowercase())
    } else {
        Cow::Borrowed(model)
    };
    let t = table();
    if let Some(hit) = t.get(&lower) {
        return Some(hit);
    }
    let mut name = lower.rsplit('/').next().unwrap_or(&lower);
    loop {
        if let Some(hit) = t.get(name).or_else(|| t.get_bare(name)) {
            return Some(hit);
        }
        name = &name[..name.rfind('-')?];
    }
}

/// Whether the shipped table has a row named `name` exactly (lowercase).
pub(super) fn listed(name: &str) -> bool {
    table().get(name).is_some()
}

/// The price billed for a request served by `dep` as `upstream_model` (the
/// concrete name, which differs from `dep.upstream_model` on wildcard
/// entries). Each of the deployment's `input_cost_per_token`,
/// `output_cost_per_token`, `cache_read_input_token_cost`,
/// `cache_creation_input_token_cost` and per-second price wins on its own; a
/// side without a configured or shipped price costs 0, so unknown and
/// self-hosted models are free (cache prices default to the input price).
pub fn price_for(dep: &Deployment, upstream_model: &str) -> Price {
    let table = shipped(upstream_model).map(|m| m.price).unwrap_or_default();
    Price {
        input_per_token: dep.input_cost_per_token.unwrap_or(table.input_per_token),
        output_per_token: dep.output_cost_per_token.unwrap_or(table.output_per_token),
        cache_read_per_token: dep
            .cache_read_input_token_cost
            .or(table.cache_read_per_token),
        cache_creation_per_token: dep
            .cache_creation_input_token_cost
            .or(table.cache_creation_per_token),
        per_second: dep.cost_per_second.or(table.per_second),
        per_query: table.per_query,
    }
}

/// Whether anything prices `upstream_model` on `dep`: the deployment's own
/// `input_cost_per_token` / `output_cost_per_token` / per-second price (on a
/// wildcard entry, the default price of every model it routes) or the
/// shipped table. An unpriced model costs nothing, so budgets cannot be
/// enforced on it.
pub fn is_priced(dep: &Deployment, upstream_model: &str) -> bool {
    dep.input_cost_per_token.is_some()
        || dep.output_cost_per_token.is_some()
        || dep.cost_per_second.is_some()
        || shipped(upstream_model).is_some()
}

/// The completion cap used to bound a request's worst-case cost: the
/// deployment's `max_output_tokens`, else the shipped table's, else unknown.
pub fn max_output_tokens(dep: &Deployment, upstream_model: &str) -> Option<u64> {
    dep.max_output_tokens
        .or_else(|| shipped(upstream_model).and_then(|m| m.max_output_tokens))
}

/// The context window checked before routing: the deployment's
/// `max_input_tokens` (or `max_tokens`), else the shipped table's, else
/// unknown (no check).
pub fn max_input_tokens(dep: &Deployment, upstream_model: &str) -> Option<u64> {
    dep.max_input_tokens
        .or_else(|| shipped(upstream_model).and_then(|m| m.max_input_tokens))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    fn deployment(model_info: &str) -> Deployment {
        let text = format!(
            "model_list:\n  - model_name: g\n    litellm_params: {{model: mock/whatever}}\n    model_info: {{{model_info}}}\n"
        );
        let mut c = Config::parse(Path::new("config.yaml"), &text, &|_| None).unwrap();
        c.deployments.remove(0)
    }

    fn input_per_m(model: &str) -> Option<f64> {
        shipped(model).map(|m| (m.price.input_per_token * 1e6 * 1000.0).round() / 1000.0)
    }

    #[test]
    fn every_row_of_the_shipped_table_parses() {
        let rows = TSV.lines().filter(|l| !l.starts_with('#')).count();
        assert!(rows > 4000, "{rows} rows");
        let queries: Vec<&str> = QUERY_TSV
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split('\t').next().unwrap())
            .collect();
        let only_queries = queries
            .iter()
            .filter(|q| !TSV.lines().any(|l| l.split('\t').next() == Some(**q)))
            .count();
        assert_eq!(table().rows.len(), rows + only_queries);
        for q in queries {
            assert!(table().get(q).unwrap().price.per_query.is_some(), "{q}");
        }
    }

    #[test]
    fn exact_names_and_case() {
        assert_eq!(input_per_m("gpt-4o"), Some(2.5));
        assert_eq!(input_per_m("GPT-4o-Mini"), Some(0.15));
        assert_eq!(input_per_m("text-embedding-3-small"), Some(0.02));
        let e = shipped("text-embedding-3-large").unwrap();
        assert_eq!(e.price.output_per_token, 0.0);
        assert_eq!(e.max_output_tokens, None);
        assert_eq!(e.max_input_tokens, Some(8191));
        let o1 = shipped("o1").unwrap();
        assert_eq!(
            (o1.max_input_tokens, o1.max_output_tokens),
            (Some(200_000), Some(100_000))
        );
        let sonnet = shipped("claude-sonnet-4-5-20250929").unwrap();
        assert_eq!(
            (
                sonnet.price.cache_read_per_token,
                sonnet.price.cache_creation_per_token
            ),
            (Some(0.30e-6), Some(3.75e-6))
        );
    }

    #[test]
    fn unknown_suffixes_fall_back_to_the_longest_name() {
        assert_eq!(input_per_m("gpt-4o-2024-05-13"), Some(5.0));
        assert_eq!(input_per_m("gpt-4o-mini-foo"), Some(0.15));
        assert_eq!(input_per_m("gpt-4.1-nano-x"), Some(0.1));
        assert_eq!(input_per_m("gemini-2.5-pro-preview-05-06"), Some(1.25));
    }

    #[test]
    fn prefix_only_at_a_dash_boundary() {
        assert_eq!(shipped("gpt-4omni"), None);
        assert_eq!(shipped("o1x"), None);
        assert_eq!(shipped("gpt"), None);
        assert_eq!(shipped(""), None);
        assert_eq!(shipped("-"), None);
        assert_eq!(shipped("my-model"), None);
    }

    #[test]
    fn provider_prefixes() {
        // A provider's own row wins; else the bare name's.
        assert_eq!(input_per_m("azure/gpt-4o"), Some(2.5));
        assert_eq!(input_per_m("openai/gpt-4o"), Some(2.5));
        assert_eq!(
            input_per_m("openrouter/anthropic/claude-opus-4-5"),
            Some(5.0)
        );
        // Only known with a provider prefix: found by its bare name.
        assert_eq!(input_per_m("mistral-large-latest"), Some(8.0));
    }

    #[test]
    fn time_is_billed_only_where_tokens_are_not() {
        let per_second = shipped("assemblyai/best").unwrap().price;
        assert!(per_second.per_second.is_some_and(|p| p > 0.0));
        assert_eq!(shipped("gpt-4o").unwrap().price.per_second, None);
        assert_eq!(shipped("gpt-4o").unwrap().price.per_query, None);
        // Rerank models carry their price per search unit, merged by name;
        // a per-query-only row is added.
        assert_eq!(shipped("rerank-v3.5").unwrap().price.per_query, Some(0.002));
        assert_eq!(
            shipped("cohere/rerank-v3.5").unwrap().price.per_query,
            Some(0.002)
        );
        assert_eq!(shipped("rerank-v3.5").unwrap().max_input_tokens, Some(4096));
        assert_eq!(
            shipped("tavily/search").unwrap().price.per_query,
            Some(0.008)
        );
    }

    #[test]
    fn configured_prices_win_each_on_its_own() {
        let both = deployment("input_cost_per_token: 0.5, output_cost_per_token: 2.0");
        assert_eq!(
            price_for(&both, "gpt-4o"),
            Price {
                input_per_token: 0.5,
                output_per_token: 2.0,
                cache_read_per_token: Some(1.25e-6),
                ..Default::default()
            }
        );
        let cached =
            deployment("cache_read_input_token_cost: 0.1, cache_creation_input_token_cost: 0.7");
        let p = price_for(&cached, "claude-sonnet-4-5");
        assert_eq!(
            (p.cache_read_per_token, p.cache_creation_per_token),
            (Some(0.1), Some(0.7))
        );
        assert_eq!(p.input_per_token, 3.0e-6);
        let input_only = deployment("input_cost_per_token: 0.5");
        let p = price_for(&input_only, "gpt-4o");
        assert_eq!(p.input_per_token, 0.5);
        assert_eq!(p.output_per_token, 10.0e-6);
        let p = price_for(&input_only, "my-local-model");
        assert_eq!((p.input_per_token, p.output_per_token), (0.5, 0.0));
        let none = deployment("");
        assert_eq!(price_for(&none, "gpt-4o"), shipped("gpt-4o").unwrap().price);
        assert_eq!(price_for(&none, "my-local-model"), Price::default());
        let timed = deployment("input_cost_per_second: 0.001, output_cost_per_second: 0.002");
        assert!(is_priced(&timed, "my-local-model"));
        let p = price_for(&timed, "my-local-model");
        assert!((p.per_second.unwrap() - 0.003).abs() < 1e-12);
    }

    #[test]
    fn windows_from_config_then_table() {
        let dep = deployment("max_output_tokens: 100, max_input_tokens: 50");
        assert_eq!(max_output_tokens(&dep, "gpt-4o"), Some(100));
        assert_eq!(max_input_tokens(&dep, "gpt-4o"), Some(50));
        let dep = deployment("");
        assert_eq!(max_output_tokens(&dep, "gpt-4o-2024-08-06"), Some(16_384));
        assert_eq!(max_input_tokens(&dep, "gpt-4o-2024-08-06"), Some(128_000));
        assert_eq!(max_output_tokens(&dep, "unknown"), None);
        assert_eq!(max_input_tokens(&dep, "unknown"), None);
    }
}
