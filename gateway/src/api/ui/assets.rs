//! The console's files, built into the binary from `gateway/ui/` at compile
//! time: each with its content type, a gzip copy and an ETag for each form
//! (a prefix of its sha256), made once on first use.

use flate2::write::GzEncoder;
use flate2::Compression;
use sha2::{Digest, Sha256};
use std::io::Write;
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
    asset!("pages/team_members.js", JS),
    asset!("pages/users.js", JS),
    asset!("pages/organizations.js", JS),
    asset!("pages/models.js", JS),
    asset!("pages/usage.js", JS),
    asset!("pages/logs.js", JS),
    asset!("pages/limits.js", JS),
    asset!("pages/health.js", JS),
];

/// One asset as served: its ETag, and its gzip form with that form's ETag.
pub struct Served {
    /// The file.
    pub asset: &'static Asset,
    /// The ETag of its bytes as they are.
    pub etag: String,
    /// Its bytes gzipped.
    pub gzip: Vec<u8>,
    /// The ETag of the gzipped bytes.
    pub gzip_etag: String,
}

fn etag(bytes: &[u8]) -> String {
    format!("\"{}\"", &hex::encode(Sha256::digest(bytes))[..20])
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
    encoder
        .write_all(bytes)
        .and_then(|()| encoder.finish())
        .expect("gzip into memory")
}

/// Every asset as served, in [`ASSETS`] order.
static SERVED: LazyLock<Vec<Served>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|asset| {
            let gzip = gzip(asset.body);
            Served {
                asset,
                etag: etag(asset.body),
                gzip_etag: etag(&gzip),
                gzip,
            }
        })
        .collect()
});

/// The asset at `name` (the path after `/ui/`; empty for the index).
pub fn find(name: &str) -> Option<&'static Served> {
    let name = if name.is_empty() { "index.html" } else { name };
    let i = ASSETS.iter().position(|a| a.name == name)?;
    Some(&SERVED[i])
}

/// Whether an `Accept-Encoding` value accepts gzip (`gzip` or `*`, with a
/// quality above zero).
pub fn accepts_gzip(accept_encoding: &str) -> bool {
    accept_encoding.split(',').any(|item| {
        let mut parts = item.split(';').map(str::trim);
        let coding = parts.next().unwrap_or_default();
        let refused = parts.any(|p| {
            p.strip_prefix("q=")
                .and_then(|q| q.parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
    })
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
    fn every_asset_is_found_with_its_type_etags_and_a_gzip_copy() {
        for a in ASSETS {
            let served = find(a.name).unwrap();
            assert!(!served.asset.body.is_empty(), "{}", a.name);
            for tag in [&served.etag, &served.gzip_etag] {
                assert!(tag.starts_with('"') && tag.len() == 22, "{tag}");
            }
            assert_ne!(served.etag, served.gzip_etag);
            let mut plain = Vec::new();
            std::io::Read::read_to_end(
                &mut flate2::read::GzDecoder::new(&served.gzip[..]),
                &mut plain,
            )
            .unwrap();
            assert_eq!(plain, a.body, "{}", a.name);
            if a.name.ends_with(".js") {
                assert_eq!(served.asset.content_type, JS);
            }
        }
        assert_eq!(find("").unwrap().asset.name, "index.html");
        for unknown in ["nope.js", "../Cargo.toml", "pages", "pages/"] {
            assert!(find(unknown).is_none(), "{unknown}");
        }
    }

    #[test]
    fn accept_encoding_is_read() {
        for yes in ["gzip", "gzip, deflate, br", "br;q=1, GZIP;q=0.5", "*"] {
            assert!(accepts_gzip(yes), "{yes}");
        }
        for no in ["", "br", "identity", "gzip;q=0", "deflate, gzip;q=0.0"] {
            assert!(!accepts_gzip(no), "{no}");
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
