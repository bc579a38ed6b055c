//! Creating, scaling and healing clusters, and finishing after an operator is killed; adopting
//! orphaned members.

use super::*;

#[tokio::test]
async fn creates_scales_and_heals_a_pvc_backed_cluster_keeping_its_data() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster("etcd-op").await;
    let name = "example-etcd-cluster";
    assert_eq!(
        member_pods(&kube, &ns).await,
        [
            "example-etcd-cluster-0",
            "example-etcd-cluster-1",
            "example-etcd-cluster-2"
        ]
    );

    // Data written now must survive everything below.
    let mut client = member_client(&kube, &ns, "example-etcd-cluster-0").await;
    for i in 0..50 {
        client
            .put(format!("key-{i}"), format!("value-{i}"), None)
            .await
            .unwrap();
    }
    let list = client.member_list().await.unwrap();
    assert_eq!(list.members().len(), 3);
    assert!(list.members().iter().all(|m| !m.is_learner()));

    // A disruption budget that keeps quorum, in the policy version this server has.
    assert_eq!(min_available(&kube, &ns).await, 2);

    // 3 -> 5 -> 3.
    resize(&clusters, 5).await;
    wait_until(&clusters, name, "5 ready members", 240, converged(5))
        .await
        .unwrap();
    assert_eq!(min_available(&kube, &ns).await, 3);
    resize(&clusters, 3).await;
    wait_until(
        &clusters,
        name,
        "3 ready members after scaling down",
        240,
        converged(3),
    )
    .await
    .unwrap();
    let remaining = member_pods(&kube, &ns).await;
    assert_eq!(remaining.len(), 3, "{remaining:?}");

    // A deleted member pod comes back under its name, on its claim, with the data.
    let victim = remaining[1].clone();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let old_uid = pods.get(&victim).await.unwrap().metadata.uid;
    pods.delete(&victim, &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        &pods,
        &victim,
        "the deleted member back and ready",
        240,
        made_again_and_ready(old_uid),
    )
    .await
    .unwrap();
    wait_until(
        &clusters,
        name,
        "3 ready members after healing",
        240,
        converged(3),
    )
    .await
    .unwrap();
    let mut member = member_client(&kube, &ns, &victim).await;
    let options = etcd_client::GetOptions::new()
        .with_serializable()
        .with_prefix();
    let kvs = member.get("key-", Some(options.clone())).await.unwrap();
    assert_eq!(kvs.kvs().len(), 50, "the member restarted without its data");
    assert_eq!(member.member_list().await.unwrap().members().len(), 3);

    // Every member pod deleted at once (all nodes drained): quorum is gone until they are back,
    // and each member comes back on its claim with the data. The cluster is reported down
    // meanwhile, but no member is called dead (nor is a restore asked for).
    let drained_at = k8s_openapi::jiff::Timestamp::now();
    let before: Vec<_> = pods
        .list(&ListParams::default().labels("etcd_cluster=example-etcd-cluster"))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| (p.metadata.name.unwrap(), p.metadata.uid))
        .collect();
    for (member, _) in &before {
        pods.delete(member, &DeleteParams::default()).await.unwrap();
    }
    for (member, old_uid) in before {
        let back = made_again_and_ready(old_uid);
        wait_until(&pods, &member, "every member back after a drain", 240, back)
            .await
            .unwrap();
    }
    wait_until(
        &clusters,
        name,
        "3 ready members after a drain",
        240,
        converged(3),
    )
    .await
    .unwrap();
    for member in member_pods(&kube, &ns).await {
        let mut client = member_client(&kube, &ns, &member).await;
        let kvs = client.get("key-", Some(options.clone())).await.unwrap();
        assert_eq!(kvs.kvs().len(), 50, "{member} came back without its data");
    }
    let events = events(&kube, &ns).await;
    // When an event was last made: identical ones are counted in one object (a series).
    let last_seen = |e: &k8s_openapi::api::events::v1::Event| {
        let series = e.series.as_ref().map(|s| s.last_observed_time.0);
        series.or(e.event_time.as_ref().map(|t| t.0))
    };
    let since_drain = |reason: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter(|e| last_seen(e).is_some_and(|t| t >= drained_at))
            .map(|e| e.note.clone().unwrap_or_default())
            .collect()
    };
    // The operator started each one again.
    let started = since_drain("MemberStarted");
    for member in member_pods(&kube, &ns).await {
        assert!(
            started
                .iter()
                .any(|n| n.contains(&format!("pod {member} "))),
            "{member} was not started again after the drain: {started:?}"
        );
    }
    let lost = since_drain("QuorumLost");
    assert!(
        !lost.is_empty(),
        "the drained cluster was not reported down"
    );
    assert!(
        lost.iter()
            .all(|n| n.contains("waiting for members to come back") && !n.contains("dead")),
        "a member coming back was reported dead: {lost:?}"
    );
    kube.delete_namespace(&ns).await.unwrap();
}

#[tokio::test]
async fn an_operator_killed_during_creation_finishes_it_after_a_restart() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-op-restart").await;
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    clusters
        .create(&PostParams::default(), &example(3))
        .await
        .unwrap();
    let name = "example-etcd-cluster";
    {
        let _operator = Operator::start(&kube, &ns);
        // Killed as soon as the second member's addition is recorded (after the seed).
        wait_until(&clusters, name, "a member addition in flight", 240, adding)
            .await
            .unwrap();
    }
    let _operator = Operator::start(&kube, &ns);
    wait_until(
        &clusters,
        name,
        "3 ready members after the restart",
        240,
        converged(3),
    )
    .await
    .unwrap();
    let mut client = member_client(&kube, &ns, "example-etcd-cluster-0").await;
    let members = client.member_list().await.unwrap();
    assert_eq!(
        members.members().len(),
        3,
        "no phantom member: {:?}",
        members.members()
    );
    assert_eq!(member_pods(&kube, &ns).await.len(), 3);
    kube.delete_namespace(&ns).await.unwrap();
}

/// A member whose data cannot be used any more (its WAL lost underneath it) crash-loops on
/// restart; while the other two hold quorum it is removed and replaced by a new member that
/// syncs every key.
#[tokio::test]
async fn a_member_that_cannot_rejoin_on_its_data_is_replaced() {
    use k8s_openapi::api::core::v1::PersistentVolume;

    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster("etcd-op-replace").await;
    let name = "example-etcd-cluster";
    let mut client = member_client(&kube, &ns, "example-etcd-cluster-0").await;
    for i in 0..20 {
        client.put(format!("key-{i}"), "v", None).await.unwrap();
    }

    // The bed's volumes are host directories: lose the victim's WAL, then restart it.
    let victim = "example-etcd-cluster-1";
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &ns);
    let volume = claims
        .get(victim)
        .await
        .unwrap()
        .spec
        .unwrap()
        .volume_name
        .unwrap();
    let pv = Api::<PersistentVolume>::all(kube.client.clone())
        .get(&volume)
        .await
        .unwrap();
    let dir = pv.spec.unwrap().host_path.unwrap().path;
    let wal = std::path::Path::new(&dir).join("data/member/wal");
    assert!(wal.is_dir(), "{} is not the member's WAL", wal.display());
    std::fs::remove_dir_all(&wal).unwrap();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    pods.delete(victim, &DeleteParams::default()).await.unwrap();

    let replaced = |c: &EtcdCluster| {
        converged(3)(c)
            && c.status
                .as_ref()
                .and_then(|s| s.members.as_ref())
                .and_then(|m| m.ready.as_ref())
                .is_some_and(|ready| ready.iter().all(|m| m != "example-etcd-cluster-1"))
    };
    wait_until(
        &clusters,
        name,
        "the crashing member replaced",
        300,
        replaced,
    )
    .await
    .unwrap();
    let events = events(&kube, &ns).await;
    let removal = events
        .iter()
        .find(|e| {
            e.reason.as_deref() == Some("MemberRemoved")
                && e.note.as_deref().unwrap_or("").contains(victim)
        })
        .expect("a MemberRemoved event for the victim");
    assert!(
        removal.note.as_deref().unwrap().contains("cannot rejoin"),
        "{removal:?}"
    );
    let members = member_pods(&kube, &ns).await;
    let newcomer = members
        .iter()
        .find(|m| !["example-etcd-cluster-0", "example-etcd-cluster-2"].contains(&m.as_str()))
        .unwrap();
    let mut fresh = member_client(&kube, &ns, newcomer).await;
    let options = etcd_client::GetOptions::new()
        .with_serializable()
        .with_prefix();
    assert_eq!(
        fresh.get("key-", Some(options)).await.unwrap().kvs().len(),
        20
    );
    assert!(
        claims.get_opt(victim).await.unwrap().is_none() || {
            // Deleted, perhaps still finalizing.
            claims
                .get(victim)
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_some()
        }
    );
    kube.delete_namespace(&ns).await.unwrap();
}

/// The operator is killed in the middle of a scale-up, a scale-down and an upgrade step, and
/// each time a new one finishes the job: no phantom member, no member left behind.
#[tokio::test]
async fn an_operator_killed_while_scaling_or_upgrading_finishes_after_a_restart() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster("etcd-op-restarts").await;
    let name = "example-etcd-cluster";
    drop(_operator);
    let in_flight = |action: &'static str| {
        move |c: &EtcdCluster| {
            c.status
                .as_ref()
                .and_then(|s| s.membership_change.as_ref())
                .is_some_and(|m| m.action == action)
        }
    };

    // Scale-up, killed once the addition is recorded.
    resize(&clusters, 5).await;
    operator_killed_at(
        &kube,
        &ns,
        &clusters,
        "an addition in flight",
        in_flight("Add"),
    )
    .await;
    let operator = Operator::start(&kube, &ns);
    wait_until(&clusters, name, "5 ready members", 300, converged(5))
        .await
        .unwrap();
    drop(operator);

    // Scale-down, killed once the removal is recorded.
    resize(&clusters, 3).await;
    operator_killed_at(
        &kube,
        &ns,
        &clusters,
        "a removal in flight",
        in_flight("Remove"),
    )
    .await;
    let operator = Operator::start(&kube, &ns);
    wait_until(&clusters, name, "3 ready members", 300, converged(3))
        .await
        .unwrap();
    drop(operator);
    let mut client = member_client(&kube, &ns, "example-etcd-cluster-0").await;
    assert_eq!(client.member_list().await.unwrap().members().len(), 3);
    assert_eq!(member_pods(&kube, &ns).await.len(), 3);

    // Upgrade, killed once the first member has been moved.
    set_version(&clusters, "3.5.33").await;
    let upgrading = |c: &EtcdCluster| progressing_reason(c).as_deref() == Some("Upgrading");
    operator_killed_at(&kube, &ns, &clusters, "an upgrade step", upgrading).await;
    let _operator = Operator::start(&kube, &ns);
    let upgraded = |c: &EtcdCluster| {
        converged(3)(c)
            && c.status.as_ref().and_then(|s| s.current_version.as_deref()) == Some("3.5.33")
    };
    wait_until(&clusters, name, "every member on 3.5.33", 300, upgraded)
        .await
        .unwrap();
    assert_eq!(client.member_list().await.unwrap().members().len(), 3);
    kube.delete_namespace(&ns).await.unwrap();
}

/// The adoption contract: members made outside this EtcdCluster (here: orphaned by deleting
/// the previous one with `propagationPolicy: Orphan`) are taken over by a new EtcdCluster of
/// the same name, created paused and then unpaused, without a restart, and are then managed
/// (scaled) like its own.
#[tokio::test]
async fn orphaned_members_are_adopted_without_restarts_and_then_managed() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster("etcd-op-adopt").await;
    let name = "example-etcd-cluster";
    let mut client = member_client(&kube, &ns, "example-etcd-cluster-0").await;
    client.put("kept", "yes", None).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let before = pod_identities(&pods).await;

    clusters
        .delete(name, &DeleteParams::orphan())
        .await
        .unwrap();
    let gone = await_condition(clusters.clone(), name, |c: Option<&EtcdCluster>| {
        c.is_none()
    });
    tokio::time::timeout(std::time::Duration::from_secs(60), gone)
        .await
        .unwrap()
        .unwrap();
    let orphaned = |p: &Pod| p.owner_references().is_empty();
    for pod in before.keys() {
        wait_until(&pods, pod, "the member orphaned", 60, orphaned)
            .await
            .unwrap();
    }

    let mut cluster = example(3);
    cluster.spec.paused = Some(true);
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let paused = |c: &EtcdCluster| c.status.as_ref().and_then(|s| s.control_paused) == Some(true);
    wait_until(&clusters, name, "the new cluster paused", 60, paused)
        .await
        .unwrap();
    let patch = json!({"spec": {"paused": false}});
    clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_until(&clusters, name, "3 adopted members", 120, converged(3))
        .await
        .unwrap();
    let uid = clusters.get(name).await.unwrap().metadata.uid.unwrap();
    for pod in before.keys() {
        let owned = {
            let uid = uid.clone();
            move |p: &Pod| p.owner_references().iter().any(|o| o.uid == uid)
        };
        wait_until(&pods, pod, "the member adopted", 60, owned)
            .await
            .unwrap();
    }
    assert_eq!(
        pod_identities(&pods).await,
        before,
        "an adopted member was restarted"
    );

    resize(&clusters, 4).await;
    wait_until(&clusters, name, "4 ready members", 240, converged(4))
        .await
        .unwrap();
    let options = etcd_client::GetOptions::new().with_serializable();
    let newest = member_pods(&kube, &ns).await.pop().unwrap();
    let mut fresh = member_client(&kube, &ns, &newest).await;
    assert_eq!(
        fresh.get("kept", Some(options)).await.unwrap().kvs().len(),
        1
    );
    kube.delete_namespace(&ns).await.unwrap();
}
