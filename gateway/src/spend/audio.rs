//! Audio token prices from LiteLLM's model price map
//! (`gateway/data/audio_prices.tsv`, written by `scripts/refresh_prices.sh`;
//! MIT licence, see `gateway/data/LICENSE-litellm`), and the cost of a
//! realtime response whose usage splits its tokens into text and audio, as
//! LiteLLM's generic per-token cost does. Parsed once, on first use.

use super::tsv;
use super::{Price, Usage};
use std::collections::HashMap;
use std::sync::OnceLock;

/// The embedded table: `#` comment lines, then one tab-separated row per
/// lowercase name: input, cached input and output cost per audio token
/// (USD); empty where LiteLLM has no value.
static TSV: &str = include_str!("../../data/audio_prices.tsv");

/// A model's audio token prices; `None` where the price map has none (the
/// text price applies then, as in LiteLLM).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct AudioPrice {
    /// `input_cost_per_audio_token`.
    pub input_per_token: Option<f64>,
    /// `cache_read_input_audio_token_cost`.
    pub cache_read_per_token: Option<f64>,
    /// `output_cost_per_audio_token`.
    pub output_per_token: Option<f64>,
}

/// Of a response's tokens, the audio ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AudioTokens {
    /// Audio input tokens (cached ones included).
    pub input: u64,
    /// Of the cached input tokens, audio ones.
    pub cached: u64,
    /// Audio output tokens.
    pub output: u64,
}

impl AudioTokens {
    /// Adds `other` (saturating: counts come from the upstream).
    pub fn add(&mut self, other: AudioTokens) {
        self.input = self.input.saturating_add(other.input);
        self.cached = self.cached.saturating_add(other.cached);
        self.output = self.output.saturating_add(other.output);
    }
}

fn table() -> &'static HashMap<&'static str, AudioPrice> {
    static TABLE: OnceLock<HashMap<&'static str, AudioPrice>> = OnceLock::new();
    TABLE.get_or_init(|| tsv::rows_by_name(TSV, parse_row))
}

/// One row; `None` if malformed (the refresh script writes none, and a
/// test checks every row parses).
fn parse_row(line: &'static str) -> Option<(&'static str, AudioPrice)> {
    let mut cols = line.split('\t');
    let name = cols.next().filter(|n| !n.is_empty())?;
    let mut f = || tsv::price(&mut cols);
    let row = AudioPrice {
        input_per_token: f()?,
        cache_read_per_token: f()?,
        output_per_token: f()?,
    };
    Some((name, row))
}

/// The audio prices of `model`: its full (lowercase) name, then the part
/// after the last `/`, then the longest name it extends at a `-`
/// (`gpt-realtime-2025-08-28` → `gpt-realtime`).
pub fn audio_price(model: &str) -> AudioPrice {
    let lower = model.trim().to_ascii_lowercase();
    let t = table();
    if let Some(hit) = t.get(lower.as_str()) {
        return *hit;
    }
    let mut name = lower.rsplit('/').next().unwrap_or(&lower);
    loop {
        if let Some(hit) = t.get(name) {
            return *hit;
        }
        match name.rfind('-') {
            Some(i) => name = &name[..i],
            None => return AudioPrice::default(),
        }
    }
}

/// USD for a response's `tokens` of which `audio` are audio: text input
/// at the input price (cached at the cache price), audio input at the
/// audio price (cached audio at its cache price), text and audio output
/// at theirs; a missing audio price is the text one.
pub fn cost(tokens: Usage, audio: AudioTokens, price: Price, audio_price: AudioPrice) -> f64 {
    let cached = tokens.cached_tokens.min(tokens.prompt_tokens);
    let cached_audio = audio.cached.min(cached);
    let audio_in = audio.input.min(tokens.prompt_tokens);
    let fresh_audio = audio_in.saturating_sub(cached_audio);
    let cached_text = cached - cached_audio;
    let fresh_text = tokens
        .prompt_tokens
        .saturating_sub(cached)
        .saturating_sub(fresh_audio);
    let audio_out = audio.output.min(tokens.completion_tokens);
    let text_out = tokens.completion_tokens - audio_out;
    let input = price.input_per_token;
    let cache_read = price.cache_read_per_token.unwrap_or(input);
    let audio_input = audio_price.input_per_token.unwrap_or(input);
    fresh_text as f64 * input
        + cached_text as f64 * cache_read
        + fresh_audio as f64 * audio_input
        + cached_audio as f64 * audio_price.cache_read_per_token.unwrap_or(cache_read)
        + text_out as f64 * price.output_per_token
        + audio_out as f64
            * audio_price
                .output_per_token
                .unwrap_or(price.output_per_token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_of_the_shipped_table_parses() {
        let rows = TSV.lines().filter(|l| !l.starts_with('#')).count();
        assert!(rows > 100, "{rows}");
        assert_eq!(table().len(), rows);
    }

    #[test]
    fn realtime_models_have_audio_prices_by_name_and_by_prefix() {
        let p = audio_price("gpt-realtime");
        assert_eq!(p.input_per_token, Some(3.2e-5));
        assert_eq!(p.output_per_token, Some(6.4e-5));
        assert_eq!(audio_price("openai/GPT-Realtime-2099-01-01"), p);
        assert_eq!(audio_price("no-such-model"), AudioPrice::default());
    }

    #[test]
    fn audio_tokens_are_priced_apart_from_text() {
        let price = Price {
            input_per_token: 1.0,
            output_per_token: 2.0,
            cache_read_per_token: Some(0.5),
            ..Price::default()
        };
        let audio_price = AudioPrice {
            input_per_token: Some(10.0),
            cache_read_per_token: Some(0.25),
            output_per_token: Some(20.0),
        };
        let tokens = Usage {
            prompt_tokens: 100,
            completion_tokens: 40,
            cached_tokens: 20,
            ..Usage::default()
        };
        let audio = AudioTokens {
            input: 60,
            cached: 5,
            output: 30,
        };
        // Text in: 100 - 20 cached - 55 fresh audio = 25; cached text 15.
        let expected = 25.0 + 15.0 * 0.5 + 55.0 * 10.0 + 5.0 * 0.25 + 10.0 * 2.0 + 30.0 * 20.0;
        assert_eq!(cost(tokens, audio, price, audio_price), expected);
        // Without audio prices, every token costs what text does.
        assert_eq!(
            cost(tokens, audio, price, AudioPrice::default()),
            super::super::cost(tokens, price)
        );
        // Counts beyond their totals are cut to them.
        let odd = AudioTokens {
            input: 1000,
            cached: 1000,
            output: 1000,
        };
        assert!(cost(tokens, odd, price, audio_price).is_finite());
    }
}
