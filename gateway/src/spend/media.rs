//! Prices of media from LiteLLM's model price map: per image, per pixel,
//! per image token, per character and per second of audio
//! (`gateway/data/media_prices.tsv`, written by `scripts/refresh_prices.sh`;
//! MIT licence, see `gateway/data/LICENSE-litellm`). Looked up by exact
//! (lowercase) name, as LiteLLM's image cost calculator looks up the names
//! it builds; parsed once, on first use.

use super::tsv;
use std::collections::HashMap;
use std::sync::OnceLock;

/// The embedded table: `#` comment lines, then one tab-separated row per
/// lowercase name: input and output cost per image, input cost per pixel,
/// input and output cost per image token, input cost per character, input
/// and output cost per second (USD);
/// empty where LiteLLM has no value.
static TSV: &str = include_str!("../../data/media_prices.tsv");

/// One row of the table.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MediaPrice {
    /// `input_cost_per_image`.
    pub input_per_image: Option<f64>,
    /// `output_cost_per_image`.
    pub output_per_image: Option<f64>,
    /// `input_cost_per_pixel` (of the generated image).
    pub input_per_pixel: Option<f64>,
    /// `input_cost_per_image_token`.
    pub input_per_image_token: Option<f64>,
    /// `output_cost_per_image_token`.
    pub output_per_image_token: Option<f64>,
    /// `input_cost_per_character` (text to speech).
    pub input_per_character: Option<f64>,
    /// `input_cost_per_second` (of audio transcribed).
    pub input_per_second: Option<f64>,
    /// `output_cost_per_second`.
    pub output_per_second: Option<f64>,
}

fn table() -> &'static HashMap<&'static str, MediaPrice> {
    static TABLE: OnceLock<HashMap<&'static str, MediaPrice>> = OnceLock::new();
    TABLE.get_or_init(|| tsv::rows_by_name(TSV, parse_row))
}

/// One row; `None` if malformed (the refresh script writes none, and a
/// test checks every row parses).
fn parse_row(line: &'static str) -> Option<(&'static str, MediaPrice)> {
    let mut cols = line.split('\t');
    let name = cols.next().filter(|n| !n.is_empty())?;
    let mut f = || tsv::price(&mut cols);
    Some((
        name,
        MediaPrice {
            input_per_image: f()?,
            output_per_image: f()?,
            input_per_pixel: f()?,
            input_per_image_token: f()?,
            output_per_image_token: f()?,
            input_per_character: f()?,
            input_per_second: f()?,
            output_per_second: f()?,
        },
    ))
}

/// The row named `name` exactly (case ignored).
pub fn media_price(name: &str) -> Option<&'static MediaPrice> {
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        table().get(name.to_ascii_lowercase().as_str())
    } else {
        table().get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_parses_and_names_are_exact() {
        let rows = TSV.lines().filter(|l| !l.starts_with('#')).count();
        assert!(rows > 500, "{rows} rows");
        assert_eq!(table().len(), rows);
        let low = media_price("low/1024-x-1024/gpt-image-1").unwrap();
        assert_eq!(low.input_per_image, Some(0.011));
        let dalle = media_price("AZURE/standard/1024-x-1024/dall-e-3").unwrap();
        assert_eq!(dalle.input_per_pixel, Some(4.19617e-08));
        let tokens = media_price("gpt-image-1").unwrap();
        assert_eq!(tokens.output_per_image_token, Some(4e-05));
        assert_eq!(
            media_price("tts-1").unwrap().input_per_character,
            Some(1.5e-05)
        );
        assert_eq!(media_price("gpt-image"), None, "no prefix matching");
        let whisper = media_price("whisper-1").unwrap();
        assert_eq!(
            (whisper.input_per_second, whisper.output_per_second),
            (Some(0.0001), Some(0.0001))
        );
    }
}
