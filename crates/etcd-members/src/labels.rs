//! The labels and annotations on etcd member pods and claims, and on EtcdClusters, that the
//! EtcdCluster operator and the EtcdRestore operator both read or write: the adoption contract.
//! A restore's pods and claims carry exactly these, so the cluster operator takes them over as
//! its own. `docs/reference/labels-and-annotations.md` lists them for users.

use std::collections::BTreeMap;

use etcd_api::EtcdClusterSpec;

/// Labels coreos put on member pods and that select them; the restore controller's pods carry
/// the same (the adoption contract).
pub const APP_LABEL: &str = "app";
pub const CLUSTER_LABEL: &str = "etcd_cluster";
pub const MEMBER_LABEL: &str = "etcd_node";
/// Annotation with the etcd version a pod runs.
pub const VERSION_ANNOTATION: &str = "etcd.version";
/// Annotation on a member's claim made by this operator (or a restore) since member pods run as
/// a non-root user by default: its data is that user's. A claim without it was written by pods
/// that ran as the image's user (root), and its member keeps that user (see
/// [`operator_runtime::pod_security`]).
pub const POD_SECURITY_ANNOTATION: &str = "etcd.pod-security";
/// Its value.
pub const RESTRICTED: &str = "restricted";
/// Annotation with the version an in-place upgrade moved a pod from, until the upgrade is done
/// (what a failed upgrade goes back to).
pub const UPGRADED_FROM_ANNOTATION: &str = "etcd.version.upgraded-from";
/// On a claim: the newest etcd version that has run on its data (`none` for a claim no etcd
/// has run on yet). Data is never moved back to an older version than that; a claim without
/// it (made before it existed, or by a restore) is never moved back at all.
pub const VERSION_RAN_ANNOTATION: &str = "etcd.version.ran";
pub const NOTHING_RAN: &str = "none";
/// On an EtcdCluster: the EtcdRestore (name) that was deleted after it had begun replacing the
/// cluster's members. The cluster stays paused; the paused status says so and how to go on.
pub const ABANDONED_RESTORE_ANNOTATION: &str = "etcd.database.coreos.com/abandoned-restore";
/// On an EtcdCluster: the EtcdRestore (uid) that last handed the cluster over, set by the
/// restore operator with the unpause (and never removed; a later restore replaces it). A
/// membership change the cluster operator recorded before it (`status.membershipChange`,
/// which names the value it saw) means nothing for the restored data and is dropped: the
/// hand-over needs no write to the cluster operator's status.
pub const RESTORED_BY_ANNOTATION: &str = "etcd.database.coreos.com/restored-by";
/// On a replaced member's claim, instead of [`CLUSTER_LABEL`]: the cluster it was detached from
/// by a restore (with `spec.oldVolumes: Keep`; no longer one of the cluster's claims).
pub const DETACHED_LABEL: &str = "etcd.database.coreos.com/detached-from";
/// On a claim detached by the EtcdCluster operator (with [`DETACHED_LABEL`]): its member was
/// replaced because its node was lost; the value is that node. Kept until the user deletes it.
pub const KEPT_FROM_LOST_NODE_ANNOTATION: &str = "etcd.database.coreos.com/kept-from-lost-node";

/// The labels selecting every member pod and claim of a cluster.
pub fn selector(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (APP_LABEL.to_string(), "etcd".to_string()),
        (CLUSTER_LABEL.to_string(), cluster.to_string()),
    ])
}

pub fn label_selector(cluster: &str) -> String {
    format!("{APP_LABEL}=etcd,{CLUSTER_LABEL}={cluster}")
}

/// The labels of `member`'s pod: the user's `pod.labels`, then the selector and the member's name.
pub fn member_labels(
    spec: &EtcdClusterSpec,
    cluster: &str,
    member: &str,
) -> BTreeMap<String, String> {
    let mut labels = spec
        .pod
        .as_ref()
        .and_then(|p| p.labels.clone())
        .unwrap_or_default();
    // Reserved keys win over user labels (coreos rejected `app` and `etcd_*`).
    labels.retain(|k, _| k != APP_LABEL && !k.starts_with("etcd_"));
    labels.extend(selector(cluster));
    labels.insert(MEMBER_LABEL.to_string(), member.to_string());
    labels
}
