//! Inline images as Bedrock and Gemini check them: base64 that decodes to
//! bytes of the declared format (sniffed from the magic numbers). A prompt
//! containing `mock-describe-images` gets, instead of lorem ipsum, one
//! `<media type> <bytes>` line per image received, so tests see what
//! reached the provider.

use base64::Engine;

/// The image format the bytes start like: `png`, `jpeg`, `gif` or `webp`.
pub fn sniff(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("png")
    } else if bytes.starts_with(b"\xff\xd8\xff") {
        Some("jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("gif")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("webp")
    } else {
        None
    }
}

/// Checks base64 `data` declared as `format` (`png`, `jpeg`...); the
/// decoded length, or why it is refused.
pub fn check(format: &str, data: &str) -> Result<usize, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| format!("image data is not valid base64: {e}"))?;
    match sniff(&bytes) {
        Some(f) if f == format => Ok(bytes.len()),
        Some(f) => Err(format!(
            "The provided image format ({format}) does not match the image data ({f})"
        )),
        None => Err("Could not process image: unsupported or corrupt image data".into()),
    }
}

/// The answer text for `mock-describe-images`: one line per image.
pub fn describe(seen: &[(String, usize)]) -> String {
    seen.iter()
        .map(|(media, len)| format!("{media} {len}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_sniffed_and_checked() {
        let png = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG\r\n\x1a\nrest");
        assert_eq!(check("png", &png), Ok(12));
        assert!(check("jpeg", &png).unwrap_err().contains("does not match"));
        assert!(check("png", "@@").is_err());
        assert!(check("gif", "AAAA").is_err());
        assert_eq!(sniff(b"RIFF\0\0\0\0WEBPVP8 "), Some("webp"));
        assert_eq!(
            describe(&[("image/png".into(), 3), ("image/gif".into(), 4)]),
            "image/png 3\nimage/gif 4"
        );
    }
}
