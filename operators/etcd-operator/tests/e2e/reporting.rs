//! What is reported, and kept for a human: a member whose data differs, bad input, quorum
//! loss, a missing image, a refused claim spec.

use super::*;

/// A member whose data differs from its peers' (one byte of a value flipped in its database
/// while its pod was down) fails etcd's initial corruption check, on by default: the cluster
/// is Degraded with that cause and a Warning, the member is kept as it is (not replaced, its
/// claim untouched), and replacing it as the status says (claim, then pod) heals the cluster.
#[tokio::test]
async fn a_member_whose_data_differs_is_reported_and_kept_for_a_human() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster_at("etcd-op-corrupt", "3.7.3").await;
    let name = "example-etcd-cluster";
    let member = "example-etcd-cluster-1";
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &ns);
    let mut client = member_client(&kube, &ns, "example-etcd-cluster-0").await;
    let value = "a-value-whose-byte-is-flipped";
    client.put("/flipped", value, None).await.unwrap();

    // Held by the user while the member's database is changed under it.
    let pause = |paused: bool| json!({"spec": {"paused": paused}});
    let params = PatchParams::default();
    clusters
        .patch(name, &params, &Patch::Merge(pause(true)))
        .await
        .unwrap();
    let paused = |c: &EtcdCluster| {
        c.status
            .as_ref()
            .is_some_and(|s| s.control_paused == Some(true))
    };
    wait_until(&clusters, name, "paused", 60, paused)
        .await
        .unwrap();
    let old = pods.get(member).await.unwrap().metadata.uid;
    pods.delete(member, &DeleteParams::default()).await.unwrap();
    await_condition(
        pods.clone(),
        member,
        kube::runtime::conditions::is_deleted(&old.clone().unwrap()),
    )
    .await
    .unwrap();
    // The image's shell is busybox, whose applets are called by name: the value's offsets from
    // `strings -t d`, one byte of each copy overwritten in place.
    let flip = format!(
        "db=/var/etcd/data/member/snap/db; \
         for at in $(busybox strings -t d $db | busybox awk -v v={value} \
           'match($0, /^ *[0-9]+ /) {{ i = index(substr($0, RLENGTH + 1), v); if (i) print $1 + i - 1 }}'); do \
           printf X | busybox dd of=$db bs=1 seek=$at conv=notrunc 2>/dev/null; done; \
         busybox grep -c {value} $db && exit 1 || exit 0"
    );
    let tamper = json!({
        "metadata": {"name": "tamper"},
        "spec": {"restartPolicy": "Never",
            "containers": [{"name": "sh", "image": "localhost/etcd:v3.4.23",
                "imagePullPolicy": "Never", "command": ["sh", "-c", flip],
                "volumeMounts": [{"name": "data", "mountPath": "/var/etcd"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": member}}]},
    });
    testbed::cluster::run_once(&pods, tamper, 120).await;
    pods.delete("tamper", &DeleteParams::default())
        .await
        .unwrap();
    let claim_uid = claims.get(member).await.unwrap().metadata.uid;
    clusters
        .patch(name, &params, &Patch::Merge(pause(false)))
        .await
        .unwrap();

    // Reported, with what to do.
    let differs = |c: &EtcdCluster| degraded_reason(c).as_deref() == Some("MemberDataDiffers");
    let cluster = wait_until(&clusters, name, "the member's data reported", 240, differs)
        .await
        .unwrap();
    let degraded = cluster.status.unwrap().conditions.unwrap();
    let message = degraded
        .iter()
        .find(|c| c.type_ == "Degraded")
        .unwrap()
        .message
        .clone();
    let message = message.unwrap();
    assert!(
        message.starts_with(member) && message.contains("delete its claim"),
        "{message}"
    );
    let warnings: Vec<_> = events(&kube, &ns)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("MemberDataDiffers"))
        .collect();
    assert!(!warnings.is_empty());
    // Kept: the same claim, still a member of etcd.
    assert_eq!(claims.get(member).await.unwrap().metadata.uid, claim_uid);
    let list = client.member_list().await.unwrap();
    assert!(
        list.members()
            .iter()
            .any(|m| m.name() == member || m.name().is_empty())
    );
    assert_eq!(list.members().len(), 3);

    // The remedy the status gives: the claim, then the pod; the member is made again from the
    // others, and the value is the one written.
    claims
        .delete(member, &DeleteParams::default())
        .await
        .unwrap();
    pods.delete(member, &DeleteParams::default()).await.unwrap();
    let healed =
        |c: &EtcdCluster| converged(3)(c) && degraded_reason(c).as_deref() == Some("AllHealthy");
    wait_until(&clusters, name, "healed", 300, healed)
        .await
        .unwrap();
    for pod in member_pods(&kube, &ns).await {
        let mut client = member_client(&kube, &ns, &pod).await;
        let got = client.get("/flipped", None).await.unwrap();
        assert_eq!(got.kvs()[0].value_str().unwrap(), value, "{pod}");
    }
    kube.delete_namespace(&ns).await.unwrap();
}

#[tokio::test]
async fn bad_input_and_quorum_loss_are_reported_and_nothing_is_deleted() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster("etcd-op-quorum").await;
    let name = "example-etcd-cluster";

    // A version that is not semver: a condition and a Warning, the members untouched.
    set_version(&clusters, "latest").await;
    let invalid = |c: &EtcdCluster| progressing_reason(c).as_deref() == Some("InvalidSpec");
    wait_until(&clusters, name, "the invalid version reported", 60, invalid)
        .await
        .unwrap();
    assert_eq!(member_pods(&kube, &ns).await.len(), 3);
    set_version(&clusters, "3.4.23").await;
    wait_until(&clusters, name, "3 ready members again", 120, converged(3))
        .await
        .unwrap();

    // Two of three members lose pod and volume: quorum is gone.
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kube.client.clone(), &ns);
    for member in ["example-etcd-cluster-1", "example-etcd-cluster-2"] {
        claims
            .delete(member, &DeleteParams::default())
            .await
            .unwrap();
        pods.delete(member, &DeleteParams::default()).await.unwrap();
    }
    let lost = |c: &EtcdCluster| {
        c.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "Available"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("QuorumLost")
                })
            })
    };
    let cluster = wait_until(&clusters, name, "Available=False/QuorumLost", 120, lost)
        .await
        .unwrap();
    let available = cluster
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Available")
        .unwrap();
    let message = available.message.unwrap();
    assert!(
        message.contains("example-etcd-cluster-1") && message.contains("example-etcd-cluster-2"),
        "{message}"
    );
    let events = events(&kube, &ns).await;
    let warning = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("QuorumLost"))
        .expect("a QuorumLost event");
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert!(
        warning
            .note
            .as_deref()
            .unwrap_or("")
            .contains("EtcdRestore"),
        "{warning:?}"
    );
    // The surviving member and its data are untouched; nothing was re-created over the loss.
    // The kubelet removes a deleted pod only after its container stopped and its volumes were
    // released; with eleven tests on two cores that once took over a minute (containers already
    // terminated), so the bound is generous: the point is that they go, not how fast.
    for member in ["example-etcd-cluster-1", "example-etcd-cluster-2"] {
        let gone = await_condition(pods.clone(), member, |p: Option<&Pod>| p.is_none());
        tokio::time::timeout(std::time::Duration::from_secs(180), gone)
            .await
            .unwrap()
            .unwrap();
    }
    // Status has caught up with the pods being gone, and still says QuorumLost.
    // The survivor alone is listed (ready or not: without quorum its /health fails).
    let deleted = |c: &EtcdCluster| {
        c.status
            .as_ref()
            .and_then(|s| s.members.as_ref())
            .is_some_and(|m| {
                let listed: Vec<&String> = m
                    .ready
                    .iter()
                    .flatten()
                    .chain(m.unready.iter().flatten())
                    .collect();
                listed == ["example-etcd-cluster-0"]
            })
    };
    wait_until(
        &clusters,
        name,
        "status without the deleted pods",
        120,
        move |c: &EtcdCluster| lost(c) && deleted(c),
    )
    .await
    .unwrap();
    assert_eq!(member_pods(&kube, &ns).await, ["example-etcd-cluster-0"]);
    assert!(
        claims
            .get_opt("example-etcd-cluster-0")
            .await
            .unwrap()
            .is_some()
    );
    let mut survivor = member_client(&kube, &ns, "example-etcd-cluster-0").await;
    assert_eq!(
        survivor.member_list().await.unwrap().members().len(),
        3,
        "a member was removed without quorum"
    );
    kube.delete_namespace(&ns).await.unwrap();
}

/// Bad input the schema cannot catch: an image that does not exist, and a claim spec the API
/// server refuses. Each is reported (Degraded with the cause, once as a Warning), and no
/// member pod is made without its claim.
#[tokio::test]
async fn a_missing_image_and_a_refused_claim_spec_are_reported() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-op-bad").await;
    let _operator = Operator::start(&kube, &ns);
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    let mut missing = example(1);
    missing.metadata.name = Some("missing".into());
    missing.spec.version = Some("3.4.99".into());
    let mut bad_claim = serde_json::to_value(example(1)).unwrap();
    bad_claim["metadata"]["name"] = json!("bad-claim");
    bad_claim["spec"]["pod"]["persistentVolumeClaimSpec"]["resources"]["requests"]["storage"] =
        json!("lots");
    let bad_claim: EtcdCluster = serde_json::from_value(bad_claim).unwrap();
    for cluster in [&missing, &bad_claim] {
        clusters
            .create(&PostParams::default(), cluster)
            .await
            .unwrap();
    }
    let degraded = |needle: &'static str| {
        move |c: &EtcdCluster| {
            c.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.type_ == "Degraded"
                            && c.status == "True"
                            && c.message.as_deref().unwrap_or("").contains(needle)
                    })
                })
        }
    };
    wait_until(
        &clusters,
        "missing",
        "the missing image reported",
        120,
        degraded("ImagePull"),
    )
    .await
    .unwrap();
    wait_until(
        &clusters,
        "bad-claim",
        "the refused claim reported",
        60,
        degraded("quantities"),
    )
    .await
    .unwrap();
    let events = events(&kube, &ns).await;
    for (cluster, needle) in [("missing", "ImagePull"), ("bad-claim", "quantities")] {
        assert!(
            events.iter().any(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(cluster)
                    && e.type_.as_deref() == Some("Warning")
                    && e.note.as_deref().unwrap_or("").contains(needle)
            }),
            "no Warning for {cluster}"
        );
    }
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    assert!(pods.get_opt("bad-claim-0").await.unwrap().is_none());
    kube.delete_namespace(&ns).await.unwrap();
}
