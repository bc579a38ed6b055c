//! The committed YAML form of the CRDs (`crds/*.yaml`): generated from the API types, with a
//! drift test (`tests/drift.rs`). Apart from `etcd-api` so that crate stays types-only.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

const HEADER: &str = "# Generated from crates/etcd-api by `cargo run -p crdgen`. Do not edit.\n";

/// The committed YAML form: a header comment, then keys in sorted order whatever serde_json's
/// `preserve_order` feature says, so the output is stable.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> String {
    let value = sorted(serde_json::to_value(crd).expect("a CRD serializes to JSON"));
    HEADER.to_string() + &serde_saphyr::to_string(&value).expect("JSON values serialize to YAML")
}

/// `(file name, YAML)` for every CRD, e.g. `("etcdbackups.yaml", ...)`.
pub fn crd_files() -> Vec<(String, String)> {
    etcd_api::crds()
        .iter()
        .map(|crd| (format!("{}.yaml", crd.spec.names.plural), crd_yaml(crd)))
        .collect()
}

fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}
