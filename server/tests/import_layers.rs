//! The server's subsystems, read from their `crate::` paths: no import loop spans more than one
//! subsystem, and nothing below the top layer reaches up into it.
//!
//! A subsystem is a top-level module of `server/src` (`cold/*.rs` is `cold`, `quotas.rs` is
//! `quotas`). Every `crate::x` path in code (comments are skipped) is an edge from the file's
//! subsystem to `x`. The subsystems of one strongly connected component of that graph import
//! each other in a loop. The top layer (`api` and `rpc`, which map the services to HTTP and
//! RPC, and `node`, which starts the services and hands them to those two) may depend on
//! everything and counts as one subsystem. A subsystem below it takes the small handle it
//! declares itself (`cold::ColdContext`, `housekeeping::Housekeeping`, ...), which `node`
//! fills.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layer that composes the services and maps them to HTTP and RPC: it may depend on
/// everything.
const TOP_LAYER: [&str; 3] = ["api", "node", "rpc"];

/// The name of the top layer in the subsystem graph.
const TOP: &str = "api+node+rpc";

type Graph = BTreeMap<String, BTreeSet<String>>;

/// `text` without its `//` comments (line, doc and trailing), string literals kept.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_str = false;
        let mut escaped = false;
        let mut prev = ' ';
        let mut cut = line.len();
        for (i, c) in line.char_indices() {
            if in_str {
                match (escaped, c) {
                    (true, _) => escaped = false,
                    (false, '\\') => escaped = true,
                    (false, '"') => in_str = false,
                    _ => {}
                }
            } else if c == '"' && prev != '\'' {
                in_str = true;
            } else if c == '/' && prev == '/' {
                cut = i - 1;
                break;
            }
            prev = c;
        }
        out.push_str(&line[..cut]);
        out.push('\n');
    }
    out
}

/// The top-level modules named after `crate::` in `code`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[at + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            found.insert(name);
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The subsystem graph of the crate in `src`.
fn subsystem_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let subsystem = |path: &Path| -> String {
        let rel = path.strip_prefix(src).expect("under src");
        let first = rel.components().next().expect("a component");
        let first = first.as_os_str().to_string_lossy();
        first.trim_end_matches(".rs").to_string()
    };
    let modules: BTreeSet<String> = files.iter().map(|p| subsystem(p)).collect();
    // The top layer is one subsystem: its members may import each other.
    let subsystem = |path: &Path| -> String {
        let name = subsystem(path);
        match TOP_LAYER.contains(&name.as_str()) {
            true => TOP.to_string(),
            false => name,
        }
    };
    let mut graph = Graph::new();
    for path in &files {
        let from = subsystem(path);
        if from == "lib" || from == "main" {
            continue;
        }
        let code = strip_comments(&std::fs::read_to_string(path).expect("read source"));
        let targets = graph.entry(from.clone()).or_default();
        for to in crate_paths(&code) {
            if !modules.contains(&to) {
                continue;
            }
            let to = match TOP_LAYER.contains(&to.as_str()) {
                true => TOP.to_string(),
                false => to,
            };
            if to != from {
                targets.insert(to);
            }
        }
    }
    graph
}

/// Strongly connected components of `graph` with more than one node (Tarjan).
fn loops(graph: &Graph) -> Vec<BTreeSet<String>> {
    struct Walk<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<BTreeSet<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = BTreeSet::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.insert(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

/// Edges from below the top layer into it.
fn upward_edges(graph: &Graph) -> Vec<(String, String)> {
    let mut up = Vec::new();
    for (from, targets) in graph {
        if from == TOP {
            continue;
        }
        for to in targets.iter().filter(|t| *t == TOP) {
            up.push((from.clone(), to.clone()));
        }
    }
    up
}

fn graph_of(edges: &[(&str, &str)]) -> Graph {
    let mut graph = Graph::new();
    for (from, to) in edges {
        graph
            .entry(from.to_string())
            .or_default()
            .insert(to.to_string());
        graph.entry(to.to_string()).or_default();
    }
    graph
}

#[test]
fn no_import_loop_spans_subsystems() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = subsystem_graph(&src);
    let loops = loops(&graph);
    assert!(
        loops.is_empty(),
        "import loops across subsystems: {loops:?}"
    );
    let up = upward_edges(&graph);
    assert!(
        up.is_empty(),
        "imports into the top layer from below: {up:?}"
    );
}

#[test]
fn comments_and_string_literals_are_read_apart() {
    let code = "use crate::a::B; // crate::b\n/// [`crate::c`]\nlet s = \"//\"; crate::d::f();";
    let paths = crate_paths(&strip_comments(code));
    assert_eq!(paths, ["a", "d"].map(String::from).into());
    assert!(crate_paths("my_crate::x").is_empty());
    assert_eq!(crate_paths("$crate::e::M"), ["e".to_string()].into());
}

#[test]
fn a_loop_through_two_subsystems_is_found() {
    let graph = graph_of(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]);
    let want: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
    assert_eq!(loops(&graph), vec![want]);
    assert!(loops(&graph_of(&[("a", "b"), ("b", "c")])).is_empty());
}

#[test]
fn an_import_into_the_api_layer_is_found() {
    let graph = graph_of(&[(TOP, "quotas"), ("quotas", TOP), ("cold", "quotas")]);
    assert_eq!(
        upward_edges(&graph),
        vec![("quotas".to_string(), TOP.to_string())]
    );
}
