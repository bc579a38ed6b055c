//! Which top-level modules of a crate refer to which, read from its sources (`crate::name`,
//! `use crate::{a, b::c}`), outside comments and test-only modules, and the cycles in that
//! graph: a module that needs another that needs it back is one job split in two files, or two
//! jobs in one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level module -> the top-level modules it refers to (the crate root left out: it
/// declares them all).
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// The graph of the crate whose sources are in `src` (holding `lib.rs` or `main.rs`).
pub fn of_crate(src: &Path) -> Graph {
    let mut graph = Graph::new();
    let test_only = test_only_modules(src);
    for file in rust_files(src) {
        let relative = file.strip_prefix(src).expect("under src");
        let top = top_module(relative);
        if top.is_empty() || test_only.iter().any(|t| relative.starts_with(t)) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("a source file");
        let refs = graph.entry(top.clone()).or_default();
        refs.extend(
            references(&without_tests(&text))
                .into_iter()
                .filter(|r| *r != top),
        );
    }
    graph
}

/// Every cycle (as the modules along it, the first repeated at the end), each once.
pub fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        found: &mut Vec<Vec<String>>,
    ) {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            found.push(cycle);
            return;
        }
        if done.contains(node) {
            return;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if graph.contains_key(next) {
                visit(next, graph, path, done, found);
            }
        }
        path.pop();
        done.insert(node.to_string());
    }
    let (mut done, mut found) = (BTreeSet::new(), Vec::new());
    for node in graph.keys() {
        visit(node, graph, &mut Vec::new(), &mut done, &mut found);
    }
    found
}

fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)
        .expect("a source directory")
        .flatten()
    {
        let path = entry.path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// `a` for `a.rs` and `a/b.rs`; empty for the crate root and `bin/`.
fn top_module(relative: &Path) -> String {
    let first = relative
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    match first.trim_end_matches(".rs") {
        "lib" | "main" | "bin" => String::new(),
        name => name.to_string(),
    }
}

/// Files and directories of modules declared `#[cfg(test)] mod name;`, relative to `src`.
fn test_only_modules(src: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for file in rust_files(src) {
        let text = std::fs::read_to_string(&file).expect("a source file");
        let dir = match file.file_name().and_then(|n| n.to_str()) {
            Some("lib.rs" | "main.rs" | "mod.rs") => file.parent().expect("a parent").to_path_buf(),
            _ => file.with_extension(""),
        };
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for pair in lines.windows(2) {
            let declared = pair[1]
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ")
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'));
            if let (true, Some(name)) = (pair[0] == "#[cfg(test)]", declared) {
                let module = dir.join(name);
                for candidate in [module.with_extension("rs"), module] {
                    if let Ok(relative) = candidate.strip_prefix(src) {
                        found.push(relative.to_path_buf());
                    }
                }
            }
        }
    }
    found
}

/// The text before an inline `#[cfg(test)] mod name {`, without `//` comments.
fn without_tests(text: &str) -> String {
    let mut kept = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let next = lines.peek().map_or("", |l| l.trim());
        if line.trim() == "#[cfg(test)]" && next.starts_with("mod ") && next.ends_with('{') {
            break;
        }
        let code = line.split("//").next().unwrap_or_default();
        kept.push_str(code);
        kept.push('\n');
    }
    kept
}

/// The top-level modules named after `crate::`.
fn references(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::c, d::{e, f}}`: the first name of each top-level item.
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_alphabetic() || c == '_') => {
                        found.insert(identifier(&group[i..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(identifier(rest));
        }
    }
    found.remove("");
    found.remove("self");
    found
}

fn identifier(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, file: &str, text: &str) {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_cycle_through_three_modules_is_found_and_tests_and_comments_do_not_count() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        write(
            src,
            "lib.rs",
            "mod a;\nmod b;\nmod c;\n#[cfg(test)]\nmod fixtures;\n",
        );
        write(src, "a.rs", "use crate::{b::{X, Y}, c};\n");
        write(src, "b/mod.rs", "mod inner;\n");
        write(src, "b/inner.rs", "fn f() { crate::c::g() }\n");
        write(
            src,
            "c.rs",
            "// crate::b is only named here\n#[cfg(test)]\nmod tests {\n use crate::b;\n}\n",
        );
        write(src, "fixtures.rs", "use crate::a;\n");
        let graph = of_crate(src);
        assert_eq!(graph["a"], BTreeSet::from(["b".into(), "c".into()]));
        assert_eq!(graph["b"], BTreeSet::from(["c".into()]));
        assert!(graph["c"].is_empty(), "{graph:?}");
        assert!(!graph.contains_key("fixtures"), "{graph:?}");
        assert!(cycles(&graph).is_empty());
        write(src, "c.rs", "use crate::a::Thing;\n");
        let found = cycles(&of_crate(src));
        assert_eq!(found, vec![vec!["a", "b", "c", "a"]], "{found:?}");
    }
}
