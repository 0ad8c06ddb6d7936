//! Readers for the reference test: the keys, routes and metric names docs/ lists, and the
//! metric definitions the source holds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("server/ sits in the workspace")
        .to_path_buf()
}

pub fn read_doc(name: &str) -> String {
    std::fs::read_to_string(workspace_root().join("docs").join(name)).expect("doc exists")
}

pub fn doc_files() -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(workspace_root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    files
}

/// Dotted keys of a serialized configuration: tables descend, the entries of an array of
/// tables descend under the array's key, anything else (values, empty arrays, nulls) is a key.
pub fn flatten_keys(prefix: &str, value: &serde_json::Value, out: &mut BTreeSet<String>) {
    let join = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                flatten_keys(&join(k), v, out);
            }
        }
        serde_json::Value::Array(items) if items.iter().any(|i| i.is_object()) => {
            for item in items {
                flatten_keys(prefix, item, out);
            }
        }
        _ => {
            out.insert(prefix.to_string());
        }
    }
}

/// The keys in the first column of docs/configuration.md's tables: every backticked name;
/// after a backticked `[[table]]`, the names that follow are that table's fields.
pub fn documented_config_keys(doc: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for line in doc.lines().filter(|l| l.starts_with("| `")) {
        let first_cell = line[1..].split('|').next().unwrap_or_default();
        let mut table: Option<&str> = None;
        for token in backticked(first_cell) {
            if let Some(name) = token.strip_prefix("[[").and_then(|t| t.strip_suffix("]]")) {
                table = Some(name);
            } else if let Some(table) = table {
                keys.insert(format!("{table}.{token}"));
            } else {
                keys.insert(token.to_string());
            }
        }
    }
    keys
}

fn backticked(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Route {
    pub method: String,
    pub path: String,
}

/// Every `` `METHOD /path` `` in docs/api.md (a query string is not part of the route).
pub fn documented_routes(doc: &str) -> BTreeSet<Route> {
    backticked(doc)
        .filter_map(|t| {
            let (method, path) = t.split_once(' ')?;
            if !matches!(method, "GET" | "POST") || !path.starts_with('/') {
                return None;
            }
            let path = path.split('?').next().unwrap_or(path);
            Some(Route {
                method: method.to_string(),
                path: path.to_string(),
            })
        })
        .collect()
}

/// Every path the source could register: the route constants of the wire crate and the path
/// literals of server/src/api, each also under `/v1` (the API's scope), with both methods.
/// The test keeps those the app answers.
pub fn candidate_routes() -> BTreeSet<Route> {
    let root = workspace_root();
    let mut paths = BTreeSet::new();
    for file in rust_files(&root.join("wire/src"))
        .into_iter()
        .chain(rust_files(&root.join("server/src/api")))
    {
        let text = std::fs::read_to_string(&file).unwrap();
        for literal in string_literals(&text) {
            if literal.starts_with('/') && !literal.contains(' ') && literal.len() > 1 {
                paths.insert(literal.clone());
                paths.insert(format!("/v1{literal}"));
            }
        }
    }
    paths
        .into_iter()
        .flat_map(|path| {
            ["GET", "POST"].map(|method| Route {
                method: method.to_string(),
                path: path.clone(),
            })
        })
        .collect()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The plain string literals of Rust source (no raw strings), unescaped.
fn string_literals(text: &str) -> Vec<String> {
    literal_spans(text).into_iter().map(|(l, _, _)| l).collect()
}

/// Each plain string literal of Rust source, unescaped, with where it starts (its opening
/// quote) and the index past it; comments and char literals skipped.
fn literal_spans(text: &str) -> Vec<(String, usize, usize)> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i = text[i..].find('\n').map_or(bytes.len(), |n| i + n);
            }
            b'\'' => i = skip_char_literal(bytes, i),
            b'"' => {
                let (literal, end) = read_literal(text, i);
                out.push((literal, i, end));
                i = end;
            }
            _ => i += 1,
        }
    }
    out
}

/// Past a char literal (`'"'`, `'\''`) or a lifetime (`'a`) starting at `i`.
fn skip_char_literal(bytes: &[u8], i: usize) -> usize {
    match (bytes.get(i + 1), bytes.get(i + 2), bytes.get(i + 3)) {
        (Some(b'\\'), _, _) => {
            let close = bytes[i + 2..].iter().position(|&b| b == b'\'');
            close.map_or(bytes.len(), |p| i + 3 + p)
        }
        (Some(_), Some(b'\''), _) => i + 3,
        _ => i + 1,
    }
}

/// The string literal opening at `start` (a `"`), unescaped, and the index past it. A
/// backslash before a line break drops the break and the next line's indentation, as Rust does.
fn read_literal(text: &str, start: usize) -> (String, usize) {
    let mut out = String::new();
    let mut chars = text[start + 1..].char_indices().peekable();
    while let Some((offset, c)) = chars.next() {
        match c {
            '"' => return (out, start + 1 + offset + 1),
            '\\' => match chars.next().map(|(_, e)| e) {
                Some('\n') => {
                    while chars.peek().is_some_and(|(_, c)| c.is_whitespace()) {
                        chars.next();
                    }
                }
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => break,
            },
            c => out.push(c),
        }
    }
    (out, text.len())
}

/// One metric as the source defines it: `"name", "help"` in a constructor or helper call, and
/// the label names of the first `&["label", ...]` before the next definition or statement end.
#[derive(Debug, Clone)]
pub struct MetricDef {
    pub name: String,
    pub help: String,
    pub labels: Vec<String>,
    pub crate_name: String,
}

fn is_metric_name(s: &str) -> bool {
    (s.starts_with("crescent_") || s.starts_with("process_"))
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Every metric defined in the library sources of the workspace's crates (test support
/// crates excluded), the first definition of a name winning.
pub fn metric_definitions(root: &Path) -> Vec<MetricDef> {
    let mut seen = BTreeMap::new();
    for (crate_name, src) in library_sources(root) {
        for file in rust_files(&src) {
            let text = std::fs::read_to_string(&file).unwrap();
            for def in definitions_in(&text, &crate_name) {
                seen.entry(def.name.clone()).or_insert(def);
            }
        }
    }
    seen.into_values().collect()
}

fn library_sources(root: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        if matches!(
            name.as_str(),
            "tests" | "testkit" | "fuzz" | "fuzz-targets" | "target"
        ) {
            continue;
        }
        let manifest = dir.join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let crate_name = text
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .and_then(|l| l.strip_suffix('"'))
            .unwrap_or(&name)
            .to_string();
        if dir.join("src").is_dir() {
            out.push((crate_name, dir.join("src")));
        }
    }
    out.sort();
    out
}

fn definitions_in(text: &str, crate_name: &str) -> Vec<MetricDef> {
    // `name, help` pairs among the literals.
    let literals = literal_spans(text);
    // (definition, where its name starts, where its help ends)
    let mut defs: Vec<(MetricDef, usize, usize)> = Vec::new();
    for pair in literals.windows(2) {
        let ((name, name_start, name_end), (help, help_start, help_end)) = (&pair[0], &pair[1]);
        if is_metric_name(name) && text[*name_end..*help_start].trim() == "," {
            let def = MetricDef {
                name: name.clone(),
                help: help.clone(),
                labels: Vec::new(),
                crate_name: crate_name.to_string(),
            };
            defs.push((def, *name_start, *help_end));
        }
    }
    let next_starts: Vec<usize> = defs
        .iter()
        .map(|(_, start, _)| *start)
        .skip(1)
        .chain([text.len()])
        .collect();
    defs.into_iter()
        .zip(next_starts)
        .map(|((mut def, _, from), to)| {
            let span = &text[from..to.max(from)];
            let span = span.split(';').next().unwrap_or(span);
            def.labels = first_label_list(span);
            def
        })
        .collect()
}

/// The names in the first `&["a", "b"]` of `span`.
fn first_label_list(span: &str) -> Vec<String> {
    let Some(open) = span.find("&[\"") else {
        return Vec::new();
    };
    let list = &span[open + 2..];
    let close = list.find(']').unwrap_or(list.len());
    string_literals(&list[..close])
}

pub fn render_metrics_reference(metrics: &[MetricDef]) -> String {
    let mut out = String::from(
        "# Metrics reference\n\n\
         Every metric the Crescent binaries export, generated from the source (the name, help \
         and label names of each definition) by `CRESCENT_BLESS=1 cargo test -p crescent-server \
         --test docs_reference`; the same test fails when this file and the source differ. \
         What each subsystem's metrics mean in context is in its own document. Labels are \
         bounded sets (outcomes, reasons, ops, configured tenants): never keys or ids.\n",
    );
    let mut by_crate: BTreeMap<&str, Vec<&MetricDef>> = BTreeMap::new();
    for m in metrics {
        by_crate.entry(&m.crate_name).or_default().push(m);
    }
    for (crate_name, defs) in by_crate {
        out.push_str(&format!(
            "\n## `{crate_name}`\n\n| metric | labels | help |\n|---|---|---|\n"
        ));
        for m in defs {
            let labels = m.labels.join(", ");
            let help = m.help.replace('|', "\\|").replace('\n', " ");
            out.push_str(&format!("| `{}` | {labels} | {help} |\n", m.name));
        }
    }
    out
}

/// Backticked metric names mentioned in a doc: a `crescent_` or `process_` identifier
/// with a metric's suffix, as itself or with labels (`name{label}`); a histogram's series
/// (`_bucket`, `_sum`, `_count`) name their family.
pub fn mentioned_metric_names(doc: &str) -> BTreeSet<String> {
    const SUFFIXES: [&str; 3] = ["_total", "_seconds", "_bytes"];
    backticked(doc)
        .filter_map(|t| {
            let name = t.split(['{', ' ']).next()?;
            let name = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name);
            (is_metric_name(name) && SUFFIXES.iter().any(|s| name.ends_with(s)))
                .then(|| name.to_string())
        })
        .collect()
}
