//! How a media request is priced: an image generation per image or token
//! (`images`), text to speech per character of its input, a transcription
//! per second of audio or per token, as LiteLLM's cost calculator prices
//! them.

use super::images::{image_price, ImagePrice};
use super::media::media_price;
use super::prices::{price_for, Price};
use super::usage::Usage;
use crate::deployment::Deployment;
use crate::inbound::MediaAsk;

/// The price of one media request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MediaBill {
    /// An image generation.
    Image(ImagePrice),
    /// Text to speech.
    Speech(SpeechPrice),
    /// Speech to text: the answer's reported tokens at the model's token
    /// prices, else its seconds of audio at `output_cost_per_second` when
    /// that is above 0, else at `input_cost_per_second` (LiteLLM's order).
    Transcription {
        /// The model's token prices.
        tokens: Price,
        /// USD per second of audio.
        per_second: Option<f64>,
    },
}

/// What an answer reports besides its usage, read as it passed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Measured {
    /// Seconds of audio a transcription's answer reports.
    pub audio_seconds: f64,
    /// Images an image answer returned; `None` when not counted.
    pub images: Option<u64>,
}

/// The price of a text to speech request: its characters at
/// `input_cost_per_character` where the price map has one, else (models
/// priced by token, `gpt-4o-mini-tts`) its prompt tokens at the input
/// price.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpeechPrice {
    characters: u64,
    per_character: Option<f64>,
    tokens: Price,
}

/// How a transcription by `upstream_model` on `dep` is priced.
pub fn transcription_bill(dep: &Deployment, upstream_model: &str) -> MediaBill {
    let provider = dep.provider_name.to_ascii_lowercase();
    let model = upstream_model.trim().to_ascii_lowercase();
    let row = media_price(&format!("{provider}/{model}")).or_else(|| media_price(&model));
    let per_second = row.and_then(|m| {
        m.output_per_second
            .filter(|p| *p > 0.0)
            .or(m.input_per_second)
    });
    MediaBill::Transcription {
        tokens: price_for(dep, upstream_model),
        per_second,
    }
}

/// How `ask` is priced on `dep` as `upstream_model`.
pub fn media_bill(dep: &Deployment, upstream_model: &str, ask: &MediaAsk) -> MediaBill {
    match ask {
        MediaAsk::Image(ask) => MediaBill::Image(image_price(dep, upstream_model, ask)),
        MediaAsk::Speech { characters } => {
            let provider = dep.provider_name.to_ascii_lowercase();
            let model = upstream_model.trim().to_ascii_lowercase();
            let per_character = media_price(&format!("{provider}/{model}"))
                .or_else(|| media_price(&model))
                .and_then(|m| m.input_per_character);
            let tokens = price_for(dep, upstream_model);
            MediaBill::Speech(SpeechPrice {
                characters: *characters,
                per_character,
                tokens: Price {
                    input_per_token: tokens.input_per_token,
                    ..Price::default()
                },
            })
        }
    }
}

impl MediaBill {
    /// Whether the price map (or the config) prices this request.
    pub fn is_priced(&self) -> bool {
        match self {
            MediaBill::Image(i) => i.is_priced(),
            MediaBill::Speech(s) => s.per_character.is_some() || s.tokens.input_per_token > 0.0,
            MediaBill::Transcription { tokens, per_second } => {
                per_second.is_some() || tokens.input_per_token > 0.0
            }
        }
    }

    /// USD reserved against budgets beyond the prompt's tokens (a
    /// transcription's length is unknown until it is answered: nothing).
    pub fn reserved(&self) -> f64 {
        match self {
            MediaBill::Transcription { .. } => 0.0,
            MediaBill::Image(i) => i.reserved(),
            MediaBill::Speech(s) => s.per_character.unwrap_or(0.0) * s.characters as f64,
        }
    }

    /// The token prices admission reserves the prompt at (none for a
    /// transcription, whose body is audio).
    pub fn token_price(&self) -> Price {
        match self {
            MediaBill::Transcription { .. } => Price::default(),
            MediaBill::Image(i) => i.token_price(),
            MediaBill::Speech(s) if s.per_character.is_some() => Price::default(),
            MediaBill::Speech(s) => s.tokens,
        }
    }

    /// USD spent, given the answer's usage (reported, else estimated) and
    /// what else it reports (`measured`).
    pub fn cost(&self, usage: Usage, measured: Measured) -> f64 {
        let Measured {
            audio_seconds,
            images,
        } = measured;
        match self {
            MediaBill::Transcription { tokens, per_second } => {
                let reported = usage.prompt_tokens > 0 || usage.completion_tokens > 0;
                if reported && tokens.input_per_token > 0.0 {
                    super::cost(usage, *tokens)
                } else {
                    per_second.unwrap_or(0.0) * audio_seconds
                }
            }
            MediaBill::Image(i) => i.cost(usage, images),
            MediaBill::Speech(s) => match s.per_character {
                Some(_) => self.reserved(),
                None => usage.prompt_tokens as f64 * s.tokens.input_per_token,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    fn dep(model: &str) -> Deployment {
        let text = format!(
            "model_list:\n  - model_name: g\n    litellm_params: {{model: {model}, api_key: k, api_base: 'http://h:1'}}\n"
        );
        let mut c = Config::parse(Path::new("config.yaml"), &text, &|_| None).unwrap();
        c.deployments.remove(0)
    }

    fn secs(audio_seconds: f64) -> Measured {
        Measured {
            audio_seconds,
            images: None,
        }
    }

    #[test]
    fn speech_is_billed_per_character_else_per_token() {
        let ask = MediaAsk::Speech { characters: 1000 };
        let tts = media_bill(&dep("openai/tts-1-hd"), "tts-1-hd", &ask);
        assert!(tts.is_priced());
        assert!((tts.reserved() - 0.03).abs() < 1e-12);
        assert_eq!(tts.cost(Usage::default(), secs(0.0)), tts.reserved());
        assert_eq!(tts.token_price(), Price::default());
        let azure = media_bill(&dep("azure/tts-1"), "tts-1", &ask);
        assert!((azure.cost(Usage::default(), secs(0.0)) - 0.015).abs() < 1e-12);
        let mini = media_bill(&dep("openai/gpt-4o-mini-tts"), "gpt-4o-mini-tts", &ask);
        let usage = Usage {
            prompt_tokens: 100,
            ..Default::default()
        };
        assert!((mini.cost(usage, secs(0.0)) - 100.0 * 6e-7).abs() < 1e-15);
        assert_eq!(mini.reserved(), 0.0);
        let unknown = media_bill(&dep("openai/my-voice"), "my-voice", &ask);
        assert!(!unknown.is_priced());
    }

    #[test]
    fn transcription_is_billed_per_second_else_per_token() {
        // whisper-1: 0.0001 in and out a second; LiteLLM bills the output's.
        let whisper = transcription_bill(&dep("openai/whisper-1"), "whisper-1");
        assert!(whisper.is_priced());
        assert_eq!(whisper.reserved(), 0.0);
        assert!((whisper.cost(Usage::default(), secs(90.5)) - 0.00905).abs() < 1e-12);
        let gpt = transcription_bill(&dep("openai/gpt-4o-transcribe"), "gpt-4o-transcribe");
        let usage = Usage {
            prompt_tokens: 100,
            completion_tokens: 20,
            ..Default::default()
        };
        assert!((gpt.cost(usage, secs(9.0)) - (100.0 * 2.5e-6 + 20.0 * 1e-5)).abs() < 1e-12);
        assert!((gpt.cost(Usage::default(), secs(10.0)) - 10.0 * 0.0001).abs() < 1e-12);
    }
}
