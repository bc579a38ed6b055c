//! The reference pages document every field of the CRDs, and no field the CRDs no longer have.
//!
//! Each kind's page (`docs/reference/<operator>.md`) has a section `## Fields` whose tables have
//! one row per field, the path in the first column: `` | `spec.backupPolicy.timeoutInSecond` |
//! type | meaning | ``. Paths are written from the object's root: `.` between a field and its
//! fields, `[]` for each item of a list (`status.conditions[].reason`), `.*` for each value of a
//! map whose values have fields. Fields whose value is a Kubernetes API type (an `Affinity`, a
//! `PersistentVolumeClaimSpec`, ...) are documented as a whole, not field by field: they are
//! listed in [`KUBERNETES_TYPES`] and not walked into.
//!
//! The walk reads the committed `crds/*.yaml` (the drift test keeps them equal to the types).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The reference page of each kind.
const PAGES: [(&str, &str); 3] = [
    ("EtcdCluster", "etcd-operator.md"),
    ("EtcdBackup", "etcd-backup-operator.md"),
    ("EtcdRestore", "etcd-restore-operator.md"),
];

/// `(kind, path)` of the fields whose value is a Kubernetes API type: one row each, with the
/// type named, and nothing below them.
const KUBERNETES_TYPES: &[(&str, &str)] = &[
    ("EtcdCluster", "spec.pod.affinity"),
    ("EtcdCluster", "spec.pod.resources"),
    ("EtcdCluster", "spec.pod.tolerations"),
    ("EtcdCluster", "spec.pod.topologySpreadConstraints"),
    ("EtcdCluster", "spec.pod.etcdEnv"),
    ("EtcdCluster", "spec.pod.persistentVolumeClaimSpec"),
    ("EtcdCluster", "spec.pod.securityContext"),
    ("EtcdBackup", "spec.drill.resources"),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `kind -> openAPIV3Schema` of every CRD in `crds/`.
fn crd_schemas() -> BTreeMap<String, Value> {
    let dir = root().join("crds");
    let mut schemas = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let doc: Value = serde_saphyr::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()));
        if doc["kind"] != "CustomResourceDefinition" {
            continue;
        }
        let kind = doc["spec"]["names"]["kind"].as_str().unwrap().to_string();
        let versions = doc["spec"]["versions"].as_array().unwrap();
        assert_eq!(versions.len(), 1, "{kind}: one version expected");
        let schema = versions[0]["schema"]["openAPIV3Schema"].clone();
        schemas.insert(kind, schema);
    }
    schemas
}

/// A field of a CRD: its path, and a row a page could start from.
struct Field {
    path: String,
    kind_of_value: String,
    description: String,
}

/// Every field under `spec` and `status`.
fn fields(kind: &str, schema: &Value) -> Vec<Field> {
    let stop: BTreeSet<&str> = KUBERNETES_TYPES
        .iter()
        .filter(|(k, _)| *k == kind)
        .map(|(_, p)| *p)
        .collect();
    let mut out = Vec::new();
    for top in ["spec", "status"] {
        let sub = &schema["properties"][top];
        assert!(sub.is_object(), "{kind}: no {top} in the schema");
        descend(sub, top, &stop, &mut out);
    }
    out
}

/// The fields below the value at `path`.
fn descend(schema: &Value, path: &str, stop: &BTreeSet<&str>, out: &mut Vec<Field>) {
    if let Some(properties) = schema["properties"].as_object() {
        for (name, sub) in properties {
            let here = format!("{path}.{name}");
            out.push(Field {
                path: here.clone(),
                kind_of_value: kind_of_value(sub),
                description: sub["description"]
                    .as_str()
                    .unwrap_or("")
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
            });
            if !stop.contains(here.as_str()) {
                descend(sub, &here, stop, out);
            }
        }
    }
    if schema["items"].is_object() {
        descend(&schema["items"], &format!("{path}[]"), stop, out);
    }
    if schema["additionalProperties"]["properties"].is_object() {
        descend(
            &schema["additionalProperties"],
            &format!("{path}.*"),
            stop,
            out,
        );
    }
}

/// What a value is, for a suggested row: `integer`, `list of string`, `` `Retain` | `Delete` ``.
fn kind_of_value(schema: &Value) -> String {
    if let Some(values) = schema["enum"].as_array() {
        let values: Vec<String> = values
            .iter()
            .map(|v| format!("`{}`", v.as_str().unwrap_or_default()))
            .collect();
        return values.join(" \\| ");
    }
    if schema["x-kubernetes-int-or-string"] == true {
        return "integer or string".into();
    }
    match schema["type"].as_str() {
        Some("array") => format!("list of {}", kind_of_value(&schema["items"])),
        Some("object") if schema["additionalProperties"].is_object() => format!(
            "map of string to {}",
            kind_of_value(&schema["additionalProperties"])
        ),
        Some("string") if schema["format"] == "date-time" => "time (RFC 3339)".into(),
        Some(t) => t.to_string(),
        None => "any".into(),
    }
}

/// The paths in the first column of the tables in the page's `## Fields` section.
fn documented(page: &str) -> Vec<String> {
    let mut inside = false;
    let mut paths = Vec::new();
    for line in page.lines() {
        if line.starts_with("## ") {
            inside = line.trim() == "## Fields";
            continue;
        }
        if !inside {
            continue;
        }
        let Some(row) = line.trim().strip_prefix('|') else {
            continue;
        };
        let first = row.split('|').next().unwrap_or("").trim();
        if let Some(code) = first.strip_prefix('`').and_then(|c| c.split('`').next()) {
            paths.push(code.to_string());
        }
    }
    paths
}

fn check(kind: &str) {
    let schemas = crd_schemas();
    let schema = schemas
        .get(kind)
        .unwrap_or_else(|| panic!("no CRD of kind {kind} in crds/"));
    let page_name = PAGES.iter().find(|(k, _)| *k == kind).unwrap().1;
    let page_path = root().join("docs/reference").join(page_name);
    let page = std::fs::read_to_string(&page_path)
        .unwrap_or_else(|e| panic!("{}: {e}", page_path.display()));
    let fields = fields(kind, schema);
    let in_crd: BTreeSet<&str> = fields.iter().map(|f| f.path.as_str()).collect();
    let documented = documented(&page);
    let in_page: BTreeSet<&str> = documented.iter().map(String::as_str).collect();

    let mut problems = Vec::new();
    if documented.is_empty() {
        problems.push(format!(
            "docs/reference/{page_name} has no `## Fields` section with a table of paths"
        ));
    }
    let missing: Vec<&Field> = fields
        .iter()
        .filter(|f| !in_page.contains(f.path.as_str()))
        .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "{} field(s) of the {kind} CRD are not in the Fields tables of docs/reference/{page_name} \
             (rows to start from, with the CRD's type and description):\n{}",
            missing.len(),
            missing
                .iter()
                .map(|f| format!("| `{}` | {} | {} |", f.path, f.kind_of_value, f.description))
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    let stale: Vec<&str> = in_page.difference(&in_crd).copied().collect();
    if !stale.is_empty() {
        problems.push(format!(
            "{} path(s) in the Fields tables of docs/reference/{page_name} are not fields of the \
             {kind} CRD (removed or renamed: take them out of the page; a field inside a \
             Kubernetes type is documented by Kubernetes):\n{}",
            stale.len(),
            stale.join("\n")
        ));
    }
    let mut seen = BTreeSet::new();
    let twice: Vec<&str> = documented
        .iter()
        .map(String::as_str)
        .filter(|p| !seen.insert(*p))
        .collect();
    if !twice.is_empty() {
        problems.push(format!(
            "documented more than once in docs/reference/{page_name}: {}",
            twice.join(", ")
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn etcdcluster_fields_are_documented() {
    check("EtcdCluster");
}

#[test]
fn etcdbackup_fields_are_documented() {
    check("EtcdBackup");
}

#[test]
fn etcdrestore_fields_are_documented() {
    check("EtcdRestore");
}

/// Every CRD has a page, and every field listed as a Kubernetes type still is one.
#[test]
fn every_kind_has_a_page_and_the_kubernetes_types_exist() {
    let schemas = crd_schemas();
    let kinds: BTreeSet<&str> = schemas.keys().map(String::as_str).collect();
    let paged: BTreeSet<&str> = PAGES.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        kinds, paged,
        "crds/ and the reference pages differ in kinds"
    );
    for (kind, path) in KUBERNETES_TYPES {
        let fields = fields(kind, &schemas[*kind]);
        assert!(
            fields.iter().any(|f| f.path == *path),
            "KUBERNETES_TYPES lists {kind} {path}, which the CRD no longer has"
        );
    }
}
