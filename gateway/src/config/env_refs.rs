//! `os.environ/NAME` references: LiteLLM lets any string value name an
//! environment variable instead of holding a secret inline.

use serde_yaml::Value;

const PREFIX: &str = "os.environ/";

/// A reference whose variable is not set.
#[derive(Debug, PartialEq, Eq)]
pub struct MissingVar {
    /// Where in the document, e.g. `model_list[0].litellm_params.api_key`.
    pub path: String,
    /// The variable's name.
    pub var: String,
}

/// Replaces every `os.environ/NAME` string in `doc` by the variable's value,
/// using `lookup` to read the environment.
pub fn resolve(doc: &mut Value, lookup: &dyn Fn(&str) -> Option<String>) -> Result<(), MissingVar> {
    walk(doc, String::new(), lookup)
}

fn walk(
    value: &mut Value,
    path: String,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), MissingVar> {
    match value {
        Value::String(s) => {
            if let Some(var) = s.strip_prefix(PREFIX) {
                let var = var.trim().to_string();
                match lookup(&var) {
                    Some(v) => *s = v,
                    None => return Err(MissingVar { path, var }),
                }
            }
            Ok(())
        }
        Value::Sequence(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                walk(item, format!("{path}[{i}]"), lookup)?;
            }
            Ok(())
        }
        Value::Mapping(map) => {
            for (k, v) in map.iter_mut() {
                let key = k
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("{k:?}"));
                let child = if path.is_empty() {
                    key
                } else {
                    format!("{path}.{key}")
                };
                walk(v, child, lookup)?;
            }
            Ok(())
        }
        Value::Tagged(t) => walk(&mut t.value, path, lookup),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "KEY").then(|| "secret".to_string())
    }

    #[test]
    fn replaces_nested_references() {
        let mut doc: Value =
            serde_yaml::from_str("a:\n  - b: os.environ/KEY\n    c: plain\n").unwrap();
        resolve(&mut doc, &env).unwrap();
        assert_eq!(doc["a"][0]["b"], Value::String("secret".into()));
        assert_eq!(doc["a"][0]["c"], Value::String("plain".into()));
    }

    #[test]
    fn names_the_missing_variable_and_where() {
        let mut doc: Value = serde_yaml::from_str("a:\n  - b: os.environ/NOPE\n").unwrap();
        let err = resolve(&mut doc, &env).unwrap_err();
        assert_eq!(
            err,
            MissingVar {
                path: "a[0].b".into(),
                var: "NOPE".into()
            }
        );
    }
}
