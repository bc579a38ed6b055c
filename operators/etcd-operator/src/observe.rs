//! Reads the world: the cluster's member pods and claims from Kubernetes, and etcd's member list
//! with each member's health, asked of the members themselves (through their pod IPs, which
//! work from inside and outside the cluster).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use etcd_cluster::{ClusterNames, Member, PodState};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::ResourceExt;

use crate::build::{MEMBER_LABEL, VERSION_ANNOTATION};

/// Dial and request timeout for each member.
const MEMBER_TIMEOUT: Duration = Duration::from_secs(3);

/// A member pod with what the planner and the status need.
#[derive(Clone, Debug)]
pub struct MemberPod {
    pub name: String,
    pub state: PodState,
    pub ip: Option<String>,
    /// The etcd version it runs (`etcd.version` annotation).
    pub version: Option<String>,
    /// The image the etcd container runs now (from its status: after an in-place upgrade
    /// patch, the old one until the kubelet has restarted the container).
    pub running_image: Option<String>,
}

pub fn member_pods(pods: &[Pod]) -> Vec<MemberPod> {
    pods.iter()
        .filter_map(|pod| {
            let name = pod.labels().get(MEMBER_LABEL)?.clone();
            let status = pod.status.as_ref();
            let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
            let ready = status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let state = if pod.metadata.deletion_timestamp.is_some() {
                PodState::Terminating
            } else {
                match phase {
                    "Running" => PodState::Running { ready },
                    "Failed" | "Succeeded" => PodState::Failed,
                    _ => PodState::Pending,
                }
            };
            let ip = status
                .and_then(|s| s.pod_ip.clone())
                .filter(|ip| !ip.is_empty());
            let version = pod.annotations().get(VERSION_ANNOTATION).cloned();
            let running_image = status
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.iter().find(|c| c.name == "etcd"))
                .map(|c| c.image.clone());
            Some(MemberPod {
                running_image,
                name,
                state,
                ip,
                version,
            })
        })
        .collect()
}

pub fn claim_names(claims: &[PersistentVolumeClaim]) -> BTreeSet<String> {
    claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter_map(|c| c.labels().get(MEMBER_LABEL).cloned())
        .collect()
}

/// A client for one member, by pod IP.
pub async fn connect(ip: &str) -> Result<Client, etcd_client::Error> {
    let options = ConnectOptions::new()
        .with_connect_timeout(MEMBER_TIMEOUT)
        .with_timeout(MEMBER_TIMEOUT);
    Client::connect([format!("http://{ip}:2379")], Some(options)).await
}

/// etcd's member list as the planner sees it, or `None` when no member answers. Each member is
/// asked for its status through its own pod, which says whether it is healthy and who leads.
pub async fn members(names: &ClusterNames, pods: &[MemberPod]) -> Option<Vec<Member>> {
    let ips: BTreeMap<&str, &str> = pods
        .iter()
        .filter_map(|p| Some((p.name.as_str(), p.ip.as_deref()?)))
        .collect();
    // The list from the first member that gives one.
    let mut list = None;
    for ip in ips.values() {
        if let Ok(mut client) = connect(ip).await
            && let Ok(response) = client.member_list().await
        {
            list = Some(response.members().to_vec());
            break;
        }
    }
    let list = list?;
    let statuses = futures::future::join_all(list.iter().map(|m| {
        let name = m
            .peer_urls()
            .iter()
            .find_map(|u| names.member_of_peer_url(u));
        let ip = name
            .as_deref()
            .and_then(|n| ips.get(n))
            .map(|ip| ip.to_string());
        async move {
            let ip = ip?;
            let mut client = connect(&ip).await.ok()?;
            client.status().await.ok()
        }
    }))
    .await;
    let leader = statuses
        .iter()
        .flatten()
        .map(|s| s.leader())
        .find(|l| *l != 0);
    Some(
        list.iter()
            .zip(statuses)
            .map(|(m, status)| Member {
                id: m.id(),
                name: m
                    .peer_urls()
                    .iter()
                    .find_map(|u| names.member_of_peer_url(u)),
                started: !m.name().is_empty(),
                learner: m.is_learner(),
                healthy: status.as_ref().is_some_and(|s| s.errors().is_empty()),
                leader: leader == Some(m.id()),
            })
            .collect(),
    )
}
