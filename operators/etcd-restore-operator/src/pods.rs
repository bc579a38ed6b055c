//! Pure builders of the restore's own objects.
//!
//! - One claim per new member: the claim the cluster would make for it, but labelled and owned
//!   as the restore's until the snapshot is verified and the old members stopped; then it is
//!   joined to the cluster ([`join_patch`]). Until then the EtcdCluster operator never sees it,
//!   and deleting a failed EtcdRestore deletes it.
//! - One run-once restore pod per new member (`restartPolicy: Never`, says why it failed in its
//!   termination message): an init container fetches the snapshot with `etcd-backup fetch`
//!   (sha256 trailer and manifest verified while streaming, renamed into place only when whole;
//!   its report is the restore's verification) into a scratch volume, then the etcd image's own
//!   restore tool writes the member's data dir on its claim. The member pod itself is the
//!   EtcdCluster operator's plain pod, started on that claim later. (Restoring in init
//!   containers of the member pod would run the restore again whenever the kubelet recreates
//!   the pod sandbox, over live data.)

use std::collections::{BTreeMap, BTreeSet};

use backup_api::{
    EtcdCluster, EtcdClusterSpec, EtcdRestore, NewCluster, PodPolicy, RestorePlan, ScratchMedium,
};
use etcd_cluster::EtcdVersion;
use etcd_cluster::restore::{RestoreCommand, restore_command};
use etcd_members::build::{self, DATA_DIR, DATA_MOUNT};
use etcd_members::labels;
use fetch_pod::{FetchMounts, Source, fetch_container};
use k8s_openapi::api::core::v1::{
    Affinity, Container, EmptyDirVolumeSource, EnvVar, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, Pod,
    PodAffinityTerm, PodSpec, Volume, VolumeResourceRequirements, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::api::ObjectMeta;
use kube::core::{Selector, SelectorExt};
use kube::{Resource, ResourceExt};
use operator_runtime::pod_security::{self, RunAs};
use operator_runtime::volumes::mount;
use serde_json::{Value, json};

use crate::status::RESTORE_ANNOTATION;

/// Labels of the restore's pods and staged claims (not the members' `app=etcd`, so the
/// EtcdCluster operator never takes them for members).
pub const APP: &str = "etcd-restore";
pub const RESTORE_LABEL: &str = "etcd_restore";
/// Where the fetched snapshot lands (a scratch volume, gone with the pod).
pub const SNAPSHOT_DIR: &str = "/var/etcd-restore";
/// The node label the scheduler's per-node topology uses.
const HOSTNAME_TOPOLOGY: &str = "kubernetes.io/hostname";

pub fn restore_pod_name(member: &str) -> String {
    format!("{member}-restore")
}

pub fn label_selector(restore: &str) -> String {
    format!("app={APP},{RESTORE_LABEL}={restore}")
}

/// The claim `member` is restored onto: the cluster's claim for it (spec, size, version
/// annotation), the restore's until joined. `None` when the cluster has no claim spec.
pub fn staged_claim(
    restore: &EtcdRestore,
    cluster: &EtcdCluster,
    member: &str,
    version: &str,
) -> Option<PersistentVolumeClaim> {
    let mut claim = build::claim(cluster, member, version)?;
    claim.metadata.labels = Some(labels(restore));
    claim.metadata.owner_references = restore.controller_owner_ref(&()).map(|o| vec![o]);
    Some(claim)
}

/// The merge patch that gives a staged claim to the cluster: the labels and owner its own
/// claims have (so the EtcdCluster operator and its garbage collection treat it as a member's),
/// without the restore's label.
pub fn join_patch(cluster: &EtcdCluster, member: &str, version: &str) -> Option<Value> {
    let claim = build::claim(cluster, member, version)?;
    let mut labels = json!(claim.metadata.labels.unwrap_or_default());
    labels[RESTORE_LABEL] = Value::Null;
    Some(json!({"metadata": {
        "labels": labels,
        "ownerReferences": claim.metadata.owner_references.unwrap_or_default(),
    }}))
}

fn labels(restore: &EtcdRestore) -> BTreeMap<String, String> {
    own_labels(&restore.name_any())
}

/// The labels of the pods and staged claims of restores named `restore`.
pub fn own_labels(restore: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app".to_string(), APP.to_string()),
        (RESTORE_LABEL.to_string(), restore.to_string()),
    ])
}

/// The scratch emptyDir the snapshot is fetched into: on the node's disk unless the restore
/// asks for memory.
fn scratch_volume(restore: &EtcdRestore) -> Volume {
    let medium = match restore.spec.scratch_medium.unwrap_or_default() {
        ScratchMedium::Disk => None,
        ScratchMedium::Memory => Some("Memory".to_string()),
    };
    Volume {
        name: "snapshot".into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The EtcdCluster a restore with `spec.newCluster` creates when the cluster does not exist:
/// paused (the restore unpauses it once the members are restored) and held by the restore
/// (`uid` in [`RESTORE_ANNOTATION`]), one claim per member of the size and class asked for.
pub fn new_cluster(name: &str, uid: &str, new: &NewCluster) -> EtcdCluster {
    let claim = PersistentVolumeClaimSpec {
        access_modes: Some(vec!["ReadWriteOnce".into()]),
        resources: Some(VolumeResourceRequirements {
            requests: Some(BTreeMap::from([(
                "storage".to_string(),
                Quantity(new.storage.clone()),
            )])),
            ..Default::default()
        }),
        storage_class_name: new.storage_class_name.clone(),
        ..Default::default()
    };
    let mut cluster = EtcdCluster::new(
        name,
        EtcdClusterSpec {
            size: new.size,
            version: Some(new.version.clone()),
            repository: new.repository.clone(),
            paused: Some(true),
            pod: Some(PodPolicy {
                persistent_volume_claim_spec: Some(claim),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    cluster.metadata.annotations = Some(BTreeMap::from([(
        RESTORE_ANNOTATION.to_string(),
        uid.to_string(),
    )]));
    cluster
}

/// The pod that restores `member` of `plan` onto its claim (which must exist: the pod mounts it
/// by the member's name, as the member pod will). `sibling_nodes`: the nodes this restore's
/// other pods were scheduled to (see [`off_sibling_nodes`]).
pub fn restore_pod(
    restore: &EtcdRestore,
    cluster: &EtcdCluster,
    member: &str,
    plan: &RestorePlan,
    image: &str,
    source: &Source,
    sibling_nodes: &[String],
) -> (Pod, RestoreCommand) {
    let version = EtcdVersion::parse(&plan.version).expect("a recorded version parses");
    let snapshot = format!("{SNAPSHOT_DIR}/snapshot.db");
    let command = restore_command(
        &version,
        &build::names(cluster),
        member,
        &plan.members,
        &plan.token,
        &snapshot,
        DATA_DIR,
    );
    let mut volumes = FetchMounts::of(source).volumes;
    volumes.push(scratch_volume(restore));
    let fetch = fetch_container(
        "fetch",
        image,
        source,
        &snapshot,
        mount("snapshot", SNAPSHOT_DIR, false),
    );
    volumes.push(Volume {
        name: "etcd-data".into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: member.into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    let mut argv = command.argv.clone();
    argv[0] = format!("/usr/local/bin/{}", argv[0]);
    let tool = Container {
        name: "restore".into(),
        image: Some(cluster.spec.image_of(&plan.version)),
        command: Some(argv),
        env: Some(vec![EnvVar {
            name: "ETCDCTL_API".into(),
            value: Some("3".into()),
            ..Default::default()
        }]),
        volume_mounts: Some(vec![
            mount("etcd-data", DATA_MOUNT, false),
            mount("snapshot", SNAPSHOT_DIR, true),
        ]),
        resources: cluster.spec.pod.as_ref().and_then(|p| p.resources.clone()),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    let spec = PodSpec {
        init_containers: Some(vec![fetch]),
        containers: vec![tool],
        volumes: Some(volumes),
        ..Default::default()
    };
    let pod = pod(restore, cluster, member, spec, sibling_nodes);
    (pod, command)
}

/// The run-once pod of `restore` for `member`, scheduled like that member (node selector,
/// tolerations, affinity, security context), owned by the EtcdRestore.
fn pod(
    restore: &EtcdRestore,
    cluster: &EtcdCluster,
    member: &str,
    mut spec: PodSpec,
    sibling_nodes: &[String],
) -> Pod {
    let policy = cluster.spec.pod.clone().unwrap_or_default();
    let affinity = restore_affinity(restore, cluster, member)
        .map(|a| off_sibling_nodes(a, restore, sibling_nodes));
    spec.restart_policy = Some("Never".into());
    spec.automount_service_account_token = Some(false);
    spec.enable_service_links = Some(false);
    spec.node_selector = policy.node_selector.clone();
    spec.tolerations = policy.tolerations.clone();
    spec.affinity = affinity;
    // Pod Security "restricted", like the member it restores; the claim is a fresh one, so its
    // data is the non-root user's (see build::run_as).
    spec.security_context = Some(pod_security::pod_context(
        policy.security_context.as_ref(),
        RunAs::NonRoot,
    ));
    let init = spec.init_containers.iter_mut().flatten();
    for container in spec.containers.iter_mut().chain(init) {
        container.security_context = Some(pod_security::container_context());
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(restore_pod_name(member)),
            namespace: restore.namespace(),
            labels: Some(labels(restore)),
            owner_references: restore.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// Where the restore pod of `member` may run: where the member may. On node-local volumes the
/// claim it restores onto fixes the member's node, so these pods must be placed as the members
/// would be. Node affinity and terms about other pods apply as given. A pod (anti-)affinity
/// term that selects the members selects this restore's pods instead: the old members still
/// run (and are gone in a disaster), so kept as is it would repel the restore pods from every
/// node that holds a member, or attract them to none. An anti-affinity term that may also
/// select other clusters' members (say `app: etcd`) keeps doing so, without this cluster's.
fn restore_affinity(
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
            match_labels: Some(labels(restore)),
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
fn off_sibling_nodes(
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
                t.topology_key == HOSTNAME_TOPOLOGY && selects(t, &labels(restore), &namespace)
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
    // Terms are alternatives: each must keep off those nodes.
    for term in &mut required.node_selector_terms {
        term.match_fields
            .get_or_insert_default()
            .extend(off.iter().cloned());
    }
    affinity
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

#[cfg(test)]
mod tests {
    use super::*;
    use fetch_pod::source::from_spec;

    #[test]
    fn a_new_cluster_is_created_paused_held_by_the_restore_with_a_claim_per_member() {
        let new: NewCluster = serde_saphyr::from_str(
            "{size: 3, version: 3.5.16, repository: localhost/etcd, storage: 1Gi, storageClassName: fast}",
        )
        .unwrap();
        let expected: EtcdCluster = serde_saphyr::from_str(
            "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdCluster\n\
             metadata: {name: c, annotations: {etcd.database.coreos.com/restore: r-uid}}\n\
             spec: {size: 3, version: 3.5.16, repository: localhost/etcd, paused: true,\n\
               pod: {persistentVolumeClaimSpec: {accessModes: [ReadWriteOnce],\n\
                 resources: {requests: {storage: 1Gi}}, storageClassName: fast}}}",
        )
        .unwrap();
        assert_eq!(new_cluster("c", "r-uid", &new), expected);
        let default_class = NewCluster {
            storage_class_name: None,
            repository: None,
            ..new
        };
        let built = new_cluster("c", "r-uid", &default_class);
        let pod = built.spec.pod.unwrap();
        let claim = pod.persistent_volume_claim_spec.unwrap();
        assert_eq!(claim.storage_class_name, None);
        assert_eq!(built.spec.repository, None);
    }

    fn restore() -> EtcdRestore {
        serde_saphyr::from_str(
            "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdRestore\n\
             metadata: {name: c, namespace: ns, uid: r-uid}\n\
             spec: {etcdCluster: {name: c}, backupStorageType: S3,\n\
               s3: {path: bucket/etcd.backup, awsSecret: aws, endpoint: 'http://s3:3900', forcePathStyle: true}}",
        )
        .unwrap()
    }

    fn cluster(version: &str) -> EtcdCluster {
        serde_saphyr::from_str(&format!(
            "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdCluster\n\
             metadata: {{name: c, namespace: ns, uid: c-uid}}\n\
             spec: {{size: 3, version: '{version}', repository: localhost/etcd,\n\
               pod: {{persistentVolumeClaimSpec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 64Mi}}}}}}}}}}"
        ))
        .unwrap()
    }

    fn plan(version: &str) -> RestorePlan {
        RestorePlan {
            members: vec!["c-3".into(), "c-4".into(), "c-5".into()],
            token: "c-uid-r-uid".into(),
            version: version.into(),
            detached_claims: vec!["c-0".into()],
            handed_over: None,
        }
    }

    fn yaml(pod: &Pod) -> Value {
        serde_json::to_value(pod).unwrap()
    }

    /// Member c-4's restore pod, 3.5.16, from `restore`'s own source.
    fn restore_pod_of(restore: &EtcdRestore) -> Value {
        let source = from_spec(&restore.spec).unwrap();
        let (pod, _) = restore_pod(
            restore,
            &cluster("3.5.16"),
            "c-4",
            &plan("3.5.16"),
            "localhost/etcd-backup:dev",
            &source,
            &[],
        );
        yaml(&pod)
    }

    #[test]
    fn an_sse_c_backup_is_fetched_with_its_key_as_a_file() {
        let mut restore = restore();
        restore.spec.s3.as_mut().unwrap().server_side_encryption = Some(
            serde_saphyr::from_str("{mode: SSE-C, customerKeySecret: {name: sse, key: key.b64}}")
                .unwrap(),
        );
        let pod = restore_pod_of(&restore);
        let fetch = &pod["spec"]["initContainers"][0];
        let args = fetch["args"].as_array().unwrap();
        let at = args
            .iter()
            .position(|a| a == "--s3-sse-c-key-file")
            .unwrap();
        assert_eq!(args[at + 1], "/etc/etcd-backup/sse-c/key.b64");
        let volume = pod["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "sse-c")
            .unwrap();
        assert_eq!(volume["secret"]["secretName"], "sse");
        assert!(
            fetch["volumeMounts"]
                .to_string()
                .contains("/etc/etcd-backup/sse-c")
        );
    }

    #[test]
    fn an_encrypted_backup_is_fetched_with_the_identity_as_a_file_only() {
        let mut restore = restore();
        restore.spec.decryption = Some(backup_api::RestoreDecryption {
            identity_secret: backup_api::SecretKeyRef {
                name: "restore-key".into(),
                key: "identity.txt".into(),
            },
        });
        let pod = restore_pod_of(&restore);
        let fetch = &pod["spec"]["initContainers"][0];
        let args = fetch["args"].as_array().unwrap();
        let at = args.iter().position(|a| a == "--identity").unwrap();
        assert_eq!(args[at + 1], "/etc/etcd-backup/age/identity.txt");
        let volume = pod["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "age-identity")
            .unwrap();
        assert_eq!(volume["secret"]["secretName"], "restore-key");
        assert_eq!(volume["secret"]["defaultMode"], 0o440);
        assert!(
            fetch["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["name"] == "age-identity" && m["mountPath"] == "/etc/etcd-backup/age")
        );
        // Only the fetch sees it: not the restore tool, and no env var anywhere.
        let tool = &pod["spec"]["containers"][0];
        assert!(!tool["volumeMounts"].to_string().contains("age-identity"));
        assert!(!pod.to_string().contains("AGE-SECRET-KEY"));
    }

    #[test]
    fn the_fetch_runs_etcd_backup_with_the_secret_and_no_token() {
        let pod = restore_pod_of(&restore());
        assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "r-uid");
        assert_eq!(pod["metadata"]["labels"]["app"], "etcd-restore");
        assert_eq!(pod["spec"]["restartPolicy"], "Never");
        assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
        let fetch = &pod["spec"]["initContainers"][0];
        assert_eq!(fetch["image"], "localhost/etcd-backup:dev");
        assert_eq!(
            fetch["args"],
            json!([
                "--output",
                "json",
                "--log-format",
                "json",
                "--s3-endpoint",
                "http://s3:3900",
                "--s3-force-path-style",
                "fetch",
                "s3://bucket/etcd.backup",
                "--out",
                "/var/etcd-restore/snapshot.db"
            ])
        );
        assert_eq!(fetch["env"][0]["value"], "/etc/etcd-backup/aws/credentials");
        assert_eq!(pod["spec"]["volumes"][0]["secret"]["secretName"], "aws");
    }

    #[test]
    fn the_snapshot_is_fetched_to_the_nodes_disk_unless_memory_is_asked_for() {
        let scratch = |medium: Option<ScratchMedium>| {
            let mut restore = restore();
            restore.spec.scratch_medium = medium;
            let pod = restore_pod_of(&restore);
            let volumes = pod["spec"]["volumes"].as_array().unwrap().clone();
            let snapshot = volumes.iter().find(|v| v["name"] == "snapshot").unwrap();
            // Both the fetch and the restore tool see it where the tool reads the snapshot.
            for container in [
                &pod["spec"]["initContainers"][0],
                &pod["spec"]["containers"][0],
            ] {
                let mounts = container["volumeMounts"].as_array().unwrap();
                assert!(
                    mounts
                        .iter()
                        .any(|m| m["name"] == "snapshot" && m["mountPath"] == SNAPSHOT_DIR)
                );
            }
            snapshot["emptyDir"].clone()
        };
        assert_eq!(scratch(None), json!({}));
        assert_eq!(scratch(Some(ScratchMedium::Disk)), json!({}));
        assert_eq!(
            scratch(Some(ScratchMedium::Memory)),
            json!({"medium": "Memory"})
        );
    }

    #[test]
    fn a_staged_claim_is_the_restores_until_joined_to_the_cluster() {
        let cluster = cluster("3.5.16");
        let staged = staged_claim(&restore(), &cluster, "c-4", "3.5.16").unwrap();
        let built = build::claim(&cluster, "c-4", "3.5.16").unwrap();
        assert_eq!(staged.spec, built.spec);
        assert_eq!(staged.metadata.annotations, built.metadata.annotations);
        let staged = serde_json::to_value(&staged).unwrap();
        assert_eq!(staged["metadata"]["name"], "c-4");
        assert_eq!(
            staged["metadata"]["labels"],
            json!({"app": "etcd-restore", "etcd_restore": "c"})
        );
        assert_eq!(staged["metadata"]["ownerReferences"][0]["uid"], "r-uid");
        // Joined: exactly the cluster's labels and owner (the merge patch drops the restore's).
        let mut joined = staged.clone();
        json_patch::merge(&mut joined, &join_patch(&cluster, "c-4", "3.5.16").unwrap());
        assert_eq!(
            joined["metadata"]["labels"],
            serde_json::to_value(&built.metadata.labels).unwrap()
        );
        assert_eq!(joined["metadata"]["ownerReferences"][0]["uid"], "c-uid");
        assert_eq!(
            joined["metadata"]["ownerReferences"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn restore_pods_fetch_then_run_the_versions_own_tool_on_the_members_claim() {
        let restore = restore();
        let source = from_spec(&restore.spec).unwrap();
        let (pod, command) = restore_pod(
            &restore,
            &cluster("3.5.16"),
            "c-4",
            &plan("3.5.16"),
            "localhost/etcd-backup:dev",
            &source,
            &[],
        );
        assert!(command.bumps_revision);
        let pod = yaml(&pod);
        assert_eq!(pod["metadata"]["name"], "c-4-restore");
        let fetch = &pod["spec"]["initContainers"][0];
        let args: Vec<&str> = fetch["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(
            &args[args.len() - 4..],
            [
                "fetch",
                "s3://bucket/etcd.backup",
                "--out",
                "/var/etcd-restore/snapshot.db"
            ]
        );
        let tool = &pod["spec"]["containers"][0];
        assert_eq!(tool["image"], "localhost/etcd:v3.5.16");
        assert_eq!(tool["command"][0], "/usr/local/bin/etcdutl");
        let argv: Vec<&str> = tool["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(argv.contains(&"--name=c-4"));
        assert!(argv.contains(&"--initial-cluster-token=c-uid-r-uid"));
        assert!(argv.contains(&"--data-dir=/var/etcd/data"));
        assert!(
            argv.iter()
                .any(|a| a.starts_with("--initial-cluster=c-3=http://c-3.c.ns.svc"))
        );
        let claim = pod["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "etcd-data")
            .unwrap();
        assert_eq!(claim["persistentVolumeClaim"]["claimName"], "c-4");
        // Pod Security "restricted": the non-root user of the member it restores, every
        // container locked down.
        let context = &pod["spec"]["securityContext"];
        assert_eq!(context["runAsNonRoot"], true);
        assert_eq!(context["runAsUser"], 65532);
        assert_eq!(context["seccompProfile"]["type"], "RuntimeDefault");
        for container in [fetch, tool] {
            assert_eq!(
                container["securityContext"]["allowPrivilegeEscalation"],
                false
            );
            assert_eq!(
                container["securityContext"]["capabilities"]["drop"][0],
                "ALL"
            );
        }

        // 3.4.23 has no --bump-revision and restores with etcdctl.
        let (pod, command) = restore_pod(
            &restore,
            &cluster("3.4.23"),
            "c-4",
            &plan("3.4.23"),
            "i",
            &source,
            &[],
        );
        assert!(!command.bumps_revision);
        assert_eq!(
            yaml(&pod)["spec"]["containers"][0]["command"][0],
            "/usr/local/bin/etcdctl"
        );
    }

    #[test]
    fn local_sources_mount_the_backup_claim_read_only() {
        let source = Source {
            url: "file:///var/lib/etcd-backup/b/etcd.db".into(),
            s3: None,
            claim: Some("backups".into()),
            identity: None,
        };
        let (pod, _) = restore_pod(
            &restore(),
            &cluster("3.5.16"),
            "c-4",
            &plan("3.5.16"),
            "i",
            &source,
            &[],
        );
        let pod = yaml(&pod);
        assert_eq!(
            pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "backups"
        );
        assert_eq!(
            pod["spec"]["volumes"][0]["persistentVolumeClaim"]["readOnly"],
            true
        );
        assert_eq!(pod["spec"]["initContainers"][0]["env"], json!([]));
    }

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
