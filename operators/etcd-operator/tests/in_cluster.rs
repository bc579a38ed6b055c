//! The operator as users run it: in the cluster from its image (`localhost/etcd-operator:dev`,
//! made by the kubelet bed from this build), installed with the shipped `deploy/namespaced/`
//! manifests (namespace and image swapped, nothing else), so its RBAC is checked live: the
//! coreos example cluster (with claims) converges to 3 members, the standby replica takes over
//! when the leader's pod is deleted, and the operator logged no refused request. (Checked:
//! without `create` on pods in the Role, this test fails.)

use etcd_api::EtcdCluster;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testbed::kube::wait_until;

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/namespaced");
const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/coreos/example-etcd-cluster.yaml"
);

#[tokio::test]
async fn operator_image_with_shipped_manifests_runs_the_coreos_example() {
    let (kube, ns, _report) = testbed::cluster::test_namespace("etcd-op-in-cluster").await;
    let manifests = testbed::cluster::deploy_manifests(DEPLOY.as_ref(), &ns).unwrap();
    kube.apply(&manifests, &ns).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(kube.client.clone(), &ns);
    let ready = |d: &Deployment| d.status.as_ref().and_then(|s| s.ready_replicas) == Some(2);
    wait_until(
        &deployments,
        "etcd-operator",
        "2 ready operator replicas",
        180,
        ready,
    )
    .await
    .unwrap();

    let mut cluster: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(EXAMPLE).unwrap()).unwrap();
    cluster["spec"]["repository"] = json!("localhost/etcd");
    cluster["spec"]["version"] = json!("3.4.23");
    // With claims, so the claim rules are exercised too.
    cluster["spec"]["pod"] = json!({"persistentVolumeClaimSpec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "64Mi"}}}});
    let cluster: EtcdCluster = serde_json::from_value(cluster).unwrap();
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
        testbed::cluster::converged(3),
    )
    .await
    .unwrap();

    // Failover: the leader's pod is deleted; the standby takes the Lease and acts (pausing the
    // cluster shows in its status only if an operator reconciles it).
    let leases: Api<Lease> = Api::namespaced(kube.client.clone(), &ns);
    let holder = |l: &Lease| l.spec.as_ref().and_then(|s| s.holder_identity.clone());
    let leader = holder(&leases.get("etcd-operator").await.unwrap()).expect("a leader");
    let pods: Api<Pod> = Api::namespaced(kube.client.clone(), &ns);
    pods.delete(&leader, &DeleteParams::default())
        .await
        .unwrap();
    let standby_leads = {
        let leader = leader.clone();
        move |l: &Lease| holder(l).is_some_and(|h| h != leader)
    };
    let lease = wait_until(
        &leases,
        "etcd-operator",
        "the standby leading",
        120,
        standby_leads,
    )
    .await
    .unwrap();
    let new_leader = holder(&lease).unwrap();
    let patch = json!({"spec": {"paused": true}});
    clusters
        .patch(
            "example-etcd-cluster",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let paused = |c: &EtcdCluster| c.status.as_ref().and_then(|s| s.control_paused) == Some(true);
    wait_until(
        &clusters,
        "example-etcd-cluster",
        "paused by the new leader",
        60,
        paused,
    )
    .await
    .unwrap();
    assert_ne!(new_leader, leader);

    // Least privilege, checked live: no request of the operator was refused.
    testbed::cluster::assert_leader_and_no_refusals(
        &kube.kubeconfig,
        &ns,
        "app.kubernetes.io/name=etcd-operator",
    );
    kube.delete_namespace(&ns).await.unwrap();
}
