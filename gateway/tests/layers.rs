//! The import graph of `gateway/src` runs one way: every module may use only
//! modules in layers below its own (docs/architecture.md, "Layers"). Parses the sources
//! (comments, string literals and `#[cfg(test)]` items left out: tests may
//! use anything) for `crate::`, `super::` and child-module paths, maps each
//! to its unit (a top-level module, or one of [`SUB_UNITS`]) and fails on
//! any edge that does not point strictly down, which includes every cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layers from top to bottom. A unit may use units of lower layers only;
/// units of one layer do not use each other.
const LAYERS: &[&[&str]] = &[
    &["server"],
    &["api"],
    &["api::ui"],
    &["proxy"],
    &["state"],
    &["reload"],
    &["telemetry", "health", "replicas"],
    &["spend::writer", "router::cooldowns"],
    &["sync"],
    &["managed"],
    &["models"],
    &["config"],
    &["cache"],
    &["alerts", "otel"],
    &["router"],
    &["metrics"],
    &["auth"],
    &["budget"],
    &["limits"],
    &["providers"],
    &["spend"],
    &["deployment"],
    &["google_auth"],
    &["control"],
    &["store", "health::settings", "redis"],
    &["upstream", "inbound", "downstream"],
    &["formats"],
    &[
        "http1",
        "sse",
        "read_through",
        "panic_guard",
        "local_signal",
        "guardrails",
        "websocket",
    ],
    &["error", "logging", "keyed_hash", "json_skim"],
];

/// Submodules checked as units of their own: a concern's background half
/// that runs on the control plane sits above the layers its parent's pure
/// half serves, and a settings type the config reads sits below the config.
const SUB_UNITS: &[&str] = &[
    "spend::writer",
    "router::cooldowns",
    "health::settings",
    "api::ui",
];

/// Edges that still point up, each with why it is left; the test fails when
/// one of them disappears, so this list only shrinks.
const EXCEPTIONS: &[(&str, &str, &str)] = &[];

/// A unit's layer index (0 is the top).
fn layer_of(unit: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&unit))
}

/// The sources, blanked where they are not code: comments, the contents of
/// string and character literals.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, c: u8| out.push(if c == b'\n' { b'\n' } else { b' ' });
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                blank(&mut out, b[i]);
                i += 1;
            }
        } else if rest.starts_with(b"/*") {
            let mut depth = 0usize;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(b, i) {
            // r"..." or r#"..."# (also br"...").
            let open = 1 + hashes + 1;
            let skip_b = usize::from(b[i] == b'b');
            out.extend(std::iter::repeat_n(b' ', open + skip_b));
            i += open + skip_b;
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            while i < b.len() && !b[i..].starts_with(&close) {
                blank(&mut out, b[i]);
                i += 1;
            }
            out.extend(std::iter::repeat_n(b' ', close.len().min(b.len() - i)));
            i += close.len();
        } else if b[i] == b'"' {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    blank(&mut out, b[i]);
                    i += 1;
                }
                if i < b.len() {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
            out.push(b' ');
            i += 1;
        } else if b[i] == b'\'' && is_char_literal(b, i) {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                if b[i] == b'\\' {
                    out.push(b' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(b' ');
                    i += 1;
                }
            }
            out.push(b' ');
            i += 1;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out.truncate(b.len());
    String::from_utf8_lossy(&out).into_owned()
}

/// The number of `#` of a raw string starting at `i`, if one does.
fn raw_string_start(b: &[u8], i: usize) -> Option<usize> {
    let prev_ident = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
    if prev_ident {
        return None;
    }
    let mut j = i;
    if b.get(j) == Some(&b'b') {
        j += 1;
    }
    if b.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while b.get(j) == Some(&b'#') {
        hashes += 1;
        j += 1;
    }
    (b.get(j) == Some(&b'"')).then_some(hashes)
}

/// Whether the `'` at `i` opens a character literal (not a lifetime).
fn is_char_literal(b: &[u8], i: usize) -> bool {
    match b.get(i + 1) {
        Some(b'\\') => true,
        Some(_) => {
            // One character (possibly multi-byte UTF-8) then a quote.
            let mut j = i + 2;
            while j < b.len() && (b[j] & 0xC0) == 0x80 {
                j += 1;
            }
            b.get(j) == Some(&b'\'')
        }
        None => false,
    }
}

/// `code` without the items marked `#[cfg(test)]`.
fn without_tests(code: &str) -> String {
    let mut out = code.to_string();
    let mut from = 0;
    while let Some(at) = out[from..].find("#[cfg(test)]").map(|p| p + from) {
        let b = out.as_bytes();
        let mut i = at;
        let mut depth = 0usize;
        let mut end = b.len();
        while i < b.len() {
            match b[i] {
                b'{' => depth += 1,
                b'}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                b';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        let blanked: String = out[at..end]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(at..end, &blanked);
        from = end;
    }
    out
}

/// The module path of a source file (`spend/writer/spool.rs` is
/// `["spend", "writer", "spool"]`).
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" {
            parts.push(stem.to_string());
        }
    }
    parts
}

/// The unit an absolute module path belongs to.
fn unit_of(path: &[String]) -> String {
    let joined = path.join("::");
    SUB_UNITS
        .iter()
        .filter(|s| joined == **s || joined.starts_with(&format!("{s}::")))
        .max_by_key(|s| s.len())
        .map(|s| s.to_string())
        .unwrap_or_else(|| path.first().cloned().unwrap_or_default())
}

/// The identifier path starting at byte `at` of `code`: `a::b::c`, or the
/// first names of a `{a, b::c}` group.
fn paths_at(code: &str, at: usize) -> Vec<Vec<String>> {
    let b = code.as_bytes();
    let mut i = at;
    let mut segs = Vec::new();
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if b.get(i) == Some(&b'{') {
            // A group: each member's first name, relative to `segs`.
            let mut depth = 0usize;
            let mut start = i + 1;
            let mut out = Vec::new();
            while i < b.len() {
                match b[i] {
                    b'{' => depth += 1,
                    b'}' | b',' if depth == 1 => {
                        let member = code[start..i].trim();
                        let name: String = member
                            .chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                            .collect();
                        if !name.is_empty() {
                            let mut p = segs.clone();
                            p.push(name);
                            out.push(p);
                        }
                        start = i + 1;
                        if b[i] == b'}' {
                            return out;
                        }
                    }
                    b'}' => depth -= 1,
                    _ => {}
                }
                i += 1;
            }
            return out;
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        if start == i {
            break;
        }
        segs.push(code[start..i].to_string());
        if code[i..].starts_with("::") {
            i += 2;
        } else {
            break;
        }
    }
    vec![segs]
}

/// The absolute module paths `code` (of the module at `me`) names through
/// `crate::` and `super::`.
fn absolute_paths(code: &str, me: &[String]) -> Vec<Vec<String>> {
    let mut targets: Vec<Vec<String>> = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        targets.extend(paths_at(code, at + "crate::".len()));
    }
    for (at, _) in code.match_indices("super::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut base = me.to_vec();
        let mut i = at;
        while code[i..].starts_with("super::") {
            base.pop();
            i += "super::".len();
        }
        for p in paths_at(code, i) {
            let mut abs = base.clone();
            abs.extend(p);
            targets.push(abs);
        }
    }
    targets
}

/// Every unit-to-unit edge of `src`, with the files that make it.
fn edges(src: &Path) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut files = Vec::new();
    collect(src, &mut files);
    let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).expect("under src");
        if rel == Path::new("lib.rs") || rel == Path::new("main.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read a source file");
        let code = without_tests(&code_only(&text));
        let me = module_path(rel);
        let my_unit = unit_of(&me);
        let mut targets = absolute_paths(&code, &me);
        // A child that is a unit of its own, named relative to its parent.
        for sub in SUB_UNITS {
            let (parent, child) = sub.rsplit_once("::").expect("a submodule");
            if me.join("::") != parent {
                continue;
            }
            for (at, _) in code.match_indices(&format!("{child}::")) {
                let before = code[..at].chars().next_back();
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                targets.push(sub.split("::").map(str::to_string).collect());
            }
        }
        for target in targets {
            let to = unit_of(&target);
            if to != my_unit && is_unit(src, &to) {
                edges
                    .entry((my_unit.clone(), to))
                    .or_default()
                    .insert(rel.display().to_string());
            }
        }
    }
    edges
}

/// Whether `unit` names a module of `src` (not a macro or a constant).
fn is_unit(src: &Path, unit: &str) -> bool {
    let top = unit.split("::").next().unwrap_or_default();
    src.join(format!("{top}.rs")).exists() || src.join(top).join("mod.rs").exists()
}

/// The `.rs` files under `dir`.
fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The edges that break the layer order, as lines naming the files.
fn violations(
    edges: &BTreeMap<(String, String), BTreeSet<String>>,
    exceptions: &[(&str, &str, &str)],
) -> Vec<String> {
    let mut bad = Vec::new();
    for ((from, to), files) in edges {
        if exceptions.iter().any(|(f, t, _)| f == from && t == to) {
            continue;
        }
        match (layer_of(from), layer_of(to)) {
            (Some(a), Some(b)) if b > a => {}
            (None, _) => bad.push(format!("{from} is in no layer (used: {from} -> {to})")),
            (_, None) => bad.push(format!("{to} is in no layer (used: {from} -> {to})")),
            _ => bad.push(format!(
                "{from} -> {to} points up or sideways ({})",
                files.iter().cloned().collect::<Vec<_>>().join(", ")
            )),
        }
    }
    bad
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_import_graph_runs_one_way_from_top_to_bottom() {
    let edges = edges(&src_dir());
    let bad = violations(&edges, EXCEPTIONS);
    assert!(bad.is_empty(), "layer violations:\n{}", bad.join("\n"));
}

#[test]
fn every_exception_is_still_needed_and_every_unit_has_a_layer() {
    let src = src_dir();
    let edges = edges(&src);
    for (from, to, why) in EXCEPTIONS {
        assert!(
            edges.contains_key(&(from.to_string(), to.to_string())),
            "exception {from} -> {to} ({why}) is gone: remove it"
        );
    }
    let mut units = BTreeSet::new();
    for entry in std::fs::read_dir(&src).expect("read src") {
        let path = entry.expect("an entry").path();
        let name = path
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        if name != "lib" && name != "main" {
            units.insert(name);
        }
    }
    units.extend(SUB_UNITS.iter().map(|s| s.to_string()));
    for unit in &units {
        assert!(layer_of(unit).is_some(), "{unit} is in no layer");
    }
}

#[test]
fn a_cycle_is_refused() {
    let mut edges = BTreeMap::new();
    edges.insert(
        ("auth".to_string(), "limits".to_string()),
        BTreeSet::from(["auth/x.rs".to_string()]),
    );
    edges.insert(
        ("limits".to_string(), "auth".to_string()),
        BTreeSet::from(["limits/y.rs".to_string()]),
    );
    let bad = violations(&edges, &[]);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].starts_with("limits -> auth points up"), "{bad:?}");
}

#[test]
fn paths_are_found_in_code_only() {
    let code = without_tests(&code_only(
        "use crate::{a::B, c};\n// crate::d\nlet s = \"crate::e\";\nlet c = '{';\n\
         #[cfg(test)]\nmod tests { use crate::f; }\nfn g() { crate::h::i(); }\n",
    ));
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        found.extend(paths_at(&code, at + "crate::".len()));
    }
    let firsts: Vec<&str> = found.iter().map(|p| p[0].as_str()).collect();
    assert_eq!(firsts, ["a", "c", "h"]);
}

/// The folder whose files must import one way among themselves: the
/// limiter (its Redis client lives in `redis/`).
const ACYCLIC_FOLDERS: &[&str] = &["limits"];

/// The file-to-file edges inside `folder` (a file's children, as
/// `lease/slots.rs` is of `lease.rs`, count as that file; `mod` is the
/// folder's root), with the files that make them.
fn folder_edges(src: &Path, folder: &str) -> BTreeMap<(String, String), BTreeSet<String>> {
    let dir = src.join(folder);
    let mut files = Vec::new();
    collect(&dir, &mut files);
    let child_of = |path: &[String]| -> String {
        match path.get(1) {
            Some(name)
                if dir.join(format!("{name}.rs")).exists()
                    || dir.join(name).join("mod.rs").exists() =>
            {
                name.clone()
            }
            _ => "mod".to_string(),
        }
    };
    let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).expect("under src");
        let text = std::fs::read_to_string(&file).expect("read a source file");
        let code = without_tests(&code_only(&text));
        let me = module_path(rel);
        let mine = child_of(&me);
        let targets = absolute_paths(&code, &me);
        for target in targets {
            if target.first().map(String::as_str) != Some(folder) || target.len() < 2 {
                continue;
            }
            let to = child_of(&target);
            if to != mine && mine != "mod" {
                edges
                    .entry((mine.clone(), to))
                    .or_default()
                    .insert(rel.display().to_string());
            }
        }
    }
    edges
}

/// A cycle among `edges`, as the files in it, if there is one.
fn find_cycle(edges: &BTreeMap<(String, String), BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<(String, String), BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for (_, to) in edges.keys().filter(|(from, _)| from == node) {
            if let Some(cycle) = visit(to, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for (from, _) in edges.keys() {
        if let Some(cycle) = visit(from, edges, &mut Vec::new(), &mut done) {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn the_limiters_files_import_one_way_and_never_its_root() {
    let src = src_dir();
    for folder in ACYCLIC_FOLDERS {
        let edges = folder_edges(&src, folder);
        let up: Vec<String> = edges
            .iter()
            .filter(|((_, to), _)| to == "mod")
            .map(|((from, _), files)| format!("{from} -> {folder}/mod.rs ({files:?})"))
            .collect();
        assert!(
            up.is_empty(),
            "files that use their folder's root (move the item into a file of its own):\n{}",
            up.join("\n")
        );
        assert_eq!(find_cycle(&edges), None, "an import cycle in {folder}/");
    }
}

#[test]
fn a_cycle_among_files_is_found() {
    let edge = |a: &str, b: &str| ((a.to_string(), b.to_string()), BTreeSet::new());
    let edges = BTreeMap::from([
        edge("a", "b"),
        edge("b", "c"),
        edge("c", "a"),
        edge("d", "a"),
    ]);
    let cycle = find_cycle(&edges).expect("a cycle");
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 4, "{cycle:?}");
    let acyclic = BTreeMap::from([edge("a", "b"), edge("b", "c"), edge("a", "c")]);
    assert_eq!(find_cycle(&acyclic), None);
}
