//! Writing reports: the JSON file every measuring subcommand can produce.

use std::path::Path;

use serde::Serialize;

/// Writes `value` as pretty JSON to `path`.
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).map_err(|e| format!("JSON report: {e}"))?;
    std::fs::write(path, text + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_reports_errors() {
        let dir = std::env::temp_dir().join(format!("loadgen-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("r.json");
        write_json(&file, &serde_json::json!({"a": 1})).unwrap();
        let back: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(back["a"], 1);
        let err = write_json(&dir.join("missing/r.json"), &1).unwrap_err();
        assert!(err.starts_with("cannot write"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
