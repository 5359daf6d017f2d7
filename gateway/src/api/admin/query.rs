//! Query strings of the management API's GET endpoints: percent-decoded
//! parameters taken one by one, and a 400 naming any parameter left over or
//! of the wrong form. Nothing reaches the store that it would refuse: no
//! NUL character (Postgres text cannot hold one), no parameter longer than
//! [`MAX_PARAM_BYTES`], no date outside years 1 to 9999.

use super::body::bad_field;
use crate::error::GatewayError;
use std::str::FromStr;

/// The parameters of one query string.
#[derive(Debug, Default, Clone)]
pub struct Query {
    params: Vec<(String, String)>,
}

/// The longest parameter value (an id, a date, a number) taken.
pub const MAX_PARAM_BYTES: usize = 1024;

fn decode(name: &str, raw: &str) -> Result<String, GatewayError> {
    let spaced = raw.replace('+', " ");
    let text = percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| bad_field(name, "not valid UTF-8 once percent-decoded"))?;
    if text.contains('\0') {
        return Err(bad_field(name, "contains a NUL character"));
    }
    if text.len() > MAX_PARAM_BYTES {
        return Err(bad_field(
            name,
            format!(
                "is {} bytes long; at most {MAX_PARAM_BYTES} are accepted",
                text.len()
            ),
        ));
    }
    Ok(text)
}

/// A `YYYY-MM-DD` date of parameter `name`, year 1 to 9999 (what LiteLLM's
/// Python dates and the database hold).
pub fn date(name: &str, text: &str) -> Result<chrono::NaiveDate, GatewayError> {
    let bad = || {
        bad_field(
            name,
            format!("'{text}' is not a YYYY-MM-DD date (years 1 to 9999)"),
        )
    };
    let b = text.as_bytes();
    let shaped = b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit());
    if !shaped {
        return Err(bad());
    }
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .filter(|d| chrono::Datelike::year(d) >= 1)
        .ok_or_else(bad)
}

impl Query {
    /// Parses `a=1&b=x%20y`; a name without `=` has an empty value.
    pub fn parse(raw: &str) -> Result<Query, GatewayError> {
        let mut params = Vec::new();
        for pair in raw.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = decode("query", name)?;
            let value = decode(&name, value)?;
            params.push((name, value));
        }
        Ok(Query { params })
    }

    /// Takes parameter `name` (its first occurrence); an empty value counts
    /// as absent.
    pub fn take(&mut self, name: &str) -> Option<String> {
        let first = self
            .params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone());
        self.params.retain(|(n, _)| n != name);
        first.filter(|v| !v.is_empty())
    }

    /// Takes parameter `name` parsed as `T`.
    pub fn take_parsed<T: FromStr>(&mut self, name: &str) -> Result<Option<T>, GatewayError> {
        self.take(name)
            .map(|v| {
                v.parse()
                    .map_err(|_| bad_field(name, format!("'{v}' is not a valid value")))
            })
            .transpose()
    }

    /// Takes parameter `name` as a [`date`].
    pub fn take_date(&mut self, name: &str) -> Result<Option<chrono::NaiveDate>, GatewayError> {
        self.take(name).map(|v| date(name, &v)).transpose()
    }

    /// Refuses parameters nobody took.
    /// The value of `name`, if given (left in place).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Pins `name` to `value`: an absent parameter is set, one given with
    /// another value is refused.
    pub fn restrict(&mut self, name: &str, value: &str) -> Result<(), ()> {
        if self.params.iter().any(|(n, v)| n == name && v != value) {
            return Err(());
        }
        self.params.retain(|(n, _)| n != name);
        self.params.push((name.to_string(), value.to_string()));
        Ok(())
    }

    pub fn finish(self) -> Result<(), GatewayError> {
        match self.params.first() {
            Some((name, _)) => Err(bad_field(name, "unknown query parameter")),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restrict_pins_a_parameter() {
        let mut q = Query::parse("page=2").unwrap();
        assert!(q.restrict("user_id", "alice").is_ok());
        assert_eq!(q.take("user_id").as_deref(), Some("alice"));
        let mut q = Query::parse("user_id=alice").unwrap();
        assert!(q.restrict("user_id", "alice").is_ok());
        let mut q = Query::parse("user_id=alice&user_id=bob").unwrap();
        assert!(q.restrict("user_id", "alice").is_err());
    }

    #[test]
    fn decodes_takes_and_refuses_leftovers() {
        let mut q = Query::parse("user_id=a%40b.c&page=2&size=&x=1+2").unwrap();
        assert_eq!(q.take("user_id").as_deref(), Some("a@b.c"));
        assert_eq!(q.take_parsed::<u32>("page").unwrap(), Some(2));
        assert_eq!(q.take("size"), None);
        assert_eq!(q.take("missing"), None);
        let err = q.finish().unwrap_err();
        assert_eq!(err.param(), Some("x"));
    }

    #[test]
    fn names_a_malformed_parameter() {
        let mut q = Query::parse("page=two").unwrap();
        assert_eq!(
            q.take_parsed::<u32>("page").unwrap_err().param(),
            Some("page")
        );
        assert!(Query::parse("k=%FF").is_err());
        assert!(Query::parse("").unwrap().finish().is_ok());
    }

    #[test]
    fn refuses_nul_and_overlong_values_naming_them() {
        let err = Query::parse("user_id=a%00b").unwrap_err();
        assert_eq!(err.param(), Some("user_id"));
        let long = format!("team_id={}", "x".repeat(MAX_PARAM_BYTES + 1));
        assert_eq!(Query::parse(&long).unwrap_err().param(), Some("team_id"));
        assert!(Query::parse(&format!("team_id={}", "x".repeat(MAX_PARAM_BYTES))).is_ok());
    }

    #[test]
    fn dates_are_four_digit_years_from_1_to_9999() {
        let mut q = Query::parse("a=2026-01-31&b=9999-12-31&c=0001-01-01").unwrap();
        assert_eq!(q.take_date("a").unwrap().unwrap().to_string(), "2026-01-31");
        assert!(q.take_date("b").unwrap().is_some());
        assert!(q.take_date("c").unwrap().is_some());
        for bad in [
            "-262143-01-01",
            "+10000-01-01",
            "0000-01-01",
            "2026-02-30",
            "2026-1-01",
            "26-01-01",
            "2026-01-01T00:00",
            "２０２６-01-01",
        ] {
            let mut q = Query::parse(&format!("start_date={bad}")).unwrap();
            let err = q.take_date("start_date").unwrap_err();
            assert_eq!(err.param(), Some("start_date"), "{bad}");
        }
    }
}
