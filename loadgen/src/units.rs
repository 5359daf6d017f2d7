//! Human-friendly flag values: durations (`10s`, `500ms`, `2m`) and byte
//! sizes (`1k`, `64k`, `512k`, `1m`).

use std::str::FromStr;
use std::time::Duration;

/// A duration written as a number with an optional unit: `ms`, `s` (the
/// default), `m` or `h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl FromStr for HumanDuration {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (number, unit) = s.split_at(split);
        let n: f64 = number
            .parse()
            .map_err(|_| "expected a number with an optional unit (ms, s, m, h)".to_string())?;
        let secs = match unit {
            "ms" => n / 1000.0,
            "" | "s" => n,
            "m" => n * 60.0,
            "h" => n * 3600.0,
            other => return Err(format!("unknown unit {other:?} (use ms, s, m or h)")),
        };
        Duration::try_from_secs_f64(secs)
            .map(HumanDuration)
            .map_err(|e| e.to_string())
    }
}

/// A byte count written as a number with an optional `k` (KiB) or `m` (MiB)
/// suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub usize);

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.trim().to_ascii_lowercase();
        let lower = lower.strip_suffix('b').unwrap_or(&lower);
        let (number, scale) = match lower.as_bytes().last() {
            Some(b'k') => (&lower[..lower.len() - 1], 1024),
            Some(b'm') => (&lower[..lower.len() - 1], 1024 * 1024),
            _ => (lower, 1),
        };
        let n: usize = number
            .parse()
            .map_err(|_| "expected a size such as 1k, 64k or 512k".to_string())?;
        Ok(ByteSize(n * scale))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let d = |s: &str| s.parse::<HumanDuration>().map(|d| d.0);
        assert_eq!(d("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(d("10"), Ok(Duration::from_secs(10)));
        assert_eq!(d("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(d("1.5m"), Ok(Duration::from_secs(90)));
        assert!(d("10x").is_err());
        assert!(d("s").is_err());
    }

    #[test]
    fn sizes() {
        let b = |s: &str| s.parse::<ByteSize>().map(|b| b.0);
        assert_eq!(b("1k"), Ok(1024));
        assert_eq!(b("512K"), Ok(512 * 1024));
        assert_eq!(b("1m"), Ok(1 << 20));
        assert_eq!(b("300"), Ok(300));
        assert!(b("big").is_err());
    }
}
