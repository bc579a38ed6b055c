//! Where a restore pod may run: where the member it restores may, with the cluster's affinity
//! terms about its members turned into terms about the restore's pods, and off the nodes its
//! finished siblings used when the members are kept one per node.

use std::collections::{BTreeMap, BTreeSet};

use etcd_api::{EtcdCluster, EtcdRestore};
use etcd_members::{build, labels};
use k8s_openapi::api::core::v1::{
    Affinity, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolumeClaim, Pod,
    PodAffinityTerm, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};

use super::{restore_labels, restore_pod_name};

/// The node label the scheduler's per-node topology uses.
const HOSTNAME_TOPOLOGY: &str = "kubernetes.io/hostname";

/// Where the restore pod of `member` may run: where the member may. On node-local volumes the
/// claim it restores onto fixes the member's node, so these pods must be placed as the members
/// would be. Node affinity and terms about other pods apply as given. A pod (anti-)affinity
/// term that selects the members selects this restore's pods instead: the old members still
/// run (and are gone in a disaster), so kept as is it would repel the restore pods from every
/// node that holds a member, or attract them to none. An anti-affinity term that may also
/// select other clusters' members (say `app: etcd`) keeps doing so, without this cluster's.
pub(super) fn restore_affinity(
    restore: &EtcdRestore,
    cluster: &EtcdCluster,
    member: &str,
) -> Option<Affinity> {
    let mut affinity = build::member_affinity(cluster)?;
    let name = cluster.name_any();
    let member = labels::member_labels(&cluster.spec, &name, member);
    let namespace = cluster.namespace().unwrap_or_default();
    let of_members = |t: &PodAffinityTerm| selects(t, &member, &namespace);
    let of_restore_pods = |t: &PodAffinityTerm| PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_labels: Some(restore_labels(restore)),
            ..Default::default()
        }),
        topology_key: t.topology_key.clone(),
        ..Default::default()
    };
    // Only this cluster's pods: its label pinned by the selector.
    let this_cluster_only = |t: &PodAffinityTerm| {
        let pinned = t
            .label_selector
            .as_ref()
            .and_then(|s| s.match_labels.as_ref());
        pinned.and_then(|l| l.get(labels::CLUSTER_LABEL)) == Some(&name)
    };
    // Apart from the members: apart from the restore's pods instead (in place), and when the
    // term selects others' pods too, it stays without this cluster's and the restore pods' term
    // is returned to be added.
    let apart = |t: &mut PodAffinityTerm| -> Option<PodAffinityTerm> {
        let restore_term = of_restore_pods(t);
        if this_cluster_only(t) {
            *t = restore_term;
            return None;
        }
        let selector = t.label_selector.get_or_insert_default();
        selector
            .match_expressions
            .get_or_insert_default()
            .push(LabelSelectorRequirement {
                key: labels::CLUSTER_LABEL.to_string(),
                operator: "NotIn".to_string(),
                values: Some(vec![name.clone()]),
            });
        Some(restore_term)
    };
    if let Some(a) = affinity.pod_affinity.as_mut() {
        let weighted = a
            .preferred_during_scheduling_ignored_during_execution
            .iter_mut()
            .flatten()
            .map(|w| &mut w.pod_affinity_term);
        let terms = a
            .required_during_scheduling_ignored_during_execution
            .iter_mut()
            .flatten();
        for term in terms.chain(weighted).filter(|t| of_members(t)) {
            *term = of_restore_pods(term);
        }
    }
    if let Some(a) = affinity.pod_anti_affinity.as_mut() {
        if let Some(required) = a
            .required_during_scheduling_ignored_during_execution
            .as_mut()
        {
            let added: Vec<PodAffinityTerm> = (required.iter_mut())
                .filter(|t| of_members(t))
                .filter_map(apart)
                .collect();
            required.extend(added);
        }
        if let Some(preferred) = a
            .preferred_during_scheduling_ignored_during_execution
            .as_mut()
        {
            let added: Vec<WeightedPodAffinityTerm> = (preferred.iter_mut())
                .filter(|w| of_members(&w.pod_affinity_term))
                .filter_map(|w| {
                    let weight = w.weight;
                    let pod_affinity_term = apart(&mut w.pod_affinity_term)?;
                    Some(WeightedPodAffinityTerm {
                        weight,
                        pod_affinity_term,
                    })
                })
                .collect();
            preferred.extend(added);
        }
    }
    Some(affinity)
}

/// The claim annotation naming the node a claim's volume was provisioned for (set by the
/// scheduler for `WaitForFirstConsumer` storage: node-local volumes).
const SELECTED_NODE_ANNOTATION: &str = "volume.kubernetes.io/selected-node";

/// The nodes each member's restore is tied to: where its restore pod was scheduled (one being
/// deleted too) and the node its staged claim's volume was provisioned for.
pub fn restore_nodes(
    members: &[String],
    own_pods: &[Pod],
    staged_claims: &[&PersistentVolumeClaim],
) -> BTreeMap<String, BTreeSet<String>> {
    members
        .iter()
        .map(|member| {
            let pod = own_pods
                .iter()
                .find(|p| p.name_any() == restore_pod_name(member));
            let pod_node = pod.and_then(|p| p.spec.as_ref()?.node_name.clone());
            let claim = staged_claims.iter().find(|c| c.name_any() == *member);
            let claim_node =
                claim.and_then(|c| c.annotations().get(SELECTED_NODE_ANNOTATION).cloned());
            let nodes = pod_node.into_iter().chain(claim_node).collect();
            (member.clone(), nodes)
        })
        .collect()
}

/// The nodes `member`'s restore pod keeps off ([`off_sibling_nodes`]): its siblings', but not
/// one its own claim is already tied to (it could not run anywhere else).
pub fn sibling_nodes(
    restore_nodes: &BTreeMap<String, BTreeSet<String>>,
    member: &str,
) -> Vec<String> {
    let own = restore_nodes.get(member).cloned().unwrap_or_default();
    let siblings: BTreeSet<&String> = (restore_nodes.iter())
        .filter(|(m, _)| m.as_str() != member)
        .flat_map(|(_, nodes)| nodes)
        .filter(|n| !own.contains(*n))
        .collect();
    siblings.into_iter().cloned().collect()
}

/// Keeps a restore pod off the nodes its siblings were scheduled to when the restore pods must
/// be one per node (a required anti-affinity per hostname): the scheduler no longer counts a
/// finished pod, so a pod made late (after an operator restart, say) could land beside one,
/// and its member, held to that node by a node-local claim, could then never start beside the
/// other member. Other topologies (zones) are left to the scheduler.
pub(super) fn off_sibling_nodes(
    mut affinity: Affinity,
    restore: &EtcdRestore,
    sibling_nodes: &[String],
) -> Affinity {
    let namespace = restore.namespace().unwrap_or_default();
    let one_per_node = affinity
        .pod_anti_affinity
        .as_ref()
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_some_and(|terms| {
            terms.iter().any(|t| {
                t.topology_key == HOSTNAME_TOPOLOGY
                    && selects(t, &restore_labels(restore), &namespace)
            })
        });
    if !one_per_node || sibling_nodes.is_empty() {
        return affinity;
    }
    // A node field requirement takes exactly one value (the API server's rule): one per node.
    let off: Vec<NodeSelectorRequirement> = (sibling_nodes.iter())
        .map(|node| NodeSelectorRequirement {
            key: "metadata.name".to_string(),
            operator: "NotIn".to_string(),
            values: Some(vec![node.clone()]),
        })
        .collect();
    // Terms are alternatives: each must keep off those nodes.
    require_in_every_term(&mut affinity, &off);
    affinity
}

/// Adds `fields` (node field requirements) to every alternative term of the required node
/// affinity, making one when there is none: it narrows where the pod may run, never widens.
fn require_in_every_term(affinity: &mut Affinity, fields: &[NodeSelectorRequirement]) {
    let required = affinity
        .node_affinity
        .get_or_insert_default()
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_default();
    if required.node_selector_terms.is_empty() {
        required
            .node_selector_terms
            .push(NodeSelectorTerm::default());
    }
    for term in &mut required.node_selector_terms {
        term.match_fields
            .get_or_insert_default()
            .extend(fields.iter().cloned());
    }
}

/// Whether `term` selects a pod with `labels` in `namespace` (no selector selects nothing; a
/// selector that cannot be parsed is left to the API server to refuse).
fn selects(term: &PodAffinityTerm, labels: &BTreeMap<String, String>, namespace: &str) -> bool {
    let in_namespace = match &term.namespaces {
        Some(names) if !names.is_empty() => names.iter().any(|n| n == namespace),
        _ => true,
    };
    let selector = term.label_selector.clone().map(Selector::try_from);
    in_namespace && matches!(selector, Some(Ok(s)) if s.matches(labels))
}

/// Holds a restore pod to `node` (a recovery from a survivor: the node its member ran on,
/// known to be up because the member answered). A node where the old members were may be down
/// without Kubernetes knowing it yet (it takes about 50 s to mark it `NotReady`), and a pod
/// placed there would wait for ever. Every alternative term of the cluster's own node affinity
/// gets the requirement, so it narrows them and widens nothing.
pub(super) fn on_node(affinity: Option<Affinity>, node: &str) -> Affinity {
    let mut affinity = affinity.unwrap_or_default();
    let on = NodeSelectorRequirement {
        key: "metadata.name".to_string(),
        operator: "In".to_string(),
        values: Some(vec![node.to_string()]),
    };
    require_in_every_term(&mut affinity, &[on]);
    affinity
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::restore_pod;
    use crate::pods::tests::{cluster, plan, restore, yaml};
    use fetch_pod::source::from_spec;
    use serde_json::{Value, json};

    /// The affinity of `member`'s restore pod when the cluster's pod policy is `policy` (YAML).
    fn affinity_for(policy: &str) -> Value {
        affinity_beside(policy, &[])
    }

    /// As [`affinity_for`], with this restore's other pods scheduled to `sibling_nodes`.
    fn affinity_beside(policy: &str, sibling_nodes: &[&str]) -> Value {
        let mut cluster = cluster("3.5.16");
        let policy: Value = serde_saphyr::from_str(policy).unwrap();
        let mut pod = serde_json::to_value(&cluster.spec.pod).unwrap();
        json_patch::merge(&mut pod, &policy);
        cluster.spec.pod = serde_json::from_value(pod).unwrap();
        let restore = restore();
        let source = from_spec(&restore.spec).unwrap();
        let nodes: Vec<String> = sibling_nodes.iter().map(|n| n.to_string()).collect();
        let (pod, _) = restore_pod(
            &restore,
            &cluster,
            "c-4",
            &plan("3.5.16"),
            &etcd_cluster::EtcdVersion::parse("3.5.16").unwrap(),
            "i",
            &source,
            &nodes,
        );
        yaml(&pod)["spec"]["affinity"].clone()
    }

    #[test]
    fn restore_pods_are_kept_apart_as_the_members_would_be() {
        // No placement asked: none given.
        assert_eq!(affinity_for("{}"), Value::Null);
        // coreos's antiAffinity: one member per node, so one restore pod per node (its claim
        // fixes where the member runs), and the old members do not repel them.
        assert_eq!(
            affinity_for("{antiAffinity: true}"),
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"app": "etcd-restore", "etcd_restore": "c"}},
                "topologyKey": "kubernetes.io/hostname",
            }]}})
        );
    }

    #[test]
    fn a_restore_pod_made_late_keeps_off_the_nodes_its_finished_siblings_used() {
        let off = json!([
            {"key": "metadata.name", "operator": "NotIn", "values": ["n1"]},
            {"key": "metadata.name", "operator": "NotIn", "values": ["n2"]},
        ]);
        // One per node: the siblings' nodes are excluded (the scheduler ignores finished pods).
        let affinity = affinity_beside("{antiAffinity: true}", &["n1", "n2"]);
        assert_eq!(
            affinity["nodeAffinity"],
            json!({"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": off}]}})
        );
        // The user's node terms are alternatives: each one keeps off them too.
        let policy = json!({"affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
                    {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["nvme"]}]},
                ]}},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"etcd_cluster": "c"}},
                "topologyKey": "kubernetes.io/hostname"}]},
        }});
        let affinity = affinity_beside(&policy.to_string(), &["n1", "n2"]);
        let terms = &affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
        assert_eq!(terms.as_array().unwrap().len(), 2);
        for term in terms.as_array().unwrap() {
            assert_eq!(term["matchFields"], off, "{term}");
            assert_eq!(term["matchExpressions"][0]["key"], "disk");
        }
        // Only a preference, or apart per zone: left to the scheduler.
        let preferred = json!({"affinity": {"podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100,
                "podAffinityTerm": {"labelSelector": {"matchLabels": {"etcd_cluster": "c"}},
                    "topologyKey": "kubernetes.io/hostname"}}]}}});
        let zones = json!({"affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"etcd_cluster": "c"}},
                "topologyKey": "topology.kubernetes.io/zone"}]}}});
        for policy in [preferred, zones] {
            let affinity = affinity_beside(&policy.to_string(), &["n1"]);
            assert_eq!(affinity["nodeAffinity"], Value::Null, "{policy}");
        }
        // The first pods: nothing to keep off.
        assert_eq!(
            affinity_beside("{antiAffinity: true}", &[])["nodeAffinity"],
            Value::Null
        );
    }

    #[test]
    fn siblings_nodes_come_from_their_pods_and_claims_but_never_the_members_own() {
        let pod = |member: &str, node: &str, deleting: bool| -> Pod {
            let deleted = deleting.then_some("2026-11-25T10:00:00Z");
            serde_json::from_value(json!({
                "metadata": {"name": restore_pod_name(member), "deletionTimestamp": deleted},
                "spec": {"containers": [], "nodeName": node},
            }))
            .unwrap()
        };
        let claim = |member: &str, node: &str| -> PersistentVolumeClaim {
            serde_json::from_value(json!({"metadata": {"name": member,
                "annotations": {"volume.kubernetes.io/selected-node": node}}}))
            .unwrap()
        };
        let members: Vec<String> = ["c-3", "c-4", "c-5", "c-6"].map(String::from).into();
        // c-3 ran on n1 (its pod being deleted); c-4's volume is on n2, its pod gone; c-5's
        // volume is on n1 too (placed beside c-3 before), its pod gone; c-6 has nothing yet.
        let pods = [pod("c-3", "n1", true)];
        let (c3, c4, c5) = (claim("c-3", "n1"), claim("c-4", "n2"), claim("c-5", "n1"));
        let nodes = restore_nodes(&members, &pods, &[&c3, &c4, &c5]);
        assert_eq!(sibling_nodes(&nodes, "c-6"), ["n1", "n2"]);
        assert_eq!(sibling_nodes(&nodes, "c-4"), ["n1"]);
        // Its own volume is on n1: it can run nowhere else, so n1 is not excluded.
        assert_eq!(sibling_nodes(&nodes, "c-5"), ["n2"]);
    }

    #[test]
    fn terms_selecting_the_members_select_the_restore_pods_and_the_rest_apply_as_given() {
        let node = json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]}});
        let heavy = json!({"labelSelector": {"matchLabels": {"app": "heavy"}},
            "topologyKey": "kubernetes.io/hostname"});
        let elsewhere = json!({"labelSelector": {"matchLabels": {"etcd_cluster": "c"}},
            "namespaces": ["other"], "topologyKey": "kubernetes.io/hostname"});
        let by_cluster = json!({"labelSelector": {"matchLabels": {"etcd_cluster": "c"}},
            "topologyKey": "kubernetes.io/hostname"});
        let any_etcd = json!({"labelSelector": {"matchLabels": {"app": "etcd"}},
            "topologyKey": "kubernetes.io/hostname"});
        let policy = json!({"labels": {"team": "db"}, "affinity": {
            "nodeAffinity": node,
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution":
                    [heavy, elsewhere, by_cluster, any_etcd],
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50,
                    "podAffinityTerm": {"labelSelector": {"matchLabels": {"team": "db"}},
                        "topologyKey": "topology.kubernetes.io/zone"}}],
            },
            "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10,
                "podAffinityTerm": {"labelSelector": {"matchExpressions": [
                        {"key": "etcd_cluster", "operator": "In", "values": ["c"]}]},
                    "namespaces": ["ns"], "matchLabelKeys": ["etcd_node"],
                    "topologyKey": "topology.kubernetes.io/region"}}]},
        }});
        let affinity = affinity_for(&policy.to_string());
        let restore_pods = json!({"matchLabels": {"app": "etcd-restore", "etcd_restore": "c"}});
        let not_this_cluster =
            json!([{"key": "etcd_cluster", "operator": "NotIn", "values": ["c"]}]);
        let hostname = "kubernetes.io/hostname";
        assert_eq!(affinity["nodeAffinity"], node);
        let apart = &affinity["podAntiAffinity"];
        let required = &apart["requiredDuringSchedulingIgnoredDuringExecution"];
        // About other pods, or members of another namespace: as given.
        assert_eq!(required[0], heavy);
        assert_eq!(required[1], elsewhere);
        // About this cluster's members only: about the restore's pods instead.
        assert_eq!(
            required[2],
            json!({"labelSelector": restore_pods, "topologyKey": hostname})
        );
        // About every etcd: still apart from other clusters' members (not this one's old
        // members), and from the restore's other pods.
        assert_eq!(
            required[3],
            json!({"labelSelector": {"matchLabels": {"app": "etcd"},
                "matchExpressions": not_this_cluster}, "topologyKey": hostname})
        );
        assert_eq!(
            required[4],
            json!({"labelSelector": restore_pods, "topologyKey": hostname})
        );
        assert_eq!(required.as_array().unwrap().len(), 5);
        // By the user's pod label, preferred: the same, with its weight.
        let preferred = &apart["preferredDuringSchedulingIgnoredDuringExecution"];
        assert_eq!(
            preferred[0]["podAffinityTerm"]["labelSelector"]["matchExpressions"],
            not_this_cluster
        );
        assert_eq!(preferred[1]["weight"], 50);
        assert_eq!(
            preferred[1]["podAffinityTerm"]["labelSelector"],
            restore_pods
        );
        assert_eq!(
            preferred[1]["podAffinityTerm"]["topologyKey"],
            "topology.kubernetes.io/zone"
        );
        // Together with the members (by expression): with the restore's pods.
        let together =
            &affinity["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
        assert_eq!(
            together["podAffinityTerm"],
            json!({"labelSelector": restore_pods, "topologyKey": "topology.kubernetes.io/region"})
        );
    }
}
