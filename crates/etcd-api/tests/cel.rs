//! The CRDs' CEL rules, evaluated offline with kube-cel: they compile, fit the cost budget, accept
//! good objects and reject bad ones with the intended message.

use etcd_api::crds;
use kube_cel::{CompiledSchema, ScopeContext, Validator, analyze_rule, compile_schema};
use serde_json::{Value, json};

fn schema(kind: &str) -> Value {
    let crd = crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap();
    serde_json::to_value(&crd.spec.versions[0].schema).unwrap()["openAPIV3Schema"].clone()
}

/// `Ok` or the failure messages.
fn check(kind: &str, obj: &Value, old: Option<&Value>) -> Result<(), Vec<String>> {
    Validator::new()
        .validate(&schema(kind), obj, old)
        .map_err(|errs| errs.iter().map(|e| e.message.clone()).collect())
}

fn assert_rejected(kind: &str, obj: &Value, old: Option<&Value>, expected: &str) {
    match check(kind, obj, old) {
        Ok(()) => panic!("{kind} accepted, expected {expected:?}: {obj}"),
        Err(msgs) => assert!(
            msgs.iter().any(|m| m.contains(expected)),
            "{kind}: expected {expected:?}, got {msgs:?}"
        ),
    }
}

fn backup(spec: Value) -> Value {
    json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
           "metadata": {"name": "b"}, "spec": spec})
}

fn restore(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdRestore",
           "metadata": {"name": name}, "spec": spec})
}

/// Collects kube-cel's static-analysis warnings (scope and cost). Note: kube-cel 0.8 reports
/// comprehension variables (`all(e, ...)`) as out of scope; none of our rules use one.
fn rules(node: &CompiledSchema, out: &mut Vec<(String, String)>, scope: &CompiledSchema) {
    for v in &node.validations {
        let compiled = v
            .as_ref()
            .unwrap_or_else(|e| panic!("rule does not compile: {e:?}"));
        for w in analyze_rule(&compiled.rule.rule, scope, ScopeContext::CrdValidation) {
            out.push((compiled.rule.rule.clone(), w.message));
        }
    }
    let children = node
        .properties
        .values()
        .chain(node.items.as_deref())
        .chain(node.additional_properties.as_deref());
    for child in children {
        rules(child, out, child);
    }
}

#[test]
fn rules_compile_and_fit_the_cost_budget() {
    for kind in ["EtcdBackup", "EtcdRestore", "EtcdCluster"] {
        let compiled = compile_schema(&schema(kind));
        let mut warnings = Vec::new();
        rules(&compiled, &mut warnings, &compiled);
        assert!(warnings.is_empty(), "{kind}: {warnings:#?}");
    }
}

#[test]
fn backup_storage_block_must_match_storage_type() {
    let s3 = json!({"path": "mybucket/etcd.backup", "awsSecret": "aws"});
    let ok = backup(json!({"etcdEndpoints": ["http://e:2379"], "storageType": "S3", "s3": s3}));
    assert_eq!(check("EtcdBackup", &ok, None), Ok(()));
    for (storage_type, block) in [
        ("S3", "s3"),
        ("ABS", "abs"),
        ("GCS", "gcs"),
        ("OSS", "oss"),
        ("Local", "local"),
    ] {
        let other = if block == "s3" {
            json!({"local": {"path": "/x"}})
        } else {
            json!({"s3": s3})
        };
        let mut spec = json!({"etcdEndpoints": ["http://e:2379"], "storageType": storage_type});
        spec.as_object_mut()
            .unwrap()
            .extend(other.as_object().unwrap().clone());
        assert_rejected(
            "EtcdBackup",
            &backup(spec),
            None,
            &format!("requires the {block} block"),
        );
    }
    let local = backup(
        json!({"etcdEndpoints": ["http://e:2379"], "storageType": "Local",
                              "local": {"path": "etcd.backup", "persistentVolumeClaim": "pvc"}}),
    );
    assert_eq!(check("EtcdBackup", &local, None), Ok(()));
    let relative = backup(
        json!({"etcdEndpoints": ["http://e:2379"], "storageType": "Local",
                                 "local": {"path": "etcd.backup"}}),
    );
    assert_rejected("EtcdBackup", &relative, None, "must be absolute");
}

#[test]
fn schedule_and_interval_are_exclusive() {
    let with_policy = |policy: Value| {
        backup(
            json!({"etcdEndpoints": ["http://e:2379"], "storageType": "S3",
                      "s3": {"path": "b/k"}, "backupPolicy": policy}),
        )
    };
    for ok in [
        json!({"schedule": "0 * * * *"}),
        json!({"schedule": "@daily", "backupIntervalInSecond": 0}),
        json!({"backupIntervalInSecond": 125, "maxBackups": 4}),
        json!({}),
    ] {
        assert_eq!(
            check("EtcdBackup", &with_policy(ok.clone()), None),
            Ok(()),
            "{ok}"
        );
    }
    let both = with_policy(json!({"schedule": "@daily", "backupIntervalInSecond": 60}));
    assert_rejected("EtcdBackup", &both, None, "not both");
}

#[test]
fn restore_name_must_match_and_spec_is_immutable() {
    let spec = json!({"etcdCluster": {"name": "example-etcd-cluster"}, "backupStorageType": "S3",
                      "s3": {"path": "mybucket/etcd.backup", "awsSecret": "aws", "endpoint": ""}});
    let ok = restore("example-etcd-cluster", spec.clone());
    assert_eq!(check("EtcdRestore", &ok, None), Ok(()));
    assert_eq!(check("EtcdRestore", &ok, Some(&ok)), Ok(()));
    assert_rejected(
        "EtcdRestore",
        &restore("other", spec.clone()),
        None,
        "must equal spec.etcdCluster.name",
    );

    let mut changed = ok.clone();
    changed["spec"]["s3"]["path"] = json!("mybucket/other.backup");
    assert_eq!(
        check("EtcdRestore", &changed, None),
        Ok(()),
        "a new object may say anything"
    );
    assert_rejected("EtcdRestore", &changed, Some(&ok), "spec is immutable");

    let mut local = ok.clone();
    local["spec"]["backupStorageType"] = json!("Local");
    assert_rejected("EtcdRestore", &local, None, "requires the local block");
}

#[test]
fn cluster_tls_secrets_go_together() {
    let cluster = |tls: Value| {
        json!({"apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
               "metadata": {"name": "c"}, "spec": {"size": 3, "TLS": tls}})
    };
    let both = json!({"static": {"member": {"peerSecret": "p", "serverSecret": "s"}, "operatorSecret": "o"}});
    let peer_only = json!({"static": {"member": {"peerSecret": "p"}}});
    assert_eq!(check("EtcdCluster", &cluster(both), None), Ok(()));
    assert_eq!(check("EtcdCluster", &cluster(peer_only), None), Ok(()));
    let operator_only = json!({"static": {"operatorSecret": "o"}});
    assert_rejected("EtcdCluster", &cluster(operator_only), None, "set together");
    let server_only = json!({"static": {"member": {"serverSecret": "s"}}});
    assert_rejected("EtcdCluster", &cluster(server_only), None, "set together");
}
