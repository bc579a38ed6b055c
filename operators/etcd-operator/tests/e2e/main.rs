//! The operator binary against the kubelet bed, with real etcd member pods: the coreos example
//! cluster (on the bed's image and with claims) is created seed-first with learners joining,
//! keeps its data through scaling 3 -> 5 -> 3 and through a member pod being deleted, and an
//! operator killed in the middle of creation finishes the job after a restart; upgrades,
//! refusals, quorum loss, and the coreos scope annotation. One module per topic; the helpers they
//! share are here.

use std::process::{Command, Stdio};

use etcd_api::EtcdCluster;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, ResourceExt};
use serde_json::json;
use testbed::kube::{KubeTestbed, wait_until};
use testbed::logs::logged_at;

#[path = "../common/mod.rs"]
mod common;
use common::*;

mod defrag;
mod membership;
mod reporting;
mod three_nodes;
mod three_nodes_zone_loss;
mod trust;
mod upgrades;

/// A member's addition is recorded (in flight).
fn adding(c: &EtcdCluster) -> bool {
    c.status
        .as_ref()
        .and_then(|s| s.membership_change.as_ref())
        .is_some_and(|m| m.action == "Add")
}

/// A pod of that name made again (not the one with `old_uid`) and ready.
fn made_again_and_ready(old_uid: Option<String>) -> impl Fn(&Pod) -> bool + Send + 'static {
    move |p: &Pod| {
        p.metadata.uid != old_uid
            && p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    }
}

/// `minAvailable` of the cluster's PodDisruptionBudget.
async fn min_available(kube: &KubeTestbed, ns: &str) -> i64 {
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(kube.client.clone(), ns);
    let budget = budgets.get("example-etcd-cluster").await.unwrap();
    match budget.spec.unwrap().min_available.unwrap() {
        IntOrString::Int(n) => n.into(),
        other => panic!("minAvailable {other:?}"),
    }
}

/// Every event in `ns`.
async fn events(kube: &KubeTestbed, ns: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
    Api::namespaced(kube.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// Runs an operator until `cluster` shows `what`, then kills it (a crash at that point).
async fn operator_killed_at<F>(
    kube: &KubeTestbed,
    ns: &str,
    clusters: &Api<EtcdCluster>,
    what: &str,
    done: F,
) where
    F: Fn(&EtcdCluster) -> bool + Send + 'static,
{
    let _operator = Operator::start(kube, ns);
    wait_until(clusters, "example-etcd-cluster", what, 120, done)
        .await
        .unwrap();
}

async fn resize(clusters: &Api<EtcdCluster>, size: i32) {
    let patch = json!({"spec": {"size": size}});
    clusters
        .patch(
            "example-etcd-cluster",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
}

async fn set_version(clusters: &Api<EtcdCluster>, version: &str) {
    let patch = json!({"spec": {"version": version}});
    clusters
        .patch(
            "example-etcd-cluster",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
}

fn degraded_reason(c: &EtcdCluster) -> Option<String> {
    condition_reason(c, "Degraded")
}

fn progressing_reason(c: &EtcdCluster) -> Option<String> {
    condition_reason(c, "Progressing")
}

fn condition_reason(c: &EtcdCluster, type_: &str) -> Option<String> {
    condition(c, type_)?.reason.clone()
}

fn condition_message(c: &EtcdCluster, type_: &str) -> Option<String> {
    condition(c, type_)?.message.clone()
}

fn condition<'a>(c: &'a EtcdCluster, type_: &str) -> Option<&'a etcd_api::ClusterCondition> {
    c.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Each member pod's UID and etcd container restart count.
async fn pod_identities(pods: &Api<Pod>) -> std::collections::BTreeMap<String, (String, i32)> {
    let list = pods
        .list(&ListParams::default().labels("etcd_cluster=example-etcd-cluster"))
        .await
        .unwrap();
    list.items
        .into_iter()
        .map(|p| {
            let restarts = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map_or(0, |c| c[0].restart_count);
            (p.name_any(), (p.metadata.uid.unwrap(), restarts))
        })
        .collect()
}
