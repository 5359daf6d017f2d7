//! Spend: the USD cost of LLM requests, as pure functions over bytes and
//! config (no IO, no state).
//!
//! Spend tracking and budgets need a cost for every request, and the cost
//! comes from token usage times a price. Usage is what the provider reports
//! (a response's `usage`, or a stream's final usage chunk, which
//! [`inject_include_usage`] asks for), else an estimate from the text at 4
//! characters a token. Prices come from the deployment's config first
//! (`input_cost_per_token`, `output_cost_per_token`, cache prices, per-second
//! prices), then from LiteLLM's model price map shipped here
//! (`gateway/data/model_prices.tsv`); a model in neither costs 0. Admission
//! reserves [`worst_case_cost`] against a budget before the request runs.
//!
//! [`writer`] is spend's background half: it writes the rows to the store
//! from the control plane (a layer above the pure cost functions).

mod audio;
mod bill;
mod chunk_skim;
mod cost;
mod image_count;
mod images;
mod logs;
mod media;
mod member;
mod prices;
pub mod prompt_privacy;
mod prompt_skim;
pub mod prompts;
mod tsv;
mod unpriced;
mod usage;
mod usage_skim;
pub mod writer;

pub use audio::{audio_price, cost as realtime_cost, AudioPrice, AudioTokens};
pub use bill::{media_bill, transcription_bill, Measured, MediaBill, SpeechPrice};
pub use cost::{cost, time_cost, worst_case_cost};
pub use image_count::ImageCount;
pub use images::ImagePrice;
pub use logs::SpendLogs;
pub use prices::{
    is_priced, max_input_tokens, max_output_tokens, price_for, shipped, ModelPrice, Price,
};
pub use unpriced::UnpricedModels;
pub use usage::{
    estimate_of_read_input, estimate_prompt_tokens, from_response_body, from_response_tail,
    inject_include_usage, inject_include_usage_estimating, tokens_of_chars, PromptEstimate,
    StreamUsage, Usage, UsageSource,
};
