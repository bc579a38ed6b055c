//! A lost zone on the bed of three nodes: two of three nodes powered off, quorum lost, and the
//! cluster (TLS, or plain) recovered from the surviving member (an EtcdRestore with `fromSurvivor`) with every
//! acknowledged write, by the EtcdCluster operator (a process here) and the restore operator
//! (in the cluster, on the surviving node, from its image and shipped RBAC). Ignored in a plain
//! `cargo test`; `e2e/test.sh` runs it with `-- --ignored three_nodes`.

use super::three_nodes::{
    FaultTest, any_member_client, any_member_client_with, create_converged, member_on,
};
use super::*;
use etcd_api::EtcdRestore;
use k8s_openapi::api::apps::v1::Deployment;
use std::time::{Duration, Instant};

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/namespaced");
const CLUSTER: &str = "example-etcd-cluster";

/// The restore operator from the all-in-one overlay, alone, pinned to `node` (the one that
/// stays up), and ready.
async fn restore_operator_on(kube: &KubeTestbed, ns: &str, node: &str) {
    let mut manifests = testbed::cluster::deploy_manifests(DEPLOY.as_ref(), ns).unwrap();
    manifests.retain(|d| {
        d["kind"] != "CustomResourceDefinition"
            && d["kind"] != "Namespace"
            && d["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("etcd-restore-operator"))
    });
    for doc in manifests.iter_mut().filter(|d| d["kind"] == "Deployment") {
        doc["spec"]["replicas"] = json!(1);
        doc["spec"]["template"]["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    }
    kube.apply(&manifests, ns).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(kube.client.clone(), ns);
    let ready = |d: &Deployment| d.status.as_ref().and_then(|s| s.ready_replicas) == Some(1);
    wait_until(
        &deployments,
        "etcd-restore-operator",
        "a ready restore operator",
        180,
        ready,
    )
    .await
    .unwrap();
}

/// Scales the restore operator's Deployment in `ns` to `replicas`.
async fn scale_restore_operator(kube: &KubeTestbed, ns: &str, replicas: i32) {
    let deployments: Api<Deployment> = Api::namespaced(kube.client.clone(), ns);
    let scale = json!({"spec": {"replicas": replicas}});
    deployments
        .patch(
            "etcd-restore-operator",
            &PatchParams::default(),
            &Patch::Merge(&scale),
        )
        .await
        .unwrap();
}

/// How many `QuorumLossRecoveryStarted` Warnings were sent in `ns`.
async fn recoveries_started(kube: &KubeTestbed, ns: &str) -> i32 {
    events(kube, ns)
        .await
        .iter()
        .filter(|e| e.reason.as_deref() == Some("QuorumLossRecoveryStarted"))
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

/// The restore has succeeded or failed.
fn ended(r: &EtcdRestore) -> bool {
    r.status
        .as_ref()
        .and_then(|s| s.phase)
        .is_some_and(|p| p.is_terminal())
}

fn available_reason(c: &EtcdCluster) -> Option<String> {
    condition_reason(c, "Available")
}

/// How many keys the cluster holds under `key/` now (what a backup taken now would hold of a
/// [`Writer`]'s writes).
async fn writes_held(client: &mut etcd_client::Client, key: &str) -> usize {
    let options = etcd_client::GetOptions::new()
        .with_prefix()
        .with_count_only();
    client
        .get(format!("{key}/"), Some(options))
        .await
        .unwrap()
        .count() as usize
}

/// A cluster whose members serve peers and clients over TLS (coreos' static TLS Secrets), nodes
/// node-b and node-c powered off one right after the other (a lost zone) while a client
/// writes every 50 ms: the cluster says `Available=False/QuorumLost`. An EtcdRestore
/// `fromSurvivor` chooses node-a's member (the only one that answers), restores its snapshot into
/// a new one-member cluster at a revision moved forward, keeps every old claim, and the
/// EtcdCluster operator grows it back to 3 once the nodes are back; no acknowledged write is
/// lost, the old pods are gone at once, the old members never come back, and the writes a
/// restore from a backup taken 20 s
/// before the loss would have lost are counted beside it.
/// (Checked: without `fromSurvivor` the restore is refused by the schema, and without the
/// serializable contents reads the survivor's snapshot never finishes: the fetch fails.)
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the bed of three nodes: e2e/test.sh runs it with `-- --ignored three_nodes`"]
async fn a_lost_zone_is_recovered_from_the_survivor_with_every_acknowledged_write() {
    let test = FaultTest::start("zone-lost").await;
    let (kube, ns) = (test.kube.clone(), test.ns.clone());
    let _operator = Operator::start(&kube, &ns);
    restore_operator_on(&kube, &ns, "node-a").await;
    let tls = testbed::cluster::static_tls(&kube, &ns, CLUSTER, true).await;
    let access = Access::tls(&tls, &ns);
    let mut cluster = example(3);
    cluster.spec.version = Some("3.6.16".into());
    cluster.spec.tls = serde_json::from_value(json!({"static": {
        "member": {"peerSecret": "etcd-peer-tls", "serverSecret": "etcd-server-tls"},
        "operatorSecret": "etcd-client-tls"}}))
    .unwrap();
    let clusters = create_converged(&kube, &ns, &cluster).await;
    let on = member_on(&kube, &ns).await;
    assert_eq!(on.len(), 3, "one member per node: {on:?}");
    let survivor = on["node-a"].clone();
    let old_members: Vec<String> = on.values().cloned().collect();

    let writer = Writer::start_with(&kube, &ns, "zone", access.clone()).await;
    // "The newest backup": what the cluster holds 2 s in; everything acknowledged after it is
    // what a restore from that backup would lose.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut client = any_member_client_with(&kube, &ns, &access).await;
    let held_by_backup = writes_held(&mut client, "zone").await;
    tokio::time::sleep(Duration::from_secs(20)).await;

    let lost_at = Instant::now();
    test.bed.node_down("node-b").await.unwrap();
    test.bed.node_down("node-c").await.unwrap();
    let quorum_lost = |c: &EtcdCluster| available_reason(c).as_deref() == Some("QuorumLost");
    wait_until(&clusters, CLUSTER, "QuorumLost", 240, quorum_lost)
        .await
        .unwrap();
    eprintln!("QuorumLost {:.0?} after the zone went", lost_at.elapsed());

    let restores: Api<EtcdRestore> = Api::namespaced(kube.client.clone(), &ns);
    let restore: EtcdRestore = serde_json::from_value(json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdRestore",
        "metadata": {"name": CLUSTER},
        "spec": {"etcdCluster": {"name": CLUSTER}, "fromSurvivor": {}},
    }))
    .unwrap();
    let asked = Instant::now();
    restores
        .create(&PostParams::default(), &restore)
        .await
        .unwrap();
    wait_until(&restores, CLUSTER, "the recovery ended", 420, ended)
        .await
        .unwrap();
    let recovered = asked.elapsed();
    let status = restores.get(CLUSTER).await.unwrap().status.unwrap();
    assert!(status.succeeded, "{status:#?}");
    let plan = status.plan.clone().unwrap();
    let chosen = plan.survivor.clone().unwrap();
    assert_eq!(chosen.member, survivor, "{plan:#?}");
    assert_eq!(plan.members.len(), 1, "{plan:#?}");
    let snapshot = status.snapshot.clone().unwrap();
    let revision = status.restored_revision.unwrap();
    assert!(
        revision > snapshot.revision.unwrap() + 100_000,
        "the revision was not moved forward: {status:#?}"
    );
    eprintln!(
        "recovered from {survivor} (term {}, index {}, revision {}) in {recovered:.0?}: \
         restored revision {revision}",
        chosen.raft_term, chosen.raft_index, chosen.revision
    );

    // Writable again: the writer's next acknowledged writes go to the recovered member.
    let mut client = member_client_with(&kube, &ns, &plan.members[0], &access).await;
    let before = writes_held(&mut client, "zone").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while writes_held(&mut client, "zone").await <= before {
        assert!(
            Instant::now() < deadline,
            "no write acknowledged after the recovery"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let writable = lost_at.elapsed();
    let writes = writer.stop_counted().await;
    let missing = missing_writes(&mut client, "zone", &writes.acknowledged).await;
    let lost_by_backup = writes.acknowledged.len().saturating_sub(held_by_backup);
    eprintln!(
        "writes: {} acknowledged, {} failed, longest gap {:.1?}; lost by the recovery from the \
         survivor: {}; a restore from the backup taken 20 s before the loss would lose {}; \
         writable again {writable:.0?} after the loss ({recovered:.0?} after the EtcdRestore)",
        writes.acknowledged.len(),
        writes.failed,
        writes.longest_gap,
        missing.len(),
        lost_by_backup
    );
    assert!(writes.acknowledged.len() > 300, "{writes:?}");
    assert!(missing.is_empty(), "acknowledged writes lost: {missing:?}");
    assert!(lost_by_backup > 200, "{lost_by_backup}");

    // Every old member's claim is kept (a lost member may hold what the survivor missed).
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &ns);
    for old in &old_members {
        let kept = claims.get(old).await.unwrap();
        assert!(kept.metadata.deletion_timestamp.is_none(), "{old}");
        assert_eq!(
            kept.labels()
                .get("etcd.database.coreos.com/detached-from")
                .map(String::as_str),
            Some(CLUSTER),
            "{old}"
        );
    }

    // The old pods went at once, their nodes still down (deleted with grace period 0).
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    for old in &old_members {
        assert!(
            pods.get_opt(old).await.unwrap().is_none(),
            "{old}'s pod is left"
        );
    }

    // The nodes come back: the old members do not; the cluster grows back to 3.
    test.bed.node_up("node-b").await.unwrap();
    test.bed.node_up("node-c").await.unwrap();
    test.bed.wait_node("node-b", true, 180).await.unwrap();
    test.bed.wait_node("node-c", true, 180).await.unwrap();
    wait_until(&clusters, CLUSTER, "3 members again", 420, converged(3))
        .await
        .unwrap();
    let mut client = any_member_client_with(&kube, &ns, &access).await;
    let members = client.member_list().await.unwrap();
    let names: Vec<&str> = members.members().iter().map(|m| m.name()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    for old in &old_members {
        assert!(!names.contains(&old.as_str()), "{old} rejoined: {names:?}");
    }
    // Still TLS between the members and to clients after the recovery.
    for member in members.members() {
        let urls = member.peer_urls().iter().chain(member.client_urls());
        assert!(
            urls.clone().all(|u| u.starts_with("https://")),
            "{}: {:?}",
            member.name(),
            urls.collect::<Vec<_>>()
        );
    }
    let missing = missing_writes(&mut client, "zone", &writes.acknowledged).await;
    assert!(missing.is_empty(), "acknowledged writes lost: {missing:?}");
    kube.delete_namespace(&ns).await.unwrap();
}

/// `spec.quorumLoss: {recovery: FromSurvivor, afterSeconds: 10}`: with node-b and node-c
/// powered off, the operator waits for their NotReady to last 10 s, then makes the EtcdRestore a
/// human would (annotated as its own, a Warning `QuorumLossRecoveryStarted`); killed once it
/// said so, the operator started again makes no second one (one Warning); the restore operator
/// is stopped once the plan is recorded (scaled to 0, the recovery not over) and started again,
/// and finishes it. No acknowledged write
/// is lost, and the cluster grows back to 3 members with the two nodes still down (on node-a,
/// the only node left).
/// (Checked: without the quorum-loss rules nothing is ever recovered and this fails.)
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the bed of three nodes: e2e/test.sh runs it with `-- --ignored three_nodes`"]
async fn a_lost_zone_is_recovered_by_the_operator_itself_across_restarts() {
    let test = FaultTest::start("zone-auto").await;
    let (kube, ns) = (test.kube.clone(), test.ns.clone());
    let operator = Operator::start(&kube, &ns);
    restore_operator_on(&kube, &ns, "node-a").await;
    let mut cluster = example(3);
    cluster.spec.version = Some("3.6.16".into());
    cluster.spec.quorum_loss = Some(
        serde_json::from_value(json!({"recovery": "FromSurvivor", "afterSeconds": 10})).unwrap(),
    );
    let clusters = create_converged(&kube, &ns, &cluster).await;
    let on = member_on(&kube, &ns).await;
    let survivor = on["node-a"].clone();
    let writer = Writer::start(&kube, &ns, "zone-auto").await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let lost_at = Instant::now();
    test.bed.node_down("node-b").await.unwrap();
    test.bed.node_down("node-c").await.unwrap();
    let restores: Api<EtcdRestore> = Api::namespaced(kube.client.clone(), &ns);
    let deadline = Instant::now() + Duration::from_secs(300);
    let made = loop {
        if let Some(made) = restores.get_opt(CLUSTER).await.unwrap() {
            break made;
        }
        assert!(Instant::now() < deadline, "no recovery was started");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!("recovery made {:.0?} after the loss", lost_at.elapsed());
    assert_eq!(
        made.annotations()
            .get("etcd.database.coreos.com/made-for")
            .map(String::as_str),
        Some("quorum-loss")
    );
    assert!(made.spec.from_survivor.is_some());
    // The operator is killed once it said so; a new one must not make another.
    let deadline = Instant::now() + Duration::from_secs(60);
    while recoveries_started(&kube, &ns).await == 0 {
        assert!(
            Instant::now() < deadline,
            "no QuorumLossRecoveryStarted Warning"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(operator);
    let _operator = Operator::start(&kube, &ns);

    // The restore operator stops in the middle of the recovery (the plan recorded, not over).
    let planned = |r: &EtcdRestore| r.status.as_ref().is_some_and(|s| s.plan.is_some());
    wait_until(&restores, CLUSTER, "the plan recorded", 180, planned)
        .await
        .unwrap();
    scale_restore_operator(&kube, &ns, 0).await;
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let operator_pods =
        ListParams::default().labels("app.kubernetes.io/name=etcd-restore-operator");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !pods.list(&operator_pods).await.unwrap().items.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the restore operator did not stop"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let stopped_at = restores.get(CLUSTER).await.unwrap();
    assert!(
        !ended(&stopped_at),
        "the recovery ended before the restore operator stopped"
    );
    scale_restore_operator(&kube, &ns, 1).await;

    wait_until(&restores, CLUSTER, "the recovery ended", 420, ended)
        .await
        .unwrap();
    let status = restores.get(CLUSTER).await.unwrap().status.unwrap();
    assert!(status.succeeded, "{status:#?}");
    assert_eq!(
        status
            .plan
            .as_ref()
            .unwrap()
            .survivor
            .as_ref()
            .unwrap()
            .member,
        survivor
    );
    // Grown back to 3 with node-b and node-c still down.
    wait_until(&clusters, CLUSTER, "3 members on node-a", 420, converged(3))
        .await
        .unwrap();
    let writable = lost_at.elapsed();
    let writes = writer.stop_counted().await;
    let mut client = any_member_client(&kube, &ns).await;
    let missing = missing_writes(&mut client, "zone-auto", &writes.acknowledged).await;
    eprintln!(
        "writes: {} acknowledged, {} failed, longest gap {:.1?}, lost {}; 3 members again \
         {writable:.0?} after the loss",
        writes.acknowledged.len(),
        writes.failed,
        writes.longest_gap,
        missing.len()
    );
    assert!(missing.is_empty(), "acknowledged writes lost: {missing:?}");
    assert_eq!(client.member_list().await.unwrap().members().len(), 3);
    assert_eq!(
        recoveries_started(&kube, &ns).await,
        1,
        "one recovery started"
    );

    test.bed.node_up("node-b").await.unwrap();
    test.bed.node_up("node-c").await.unwrap();
    test.bed.wait_node("node-b", true, 180).await.unwrap();
    test.bed.wait_node("node-c", true, 180).await.unwrap();
    kube.delete_namespace(&ns).await.unwrap();
}
