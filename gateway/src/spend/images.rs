//! What an image generation on OpenAI or Azure OpenAI costs, as LiteLLM's
//! image cost calculator prices it: a `gpt-image` model whose answer
//! reports token usage is billed by token (prompt tokens at the input
//! price, generated tokens at `output_cost_per_image_token`); every other
//! answer per image, at the price of the first name of LiteLLM's list
//! (`{quality}/{size}/{model}`, `{provider}/{quality}/{size}/{model}`,
//! `{size}/{model}`, `high/{size}/{model}`, ... the model) the price map
//! has: its `input_cost_per_image`, else `output_cost_per_image`, else
//! `input_cost_per_pixel` times the image's pixels. An ask without a size
//! is priced at 1024x1024 (OpenAI's default), without a quality at
//! `standard` (LiteLLM's). Bedrock and Vertex AI image models are priced
//! at `output_cost_per_image` first (their cost calculators' field), and
//! Bedrock's SDXL at `{size}/50-steps/{model}` first. A deployment's own
//! per-image prices (`litellm_params` or `model_info`:
//! `input_cost_per_image`, `output_cost_per_image`, `input_cost_per_pixel`,
//! `output_cost_per_image_token`) come before the map's, as LiteLLM lays a
//! deployment's price table over the shared one. Per-image prices are
//! billed per image the answer returned (LiteLLM's `len(response.data)`);
//! admission reserves every image asked for.

use super::media::{media_price, MediaPrice};
use super::prices::{listed, price_for, Price};
use super::usage::Usage;
use crate::deployment::Deployment;
use crate::inbound::ImageAsk;

/// The side of an image whose size the ask does not give.
const DEFAULT_SIDE: u64 = 1024;
/// The quality LiteLLM prices an ask without one at.
const DEFAULT_QUALITY: &str = "standard";

/// The price of one image generation request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImagePrice {
    /// Images asked for.
    images: u64,
    /// USD per image of the asked size and quality, where the map has it.
    per_image: Option<f64>,
    /// A `gpt-image` model's USD per input token and per generated token.
    tokens: Option<(f64, f64)>,
}

/// The price of generating `ask` with `upstream_model` on `dep`.
pub fn image_price(dep: &Deployment, upstream_model: &str, ask: &ImageAsk) -> ImagePrice {
    let provider = dep.provider_name.to_ascii_lowercase();
    let model = upstream_model.trim().to_ascii_lowercase();
    let (w, h) = ask.size.unwrap_or((DEFAULT_SIDE, DEFAULT_SIDE));
    let quality = ask
        .quality
        .as_deref()
        .unwrap_or(DEFAULT_QUALITY)
        .to_ascii_lowercase();
    let names = Names {
        provider: &provider,
        model: &model,
        size: &format!("{w}-x-{h}"),
        quality: &quality,
    };
    let tokens = if model.contains("gpt-image") {
        token_prices(dep, upstream_model, &provider, &model)
    } else {
        None
    };
    let pixels = w.saturating_mul(h);
    let configured = MediaPrice {
        input_per_image: dep.image_prices.input_per_image,
        output_per_image: dep.image_prices.output_per_image,
        input_per_pixel: dep.image_prices.input_per_pixel,
        ..MediaPrice::default()
    };
    ImagePrice {
        images: ask.n,
        per_image: per_image(&configured, &provider, pixels).or_else(|| names.flat_price(pixels)),
        tokens,
    }
}

/// USD per image from one price table's row: Bedrock's and Vertex AI's
/// cost calculators read the price per generated image first (Titan lists
/// 0 per input image beside it), the others the input one; else the price
/// per pixel times `pixels`.
fn per_image(row: &MediaPrice, provider: &str, pixels: u64) -> Option<f64> {
    let per_image = if matches!(provider, "bedrock" | "vertex_ai") {
        row.output_per_image.or(row.input_per_image)
    } else {
        row.input_per_image.or(row.output_per_image)
    };
    per_image.or(row.input_per_pixel.map(|p| p * pixels as f64))
}

/// The parts of the names LiteLLM looks an image price up by.
struct Names<'a> {
    provider: &'a str,
    model: &'a str,
    /// `{width}-x-{height}`.
    size: &'a str,
    quality: &'a str,
}

impl Names<'_> {
    /// USD per image: the first listed name's per-image price, else its
    /// per-pixel price times `pixels`. `None` when no name is listed, or
    /// the first listed has neither (LiteLLM then finds no price).
    fn flat_price(&self, pixels: u64) -> Option<f64> {
        let Names {
            provider,
            model,
            size,
            quality,
        } = *self;
        let without_provider = model
            .strip_prefix(provider)
            .and_then(|rest| rest.strip_prefix('/'));
        let base = match without_provider {
            Some(rest) => format!("{provider}/{size}/{rest}"),
            None => format!("{size}/{model}"),
        };
        let last = model.rsplit('/').next().unwrap_or(model);
        // Bedrock's SDXL is priced by size and steps (LiteLLM's default
        // 50 steps).
        let steps = (provider == "bedrock").then(|| format!("{size}/50-steps/{model}"));
        let candidates = [
            steps,
            Some(format!("{quality}/{base}")),
            Some(format!(
                "{provider}/{quality}/{size}/{}",
                without_provider.unwrap_or(model)
            )),
            Some(base.clone()),
            Some(format!("high/{base}")),
            Some(format!("{quality}/{size}/{last}")),
            Some(format!("{size}/{last}")),
            Some(model.to_string()),
            without_provider.map(str::to_string),
        ];
        let matched = candidates
            .iter()
            .flatten()
            .find(|name| media_price(name).is_some() || listed(name))?;
        per_image(media_price(matched)?, provider, pixels)
    }
}

/// A `gpt-image` model's input price per token (configured, else the
/// map's) and output price per image token (configured, else
/// `{provider}/{model}`'s, else the model's; else its output price per
/// token).
fn token_prices(
    dep: &Deployment,
    upstream_model: &str,
    provider: &str,
    model: &str,
) -> Option<(f64, f64)> {
    let tokens = price_for(dep, upstream_model);
    let output = dep
        .image_prices
        .output_per_image_token
        .or_else(|| {
            media_price(&format!("{provider}/{model}"))
                .or_else(|| media_price(model))
                .and_then(|m| m.output_per_image_token)
        })
        .or((tokens.output_per_token > 0.0).then_some(tokens.output_per_token))?;
    Some((tokens.input_per_token, output))
}

impl ImagePrice {
    /// Whether the price map (or the config) prices this request.
    pub fn is_priced(&self) -> bool {
        self.per_image.is_some() || self.tokens.is_some()
    }

    /// USD reserved against budgets beyond the prompt: every image asked
    /// for at its per-image price.
    pub fn reserved(&self) -> f64 {
        self.per_image.unwrap_or(0.0) * self.images as f64
    }

    /// The token prices admission reserves the prompt at (zero for a model
    /// billed per image).
    pub fn token_price(&self) -> Price {
        let (input, output) = self.tokens.unwrap_or((0.0, 0.0));
        Price {
            input_per_token: input,
            output_per_token: output,
            ..Price::default()
        }
    }

    /// USD spent, given the answer's `usage` (reported, else estimated:
    /// an estimate never has generated tokens) and the images it returned
    /// (`None` when they were not counted: every image asked for).
    pub fn cost(&self, usage: Usage, returned: Option<u64>) -> f64 {
        match self.tokens {
            Some((input, output)) if usage.completion_tokens > 0 => {
                usage.prompt_tokens as f64 * input + usage.completion_tokens as f64 * output
            }
            _ => self.per_image.unwrap_or(0.0) * returned.unwrap_or(self.images) as f64,
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
            "model_list:\n  - model_name: g\n    litellm_params: {{model: {model}, api_key: k, api_base: 'http://h:1', api_version: '2024-02-01'}}\n"
        );
        let mut c = Config::parse(Path::new("config.yaml"), &text, &|_| None).unwrap();
        c.deployments.remove(0)
    }

    fn ask(n: u64, size: Option<(u64, u64)>, quality: Option<&str>) -> ImageAsk {
        ImageAsk {
            n,
            size,
            quality: quality.map(str::to_string),
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * b.abs().max(1.0)
    }

    #[test]
    fn azure_dall_e_is_priced_per_pixel_by_size_and_quality() {
        let d = dep("azure/dall-e-3");
        let p = image_price(&d, "dall-e-3", &ask(1, None, None));
        // azure/standard/1024-x-1024/dall-e-3: 4.19617e-08 a pixel.
        assert!(close(
            p.cost(Usage::default(), Some(1)),
            4.19617e-08 * 1024.0 * 1024.0
        ));
        let hd = image_price(&d, "dall-e-3", &ask(2, Some((1792, 1024)), Some("hd")));
        assert!(close(hd.reserved(), 2.0 * 7.19343e-08 * 1792.0 * 1024.0));
        assert!(hd.is_priced());
    }

    #[test]
    fn gpt_image_is_billed_by_token_when_usage_is_reported_else_per_image() {
        let d = dep("openai/gpt-image-1");
        let p = image_price(&d, "gpt-image-1", &ask(2, Some((1024, 1024)), Some("low")));
        // low/1024-x-1024/gpt-image-1: 0.011 an image.
        assert!(close(p.reserved(), 0.022));
        let estimated = Usage {
            prompt_tokens: 9,
            ..Default::default()
        };
        assert!(close(p.cost(estimated, None), 0.022));
        assert!(close(p.cost(estimated, Some(1)), 0.011));
        let reported = Usage {
            prompt_tokens: 10,
            completion_tokens: 544,
            ..Default::default()
        };
        assert!(close(p.cost(reported, Some(1)), 10.0 * 5e-6 + 544.0 * 4e-5));
        assert_eq!(p.token_price().input_per_token, 5e-6);
        // No quality: LiteLLM's `high/{size}/{model}` is the first listed.
        let auto = image_price(&d, "gpt-image-1", &ask(1, None, None));
        assert!(close(auto.reserved(), 0.167));
    }

    #[test]
    fn bedrock_images_are_priced_per_generated_image() {
        let d = dep("bedrock/amazon.titan-image-generator-v2:0");
        let p = image_price(&d, "amazon.titan-image-generator-v2:0", &ask(3, None, None));
        // 0 per input image, 0.008 per generated one.
        assert!(close(p.reserved(), 3.0 * 0.008));
        let d = dep("bedrock/stability.sd3-large-v1:0");
        let p = image_price(&d, "stability.sd3-large-v1:0", &ask(1, None, None));
        assert!(close(p.reserved(), 0.08));
        let d = dep("bedrock/stability.stable-diffusion-xl-v1");
        let p = image_price(&d, "stability.stable-diffusion-xl-v1", &ask(1, None, None));
        // 1024-x-1024/50-steps/stability.stable-diffusion-xl-v1.
        assert!(close(p.reserved(), 0.04));
    }

    #[test]
    fn a_deployments_own_image_prices_come_first_and_images_returned_are_billed() {
        let priced = |model: &str, info: &str| {
            let text = format!(
                "model_list:\n  - model_name: g\n    litellm_params: {{model: {model}, api_key: k, api_base: 'http://h:1', vertex_project: p, aws_region_name: us-east-1}}\n    model_info: {{{info}}}\n"
            );
            let mut c = Config::parse(Path::new("config.yaml"), &text, &|_| None).unwrap();
            c.deployments.remove(0)
        };
        // LiteLLM's map prices no vertex_ai Imagen model: model_info does.
        let d = priced(
            "vertex_ai/imagen-3.0-generate-002",
            "output_cost_per_image: 0.04",
        );
        let p = image_price(&d, "imagen-3.0-generate-002", &ask(3, None, None));
        assert!(p.is_priced());
        assert!(close(p.reserved(), 0.12));
        assert!(close(p.cost(Usage::default(), Some(2)), 0.08));
        assert_eq!(p.cost(Usage::default(), Some(0)), 0.0);
        // Over the map's price; per pixel too.
        let d = priced(
            "bedrock/amazon.titan-image-generator-v2:0",
            "output_cost_per_image: 0.5",
        );
        let p = image_price(&d, "amazon.titan-image-generator-v2:0", &ask(1, None, None));
        assert!(close(p.reserved(), 0.5));
        let d = priced("openai/my-painter", "input_cost_per_pixel: 1.0e-8");
        let p = image_price(&d, "my-painter", &ask(1, Some((512, 512)), None));
        assert!(close(p.reserved(), 512.0 * 512.0 * 1e-8));
        let d = priced("openai/gpt-image-1", "output_cost_per_image_token: 1.0e-4");
        let p = image_price(&d, "gpt-image-1", &ask(1, None, None));
        let reported = Usage {
            prompt_tokens: 10,
            completion_tokens: 100,
            ..Default::default()
        };
        assert!(close(p.cost(reported, Some(1)), 10.0 * 5e-6 + 100.0 * 1e-4));
    }

    #[test]
    fn unlisted_models_are_unpriced() {
        let d = dep("openai/my-painter");
        let p = image_price(&d, "my-painter", &ask(3, None, None));
        assert!(!p.is_priced());
        assert_eq!(p.cost(Usage::default(), Some(3)), 0.0);
        assert_eq!(p.reserved(), 0.0);
    }
}
