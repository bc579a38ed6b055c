//! Disaster restore on the kubelet bed, the three operators in the cluster from their images with
//! their shipped manifests (RBAC checked live): a 3-member EtcdCluster (claims, etcd 3.5) with
//! 2,000 keys, a coreos one-shot EtcdBackup to Garage; restores of a corrupted object, a
//! missing object and with wrong credentials fail with the cause (in the new members' fetches)
//! and give the running cluster back untouched, unpaused; a restore over the live cluster
//! replaces its members and keeps their volumes detached; then every member pod and claim is
//! deleted (quorum gone), the coreos EtcdRestore
//! succeeds only with 3 ready members holding every key at a bumped revision, and the EtcdCluster
//! operator takes the cluster over and scales it to 5. A restore to a point: a snapshot file
//! written by `point-in-time` from the backup operator's continuous archive restores a running
//! cluster to the revision before its damage.

use std::collections::BTreeSet;

use backup_storage::{Location, S3Options, Store};
use etcd_api::{EtcdBackup, EtcdCluster, EtcdRestore};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use testbed::Garage;
use testbed::cluster::{assert_leader_and_no_refusals, converged, deploy_manifests, host_address};
use testbed::kube::{KubeTestbed, wait_until};
use testbed::status_writers::StatusWriters;

const OPERATORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/coreos");
const CLUSTER: &str = "example-etcd-cluster";
const KEYS: usize = 2000;

fn example(name: &str) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(format!("{EXAMPLES}/{name}")).unwrap()).unwrap()
}

/// The three operators from the all-in-one overlay (`deploy/namespaced/`), one replica each
/// (failover is each operator's own test). The bed installed the CRDs and made the namespace.
async fn install_operators(kube: &KubeTestbed, ns: &str) {
    let all_in_one = format!("{OPERATORS}/../deploy/namespaced");
    let mut manifests = deploy_manifests(all_in_one.as_ref(), ns).unwrap();
    manifests.retain(|d| d["kind"] != "CustomResourceDefinition" && d["kind"] != "Namespace");
    for doc in manifests.iter_mut().filter(|d| d["kind"] == "Deployment") {
        doc["spec"]["replicas"] = json!(1);
        // Restore pods that never start fail the restore after a minute here (ten by
        // default), so that the test of it does not take ten.
        if doc["metadata"]["name"] == "etcd-restore-operator" {
            let container = &mut doc["spec"]["template"]["spec"]["containers"][0];
            container["env"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "RESTORE_POD_START_DEADLINE_SECONDS", "value": "60"}));
        }
    }
    kube.apply(&manifests, ns).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(kube.client.clone(), ns);
    for name in [
        "etcd-operator",
        "etcd-backup-operator",
        "etcd-restore-operator",
    ] {
        let ready = |d: &Deployment| d.status.as_ref().and_then(|s| s.ready_replicas) == Some(1);
        wait_until(&deployments, name, "a ready operator", 180, ready)
            .await
            .unwrap();
    }
}

/// The restore has ended, succeeded or failed.
fn finished(restore: &EtcdRestore) -> bool {
    restore
        .status
        .as_ref()
        .is_some_and(|s| s.phase.is_some_and(|p| p.is_terminal()))
}

/// A store on Garage's bucket with the test key, for objects under `key`.
async fn garage_store(garage: &Garage, key: &str) -> Store {
    let options = S3Options::s3_compatible(
        &garage.endpoint,
        &garage.region,
        &garage.access_key,
        &garage.secret_key,
    );
    let location = Location::parse(&format!("s3://{}/{key}", garage.bucket)).unwrap();
    Store::open(&location, &options).await.unwrap()
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The cluster's member pods, without those being deleted (an old member's pod can stay
/// Terminating for a while after the disaster, its container already stopped).
async fn member_pods(kube: &KubeTestbed, ns: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let selector = format!("etcd_cluster={CLUSTER}");
    let mut pods = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items;
    pods.retain(|p| p.metadata.deletion_timestamp.is_none());
    pods
}

async fn client_of(pod: &Pod) -> etcd_client::Client {
    let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
    etcd_client::Client::connect([format!("http://{ip}:2379")], None)
        .await
        .unwrap()
}

/// The coreos example EtcdRestore of `CLUSTER` from `s3`, with `spec` fields added.
async fn create_restore(restores: &Api<EtcdRestore>, s3: Value, spec: Value) {
    let mut restore = example("etcd-restore.yaml");
    restore["spec"]["s3"] = s3;
    json_patch::merge(&mut restore["spec"], &spec);
    let restore: EtcdRestore = serde_json::from_value(restore).unwrap();
    restores
        .create(&PostParams::default(), &restore)
        .await
        .unwrap();
}

/// The coreos one-shot EtcdBackup of the cluster to `key` in Garage's bucket, with `spec`
/// fields set ([`testbed::coreos::one_shot_backup`]), once it succeeded.
async fn backed_up(
    kube: &KubeTestbed,
    ns: &str,
    garage: &Garage,
    key: &str,
    spec: Value,
) -> EtcdBackup {
    testbed::coreos::one_shot_backup(kube, ns, garage, key, spec)
        .await
        .unwrap()
}

/// Runs `restore` (the coreos example, s3 block replaced) until it has failed; returns its
/// reason. Deletes it afterwards and waits until it is gone, so the next restore of the cluster
/// can be made.
async fn failed_restore(kube: &KubeTestbed, ns: &str, s3: Value) -> String {
    let restores: Api<EtcdRestore> = Api::namespaced(kube.client.clone(), ns);
    create_restore(&restores, s3, json!({})).await;
    let failed = |r: &EtcdRestore| {
        r.status
            .as_ref()
            .is_some_and(|s| s.phase == Some(etcd_api::RestorePhase::Failed))
    };
    let done = wait_until(&restores, CLUSTER, "the restore to fail", 180, failed)
        .await
        .unwrap();
    let status = done.status.unwrap();
    assert!(!status.succeeded);
    assert!(status.snapshot.is_none(), "a bad backup is never recorded");
    // None of its claims is left under a name the cluster's operator may give a member.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), ns);
    let staged = ListParams::default().labels(&format!("etcd_restore={CLUSTER}"));
    let left = claims.list(&staged).await.unwrap().items;
    assert!(
        left.is_empty(),
        "{:?}",
        left.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    );
    // Given back as it was: running, neither held nor paused.
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), ns);
    assert_given_back(&clusters.get(CLUSTER).await.unwrap());
    delete_restore(&restores).await;
    status.reason.unwrap_or_default()
}

/// Deletes the cluster's EtcdRestore and waits until it is gone: only once the operator's
/// finalizer is off, and the next restore takes the same name.
async fn delete_restore(restores: &Api<EtcdRestore>) {
    restores
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while restores.get_opt(CLUSTER).await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the restore is still there 60 s after its deletion"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn disaster_restore_from_s3_is_taken_over_by_the_cluster_operator() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-restore").await;
    let garage = Garage::start_on(&host_address()).await.unwrap();
    install_operators(&kube, &ns).await;

    // A 3-member cluster of the newest line on claims, with keys.
    let mut cluster = example("example-etcd-cluster.yaml");
    cluster["spec"]["repository"] = json!("localhost/etcd");
    cluster["spec"]["version"] = json!("3.7.3");
    // Members spread over nodes where they can be (this bed has one): the restore pods get the
    // same spread among themselves, not away from the live members.
    cluster["spec"]["pod"] = json!({"persistentVolumeClaimSpec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}},
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {"etcd_cluster": CLUSTER}}}}]}}});
    let cluster: EtcdCluster = serde_json::from_value(cluster).unwrap();
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    // Every writer of the cluster's status from its creation on: membership changes, the
    // restore and its hand-over, the scale-up after it.
    let status_writers = StatusWriters::watch(clusters.clone(), CLUSTER);
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    wait_until(&clusters, CLUSTER, "3 ready members", 300, converged(3))
        .await
        .unwrap();
    let mut etcd = client_of(&member_pods(&kube, &ns).await[0]).await;
    for i in 0..KEYS {
        etcd.put(format!("/registry/key-{i:05}"), format!("value-{i}"), None)
            .await
            .unwrap();
    }

    // The coreos one-shot backup to S3, with the coreos Secret (this server's key).
    let key = "restore-e2e/etcd.backup";
    let backup = backed_up(&kube, &ns, &garage, key, json!({})).await;
    let backup_revision = backup.status.unwrap().etcd_revision.unwrap();

    // Bad backups and credentials: the restore fails with the cause, the cluster is untouched.
    let s3 = |path: &str, secret: &str| {
        json!({"path": format!("{}/{path}", garage.bucket), "awsSecret": secret,
               "endpoint": garage.endpoint, "forcePathStyle": true})
    };
    let store = garage_store(&garage, key).await;
    let mut bytes = store.get_small(key).await.unwrap().unwrap().to_vec();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    let corrupt = "restore-e2e/corrupt.backup";
    store
        .put_small(corrupt, bytes.into(), "application/octet-stream")
        .await
        .unwrap();
    let before: BTreeSet<String> = member_pods(&kube, &ns)
        .await
        .iter()
        .filter_map(|p| p.uid())
        .collect();
    let reason = failed_restore(&kube, &ns, s3(corrupt, "aws")).await;
    assert!(reason.starts_with("BackupInvalid"), "{reason}");
    assert!(reason.to_lowercase().contains("mismatch"), "{reason}");
    assert!(reason.contains("failed verification"), "{reason}");
    // A missing object was never verified, and the reason says it could not be read.
    let reason = failed_restore(&kube, &ns, s3("restore-e2e/missing.backup", "aws")).await;
    assert!(reason.starts_with("BackupInvalid"), "{reason}");
    assert!(reason.contains("could not read the backup"), "{reason}");
    let secrets: Api<Secret> = Api::namespaced(kube.client.clone(), &ns);
    let mut wrong = secrets.get("aws").await.unwrap();
    wrong.metadata = kube::api::ObjectMeta {
        name: Some("wrong-aws".into()),
        ..Default::default()
    };
    let wrong_keys = "[default]\naws_access_key_id = GKwrong\naws_secret_access_key = wrong\n";
    wrong.data.as_mut().unwrap().insert(
        "credentials".into(),
        k8s_openapi::ByteString(wrong_keys.into()),
    );
    secrets
        .create(&PostParams::default(), &wrong)
        .await
        .unwrap();
    let reason = failed_restore(&kube, &ns, s3(key, "wrong-aws")).await;
    assert!(reason.starts_with("BackupInvalid"), "{reason}");
    let reason = failed_restore(&kube, &ns, s3(key, "no-such-secret")).await;
    assert!(
        reason.contains("Secret no-such-secret not found"),
        "{reason}"
    );
    // Restore pods placed like the members, on a node no node is (issue 28 point 4): never
    // scheduled, they fail the restore at their start deadline with the scheduler's words,
    // and the cluster is given back. (The running members stay where they are.)
    let place = |selector: Value| json!({"spec": {"pod": {"nodeSelector": selector}}});
    let nowhere = place(json!({"etcd-e2e/no-such-node": "true"}));
    clusters
        .patch(CLUSTER, &PatchParams::default(), &Patch::Merge(&nowhere))
        .await
        .unwrap();
    let reason = failed_restore(&kube, &ns, s3(key, "aws")).await;
    assert!(reason.starts_with("PodNotStarted"), "{reason}");
    assert!(
        reason.contains("no container started within 60 s"),
        "{reason}"
    );
    assert!(reason.contains("Unschedulable"), "{reason}");
    clusters
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(&place(Value::Null)),
        )
        .await
        .unwrap();
    let after: BTreeSet<String> = member_pods(&kube, &ns)
        .await
        .iter()
        .filter_map(|p| p.uid())
        .collect();
    assert_eq!(before, after, "failed restores touched no member");

    // Cancelled: a restore deleted while it holds the cluster, before any member was touched,
    // gives it back as it was (unpaused, its annotations gone), and its own claims go with it.
    let restores: Api<EtcdRestore> = Api::namespaced(kube.client.clone(), &ns);
    create_restore(&restores, s3(key, "aws"), json!({})).await;
    let planned = |r: &EtcdRestore| r.status.as_ref().is_some_and(|s| s.plan.is_some());
    wait_until(
        &restores,
        CLUSTER,
        "the cancelled restore's plan",
        120,
        planned,
    )
    .await
    .unwrap();
    let held = clusters.get(CLUSTER).await.unwrap();
    assert!(held.spec.is_paused(), "held while it runs");
    restores
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    let released = |c: &EtcdCluster| {
        !c.spec.is_paused()
            && !c
                .annotations()
                .keys()
                .any(|k| k.starts_with("etcd.database.coreos.com/"))
    };
    wait_until(&clusters, CLUSTER, "given back on cancel", 60, released)
        .await
        .unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &ns);
    let staged = ListParams::default().labels(&format!("etcd_restore={CLUSTER}"));
    for _ in 0..120 {
        let gone = restores.get_opt(CLUSTER).await.unwrap().is_none();
        if gone && claims.list(&staged).await.unwrap().items.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    assert!(restores.get_opt(CLUSTER).await.unwrap().is_none());
    assert!(
        claims.list(&staged).await.unwrap().items.is_empty(),
        "staged claims left"
    );
    let after_cancel: BTreeSet<String> = member_pods(&kube, &ns)
        .await
        .iter()
        .filter_map(|p| p.uid())
        .collect();
    assert_eq!(before, after_cancel, "the cancel touched no member");

    // A 3.7 backup into a cluster of 3.6: refused once the members' fetches read its manifest,
    // before anything of that cluster is touched (etcd does not move data back a minor).
    let older: EtcdRestore = serde_json::from_value(json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdRestore",
        "metadata": {"name": "older"},
        "spec": {"etcdCluster": {"name": "older"}, "backupStorageType": "S3", "s3": s3(key, "aws"),
            "newCluster": {"size": 1, "version": "3.6.16", "repository": "localhost/etcd", "storage": "64Mi"}},
    }))
    .unwrap();
    let restores: Api<EtcdRestore> = Api::namespaced(kube.client.clone(), &ns);
    restores
        .create(&PostParams::default(), &older)
        .await
        .unwrap();
    let failed = |r: &EtcdRestore| {
        r.status
            .as_ref()
            .is_some_and(|s| s.phase == Some(etcd_api::RestorePhase::Failed))
    };
    let refused = wait_until(&restores, "older", "the older restore to fail", 180, failed)
        .await
        .unwrap()
        .status
        .unwrap();
    let reason = refused.reason.unwrap_or_default();
    assert!(reason.starts_with("BackupTooNew"), "{reason}");
    assert!(reason.contains("taken from etcd 3.7.3"), "{reason}");
    assert!(refused.snapshot.is_none(), "never recorded");
    // The new cluster was given back empty: not needed here.
    clusters
        .delete("older", &DeleteParams::default())
        .await
        .unwrap();
    let untouched = clusters.get(CLUSTER).await.unwrap();
    assert!(!untouched.spec.is_paused());
    assert!(
        untouched
            .annotations()
            .get("etcd.database.coreos.com/restore")
            .is_none()
    );

    // A restore over the live cluster, keeping the old volumes: a key written after the backup
    // is gone, every backed-up key is back on new members, and the old claims are only
    // detached (the operator's shipped RBAC reads and patches them).
    let members = ListParams::default().labels(&format!("etcd_cluster={CLUSTER}"));
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &ns);
    let old_claims: BTreeSet<String> = claims
        .list(&members)
        .await
        .unwrap()
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert_eq!(old_claims.len(), 3);
    etcd.put("/registry/after-the-backup", "v", None)
        .await
        .unwrap();
    create_restore(&restores, s3(key, "aws"), json!({"oldVolumes": "Keep"})).await;
    let done = wait_until(&restores, CLUSTER, "the live restore", 300, finished)
        .await
        .unwrap();
    let status = done.status.unwrap();
    assert!(status.succeeded, "{status:?}");
    let replaced = member_pods(&kube, &ns).await;
    assert_eq!(replaced.len(), 3);
    let count_only = etcd_client::GetOptions::new()
        .with_prefix()
        .with_count_only();
    for pod in &replaced {
        assert!(!before.contains(&pod.uid().unwrap()), "{}", pod.name_any());
        let mut etcd = client_of(pod).await;
        let keys = etcd.get("/registry/", Some(count_only.clone())).await;
        assert_eq!(keys.unwrap().count() as usize, KEYS, "{}", pod.name_any());
    }
    restores
        .delete(CLUSTER, &DeleteParams::default())
        .await
        .unwrap();
    wait_until(&clusters, CLUSTER, "3 ready members", 120, converged(3))
        .await
        .unwrap();
    // Kept, also once the EtcdCluster operator runs the cluster again and the replaced pods
    // are gone (it once took a replaced pod still being deleted for a leftover member and
    // deleted the kept claim of that name).
    let is_replaced = |p: &Pod| before.contains(&p.uid().unwrap());
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    for _ in 0..120 {
        let all = pods.list(&members).await.unwrap().items;
        if !all.iter().any(is_replaced) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    let left = pods.list(&members).await.unwrap().items;
    assert!(!left.iter().any(is_replaced), "replaced pods still there");
    wait_until(&clusters, CLUSTER, "3 ready members", 120, converged(3))
        .await
        .unwrap();
    for name in &old_claims {
        let claim = claims.get(name).await.unwrap();
        assert!(claim.metadata.deletion_timestamp.is_none(), "{name} kept");
        assert_eq!(
            claim.labels().get("etcd.database.coreos.com/detached-from"),
            Some(&CLUSTER.to_string()),
            "{name}"
        );
        assert!(!claim.labels().contains_key("etcd_cluster"), "{name}");
    }

    // Disaster: every claim, then every pod, deleted.
    claims
        .delete_collection(&DeleteParams::default(), &members)
        .await
        .unwrap();
    pods.delete_collection(&DeleteParams::default(), &members)
        .await
        .unwrap();
    wait_until(
        &clusters,
        CLUSTER,
        "quorum lost",
        120,
        testbed::cluster::quorum_lost,
    )
    .await
    .unwrap();

    // The coreos EtcdRestore, from the good backup.
    create_restore(&restores, s3(key, "aws"), json!({})).await;
    let done = wait_until(&restores, CLUSTER, "the restore to finish", 300, finished)
        .await
        .unwrap();
    let status = done.status.unwrap();
    assert!(status.succeeded, "{status:?}");

    // Succeeded only with 3 ready members holding every key, above the backup's revision.
    let restored = member_pods(&kube, &ns).await;
    assert_eq!(restored.iter().filter(|p| ready(p)).count(), 3);
    let plan = status.plan.unwrap();
    let names: BTreeSet<String> = restored.iter().map(|p| p.name_any()).collect();
    assert_eq!(names, plan.members.iter().cloned().collect());
    assert_eq!(status.revision_bumped, Some(true));
    let restored_revision = status.restored_revision.unwrap();
    assert!(
        restored_revision >= backup_revision + 1_000_000_000,
        "{restored_revision}"
    );
    for pod in &restored {
        let mut etcd = client_of(pod).await;
        let all = etcd
            .get(
                "/registry/",
                Some(etcd_client::GetOptions::new().with_prefix()),
            )
            .await
            .unwrap();
        assert_eq!(all.kvs().len(), KEYS, "every key on {}", pod.name_any());
        assert!(all.header().unwrap().revision() >= restored_revision);
        let one = etcd.get("/registry/key-01234", None).await.unwrap();
        assert_eq!(one.kvs()[0].value_str().unwrap(), "value-1234");
    }
    assert_eq!(
        status.source.as_deref(),
        Some(format!("s3://{}/{key}", garage.bucket).as_str())
    );

    // The EtcdCluster operator has the cluster again: unpaused, and it scales it.
    let handed = clusters.get(CLUSTER).await.unwrap();
    assert!(!handed.spec.is_paused());
    let patch = json!({"spec": {"size": 5}});
    clusters
        .patch(CLUSTER, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_until(&clusters, CLUSTER, "5 ready members", 300, converged(5))
        .await
        .unwrap();
    let mut etcd = client_of(&member_pods(&kube, &ns).await[0]).await;
    let count = etcd
        .get(
            "/registry/",
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only(),
            ),
        )
        .await
        .unwrap()
        .count();
    assert_eq!(count as usize, KEYS);
    // One writer of the cluster's status throughout: the cluster operator, under one field
    // manager (the hand-over went through the cluster's annotations).
    assert_eq!(
        status_writers.seen(),
        BTreeSet::from(["etcd-operator".to_string()])
    );

    assert_leader_and_no_refusals(
        &kube.kubeconfig,
        &ns,
        "app.kubernetes.io/name=etcd-restore-operator",
    );
    kube.delete_namespace(&ns).await.unwrap();
}

/// Issue 27: a 3.6 cluster with coreos static TLS is backed up by an EtcdBackup with the
/// operators' client certificate (`clientTLSSecret`, to the client Service's TLS name) and
/// restored over the live cluster by an EtcdRestore, whose members' health is asked over TLS:
/// every backed-up key is served by the new members, a key written after the backup is gone.
#[tokio::test]
async fn a_3_6_tls_cluster_is_backed_up_and_restored() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-restore-tls").await;
    let garage = Garage::start_on(&host_address()).await.unwrap();
    install_operators(&kube, &ns).await;
    let tls = testbed::cluster::static_tls(&kube, &ns, CLUSTER, true).await;
    let mut cluster = example("example-etcd-cluster.yaml");
    cluster["spec"]["repository"] = json!("localhost/etcd");
    cluster["spec"]["version"] = json!("3.6.16");
    cluster["spec"]["pod"] = json!({"persistentVolumeClaimSpec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}});
    cluster["spec"]["TLS"] = json!({"static": {
        "member": {"peerSecret": "etcd-peer-tls", "serverSecret": "etcd-server-tls"},
        "operatorSecret": "etcd-client-tls"}});
    let cluster: EtcdCluster = serde_json::from_value(cluster).unwrap();
    assert!(
        cluster.spec.tls.is_some(),
        "the coreos spelling of the TLS block"
    );
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    wait_until(&clusters, CLUSTER, "3 ready TLS members", 300, converged(3))
        .await
        .unwrap();
    let tls_client = |pod: Pod| {
        let options = tls.client_options(&pod.name_any(), CLUSTER, &ns, true);
        async move {
            let ip = pod.status.unwrap().pod_ip.unwrap();
            etcd_client::Client::connect([format!("https://{ip}:2379")], Some(options))
                .await
                .unwrap()
        }
    };
    let mut etcd = tls_client(member_pods(&kube, &ns).await.remove(0)).await;
    for i in 0..KEYS {
        etcd.put(format!("/registry/key-{i:05}"), format!("value-{i}"), None)
            .await
            .unwrap();
    }

    let key = "restore-tls/etcd.backup";
    let endpoint = format!("https://{CLUSTER}-client.{ns}.svc:2379");
    let tls_backup = json!({"etcdEndpoints": [endpoint], "clientTLSSecret": "etcd-client-tls"});
    backed_up(&kube, &ns, &garage, key, tls_backup).await;
    etcd.put("/registry/after-the-backup", "v", None)
        .await
        .unwrap();

    let restores: Api<EtcdRestore> = Api::namespaced(kube.client.clone(), &ns);
    let s3 = json!({"path": format!("{}/{key}", garage.bucket), "awsSecret": "aws",
                    "endpoint": garage.endpoint, "forcePathStyle": true});
    create_restore(&restores, s3, json!({})).await;
    let done = wait_until(&restores, CLUSTER, "the TLS restore", 300, finished)
        .await
        .unwrap();
    let status = done.status.unwrap();
    assert!(status.succeeded, "{status:?}");
    let count_only = etcd_client::GetOptions::new()
        .with_prefix()
        .with_count_only();
    let restored = member_pods(&kube, &ns).await;
    assert_eq!(restored.len(), 3);
    for pod in restored {
        let name = pod.name_any();
        let mut etcd = tls_client(pod).await;
        let keys = etcd
            .get("/registry/", Some(count_only.clone()))
            .await
            .unwrap();
        assert_eq!(keys.count() as usize, KEYS, "{name}");
        let list = etcd.member_list().await.unwrap();
        assert!(
            list.members()
                .iter()
                .all(|m| m.peer_urls()[0].starts_with("https://"))
        );
    }
    kube.delete_namespace(&ns).await.unwrap();
}

/// The restore operator as a process on this machine (so it can be killed), watching `ns`, as
/// the ServiceAccount `deploy/` installs: with exactly its RBAC.
struct RestoreOperator(std::process::Child);

impl RestoreOperator {
    fn start(kube: &KubeTestbed, ns: &str) -> RestoreOperator {
        let kubeconfig =
            std::env::temp_dir().join(format!("{ns}-etcd-restore-operator.kubeconfig"));
        kube.write_service_account_kubeconfig(ns, "etcd-restore-operator", &kubeconfig)
            .unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_etcd-restore-operator"))
            .args(["--namespace", ns, "--listen", "127.0.0.1:0"])
            .args(["--backup-image", "localhost/etcd-backup:dev"])
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "info,etcd_restore_operator=debug")
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("start etcd-restore-operator");
        RestoreOperator(child)
    }
}

impl Drop for RestoreOperator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A run-once pod of the `etcd-backup` image with the claim `backups` at /var/lib/etcd-backup
/// (how a CronJob writes Local backups without the operator); waits until it succeeded.
async fn run_backup_pod(kube: &KubeTestbed, ns: &str, args: &[&str]) {
    let pod = json!({
        "metadata": {"name": "save"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "save", "image": "localhost/etcd-backup:dev", "args": args,
                "volumeMounts": [{"name": "backups", "mountPath": "/var/lib/etcd-backup"}]}],
            "volumes": [{"name": "backups", "persistentVolumeClaim": {"claimName": "backups"}}],
        }
    });
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    testbed::cluster::run_once(&pods, pod, 120).await;
}

/// A cluster a failed restore gave back: running, neither held nor paused.
fn assert_given_back(cluster: &EtcdCluster) {
    assert!(
        !cluster.spec.is_paused(),
        "{} is paused",
        cluster.name_any()
    );
    assert!(
        !cluster
            .annotations()
            .keys()
            .any(|k| k.starts_with("etcd.database.coreos.com/")),
        "{:?}",
        cluster.annotations()
    );
}

/// Restores the running cluster `source` from EtcdBackup `nightly` with the identity in
/// Secret `identity`; the restore must fail before the snapshot was recorded (nothing of the
/// cluster touched). Its `status.reason`.
async fn refused_restore_of_nightly(restores: &Api<EtcdRestore>, identity: &str) -> String {
    let restore: EtcdRestore = serde_json::from_value(json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdRestore",
        "metadata": {"name": "source"},
        "spec": {"etcdCluster": {"name": "source"}, "backupStorageType": "S3",
            "backupRef": {"name": "nightly"},
            "decryption": {"identitySecret": {"name": identity, "key": "identity.txt"}}},
    }))
    .unwrap();
    restores
        .create(&PostParams::default(), &restore)
        .await
        .unwrap();
    let refused = wait_until(restores, "source", "the refusal", 180, finished)
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(
        !refused.succeeded && refused.snapshot.is_none(),
        "{refused:?}"
    );
    refused.reason.unwrap_or_default()
}

/// One member pod of `cluster`.
async fn member_pods_of(pods: &Api<Pod>, cluster: &str) -> Pod {
    let selector = ListParams::default().labels(&format!("etcd_cluster={cluster}"));
    let mut members = pods.list(&selector).await.unwrap().items;
    members.pop().expect("a member pod")
}

/// The uids of `cluster`'s member pods (the same after a restore that touched nothing).
async fn member_uids(pods: &Api<Pod>, cluster: &str) -> Vec<String> {
    let selector = ListParams::default().labels(&format!("etcd_cluster={cluster}"));
    let members = pods.list(&selector).await.unwrap().items;
    members.iter().map(|p| p.uid().unwrap()).collect()
}

/// Every key of `cluster`, read from one of its member pods.
async fn keys_of(kube: &KubeTestbed, ns: &str, cluster: &str) -> usize {
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let selector = format!("etcd_cluster={cluster}");
    let members = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap();
    let mut etcd = client_of(&members.items[0]).await;
    let options = etcd_client::GetOptions::new()
        .with_prefix()
        .with_count_only();
    etcd.get("/registry/", Some(options)).await.unwrap().count() as usize
}

#[tokio::test]
async fn local_and_backup_ref_restores_into_new_clusters_survive_an_operator_kill() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-restore-copies").await;
    let garage = Garage::start_on(&host_address()).await.unwrap();
    install_operators(&kube, &ns).await;
    // Only the EtcdCluster and EtcdBackup operators in the cluster: the restore operator runs
    // here, to be killed.
    let deployments: Api<Deployment> = Api::namespaced(kube.client.clone(), &ns);
    deployments
        .delete("etcd-restore-operator", &DeleteParams::default())
        .await
        .unwrap();

    // A one-member source cluster with keys.
    let mut source = example("example-etcd-cluster.yaml");
    source["metadata"]["name"] = json!("source");
    source["spec"] = json!({"size": 1, "repository": "localhost/etcd", "version": "3.5.33",
        "pod": {"persistentVolumeClaimSpec": {"accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "64Mi"}}}}});
    let source: EtcdCluster = serde_json::from_value(source).unwrap();
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    clusters
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    wait_until(&clusters, "source", "1 ready member", 300, converged(1))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let seed = pods
        .list(&ListParams::default().labels("etcd_cluster=source"))
        .await
        .unwrap();
    let mut etcd = client_of(&seed.items[0]).await;
    for i in 0..300 {
        etcd.put(format!("/registry/copy-{i:03}"), "v", None)
            .await
            .unwrap();
    }

    // A Local backup on claim `backups`, written by the etcd-backup image.
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "backups"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}},
    }))
    .unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &ns);
    claims.create(&PostParams::default(), &claim).await.unwrap();
    let save = [
        "save",
        "--endpoints",
        "http://source-client:2379",
        "--to",
        "file:///var/lib/etcd-backup/etcd.db",
    ];
    run_backup_pod(&kube, &ns, &save).await;
    // And a snapshot as stock etcdctl saves it: no manifest beside it, so nothing but the
    // snapshot itself says its revision.
    let revision = etcd
        .get(
            "/registry/",
            Some(
                etcd_client::GetOptions::new()
                    .with_count_only()
                    .with_prefix(),
            ),
        )
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    let raw = json!({
        "metadata": {"name": "raw-save"},
        "spec": {"restartPolicy": "Never",
            "containers": [{"name": "etcdctl", "image": "localhost/etcd:v3.5.33",
                "imagePullPolicy": "Never", "command": ["etcdctl", "--endpoints",
                "http://source-client:2379", "snapshot", "save", "/var/lib/etcd-backup/raw.db"],
                "volumeMounts": [{"name": "backups", "mountPath": "/var/lib/etcd-backup"}]}],
            "volumes": [{"name": "backups", "persistentVolumeClaim": {"claimName": "backups"}}]},
    });
    testbed::cluster::run_once(&pods, raw, 120).await;

    // An S3 backup by the EtcdBackup operator, named by backupRef, encrypted: the backup side
    // holds only the public key, the restore gets the identity as a mounted file.
    let secrets: Api<Secret> = Api::namespaced(kube.client.clone(), &ns);
    let (identity, recipient) = backup_storage::encryption::Identity::generate();
    for secret in [
        garage.aws_secret("aws"),
        json!({"metadata": {"name": "backup-recipients"},
               "stringData": {"recipients.txt": format!("# restore key\n{recipient}\n")}}),
        json!({"metadata": {"name": "restore-key"}, "stringData": {"identity.txt": identity}}),
    ] {
        let secret: Secret = serde_json::from_value(secret).unwrap();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
    let backup: EtcdBackup = serde_json::from_value(json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
        "metadata": {"name": "nightly"},
        "spec": {"etcdEndpoints": ["http://source-client:2379"], "storageType": "S3",
            "s3": {"path": format!("{}/copies/etcd.backup", garage.bucket), "awsSecret": "aws",
                   "endpoint": garage.endpoint, "forcePathStyle": true},
            "encryption": {"recipientsSecret": {"name": "backup-recipients", "key": "recipients.txt"}}},
    }))
    .unwrap();
    let backups: Api<EtcdBackup> = Api::namespaced(kube.client.clone(), &ns);
    backups
        .create(&PostParams::default(), &backup)
        .await
        .unwrap();
    let succeeded = |b: &EtcdBackup| b.status.as_ref().is_some_and(|s| s.succeeded);
    let nightly = wait_until(&backups, "nightly", "the backup", 120, succeeded)
        .await
        .unwrap();
    let record = nightly.status.unwrap().last_backup.unwrap();
    assert_eq!(record.encrypted_to, vec![recipient.clone()]);
    // An encrypted object's manifest records its CRC32C (age authenticates the content).
    assert_eq!(record.sha256, None);
    assert_eq!(
        record.crc32c.as_ref().map(String::len),
        Some(8),
        "{record:?}"
    );

    // Two restores into clusters that do not exist yet.
    let restores: Api<EtcdRestore> = Api::namespaced(kube.client.clone(), &ns);
    let restore = |name: &str, size: i32, version: &str, source: Value| -> EtcdRestore {
        let mut spec = json!({"etcdCluster": {"name": name},
            "newCluster": {"size": size, "version": version, "repository": "localhost/etcd", "storage": "64Mi"}});
        for (k, v) in source.as_object().unwrap() {
            spec[k] = v.clone();
        }
        serde_json::from_value(json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdRestore",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap()
    };
    let local = restore(
        "copy-local",
        3,
        "3.5.33",
        json!({"backupStorageType": "Local",
        "local": {"path": "etcd.db", "persistentVolumeClaim": "backups"}}),
    );
    // This one keeps the fetched snapshot in memory (tmpfs) instead of on the node's disk, and
    // moves the 3.5 backup to the newest line (how a cluster of an unsupported or old version
    // moves: docs/migrating-from-coreos.md).
    let by_ref = restore(
        "copy-ref",
        1,
        "3.7.3",
        json!({"backupStorageType": "S3", "backupRef": {"name": "nightly"},
               "scratchMedium": "Memory",
               "decryption": {"identitySecret": {"name": "restore-key", "key": "identity.txt"}}}),
    );
    // Without the identity, the encrypted backup is refused before anything is done.
    let no_key = restore(
        "copy-no-key",
        1,
        "3.7.3",
        json!({"backupStorageType": "S3", "backupRef": {"name": "nightly"}}),
    );
    restores
        .create(&PostParams::default(), &local)
        .await
        .unwrap();
    restores
        .create(&PostParams::default(), &by_ref)
        .await
        .unwrap();
    restores
        .create(&PostParams::default(), &no_key)
        .await
        .unwrap();

    // The operator is killed once the members' restore pods are being made (the plan
    // recorded, the snapshot not yet verified), then started again.
    let operator = RestoreOperator::start(&kube, &ns);
    let planned = |r: &EtcdRestore| r.status.as_ref().is_some_and(|s| s.plan.is_some());
    let planned = wait_until(&restores, "copy-local", "the plan recorded", 120, planned)
        .await
        .unwrap();
    let first = planned.status.unwrap().plan.unwrap().members[0].clone();
    let restoring = format!("{first}-restore");
    let local_pod = wait_until(&pods, &restoring, "a member's restore pod", 120, |_| true)
        .await
        .unwrap();
    drop(operator);
    let status = restores.get_status("copy-local").await.unwrap().status;
    assert!(
        status.unwrap().snapshot.is_none(),
        "killed before the members' fetches verified the snapshot"
    );
    let _operator = RestoreOperator::start(&kube, &ns);
    // copy-ref's restore pod keeps the fetched snapshot in memory, copy-local's on the node's
    // disk (read before they succeed: success deletes the restore pods).
    let planned = |r: &EtcdRestore| r.status.as_ref().is_some_and(|s| s.plan.is_some());
    let planned = wait_until(&restores, "copy-ref", "the plan recorded", 120, planned)
        .await
        .unwrap();
    let member = planned.status.unwrap().plan.unwrap().members[0].clone();
    let ref_pod = wait_until(
        &pods,
        &format!("{member}-restore"),
        "its restore pod",
        120,
        |_| true,
    )
    .await
    .unwrap();
    let scratch_medium = |pod: Pod| {
        let volumes = pod.spec.unwrap().volumes.unwrap();
        let scratch = volumes.into_iter().find(|v| v.name == "snapshot").unwrap();
        scratch.empty_dir.unwrap().medium
    };
    assert_eq!(scratch_medium(ref_pod).as_deref(), Some("Memory"));
    assert_eq!(scratch_medium(local_pod), None);
    for name in ["copy-local", "copy-ref"] {
        let done = wait_until(&restores, name, "the restore to finish", 300, finished)
            .await
            .unwrap();
        let status = done.status.unwrap();
        assert!(status.succeeded, "{name}: {status:?}");
        assert_eq!(keys_of(&kube, &ns, name).await, 300, "{name}");
    }
    let refused = wait_until(&restores, "copy-no-key", "the refusal", 60, finished)
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(!refused.succeeded && refused.plan.is_none(), "{refused:?}");
    let reason = refused.reason.unwrap_or_default();
    assert!(
        reason.starts_with("NoUsableIdentity: ")
            && reason.contains("no identity (private key) is named"),
        "{reason}"
    );
    assert!(clusters.get_opt("copy-no-key").await.unwrap().is_none());
    let local_status = restores
        .get_status("copy-local")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(
        local_status.source.as_deref(),
        Some("file:///var/lib/etcd-backup/etcd.db")
    );
    let ref_status = restores
        .get_status("copy-ref")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(
        ref_status.source,
        Some(format!("s3://{}/copies/etcd.backup", garage.bucket))
    );
    // Every member's fetch reported the CRC32C the backup recorded.
    let snapshot = ref_status
        .snapshot
        .clone()
        .expect("the verified snapshot is recorded");
    assert_eq!(
        (snapshot.sha256, snapshot.crc32c),
        (None, record.crc32c.clone())
    );
    // The EtcdCluster operator runs both: 3 and 1 ready members, Converged.
    wait_until(
        &clusters,
        "copy-local",
        "3 ready members",
        120,
        converged(3),
    )
    .await
    .unwrap();
    wait_until(&clusters, "copy-ref", "1 ready member", 120, converged(1))
        .await
        .unwrap();

    // A restore of the running source cluster with a key that is not a recipient of the
    // encrypted backup: the members' fetches find it (the operator never reads the private
    // key), the restore fails as NoUsableIdentity (the key is wrong, the backup was not
    // judged), and the cluster is given back untouched: the same member pod, every key, not
    // paused, not held, no claim of the restore left.
    let (stranger, _) = backup_storage::encryption::Identity::generate();
    let secret: Secret = serde_json::from_value(
        json!({"metadata": {"name": "stranger-key"}, "stringData": {"identity.txt": stranger}}),
    )
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let member_before = member_uids(&pods, "source").await;
    let reason = refused_restore_of_nightly(&restores, "stranger-key").await;
    assert!(
        reason.starts_with("NoUsableIdentity: ") && reason.contains("not among its recipients"),
        "{reason}"
    );
    assert_given_back(&clusters.get("source").await.unwrap());
    assert_eq!(
        member_uids(&pods, "source").await,
        member_before,
        "the member pod was not replaced"
    );
    let staged = ListParams::default().labels("etcd_restore=source");
    assert!(claims.list(&staged).await.unwrap().items.is_empty());
    assert_eq!(keys_of(&kube, &ns, "source").await, 300);

    // copy-ref proved it restored what its EtcdBackup recorded: the snapshot's own sha256
    // pinned with the plan, and its member serving the recorded key space (count and digest).
    let expected = ref_status
        .expected_backup
        .clone()
        .expect("pinned with the plan");
    assert!(record.db_sha256.is_some(), "{record:?}");
    assert_eq!(expected.db_sha256, record.db_sha256);
    let recorded_contents = record.contents.clone().expect("contents recorded");
    let served = ref_status
        .restored_contents
        .clone()
        .expect("the restored key space was compared with the record");
    assert_eq!(
        (served.key_count, Some(served.content_sha256)),
        (
            recorded_contents.key_count,
            recorded_contents.content_sha256.clone()
        )
    );

    // Someone who can write the bucket (with the backup side's credentials) puts another valid
    // snapshot in place of nightly's backup: one of copy-local after its keys were deleted,
    // encrypted to the same public key, with its own manifest. Every fetch verifies it; a
    // restore by backupRef still refuses it, before anything is touched, because it is not the
    // backup the EtcdBackup recorded.
    restores
        .delete("source", &DeleteParams::default())
        .await
        .unwrap();
    // Gone before the next one of the same name is made (a failed restore holds nothing).
    let mut gone = false;
    for _ in 0..120 {
        if restores.get_opt("source").await.unwrap().is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert!(gone, "the failed EtcdRestore was not deleted");
    let local_member = member_pods_of(&pods, "copy-local").await;
    let mut emptied = client_of(&local_member).await;
    let everything = etcd_client::DeleteOptions::new().with_prefix();
    emptied
        .delete("/registry/", Some(everything))
        .await
        .unwrap();
    let intruder: EtcdBackup = serde_json::from_value(json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
        "metadata": {"name": "intruder"},
        "spec": {"etcdEndpoints": ["http://copy-local-client:2379"], "storageType": "S3",
            "s3": {"path": format!("{}/copies/intruder.backup", garage.bucket), "awsSecret": "aws",
                   "endpoint": garage.endpoint, "forcePathStyle": true},
            "encryption": {"recipientsSecret": {"name": "backup-recipients", "key": "recipients.txt"}}},
    }))
    .unwrap();
    backups
        .create(&PostParams::default(), &intruder)
        .await
        .unwrap();
    wait_until(&backups, "intruder", "the other backup", 120, succeeded)
        .await
        .unwrap();
    for suffix in ["", backup_storage::MANIFEST_SUFFIX] {
        let from = format!("s3://{}/copies/intruder.backup{suffix}", garage.bucket);
        let to = format!("s3://{}/copies/etcd.backup{suffix}", garage.bucket);
        let copied = garage.aws(&["s3", "cp", &from, &to]);
        assert!(copied.status.success(), "{copied:?}");
    }
    let member_before = member_uids(&pods, "source").await;
    let reason = refused_restore_of_nightly(&restores, "restore-key").await;
    assert!(
        reason.starts_with("BackupNotAsRecorded: ")
            && reason.contains("snapshot sha256")
            && reason.contains("no member or volume of the cluster was touched"),
        "{reason}"
    );
    assert_given_back(&clusters.get("source").await.unwrap());
    assert_eq!(member_uids(&pods, "source").await, member_before);
    assert!(claims.list(&staged).await.unwrap().items.is_empty());
    assert_eq!(keys_of(&kube, &ns, "source").await, 300);

    // The etcdctl snapshot, without a manifest: checked against its own revision, which the
    // restore tool reports (and the restored member serves it, bumped).
    let raw = restore(
        "copy-raw",
        1,
        "3.5.33",
        json!({"backupStorageType": "Local",
        "local": {"path": "raw.db", "persistentVolumeClaim": "backups"}}),
    );
    restores.create(&PostParams::default(), &raw).await.unwrap();
    let done = wait_until(&restores, "copy-raw", "the raw restore", 300, finished)
        .await
        .unwrap();
    let status = done.status.unwrap();
    assert!(status.succeeded, "{status:?}");
    assert_eq!(status.snapshot.and_then(|s| s.revision), Some(revision));
    assert!(status.restored_revision.unwrap() >= revision + 1_000_000_000);
    assert_eq!(keys_of(&kube, &ns, "copy-raw").await, 300);

    // A Local backup by the EtcdBackup operator on its own claim (no persistentVolumeClaim in
    // the EtcdBackup), the claim mounted at a non-default --local-volume-dir: restored by
    // backupRef from the claim and path the operator recorded.
    let mounted = json!({"spec": {"template": {"spec": {
        "securityContext": {"fsGroup": 65532},
        "volumes": [{"name": "local-backups", "persistentVolumeClaim": {"claimName": "backups"}}],
        "containers": [{"name": "operator",
            "env": [{"name": "LOCAL_VOLUME_CLAIM", "value": format!("{ns}/backups")},
                    {"name": "LOCAL_VOLUME_DIR", "value": "/srv/backups"}],
            "volumeMounts": [{"name": "local-backups", "mountPath": "/srv/backups"}]}]}}}});
    deployments
        .patch(
            "etcd-backup-operator",
            &PatchParams::default(),
            &Patch::Strategic(mounted),
        )
        .await
        .unwrap();
    let rolled_out = |d: &Deployment| {
        let status = d.status.clone().unwrap_or_default();
        status.observed_generation >= d.metadata.generation
            && status.updated_replicas == Some(1)
            && status.ready_replicas == Some(1)
            && status.replicas == Some(1)
    };
    wait_until(
        &deployments,
        "etcd-backup-operator",
        "the rollout",
        180,
        rolled_out,
    )
    .await
    .unwrap();
    let on_claim: EtcdBackup = serde_json::from_value(json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
        "metadata": {"name": "on-claim"},
        "spec": {"etcdEndpoints": ["http://source-client:2379"], "storageType": "Local",
            "local": {"path": "/var/lib/etcd-backup/operator/etcd.db"}},
    }))
    .unwrap();
    backups
        .create(&PostParams::default(), &on_claim)
        .await
        .unwrap();
    let on_claim = wait_until(&backups, "on-claim", "the Local backup", 180, succeeded)
        .await
        .unwrap();
    let record = on_claim.status.unwrap().last_backup.unwrap();
    assert_eq!(record.object_key, "file:///srv/backups/operator/etcd.db");
    let local_volume = record.local_volume.unwrap();
    assert_eq!(
        (local_volume.claim.as_str(), local_volume.path.as_str()),
        ("backups", "operator/etcd.db")
    );
    let from_claim = restore(
        "copy-claim",
        1,
        "3.5.33",
        json!({"backupStorageType": "Local", "backupRef": {"name": "on-claim"}}),
    );
    restores
        .create(&PostParams::default(), &from_claim)
        .await
        .unwrap();
    let done = wait_until(
        &restores,
        "copy-claim",
        "the restore by backupRef",
        300,
        finished,
    )
    .await
    .unwrap();
    let status = done.status.unwrap();
    assert!(status.succeeded, "{status:?}");
    assert_eq!(keys_of(&kube, &ns, "copy-claim").await, 300);
    kube.delete_namespace(&ns).await.unwrap();
}

/// A restore to a point on the bed: the backup operator archives every change of a running
/// three-member EtcdCluster (`spec.continuous`); keys are written, then damaged (a prefix
/// deleted, a bad key written); an EtcdRestore with `backupRef` and `pointInTime` at the
/// revision before the damage restores the running cluster from the archive alone (each
/// member's restore pod replays it, and the three agree on the key space): the members serve
/// the keys as they were at that revision, without the damage, and the key space is the one
/// the runbook's `point-in-time` command computes from the same archive.
#[tokio::test]
async fn a_restore_to_a_point_brings_the_cluster_back_to_before_the_damage() {
    use etcd_snapshot::changes::{PointInTimeOptions, Target, restore_to_point};

    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-pitr").await;
    let garage = Garage::start_on(&host_address()).await.unwrap();
    install_operators(&kube, &ns).await;
    let mut cluster = example("example-etcd-cluster.yaml");
    cluster["spec"]["size"] = json!(3);
    cluster["spec"]["repository"] = json!("localhost/etcd");
    cluster["spec"]["version"] = json!("3.7.3");
    cluster["spec"]["pod"] = json!({"persistentVolumeClaimSpec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}});
    let cluster: EtcdCluster = serde_json::from_value(cluster).unwrap();
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    wait_until(&clusters, CLUSTER, "3 ready members", 300, converged(3))
        .await
        .unwrap();

    // The scheduled EtcdBackup with its continuous archive, through the client Service.
    let secret: Secret = serde_json::from_value(garage.aws_secret("aws")).unwrap();
    Api::<Secret>::namespaced(kube.client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let base = "pitr/etcd.backup";
    let backup: EtcdBackup = serde_json::from_value(json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2",
        "kind": "EtcdBackup",
        "metadata": {"name": "archived"},
        "spec": {
            "etcdEndpoints": [format!("http://{CLUSTER}-client:2379")],
            "storageType": "S3",
            "backupPolicy": {"backupIntervalInSecond": 3600, "maxBackups": 2},
            "s3": {"path": format!("{}/{base}", garage.bucket), "awsSecret": "aws",
                   "endpoint": garage.endpoint, "forcePathStyle": true},
            "continuous": {"segmentSeconds": 1}
        }
    }))
    .unwrap();
    let backups: Api<EtcdBackup> = Api::namespaced(kube.client.clone(), &ns);
    backups
        .create(&PostParams::default(), &backup)
        .await
        .unwrap();
    let archived_through = |b: &EtcdBackup| {
        b.status
            .as_ref()
            .and_then(|s| s.continuous.as_ref())
            .and_then(|c| c.archived_through_revision)
    };
    wait_until(&backups, "archived", "the archive running", 120, move |b| {
        archived_through(b).is_some()
    })
    .await
    .unwrap();

    // Keys, then the damage.
    let mut etcd = client_of(&member_pods(&kube, &ns).await[0]).await;
    for i in 0..50 {
        etcd.put(format!("/app/key-{i:02}"), format!("value-{i}"), None)
            .await
            .unwrap();
    }
    let before_damage = etcd.put("/app/key-00", "updated", None).await.unwrap();
    let point = before_damage.header().unwrap().revision();
    let prefix = etcd_client::DeleteOptions::new().with_prefix();
    etcd.delete("/app/", Some(prefix)).await.unwrap();
    let damage = etcd.put("/app/bad", "x", None).await.unwrap();
    let damage = damage.header().unwrap().revision();
    wait_until(&backups, "archived", "the damage archived", 120, move |b| {
        archived_through(b) >= Some(damage)
    })
    .await
    .unwrap();

    let restores: Api<EtcdRestore> = Api::namespaced(kube.client.clone(), &ns);
    create_restore(
        &restores,
        Value::Null,
        json!({"backupRef": {"name": "archived"}, "pointInTime": {"revision": point}}),
    )
    .await;
    let done = wait_until(&restores, CLUSTER, "the restore to a point", 420, finished)
        .await
        .unwrap();
    let status = done.status.unwrap();
    assert!(status.succeeded, "{status:?}");
    let snapshot = status.snapshot.clone().unwrap();
    let replayed = snapshot.key_space.clone().expect("the replayed key space");
    assert_eq!((snapshot.revision, replayed.revision), (Some(point), point));
    // Read at the bumped revision, the members serve the replayed key space.
    let served = status
        .restored_contents
        .clone()
        .expect("the served key space");
    assert_eq!(
        (served.key_count, &served.content_sha256),
        (replayed.key_count, &replayed.content_sha256),
        "{status:?}"
    );

    // The same point from the same archive by the runbook's command: the same key space.
    let store = garage_store(&garage, base).await;
    let scratch = tempfile::tempdir().unwrap();
    let options = PointInTimeOptions {
        scratch: etcd_snapshot::DrillOptions {
            etcd_bin_dir: testbed::etcd_tool("etcd")
                .parent()
                .map(std::path::Path::to_path_buf),
            ..Default::default()
        },
        cluster_id: None,
    };
    let file = scratch.path().join("at-point.db");
    let report = restore_to_point(&store, base, Target::Revision(point), None, &file, &options)
        .await
        .unwrap();
    assert_eq!(
        (report.contents.key_count, report.contents.content_sha256),
        (replayed.key_count, Some(replayed.content_sha256.clone()))
    );

    let restored = member_pods(&kube, &ns).await;
    assert_eq!(restored.iter().filter(|p| ready(p)).count(), 3);
    let mut etcd = client_of(&restored[0]).await;
    let all = etcd
        .get("/app/", Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .unwrap();
    assert_eq!(
        all.kvs().len(),
        50,
        "the keys as they were before the damage"
    );
    assert!(
        all.kvs()
            .iter()
            .all(|kv| kv.key_str().unwrap() != "/app/bad")
    );
    let first = etcd.get("/app/key-00", None).await.unwrap();
    assert_eq!(first.kvs()[0].value_str().unwrap(), "updated");
    kube.delete_namespace(&ns).await.unwrap();
}

/// Backups in Google Cloud Storage and Azure Blob Storage (fake-gcs-server and Azurite, on the
/// bed's host address), restored in pods: from GCS by `backupRef` (the restore pods mount the
/// EtcdBackup's `gcpSecret`), from Azure by a coreos `abs` block (its `absSecret`). Each restore
/// succeeds only with every member serving the backup's keys and not the key written after it.
#[tokio::test]
async fn gcs_and_abs_backups_are_restored_in_pods() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-restore-clouds").await;
    let gcs = testbed::FakeGcs::start_on(&host_address()).await.unwrap();
    let azurite = testbed::Azurite::start_on(&host_address()).await.unwrap();
    install_operators(&kube, &ns).await;
    testbed::kube::create_secret(&kube.client, &ns, "gcp", &[("access-token", "emulator")])
        .await
        .unwrap();
    testbed::kube::create_secret(&kube.client, &ns, "abs", &azurite.coreos_secret())
        .await
        .unwrap();

    let mut cluster = example("example-etcd-cluster.yaml");
    cluster["spec"] = json!({"size": 1, "repository": "localhost/etcd", "version": "3.7.3",
        "pod": {"persistentVolumeClaimSpec": {"accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "64Mi"}}}}});
    let cluster: EtcdCluster = serde_json::from_value(cluster).unwrap();
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    wait_until(&clusters, CLUSTER, "1 ready member", 300, converged(1))
        .await
        .unwrap();
    let mut etcd = client_of(&member_pods(&kube, &ns).await[0]).await;
    for i in 0..200 {
        etcd.put(format!("/registry/cloud-{i:03}"), "v", None)
            .await
            .unwrap();
    }

    // One-shot backups to both stores, by the EtcdBackup operator in the bed, each drilled in
    // a pod that reads it with the same Secret.
    let endpoint = format!("http://{CLUSTER}-client.{ns}.svc:2379");
    let drill = json!({"etcdRepository": "localhost/etcd", "timeoutInSecond": 300});
    let backups: Api<EtcdBackup> = Api::namespaced(kube.client.clone(), &ns);
    for backup in [
        json!({"metadata": {"name": "to-gcs"}, "spec": {"etcdEndpoints": [endpoint],
            "storageType": "GCS", "drill": drill, "gcs": {"path": format!("{}/etcd/cloud.backup", gcs.bucket),
            "gcpSecret": "gcp", "endpoint": gcs.endpoint}}}),
        json!({"metadata": {"name": "to-abs"}, "spec": {"etcdEndpoints": [endpoint],
            "storageType": "ABS", "drill": drill, "abs": {"path": format!("{}/etcd/cloud.backup", azurite.container),
            "absSecret": "abs", "endpoint": azurite.endpoint}}}),
    ] {
        let mut backup = backup;
        backup["apiVersion"] = json!("etcd.database.coreos.com/v1beta2");
        backup["kind"] = json!("EtcdBackup");
        let backup: EtcdBackup = serde_json::from_value(backup).unwrap();
        backups
            .create(&PostParams::default(), &backup)
            .await
            .unwrap();
        let drilled = |b: &EtcdBackup| {
            b.status
                .as_ref()
                .and_then(|s| s.last_drill.as_ref())
                .is_some_and(|d| d.result != etcd_api::DrillResult::Running)
        };
        let name = backup.name_any();
        let done = wait_until(&backups, &name, "the backup and its drill", 300, drilled)
            .await
            .unwrap();
        let status = done.status.unwrap();
        assert!(status.succeeded, "{name}: {status:?}");
        let drill = status.last_drill.unwrap();
        assert_eq!(
            drill.result,
            etcd_api::DrillResult::Succeeded,
            "{name}: {drill:?}"
        );
    }
    etcd.put("/registry/after-the-backups", "v", None)
        .await
        .unwrap();

    let restores: Api<EtcdRestore> = Api::namespaced(kube.client.clone(), &ns);
    let count_only = etcd_client::GetOptions::new()
        .with_prefix()
        .with_count_only();
    for (store, spec) in [
        (
            "GCS",
            json!({"backupStorageType": "GCS", "backupRef": {"name": "to-gcs"}}),
        ),
        (
            "ABS",
            json!({"backupStorageType": "ABS", "abs": {
                "path": format!("{}/etcd/cloud.backup", azurite.container),
                "absSecret": "abs", "endpoint": azurite.endpoint}}),
        ),
    ] {
        let mut restore = example("etcd-restore.yaml");
        restore["spec"] = json!({"etcdCluster": {"name": CLUSTER}});
        json_patch::merge(&mut restore["spec"], &spec);
        let restore: EtcdRestore = serde_json::from_value(restore).unwrap();
        restores
            .create(&PostParams::default(), &restore)
            .await
            .unwrap();
        let done = wait_until(&restores, CLUSTER, "the restore", 300, finished)
            .await
            .unwrap();
        let status = done.status.unwrap();
        assert!(status.succeeded, "{store}: {status:?}");
        for pod in member_pods(&kube, &ns).await {
            let mut etcd = client_of(&pod).await;
            let keys = etcd
                .get("/registry/cloud-", Some(count_only.clone()))
                .await
                .unwrap();
            assert_eq!(keys.count(), 200, "{store}: {}", pod.name_any());
            let after = etcd.get("/registry/after-the-backups", None).await.unwrap();
            assert!(
                after.kvs().is_empty(),
                "{store}: a key written after the backup"
            );
        }
        delete_restore(&restores).await;
        // Written again, so the next restore has something to take away.
        let mut etcd = client_of(&member_pods(&kube, &ns).await[0]).await;
        etcd.put("/registry/after-the-backups", "v", None)
            .await
            .unwrap();
    }
    kube.delete_namespace(&ns).await.unwrap();
}
