//! Every CEL rule of the CRDs (`x-kubernetes-validations` in `crds/*.yaml`), evaluated by a real
//! API server: for each rule a manifest that breaks it is refused with the rule's message, and
//! the same manifest made valid is accepted. A rule added to the CRDs without a case here fails
//! `every_rule_has_a_case`.

use std::collections::BTreeSet;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};
use testbed::kube::KubeTestbed;

const API_VERSION: &str = "etcd.database.coreos.com/v1beta2";
const CRDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../crds");

/// One rule's case: the kind, a valid object, and the change that breaks the rule.
struct Case {
    message: &'static str,
    kind: &'static str,
    valid: Value,
    broken: Value,
}

fn object(kind: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec})
}

fn backup(storage: &str, block: Option<(&str, Value)>) -> Value {
    let mut spec = json!({"etcdEndpoints": ["http://etcd-client:2379"], "storageType": storage});
    if let Some((key, value)) = block {
        spec[key] = value;
    }
    object("EtcdBackup", "b", spec)
}

fn restore(name: &str, storage: &str, block: Option<(&str, Value)>) -> Value {
    let mut spec = json!({"etcdCluster": {"name": name}, "backupStorageType": storage});
    if let Some((key, value)) = block {
        spec[key] = value;
    }
    object("EtcdRestore", name, spec)
}

fn cases() -> Vec<Case> {
    let s3 = || {
        (
            "s3",
            json!({"path": "bucket/etcd.backup", "awsSecret": "aws"}),
        )
    };
    let abs = || {
        (
            "abs",
            json!({"path": "container/etcd.backup", "absSecret": "abs"}),
        )
    };
    let gcs = || {
        (
            "gcs",
            json!({"path": "bucket/etcd.backup", "gcpSecret": "gcp"}),
        )
    };
    let oss = || {
        (
            "oss",
            json!({"path": "bucket/etcd.backup", "ossSecret": "oss"}),
        )
    };
    let local = |path: &str| ("local", json!({"path": path}));
    let mut cases = Vec::new();
    for (storage, block, message) in [
        ("S3", s3(), "storageType S3 requires the s3 block"),
        ("ABS", abs(), "storageType ABS requires the abs block"),
        ("GCS", gcs(), "storageType GCS requires the gcs block"),
        ("OSS", oss(), "storageType OSS requires the oss block"),
        (
            "Local",
            local("/backups/etcd.backup"),
            "storageType Local requires the local block",
        ),
    ] {
        cases.push(Case {
            message,
            kind: "EtcdBackup",
            valid: backup(storage, Some(block)),
            broken: backup(storage, None),
        });
    }
    let mut valid = backup("S3", Some(s3()));
    valid["spec"]["backupPolicy"] = json!({"schedule": "*/5 * * * *", "backupIntervalInSecond": 0});
    let mut broken = valid.clone();
    broken["spec"]["backupPolicy"]["backupIntervalInSecond"] = json!(60);
    cases.push(Case {
        message: "set either schedule or a non-zero backupIntervalInSecond, not both",
        kind: "EtcdBackup",
        valid,
        broken,
    });
    cases.push(Case {
        message: "local.path must be absolute unless local.persistentVolumeClaim is set",
        kind: "EtcdBackup",
        valid: backup(
            "Local",
            Some((
                "local",
                json!({"path": "etcd/etcd.backup", "persistentVolumeClaim": "backups"}),
            )),
        ),
        broken: backup("Local", Some(local("etcd/etcd.backup"))),
    });

    // s3.serverSideEncryption, on both kinds.
    let sse = |sse: Value| {
        let mut block = s3();
        block.1["serverSideEncryption"] = sse;
        block
    };
    let key = json!({"name": "sse-c-key", "key": "key"});
    for (message, valid, broken) in [
        (
            "customerKeySecret is required with mode SSE-C and only then",
            json!({"mode": "SSE-C", "customerKeySecret": key}),
            json!({"mode": "SSE-C"}),
        ),
        (
            "customerKeySecret is required with mode SSE-C and only then",
            json!({"mode": "AES256"}),
            json!({"mode": "AES256", "customerKeySecret": key}),
        ),
        (
            "kmsKeyId needs mode aws:kms",
            json!({"mode": "aws:kms", "kmsKeyId": "backup-key"}),
            json!({"mode": "AES256", "kmsKeyId": "backup-key"}),
        ),
    ] {
        cases.push(Case {
            message,
            kind: "EtcdBackup",
            valid: backup("S3", Some(sse(valid.clone()))),
            broken: backup("S3", Some(sse(broken.clone()))),
        });
        cases.push(Case {
            message,
            kind: "EtcdRestore",
            valid: restore("r", "S3", Some(sse(valid))),
            broken: restore("r", "S3", Some(sse(broken))),
        });
    }

    // spec.drill.
    let with_drill = |storage: &str, block, drill: Value, encrypted: bool| {
        let mut b = backup(storage, Some(block));
        b["spec"]["drill"] = drill;
        if encrypted {
            b["spec"]["encryption"] = json!({"recipientsSecret": {"name": "r", "key": "k"}});
        }
        b
    };
    cases.push(Case {
        message: "set either everyBackups or schedule, not both",
        kind: "EtcdBackup",
        valid: with_drill("S3", s3(), json!({"everyBackups": 2}), false),
        broken: with_drill(
            "S3",
            s3(),
            json!({"everyBackups": 2, "schedule": "0 4 * * *"}),
            false,
        ),
    });
    cases.push(Case {
        message: "drills restore S3, GCS, ABS and Local backups only",
        kind: "EtcdBackup",
        valid: with_drill("ABS", abs(), json!({}), false),
        broken: with_drill("OSS", oss(), json!({}), false),
    });
    cases.push(Case {
        message: "encrypted backups are drilled with a private key: set drill.identitySecret",
        kind: "EtcdBackup",
        valid: with_drill(
            "S3",
            s3(),
            json!({"identitySecret": {"name": "drill-key", "key": "identity.txt"}}),
            true,
        ),
        broken: with_drill("S3", s3(), json!({}), true),
    });

    // spec.continuous.
    let continuous = |storage: &str, block, policy: Value| {
        let mut b = backup(storage, Some(block));
        b["spec"]["continuous"] = json!({"segmentSeconds": 30});
        b["spec"]["backupPolicy"] = policy;
        b
    };
    cases.push(Case {
        message: "the continuous archive writes to S3, GCS, ABS or Local storage only",
        kind: "EtcdBackup",
        valid: continuous("ABS", abs(), json!({"schedule": "@hourly"})),
        broken: continuous("OSS", oss(), json!({"schedule": "@hourly"})),
    });
    cases.push(Case {
        message: "the continuous archive replays changes onto scheduled backups: set backupPolicy.schedule or backupIntervalInSecond",
        kind: "EtcdBackup",
        valid: continuous("S3", s3(), json!({"backupIntervalInSecond": 600})),
        broken: continuous("S3", s3(), json!({"backupIntervalInSecond": 0})),
    });

    let compaction = |retention: &str| {
        object(
            "EtcdCluster",
            "c",
            json!({"size": 3, "autoCompaction": {"mode": "revision", "retention": retention}}),
        )
    };
    cases.push(Case {
        message: "with mode revision, retention is a number of revisions",
        kind: "EtcdCluster",
        valid: compaction("10000"),
        broken: compaction("1h"),
    });

    let static_tls = |operator: bool| {
        let mut tls = json!({"member": {"peerSecret": "peer", "serverSecret": "server"}});
        if operator {
            tls["operatorSecret"] = json!("operator");
        }
        object(
            "EtcdCluster",
            "c",
            json!({"size": 3, "TLS": {"static": tls}}),
        )
    };
    cases.push(Case {
        message: "operatorSecret and member.serverSecret must be set together",
        kind: "EtcdCluster",
        valid: static_tls(true),
        broken: static_tls(false),
    });

    let mut broken = restore("r", "S3", Some(s3()));
    broken["spec"]["etcdCluster"]["name"] = json!("other");
    cases.push(Case {
        message: "metadata.name must equal spec.etcdCluster.name",
        kind: "EtcdRestore",
        valid: restore("r", "S3", Some(s3())),
        broken,
    });
    for (storage, block, message) in [
        (
            "S3",
            s3(),
            "backupStorageType S3 requires the s3 block (or backupRef, or fromSurvivor)",
        ),
        (
            "ABS",
            abs(),
            "backupStorageType ABS requires the abs block (or backupRef)",
        ),
        (
            "GCS",
            gcs(),
            "backupStorageType GCS requires the gcs block (or backupRef)",
        ),
        ("OSS", oss(), "backupStorageType OSS requires the oss block"),
        (
            "Local",
            local("/backups/etcd.backup"),
            "backupStorageType Local requires the local block (or backupRef)",
        ),
    ] {
        cases.push(Case {
            message,
            kind: "EtcdRestore",
            valid: restore("r", storage, Some(block)),
            broken: restore("r", storage, None),
        });
    }
    cases.push(Case {
        message: "local.path must be absolute unless local.persistentVolumeClaim is set",
        kind: "EtcdRestore",
        valid: restore("r", "Local", Some(local("/backups/etcd.backup"))),
        broken: restore("r", "Local", Some(local("etcd.backup"))),
    });
    let survivor = |with_s3: bool| {
        let mut r = restore("r", "S3", with_s3.then(s3));
        r["spec"]["fromSurvivor"] = json!({});
        r
    };
    cases.push(Case {
        message: "fromSurvivor takes the data from a member of the cluster: it excludes s3, local, backupRef and decryption",
        kind: "EtcdRestore",
        valid: survivor(false),
        broken: survivor(true),
    });
    let to_a_point = |backup_ref: bool, point: Value| {
        let mut r = restore("r", "S3", None);
        if backup_ref {
            r["spec"]["backupRef"] = json!({"name": "nightly"});
        }
        r["spec"]["pointInTime"] = point;
        r
    };
    cases.push(Case {
        message: "pointInTime replays an EtcdBackup's continuous archive: name it in backupRef",
        kind: "EtcdRestore",
        valid: to_a_point(true, json!({"revision": 41})),
        broken: to_a_point(false, json!({"revision": 41})),
    });
    cases.push(Case {
        message: "pointInTime names a revision or a time, exactly one",
        kind: "EtcdRestore",
        valid: to_a_point(true, json!({"time": "2026-11-29T03:12:00Z"})),
        broken: to_a_point(
            true,
            json!({"revision": 41, "time": "2026-11-29T03:12:00Z"}),
        ),
    });
    let quorum_loss =
        |policy: Value| object("EtcdCluster", "c", json!({"size": 3, "quorumLoss": policy}));
    cases.push(Case {
        message: "recovery FromBackup needs backupRef.name",
        kind: "EtcdCluster",
        valid: quorum_loss(json!({"recovery": "FromBackup", "backupRef": {"name": "nightly"}})),
        broken: quorum_loss(json!({"recovery": "FromBackup"})),
    });
    // Not a CEL rule but the schema's pattern: a new cluster of a minor the operators do not
    // run is refused at once.
    let new_cluster = |version: &str| {
        let mut r = restore("r", "S3", Some(s3()));
        r["spec"]["newCluster"] = json!({"size": 1, "version": version, "storage": "64Mi"});
        r
    };
    cases.push(Case {
        message: "spec.newCluster.version in body should match",
        kind: "EtcdRestore",
        valid: new_cluster("3.7.3"),
        broken: new_cluster("3.8.0"),
    });
    cases
}

/// Every rule's message in the committed CRDs, with its CRD's kind.
fn rules_in_crds() -> BTreeSet<(String, String)> {
    fn walk(node: &Value, kind: &str, found: &mut BTreeSet<(String, String)>) {
        match node {
            Value::Object(map) => {
                for rule in map
                    .get("x-kubernetes-validations")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let message = rule["message"].as_str().expect("every rule has a message");
                    found.insert((kind.to_string(), message.to_string()));
                }
                map.values().for_each(|v| walk(v, kind, found));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, kind, found)),
            _ => {}
        }
    }
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir(CRDS).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let crd: Value = serde_saphyr::from_str(&text).unwrap();
        if crd["kind"] != "CustomResourceDefinition" {
            continue;
        }
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap().to_string();
        walk(&crd, &kind, &mut found);
    }
    found
}

/// The immutability rule has no create-time case: it is checked on an update.
const IMMUTABLE: &str = "spec is immutable; create a new EtcdRestore";
/// Cases of schema patterns, not CEL rules.
const PATTERNS: [&str; 1] = ["spec.newCluster.version in body should match"];

#[test]
fn every_rule_has_a_case() {
    let mut covered: BTreeSet<(String, String)> = cases()
        .iter()
        .filter(|c| !PATTERNS.contains(&c.message))
        .map(|c| (c.kind.to_string(), c.message.to_string()))
        .collect();
    covered.insert(("EtcdRestore".into(), IMMUTABLE.into()));
    assert_eq!(rules_in_crds(), covered);
}

fn api(kube: &KubeTestbed, ns: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("etcd.database.coreos.com", "v1beta2", kind);
    Api::namespaced_with(kube.client.clone(), ns, &ApiResource::from_gvk(&gvk))
}

#[tokio::test]
async fn the_api_server_refuses_each_broken_rule_with_its_message() {
    let kube = KubeTestbed::start().await.unwrap();
    kube.install_crds().await.unwrap();
    let ns = kube.namespace("cel").await.unwrap();
    for case in cases() {
        let objects = api(&kube, &ns, case.kind);
        let broken: DynamicObject = serde_json::from_value(case.broken.clone()).unwrap();
        match objects.create(&PostParams::default(), &broken).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{}: {status:?}", case.message);
                assert!(
                    status.message.contains(case.message),
                    "{:?} not in {:?}",
                    case.message,
                    status.message
                );
            }
            other => panic!(
                "{}: the broken object was not refused: {other:?}",
                case.message
            ),
        }
        // The same object, valid, is accepted (so the refusal was that rule's).
        let valid: DynamicObject = serde_json::from_value(case.valid.clone()).unwrap();
        let name = valid.metadata.name.clone().unwrap();
        objects
            .create(&PostParams::default(), &valid)
            .await
            .unwrap_or_else(|e| panic!("{}: the valid object was refused: {e}", case.message));
        objects
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
    }

    // An EtcdRestore's spec cannot change once created.
    let restores = api(&kube, &ns, "EtcdRestore");
    let created = restore(
        "fixed",
        "S3",
        Some(("s3", json!({"path": "b/etcd.backup", "awsSecret": "aws"}))),
    );
    let created: DynamicObject = serde_json::from_value(created).unwrap();
    restores
        .create(&PostParams::default(), &created)
        .await
        .unwrap();
    let change = json!({"spec": {"s3": {"path": "b/other.backup"}}});
    match restores
        .patch("fixed", &PatchParams::default(), &Patch::Merge(&change))
        .await
    {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(status.message.contains(IMMUTABLE), "{:?}", status.message);
        }
        other => panic!("the spec change was not refused: {other:?}"),
    }
    kube.delete_namespace(&ns).await.unwrap();
}
