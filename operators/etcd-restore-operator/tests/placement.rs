//! The restore pods the controller builds, with every kind of placement it derives, are
//! accepted by a real API server (server-side dry run): what the pure tests check for shape,
//! the server checks for validity (a node field requirement takes exactly one value, say).

use etcd_api::{EtcdCluster, EtcdRestore, RestorePlan};
use etcd_restore_operator::pods::restore_pod;
use fetch_pod::source::from_spec;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use testbed::kube::KubeTestbed;

fn restore(ns: &str) -> EtcdRestore {
    serde_json::from_value(json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdRestore",
        "metadata": {"name": "c", "namespace": ns, "uid": "0b7e5f6c-1111-4c3b-9d2a-5e4f3a2b1c0d"},
        "spec": {"etcdCluster": {"name": "c"}, "backupStorageType": "S3",
            "s3": {"path": "bucket/etcd.backup", "awsSecret": "aws",
                   "endpoint": "http://s3:3900", "forcePathStyle": true}},
    }))
    .unwrap()
}

fn cluster(ns: &str, pod: serde_json::Value) -> EtcdCluster {
    let mut policy = json!({"persistentVolumeClaimSpec": {"accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "64Mi"}}}});
    json_patch::merge(&mut policy, &pod);
    serde_json::from_value(json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": {"name": "c", "namespace": ns, "uid": "c-uid"},
        "spec": {"size": 3, "version": "3.5.16", "repository": "localhost/etcd", "pod": policy},
    }))
    .unwrap()
}

#[tokio::test]
async fn restore_pods_with_every_derived_placement_are_accepted_by_the_api_server() {
    let kube = KubeTestbed::start().await.unwrap();
    let ns = kube.namespace("restore-placement").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    let restore = restore(&ns);
    let source = from_spec(&restore.spec).unwrap();
    let plan = RestorePlan {
        members: vec!["c-3".into(), "c-4".into(), "c-5".into()],
        token: "c-uid-r-uid".into(),
        version: "3.5.16".into(),
        detached_claims: vec![],
        survivor: None,
        handed_over: None,
    };
    let user_terms = json!({"affinity": {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["nvme"]}]}]}},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "etcd"}},
             "topologyKey": "kubernetes.io/hostname"}]},
    }});
    let policies = [
        json!({}),
        json!({"antiAffinity": true}),
        user_terms,
        json!({"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"etcd_cluster": "c"}},
             "topologyKey": "kubernetes.io/hostname"}}]}}}),
    ];
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let siblings = ["node-a".to_string(), "node-b".to_string()];
    let mut kept_off = 0;
    for policy in policies {
        let cluster = cluster(&ns, policy.clone());
        for sibling_nodes in [&siblings[..0], &siblings[..1], &siblings[..]] {
            let (pod, _) = restore_pod(
                &restore,
                &cluster,
                "c-4",
                &plan,
                &etcd_cluster::EtcdVersion::parse(&plan.version).unwrap(),
                "localhost/etcd-backup:dev",
                &source,
                sibling_nodes,
            );
            let node_terms = pod
                .spec
                .as_ref()
                .and_then(|s| s.affinity.as_ref()?.node_affinity.as_ref())
                .and_then(|n| {
                    n.required_during_scheduling_ignored_during_execution
                        .as_ref()
                })
                .map(|r| r.node_selector_terms.clone())
                .unwrap_or_default();
            kept_off += node_terms
                .iter()
                .filter(|t| t.match_fields.iter().flatten().count() == sibling_nodes.len())
                .filter(|_| sibling_nodes.len() > 1)
                .count();
            if let Err(error) = pods.create(&dry_run, &pod).await {
                panic!("refused ({policy}, siblings {sibling_nodes:?}): {error}");
            }
        }
    }
    // Kept off both siblings' nodes: antiAffinity (one term), the user's terms (two).
    assert_eq!(kept_off, 3);
    kube.delete_namespace(&ns).await.unwrap();
}
