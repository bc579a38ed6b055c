//! Upgrades one member at a time with a client writing, and the paths that are refused.

use super::*;

/// Sets the cluster's version to `version` while a client writes through every member, waits
/// until every member runs it, and checks that writes went on throughout (the longest stretch
/// without a successful write under 3 s) and that each member's pod, claim and etcd say
/// `version`. Returns each member's pod uid before and after.
async fn upgrade_while_writing(
    kube: &KubeTestbed,
    ns: &str,
    clusters: &Api<EtcdCluster>,
    version: &str,
) -> Vec<(String, String)> {
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), ns);
    let uids = |pods: Vec<Pod>| -> Vec<String> {
        pods.into_iter().filter_map(|p| p.metadata.uid).collect()
    };
    let mut before = Vec::new();
    for pod in member_pods(kube, ns).await {
        before.push(pods.get(&pod).await.unwrap());
    }
    let key = format!("during-upgrade-{version}");
    let writer = Writer::start(kube, ns, &key).await;

    set_version(clusters, version).await;
    let upgraded = {
        let version = version.to_string();
        move |c: &EtcdCluster| {
            converged(3)(c)
                && c.status.as_ref().and_then(|s| s.current_version.as_deref())
                    == Some(version.as_str())
        }
    };
    let what = format!("every member on {version}");
    wait_until(clusters, "example-etcd-cluster", &what, 300, upgraded)
        .await
        .unwrap();
    let counted = writer.stop_counted().await;
    let (longest, writes) = (counted.longest_gap, counted.acknowledged.len());
    eprintln!("upgrade to {version}: {writes} writes, longest stretch without one {longest:?}");
    assert!(writes > 20, "only {writes} writes succeeded");
    let first = member_pods(kube, ns).await.remove(0);
    let mut client = member_client(kube, ns, &first).await;
    let missing = missing_writes(&mut client, &key, &counted.acknowledged).await;
    assert!(missing.is_empty(), "acknowledged writes lost: {missing:?}");
    // At most an election (1 s by default) plus the client's 2 s request timeout before it
    // tries another member; measured here: 0.1 to 0.45 s.
    assert!(
        longest < std::time::Duration::from_secs(3),
        "writes refused for {longest:?}"
    );
    let mut after = Vec::new();
    for pod in member_pods(kube, ns).await {
        let mut client = member_client(kube, ns, &pod).await;
        let status = client.status().await;
        let status = status.unwrap_or_else(|e| panic!("{pod} gives no status: {e:?}"));
        assert_eq!(status.version(), version, "{pod}");
        let made = pods.get(&pod).await.unwrap();
        let image = made.spec.clone().unwrap().containers[0].image.clone();
        assert_eq!(image, Some(format!("localhost/etcd:v{version}")));
        // The data's version, which a member restarting on it gets, and the newest version
        // that ran on it, which it is never moved back from.
        let claim = claims.get(&pod).await.unwrap();
        assert_eq!(claim.annotations()["etcd.version"], version, "{pod}");
        assert_eq!(claim.annotations()["etcd.version.ran"], version, "{pod}");
        after.push(made);
    }
    uids(before).into_iter().zip(uids(after)).collect()
}

/// Whether etcd's metrics on member pod `name` say both corruption checks are on (3.6 and
/// later report their feature gates).
async fn corruption_checks_on(kube: &KubeTestbed, ns: &str, name: &str) -> bool {
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let ip = testbed::cluster::pod_ip(&pods, name).await;
    let (_, metrics) = testbed::http_get(&ip, 8080, "/metrics").await.unwrap();
    ["InitialCorruptCheck", "CompactHashCheck"]
        .iter()
        .all(|gate| {
            metrics.lines().any(|l| {
                l.starts_with("etcd_server_feature_enabled{")
                    && l.contains(&format!("name=\"{gate}\""))
                    && l.ends_with(" 1")
            })
        })
}

#[tokio::test]
async fn rolls_3_4_to_3_5_one_member_at_a_time_while_a_client_writes_and_refuses_a_downgrade() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster("etcd-op-upgrade").await;
    let name = "example-etcd-cluster";

    upgrade_while_writing(&kube, &ns, &clusters, "3.5.33").await;
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &ns);

    // A downgrade is refused with the cause, and no member is touched.
    set_version(&clusters, "3.4.23").await;
    let refused = |c: &EtcdCluster| progressing_reason(c).as_deref() == Some("UpgradeRefused");
    let cluster = wait_until(&clusters, name, "the downgrade refused", 60, refused)
        .await
        .unwrap();
    let message = condition_message(&cluster, "Progressing").unwrap();
    assert!(message.contains("downgrade"), "{message}");
    for pod in member_pods(&kube, &ns).await {
        let image = pods.get(&pod).await.unwrap().spec.unwrap().containers[0]
            .image
            .clone();
        assert_eq!(
            image.as_deref(),
            Some("localhost/etcd:v3.5.33"),
            "{pod} was touched"
        );
    }

    // With the downgrade still refused, a member whose pod and volume are lost is replaced
    // by one at the version the cluster runs, not at the refused spec version.
    let lost = "example-etcd-cluster-1";
    claims.delete(lost, &DeleteParams::default()).await.unwrap();
    pods.delete(lost, &DeleteParams::default()).await.unwrap();
    let replaced = |c: &EtcdCluster| {
        c.status
            .as_ref()
            .and_then(|s| s.members.as_ref())
            .and_then(|m| m.ready.as_ref())
            .is_some_and(|ready| {
                ready.len() == 3 && ready.iter().all(|m| m != "example-etcd-cluster-1")
            })
    };
    wait_until(&clusters, name, "the lost member replaced", 240, replaced)
        .await
        .unwrap();
    let members = member_pods(&kube, &ns).await;
    assert_eq!(members.len(), 3, "{members:?}");
    for pod in members {
        let image = pods.get(&pod).await.unwrap().spec.unwrap().containers[0]
            .image
            .clone();
        assert_eq!(image.as_deref(), Some("localhost/etcd:v3.5.33"), "{pod}");
    }
    kube.delete_namespace(&ns).await.unwrap();
}

/// The current lines, one minor at a time: 3.5 -> 3.6 -> 3.7 with a client writing. 3.4 and
/// 3.5 spell the corruption checks as experimental flags, 3.6 and later as feature gates, so at
/// 3.5 -> 3.6 each member gets a new pod on its claim (3.7 would ignore the old spelling); at
/// 3.6 -> 3.7 each moves in place. Skipping 3.6 is refused first, with nothing touched.
#[tokio::test]
async fn rolls_3_5_to_3_6_to_3_7_with_the_checks_on_and_refuses_skipping_a_minor() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster_at("etcd-op-lines", "3.5.33").await;
    let name = "example-etcd-cluster";
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let image_of = |pod: Pod| pod.spec.unwrap().containers[0].image.clone().unwrap();

    // 3.5.33 -> 3.7.3 skips a minor: refused, nothing touched (no image is needed for that).
    set_version(&clusters, "3.7.3").await;
    let refused = |c: &EtcdCluster| progressing_reason(c).as_deref() == Some("UpgradeRefused");
    wait_until(&clusters, name, "3.5 -> 3.7 refused", 60, refused)
        .await
        .unwrap();
    for pod in member_pods(&kube, &ns).await {
        assert_eq!(
            image_of(pods.get(&pod).await.unwrap()),
            "localhost/etcd:v3.5.33"
        );
    }

    let moves = upgrade_while_writing(&kube, &ns, &clusters, "3.6.16").await;
    for (before, after) in &moves {
        assert_ne!(before, after, "a new pod for the feature gates' spelling");
    }
    let moves = upgrade_while_writing(&kube, &ns, &clusters, "3.7.3").await;
    for (before, after) in &moves {
        assert_eq!(before, after, "moved in place: the spelling is the same");
    }
    for pod in member_pods(&kube, &ns).await {
        assert!(corruption_checks_on(&kube, &ns, &pod).await, "{pod}");
    }
    let mut client = member_client(&kube, &ns, "example-etcd-cluster-0").await;
    let options = etcd_client::GetOptions::new()
        .with_prefix()
        .with_count_only();
    let written = client.get("during-upgrade-", Some(options)).await.unwrap();
    assert!(written.count() > 40, "the writes survived both upgrades");

    // etcd raises CORRUPT (here through its API, as its compaction hash check would): the
    // cluster is Degraded with the cause and what to do, a Warning says so, and quorum is not
    // taken for lost; disarmed, it is healthy again.
    use etcd_client::{AlarmAction, AlarmOptions, AlarmType};
    let id = client.status().await.unwrap().header().unwrap().member_id();
    let on_member = || {
        let mut options = AlarmOptions::new();
        options.with_member(id);
        Some(options)
    };
    client
        .alarm(AlarmAction::Activate, AlarmType::Corrupt, on_member())
        .await
        .unwrap();
    let degraded_by =
        |reason: &'static str| move |c: &EtcdCluster| degraded_reason(c).as_deref() == Some(reason);
    let cluster = wait_until(
        &clusters,
        name,
        "Degraded by the alarm",
        60,
        degraded_by("EtcdAlarm"),
    )
    .await
    .unwrap();
    let status = cluster.status.unwrap();
    let available = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Available");
    assert_eq!(
        available.unwrap().status,
        "True",
        "not taken for a lost quorum"
    );
    let degraded = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Degraded");
    let message = degraded.unwrap().message.clone().unwrap();
    assert!(
        message.contains("CORRUPT") && message.contains("alarm disarm"),
        "{message}"
    );
    let warned = events(&kube, &ns).await.into_iter().filter(|e| {
        e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some("EtcdAlarm")
    });
    assert!(warned.count() > 0);
    client
        .alarm(AlarmAction::Deactivate, AlarmType::Corrupt, on_member())
        .await
        .unwrap();
    wait_until(
        &clusters,
        name,
        "healthy again",
        60,
        degraded_by("AllHealthy"),
    )
    .await
    .unwrap();
    kube.delete_namespace(&ns).await.unwrap();
}

/// Issue 27: an upgrade to the next minor from a patch below the minimum for it (3.5.32
/// before 3.6, 3.6.11 before 3.7) is refused, naming the patch to go to, and no member is
/// touched; going to a later patch first is accepted.
async fn refused_below_the_minimum_then_patched(
    prefix: &str,
    from: &str,
    next_minor: &str,
    minimum: &str,
    patch: &str,
) {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster_at(prefix, from).await;
    let name = "example-etcd-cluster";
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let before = pod_identities(&pods).await;
    set_version(&clusters, next_minor).await;
    let refused = |c: &EtcdCluster| progressing_reason(c).as_deref() == Some("UpgradeRefused");
    let what = format!("{from} -> {next_minor} refused");
    let refusal = wait_until(&clusters, name, &what, 60, refused)
        .await
        .unwrap();
    let message = condition_message(&refusal, "Progressing").unwrap_or_default();
    assert!(message.contains(minimum), "{message}");
    assert!(message.contains("no member was touched"), "{message}");
    assert_eq!(pod_identities(&pods).await, before, "a member was touched");
    let image = format!("localhost/etcd:v{from}");
    for pod in before.keys() {
        let pod = pods.get(pod).await.unwrap();
        assert_eq!(
            pod.spec.unwrap().containers[0].image.as_deref(),
            Some(image.as_str())
        );
    }
    let warned = events(&kube, &ns).await.into_iter().any(|e| {
        e.type_.as_deref() == Some("Warning")
            && e.reason.as_deref() == Some("UpgradeRefused")
            && e.note.as_deref().is_some_and(|n| n.contains(minimum))
    });
    assert!(warned, "no Warning names the patch to go to");
    // The patch first: accepted, in place.
    upgrade_while_writing(&kube, &ns, &clusters, patch).await;

    kube.delete_namespace(&ns).await.unwrap();
}

#[tokio::test]
async fn upgrades_to_3_6_from_below_3_5_32_are_refused_naming_it() {
    refused_below_the_minimum_then_patched(
        "etcd-op-patch-35",
        "3.5.21",
        "3.6.16",
        "3.5.32",
        "3.5.33",
    )
    .await;
}

#[tokio::test]
async fn upgrades_to_3_7_from_below_3_6_11_are_refused_naming_it() {
    refused_below_the_minimum_then_patched("etcd-op-patch", "3.6.10", "3.7.3", "3.6.11", "3.6.16")
        .await;
}

/// An upgrade to an image that does not exist: the first member moved fails to pull it, the
/// upgrade pauses with the kubelet's cause (no other member moves), and setting the version
/// back moves that member back onto its untouched data.
#[tokio::test]
async fn an_upgrade_whose_image_is_missing_pauses_with_the_cause_and_can_go_back() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster("etcd-op-upgrade-fail").await;
    let name = "example-etcd-cluster";
    let mut client = member_client(&kube, &ns, "example-etcd-cluster-0").await;
    client.put("before", "upgrade", None).await.unwrap();

    set_version(&clusters, "3.5.99").await;
    let failed = |c: &EtcdCluster| progressing_reason(c).as_deref() == Some("UpgradeFailed");
    let cluster = wait_until(&clusters, name, "the upgrade paused", 180, failed)
        .await
        .unwrap();
    let message = condition_message(&cluster, "Progressing").unwrap();
    assert!(
        message.contains("ImagePull") || message.contains("ErrImagePull"),
        "{message}"
    );
    assert!(message.contains("back to 3.4.23"), "{message}");
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let mut moved = Vec::new();
    for pod in member_pods(&kube, &ns).await {
        if pods.get(&pod).await.unwrap().annotations()["etcd.version"] == "3.5.99" {
            moved.push(pod);
        }
    }
    assert_eq!(
        moved.len(),
        1,
        "only one member moves before it runs: {moved:?}"
    );
    let events = events(&kube, &ns).await;
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("UpgradeFailed")
                && e.type_.as_deref() == Some("Warning")),
        "no UpgradeFailed Warning"
    );
    // Its pod deleted meanwhile: it comes back as it was moved (the claim records both
    // versions), so going back is still offered.
    let old_uid = pods.get(&moved[0]).await.unwrap().metadata.uid;
    pods.delete(&moved[0], &DeleteParams::default())
        .await
        .unwrap();
    let recreated = move |p: &Pod| {
        p.metadata.uid != old_uid
            && p.annotations()
                .get("etcd.version.upgraded-from")
                .map(String::as_str)
                == Some("3.4.23")
    };
    wait_until(
        &pods,
        &moved[0],
        "the moved member recreated",
        120,
        recreated,
    )
    .await
    .unwrap();

    set_version(&clusters, "3.4.23").await;
    wait_until(
        &clusters,
        name,
        "3 ready members back on 3.4.23",
        180,
        converged(3),
    )
    .await
    .unwrap();
    for pod in member_pods(&kube, &ns).await {
        let pod = pods.get(&pod).await.unwrap();
        assert_eq!(pod.annotations()["etcd.version"], "3.4.23");
        assert!(!pod.annotations().contains_key("etcd.version.upgraded-from"));
        let image = pod.spec.unwrap().containers[0].image.clone();
        assert_eq!(image.as_deref(), Some("localhost/etcd:v3.4.23"));
    }
    let mut reverted = member_client(&kube, &ns, &moved[0]).await;
    let options = etcd_client::GetOptions::new().with_serializable();
    let kv = reverted.get("before", Some(options)).await.unwrap();
    assert_eq!(kv.kvs().len(), 1, "the reverted member lost its data");
    kube.delete_namespace(&ns).await.unwrap();
}
