//! The shape of audit-service's sources (issue 27): the files' imports form no cycle,
//! the auditor's decisions name no rdkafka, and no file outgrows a reader. Reads the
//! sources only; no broker.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Non-test lines a source file may have (about 600).
const MAX_LINES: usize = 620;

/// Every `.rs` file under `src/`, by module path (`["kafka", "shell"]`; `[]` for lib.rs).
fn sources() -> BTreeMap<Vec<String>, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(&src).unwrap().with_extension("");
            let mut module: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(module.last().map(String::as_str), Some("lib" | "mod")) {
                module.pop();
            }
            (module, p)
        })
        .collect()
}

/// The text of a file before its test module (a file that is a test module itself,
/// declared `#[cfg(test)] mod tests;`, has none).
fn non_test(path: &Path, test_modules: &BTreeSet<PathBuf>) -> String {
    if test_modules.contains(path) {
        return String::new();
    }
    let text = std::fs::read_to_string(path).unwrap();
    match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// Files declared as `#[cfg(test)] mod tests;` by their parent.
fn test_modules(files: &BTreeMap<Vec<String>, PathBuf>) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for (module, path) in files {
        let text = std::fs::read_to_string(path).unwrap();
        if text.contains("#[cfg(test)]\nmod tests;") {
            let mut child = module.clone();
            child.push("tests".into());
            if let Some(p) = files.get(&child) {
                out.insert(p.clone());
            }
        }
    }
    out
}

/// The file a path (module segments, then perhaps an item) names: its longest prefix
/// that is a file's module.
fn resolve<'a>(
    files: &'a BTreeMap<Vec<String>, PathBuf>,
    segments: &[String],
) -> Option<&'a Vec<String>> {
    (0..=segments.len())
        .rev()
        .find_map(|n| files.get_key_value(&segments[..n]).map(|(k, _)| k))
}

/// The file modules each file's non-test code refers to (`crate::`, `super::`,
/// `self::` and child-module paths).
fn imports(files: &BTreeMap<Vec<String>, PathBuf>) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let tests = test_modules(files);
    let path_re = regex::Regex::new(r"\b(crate|super|self|[a-z_][a-z0-9_]*)::((?:[A-Za-z_][A-Za-z0-9_]*::)*)(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)").unwrap();
    let mut out = BTreeMap::new();
    for (module, path) in files {
        let text = non_test(path, &tests);
        // A file's own module is `module`; its code's `super` is the parent's.
        let mut deps = BTreeSet::new();
        for c in path_re.captures_iter(&text) {
            let base: Vec<String> = match &c[1] {
                "crate" => Vec::new(),
                "super" => module[..module.len().saturating_sub(1)].to_vec(),
                "self" => module.clone(),
                child => {
                    let mut m = module.clone();
                    m.push(child.to_string());
                    if !files.contains_key(&m) {
                        continue; // another crate's path (std::, rdkafka::, ...)
                    }
                    m
                }
            };
            let middle: Vec<String> = c[2]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            let tails: Vec<Vec<String>> = match c[3].strip_prefix('{') {
                Some(group) => group
                    .trim_end_matches('}')
                    .split(',')
                    .map(|item| {
                        item.trim()
                            .split("::")
                            .map(|s| s.trim().to_string())
                            .collect()
                    })
                    .collect(),
                None => vec![vec![c[3].to_string()]],
            };
            for tail in tails {
                let full: Vec<String> = base.iter().chain(&middle).chain(&tail).cloned().collect();
                if let Some(target) = resolve(files, &full) {
                    if target != module {
                        deps.insert(target.clone());
                    }
                }
            }
        }
        out.insert(module.clone(), deps);
    }
    out
}

/// No file of audit-service reaches itself through the imports of non-test code: the
/// files form layers a reader can take one at a time.
#[test]
fn the_imports_between_files_form_no_cycle() {
    let files = sources();
    let graph = imports(&files);
    // Depth-first search for a back edge; report the cycle it closes.
    fn visit(
        node: &Vec<String>,
        graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        stack: &mut Vec<Vec<String>>,
        done: &mut BTreeSet<Vec<String>>,
        cycles: &mut Vec<String>,
    ) {
        if done.contains(node) {
            return;
        }
        if let Some(at) = stack.iter().position(|n| n == node) {
            let names: Vec<String> = stack[at..]
                .iter()
                .chain(std::iter::once(node))
                .map(|m| format!("crate::{}", m.join("::")))
                .collect();
            cycles.push(names.join(" -> "));
            return;
        }
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            visit(next, graph, stack, done, cycles);
        }
        stack.pop();
        done.insert(node.clone());
    }
    let (mut done, mut cycles) = (BTreeSet::new(), Vec::new());
    for node in graph.keys() {
        visit(node, &graph, &mut Vec::new(), &mut done, &mut cycles);
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
    // The check sees the edges it is meant to see.
    let shell = graph.get(&vec!["kafka".to_string(), "shell".to_string()]);
    assert!(
        shell.is_some_and(|d| d.contains(&vec!["auditor".to_string()])),
        "{shell:?}"
    );
}

/// The auditor's decisions are plain data and functions: no rdkafka type, no file.
#[test]
fn the_auditor_names_no_rdkafka_and_touches_no_file() {
    let files = sources();
    let tests = test_modules(&files);
    for (module, path) in &files {
        if module.first().map(String::as_str) != Some("auditor") {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        assert!(
            !text.contains("rdkafka"),
            "{} names rdkafka",
            path.display()
        );
        let code = non_test(path, &tests);
        for io in ["std::fs", "File::", "now_ms", "Instant::now", "SystemTime"] {
            assert!(!code.contains(io), "{} uses {io}", path.display());
        }
    }
}

/// No source file over about 600 lines of non-test code.
#[test]
fn no_source_file_outgrows_a_reader() {
    let files = sources();
    let tests = test_modules(&files);
    let long: Vec<String> = files
        .values()
        .filter_map(|p| {
            let n = non_test(p, &tests).lines().count();
            (n > MAX_LINES).then(|| format!("{}: {n} lines", p.display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "over {MAX_LINES} non-test lines:\n{}",
        long.join("\n")
    );
}
