//! Restore drills on the kubelet bed, as users run them: the operator from its image with the
//! shipped manifests, in a namespace with Pod Security `restricted` enforced, drilling backups
//! of an etcd that runs as a pod. The drill pod (the `etcd-backup` image and the etcd image
//! of the backup's version) restores the newest backup and compares it with what the operator
//! recorded when it took it:
//! - a good backup: `lastDrill` succeeded with the recorded revision and key count, the pod is
//!   gone, the condition `Drilled` is True;
//! - an encrypted, compressed backup (as the example `etcd-backup-cron-zstd.yaml`): the drill
//!   pod decrypts with `drill.identitySecret` (mounted for its fetch only) and proves it; with
//!   a key that is not a recipient it fails as `NoUsableIdentity`;
//! - the same backup object and manifest replaced by another cluster's valid snapshot (every
//!   byte check passes): the drill fails with `ContentMismatch`, a Warning, `Drilled` False, and
//!   the failed pod is deleted once the verdict is recorded (it holds the decrypted snapshot).

use std::time::Duration;

use etcd_api::{DrillResult, EtcdBackup};
use etcd_snapshot::{EtcdConnection, ObjectName, SaveOptions};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testbed::cluster::host_address;
use testbed::kube::wait_until;
use testbed::{Etcd, Garage};

mod common;
use common::{aws_files, store};

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/namespaced");
const ETCD_IMAGE: &str = "localhost/etcd:v3.5.33";

/// One etcd member as a pod, as the restricted namespace admits it.
fn etcd_pod() -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "etcd-0", "labels": {"app": "etcd"}},
    "spec": {"containers": [{
        "name": "etcd", "image": ETCD_IMAGE, "imagePullPolicy": "Never",
        "command": ["etcd", "--data-dir", "/tmp/data",
            "--listen-client-urls", "http://0.0.0.0:2379", "--advertise-client-urls", "http://etcd-0:2379"],
        "readinessProbe": {"httpGet": {"path": "/health", "port": 2379}, "periodSeconds": 1},
    }]}});
    testbed::cluster::restricted(&mut pod["spec"]);
    pod
}

/// A one-shot EtcdBackup of the etcd pod to `key`, with the fields of `extra` (a drill,
/// encryption) added to its spec.
fn one_shot(name: &str, ip: &str, garage: &Garage, key: &str, extra: Value) -> EtcdBackup {
    let mut spec = json!({
        "etcdEndpoints": [format!("http://{ip}:2379")],
        "storageType": "S3",
        "s3": {"path": format!("{}/{key}", garage.bucket), "awsSecret": "aws",
               "endpoint": garage.endpoint, "forcePathStyle": true},
    });
    for (field, value) in extra.as_object().unwrap() {
        spec[field] = value.clone();
    }
    serde_json::from_value(json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap()
}

fn drill_ended(b: &EtcdBackup) -> bool {
    b.status
        .as_ref()
        .and_then(|s| s.last_drill.as_ref())
        .is_some_and(|d| d.result != DrillResult::Running)
}

fn drilled_condition(b: &EtcdBackup) -> Option<(String, String)> {
    b.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Drilled")
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test]
async fn drills_prove_a_good_backup_and_catch_another_clusters_content() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("eb-drill").await;
    let garage = Garage::start_on(&host_address()).await.unwrap();
    kube.apply(&[etcd_pod()], &ns).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    wait_until(&pods, "etcd-0", "etcd pod Ready", 120, |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    })
    .await
    .unwrap();
    let ip = testbed::cluster::pod_ip(&pods, "etcd-0").await;
    let mut etcd = etcd_client::Client::connect([format!("http://{ip}:2379")], None)
        .await
        .unwrap();
    for i in 0..200 {
        etcd.put(format!("/registry/key-{i}"), format!("value-{i}"), None)
            .await
            .unwrap();
    }
    // Deleted keys too, so the key count and HashKV at the revision tell histories apart.
    etcd.delete("/registry/key-7", None).await.unwrap();

    let manifests = testbed::cluster::deploy_manifests(DEPLOY.as_ref(), &ns).unwrap();
    kube.apply(&manifests, &ns).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(kube.client.clone(), &ns);
    wait_until(
        &deployments,
        "etcd-backup-operator",
        "ready operator replicas",
        180,
        |d: &Deployment| d.status.as_ref().and_then(|s| s.ready_replicas) == Some(2),
    )
    .await
    .unwrap();
    let mut secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "aws"}, "stringData": {}});
    for (key, file) in aws_files(&garage) {
        secret["stringData"][key] = json!(file);
    }
    let secret: Secret = serde_json::from_value(secret).unwrap();
    Api::<Secret>::namespaced(kube.client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let backups: Api<EtcdBackup> = Api::namespaced(kube.client.clone(), &ns);
    let drill = json!({"etcdRepository": "localhost/etcd", "timeoutInSecond": 300});

    // A good backup, drilled after it is taken.
    backups
        .create(
            &PostParams::default(),
            &one_shot(
                "proven",
                &ip,
                &garage,
                "drill/proven.backup",
                json!({"drill": drill}),
            ),
        )
        .await
        .unwrap();
    let proven = wait_until(
        &backups,
        "proven",
        "the drill of the backup",
        300,
        drill_ended,
    )
    .await
    .unwrap();
    let status = proven.status.clone().unwrap();
    let record = status.last_backup.clone().unwrap();
    let contents = record.contents.clone().unwrap();
    let drilled = status.last_drill.clone().unwrap();
    assert_eq!(drilled.result, DrillResult::Succeeded, "{drilled:?}");
    assert_eq!(drilled.object_key, record.object_key);
    assert_eq!(drilled.etcd_revision, Some(contents.revision));
    assert_eq!(drilled.key_count, Some(contents.key_count));
    assert_eq!(contents.key_count, 199, "{contents:?}");
    assert_eq!(status.last_successful_drill.as_ref(), Some(&drilled));
    assert_eq!(
        drilled_condition(&proven),
        Some(("True".into(), "Passed".into()))
    );
    // A succeeded drill's pod is removed once its verdict is recorded.
    let selector = "app=etcd-backup-drill";
    let left = pods
        .list(&ListParams::default().labels(selector))
        .await
        .unwrap();
    assert!(
        left.items
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_some()),
        "{:?}",
        left.items
            .iter()
            .map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>()
    );

    // Encrypted and compressed, as the example `etcd-backup-cron-zstd.yaml`: the drill pod
    // decrypts with the identity mounted for its fetch and proves the backup; with another
    // key, the drill fails as NoUsableIdentity (the key is wrong, not the backup).
    let (identity, recipient) = backup_storage::encryption::Identity::generate();
    let (stranger, _) = backup_storage::encryption::Identity::generate();
    let secrets: Api<Secret> = Api::namespaced(kube.client.clone(), &ns);
    for (name, key, text) in [
        ("recipients", "recipients.txt", recipient.clone()),
        ("drill-key", "identity.txt", identity),
        ("stranger-key", "identity.txt", stranger),
    ] {
        let secret = json!({"metadata": {"name": name}, "stringData": {key: text}});
        let secret: Secret = serde_json::from_value(secret).unwrap();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
    for (name, key_secret, result, reason) in [
        ("sealed", "drill-key", DrillResult::Succeeded, "Passed"),
        (
            "wrong-key",
            "stranger-key",
            DrillResult::Failed,
            "NoUsableIdentity",
        ),
    ] {
        let mut drill = drill.clone();
        drill["identitySecret"] = json!({"name": key_secret, "key": "identity.txt"});
        let extra = json!({"compression": "zstd", "drill": drill,
            "encryption": {"recipientsSecret": {"name": "recipients", "key": "recipients.txt"}}});
        let key = format!("drill/{name}.backup");
        let backup = one_shot(name, &ip, &garage, &key, extra);
        backups
            .create(&PostParams::default(), &backup)
            .await
            .unwrap();
        let drilled = wait_until(&backups, name, "the drill", 300, drill_ended)
            .await
            .unwrap();
        let status = drilled.status.clone().unwrap();
        let encrypted_to = status.last_backup.unwrap().encrypted_to;
        assert_eq!(encrypted_to, vec![recipient.clone()]);
        let drill = status.last_drill.unwrap();
        assert_eq!(drill.result, result, "{name}: {drill:?}");
        assert_eq!(
            drilled_condition(&drilled)
                .map(|(_, reason)| reason)
                .as_deref(),
            Some(reason),
            "{name}: {drill:?}"
        );
        if result == DrillResult::Failed {
            let message = drill.message.unwrap_or_default();
            assert!(message.contains("not among its recipients"), "{message}");
        }
    }

    // Another backup of the same etcd, taken without a drill; then its object and manifest are
    // replaced by another cluster's valid snapshot (written as our tool writes, so the trailer,
    // sizes and hashes all check out). Only a restore shows the key space is not ours.
    backups
        .create(
            &PostParams::default(),
            &one_shot("replaced", &ip, &garage, "drill/replaced.backup", json!({})),
        )
        .await
        .unwrap();
    wait_until(
        &backups,
        "replaced",
        "the second backup",
        120,
        |b: &EtcdBackup| b.status.as_ref().is_some_and(|s| s.succeeded),
    )
    .await
    .unwrap();
    let theirs = Etcd::start().await.unwrap();
    theirs.put("/other", "cluster").await.unwrap();
    let s3 = store(&garage).await;
    let options = SaveOptions::new(ObjectName::Exact("drill/replaced.backup".into()));
    etcd_snapshot::save(
        &EtcdConnection::new(vec![theirs.endpoint.clone()]),
        &s3,
        &options,
    )
    .await
    .unwrap();
    etcd_snapshot::verify(&s3, "drill/replaced.backup", None)
        .await
        .expect("the planted snapshot passes every byte check");
    backups
        .patch(
            "replaced",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"drill": drill}})),
        )
        .await
        .unwrap();
    let replaced = wait_until(
        &backups,
        "replaced",
        "the drill of the replaced backup",
        300,
        drill_ended,
    )
    .await
    .unwrap();
    let failed = replaced.status.clone().unwrap().last_drill.unwrap();
    assert_eq!(failed.result, DrillResult::Failed, "{failed:?}");
    assert_eq!(
        failed.reason.as_deref(),
        Some("ContentMismatch"),
        "{failed:?}"
    );
    assert!(
        failed
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("below the recorded"),
        "{failed:?}"
    );
    assert!(
        replaced
            .status
            .as_ref()
            .unwrap()
            .last_successful_drill
            .is_none()
    );
    assert_eq!(
        drilled_condition(&replaced),
        Some(("False".into(), "ContentMismatch".into()))
    );
    // The failed drill's pod goes once the verdict is recorded: no copy of the backup or of
    // the restored data stays behind.
    let drilled_in = failed.pod.clone().unwrap();
    let mut gone = false;
    for _ in 0..60 {
        if pods.get_opt(&drilled_in).await.unwrap().is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(gone, "the failed drill's pod {drilled_in} is still there");
    // And a Warning says so.
    let mut warned = false;
    for _ in 0..30 {
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(kube.client.clone(), &ns);
        warned = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("DrillFailed")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("replaced")
            });
        if warned {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(warned, "no DrillFailed event");
    testbed::cluster::assert_leader_and_no_refusals(
        &kube.kubeconfig,
        &ns,
        "app.kubernetes.io/name=etcd-backup-operator",
    );
    kube.delete_namespace(&ns).await.unwrap();
}
