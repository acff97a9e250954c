//! The shape of the workspace's sources, checked on every test run: no import cycle
//! between the files of a crate, no Rust file over 600 non-test lines (`src/`,
//! `examples/`, `benches/`, `fuzz/` and `build.rs` alike), and the audit-service's
//! sans-io auditor naming no Kafka client. Read from the sources themselves (plain
//! text, std only), so a failure names the files to change.
//!
//! Test code is each item under a `#[cfg(test)]` at the left margin, one by one: the
//! test module, and any single test-only `fn`, `struct`, `impl`, `use` or `const`
//! (its end found by bracket matching that skips strings, chars and comments).
//! Everything else in the file counts, before the test module or after it.
//!
//! The import graph is an approximation of rustc's, kept simple on purpose:
//! - a module is a file (`a/mod.rs` is module `a`); a crate is the files reached by
//!   `mod x;` declarations from a root (`src/lib.rs`, `src/main.rs`, `src/bin/*.rs`,
//!   each example, bench and fuzz target, `build.rs`);
//! - an edge is a path starting with `crate::` (in a `use` or anywhere in code) or a
//!   `use super::…`, resolved to the deepest module file it names (`crate::a::B` with
//!   no file for `B` is module `a`);
//! - only the non-test part of a file counts (test items as above), and files named
//!   `tests.rs` or under a `tests/` folder are left out: test code may look at anything;
//! - `//` comments are dropped (doc links are not imports); an inline `mod x { .. }`
//!   counts as part of its file (none of them imports through `super::` today).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// Above this many non-test lines a file is doing more than one job (the review's bar).
const MAX_NON_TEST_LINES: usize = 600;

/// Temporary: the files over the bar that are waiting for a split, each with its count
/// when listed (from the workspace root). A listed file may not grow past its count,
/// and an entry must go once its file is back under the bar.
const TO_SPLIT: &[(&str, usize)] = &[];

/// A module's path from its crate root: `[]` is the root, `["engine", "tests"]` is
/// `engine/tests.rs` (or `engine/tests/mod.rs`).
type ModPath = Vec<String>;

/// One file of a crate: its module path and its non-test text.
struct Module {
    file: String,
    path: ModPath,
    text: String,
}

/// An import of `to` by `from`, with the line that makes it.
#[derive(Clone, Debug, PartialEq)]
struct Edge {
    to: usize,
    line: usize,
    path: String,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit sits in the workspace")
        .to_path_buf()
}

/// The top-level folders with a `src/` (the workspace's crates).
fn crate_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .expect("read the workspace")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("Cargo.toml").is_file() && p.join("src").is_dir())
        .collect();
    dirs.sort();
    dirs
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if p.is_dir() && name != "target" && !name.starts_with('.') {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Test code by the rules above: a `tests.rs`, or anything under a `tests/` folder.
fn is_test_file(relative: &Path) -> bool {
    relative.file_name().is_some_and(|n| n == "tests.rs")
        || relative
            .parent()
            .is_some_and(|p| p.components().any(|c| c.as_os_str() == "tests"))
}

/// Which lines of `text` are test code: each item under a `#[cfg(test)]` at the left
/// margin, from the attribute to the line that ends the item (its closing brace, or
/// its `;`), one item at a time. That covers the test module (`mod tests { .. }` or
/// `mod tests;`) and single test-only items anywhere in the file (a `struct`, an `fn`,
/// an `impl`, a `use`, a `const`); the code after them counts. An indented
/// `#[cfg(test)]` (a field, a statement, a method inside an item) is part of the item
/// around it and counts with it. An item whose end cannot be found leaves only the
/// attribute out: a misread never hides code.
fn test_lines(text: &str) -> Vec<bool> {
    let lines: Vec<&str> = text.lines().collect();
    let mut starts = Vec::with_capacity(lines.len());
    let mut at = 0;
    for line in &lines {
        starts.push(at);
        at += line.len();
        at += match &text.as_bytes()[at..] {
            [b'\r', b'\n', ..] => 2,
            [b'\n', ..] => 1,
            _ => 0,
        };
    }
    let mut test = vec![false; lines.len()];
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_end() != "#[cfg(test)]" {
            i += 1;
            continue;
        }
        let after = starts[i] + lines[i].len();
        let last = item_end(text, after).map_or(i, |end| starts.partition_point(|&s| s <= end) - 1);
        test[i..=last].iter_mut().for_each(|t| *t = true);
        i = last + 1;
    }
    test
}

/// The lines of `text` that are not test code (see `test_lines`).
fn non_test(text: &str) -> Vec<&str> {
    text.lines()
        .zip(test_lines(text))
        .filter(|(_, test)| !test)
        .map(|(line, _)| line)
        .collect()
}

/// `text` with its test code blanked out, lines kept (so a line number is the file's).
fn non_test_text(text: &str) -> String {
    text.lines()
        .zip(test_lines(text))
        .map(|(line, test)| if test { "" } else { line })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The byte offset of the last character of the item that starts at `from` (after its
/// attributes and comments): the first `;` outside brackets, or the `}` that closes
/// its body (`fn`, `struct`, `impl`, `mod`, a macro). A `use`, `const`, `static` or
/// `type` ends at its `;` only (`const X: T = T { .. };`). Brackets inside strings,
/// raw strings, char literals and comments are skipped; `None` when the text ends (or
/// a bracket closes that never opened) first.
fn item_end(text: &str, from: usize) -> Option<usize> {
    let chars: Vec<(usize, char)> = text[from..]
        .char_indices()
        .map(|(i, c)| (from + i, c))
        .collect();
    let at = |k: usize| chars.get(k).map(|&(_, c)| c);
    let mut depth = 0usize;
    let mut semicolon_only = false;
    let mut after_const = false;
    let mut keyword_seen = false;
    let mut k = 0;
    while let Some(c) = at(k) {
        match c {
            '/' if at(k + 1) == Some('/') => {
                while at(k).is_some_and(|c| c != '\n') {
                    k += 1;
                }
            }
            '/' if at(k + 1) == Some('*') => {
                let mut nested = 0;
                loop {
                    match (at(k), at(k + 1)) {
                        (Some('/'), Some('*')) => {
                            nested += 1;
                            k += 2;
                        }
                        (Some('*'), Some('/')) => {
                            nested -= 1;
                            k += 2;
                            if nested == 0 {
                                break;
                            }
                        }
                        (Some(_), _) => k += 1,
                        (None, _) => return None,
                    }
                }
                continue;
            }
            '"' => k = string_end(&chars, k, false, 0)?,
            '\'' => {
                // a char literal ('x', '\n', '\''), else a lifetime or a label
                if at(k + 1) == Some('\\') {
                    k += 3;
                    while at(k).is_some_and(|c| c != '\'') {
                        k += 1;
                    }
                } else if at(k + 2) == Some('\'') {
                    k += 2;
                }
            }
            c if c.is_alphabetic() || c == '_' => {
                let begin = k;
                while at(k + 1).is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    k += 1;
                }
                let word: String = chars[begin..=k].iter().map(|&(_, c)| c).collect();
                let mut hashes = 0;
                while at(k + 1 + hashes) == Some('#') {
                    hashes += 1;
                }
                if matches!(word.as_str(), "r" | "br" | "cr") && at(k + 1 + hashes) == Some('"') {
                    k = string_end(&chars, k + 1 + hashes, true, hashes)?;
                } else if depth == 0 && after_const {
                    // `const fn`, `const unsafe fn`: a body, not a value
                    semicolon_only = !matches!(word.as_str(), "fn" | "unsafe" | "async" | "extern");
                    after_const = false;
                } else if depth == 0 && !keyword_seen {
                    // the item's first word after its qualifiers says what ends it
                    let word = word.as_str();
                    keyword_seen = !matches!(word, "pub" | "unsafe" | "async" | "extern");
                    semicolon_only = matches!(word, "use" | "static" | "type" | "const");
                    after_const = word == "const";
                }
            }
            '{' | '(' | '[' => depth += 1,
            '}' | ')' | ']' => {
                depth = depth.checked_sub(1)?;
                if c == '}' && depth == 0 && !semicolon_only {
                    return Some(chars[k].0);
                }
            }
            ';' if depth == 0 => return Some(chars[k].0),
            _ => {}
        }
        k += 1;
    }
    None
}

/// The index of the last character of the string literal whose opening quote is at
/// `open`: its closing quote, or the last `#` after it for a raw string (`r#".."#`,
/// where `\` escapes nothing).
fn string_end(chars: &[(usize, char)], open: usize, raw: bool, hashes: usize) -> Option<usize> {
    let mut k = open + 1;
    loop {
        match chars.get(k)?.1 {
            '\\' if !raw => k += 2,
            '"' if (1..=hashes).all(|h| chars.get(k + h).is_some_and(|&(_, c)| c == '#')) => {
                return Some(k + hashes);
            }
            _ => k += 1,
        }
    }
}

/// `text` without its `//` comments (a `//` inside a string literal ends the line too
/// early; harmless here: no import is written after a string on its line).
fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The names of the `mod x;` declarations of a file (not inline `mod x { .. }`).
fn declared_modules(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in text.lines() {
        let mut rest = line.trim();
        // attributes and visibility in front: `#[cfg(..)] pub(crate) mod x;`
        while let Some(r) = rest.strip_prefix("#[") {
            rest = r.split_once(']').map_or("", |(_, r)| r).trim_start();
        }
        if let Some(r) = rest.strip_prefix("pub") {
            rest = r.trim_start();
            if rest.starts_with('(') {
                rest = rest.split_once(')').map_or("", |(_, r)| r).trim_start();
            }
        }
        if let Some(r) = rest.strip_prefix("mod ") {
            if let Some(name) = r.trim().strip_suffix(';') {
                if name.chars().all(is_ident_char) {
                    names.push(name.to_string());
                }
            }
        }
    }
    names
}

/// Every path a `use` statement imports (`use crate::{a::B, c};` is `crate::a::B` and
/// `crate::c`; nested braces are expanded, `self` in a group is the prefix itself,
/// `as x` renames are dropped), and `text` with its use statements blanked out (lines
/// kept), for the paths written in code.
fn use_paths(text: &str) -> (Vec<(usize, String)>, String) {
    let mut out = Vec::new();
    let mut blanked = String::new();
    let mut offset = 0;
    while let Some(i) = find_word(&text[offset..], "use") {
        let start = offset + i + 3;
        let Some(end) = text[start..].find(';') else {
            break;
        };
        let statement = &text[start..start + end];
        let line = text[..start].matches('\n').count() + 1;
        for p in expand(&without_renames(statement)) {
            out.push((line, p));
        }
        blanked.push_str(&text[offset..offset + i]);
        blanked.extend(statement.chars().filter(|&c| c == '\n'));
        offset = start + end + 1;
    }
    blanked.push_str(&text[offset..]);
    (out, blanked)
}

/// A use tree without its whitespace and its `as x` renames: `a::{b as c, d}` →
/// `a::{b,d}`.
fn without_renames(tree: &str) -> String {
    let mut out = String::new();
    let mut renamed = false;
    for token in tree.split_whitespace() {
        if token == "as" {
            renamed = true;
            continue;
        }
        if renamed {
            out.push_str(token.trim_start_matches(is_ident_char));
            renamed = false;
        } else {
            out.push_str(token);
        }
    }
    out
}

/// The first `word` in `text` standing alone (not part of a longer identifier).
fn find_word(text: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find(word) {
        let at = from + i;
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        if !before.is_some_and(|c| is_ident_char(c) || c == '$')
            && !after.is_some_and(is_ident_char)
        {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// Expands a use tree without whitespace (`a::{b,c::{d,self}}`) into its paths.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim_start_matches("::");
    let Some(open) = tree.find('{') else {
        return vec![tree.trim_end_matches("::").to_string()];
    };
    let prefix = tree[..open].trim_end_matches("::");
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut begin) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[begin..i]);
                begin = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[begin..]);
    let mut out = Vec::new();
    for part in parts.into_iter().filter(|p| !p.is_empty()) {
        for sub in expand(part) {
            out.push(match sub.as_str() {
                "self" => prefix.to_string(),
                _ if prefix.is_empty() => sub,
                _ => format!("{prefix}::{sub}"),
            });
        }
    }
    out
}

/// Every `crate::a::b` path written in code (outside `use` too), `$crate` excluded.
fn crate_paths(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = find_word(&text[from..], "crate") {
        let at = from + i;
        from = at + "crate".len();
        if !text[from..].starts_with("::") {
            continue; // `pub(crate)`, `crate` in a use group, ...
        }
        let path: String = text[at..]
            .chars()
            .take_while(|&c| is_ident_char(c) || c == ':')
            .collect();
        out.push((text[..at].matches('\n').count() + 1, path));
    }
    out
}

/// The module a path names, from module `at`: the deepest existing module file along
/// it. `None` for paths that leave the crate (`std::..`, another crate's name).
fn resolve(path: &str, at: &ModPath, modules: &BTreeMap<ModPath, usize>) -> Option<usize> {
    let mut segments = path.split("::").filter(|s| !s.is_empty()).peekable();
    let mut base: ModPath = match segments.peek().copied() {
        Some("crate") => {
            segments.next();
            Vec::new()
        }
        Some("super") => at.clone(),
        _ => return None,
    };
    while segments.peek() == Some(&"super") {
        segments.next();
        base.pop();
    }
    let mut found = modules.get(&base).copied();
    for s in segments {
        base.push(s.to_string());
        match modules.get(&base) {
            Some(&m) => found = Some(m),
            None => break,
        }
    }
    found
}

/// The import edges between `modules` (indexes into it), deduplicated by target, the
/// first line of each kept as its evidence.
fn edges(modules: &[Module]) -> Vec<Vec<Edge>> {
    let by_path: BTreeMap<ModPath, usize> = modules
        .iter()
        .enumerate()
        .map(|(i, m)| (m.path.clone(), i))
        .collect();
    modules
        .iter()
        .enumerate()
        .map(|(from, m)| {
            let code = strip_comments(&m.text);
            let (uses, rest) = use_paths(&code);
            let mut out: Vec<Edge> = Vec::new();
            for (line, path) in uses.into_iter().chain(crate_paths(&rest)) {
                let Some(to) = resolve(&path, &m.path, &by_path) else {
                    continue;
                };
                if to != from && !out.iter().any(|e| e.to == to) {
                    out.push(Edge { to, line, path });
                }
            }
            out.sort_by_key(|e| e.to);
            out
        })
        .collect()
}

/// One cycle per strongly connected component of more than one module (its shortest
/// through the component's first module), as the list of modules around it (the
/// first repeated at the end) with the edge into each; and the component's modules.
type Cycle = (Vec<(usize, Option<Edge>)>, Vec<usize>);

fn cycles(graph: &[Vec<Edge>]) -> Vec<Cycle> {
    let components = strongly_connected(graph);
    let mut out = Vec::new();
    for component in components.iter().filter(|c| c.len() > 1) {
        let inside: BTreeSet<usize> = component.iter().copied().collect();
        let start = *component.iter().min().expect("non-empty component");
        // shortest way back to `start` inside the component (breadth first)
        let mut came_from: BTreeMap<usize, (usize, Edge)> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        'search: while let Some(n) = queue.pop_front() {
            for e in &graph[n] {
                if !inside.contains(&e.to) || came_from.contains_key(&e.to) {
                    continue;
                }
                came_from.insert(e.to, (n, e.clone()));
                if e.to == start {
                    break 'search;
                }
                queue.push_back(e.to);
            }
        }
        let mut cycle = Vec::new();
        let mut n = start;
        loop {
            let (prev, edge) = came_from[&n].clone();
            cycle.push((n, Some(edge)));
            n = prev;
            if n == start {
                break;
            }
        }
        cycle.push((start, None));
        cycle.reverse();
        let mut members = component.clone();
        members.sort();
        out.push((cycle, members));
    }
    out
}

/// Tarjan's strongly connected components.
fn strongly_connected(graph: &[Vec<Edge>]) -> Vec<Vec<usize>> {
    struct State<'g> {
        graph: &'g [Vec<Edge>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        components: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for e in s.graph[v].clone() {
            match s.index[e.to] {
                None => {
                    visit(s, e.to);
                    s.low[v] = s.low[v].min(s.low[e.to]);
                }
                Some(i) if s.on_stack[e.to] => s.low[v] = s.low[v].min(i),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.components.push(component);
        }
    }
    let n = graph.len();
    let mut s = State {
        graph,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        components: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.components
}

/// `a → b (line 3: crate::b::X) → a (line 9: super::a)`, file by file, and the other
/// files of the knot when it has more than the cycle shown.
fn describe(modules: &[Module], (cycle, members): &Cycle) -> String {
    let shown = cycle
        .iter()
        .map(|(m, edge)| match edge {
            None => modules[*m].file.clone(),
            Some(e) => format!("-> {} (line {}: {})", modules[*m].file, e.line, e.path),
        })
        .collect::<Vec<_>>()
        .join("\n    ");
    if members.len() + 1 == cycle.len() {
        return shown;
    }
    let files: Vec<&str> = members.iter().map(|m| modules[*m].file.as_str()).collect();
    format!(
        "{shown}\n    (one knot of {} files: {})",
        files.len(),
        files.join(", ")
    )
}

/// The modules of one crate root, following its `mod x;` declarations (a file's
/// children are in the folder of its name; those of `lib.rs`, `main.rs` and `mod.rs`
/// beside it). `read` gives a file's text, or `None` when it does not exist.
fn crate_modules(
    root: &Path,
    label: &dyn Fn(&Path) -> String,
    read: &dyn Fn(&Path) -> Option<String>,
) -> Vec<Module> {
    let mut out = Vec::new();
    let mut todo = vec![(root.to_path_buf(), ModPath::new())];
    while let Some((file, path)) = todo.pop() {
        let Some(text) = read(&file) else {
            continue;
        };
        let relative = PathBuf::from(label(&file));
        let own_dir = match file.file_name().and_then(|n| n.to_str()) {
            Some("lib.rs" | "main.rs" | "mod.rs") => file.parent().map(Path::to_path_buf),
            _ if path.is_empty() => file.parent().map(Path::to_path_buf), // src/bin/x.rs
            _ => Some(file.with_extension("")),
        }
        .expect("a file has a folder");
        let text = non_test_text(&text);
        for child in declared_modules(&text) {
            let mut child_path = path.clone();
            child_path.push(child.clone());
            let flat = own_dir.join(format!("{child}.rs"));
            let nested = own_dir.join(&child).join("mod.rs");
            let child_file = if read(&flat).is_some() { flat } else { nested };
            todo.push((child_file, child_path));
        }
        if !is_test_file(&relative) {
            out.push(Module {
                file: relative.display().to_string(),
                path,
                text,
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

fn crate_roots(dir: &Path) -> Vec<PathBuf> {
    let src = dir.join("src");
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| src.join(f))
        .filter(|p| p.is_file())
        .collect();
    let mut bins = Vec::new();
    rust_files(&src.join("bin"), &mut bins);
    roots.extend(bins);
    // each example, bench and fuzz target is a crate of its own: `x.rs` or `x/main.rs`
    for targets in ["examples", "benches", "fuzz/fuzz_targets"] {
        let Ok(entries) = std::fs::read_dir(dir.join(targets)) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .map(|p| if p.is_dir() { p.join("main.rs") } else { p })
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "rs"))
            .collect();
        found.sort();
        roots.extend(found);
    }
    roots.extend(Some(dir.join("build.rs")).filter(|p| p.is_file()));
    roots
}

#[test]
fn no_import_cycle_between_the_files_of_a_crate() {
    let root = workspace();
    let label = |p: &Path| p.strip_prefix(&root).unwrap_or(p).display().to_string();
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    let mut found = Vec::new();
    for dir in crate_dirs(&root) {
        for crate_root in crate_roots(&dir) {
            let modules = crate_modules(&crate_root, &label, &read);
            for cycle in cycles(&edges(&modules)) {
                found.push(describe(&modules, &cycle));
            }
        }
    }
    assert!(
        found.is_empty(),
        "{} import cycle(s) between files (module = file; `use crate::`, `use super::`, \
         `crate::x::` paths):\n  {}",
        found.len(),
        found.join("\n  ")
    );
}

#[test]
fn no_source_file_over_600_non_test_lines() {
    let root = workspace();
    let mut long = Vec::new();
    let mut listed: BTreeMap<&str, usize> = TO_SPLIT.iter().copied().collect();
    for dir in crate_dirs(&root) {
        // all of a crate's Rust: src/, examples/, benches/, fuzz/, build.rs
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        for file in files {
            let relative = file.strip_prefix(&root).expect("under the workspace");
            if is_test_file(relative.strip_prefix(dir.file_name().unwrap()).unwrap()) {
                continue;
            }
            let text = std::fs::read_to_string(&file).expect("read a source file");
            let lines = non_test(&text).len();
            let name = relative.display().to_string();
            match listed.remove(name.as_str()) {
                Some(cap) if lines > cap => long.push(format!(
                    "{name}: {lines} (listed in TO_SPLIT at {cap}: split it, don't grow it)"
                )),
                Some(_) if lines <= MAX_NON_TEST_LINES => long.push(format!(
                    "{name}: {lines}, under the bar now: take it out of TO_SPLIT"
                )),
                None if lines > MAX_NON_TEST_LINES => long.push(format!("{name}: {lines}")),
                _ => {}
            }
        }
    }
    long.extend(
        listed
            .keys()
            .map(|f| format!("{f}: listed in TO_SPLIT, not found")),
    );
    long.sort();
    assert!(
        long.is_empty(),
        "{} source file(s) over {MAX_NON_TEST_LINES} non-test lines (items under a \
         `#[cfg(test)]` at the left margin left out, everything else counted):\n  {}",
        long.len(),
        long.join("\n  ")
    );
}

/// The auditor's decisions are plain data and functions: no file of
/// `audit-service/src/auditor/` may name rdkafka, open a file or read a clock.
#[test]
fn the_auditor_core_names_no_kafka_client_no_file_and_no_clock() {
    let auditor = workspace().join("audit-service/src/auditor");
    assert!(auditor.is_dir(), "{} is missing", auditor.display());
    let mut files = Vec::new();
    rust_files(&auditor, &mut files);
    let naming: Vec<String> = files
        .iter()
        .filter(|f| {
            std::fs::read_to_string(f)
                .expect("read an auditor file")
                .contains("rdkafka")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(naming.is_empty(), "rdkafka named in {naming:?}");
    // Nor a file or a clock: `now` is passed in, the shell does the I/O.
    let io: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).expect("read an auditor file");
            let code = non_test(&text).join("\n");
            ["std::fs", "File::", "now_ms", "Instant::now", "SystemTime"]
                .into_iter()
                .filter(move |token| code.contains(token))
                .map(move |token| format!("{} uses {token}", f.display()))
        })
        .collect();
    assert!(io.is_empty(), "{io:?}");
}

#[cfg(test)]
mod cycle_finder {
    use super::*;

    /// The modules of an in-memory crate: `(file, text)`, `src/lib.rs` first.
    fn modules(files: &[(&str, &str)]) -> Vec<Module> {
        let files: BTreeMap<PathBuf, String> = files
            .iter()
            .map(|(f, t)| (PathBuf::from(f), t.to_string()))
            .collect();
        let read = |p: &Path| files.get(p).cloned();
        let label = |p: &Path| p.display().to_string();
        crate_modules(Path::new("src/lib.rs"), &label, &read)
    }

    fn found(files: &[(&str, &str)]) -> Vec<String> {
        let modules = modules(files);
        cycles(&edges(&modules))
            .iter()
            .map(|c| describe(&modules, c))
            .collect()
    }

    #[test]
    fn a_cycle_through_three_files_is_reported_file_by_file() {
        let cycles = found(&[
            ("src/lib.rs", "mod a;\nmod b;\nmod c;\n"),
            ("src/a.rs", "use crate::b::Thing;\n"),
            ("src/b.rs", "use crate::{c::{self, Other as O}, Error};\n"),
            ("src/c.rs", "fn f() { crate::a::g() }\n"),
        ]);
        assert_eq!(
            cycles,
            ["src/a.rs\n    -> src/b.rs (line 1: crate::b::Thing)\n    \
              -> src/c.rs (line 1: crate::c)\n    -> src/a.rs (line 1: crate::a::g)"]
        );
    }

    #[test]
    fn a_dag_has_no_cycle() {
        // lib → a → b, lib → b, a mod.rs folder module, re-exports at the root
        let cycles = found(&[
            ("src/lib.rs", "mod a;\nmod b;\npub use crate::a::x::Y;\n"),
            ("src/a/mod.rs", "pub mod x;\nuse crate::b::Z;\n"),
            ("src/a/x.rs", "use super::super::b::W;\n"),
            (
                "src/b.rs",
                "// use crate::a::x; (a comment, not an import)\n",
            ),
        ]);
        assert_eq!(cycles, Vec::<String>::new());
    }

    #[test]
    fn super_resolves_to_the_parent_file_and_never_to_the_file_itself() {
        // x.rs naming itself through super is no edge; mod.rs's super is the root
        let own = found(&[
            ("src/lib.rs", "mod a;\n"),
            ("src/a/mod.rs", "mod x;\n"),
            ("src/a/x.rs", "use super::x::Own;\n"),
        ]);
        assert_eq!(own, Vec::<String>::new());
        let up = found(&[
            ("src/lib.rs", "mod a;\nfn f() { crate::a::g() }\n"),
            ("src/a/mod.rs", "use super::Root;\n"),
        ]);
        assert_eq!(
            up,
            [
                "src/lib.rs\n    -> src/a/mod.rs (line 2: crate::a::g)\n    \
              -> src/lib.rs (line 1: super::Root)"
            ]
        );
    }

    #[test]
    fn test_code_and_test_files_make_no_edge() {
        let cycles = found(&[
            ("src/lib.rs", "mod a;\nmod b;\n"),
            ("src/a.rs", "use crate::b::X;\n#[cfg(test)]\nmod tests;\n"),
            ("src/a/tests.rs", "use crate::a::*;\n"),
            (
                "src/b.rs",
                "pub struct X;\n#[cfg(test)]\nmod tests {\n use crate::a::*;\n}\n",
            ),
        ]);
        assert_eq!(cycles, Vec::<String>::new());
    }

    #[test]
    fn non_test_lines_end_at_the_test_module() {
        let text =
            "a\n    #[cfg(test)]\n    fn only_in_tests() {}\nb\n#[cfg(test)]\nmod tests {}\n";
        assert_eq!(non_test(text).len(), 4);
    }

    #[test]
    fn a_single_test_item_at_the_margin_leaves_out_that_item_only() {
        // Counting up to the first `#[cfg(test)]` at the margin kept 1 line of these.
        let text = r##"use crate::a;
#[cfg(test)]
#[derive(Default)]
struct Faults {
    close: char, // '}' in a comment
}
fn f() -> (char, &'static str) {
    ('}', "}\"}")
}
#[cfg(test)]
fn helper() -> &'static str {
    r#"}"# /* } */
}
mod b;
#[cfg(test)]
const T: [u8; 1] = [b'}'];
fn g() {}
#[cfg(test)]
mod tests {
    use crate::c;
}
"##;
        assert_eq!(
            non_test(text),
            [
                "use crate::a;",
                "fn f() -> (char, &'static str) {",
                r#"    ('}', "}\"}")"#,
                "}",
                "mod b;",
                "fn g() {}",
            ]
        );
    }

    #[test]
    fn imports_and_modules_below_a_single_test_item_are_seen() {
        // Invisible when a file ended at its first `#[cfg(test)]`: no `mod a;`, no cycle.
        let cycles = found(&[
            ("src/lib.rs", "#[cfg(test)]\nconst T: u8 = 1;\nmod a;\nmod b;\n"),
            ("src/a.rs", "#[cfg(test)]\nfn helper() {}\nuse crate::b::X;\n"),
            (
                "src/b.rs",
                "pub struct X;\nfn f() { crate::a::g() }\n#[cfg(test)]\nmod tests {\n    use crate::a::*;\n}\n",
            ),
        ]);
        assert_eq!(
            cycles,
            ["src/a.rs\n    -> src/b.rs (line 3: crate::b::X)\n    \
              -> src/a.rs (line 2: crate::a::g)"]
        );
    }

    #[test]
    fn a_test_module_in_its_own_file_does_not_end_the_count() {
        let text = "a\n#[cfg(test)]\nmod tests;\nb\nc\n#[cfg(test)]\nmod more {}\n";
        assert_eq!(non_test(text), ["a", "b", "c"]);
    }
}
