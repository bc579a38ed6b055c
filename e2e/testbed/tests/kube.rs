//! The CRDs and examples against a real API server: the test process's own control plane
//! (`e2e/apiserver/up.sh`), or `KUBECONFIG`'s cluster when that is set. All tests share one
//! server and each works in its own namespace.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch};
use kube::api::{PatchParams, PostParams};
use serde_json::{Value, json};
use testbed::kube::KubeTestbed;

const API_VERSION: &str = "etcd.database.coreos.com/v1beta2";

/// The test bed with the CRDs installed.
async fn testbed() -> KubeTestbed {
    let kube = KubeTestbed::start().await.unwrap();
    kube.install_crds().await.unwrap();
    kube
}

fn resource(kind: &str) -> ApiResource {
    let gvk = GroupVersionKind::gvk("etcd.database.coreos.com", "v1beta2", kind);
    ApiResource::from_gvk(&gvk)
}

fn api(kube: &KubeTestbed, ns: &str, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(kube.client.clone(), ns, &resource(kind))
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

fn backup(name: &str, spec: Value) -> DynamicObject {
    object(json!({
        "apiVersion": API_VERSION, "kind": "EtcdBackup",
        "metadata": { "name": name }, "spec": spec,
    }))
}

fn s3_spec() -> Value {
    json!({
        "etcdEndpoints": ["https://etcd-0.example:2379"],
        "storageType": "S3",
        "s3": { "path": "bucket/etcd.backup", "awsSecret": "aws" },
    })
}

/// The API error of a failed call (panics on success or on other errors).
fn api_error<T: std::fmt::Debug>(result: kube::Result<T>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn crds_are_established_with_status_and_columns() {
    let kube = testbed().await;
    // A second call (as every test makes) is harmless.
    kube.install_crds().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(kube.client.clone());
    for (name, kind) in [
        ("etcdbackups.etcd.database.coreos.com", "EtcdBackup"),
        ("etcdrestores.etcd.database.coreos.com", "EtcdRestore"),
        ("etcdclusters.etcd.database.coreos.com", "EtcdCluster"),
    ] {
        let crd = crds.get(name).await.unwrap();
        assert_eq!(crd.spec.names.kind, kind);
        let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True"),
            "{name}: {conditions:?}"
        );
        let version = &crd.spec.versions[0];
        assert!(version.subresources.as_ref().unwrap().status.is_some());
        let columns: Vec<_> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns.last(), Some(&"Age"), "{name}: {columns:?}");
    }
    let backup = crds
        .get("etcdbackups.etcd.database.coreos.com")
        .await
        .unwrap();
    let columns: Vec<_> = backup.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect();
    for expected in ["Storage", "Succeeded", "Ready", "Age"] {
        assert!(columns.iter().any(|c| c == expected), "{columns:?}");
    }
}

/// `examples/coreos/*.yaml` and `examples/*.yaml`.
fn example_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut files = Vec::new();
    for dir in [root.join("coreos"), root] {
        let mut here: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        here.sort();
        files.extend(here);
    }
    files
}

#[tokio::test]
async fn every_example_is_accepted_and_reads_back_unchanged() {
    let kube = testbed().await;
    let mut created = std::collections::BTreeMap::<String, usize>::new();
    let files = example_files();
    assert!(files.len() >= 9, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let what = file.file_name().unwrap().to_string_lossy().into_owned();
        // A namespace per file: coreos's restore and ours share a name.
        let ns = kube.namespace(&format!("example-{what}")).await.unwrap();
        for doc in testbed::yaml_documents(&text).unwrap() {
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            let name = doc["metadata"]["name"].as_str().unwrap().to_string();
            let api: Api<DynamicObject> = match kind.as_str() {
                "EtcdBackup" | "EtcdRestore" | "EtcdCluster" => api(&kube, &ns, &kind),
                "Secret" => Api::namespaced_with(
                    kube.client.clone(),
                    &ns,
                    &ApiResource::erase::<Secret>(&()),
                ),
                _ => continue,
            };
            api.create(&PostParams::default(), &object(doc.clone()))
                .await
                .unwrap_or_else(|e| panic!("{what}: {kind} {name} rejected: {e}"));
            let back = serde_json::to_value(api.get(&name).await.unwrap()).unwrap();
            if kind == "Secret" {
                // stringData is folded into data.
                let keys = |v: &Value| -> Vec<String> {
                    let mut keys: Vec<String> = ["data", "stringData"]
                        .iter()
                        .filter_map(|f| v[f].as_object())
                        .flat_map(|m| m.keys().cloned())
                        .collect();
                    keys.sort();
                    keys
                };
                assert_eq!(keys(&back), keys(&doc), "{what}: {name}");
            } else {
                // Nothing pruned: every field of the example is in the schema.
                assert_eq!(back["spec"], doc["spec"], "{what}: {kind} {name}");
            }
            *created.entry(kind).or_default() += 1;
        }
        kube.delete_namespace(&ns).await.unwrap();
    }
    eprintln!("created and read back: {created:?}");
    for kind in ["EtcdBackup", "EtcdRestore", "EtcdCluster", "Secret"] {
        assert!(created.contains_key(kind), "no {kind} example: {created:?}");
    }
}

#[tokio::test]
async fn invalid_backups_are_rejected_by_the_schema() {
    let kube = testbed().await;
    let ns = kube.namespace("invalid-backups").await.unwrap();
    let backups = api(&kube, &ns, "EtcdBackup");
    let mut missing = s3_spec();
    missing.as_object_mut().unwrap().remove("etcdEndpoints");
    let mut wrong_type = s3_spec();
    wrong_type["etcdEndpoints"] = json!("https://etcd-0.example:2379");
    let mut not_in_enum = s3_spec();
    not_in_enum["storageType"] = json!("FTP");
    let mut empty_list = s3_spec();
    empty_list["etcdEndpoints"] = json!([]);
    let mut negative = s3_spec();
    negative["backupPolicy"] = json!({ "backupIntervalInSecond": -1 });
    let mut bad_s3_path = s3_spec();
    bad_s3_path["s3"]["path"] = json!("no-key");
    for (name, spec, expected) in [
        ("missing", missing, "spec.etcdEndpoints: Required value"),
        (
            "wrong-type",
            wrong_type,
            "spec.etcdEndpoints: Invalid value",
        ),
        (
            "not-in-enum",
            not_in_enum,
            "spec.storageType: Unsupported value",
        ),
        (
            "empty-list",
            empty_list,
            "spec.etcdEndpoints: Invalid value",
        ),
        (
            "negative",
            negative,
            "spec.backupPolicy.backupIntervalInSecond: Invalid value",
        ),
        ("bad-s3-path", bad_s3_path, "spec.s3.path: Invalid value"),
    ] {
        let error = api_error(
            backups
                .create(&PostParams::default(), &backup(name, spec))
                .await,
        );
        assert_eq!((error.code, error.reason.as_str()), (422, "Invalid"));
        assert!(
            error.message.contains(expected),
            "{name}: {expected:?} not in {:?}",
            error.message
        );
    }
    // The wrong type is named in the message.
    let mut wrong_type = s3_spec();
    wrong_type["etcdEndpoints"] = json!("https://etcd-0.example:2379");
    let error = api_error(
        backups
            .create(&PostParams::default(), &backup("wrong-type", wrong_type))
            .await,
    );
    assert!(error.message.contains("must be of type array"), "{error:?}");
    // Nothing was created.
    assert!(
        backups
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    kube.delete_namespace(&ns).await.unwrap();
}

/// A new cluster's version must be MAJOR.MINOR.PATCH: the restore tool and its flags follow it.
#[tokio::test]
async fn a_restore_of_a_new_cluster_with_an_invalid_version_is_rejected() {
    let kube = testbed().await;
    let ns = kube.namespace("invalid-restores").await.unwrap();
    let restores = api(&kube, &ns, "EtcdRestore");
    let restore = |version: &str| {
        object(json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdRestore",
            "metadata": {"name": "c"},
            "spec": {"etcdCluster": {"name": "c"}, "backupStorageType": "S3",
                     "s3": {"path": "bucket/etcd.backup", "awsSecret": "aws"},
                     "newCluster": {"size": 3, "version": version, "storage": "1Gi"}}
        }))
    };
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    for bad in ["3.5", "latest", "3.5.16-rc.1", "03.5.16"] {
        let error = api_error(restores.create(&dry_run, &restore(bad)).await);
        assert_eq!(
            (error.code, error.reason.as_str()),
            (422, "Invalid"),
            "{bad}"
        );
        assert!(
            error
                .message
                .contains("spec.newCluster.version: Invalid value"),
            "{bad}: {:?}",
            error.message
        );
    }
    for good in ["3.5.16", "v3.4.23"] {
        restores.create(&dry_run, &restore(good)).await.unwrap();
    }
    kube.delete_namespace(&ns).await.unwrap();
}

#[tokio::test]
async fn status_subresource_and_printer_columns() {
    let kube = testbed().await;
    let ns = kube.namespace("status").await.unwrap();
    let backups = api(&kube, &ns, "EtcdBackup");
    let created = backups
        .create(&PostParams::default(), &backup("b", s3_spec()))
        .await
        .unwrap();
    let generation = created.metadata.generation;
    // Status through the main resource is ignored...
    let mut with_status = created.clone();
    with_status.data["status"] = json!({ "succeeded": true });
    let replaced = backups
        .replace("b", &PostParams::default(), &with_status)
        .await
        .unwrap();
    assert!(replaced.data.get("status").is_none_or(Value::is_null));
    // ...and set through /status, without a new generation.
    let status = json!({
        "status": {
            "succeeded": true,
            "Reason": "",
            "etcdVersion": "3.4.23",
            "etcdRevision": 42,
            "lastSuccessDate": "2026-01-02T03:04:05Z",
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "Succeeded", "message": "done",
                "lastTransitionTime": "2026-01-02T03:04:05Z",
            }],
        }
    });
    let patched = backups
        .patch_status("b", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    assert_eq!(patched.data["status"], status["status"]);
    assert_eq!(patched.metadata.generation, generation);
    // A spec change through /status is ignored.
    let spec_via_status = json!({ "spec": { "storageType": "Local" } });
    let after = backups
        .patch_status(
            "b",
            &PatchParams::default(),
            &Patch::Merge(&spec_via_status),
        )
        .await
        .unwrap();
    assert_eq!(after.data["spec"]["storageType"], "S3");
    // The printer columns, as `kubectl get etcdbackups` shows them.
    let request = http::Request::get(format!(
        "/apis/etcd.database.coreos.com/v1beta2/namespaces/{ns}/etcdbackups"
    ))
    .header(
        "Accept",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    )
    .body(Vec::new())
    .unwrap();
    let table: Value = kube.client.request(request).await.unwrap();
    assert_eq!(table["kind"], "Table", "{table}");
    let names: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    let cell = |column: &str| {
        let i = names.iter().position(|n| *n == column).unwrap();
        table["rows"][0]["cells"][i].clone()
    };
    assert_eq!(cell("Name"), "b", "{names:?}");
    assert_eq!(cell("Storage"), "S3");
    assert_eq!(cell("Succeeded"), true);
    assert_eq!(cell("Ready"), "True");
    // Reason is for `-o wide` only.
    let reason = &table["columnDefinitions"][names.iter().position(|n| *n == "Reason").unwrap()];
    assert_eq!(reason["priority"], 1, "{reason}");
    kube.delete_namespace(&ns).await.unwrap();
}

/// kube-controller-manager runs: owner references on custom resources are garbage collected.
#[tokio::test]
async fn dependents_of_a_deleted_backup_are_garbage_collected() {
    let kube = testbed().await;
    let ns = kube.namespace("gc").await.unwrap();
    let backups = api(&kube, &ns, "EtcdBackup");
    let owner = backups
        .create(&PostParams::default(), &backup("owner", s3_spec()))
        .await
        .unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(kube.client.clone(), &ns);
    let dependent: ConfigMap = serde_json::from_value(json!({
        "metadata": {
            "name": "dependent",
            "ownerReferences": [{
                "apiVersion": API_VERSION, "kind": "EtcdBackup", "name": "owner",
                "uid": owner.metadata.uid.unwrap(),
            }],
        },
    }))
    .unwrap();
    config_maps
        .create(&PostParams::default(), &dependent)
        .await
        .unwrap();
    backups
        .delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    for _ in 0..600 {
        if config_maps.get_opt("dependent").await.unwrap().is_none() {
            kube.delete_namespace(&ns).await.unwrap();
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the dependent ConfigMap was not garbage collected within 60 s");
}

#[tokio::test]
async fn namespaces_are_fresh() {
    let kube = KubeTestbed::start().await.unwrap();
    let a = kube.namespace("Same_Prefix").await.unwrap();
    let b = kube.namespace("Same_Prefix").await.unwrap();
    assert_ne!(a, b);
    assert!(a.starts_with("same-prefix-"), "{a}");
    assert!(kube.kubeconfig.is_file());
    for ns in [a, b] {
        kube.delete_namespace(&ns).await.unwrap();
    }
}
