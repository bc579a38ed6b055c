//! On the bed of three nodes in three zones (`testbed::nodes::NodesBed::shared(3)`, node-local
//! claims): members spread over nodes and zones by default. Ignored in a plain `cargo test`;
//! `e2e/test.sh` runs them with `-- --ignored three_nodes`.

use super::*;
use std::collections::BTreeMap;
use testbed::nodes::NodesBed;

/// How many of the cluster's member pods run on each node, by node.
async fn members_per_node(kube: &KubeTestbed, ns: &str) -> BTreeMap<String, usize> {
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), ns);
    let mut counts = BTreeMap::new();
    let list = pods
        .list(&ListParams::default().labels("etcd_cluster=example-etcd-cluster"))
        .await
        .unwrap();
    for pod in list.items {
        let node = pod.spec.and_then(|s| s.node_name).unwrap_or_default();
        *counts.entry(node).or_insert(0) += 1;
    }
    counts
}

/// The user prefers node-a for the members (a node affinity of weight 100, as for "the nodes with
/// the fast disks") and says nothing about spreading: the members still land one per node, and
/// scaled to 5 they land 2/2/1, in three zones. Without the default spread the preference packs
/// them onto node-a (the scheduler's own default spread is only a weak preference).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the bed of three nodes: e2e/test.sh runs it with `-- --ignored three_nodes`"]
async fn members_spread_one_per_node_and_two_two_one_by_default() {
    let bed = NodesBed::shared(3).await.unwrap();
    let kube = bed.kube.clone();
    kube.install_crds().await.unwrap();
    let ns = kube.namespace("spread").await.unwrap();
    let _report = kube.report_on_failure(&ns);
    let _operator = Operator::start(&kube, &ns);
    let mut cluster = example(3);
    cluster.spec.pod.as_mut().unwrap().affinity = Some(
        serde_json::from_value(json!({"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
                "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}]}}]}}))
        .unwrap(),
    );
    let clusters: Api<EtcdCluster> = Api::namespaced(kube.client.clone(), &ns);
    clusters
        .create(&PostParams::default(), &cluster)
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
