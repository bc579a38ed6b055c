//! Every manifest under `examples/` parses into the API types without losing a field, passes
//! the controllers' `validate()` and the CRDs' CEL rules.

use std::path::{Path, PathBuf};

use etcd_api::{EtcdBackup, EtcdCluster, EtcdRestore, client_tls, crds, storage};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            // examples/mysql holds Kubernetes workloads for the MySQL runner; its own
            // crate's tests check them (jobs/mysql-backup/tests/examples.rs).
            // examples/cronjob likewise (jobs/etcd-backup/tests/cronjob.rs runs it).
            if path
                .file_name()
                .is_some_and(|n| n == "mysql" || n == "cronjob")
            {
                continue;
            }
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

/// Parses `doc` as `T` and checks that serializing it gives back the same JSON.
fn round_trip<T: DeserializeOwned + Serialize>(doc: &Value, what: &str) -> T {
    let typed: T = serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(&back, doc, "{what}: a field was dropped or rewritten");
    typed
}

fn check_cel(kind: &str, doc: &Value, what: &str) {
    let crd = crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap();
    let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
    let result = kube_cel::Validator::new().validate(&schema["openAPIV3Schema"], doc, None);
    assert!(result.is_ok(), "{what}: CEL rules reject it: {result:?}");
}

/// The Secret formats coreos and this API define, and age recipients.
fn check_secret(secret: &Secret, what: &str) {
    let keys: Vec<&str> = secret
        .string_data
        .iter()
        .flat_map(|m| m.keys())
        .chain(secret.data.iter().flat_map(|m| m.keys()))
        .map(String::as_str)
        .collect();
    let formats: [&[&str]; 3] = [
        &[
            storage::AWS_SECRET_CREDENTIALS_KEY,
            storage::AWS_SECRET_CONFIG_KEY,
        ],
        &[
            client_tls::CERT_KEY,
            client_tls::KEY_KEY,
            client_tls::CA_KEY,
        ],
        &[storage::CA_SECRET_KEY],
    ];
    // `encryption.recipientsSecret`: one key holding age public keys (the key's name is the
    // user's choice).
    let age_recipients = || {
        let values: Vec<&String> = secret.string_data.iter().flat_map(|m| m.values()).collect();
        values.len() == 1
            && values[0]
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .all(|l| l.starts_with("age1") && !l.contains(char::is_whitespace))
    };
    assert!(
        formats
            .iter()
            .any(|f| f.len() == keys.len() && f.iter().all(|k| keys.contains(k)))
            || age_recipients(),
        "{what}: keys {keys:?} match no known Secret format"
    );
}

#[test]
fn every_example_parses_strictly() {
    let mut files = Vec::new();
    yaml_files(&examples_dir(), &mut files);
    assert!(files.len() >= 8, "examples/ has only {} files", files.len());
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut recognised = 0;
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{}: invalid YAML: {e}", file.display()));
        for (i, doc) in docs.into_iter().enumerate() {
            if doc.is_null() {
                continue;
            }
            let what = format!("{} document {}", file.display(), i + 1);
            let kind = doc["kind"].as_str().unwrap_or_default();
            match (doc["apiVersion"].as_str().unwrap_or_default(), kind) {
                (etcd_api::API_VERSION, "EtcdBackup") => {
                    let b: EtcdBackup = round_trip(&doc, &what);
                    b.spec.validate().unwrap_or_else(|e| panic!("{what}: {e}"));
                }
                (etcd_api::API_VERSION, "EtcdRestore") => {
                    let r: EtcdRestore = round_trip(&doc, &what);
                    r.spec
                        .validate(&r.name_any())
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                }
                (etcd_api::API_VERSION, "EtcdCluster") => {
                    round_trip::<EtcdCluster>(&doc, &what);
                }
                ("v1", "Secret") => {
                    check_secret(&round_trip::<Secret>(&doc, &what), &what);
                    recognised += 1;
                    continue;
                }
                (api, _) if api.starts_with(etcd_api::GROUP) => {
                    panic!("{what}: unknown {api} {kind}")
                }
                _ => continue,
            }
            check_cel(kind, &doc, &what);
            recognised += 1;
        }
        assert!(
            recognised > 0,
            "{}: no EtcdBackup/EtcdRestore/EtcdCluster/Secret",
            file.display()
        );
    }
}
