//! What a token costs on a deployment: the deployment's configured prices
//! first, then a table of public list prices shipped with the gateway.

use crate::config::Deployment;

/// USD per token, the unit spend tracking multiplies usage by.
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
}

/// A shipped table entry: the list price and the completion cap, so a
/// deployment without `model_info` still gets a cost and a reservation bound.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelPrice {
    /// List price per token.
    pub price: Price,
    /// Most completion tokens one response can have, where published.
    pub max_output_tokens: Option<u64>,
}

/// One table row; prices are per token, written as `N e-6` (USD per
/// million tokens) to read like the providers' price pages.
const fn row(name: &'static str, input: f64, output: f64, max_out: u64) -> Row {
    Row {
        name,
        entry: ModelPrice {
            price: Price {
                input_per_token: input,
                output_per_token: output,
                cache_read_per_token: None,
                cache_creation_per_token: None,
            },
            max_output_tokens: if max_out == 0 { None } else { Some(max_out) },
        },
    }
}

/// A row with prompt-cache prices: reads and (5-minute) writes, per token,
/// as Anthropic lists them (a tenth and five quarters of the input price).
const fn cached_row(
    name: &'static str,
    (input, output): (f64, f64),
    (read, write): (f64, f64),
    max_out: u64,
) -> Row {
    let mut r = row(name, input, output, max_out);
    r.entry.price.cache_read_per_token = Some(read);
    r.entry.price.cache_creation_per_token = Some(write);
    r
}

struct Row {
    name: &'static str,
    entry: ModelPrice,
}

/// Public list prices (USD per token, input and output; max output tokens,
/// 0 when unpublished or varying by host). Keys are lowercase base names;
/// dated and suffixed variants reach them through the prefix fallback of
/// [`shipped`]. A few variants priced unlike their base name have their own
/// row so the longest-prefix rule picks them.
static TABLE: &[Row] = &[
    // OpenAI
    row("gpt-4o", 2.50e-6, 10.00e-6, 16_384),
    row("gpt-4o-2024-05-13", 5.00e-6, 15.00e-6, 4_096),
    row("gpt-4o-mini", 0.15e-6, 0.60e-6, 16_384),
    row("gpt-4.1", 2.00e-6, 8.00e-6, 32_768),
    row("gpt-4.1-mini", 0.40e-6, 1.60e-6, 32_768),
    row("gpt-4.1-nano", 0.10e-6, 0.40e-6, 32_768),
    row("o1", 15.00e-6, 60.00e-6, 100_000),
    row("o1-mini", 1.10e-6, 4.40e-6, 65_536),
    row("o1-pro", 150.00e-6, 600.00e-6, 100_000),
    row("o3", 2.00e-6, 8.00e-6, 100_000),
    row("o3-mini", 1.10e-6, 4.40e-6, 100_000),
    row("o3-pro", 20.00e-6, 80.00e-6, 100_000),
    row("o4-mini", 1.10e-6, 4.40e-6, 100_000),
    row("gpt-4-turbo", 10.00e-6, 30.00e-6, 4_096),
    row("gpt-4-1106-preview", 10.00e-6, 30.00e-6, 4_096),
    row("gpt-4-0125-preview", 10.00e-6, 30.00e-6, 4_096),
    row("gpt-4", 30.00e-6, 60.00e-6, 4_096),
    row("gpt-4-32k", 60.00e-6, 120.00e-6, 4_096),
    row("gpt-3.5-turbo", 0.50e-6, 1.50e-6, 4_096),
    row("text-embedding-3-small", 0.02e-6, 0.0, 0),
    row("text-embedding-3-large", 0.13e-6, 0.0, 0),
    row("text-embedding-ada-002", 0.10e-6, 0.0, 0),
    // Anthropic
    cached_row(
        "claude-3-5-sonnet",
        (3.00e-6, 15.00e-6),
        (0.30e-6, 3.75e-6),
        8_192,
    ),
    cached_row(
        "claude-3-7-sonnet",
        (3.00e-6, 15.00e-6),
        (0.30e-6, 3.75e-6),
        64_000,
    ),
    cached_row(
        "claude-sonnet-4",
        (3.00e-6, 15.00e-6),
        (0.30e-6, 3.75e-6),
        64_000,
    ),
    cached_row(
        "claude-3-5-haiku",
        (0.80e-6, 4.00e-6),
        (0.08e-6, 1.00e-6),
        8_192,
    ),
    cached_row(
        "claude-3-haiku",
        (0.25e-6, 1.25e-6),
        (0.03e-6, 0.30e-6),
        4_096,
    ),
    cached_row(
        "claude-3-opus",
        (15.00e-6, 75.00e-6),
        (1.50e-6, 18.75e-6),
        4_096,
    ),
    cached_row(
        "claude-opus-4",
        (15.00e-6, 75.00e-6),
        (1.50e-6, 18.75e-6),
        32_000,
    ),
    // Google (prompts up to 128k / 200k tokens)
    row("gemini-1.5-pro", 1.25e-6, 5.00e-6, 8_192),
    row("gemini-1.5-flash", 0.075e-6, 0.30e-6, 8_192),
    row("gemini-2.0-flash", 0.10e-6, 0.40e-6, 8_192),
    row("gemini-2.0-flash-lite", 0.075e-6, 0.30e-6, 8_192),
    row("gemini-2.5-pro", 1.25e-6, 10.00e-6, 65_536),
    row("gemini-2.5-flash", 0.30e-6, 2.50e-6, 65_536),
    row("gemini-2.5-flash-lite", 0.10e-6, 0.40e-6, 65_536),
    // Meta Llama as served by Groq (`llama-3.1-8b-instant`, `-70b-versatile`)
    row("llama-3.1-8b", 0.05e-6, 0.08e-6, 0),
    row("llama-3.1-70b", 0.59e-6, 0.79e-6, 0),
    row("llama-3.3-70b", 0.59e-6, 0.79e-6, 0),
    // Mistral (`-latest` aliases)
    row("mistral-large", 2.00e-6, 6.00e-6, 0),
    row("mistral-small", 0.10e-6, 0.30e-6, 0),
];

/// The shipped list price of `model`, for deployments whose config carries
/// no prices. Everything up to the last `/` is dropped (`openai/gpt-4o`),
/// case is ignored, and a name not in the table falls back to the longest
/// table key it extends at a `-` (`gpt-4o-mini-2024-07-18` → `gpt-4o-mini`,
/// `claude-3-5-sonnet-20241022` → `claude-3-5-sonnet`, but `gpt-4omni` → none).
pub fn shipped(model: &str) -> Option<&'static ModelPrice> {
    let mut name = model.rsplit('/').next().unwrap_or(model).trim();
    loop {
        if let Some(row) = TABLE.iter().find(|r| r.name.eq_ignore_ascii_case(name)) {
            return Some(&row.entry);
        }
        name = &name[..name.rfind('-')?];
    }
}

/// The price billed for a request served by `dep` as `upstream_model` (the
/// concrete name, which differs from `dep.upstream_model` on wildcard
/// entries). Each of the deployment's `input_cost_per_token`,
/// `output_cost_per_token`, `cache_read_input_token_cost` and
/// `cache_creation_input_token_cost` wins on its own; a side without a
/// configured or shipped price costs 0, so unknown and self-hosted models
/// are free (cache prices default to the input price).
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
    }
}

/// Whether anything prices `upstream_model` on `dep`: the deployment's own
/// `input_cost_per_token` / `output_cost_per_token` (on a wildcard entry,
/// the default price of every model it routes) or the shipped table. An
/// unpriced model costs nothing, so budgets cannot be enforced on it.
pub fn is_priced(dep: &Deployment, upstream_model: &str) -> bool {
    dep.input_cost_per_token.is_some()
        || dep.output_cost_per_token.is_some()
        || shipped(upstream_model).is_some()
}

/// The completion cap used to bound a request's worst-case cost: the
/// deployment's `max_output_tokens`, else the shipped table's, else unknown.
pub fn max_output_tokens(dep: &Deployment, upstream_model: &str) -> Option<u64> {
    dep.max_output_tokens
        .or_else(|| shipped(upstream_model).and_then(|m| m.max_output_tokens))
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
    fn exact_names_and_case() {
        assert_eq!(input_per_m("gpt-4o"), Some(2.5));
        assert_eq!(input_per_m("GPT-4o-Mini"), Some(0.15));
        assert_eq!(input_per_m("text-embedding-3-small"), Some(0.02));
        let e = shipped("text-embedding-3-large").unwrap();
        assert_eq!(e.price.output_per_token, 0.0);
        assert_eq!(e.max_output_tokens, None);
        assert_eq!(shipped("o1").unwrap().max_output_tokens, Some(100_000));
    }

    #[test]
    fn dated_names_fall_back_to_the_longest_key() {
        assert_eq!(input_per_m("gpt-4o-2024-08-06"), Some(2.5));
        assert_eq!(input_per_m("gpt-4o-2024-05-13"), Some(5.0));
        assert_eq!(input_per_m("gpt-4o-mini-2024-07-18"), Some(0.15));
        assert_eq!(input_per_m("claude-3-5-sonnet-20241022"), Some(3.0));
        assert_eq!(input_per_m("claude-3-5-haiku-latest"), Some(0.8));
        assert_eq!(input_per_m("gpt-4.1-nano-2025-04-14"), Some(0.1));
        assert_eq!(input_per_m("o3-mini-2025-01-31"), Some(1.1));
        assert_eq!(input_per_m("gpt-4-0613"), Some(30.0));
        assert_eq!(input_per_m("gpt-4-turbo-2024-04-09"), Some(10.0));
        assert_eq!(input_per_m("gpt-4-1106-preview"), Some(10.0));
        assert_eq!(input_per_m("gemini-2.5-pro-preview-05-06"), Some(1.25));
        assert_eq!(input_per_m("llama-3.1-8b-instant"), Some(0.05));
    }

    #[test]
    fn prefix_only_at_a_dash_boundary() {
        assert_eq!(shipped("gpt-4omni"), None);
        assert_eq!(shipped("o1x"), None);
        assert_eq!(shipped("o3mini"), None);
        assert_eq!(shipped("gpt"), None);
        assert_eq!(shipped(""), None);
        assert_eq!(shipped("-"), None);
        assert_eq!(shipped("my-model"), None);
        assert_eq!(input_per_m("gpt-4.1-mini-x"), Some(0.4));
    }

    #[test]
    fn provider_prefixes_are_dropped() {
        assert_eq!(input_per_m("openai/gpt-4o"), Some(2.5));
        assert_eq!(
            input_per_m("openrouter/anthropic/claude-3-opus"),
            Some(15.0)
        );
        assert_eq!(input_per_m("groq/llama-3.3-70b-versatile"), Some(0.59));
    }

    #[test]
    fn table_keys_are_lowercase_and_unique() {
        let mut names: Vec<&str> = TABLE.iter().map(|r| r.name).collect();
        assert!(names.iter().all(|n| *n == n.to_ascii_lowercase()));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TABLE.len());
    }

    #[test]
    fn configured_prices_win_each_on_its_own() {
        let both = deployment("input_cost_per_token: 0.5, output_cost_per_token: 2.0");
        assert_eq!(
            price_for(&both, "gpt-4o"),
            Price {
                input_per_token: 0.5,
                output_per_token: 2.0,
                ..Default::default()
            }
        );
        let cached =
            deployment("cache_read_input_token_cost: 0.1, cache_creation_input_token_cost: 0.7");
        let p = price_for(&cached, "claude-3-5-sonnet-20241022");
        assert_eq!(
            (p.cache_read_per_token, p.cache_creation_per_token),
            (Some(0.1), Some(0.7))
        );
        assert_eq!(p.input_per_token, 3.0e-6);
        let p = price_for(&deployment(""), "claude-sonnet-4-20250514");
        assert_eq!(
            (p.cache_read_per_token, p.cache_creation_per_token),
            (Some(0.30e-6), Some(3.75e-6))
        );
        assert_eq!(
            price_for(&deployment(""), "gpt-4o").cache_read_per_token,
            None
        );
        let input_only = deployment("input_cost_per_token: 0.5");
        let p = price_for(&input_only, "gpt-4o");
        assert_eq!(p.input_per_token, 0.5);
        assert_eq!(p.output_per_token, 10.0e-6);
        let p = price_for(&input_only, "my-local-model");
        assert_eq!((p.input_per_token, p.output_per_token), (0.5, 0.0));
        let none = deployment("");
        assert_eq!(price_for(&none, "gpt-4o"), shipped("gpt-4o").unwrap().price);
        assert_eq!(price_for(&none, "my-local-model"), Price::default());
    }

    #[test]
    fn max_output_from_config_then_table() {
        let dep = deployment("max_output_tokens: 100");
        assert_eq!(max_output_tokens(&dep, "gpt-4o"), Some(100));
        let dep = deployment("");
        assert_eq!(max_output_tokens(&dep, "gpt-4o-2024-08-06"), Some(16_384));
        assert_eq!(max_output_tokens(&dep, "mistral-large-latest"), None);
        assert_eq!(max_output_tokens(&dep, "unknown"), None);
    }
}
