//! The layering rules of ARCHITECTURE.md, read from the source: no import circle between the parts of `src/` (its
//! folders and top-level files), and nothing below the fronts imports a front. Read from the `crate::…` paths of each
//! file, unit tests left out (they may reach anywhere).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The part a file belongs to: its top-level folder or file under `src/`; `None` for the binaries and the roots.
fn part_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    let part = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(part, "bin" | "lib" | "main")).then(|| part.to_string())
}

/// The parts a piece of source names: `crate::x` anywhere, and each `x` of `use crate::{x, y::z}`.
fn named_parts(text: &str) -> BTreeSet<String> {
    let word = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    let mut parts = BTreeSet::new();
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or("");
            // Only the first segment of each item of the group (`a`, `b::c`, `d::{e, f}`) names a part.
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        parts.insert(word(&group[i..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            parts.insert(word(rest));
        }
    }
    parts.retain(|p| !p.is_empty());
    parts
}

fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph = Graph::new();
    for file in &files {
        let Some(part) = part_of(&src, file) else { continue };
        let text = std::fs::read_to_string(file).expect("read source");
        let text = match text.find("#[cfg(test)]\nmod tests") {
            Some(at) => &text[..at],
            None => &text[..],
        };
        graph.entry(part.clone()).or_default().extend(named_parts(text).into_iter().filter(|p| *p != part));
    }
    let names: BTreeSet<String> = graph.keys().cloned().collect();
    for uses in graph.values_mut() {
        uses.retain(|p| names.contains(p));
    }
    graph
}

/// Whether `to` is reachable from `from`.
fn reaches(graph: &Graph, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from.to_string()];
    while let Some(part) = stack.pop() {
        for next in graph.get(&part).into_iter().flatten() {
            if next == to {
                return true;
            }
            if seen.insert(next.clone()) {
                stack.push(next.clone());
            }
        }
    }
    false
}

#[test]
fn the_source_is_read() {
    let graph = graph();
    for part in ["gateway", "admin", "auth", "config", "upstream", "guardrails", "error"] {
        assert!(graph.contains_key(part), "no part {part} in {graph:?}");
    }
    assert!(graph["gateway"].contains("auth") && graph["gateway"].contains("error"), "{:?}", graph["gateway"]);
    assert_eq!(named_parts("use crate::{a, b::c, d::{e, f}};"), ["a", "b", "d"].map(String::from).into());
}

#[test]
fn no_part_imports_another_in_a_circle() {
    let graph = graph();
    let circles: Vec<(&String, &String)> = graph
        .iter()
        .flat_map(|(part, uses)| uses.iter().map(move |used| (part, used)))
        .filter(|(part, used)| reaches(&graph, used, part))
        .collect();
    assert!(circles.is_empty(), "parts that import each other, directly or through others: {circles:?}");
}

#[test]
fn nothing_below_the_fronts_imports_a_front() {
    let graph = graph();
    for part in ["auth", "cache", "config", "error", "guardrails", "manage", "telemetry", "timeouts", "upstream"] {
        for front in ["gateway", "admin", "app", "cli"] {
            assert!(!reaches(&graph, part, front), "{part} reaches {front}: {:?}", graph.get(part));
        }
    }
    for leaf in ["telemetry", "error", "outbound", "secrets", "ids"] {
        for core in ["config", "upstream", "guardrails", "auth", "manage"] {
            assert!(!reaches(&graph, leaf, core), "{leaf} is a leaf but reaches {core}: {:?}", graph.get(leaf));
        }
    }
}
