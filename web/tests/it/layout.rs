//! The shape of web's source (issue 27): the `use crate::…` / `super::…` references
//! between files of web/src form no cycle, and no source file holds more than 600
//! lines of non-test code. Test files (`tests.rs`, `tests/`) and `#[cfg(test)]`
//! modules are left out of both.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 600;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every library source file (not `bin/`, not test files), relative to src/.
fn sources() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read src dir") {
            let path = entry.expect("dir entry").path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "tests" && name != "bin" {
                    walk(&path, out);
                }
            } else if name.ends_with(".rs") && name != "tests.rs" {
                out.push(path.strip_prefix(src()).unwrap().to_path_buf());
            }
        }
    }
    let mut out = Vec::new();
    walk(&src(), &mut out);
    out.sort();
    out
}

/// The code of a file without its `#[cfg(test)]` items (an inline `mod tests { … }`
/// runs to the end of the file by the codebase's habit; `mod tests;` is one line).
fn non_test_code(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" {
            match lines.next() {
                Some(next) if next.trim_end().ends_with(';') => continue,
                _ => break,
            }
        }
        out.push(line);
    }
    out
}

/// The module path of a file: `alert/plan.rs` → [alert, plan]; `lib.rs` → [].
fn module_of(file: &Path) -> Vec<String> {
    let mut parts: Vec<String> = file
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The file that defines the longest module prefix of `path` (lib.rs for none).
fn file_of(path: &[String]) -> PathBuf {
    let mut found = PathBuf::from("lib.rs");
    let mut dir = PathBuf::new();
    for segment in path {
        let flat = dir.join(format!("{segment}.rs"));
        let nested = dir.join(segment).join("mod.rs");
        if src().join(&flat).is_file() {
            found = flat;
        } else if src().join(&nested).is_file() {
            found = nested;
        } else {
            break;
        }
        dir = dir.join(segment);
    }
    found
}

/// Every `crate::…` and `super::…` path in `code`, braces of `use` expanded, as
/// absolute module paths.
fn references(code: &str, module: &[String]) -> Vec<Vec<String>> {
    fn expand(prefix: &str, rest: &str, out: &mut Vec<String>) {
        let rest = rest.trim();
        match rest.strip_prefix('{') {
            Some(inner) => {
                let inner = inner.strip_suffix('}').unwrap_or(inner);
                let mut depth = 0;
                let mut start = 0;
                for (i, c) in inner.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            expand(prefix, &inner[start..i], out);
                            start = i + 1;
                        }
                        _ => {}
                    }
                }
                expand(prefix, &inner[start..], out);
            }
            None => {
                let head: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                match rest[head.len()..].trim_start().strip_prefix('{') {
                    Some(_) => expand(
                        &format!("{prefix}{head}"),
                        rest[head.len()..].trim_start(),
                        out,
                    ),
                    None if !head.is_empty() => out.push(format!("{prefix}{head}")),
                    None => {}
                }
            }
        }
    }
    let mut paths = Vec::new();
    let bytes = code.as_bytes();
    for keyword in ["crate::", "super::"] {
        let mut at = 0;
        while let Some(found) = code[at..].find(keyword) {
            let start = at + found;
            at = start + keyword.len();
            let preceded = start > 0
                && (bytes[start - 1].is_ascii_alphanumeric()
                    || bytes[start - 1] == b'_'
                    || bytes[start - 1] == b':');
            if preceded {
                continue;
            }
            // The path, and the `{…}` group that follows it in a `use`.
            let tail = &code[start..];
            let mut end = tail
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(tail.len());
            if tail[end..].starts_with('{') {
                let mut depth = 0;
                for (i, c) in tail[end..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end += i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
            }
            expand("", &tail[..end], &mut paths);
        }
    }
    paths
        .into_iter()
        .filter_map(|p| {
            let mut segments: Vec<&str> = p.split("::").filter(|s| !s.is_empty()).collect();
            let mut base: Vec<String> = match segments.first() {
                Some(&"crate") => Vec::new(),
                Some(&"super") => module.to_vec(),
                _ => return None,
            };
            if segments[0] == "crate" {
                segments.remove(0);
            } else {
                while segments.first() == Some(&"super") {
                    segments.remove(0);
                    base.pop()?;
                }
            }
            base.extend(segments.iter().map(|s| s.to_string()));
            Some(base)
        })
        .collect()
}

/// Paths that start at a module brought into scope by name: a child module
/// (`pub use worker::ChannelWorker`) or one a `use` named (`use crate::alert;` then
/// `alert::desired(..)`).
fn through_aliases(code: &str, module: &[String], refs: &[Vec<String>]) -> Vec<Vec<String>> {
    let is_module = |path: &[String]| module_of(&file_of(path)) == path;
    let mut aliases: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in refs {
        let path: Vec<String> = r.iter().filter(|s| *s != "self").cloned().collect();
        if !path.is_empty() && is_module(&path) {
            aliases.insert(path.last().unwrap().clone(), path);
        }
    }
    let dir = src().join(module.join("/"));
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let child = name.strip_suffix(".rs").unwrap_or(&name).to_string();
        let mut path = module.to_vec();
        path.push(child.clone());
        if child != "mod" && child != "tests" && is_module(&path) {
            aliases.insert(child, path);
        }
    }
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    for (name, base) in &aliases {
        let needle = format!("{name}::");
        let mut at = 0;
        while let Some(found) = code[at..].find(&needle) {
            let start = at + found;
            at = start + needle.len();
            if start > 0
                && (bytes[start - 1].is_ascii_alphanumeric()
                    || bytes[start - 1] == b'_'
                    || bytes[start - 1] == b':')
            {
                continue;
            }
            let rest: String = code[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let mut path = base.clone();
            path.extend(
                rest.split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            );
            out.push(path);
        }
    }
    out
}

#[test]
fn web_sources_import_no_cycle_and_stay_short() {
    let mut graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    let mut long = Vec::new();
    for file in sources() {
        let text = std::fs::read_to_string(src().join(&file)).expect("read source");
        let code = non_test_code(&text);
        if code.len() > MAX_LINES {
            long.push(format!("{} ({} lines)", file.display(), code.len()));
        }
        // Comments (doc links included) are no imports.
        let code: Vec<&str> = code
            .iter()
            .map(|l| l.find("//").map_or(*l, |i| &l[..i]))
            .collect();
        let code = code.join("\n");
        let module = module_of(&file);
        let mut refs = references(&code, &module);
        refs.extend(through_aliases(&code, &module, &refs));
        let targets = refs
            .iter()
            .map(|p| file_of(p))
            .filter(|t| *t != file)
            .collect();
        graph.insert(file, targets);
    }

    // Depth-first search for a back edge; the cycle is the stack from its target.
    fn visit(
        file: &PathBuf,
        graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        done: &mut BTreeSet<PathBuf>,
        stack: &mut Vec<PathBuf>,
    ) -> Option<Vec<PathBuf>> {
        if let Some(i) = stack.iter().position(|f| f == file) {
            let mut cycle = stack[i..].to_vec();
            cycle.push(file.clone());
            return Some(cycle);
        }
        if !done.insert(file.clone()) {
            return None;
        }
        stack.push(file.clone());
        for next in graph.get(file).into_iter().flatten() {
            if let Some(c) = visit(next, graph, done, stack) {
                return Some(c);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    for file in graph.keys() {
        if let Some(cycle) = visit(file, &graph, &mut done, &mut Vec::new()) {
            let names: Vec<String> = cycle.iter().map(|f| f.display().to_string()).collect();
            panic!("import cycle: {}", names.join(" -> "));
        }
    }
    // The check sees the references it is meant to: openapi.rs lists the handlers.
    assert!(
        graph[Path::new("openapi.rs")].contains(Path::new("api/topics.rs")),
        "{:?}",
        graph[Path::new("openapi.rs")]
    );
    assert!(long.is_empty(), "over {MAX_LINES} non-test lines: {long:?}");
}
