//! Whom the operator trusts: the scope annotation, TLS Secrets, pods that pass for members, a
//! leader cut off from the API server.

use super::*;

/// coreos's scope annotation, with the shipped cluster-wide deployment: `deploy/cluster-wide/`
/// runs in-cluster from its image (two replicas, its ClusterRole checked live: no request
/// refused) and manages the annotated cluster in another namespace, while the cluster without
/// the annotation beside it is left to a namespaced operator.
#[tokio::test]
async fn cluster_wide_and_namespaced_operators_split_clusters_by_the_scope_annotation() {
    use k8s_openapi::api::apps::v1::Deployment;

    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-op-wide").await;
    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/cluster-wide");
    let manifests = testbed::cluster::deploy_manifests(deploy.as_ref(), &ns).unwrap();
    kube.apply(&manifests, &ns).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(kube.client.clone(), &ns);
    let ready = |d: &Deployment| d.status.as_ref().and_then(|s| s.ready_replicas) == Some(2);
    wait_until(
        &deployments,
        "etcd-operator-cluster-wide",
        "2 ready operator replicas",
        180,
        ready,
    )
    .await
    .unwrap();

    let clusters_ns = kube.namespace("etcd-op-scope").await.unwrap();
    let _clusters_report = kube.report_on_failure(&clusters_ns);
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &clusters_ns);
    let mut wide = example(1);
    wide.metadata.name = Some("wide".into());
    wide.annotations_mut().insert(
        "etcd.database.coreos.com/scope".into(),
        "clusterwide".into(),
    );
    let mut local = example(1);
    local.metadata.name = Some("local".into());
    for cluster in [&wide, &local] {
        clusters
            .create(&PostParams::default(), cluster)
            .await
            .unwrap();
    }
    wait_until(
        &clusters,
        "wide",
        "the annotated cluster running",
        240,
        converged(1),
    )
    .await
    .unwrap();
    // The cluster-wide operator has reconciled; the other cluster is not its own.
    let untouched = clusters.get("local").await.unwrap();
    assert!(untouched.status.is_none(), "{:?}", untouched.status);
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &clusters_ns);
    let local_pods = pods
        .list(&ListParams::default().labels("etcd_cluster=local"))
        .await
        .unwrap();
    assert!(local_pods.items.is_empty());
    let _namespaced = Operator::start(&kube, &clusters_ns);
    wait_until(
        &clusters,
        "local",
        "the other cluster running",
        240,
        converged(1),
    )
    .await
    .unwrap();

    testbed::cluster::assert_leader_and_no_refusals(
        &kube.kubeconfig,
        &ns,
        "app.kubernetes.io/name=etcd-operator-cluster-wide",
    );
    kube.delete_namespace(&clusters_ns).await.unwrap();
    kube.delete_namespace(&ns).await.unwrap();
}

/// `TLS.static` with coreos's Secret and key names: members speak TLS to peers and clients and
/// require client certificates; the operator reaches them with the operator Secret. A missing
/// Secret is reported (no pod made that could not start) until it is created.
#[tokio::test]
async fn a_tls_cluster_with_a_secret_created_late() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-op-tls").await;
    let name = "example-etcd-cluster";
    // Certificates as coreos documents them; the operator's Secret comes later.
    let tls = testbed::cluster::static_tls(&kube, &ns, name, false).await;

    // On the 3.6 line, so that each line runs somewhere: 3.4 and 3.5 (upgrades), 3.6 (here),
    // 3.7 (upgrades, corruption).
    let mut cluster = example(3);
    cluster.spec.version = Some("3.6.16".into());
    cluster.spec.tls = serde_json::from_value(json!({"static": {
        "member": {"peerSecret": "etcd-peer-tls", "serverSecret": "etcd-server-tls"},
        "operatorSecret": "etcd-client-tls",
    }}))
    .unwrap();
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    let _operator = Operator::start(&kube, &ns);
    let missing = |c: &EtcdCluster| {
        progressing_reason(c).as_deref() == Some("InvalidSpec")
            && c.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.message
                            .as_deref()
                            .unwrap_or("")
                            .contains("etcd-client-tls")
                    })
                })
    };
    wait_until(&clusters, name, "the missing Secret reported", 60, missing)
        .await
        .unwrap();
    assert!(member_pods(&kube, &ns).await.is_empty());

    testbed::cluster::create_client_tls(&kube, &ns, &tls).await;
    wait_until(&clusters, name, "3 ready TLS members", 300, converged(3))
        .await
        .unwrap();

    // A client with the operator's certificate works; one without a certificate does not.
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let member = "example-etcd-cluster-1";
    let ip = testbed::cluster::pod_ip(&pods, member).await;
    let options = |identity: bool| Some(tls.client_options(member, name, &ns, identity));
    let url = format!("https://{ip}:2379");
    let mut client = etcd_client::Client::connect([url.clone()], options(true))
        .await
        .unwrap();
    client.put("over-tls", "yes", None).await.unwrap();
    let list = client.member_list().await.unwrap();
    assert_eq!(list.members().len(), 3);
    for m in list.members() {
        assert!(m.peer_urls()[0].starts_with("https://"), "{m:?}");
        assert!(m.client_urls()[0].starts_with("https://"), "{m:?}");
    }
    let anonymous = async {
        let mut c = etcd_client::Client::connect([url], options(false)).await?;
        c.get("over-tls", None).await
    };
    assert!(
        anonymous.await.is_err(),
        "a client without a certificate was served"
    );
    kube.delete_namespace(&ns).await.unwrap();
}

/// Issue 28 point 5: a pod labelled as a member that the operators did not make (anyone
/// allowed to create pods can make one: here a real etcd that is the sole leader of a cluster
/// of its own) is not taken for a member. The cluster is held with `Degraded=ForeignPod` and a
/// Warning: a scale-down asked meanwhile waits, no member or claim is touched, and the fake
/// pod is left for a human. Once it is deleted, the scale-down goes on. The operator's own
/// pods carry their proof of origin and no scheduling gate.
#[tokio::test]
async fn a_pod_that_passes_for_a_member_is_not_trusted() {
    let Running {
        kube,
        ns,
        clusters,
        _report,
        _operator,
    } = running_cluster("etcd-op-foreign").await;
    let name = "example-etcd-cluster";
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let before = pod_identities(&pods).await;
    for member in before.keys() {
        let pod = pods.get(member).await.unwrap();
        assert!(
            pod.annotations()
                .contains_key(etcd_members::origin::PROOF_ANNOTATION),
            "{member} has no proof of origin"
        );
        assert!(
            pod.spec.unwrap().scheduling_gates.is_none(),
            "{member} is gated"
        );
    }

    // The fake: the members' image and locked-down context, a single-member etcd of its own.
    let real = pods.get(&format!("{name}-0")).await.unwrap();
    let real_spec = real.spec.clone().unwrap();
    let real_etcd = real_spec.containers[0].clone();
    let fake_name = format!("{name}-9");
    let fake: Pod = serde_json::from_value(json!({
        "metadata": {"name": fake_name, "labels": {"app": "etcd", "etcd_cluster": name, "etcd_node": fake_name}},
        "spec": {
            "securityContext": real_spec.security_context,
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [{
                "name": "etcd",
                "image": real_etcd.image,
                "command": real_etcd.command,
                "securityContext": real_etcd.security_context,
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "args": ["--name", "fake", "--data-dir", "/data/fake",
                         "--listen-client-urls", "http://0.0.0.0:2379",
                         "--advertise-client-urls", "http://127.0.0.1:2379",
                         "--listen-peer-urls", "http://127.0.0.1:2380",
                         "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
                         "--initial-cluster", "fake=http://127.0.0.1:2380"],
            }],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &fake).await.unwrap();
    let fake_ready = |p: &Pod| p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some();
    wait_until(&pods, &fake_name, "the fake member running", 60, fake_ready)
        .await
        .unwrap();
    let mut fake_client = member_client(&kube, &ns, &fake_name).await;
    let status = fake_client.status().await.unwrap();
    assert_eq!(
        status.leader(),
        status.header().unwrap().member_id(),
        "the fake is a leader"
    );

    // A scale-down asked while it runs waits for it to be gone.
    resize(&clusters, 2).await;
    let generation = clusters.get(name).await.unwrap().metadata.generation;
    let held = move |c: &EtcdCluster| {
        c.status
            .as_ref()
            .is_some_and(|s| s.observed_generation == generation)
            && condition_reason(c, "Degraded").as_deref() == Some("ForeignPod")
    };
    wait_until(&clusters, name, "held by the foreign pod", 60, held)
        .await
        .unwrap();
    let warned = events(&kube, &ns).await.into_iter().any(|e| {
        e.type_.as_deref() == Some("Warning")
            && e.reason.as_deref() == Some("ForeignPod")
            && e.note.as_deref().is_some_and(|n| n.contains(&fake_name))
    });
    assert!(warned, "no Warning names the foreign pod");
    let mut client = member_client(&kube, &ns, &format!("{name}-0")).await;
    assert_eq!(client.member_list().await.unwrap().members().len(), 3);
    let after: std::collections::BTreeMap<_, _> = pod_identities(&pods)
        .await
        .into_iter()
        .filter(|(pod, _)| *pod != fake_name)
        .collect();
    assert_eq!(
        after, before,
        "a member was touched while the foreign pod ran"
    );
    assert!(pods.get_opt(&fake_name).await.unwrap().is_some());

    pods.delete(&fake_name, &DeleteParams::default())
        .await
        .unwrap();
    wait_until(&clusters, name, "2 members", 240, converged(2))
        .await
        .unwrap();

    proof_key_rotated_then_lost_and_members_vouched_for(&kube, &ns, &clusters).await;
    kube.delete_namespace(&ns).await.unwrap();
}

/// Issue 49 point 5, on the running operator: a rotation (new `key`, old one as `previous`)
/// re-proves every member with the new key without a restart or a spec change; the Secret
/// deleted (no copy) and made again makes every member foreign (held, nothing touched); the
/// members' UIDs vouched for in the Secret make them members again, proven with the new key.
async fn proof_key_rotated_then_lost_and_members_vouched_for(
    kube: &KubeTestbed,
    ns: &str,
    clusters: &Api<EtcdCluster>,
) {
    use etcd_members::origin::{
        KEY_FIELD, KEY_SECRET, Origin, PREVIOUS_KEY_FIELD, ProofKey, VOUCHED_FIELD,
    };
    use k8s_openapi::api::core::v1::Secret;

    let name = "example-etcd-cluster";
    let secrets: Api<Secret> = Api::namespaced(kube.client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let key_of = |secret: &Secret| secret.data.as_ref().unwrap()[KEY_FIELD].0.clone();
    let members = || async {
        pods.list(&ListParams::default().labels(&format!("etcd_cluster={name}")))
            .await
            .unwrap()
            .items
    };
    // Every member pod proven with `key` (and nothing else).
    let all_proven_with = |key: Vec<u8>| async move {
        let key = ProofKey::new(key, None);
        let members = members().await;
        members.len() == 2 && members.iter().all(|p| key.origin(p) == Origin::Proven)
    };
    let identities = pod_identities(&pods).await;

    // A rotation: the new key proves every member within the refresh period.
    let old = key_of(&secrets.get(KEY_SECRET).await.unwrap());
    let new: Vec<u8> = (0..32u8)
        .map(|i| i.wrapping_mul(7).wrapping_add(3))
        .collect();
    let patch = json!({"data": {
        KEY_FIELD: k8s_openapi::ByteString(new.clone()),
        PREVIOUS_KEY_FIELD: k8s_openapi::ByteString(old),
    }});
    secrets
        .patch(KEY_SECRET, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while !all_proven_with(new.clone()).await {
        assert!(
            std::time::Instant::now() < deadline,
            "members not proven with the rotated key after 90 s"
        );
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    // The rotation's end: the old key removed (null removes a field in a merge patch).
    let patch = json!({"data": {PREVIOUS_KEY_FIELD: null}});
    secrets
        .patch(KEY_SECRET, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();

    // The key lost: the Secret deleted, and made again (a new key) by the operator.
    let before = secrets.get(KEY_SECRET).await.unwrap().uid();
    secrets
        .delete(KEY_SECRET, &DeleteParams::default())
        .await
        .unwrap();
    let foreign =
        |c: &EtcdCluster| condition_reason(c, "Degraded").as_deref() == Some("ForeignPod");
    wait_until(clusters, name, "held: every member foreign", 90, foreign)
        .await
        .unwrap();
    let made_again = secrets.get(KEY_SECRET).await.unwrap();
    assert_ne!(made_again.uid(), before);
    assert_eq!(
        pod_identities(&pods).await,
        identities,
        "a member was touched"
    );

    // A person checks the pods are the members and vouches for their UIDs.
    let uids: Vec<String> = members().await.iter().filter_map(|p| p.uid()).collect();
    let patch = json!({"stringData": {VOUCHED_FIELD: uids.join("\n")}});
    secrets
        .patch(KEY_SECRET, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while !all_proven_with(key_of(&made_again)).await {
        assert!(
            std::time::Instant::now() < deadline,
            "vouched members not proven with the new key after 90 s"
        );
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    let trusted =
        |c: &EtcdCluster| condition_reason(c, "Degraded").as_deref() != Some("ForeignPod");
    wait_until(clusters, name, "no longer held", 60, trusted)
        .await
        .unwrap();
    assert_eq!(
        pod_identities(&pods).await,
        identities,
        "a member was touched"
    );
}

/// Issue 28 point 9, fencing: two replicas with leader election; the leader is cut off from
/// the API server while it grows a new cluster. It stops (exits non-zero) within the renew
/// deadline and plans nothing after it lost the Lease, before the standby leads; the standby
/// finishes the cluster, whose member list is then exactly its three members.
#[tokio::test]
async fn a_leader_cut_off_mid_reconcile_stops_before_the_standby_leads() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-op-fence").await;
    let (config, partition) = testbed::kube::partitioned_kubeconfig(&kube.kubeconfig)
        .await
        .unwrap();
    let through = std::env::temp_dir().join(format!("{ns}-partitioned.kubeconfig"));
    std::fs::write(&through, serde_saphyr::to_string(&config).unwrap()).unwrap();
    let replica = |id: &str, kubeconfig: &std::path::Path| {
        let log = std::env::temp_dir().join(format!("{ns}-{id}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_etcd-operator"))
            .args(["--namespace", &ns, "--listen", "127.0.0.1:0"])
            .args([
                "--leader-election",
                "--lease-namespace",
                &ns,
                "--pod-name",
                id,
            ])
            .args(["--lease-duration-seconds", "6"])
            .env("KUBECONFIG", kubeconfig)
            .env("LOG_FORMAT", "json")
            .env("RUST_LOG", "info,etcd_operator=debug,operator_runtime=info")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start etcd-operator");
        (Operator(child), log)
    };
    let (mut leader, leader_log) = replica("replica-a", &through);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while logged_at(&leader_log, "became leader").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "replica-a did not lead"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (_standby, standby_log) = replica("replica-b", &kube.kubeconfig);

    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    clusters
        .create(&PostParams::default(), &example(3))
        .await
        .unwrap();
    let name = "example-etcd-cluster";
    // Mid-growth: a membership change recorded by the leader.
    wait_until(&clusters, name, "a member being added", 120, adding)
        .await
        .unwrap();
    partition.cut();
    let exit = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        loop {
            if let Some(status) = leader.0.try_wait().unwrap() {
                break status;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the cut-off leader did not stop");
    assert!(
        !exit.success(),
        "a lost leadership exits non-zero: {exit:?}"
    );
    wait_until(&clusters, name, "3 ready members", 240, converged(3))
        .await
        .unwrap();

    let lost = logged_at(&leader_log, "lost leadership");
    let took_over = logged_at(&standby_log, "became leader");
    assert_eq!(
        lost.len(),
        1,
        "{}",
        std::fs::read_to_string(&leader_log).unwrap()
    );
    assert_eq!(took_over.len(), 1);
    assert!(
        lost[0] < took_over[0],
        "lost at {}, standby led at {}",
        lost[0],
        took_over[0]
    );
    let planned_after: Vec<_> = logged_at(&leader_log, "planned")
        .into_iter()
        .filter(|t| *t > lost[0])
        .collect();
    assert!(
        planned_after.is_empty(),
        "the cut-off leader planned at {planned_after:?}"
    );
    let mut client = member_client(&kube, &ns, &format!("{name}-0")).await;
    let members = client.member_list().await.unwrap();
    let names: std::collections::BTreeSet<&str> =
        members.members().iter().map(|m| m.name()).collect();
    assert_eq!(members.members().len(), 3, "{names:?}");
    assert_eq!(names.len(), 3, "{names:?}");
    kube.delete_namespace(&ns).await.unwrap();
}
