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
        "archive-binlogs",
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

/// The pod specs of a document (a StatefulSet's or Job's template, a CronJob's job template).
fn pod_specs(doc: &Value) -> Vec<&Value> {
    [
        &doc["spec"]["template"]["spec"],
        &doc["spec"]["jobTemplate"]["spec"]["template"]["spec"],
    ]
    .into_iter()
    .filter(|s| s.is_object())
    .collect()
}

/// What each container of the examples needs of the Secret `mysql-backup`, and nothing more.
fn needs(container: &str) -> BTreeSet<&'static str> {
    let keys: &[&str] = match container {
        "clone" | "pull" => &["token"],
        "backup" => &[
            "token",
            "backup-user",
            "backup-password",
            "replication-user",
            "replication-password",
        ],
        // The server: root's password, and the accounts its first start makes.
        "mysql" => &[
            "root-password",
            "backup-user",
            "backup-password",
            "replication-user",
            "replication-password",
        ],
        _ => &[],
    };
    keys.iter().copied().collect()
}

/// Issue "review findings" item 7: passwords come from the Secret as files only, each container
/// gets only the keys it needs, and no value of the Secret is written anywhere else.
#[test]
fn the_examples_keep_the_mysql_secrets_secret() {
    let docs: Vec<Value> = std::fs::read_dir(DIR)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .flat_map(|p| documents(&p))
        .collect();
    let secret = docs
        .iter()
        .find(|d| d["kind"] == "Secret" && d["metadata"]["name"] == "mysql-backup")
        .expect("the Secret mysql-backup");
    let secret_values: Vec<&str> = secret["stringData"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| !k.ends_with("-user"))
        .filter_map(|(_, v)| v.as_str())
        .collect();
    // No password, nor the token, in a ConfigMap (or anywhere but the Secret).
    for doc in docs.iter().filter(|d| d["kind"] != "Secret") {
        let text = doc.to_string();
        for value in &secret_values {
            assert!(
                !text.contains(value),
                "{} {} holds a value of the Secret",
                doc["kind"],
                doc["metadata"]["name"]
            );
        }
    }
    let mut checked = 0;
    for spec in docs.iter().flat_map(pod_specs) {
        // The keys each volume of the Secret brings: always listed (`items`), never all.
        let mut volumes = std::collections::BTreeMap::new();
        for volume in spec["volumes"].as_array().into_iter().flatten() {
            if volume["secret"]["secretName"] != "mysql-backup" {
                continue;
            }
            let items = volume["secret"]["items"]
                .as_array()
                .unwrap_or_else(|| panic!("volume {} mounts the whole Secret", volume["name"]));
            let keys: BTreeSet<String> = items
                .iter()
                .map(|i| i["key"].as_str().unwrap().to_string())
                .collect();
            volumes.insert(volume["name"].as_str().unwrap().to_string(), keys);
        }
        let mut all = Vec::new();
        containers(spec, &mut all);
        for container in &all {
            let name = container["name"].as_str().unwrap();
            let mut got: BTreeSet<String> = BTreeSet::new();
            for mount in container["volumeMounts"].as_array().into_iter().flatten() {
                if let Some(keys) = volumes.get(mount["name"].as_str().unwrap()) {
                    got.extend(keys.iter().cloned());
                }
            }
            // From the environment: user names only, never a password or the token.
            for env in container["env"].as_array().into_iter().flatten() {
                let from = &env["valueFrom"]["secretKeyRef"];
                if from["name"] == "mysql-backup" {
                    let key = from["key"].as_str().unwrap();
                    assert!(key.ends_with("-user"), "{name}: {key} in the environment");
                    got.insert(key.to_string());
                }
            }
            let wanted = needs(name);
            let extra: Vec<&String> = got
                .iter()
                .filter(|k| !wanted.contains(k.as_str()))
                .collect();
            assert!(extra.is_empty(), "{name} gets {extra:?} it does not need");
            checked += 1;
        }
    }
    assert!(checked >= 6, "only {checked} containers checked");
}
