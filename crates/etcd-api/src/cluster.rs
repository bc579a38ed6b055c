//! `EtcdCluster`: coreos's cluster resource, typed so the restore controller can read, pause and
//! resume it. JSON names follow coreos exactly, including the capitalised `TLS`,
//! `DNSTimeoutInSecond` and `ClusterDomain` keys.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, PersistentVolumeClaimSpec, PodSecurityContext, ResourceRequirements,
    Toleration, TopologySpreadConstraint,
};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition;

/// Image repository coreos used when `repository` is empty.
pub const DEFAULT_REPOSITORY: &str = "quay.io/coreos/etcd";
/// etcd version coreos used when `version` is empty. Kept only so coreos manifests parse: the
/// operator refuses it as unsupported.
pub const DEFAULT_VERSION: &str = "3.2.13";

/// Desired etcd cluster.
// The repeated `type_ = "..."` inside printcolumn(...) is not a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "etcd.database.coreos.com",
    version = "v1beta2",
    kind = "EtcdCluster",
    namespaced,
    status = "EtcdClusterStatus",
    derive = "PartialEq",
    shortname = "etcdc",
    category = "etcd",
    doc = "An etcd cluster managed by an etcd operator (coreos-compatible).",
    printcolumn(name = "Size", type_ = "integer", json_path = ".spec.size"),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Paused",
        type_ = "boolean",
        json_path = ".spec.paused",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterSpec {
    /// Number of members, 1 to 7.
    #[schemars(range(min = 1, max = 7))]
    pub size: i32,
    /// Image repository with the official etcd tags; default `quay.io/coreos/etcd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// etcd version, `MAJOR.MINOR.PATCH` (a leading `v` is ignored), e.g. `3.6.16`. Must be set
    /// to a supported version: 3.5, 3.6 or 3.7 (3.4 only to upgrade from); anything before 3.4
    /// or outside major version 3 is refused (`InvalidSpec`) and nothing is changed. Unset falls
    /// back to coreos's default `3.2.13` only so that coreos manifests parse: that version is
    /// refused as unsupported too. Changing it upgrades the cluster, one minor version at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Stop the operator from managing the cluster (the restore controller pauses it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// How member pods are created. Changes do not affect running pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodPolicy>,
    /// TLS for peers and clients (coreos key `TLS`).
    #[serde(rename = "TLS", default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsPolicy>,
    /// Scheduled defragmentation, one member at a time, the leader last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defragmentation: Option<crate::defrag::Defragmentation>,
    /// How members compact their history (new members; running ones keep their flags until
    /// they are recreated). Unset: periodic, keeping one hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compaction: Option<crate::defrag::AutoCompaction>,
    /// Replacing a member whose node is lost (not Ready, or gone). Unset: after 300 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_replacement: Option<MemberReplacement>,
    /// What the operator does by itself when the cluster has lost quorum because the nodes of
    /// a majority of its members are down. Unset: nothing (`recovery: None`); the user
    /// recovers with an EtcdRestore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum_loss: Option<QuorumLoss>,
}

/// Automatic recovery from a lost quorum: once the nodes of the members that do not answer
/// have all been down (not Ready, or gone) for `afterSeconds`, the operator creates the
/// EtcdRestore a human would (named like the cluster): from the surviving member, or from the
/// newest backup of an EtcdBackup. Never while a member that does not answer is on a node that
/// is up (it may come back), never a second time (a failed recovery waits for a human).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new(
    "self.recovery != 'FromBackup' || (has(self.backupRef) && self.backupRef.name != '')"
).message("recovery FromBackup needs backupRef.name"))]
#[serde(rename_all = "camelCase")]
pub struct QuorumLoss {
    /// `None` (default), `FromSurvivor` or `FromBackup`.
    #[serde(default)]
    pub recovery: QuorumLossRecovery,
    /// How long the lost members' nodes must have been down (counted from when Kubernetes
    /// marked them not Ready, about 50 s after they stopped answering); default 300, at least
    /// 10. A node deleted from the cluster counts as down at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10))]
    pub after_seconds: Option<i64>,
    /// The EtcdBackup, in this namespace, whose newest verified backup `FromBackup` restores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_ref: Option<crate::restore::BackupRef>,
    /// `NotRequired` (default): a lost member's node counts as down once it is not Ready (for
    /// `afterSeconds`). `Required`: only once it is also fenced, known to be off: deleted from
    /// the API, or tainted `node.kubernetes.io/out-of-service` (Kubernetes' non-graceful node
    /// shutdown). Not Ready does not prove a node is off: lost members cut off from the
    /// control plane but not from each other may still hold a quorum of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing: Option<QuorumLossFencing>,
}

/// Whether an automatic recovery waits for the lost members' nodes to be fenced.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum QuorumLossFencing {
    /// Not Ready for `afterSeconds` is enough.
    #[default]
    NotRequired,
    /// Each lost member's node must also be deleted or tainted
    /// `node.kubernetes.io/out-of-service`.
    Required,
}

/// What an automatic recovery from a lost quorum restores.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum QuorumLossRecovery {
    /// Nothing: `Available=False/QuorumLost`, and a human decides.
    #[default]
    None,
    /// The surviving member with the most recent data (an EtcdRestore with `fromSurvivor`):
    /// nothing it committed is lost.
    FromSurvivor,
    /// The newest verified backup of `backupRef` (an EtcdRestore with `backupRef`): every write
    /// since that backup is lost.
    FromBackup,
}

/// Default of `spec.quorumLoss.afterSeconds`.
pub const DEFAULT_QUORUM_LOSS_AFTER_SECONDS: u64 = 300;

/// When a member whose node is lost is replaced: removed from etcd (its claim kept, detached
/// from the cluster) and a new member started on a healthy node, one at a time, only while the
/// cluster keeps quorum without it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberReplacement {
    /// Replace members of lost nodes at all; default `true`. `false`: a lost node's member stays
    /// down until its node comes back (or a human removes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// How long a member's node must have been not Ready (counted from when Kubernetes marked it
    /// so, about 50 s after it stopped answering) before the member is replaced; default 300,
    /// at least 10. A node deleted from the cluster counts as lost at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10))]
    pub after_seconds: Option<i64>,
}

/// Default of `spec.memberReplacement.afterSeconds`: as long as Kubernetes waits before it
/// evicts pods from an unreachable node (the default toleration of the `unreachable` taint).
pub const DEFAULT_REPLACEMENT_AFTER_SECONDS: u64 = 300;

impl EtcdClusterSpec {
    /// After how many seconds of its node being lost a member is replaced; `None`: never.
    pub fn replace_after_seconds(&self) -> Option<u64> {
        let policy = self.member_replacement.as_ref();
        if policy.and_then(|p| p.enabled) == Some(false) {
            return None;
        }
        Some(
            policy
                .and_then(|p| p.after_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .unwrap_or(DEFAULT_REPLACEMENT_AFTER_SECONDS)
                .max(10),
        )
    }

    /// The image repository, with the coreos default.
    pub fn repository(&self) -> &str {
        crate::storage::non_empty(self.repository.as_deref()).unwrap_or(DEFAULT_REPOSITORY)
    }

    /// The version without a leading `v`, with the coreos default.
    pub fn version(&self) -> &str {
        let v = crate::storage::non_empty(self.version.as_deref()).unwrap_or(DEFAULT_VERSION);
        v.trim_start_matches('v')
    }

    /// The member image, `<repository>:v<version>` as coreos tagged it.
    pub fn image(&self) -> String {
        self.image_of(self.version())
    }

    /// The member image of another version (members run an older one until upgraded).
    pub fn image_of(&self, version: &str) -> String {
        format!("{}:v{}", self.repository(), version.trim_start_matches('v'))
    }

    /// Whether the operator is told to keep its hands off.
    pub fn is_paused(&self) -> bool {
        self.paused.unwrap_or(false)
    }
}

/// How the operator builds member pods (coreos `PodPolicy`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodPolicy {
    /// Pod labels; `app` and `etcd_*` are reserved by the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Node labels the pod must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Scheduling constraints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Deprecated: spread members across nodes; use `affinity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anti_affinity: Option<bool>,
    /// How members spread over topology domains (not in coreos). Unset: a member per node
    /// (required for a member starting on new data, preferred for one returning to its claim)
    /// and across `topology.kubernetes.io/zone` (preferred), unless `antiAffinity` or a pod
    /// anti-affinity in `affinity` places them already.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    /// Resources of the etcd container; fixed at creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Pod tolerations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// Extra environment of the etcd container; must not override bootstrap flags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_env: Option<Vec<EnvVar>>,
    /// PVC for the data directory instead of emptyDir (alpha in coreos).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim_spec: Option<PersistentVolumeClaimSpec>,
    /// Pod annotations; `etcd.version` is reserved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// coreos: the image of its DNS-wait init container (default `busybox:1.28.0-glibc`).
    /// Accepted and ignored: member pods have no init container, since a member that starts
    /// before its DNS name resolves exits and is restarted by the kubelet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busybox_image: Option<String>,
    /// Pod security context of the member and restore pods. Each field left unset gets the
    /// default that passes Pod Security "restricted": `runAsNonRoot`, user, group and `fsGroup`
    /// 65532 (`fsGroupChangePolicy: OnRootMismatch`), seccomp `RuntimeDefault`. A member whose
    /// claim predates these defaults keeps the image's user (its data is that user's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
    /// coreos: how long its DNS-wait init container waited for the pod's DNS name. Accepted and
    /// ignored: member pods have no init container, since a member that starts before its DNS
    /// name resolves exits and is restarted by the kubelet.
    #[serde(
        rename = "DNSTimeoutInSecond",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub dns_timeout_in_second: Option<i64>,
    /// Cluster domain for member URLs, e.g. `.cluster.local`; empty means none.
    #[serde(
        rename = "ClusterDomain",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_domain: Option<String>,
}

/// TLS settings (coreos `TLSPolicy`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct TlsPolicy {
    /// Certificates supplied as Secrets.
    #[serde(rename = "static", default, skip_serializing_if = "Option::is_none")]
    pub static_tls: Option<StaticTls>,
}

/// Static TLS Secrets. As coreos checks: `operatorSecret` and `member.serverSecret` go together.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = Rule::new(
    "(has(self.operatorSecret) && self.operatorSecret != '') == (has(self.member) && has(self.member.serverSecret) && self.member.serverSecret != '')"
).message("operatorSecret and member.serverSecret must be set together"))]
#[serde(rename_all = "camelCase")]
pub struct StaticTls {
    /// Secrets mounted in every member pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<MemberSecret>,
    /// Client certificate Secret the operator uses to reach the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub operator_secret: Option<String>,
}

/// Member certificate Secrets.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberSecret {
    /// Certificates for peer traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_secret: Option<String>,
    /// Serving certificates for client traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub server_secret: Option<String>,
}

/// Observed cluster state (coreos `ClusterStatus`). coreos writes every field, sometimes as
/// `null`, so all are optional.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterStatus {
    /// Lifecycle phase: `""`, `Creating` or `Running`; coreos's `Failed` is never set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ClusterPhase>,
    /// Why the cluster is not available (the `Available` condition's reason, e.g. `QuorumLost`),
    /// or `InvalidSpec`; unset otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Whether the operator has paused control (mirrors `spec.paused`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_paused: Option<bool>,
    /// `Available`, `Progressing`, `Degraded`, `DataPersistent` and, once a defragmentation
    /// round has ended, `Defragmented` (coreos's `Recovering`, `Scaling` and `Upgrading` are
    /// not written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "condition::list_schema::<ClusterCondition>")]
    pub conditions: Option<Vec<ClusterCondition>>,
    /// Current number of members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i32>,
    /// Client Service name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// Client Service port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_port: Option<i32>,
    /// Member pods by readiness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<MembersStatus>,
    /// The oldest etcd version a member pod runs (members differ during an upgrade); unset
    /// while there is no member pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<String>,
    /// The version being upgraded to (`spec.version`) while it differs from `currentVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_version: Option<String>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The membership change in flight, recorded before etcd is called, so that an operator
    /// restarted at any point finishes or undoes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub membership_change: Option<MembershipChange>,
    /// Defragmentation rounds: the one under way, the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defragmentation: Option<crate::defrag::DefragStatus>,
}

/// A membership change the operator has started.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MembershipChange {
    /// `Seed`, `Add` or `Remove`.
    pub action: String,
    /// The member's name (`<cluster>-<ordinal>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// etcd's member ID, hex, for a removal.
    #[serde(rename = "memberID", default, skip_serializing_if = "Option::is_none")]
    pub member_id: Option<String>,
    /// Why the member is removed (for a removal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the change was recorded (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<String>,
    /// For a removal: the member's claim is kept, detached from the cluster (a member whose
    /// node was lost), instead of deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_claim: Option<bool>,
    /// The EtcdRestore (uid) the cluster's data came from when the change was recorded: the
    /// cluster's `etcd.database.coreos.com/restored-by` annotation then. A change recorded
    /// before a later restore handed the cluster over means nothing and is dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_by: Option<String>,
}

/// Cluster phase (coreos's values). `""`: not looked at yet. `Creating`: the seed member is being
/// made. `Running`: created (also while members are down: see the conditions). `Failed` is
/// coreos's and never set by this operator: a cluster that lost quorum says so in `Available`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ClusterPhase {
    /// Not yet handled by the operator.
    #[serde(rename = "")]
    None,
    /// Seed member being created.
    Creating,
    /// Created (also while members are down: see the conditions).
    Running,
    /// coreos: given up. Never set by this operator (a cluster that lost quorum stays
    /// `Running`, with `Available` false).
    Failed,
}

/// A coreos cluster condition (not metav1: it has `lastUpdateTime` and string times).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCondition {
    /// `Available`, `Progressing`, `Degraded`, `DataPersistent` or `Defragmented`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// RFC 3339 time of the last update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<String>,
    /// RFC 3339 time of the last status change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// Machine-readable cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The `metadata.generation` this condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Member pod names by readiness.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MembersStatus {
    /// Members serving requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<Vec<String>>,
    /// Members not serving requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unready: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coreos_defaults() {
        let mut spec = EtcdClusterSpec {
            size: 3,
            ..Default::default()
        };
        assert_eq!(spec.image(), "quay.io/coreos/etcd:v3.2.13");
        spec.version = Some("v3.5.17".into());
        spec.repository = Some("gcr.io/etcd-development/etcd".into());
        assert_eq!(spec.image(), "gcr.io/etcd-development/etcd:v3.5.17");
        assert!(!spec.is_paused());
    }

    #[test]
    fn coreos_status_with_nulls_deserializes() {
        let status: EtcdClusterStatus = serde_json::from_value(serde_json::json!({
            "phase": "", "reason": "", "controlPaused": false, "conditions": null, "size": 0,
            "members": {}, "currentVersion": "", "targetVersion": ""
        }))
        .unwrap();
        assert_eq!(status.phase, Some(ClusterPhase::None));
        assert_eq!(status.conditions, None);
    }
}
