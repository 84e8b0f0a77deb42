//! The module graph of the library crates points one way: no top-level module of `agent/src`
//! (or of `bench/src`) uses, through `crate::`, a module that uses it back, directly or through
//! others. Read from the sources as text: every `crate::NAME` and `crate::{NAME, ...}` outside
//! comments and outside the `#[cfg(test)]` part of a file is an edge from the file's top-level
//! module to `NAME`. The parser is checked on a hand-made crate first.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Edges `module -> {modules it uses}`, with the files that make each edge.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// The `crate::` references of one file's non-test code.
fn references(source: &str) -> BTreeSet<String> {
    let mut code = String::new();
    for line in source.lines() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        code.push_str(line.split("//").next().unwrap_or(""));
        code.push('\n');
    }
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            out.extend(inner.split(',').map(|part| ident(part.trim())).filter(|n| !n.is_empty()));
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The graph of the crate whose `lib.rs` is in `src` (files of `src/bin/` are left out: each
/// is a crate of its own).
fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut g = Graph::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap().to_string_lossy().into_owned();
        let top = rel.split('/').next().unwrap().trim_end_matches(".rs").to_string();
        if top == "lib" || top == "main" || top == "bin" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let node = g.entry(top.clone()).or_default();
        for r in references(&text).into_iter().filter(|r| *r != top) {
            node.entry(r).or_default().insert(rel.clone());
        }
    }
    // Items of lib.rs itself (`crate::error_chain_line`) are not modules.
    let modules: BTreeSet<String> = g.keys().cloned().collect();
    for edges in g.values_mut() {
        edges.retain(|to, _| modules.contains(to));
    }
    g
}

/// Every edge `a -> b` where `b` reaches `a` back, with the files of the edge.
fn cycles(g: &Graph) -> Vec<String> {
    let reaches = |from: &str, to: &str| {
        let (mut seen, mut stack) = (BTreeSet::new(), vec![from.to_string()]);
        while let Some(m) = stack.pop() {
            if m == to {
                return true;
            }
            if seen.insert(m.clone()) {
                stack.extend(g.get(&m).into_iter().flat_map(|e| e.keys().cloned()));
            }
        }
        false
    };
    let mut out = Vec::new();
    for (a, edges) in g {
        for (b, files) in edges {
            if reaches(b, a) {
                out.push(format!("{a} -> {b} (in {})", files.iter().cloned().collect::<Vec<_>>().join(", ")));
            }
        }
    }
    out
}

#[test]
fn the_parser_and_the_cycle_check_on_a_hand_made_crate() {
    let dir = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write("lib.rs", "pub mod a; pub mod b; pub mod c;\n");
    write("a/mod.rs", "use crate::{b::X, c};\n// crate::d in a comment\n");
    write("b.rs", "pub struct X;\n#[cfg(test)]\nmod tests { use crate::a; }\n");
    write("c.rs", "fn f() { crate::a::g(); crate::error_line(); }\n");
    let g = graph(dir.path());
    let edges = |m: &str| g[m].keys().cloned().collect::<Vec<_>>();
    assert_eq!((edges("a"), edges("b"), edges("c")), (vec!["b".to_string(), "c".to_string()], vec![], vec!["a".to_string()]));
    assert_eq!(cycles(&g), ["a -> c (in a/mod.rs)", "c -> a (in c.rs)"]);
}

#[test]
fn no_module_of_the_libraries_uses_a_module_that_uses_it_back() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for krate in ["agent/src", "bench/src"] {
        let g = graph(&root.join(krate));
        assert!(g.len() >= 8, "{krate}: only {} modules found", g.len());
        let found = cycles(&g);
        assert!(found.is_empty(), "{krate}: modules that use each other:\n{}", found.join("\n"));
    }
}
