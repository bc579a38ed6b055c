//! A lost zone on the bed of three nodes: two of three nodes powered off, quorum lost, and the
//! cluster (TLS, or plain) recovered from the surviving member (an EtcdRestore with `fromSurvivor`) with every
//! acknowledged write, by the EtcdCluster operator (a process here) and the restore operator
//! (in the cluster, on the surviving node, from its image and shipped RBAC). Ignored in a plain
//! `cargo test`; `e2e/test.sh` runs it with `-- --ignored three_nodes`.

use super::three_nodes::{
    FaultTest, any_member_client, any_member_client_with, create_converged, kubectl, member_on,
};
use super::*;
use etcd_api::EtcdRestore;
use k8s_openapi::api::apps::v1::Deployment;
use std::time::{Duration, Instant};
use testbed::Garage;

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/namespaced");
const CLUSTER: &str = "example-etcd-cluster";

/// The restore operator from the all-in-one overlay, alone, pinned to `node` (the one that
/// stays up), and ready.
async fn restore_operator_on(kube: &KubeTestbed, ns: &str, node: &str) {
    operator_on(kube, ns, node, "etcd-restore-operator").await
}

/// The operator `name` (its Deployment, ServiceAccount and RBAC) from the all-in-one overlay,
/// alone, one replica pinned to `node`, and ready.
async fn operator_on(kube: &KubeTestbed, ns: &str, node: &str, name: &str) {
    let mut manifests = testbed::cluster::deploy_manifests(DEPLOY.as_ref(), ns).unwrap();
    manifests.retain(|d| {
        d["kind"] != "CustomResourceDefinition"
            && d["kind"] != "Namespace"
            && d["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(name))
    });
    for doc in manifests.iter_mut().filter(|d| d["kind"] == "Deployment") {
        doc["spec"]["replicas"] = json!(1);
        doc["spec"]["template"]["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    }
    kube.apply(&manifests, ns).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(kube.client.clone(), ns);
    let ready = |d: &Deployment| d.status.as_ref().and_then(|s| s.ready_replicas) == Some(1);
    wait_until(&deployments, name, "a ready operator", 180, ready)
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

/// The client URLs of `ns`'s member pods that are ready and not being deleted.
async fn ready_endpoints(kube: &KubeTestbed, ns: &str, access: &Access) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let members = ListParams::default().labels(&format!("etcd_cluster={CLUSTER}"));
    let ready = |p: &Pod| {
        let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
        conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    pods.list(&members)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && ready(p))
        .filter_map(|p| Some(access.url(&p.status?.pod_ip?)))
        .collect()
}

/// A client of `ns`'s ready members (a new connection, 1 s to connect and to answer).
async fn ready_members_client(
    kube: &KubeTestbed,
    ns: &str,
    access: &Access,
) -> Option<etcd_client::Client> {
    let endpoints = ready_endpoints(kube, ns, access).await;
    if endpoints.is_empty() {
        return None;
    }
    let options = access
        .options(Duration::from_secs(1))
        .with_connect_timeout(Duration::from_secs(1));
    etcd_client::Client::connect(&endpoints, Some(options))
        .await
        .ok()
}

/// Writes a probe key to whichever of `ns`'s member pods are ready, a new connection each
/// try, until one accepts it (for at most `seconds`); returns when. Independent of the test's
/// [`Writer`], whose reconnections after a failure add their own delays.
async fn first_accepted_write(
    kube: &KubeTestbed,
    ns: &str,
    access: &Access,
    seconds: u64,
) -> Instant {
    let give_up = Instant::now() + Duration::from_secs(seconds);
    loop {
        if let Some(mut client) = ready_members_client(kube, ns, access).await
            && client.put("probe", "writable", None).await.is_ok()
        {
            return Instant::now();
        }
        assert!(Instant::now() < give_up, "{ns}: no write accepted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates `restore` in `ns` and waits until it ended, for at most `seconds`: its status, the
/// time to the first write a member accepted and the time to its end.
async fn timed_restore(
    kube: &KubeTestbed,
    ns: &str,
    access: &Access,
    restore: serde_json::Value,
    seconds: u64,
) -> (etcd_api::EtcdRestoreStatus, Duration, Duration) {
    let restores: Api<EtcdRestore> = Api::namespaced(kube.client.clone(), ns);
    let restore: EtcdRestore = serde_json::from_value(restore).unwrap();
    let asked = Instant::now();
    restores
        .create(&PostParams::default(), &restore)
        .await
        .unwrap();
    let writable = first_accepted_write(kube, ns, access, seconds).await - asked;
    let left = seconds.saturating_sub(asked.elapsed().as_secs()).max(1);
    wait_until(&restores, CLUSTER, "the restore ended", left, ended)
        .await
        .unwrap();
    let ended_after = asked.elapsed();
    let status = restores.get(CLUSTER).await.unwrap().status.unwrap();
    (status, writable, ended_after)
}

/// The acknowledged writes lost form one run: every acknowledged write before the first one
/// lost is there, and so is every one after the last (those made once the cluster was back).
fn one_run_lost(acknowledged: &[u32], missing: &[u32]) -> bool {
    let (Some(first), Some(last)) = (missing.iter().min(), missing.iter().max()) else {
        return true;
    };
    let in_run = acknowledged
        .iter()
        .filter(|n| (first..=last).contains(n))
        .count();
    in_run == missing.len()
}

/// A lost zone (node-b and node-c powered off one right after the other) under two clusters
/// of 3, one member per node, each written to every 50 ms, on the same workload:
/// - the first serves peers and clients over TLS (coreos' static TLS Secrets). Its
///   `QuorumLost` answered by an EtcdRestore `fromSurvivor`: node-a's member (the only one that
///   answers) is chosen, its snapshot restored into a new one-member cluster at a revision
///   moved forward, every old claim kept, the old pods gone at once; no acknowledged write is
///   lost; once the nodes are back the EtcdCluster operator grows it to 3, the old members never
///   rejoin, and every member is still TLS-only;
/// - the second, backed up 20 s before the loss by a coreos one-shot EtcdBackup, is restored
///   from that backup by a human's coreos EtcdRestore: it succeeds with its old pods, whose
///   nodes never confirm their deletion, deleted once that is overdue; exactly the writes
///   acknowledged since the backup are lost, in one run.
///
/// Printed for both: acknowledged writes lost, and the time from the EtcdRestore to the first
/// accepted write and to its success (the figures of docs/benchmarks/etcd-restore.md; the
/// restores run one after the other so that neither shares the machine with the other).
/// (Checked: without `fromSurvivor` the restore is refused by the schema; without the
/// serializable contents reads the survivor's snapshot never finishes; without deleting
/// overdue pods the backup restore never succeeds: its old claims wait on them.)
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the bed of three nodes: e2e/test.sh runs it with `-- --ignored three_nodes`"]
async fn a_lost_zone_is_recovered_from_the_survivor_with_every_acknowledged_write() {
    let test = FaultTest::start("zone-lost").await;
    let (kube, ns) = (test.kube.clone(), test.ns.clone());
    let garage = Garage::start_on(&testbed::cluster::host_address())
        .await
        .unwrap();
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

    // The second cluster, plain, in a namespace of its own, with the backup operator too.
    let backup_ns = kube.namespace("zone-lost-backup").await.unwrap();
    let _backup_report = kube.report_on_failure(&backup_ns);
    let _backup_side_operator = Operator::start(&kube, &backup_ns);
    restore_operator_on(&kube, &backup_ns, "node-a").await;
    operator_on(&kube, &backup_ns, "node-a", "etcd-backup-operator").await;
    cluster.spec.tls = None;
    let backup_clusters = create_converged(&kube, &backup_ns, &cluster).await;
    let backup_side_on = member_on(&kube, &backup_ns).await;
    assert_eq!(
        backup_side_on.len(),
        3,
        "one member per node: {backup_side_on:?}"
    );
    let plain = Access::default();

    let writer = Writer::start_with(&kube, &ns, "zone", access.clone()).await;
    let backup_side_writer = Writer::start(&kube, &backup_ns, "zone").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let key = format!("{backup_ns}/etcd.backup");
    testbed::coreos::one_shot_backup(&kube, &backup_ns, &garage, &key, json!({}))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(20)).await;

    let lost_at = Instant::now();
    test.bed.node_down("node-b").await.unwrap();
    test.bed.node_down("node-c").await.unwrap();
    let quorum_lost = |c: &EtcdCluster| available_reason(c).as_deref() == Some("QuorumLost");
    for clusters in [&clusters, &backup_clusters] {
        wait_until(clusters, CLUSTER, "QuorumLost", 240, quorum_lost)
            .await
            .unwrap();
    }
    eprintln!(
        "QuorumLost in both clusters {:.0?} after the zone went",
        lost_at.elapsed()
    );

    let from_survivor = json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdRestore",
        "metadata": {"name": CLUSTER},
        "spec": {"etcdCluster": {"name": CLUSTER}, "fromSurvivor": {}},
    });
    let (status, writable, recovered) =
        timed_restore(&kube, &ns, &access, from_survivor, 420).await;
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
        "recovered from {survivor} (term {}, index {}, revision {}): restored revision {revision}",
        chosen.raft_term, chosen.raft_index, chosen.revision
    );

    let mut from_backup = testbed::coreos::example("etcd-restore.yaml").unwrap();
    from_backup["spec"]["s3"] = json!({"path": format!("{}/{key}", garage.bucket),
        "awsSecret": "aws", "endpoint": garage.endpoint, "forcePathStyle": true});
    let (backup_status, backup_writable, restored) =
        timed_restore(&kube, &backup_ns, &plain, from_backup, 300).await;
    assert!(backup_status.succeeded, "{backup_status:#?}");

    // What each lost: looked up on a member serving writes again.
    let writes = writer.stop_counted().await;
    let backup_side_writes = backup_side_writer.stop_counted().await;
    let mut client = ready_members_client(&kube, &ns, &access).await.unwrap();
    let missing = missing_writes(&mut client, "zone", &writes.acknowledged).await;
    let mut backup_side_client = ready_members_client(&kube, &backup_ns, &plain)
        .await
        .unwrap();
    let lost_by_backup = missing_writes(
        &mut backup_side_client,
        "zone",
        &backup_side_writes.acknowledged,
    )
    .await;
    for (name, writes, lost, writable, ended) in [
        (
            "recovery from the survivor",
            &writes,
            missing.len(),
            writable,
            recovered,
        ),
        (
            "restore from the backup",
            &backup_side_writes,
            lost_by_backup.len(),
            backup_writable,
            restored,
        ),
    ] {
        eprintln!(
            "{name}: lost {lost} of {} acknowledged writes ({} failed); first write accepted \
             {writable:.1?} after the EtcdRestore, succeeded after {ended:.1?}",
            writes.acknowledged.len(),
            writes.failed
        );
    }
    assert!(writes.acknowledged.len() > 300, "{writes:?}");
    assert!(missing.is_empty(), "acknowledged writes lost: {missing:?}");
    assert!(lost_by_backup.len() > 200, "{}", lost_by_backup.len());
    assert!(
        one_run_lost(&backup_side_writes.acknowledged, &lost_by_backup),
        "the restore from the backup lost more than the writes since it: {lost_by_backup:?}"
    );

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

    // The old pods are gone, their nodes still down: at once for the survivor recovery
    // (deleted with grace period 0), once overdue for the restore from the backup.
    for (ns, old_members) in [
        (&ns, old_members.clone()),
        (&backup_ns, backup_side_on.values().cloned().collect()),
    ] {
        let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
        for old in &old_members {
            assert!(
                pods.get_opt(old).await.unwrap().is_none(),
                "{ns}: {old}'s pod is left"
            );
        }
    }
    wait_until(
        &backup_clusters,
        CLUSTER,
        "the restored cluster converged",
        120,
        converged(3),
    )
    .await
    .unwrap();

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
    kube.delete_namespace(&backup_ns).await.unwrap();
    kube.delete_namespace(&ns).await.unwrap();
}

/// `spec.quorumLoss: {recovery: FromSurvivor, afterSeconds: 10, fencing: Required}`: with node-b
/// and node-c powered off, the operator waits for both to be fenced (the `QuorumLost` message
/// names them; no EtcdRestore), and with node-b tainted out-of-service for node-c alone (named
/// alone: the taint is read). Fencing then set back to the default (`NotRequired`), it makes the
/// EtcdRestore a human would, node-c NotReady for 10 s being enough (annotated as its own, a Warning `QuorumLossRecoveryStarted`); killed once it
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
    let policy = json!({"recovery": "FromSurvivor", "afterSeconds": 10, "fencing": "Required"});
    cluster.spec.quorum_loss = Some(serde_json::from_value(policy).unwrap());
    let clusters = create_converged(&kube, &ns, &cluster).await;
    let on = member_on(&kube, &ns).await;
    let survivor = on["node-a"].clone();
    let writer = Writer::start(&kube, &ns, "zone-auto").await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let lost_at = Instant::now();
    test.bed.node_down("node-b").await.unwrap();
    test.bed.node_down("node-c").await.unwrap();
    let restores: Api<EtcdRestore> = Api::namespaced(kube.client.clone(), &ns);

    // Fencing required: the recovery waits for both nodes, then for node-c alone.
    let waits_for = |nodes: &'static str| {
        move |c: &EtcdCluster| {
            condition_message(c, "Available")
                .is_some_and(|m| m.contains(&format!("waiting for node(s) {nodes} to be fenced")))
        }
    };
    wait_until(
        &clusters,
        CLUSTER,
        "waiting for node-b and node-c to be fenced",
        240,
        waits_for("node-b, node-c"),
    )
    .await
    .unwrap();
    let taint = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute";
    let (tainted, text) = kubectl(&kube, &["taint", "node", "node-b", taint]).await;
    assert!(tainted, "{text}");
    wait_until(
        &clusters,
        CLUSTER,
        "waiting for node-c alone to be fenced",
        120,
        waits_for("node-c"),
    )
    .await
    .unwrap();
    assert!(
        restores.get_opt(CLUSTER).await.unwrap().is_none(),
        "recovered with node-c not fenced"
    );
    let not_required = json!({"spec": {"quorumLoss": {"fencing": "NotRequired"}}});
    clusters
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(&not_required),
        )
        .await
        .unwrap();
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

    let untaint = "node.kubernetes.io/out-of-service-";
    let (untainted, text) = kubectl(&kube, &["taint", "node", "node-b", untaint]).await;
    assert!(untainted, "{text}");
    test.bed.node_up("node-b").await.unwrap();
    test.bed.node_up("node-c").await.unwrap();
    test.bed.wait_node("node-b", true, 180).await.unwrap();
    test.bed.wait_node("node-c", true, 180).await.unwrap();
    kube.delete_namespace(&ns).await.unwrap();
}
