//! The shape of the store's sources, checked: the files import one another in one
//! direction only (a reader can start at the bottom and never meet a file that needs
//! one not read yet), and none grows past [`MAX_LINES`] lines before its tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Most lines a source file may hold before its `#[cfg(test)]` module.
const MAX_LINES: usize = 600;

/// A module path as the files spell it: `domain`, `pg/connect`; `lib` is the crate root.
type Module = String;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("reading store/src") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file
        .strip_prefix(src)
        .expect("under src")
        .with_extension("");
    let rel = rel.to_string_lossy().replace('\\', "/");
    rel.strip_suffix("/mod").map(str::to_string).unwrap_or(rel)
}

/// The lines before the file's test module, without comment lines.
fn code(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect()
}

/// The path segments after each `prefix` in `line`: `crate::pg::connect::X` gives
/// `["pg", "connect", "X"]`.
fn paths_after<'a>(line: &'a str, prefix: &str) -> Vec<Vec<&'a str>> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find(prefix) {
        let preceded_by_ident = rest[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
        rest = &rest[at + prefix.len()..];
        if preceded_by_ident {
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        out.push(rest[..end].split("::").filter(|s| !s.is_empty()).collect());
    }
    out
}

/// Each file's imports of the store's other files: `crate::a::b` (the deepest prefix
/// that is a file), `super::x` (a sibling), and a parent's `pub use child::...`.
fn imports(src: &Path) -> (BTreeMap<Module, BTreeSet<Module>>, Vec<String>) {
    let mut files = Vec::new();
    sources(src, &mut files);
    let texts: BTreeMap<Module, String> = files
        .iter()
        .map(|f| {
            (
                module_of(src, f),
                std::fs::read_to_string(f).expect("reading"),
            )
        })
        .collect();
    let mut problems = Vec::new();
    let mut graph = BTreeMap::new();
    for (module, text) in &texts {
        let parent = module.rsplit_once('/').map(|(p, _)| p.to_string());
        let mut edges = BTreeSet::new();
        let resolve = |segments: Vec<&str>, base: Option<&str>| {
            let mut found = None;
            let mut path = base.map(str::to_string);
            for s in &segments {
                let next = match &path {
                    Some(p) => format!("{p}/{s}"),
                    None => s.to_string(),
                };
                if !texts.contains_key(&next) {
                    break;
                }
                found = Some(next.clone());
                path = Some(next);
            }
            found
        };
        for line in code(text) {
            for segments in paths_after(line, "crate::") {
                match resolve(segments.clone(), None) {
                    Some(m) => {
                        edges.insert(m);
                    }
                    None => problems.push(format!(
                        "{module}: `crate::{}` names no module; name the file it is in",
                        segments.join("::")
                    )),
                }
            }
            for segments in paths_after(line, "super::") {
                if let Some(m) = resolve(segments, parent.as_deref()) {
                    edges.insert(m);
                }
            }
            let own = if module == "lib" {
                None
            } else {
                Some(module.as_str())
            };
            if let Some(used) = line.trim_start().strip_prefix("pub use ") {
                if let Some(m) = resolve(used.split("::").collect(), own) {
                    edges.insert(m);
                }
            }
        }
        edges.remove(module);
        graph.insert(module.clone(), edges);
    }
    (graph, problems)
}

/// A cycle of `graph`, if it has one.
fn cycle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    fn visit(
        m: &Module,
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        done: &mut BTreeSet<Module>,
        path: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut found = path[at..].to_vec();
            found.push(m.clone());
            return Some(found);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.clone());
        for next in graph.get(m).into_iter().flatten() {
            if let Some(found) = visit(next, graph, done, path) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(m.clone());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut done, &mut Vec::new()))
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn store_files_import_each_other_in_one_direction() {
    let (graph, problems) = imports(&src());
    assert!(problems.is_empty(), "{problems:#?}");
    // The check sees the imports that are there (a graph without edges would pass).
    assert!(graph["pg/staging"].contains("pg/connect"), "{graph:#?}");
    assert!(graph["dispatch"].contains("pg"), "{graph:#?}");
    assert_eq!(cycle(&graph), None, "{graph:#?}");
}

#[test]
fn no_store_file_is_longer_than_600_lines_before_its_tests() {
    let mut files = Vec::new();
    sources(&src(), &mut files);
    let long: Vec<(String, usize)> = files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).expect("reading");
            let lines = text
                .lines()
                .take_while(|l| !l.starts_with("#[cfg(test)]"))
                .count();
            (module_of(&src(), f), lines)
        })
        .filter(|(_, lines)| *lines > MAX_LINES)
        .collect();
    assert!(long.is_empty(), "{long:?}");
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let edge = |a: &str, b: &str| (a.to_string(), BTreeSet::from([b.to_string()]));
    let graph = BTreeMap::from([edge("a", "b"), edge("b", "c"), edge("c", "a")]);
    assert_eq!(
        cycle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    let graph = BTreeMap::from([edge("a", "b"), edge("b", "c")]);
    assert_eq!(cycle(&graph), None);
}
