//! On the bed of three nodes in three zones (`testbed::nodes::NodesBed::shared(3)`, node-local
//! claims): members spread over nodes and zones by default; a member whose node is lost is
//! replaced on another node with nothing acknowledged lost, its claim kept and its old pod never
//! back; a node cut off for less than the grace replaces nothing. Ignored in a plain `cargo
//! test`; `e2e/test.sh` runs them with `-- --ignored three_nodes`. Each holds the bed to itself
//! ([`NodesBed::exclusive`]).

use super::*;
use std::collections::BTreeMap;
use std::time::Instant;
use testbed::nodes::NodesBed;

/// How many of the cluster's member pods run on each node, by node.
async fn members_per_node(kube: &KubeTestbed, ns: &str) -> BTreeMap<String, usize> {
    let on = members_by_node(kube, ns).await;
    on.into_iter()
        .map(|(node, pods)| (node, pods.len()))
        .collect()
}

/// The user prefers node-a for the members (a node affinity of weight 100, as for "the nodes with
/// the fast disks") and says nothing about spreading: the members still land one per node, and
/// scaled to 5 they land 2/2/1, in three zones. Without the default spread the preference packs
/// them onto node-a (the scheduler's own default spread is only a weak preference).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the bed of three nodes: e2e/test.sh runs it with `-- --ignored three_nodes`"]
async fn members_spread_one_per_node_and_two_two_one_by_default() {
    let test = FaultTest::start("spread").await;
    let (kube, ns) = (test.kube.clone(), test.ns.clone());
    let _operator = Operator::start(&kube, &ns);
    let mut cluster = example(3);
    cluster.spec.pod.as_mut().unwrap().affinity = Some(
        serde_json::from_value(json!({"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
                "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}]}}]}}))
        .unwrap(),
    );
    let clusters = create_converged(&kube, &ns, &cluster).await;
    let counts = members_per_node(&kube, &ns).await;
    assert_eq!(counts.len(), 3, "3 members on 3 nodes: {counts:?}");

    let scale = json!({"spec": {"size": 5}});
    clusters
        .patch(
            "example-etcd-cluster",
            &PatchParams::default(),
            &Patch::Merge(&scale),
        )
        .await
        .unwrap();
    wait_until(
        &clusters,
        "example-etcd-cluster",
        "5 ready members",
        480,
        converged(5),
    )
    .await
    .unwrap();
    let counts = members_per_node(&kube, &ns).await;
    let mut spread: Vec<usize> = counts.values().copied().collect();
    spread.sort();
    assert_eq!(spread, vec![1, 2, 2], "5 members on 3 nodes: {counts:?}");
    assert_eq!(
        counts.get("node-a"),
        Some(&2),
        "the preferred node takes its share: {counts:?}"
    );
    kube.delete_namespace(&ns).await.unwrap();
}

/// Creates `cluster` (of 3) in `ns` and waits until it has converged.
pub(super) async fn create_converged(
    kube: &KubeTestbed,
    ns: &str,
    cluster: &EtcdCluster,
) -> Api<EtcdCluster> {
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), ns);
    clusters
        .create(&PostParams::default(), cluster)
        .await
        .unwrap();
    wait_until(
        &clusters,
        "example-etcd-cluster",
        "3 ready members",
        300,
        converged(3),
    )
    .await
    .unwrap();
    clusters
}

/// A test that takes nodes down or cuts them off: the bed to itself, a namespace with a report
/// of what was there if it fails.
pub(super) struct FaultTest {
    pub(super) bed: NodesBed,
    _alone: tokio::sync::MutexGuard<'static, ()>,
    pub(super) kube: KubeTestbed,
    pub(super) ns: String,
    _report: testbed::cluster::FailureReport,
}

impl FaultTest {
    pub(super) async fn start(prefix: &str) -> FaultTest {
        let bed = NodesBed::shared(3).await.unwrap();
        let _alone = bed.exclusive().await.unwrap();
        let kube = bed.kube.clone();
        kube.install_crds().await.unwrap();
        let ns = kube.namespace(prefix).await.unwrap();
        let _report = kube.report_on_failure(&ns);
        FaultTest {
            bed,
            _alone,
            kube,
            ns,
            _report,
        }
    }
}

/// A member pod's name by node (one per node: the clusters here have one member per node).
pub(super) async fn member_on(kube: &KubeTestbed, ns: &str) -> BTreeMap<String, String> {
    let on = members_by_node(kube, ns).await;
    on.into_iter()
        .filter_map(|(node, mut pods)| Some((node, pods.pop()?)))
        .collect()
}

/// The cluster's member pods by node.
pub(super) async fn members_by_node(kube: &KubeTestbed, ns: &str) -> BTreeMap<String, Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let mut on: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let list = pods
        .list(&ListParams::default().labels("etcd_cluster=example-etcd-cluster"))
        .await
        .unwrap();
    for pod in list.items {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            on.entry(node).or_default().push(pod.name_any());
        }
    }
    on
}

/// The example cluster of 3 on the bed of three nodes, one member per node, replacing members
/// of lost nodes after `after_seconds`.
pub(super) async fn spread_cluster(
    kube: &KubeTestbed,
    ns: &str,
    after_seconds: i64,
) -> (Api<EtcdCluster>, BTreeMap<String, String>) {
    let mut cluster = example(3);
    cluster.spec.member_replacement = Some(etcd_api::MemberReplacement {
        enabled: None,
        after_seconds: Some(after_seconds),
    });
    let clusters = create_converged(kube, ns, &cluster).await;
    let on = member_on(kube, ns).await;
    assert_eq!(on.len(), 3, "one member per node: {on:?}");
    (clusters, on)
}

/// A member of `ns`'s cluster, asked through the client of one that is up.
pub(super) async fn any_member_client(kube: &KubeTestbed, ns: &str) -> etcd_client::Client {
    any_member_client_with(kube, ns, &Access::default()).await
}

/// A member of `ns`'s cluster, reached as `access` says.
pub(super) async fn any_member_client_with(
    kube: &KubeTestbed,
    ns: &str,
    access: &Access,
) -> etcd_client::Client {
    let on = member_on(kube, ns).await;
    let mut names: Vec<&String> = on.values().collect();
    names.sort();
    member_client_with(kube, ns, names[0], access).await
}

/// Node node-c powered off with its member on it: after the node is NotReady and the grace
/// (20 s) has passed, the member is removed from etcd, its claim is kept (detached, annotated
/// with the node, Warning `LostMemberClaimKept`), its pod deleted, and a new member joins on
/// another node, also with the operator killed once the replacement was recorded and started
/// again (one removal, one join); a client writing every 50 ms loses no acknowledged write.
/// Powered on again, node-c does not bring the old member back: its pod stays gone and etcd
/// keeps 3 members.
/// (Checked: without the replacement rule the cluster never converges again and this fails.)
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the bed of three nodes: e2e/test.sh runs it with `-- --ignored three_nodes`"]
async fn a_lost_nodes_member_is_replaced_on_another_node_with_nothing_lost() {
    let test = FaultTest::start("node-lost").await;
    let (kube, ns) = (test.kube.clone(), test.ns.clone());
    let operator = Operator::start(&kube, &ns);
    let (clusters, on) = spread_cluster(&kube, &ns, 20).await;
    let lost = on["node-c"].clone();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let lost_pod = pods.get(&lost).await.unwrap();
    let writer = Writer::start(&kube, &ns, "while-node-lost").await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;

    let down_at = Instant::now();
    test.bed.node_down("node-c").await.unwrap();
    let said = |c: &EtcdCluster| degraded_reason(c).as_deref() == Some("NodeDown");
    wait_until(&clusters, "example-etcd-cluster", "NodeDown", 180, said)
        .await
        .unwrap();
    eprintln!("Degraded=NodeDown after {:.0?}", down_at.elapsed());
    // The operator is killed once the replacement is recorded (a crash in the middle of it),
    // and a new one finishes it.
    let recorded = |c: &EtcdCluster| {
        c.status
            .as_ref()
            .and_then(|s| s.membership_change.as_ref())
            .is_some_and(|m| m.keep_claim == Some(true))
    };
    wait_until(
        &clusters,
        "example-etcd-cluster",
        "the replacement recorded",
        180,
        recorded,
    )
    .await
    .unwrap();
    drop(operator);
    let _operator = Operator::start(&kube, &ns);
    // Replaced: 3 ready members again, none of them the lost one, none on node-c.
    let replaced = {
        let lost = lost.clone();
        move |c: &EtcdCluster| {
            converged(3)(c)
                && c.status
                    .as_ref()
                    .and_then(|s| s.members.as_ref())
                    .and_then(|m| m.ready.as_ref())
                    .is_some_and(|ready| !ready.contains(&lost))
        }
    };
    wait_until(
        &clusters,
        "example-etcd-cluster",
        "the lost member replaced",
        420,
        replaced,
    )
    .await
    .unwrap();
    eprintln!("replaced {:.0?} after node-c went down", down_at.elapsed());
    let writes = writer.stop_counted().await;
    eprintln!(
        "writes: {} acknowledged, {} failed, longest gap {:.1?}",
        writes.acknowledged.len(),
        writes.failed,
        writes.longest_gap
    );
    let mut client = any_member_client(&kube, &ns).await;
    let members = client.member_list().await.unwrap();
    let names: Vec<&str> = members.members().iter().map(|m| m.name()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(!names.contains(&lost.as_str()), "{names:?}");
    assert!(writes.acknowledged.len() > 100, "{writes:?}");
    let missing = missing_writes(&mut client, "while-node-lost", &writes.acknowledged).await;
    assert!(missing.is_empty(), "acknowledged writes lost: {missing:?}");
    let now_on = member_on(&kube, &ns).await;
    assert!(!now_on.contains_key("node-c"), "{now_on:?}");

    // The old claim is kept, detached from the cluster, and says which node it is on.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &ns);
    let kept = claims.get(&lost).await.unwrap();
    assert!(kept.metadata.deletion_timestamp.is_none());
    let labels = kept.labels();
    assert_eq!(labels.get("etcd_cluster"), None, "{labels:?}");
    assert_eq!(
        labels
            .get("etcd.database.coreos.com/detached-from")
            .map(String::as_str),
        Some("example-etcd-cluster")
    );
    assert_eq!(
        kept.annotations()
            .get("etcd.database.coreos.com/kept-from-lost-node")
            .map(String::as_str),
        Some("node-c")
    );
    let events = events(&kube, &ns).await;
    let said_kept = events.iter().any(|e| {
        e.reason.as_deref() == Some("LostMemberClaimKept")
            && e.note.as_deref().is_some_and(|n| n.contains(&lost))
    });
    assert!(said_kept, "no LostMemberClaimKept event naming {lost}");
    // Nothing done twice across the restart: one member removed (its event may be lost with
    // the killed operator, never doubled), one added.
    let count = |reason: &str| {
        events
            .iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum::<i32>()
    };
    assert!(count("MemberRemoved") <= 1, "{events:#?}");
    assert_eq!(
        count("MemberPromoted"),
        3,
        "the seed's two joiners and the replacement"
    );

    // node-c powered on again: Ready, and still no trace of the old member.
    test.bed.node_up("node-c").await.unwrap();
    test.bed.wait_node("node-c", true, 180).await.unwrap();
    wait_until(
        &clusters,
        "example-etcd-cluster",
        "converged with node-c back",
        120,
        converged(3),
    )
    .await
    .unwrap();
    assert!(pods.get_opt(&lost).await.unwrap().is_none());
    let members = client.member_list().await.unwrap();
    assert_eq!(members.members().len(), 3);

    // The other order: the old member's etcd runs again on its data before anything deletes
    // its pod. etcd itself refuses it.
    assert_removed_member_refused_by_etcd(&pods, &lost_pod, "node-c").await;
    let members = client.member_list().await.unwrap();
    let names: Vec<&str> = members.members().iter().map(|m| m.name()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(!names.contains(&lost.as_str()), "{names:?}");
    kube.delete_namespace(&ns).await.unwrap();
}

/// The removed member's etcd, started again on its own data (its kept claim, its pod's spec
/// and arguments, on its node: what a pod the operator had not deleted would run once its
/// node came back), is refused by the cluster: it stops, saying it was removed, and never
/// turns ready. Run once (restart policy Never): its exit is the answer.
async fn assert_removed_member_refused_by_etcd(pods: &Api<Pod>, old: &Pod, node: &str) {
    let name = format!("{}-revived", old.name_any());
    let mut spec = old.spec.clone().expect("a pod spec");
    spec.node_name = Some(node.to_string());
    spec.restart_policy = Some("Never".into());
    // Without the member's labels: the operator does not see it, only etcd answers.
    let revived = Pod {
        metadata: kube::api::ObjectMeta {
            name: Some(name.clone()),
            ..Default::default()
        },
        spec: Some(spec),
        ..Default::default()
    };
    pods.create(&PostParams::default(), &revived).await.unwrap();
    let mut ever_ready = false;
    let started = Instant::now();
    let phase = loop {
        let pod = pods.get(&name).await.unwrap();
        ever_ready |= testbed::cluster::pod_ready(&pod);
        let phase = testbed::cluster::pod_phase(&pod).to_string();
        if phase == "Succeeded" || phase == "Failed" {
            break phase;
        }
        assert!(
            started.elapsed().as_secs() < 180,
            "{name} still {phase} after 180 s: {:?}",
            pod.status
        );
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    };
    let log = pods
        .logs(&name, &kube::api::LogParams::default())
        .await
        .unwrap();
    assert!(
        log.contains("permanently removed from the cluster"),
        "{name} ended {phase} without etcd's refusal in its log:\n{log}"
    );
    assert!(!ever_ready, "{name} turned ready:\n{log}");
    eprintln!(
        "the removed member's etcd, started again on its data: refused by the cluster ({phase})"
    );
    pods.delete(&name, &DeleteParams::default()).await.unwrap();
}

/// Node node-b cut off (partition) with its member running, for less than the grace: it turns
/// NotReady (`Degraded=NodeDown`), the majority keeps taking writes, and once healed the same
/// member (same pod) is back in a converged cluster with every acknowledged write: nothing was
/// replaced.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the bed of three nodes: e2e/test.sh runs it with `-- --ignored three_nodes`"]
async fn a_node_cut_off_for_less_than_the_grace_replaces_nothing() {
    let test = FaultTest::start("node-cut").await;
    let (kube, ns) = (test.kube.clone(), test.ns.clone());
    let _operator = Operator::start(&kube, &ns);
    let (clusters, on) = spread_cluster(&kube, &ns, 600).await;
    let cut = on["node-b"].clone();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let uid = pods.get(&cut).await.unwrap().metadata.uid;
    let writer = Writer::start(&kube, &ns, "while-node-cut").await;

    test.bed.partition("node-b").await.unwrap();
    let said = |c: &EtcdCluster| degraded_reason(c).as_deref() == Some("NodeDown");
    wait_until(&clusters, "example-etcd-cluster", "NodeDown", 180, said)
        .await
        .unwrap();
    // Writes go on through the majority while node-b is cut off: counted through a member of
    // the majority (the cut one serves no linearizable read; which name it has is the
    // scheduler's choice).
    let before = Instant::now();
    let mut client = member_client(&kube, &ns, &on["node-a"]).await;
    let options = etcd_client::GetOptions::new()
        .with_prefix()
        .with_count_only();
    let count = |client: &mut etcd_client::Client| {
        let mut client = client.clone();
        let options = options.clone();
        async move {
            client
                .get("while-node-cut/", Some(options))
                .await
                .map(|r| r.count())
                .unwrap_or(0)
        }
    };
    let first = count(&mut client).await;
    let mut later = first;
    while later < first + 20 && before.elapsed().as_secs() < 60 {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        later = count(&mut client).await;
    }
    assert!(
        later >= first + 20,
        "writes stopped during the partition: {first} -> {later}"
    );

    assert_cut_off_member_serves_no_linearizable_read_or_write(&pods, &cut, "node-b").await;

    test.bed.heal("node-b").await.unwrap();
    test.bed.wait_node("node-b", true, 180).await.unwrap();
    wait_until(
        &clusters,
        "example-etcd-cluster",
        "converged after the cut",
        300,
        converged(3),
    )
    .await
    .unwrap();
    let writes = writer.stop_counted().await;
    eprintln!(
        "writes: {} acknowledged, {} failed, longest gap {:.1?}",
        writes.acknowledged.len(),
        writes.failed,
        writes.longest_gap
    );
    assert_eq!(
        pods.get(&cut).await.unwrap().metadata.uid,
        uid,
        "{cut} was replaced"
    );
    let mut member = member_client(&kube, &ns, &cut).await;
    let missing = missing_writes(&mut member, "while-node-cut", &writes.acknowledged).await;
    assert!(missing.is_empty(), "acknowledged writes lost: {missing:?}");
    let removed = events(&kube, &ns)
        .await
        .into_iter()
        .any(|e| e.reason.as_deref() == Some("MemberRemoved"));
    assert!(!removed, "a member was removed");
    kube.delete_namespace(&ns).await.unwrap();
}

/// No split brain, seen from inside the cut-off node (the only place that still reaches its
/// member): the member runs and answers a serializable read from its own data (the positive
/// signal that the refusals below are etcd's, not an unreachable pod), but refuses a
/// linearizable read and a write, which need a leader it cannot reach.
async fn assert_cut_off_member_serves_no_linearizable_read_or_write(
    pods: &Api<Pod>,
    member: &str,
    node: &str,
) {
    let ip = testbed::cluster::pod_ip(pods, member).await;
    let etcdctl = |args: &'static [&'static str]| {
        let mut command = testbed::nodes::in_node(node, testbed::etcd_tool("etcdctl"));
        command
            .arg(format!("--endpoints=http://{ip}:2379"))
            .arg("--command-timeout=5s")
            .args(args);
        async move {
            let out = command.output().await.expect("run etcdctl in the node");
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            (out.status.success(), text)
        }
    };
    let (served, text) = etcdctl(&[
        "get",
        "while-node-cut/",
        "--prefix",
        "--count-only",
        "--write-out=fields",
        "--consistency=s",
    ])
    .await;
    let count = text
        .lines()
        .find_map(|l| l.strip_prefix("\"Count\" : "))
        .and_then(|n| n.trim().parse::<u64>().ok());
    assert!(
        served && count.is_some_and(|n| n > 0),
        "{member}, cut off, should answer a serializable read with the writes it holds: {text}"
    );
    let (served, text) = etcdctl(&["get", "while-node-cut/", "--prefix", "--consistency=l"]).await;
    assert!(
        !served,
        "{member}, cut off, served a linearizable read: {text}"
    );
    let (served, text) = etcdctl(&["put", "written-on-the-cut-side", "split-brain"]).await;
    assert!(!served, "{member}, cut off, took a write: {text}");
    eprintln!(
        "{member} on cut-off {node}: serializable read answered, linearizable read and write refused"
    );
}

/// `kubectl ARGS` on the bed, off the runtime's threads (a drain waits); whether it succeeded
/// and what it printed.
pub(super) async fn kubectl(kube: &KubeTestbed, args: &[&str]) -> (bool, String) {
    let mut command = testbed::cluster::kubectl(&kube.kubeconfig);
    command.args(args);
    tokio::task::spawn_blocking(move || {
        let output = command.output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.success(), text)
    })
    .await
    .unwrap()
}

/// Every node drained in turn with plain `kubectl drain`, as for a rolling maintenance: the
/// drained member's pod, made again on its node-local claim, cannot start on the cordoned node;
/// after the grace (10 s here) the member is replaced on another node (its claim deleted: a
/// copy of what the others hold), every drain goes through, and after the third the cluster
/// has 3 healthy members, none of the original ones, with every acknowledged write.
/// (Checked: without counting a member waiting for its cordoned node as down, the first
/// drained member is never replaced and this fails.)
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the bed of three nodes: e2e/test.sh runs it with `-- --ignored three_nodes`"]
async fn draining_every_node_in_turn_replaces_node_local_members_with_nothing_lost() {
    let test = FaultTest::start("drain").await;
    let (kube, ns) = (test.kube.clone(), test.ns.clone());
    let _operator = Operator::start(&kube, &ns);
    let (clusters, _) = spread_cluster(&kube, &ns, 10).await;
    let original_uids: Vec<String> = pod_identities(&Api::namespaced(kube.client.clone(), &ns))
        .await
        .into_values()
        .map(|(uid, _)| uid)
        .collect();
    let writer = Writer::start(&kube, &ns, "while-draining").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &ns);
    for node in ["node-c", "node-b", "node-a"] {
        // Earlier replacements may have put two members on a node, or none.
        let members: Vec<String> = members_by_node(&kube, &ns)
            .await
            .remove(node)
            .unwrap_or_default();
        let mut claim_uids = BTreeMap::new();
        for member in &members {
            let uid = claims.get(member).await.unwrap().metadata.uid.unwrap();
            claim_uids.insert(member.clone(), Some(uid));
        }
        let started = Instant::now();
        let (ok, text) = kubectl(
            &kube,
            &[
                "drain",
                node,
                "--pod-selector",
                "etcd_cluster=example-etcd-cluster",
                "--timeout",
                "300s",
            ],
        )
        .await;
        assert!(ok, "drain {node}: {text}");
        let drained = started.elapsed();
        // Replaced: converged again with no member on the drained node (a replacement may
        // take a freed name again, so pods are told apart by where they run).
        let deadline = Instant::now() + std::time::Duration::from_secs(300);
        loop {
            let cluster = clusters.get("example-etcd-cluster").await.unwrap();
            if converged(3)(&cluster) && !members_by_node(&kube, &ns).await.contains_key(node) {
                break;
            }
            assert!(Instant::now() < deadline, "{node}: members not replaced");
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
        eprintln!(
            "{node}: drained in {drained:.0?}, {members:?} replaced after {:.0?}",
            started.elapsed()
        );
        for member in &members {
            let claim = claims.get_opt(member).await.unwrap();
            assert!(
                claim.is_none_or(|c| c.metadata.uid != claim_uids[member]),
                "{member}'s claim was kept"
            );
        }
        let (ok, text) = kubectl(&kube, &["uncordon", node]).await;
        assert!(ok, "uncordon {node}: {text}");
    }
    let writes = writer.stop_counted().await;
    eprintln!(
        "writes: {} acknowledged, {} failed, longest gap {:.1?}",
        writes.acknowledged.len(),
        writes.failed,
        writes.longest_gap
    );
    let now = pod_identities(&Api::namespaced(kube.client.clone(), &ns)).await;
    assert_eq!(now.len(), 3, "{now:?}");
    for (_, (uid, _)) in now {
        assert!(
            !original_uids.contains(&uid),
            "an original member pod is still there"
        );
    }
    let mut client = any_member_client(&kube, &ns).await;
    assert_eq!(client.member_list().await.unwrap().members().len(), 3);
    let missing = missing_writes(&mut client, "while-draining", &writes.acknowledged).await;
    assert!(missing.is_empty(), "acknowledged writes lost: {missing:?}");
    kube.delete_namespace(&ns).await.unwrap();
}
