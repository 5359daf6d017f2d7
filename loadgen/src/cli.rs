//! A small hand-rolled command-line reader shared by the subcommands.
//!
//! Accepts `--name value` and `--name=value`; each subcommand pulls flags
//! with [`Args::next_flag`] and their values with [`Args::value`].

use std::collections::VecDeque;
use std::str::FromStr;

/// Remaining command-line arguments.
#[derive(Debug)]
pub struct Args {
    items: VecDeque<String>,
    inline: Option<String>,
}

impl Args {
    /// Wraps `items` (without the program name).
    pub fn new<I: IntoIterator<Item = String>>(items: I) -> Self {
        Args {
            items: items.into_iter().collect(),
            inline: None,
        }
    }

    /// Takes the next positional word (e.g. a subcommand), if any.
    pub fn next_word(&mut self) -> Option<String> {
        self.items.pop_front()
    }

    /// Takes the next flag's name (without `--`). Fails on a stray
    /// positional argument or a `--flag=value` whose value went unread.
    pub fn next_flag(&mut self) -> Result<Option<String>, String> {
        if let Some(v) = self.inline.take() {
            return Err(format!("unexpected value {v:?}"));
        }
        let Some(item) = self.items.pop_front() else {
            return Ok(None);
        };
        let Some(flag) = item.strip_prefix("--") else {
            if item == "-h" {
                return Ok(Some("help".to_string()));
            }
            return Err(format!("unexpected argument {item:?}"));
        };
        match flag.split_once('=') {
            Some((name, value)) => {
                self.inline = Some(value.to_string());
                Ok(Some(name.to_string()))
            }
            None => Ok(Some(flag.to_string())),
        }
    }

    /// Takes and parses the value of flag `name`.
    pub fn value<T: FromStr>(&mut self, name: &str) -> Result<T, String>
    where
        T::Err: std::fmt::Display,
    {
        let raw = match self.inline.take() {
            Some(v) => v,
            None => self
                .items
                .pop_front()
                .ok_or_else(|| format!("--{name} needs a value"))?,
        };
        raw.parse()
            .map_err(|e| format!("--{name}: invalid value {raw:?}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Args {
        Args::new(s.split_whitespace().map(String::from))
    }

    #[test]
    fn flags_and_values() {
        let mut a = args("--port 9 --rate=0.5 --tls");
        assert_eq!(a.next_flag().unwrap().as_deref(), Some("port"));
        assert_eq!(a.value::<u16>("port").unwrap(), 9);
        assert_eq!(a.next_flag().unwrap().as_deref(), Some("rate"));
        assert_eq!(a.value::<f64>("rate").unwrap(), 0.5);
        assert_eq!(a.next_flag().unwrap().as_deref(), Some("tls"));
        assert_eq!(a.next_flag().unwrap(), None);
    }

    #[test]
    fn errors() {
        assert!(args("stray").next_flag().is_err());
        let mut a = args("--port");
        a.next_flag().unwrap();
        assert!(a.value::<u16>("port").is_err());
        let mut a = args("--port x");
        a.next_flag().unwrap();
        assert!(a.value::<u16>("port").is_err());
        let mut a = args("--help=1");
        a.next_flag().unwrap();
        assert!(a.next_flag().is_err());
    }
}
