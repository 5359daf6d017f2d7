//! Query strings of the management API's GET endpoints: percent-decoded
//! parameters taken one by one, and a 400 naming any parameter left over or
//! of the wrong form.

use super::body::bad_field;
use crate::error::GatewayError;
use std::str::FromStr;

/// The parameters of one query string.
#[derive(Debug, Default)]
pub struct Query {
    params: Vec<(String, String)>,
}

fn decode(name: &str, raw: &str) -> Result<String, GatewayError> {
    let spaced = raw.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| bad_field(name, "not valid UTF-8 once percent-decoded"))
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

    /// Refuses parameters nobody took.
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
}
