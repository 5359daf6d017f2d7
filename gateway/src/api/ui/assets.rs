//! The console's files, built into the binary from `gateway/ui/` at compile
//! time: each with its content type and an ETag (a prefix of its sha256,
//! computed once).

use sha2::{Digest, Sha256};
use std::sync::LazyLock;

/// One file of the console.
pub struct Asset {
    /// Its path under `/ui/`.
    pub name: &'static str,
    /// Its `content-type`.
    pub content_type: &'static str,
    /// Its bytes.
    pub body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $type:expr) => {
        Asset {
            name: $name,
            content_type: $type,
            body: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/ui/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file the console serves; `index.html` also answers `/ui`.
static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("chart.js", JS),
    asset!("pages/keys.js", JS),
    asset!("pages/teams.js", JS),
    asset!("pages/users.js", JS),
    asset!("pages/organizations.js", JS),
    asset!("pages/models.js", JS),
    asset!("pages/usage.js", JS),
    asset!("pages/logs.js", JS),
    asset!("pages/limits.js", JS),
    asset!("pages/health.js", JS),
];

/// The ETag of each asset, in [`ASSETS`] order.
static ETAGS: LazyLock<Vec<String>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|a| format!("\"{}\"", &hex::encode(Sha256::digest(a.body))[..20]))
        .collect()
});

/// The asset at `name` (the path after `/ui/`; empty for the index), with
/// its ETag.
pub fn find(name: &str) -> Option<(&'static Asset, &'static str)> {
    let name = if name.is_empty() { "index.html" } else { name };
    let i = ASSETS.iter().position(|a| a.name == name)?;
    Some((&ASSETS[i], ETAGS[i].as_str()))
}

/// Whether an `If-None-Match` value names `etag` (weak or strong, or `*`).
pub fn matches(if_none_match: &str, etag: &str) -> bool {
    if_none_match.split(',').map(str::trim).any(|tag| {
        let tag = tag.strip_prefix("W/").unwrap_or(tag);
        tag == "*" || tag == etag
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_found_with_its_type_and_an_etag() {
        for a in ASSETS {
            let (found, etag) = find(a.name).unwrap();
            assert!(!found.body.is_empty(), "{}", a.name);
            assert!(etag.starts_with('"') && etag.len() == 22, "{etag}");
            if a.name.ends_with(".js") {
                assert_eq!(found.content_type, JS);
            }
        }
        assert_eq!(find("").unwrap().0.name, "index.html");
        for unknown in ["nope.js", "../Cargo.toml", "pages", "pages/"] {
            assert!(find(unknown).is_none(), "{unknown}");
        }
    }

    #[test]
    fn if_none_match_lists_are_read() {
        assert!(matches("\"a\"", "\"a\""));
        assert!(matches("\"x\", W/\"a\"", "\"a\""));
        assert!(matches("*", "\"a\""));
        assert!(!matches("\"b\"", "\"a\""));
    }
}
