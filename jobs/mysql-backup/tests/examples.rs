//! The YAML under examples/mysql parses, and every `mysql-backup` invocation in it names a real
//! subcommand with flags that subcommand accepts (checked against the binary's own --help).

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/mysql");

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    testbed::yaml_documents(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every container (init or not) anywhere in a document.
fn containers(v: &Value, out: &mut Vec<Value>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                if (k == "containers" || k == "initContainers")
                    && let Value::Array(items) = child
                {
                    out.extend(items.iter().cloned());
                }
                containers(child, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| containers(i, out)),
        _ => {}
    }
}

/// `mysql-backup <sub> --flags...` invocations: from `args` directly, or from shell scripts
/// (joining `\` continuations).
fn invocations(container: &Value) -> Vec<Vec<String>> {
    let strings = |key: &str| -> Vec<String> {
        container[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let image = container["image"].as_str().unwrap_or("");
    let mut found = Vec::new();
    if image.contains("mysql-backup") && container["command"].is_null() {
        found.push(strings("args"));
    }
    for script in strings("command").iter().chain(strings("args").iter()) {
        let joined = script.replace("\\\n", " ");
        for line in joined.lines() {
            if let Some(at) = line.find("mysql-backup ") {
                let words = line[at + "mysql-backup ".len()..]
                    .split_whitespace()
                    .map(String::from)
                    .collect();
                found.push(words);
            }
        }
    }
    found
}

fn help(sub: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mysql-backup"))
        .args([sub, "--help"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "`mysql-backup {sub}` is not a subcommand"
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn examples_parse_and_use_real_subcommands_and_flags() {
    let mut used = BTreeSet::new();
    let mut files = 0;
    for entry in std::fs::read_dir(DIR).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        files += 1;
        for doc in documents(&path) {
            assert!(
                doc["kind"].is_string() && doc["apiVersion"].is_string(),
                "{}",
                path.display()
            );
            let mut all = Vec::new();
            containers(&doc, &mut all);
            for c in &all {
                for words in invocations(c) {
                    let sub = words
                        .first()
                        .unwrap_or_else(|| panic!("empty invocation in {}", path.display()))
                        .clone();
                    let help = help(&sub);
                    for flag in words.iter().filter(|w| w.starts_with("--")) {
                        let name = flag.split('=').next().unwrap();
                        assert!(
                            help.contains(&format!("{name} "))
                                || help.contains(&format!("{name}\n")),
                            "{}: `{sub}` has no flag {name}",
                            path.display()
                        );
                    }
                    used.insert(sub);
                }
            }
        }
    }
    assert!(files >= 3, "examples missing in {DIR}");
    let expected: BTreeSet<String> = [
        "clone",
        "configure-replication",
        "prune",
        "pull",
        "restore",
        "serve",
    ]
    .map(String::from)
    .into();
    assert_eq!(used, expected);
}
