//! How members of one cluster spread over nodes and zones when the user says nothing: a member
//! per node, and across zones where the nodes have zones. Rules, in this order:
//!
//! 1. The user's own `pod.topologySpreadConstraints` are used as given.
//! 2. A user who keeps members apart already (coreos' `antiAffinity: true`, or a pod
//!    anti-affinity in `pod.affinity`) gets no constraints added: theirs decide.
//! 3. Otherwise two constraints over this cluster's members, both ignoring nodes that are tainted
//!    (down, unreachable, cordoned) so that a lost node's member can be placed elsewhere:
//!    - by zone (`topology.kubernetes.io/zone`), preferred (`ScheduleAnyway`): a node without a
//!      zone label stays usable;
//!    - by node (`kubernetes.io/hostname`), at most one more member on a node than on any other:
//!      required (`DoNotSchedule`) for a member starting on new data, preferred for a member
//!      returning to a claim that holds its data. That claim fixes the node anyway (a node-local
//!      volume), and a member must never be kept from its own data, for instance when members
//!      that once shared a node come back after more nodes were added.
//!
//! With one node every member fits (the skew of a single node is zero); with 3 members on 3
//! nodes they land one per node; 5 members on 3 nodes land 2/2/1.

use etcd_api::EtcdCluster;
use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;

use crate::labels::selector;

pub const ZONE_TOPOLOGY: &str = "topology.kubernetes.io/zone";
pub const HOSTNAME_TOPOLOGY: &str = "kubernetes.io/hostname";

/// What a member pod starts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberData {
    /// A new claim, or no claim (`emptyDir`): where it runs is the scheduler's choice.
    New,
    /// A claim that already holds the member's data (a restart, a restored member): the claim's
    /// volume decides where it runs.
    OnItsClaim,
}

/// The topology spread constraints of a member pod (`None`: none, the user's placement rules).
pub fn member_spread(
    cluster: &EtcdCluster,
    data: MemberData,
) -> Option<Vec<TopologySpreadConstraint>> {
    let policy = cluster.spec.pod.as_ref();
    if let Some(own) = policy.and_then(|p| p.topology_spread_constraints.clone()) {
        return Some(own);
    }
    if keeps_members_apart(cluster) {
        return None;
    }
    let members = LabelSelector {
        match_labels: Some(selector(&cluster.name_any())),
        ..Default::default()
    };
    let by_node = match data {
        MemberData::New => "DoNotSchedule",
        MemberData::OnItsClaim => "ScheduleAnyway",
    };
    let constraint = |key: &str, when: &str| TopologySpreadConstraint {
        max_skew: 1,
        topology_key: key.to_string(),
        when_unsatisfiable: when.to_string(),
        label_selector: Some(members.clone()),
        node_taints_policy: Some("Honor".to_string()),
        ..Default::default()
    };
    Some(vec![
        constraint(ZONE_TOPOLOGY, "ScheduleAnyway"),
        constraint(HOSTNAME_TOPOLOGY, by_node),
    ])
}

/// Whether the user's own rules keep members apart: coreos' `antiAffinity: true`, or a pod
/// anti-affinity of theirs.
fn keeps_members_apart(cluster: &EtcdCluster) -> bool {
    let Some(policy) = cluster.spec.pod.as_ref() else {
        return false;
    };
    policy.anti_affinity == Some(true)
        || policy
            .affinity
            .as_ref()
            .is_some_and(|a| a.pod_anti_affinity.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Affinity, PodAntiAffinity};

    fn cluster(pod: serde_json::Value) -> EtcdCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": "example", "namespace": "ns"},
            "spec": {"size": 3, "pod": pod},
        }))
        .unwrap()
    }

    fn when_unsatisfiable(spread: &[TopologySpreadConstraint], key: &str) -> String {
        let c = spread.iter().find(|c| c.topology_key == key).unwrap();
        c.when_unsatisfiable.clone()
    }

    #[test]
    fn when_nothing_is_said_a_new_member_is_required_on_a_node_of_its_own_and_preferred_in_another_zone()
     {
        let spread = member_spread(&cluster(serde_json::json!({})), MemberData::New).unwrap();
        assert_eq!(
            when_unsatisfiable(&spread, HOSTNAME_TOPOLOGY),
            "DoNotSchedule"
        );
        assert_eq!(when_unsatisfiable(&spread, ZONE_TOPOLOGY), "ScheduleAnyway");
        for c in &spread {
            assert_eq!(c.max_skew, 1);
            assert_eq!(c.node_taints_policy.as_deref(), Some("Honor"));
            let labels = c.label_selector.clone().unwrap().match_labels.unwrap();
            assert_eq!(labels["etcd_cluster"], "example");
        }
    }

    #[test]
    fn when_a_member_returns_to_its_claim_its_node_is_only_preferred() {
        let spread =
            member_spread(&cluster(serde_json::json!({})), MemberData::OnItsClaim).unwrap();
        assert_eq!(
            when_unsatisfiable(&spread, HOSTNAME_TOPOLOGY),
            "ScheduleAnyway"
        );
    }

    #[test]
    fn when_the_user_gives_constraints_they_are_used_as_given() {
        let own = serde_json::json!([{"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule"}]);
        let c = cluster(serde_json::json!({"topologySpreadConstraints": own}));
        let spread = member_spread(&c, MemberData::New).unwrap();
        assert_eq!(spread.len(), 1);
        assert_eq!(spread[0].topology_key, "rack");
        assert_eq!(spread[0].max_skew, 2);
    }

    #[test]
    fn when_the_user_keeps_members_apart_by_anti_affinity_no_constraint_is_added() {
        let coreos = cluster(serde_json::json!({"antiAffinity": true}));
        assert_eq!(member_spread(&coreos, MemberData::New), None);
        let mut own = cluster(serde_json::json!({}));
        own.spec.pod.as_mut().unwrap().affinity = Some(Affinity {
            pod_anti_affinity: Some(PodAntiAffinity::default()),
            ..Default::default()
        });
        assert_eq!(member_spread(&own, MemberData::New), None);
    }

    #[test]
    fn when_the_user_only_chooses_nodes_the_members_still_spread_over_them() {
        let mut c = cluster(serde_json::json!({"nodeSelector": {"disk": "ssd"}}));
        c.spec.pod.as_mut().unwrap().affinity = Some(Affinity {
            node_affinity: Some(Default::default()),
            ..Default::default()
        });
        assert_eq!(member_spread(&c, MemberData::New).unwrap().len(), 2);
    }
}
