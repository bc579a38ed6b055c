//! Prometheus metrics (`/metrics`), prefixed `etcd_cluster_`.

use etcd_cluster::{MembershipObserved, MembershipStep, UpgradeStep};
use operator_runtime::process::PerObjectState;
use operator_runtime::reconcile_errors::ReconcileErrors;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ClusterLabels {
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MemberLabels {
    pub namespace: String,
    pub name: String,
    pub member: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChangeLabels {
    pub namespace: String,
    pub name: String,
    pub step: String,
}

pub struct Metrics {
    pub registry: Registry,
    pub size: Family<ClusterLabels, Gauge>,
    pub members: Family<ClusterLabels, Gauge>,
    pub members_healthy: Family<ClusterLabels, Gauge>,
    pub quorum_lost: Family<ClusterLabels, Gauge>,
    pub membership_changes: Family<ChangeLabels, Counter>,
    pub upgrade_steps: Family<ChangeLabels, Counter>,
    pub reconcile_errors: ReconcileErrors,
    pub db_size: Family<MemberLabels, Gauge>,
    pub db_size_in_use: Family<MemberLabels, Gauge>,
    pub db_quota: Family<MemberLabels, Gauge>,
    pub last_defrag: Family<MemberLabels, Gauge<f64, AtomicU64>>,
    pub last_defrag_duration: Family<MemberLabels, Gauge<f64, AtomicU64>>,
    pub alarms: Family<AlarmLabels, Gauge>,
    pub quorum_loss_recoveries: Family<ChangeLabels, Counter>,
    /// The clusters with series, and the members each has series for: a deleted cluster's
    /// series, and a removed member's, go with it.
    seen: Mutex<BTreeMap<ClusterLabels, BTreeSet<String>>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AlarmLabels {
    pub namespace: String,
    pub name: String,
    pub alarm: String,
}

/// The `step` label values of `membership_steps` and `upgrade_steps`, and the alarms reported.
const MEMBERSHIP_STEPS: [&str; 7] = [
    "seed", "add", "start", "promote", "remove", "delete", "restart",
];
const UPGRADE_STEPS: [&str; 5] = ["upgrade", "revert", "flush-log", "failed", "refused"];
pub const ALARMS: [&str; 2] = ["NOSPACE", "CORRUPT"];

fn change_labels(cluster: &ClusterLabels, step: &str) -> ChangeLabels {
    ChangeLabels {
        namespace: cluster.namespace.clone(),
        name: cluster.name.clone(),
        step: step.into(),
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("etcd_cluster");
        let size = Family::<ClusterLabels, Gauge>::default();
        registry.register(
            "size",
            "Members the EtcdCluster asks for (spec.size)",
            size.clone(),
        );
        let members = Family::<ClusterLabels, Gauge>::default();
        registry.register("members", "Members in etcd's member list", members.clone());
        let members_healthy = Family::<ClusterLabels, Gauge>::default();
        registry.register(
            "members_healthy",
            "Members answering their status",
            members_healthy.clone(),
        );
        let quorum_lost = Family::<ClusterLabels, Gauge>::default();
        registry.register(
            "quorum_lost",
            "1 while fewer healthy voting members than a majority, or none answers",
            quorum_lost.clone(),
        );
        let membership_changes = Family::<ChangeLabels, Counter>::default();
        registry.register(
            "membership_steps",
            "Membership steps executed (seed, add, start, promote, remove, delete, restart)",
            membership_changes.clone(),
        );
        let upgrade_steps = Family::<ChangeLabels, Counter>::default();
        registry.register(
            "upgrade_steps",
            "Upgrade steps executed (upgrade, revert), and failed or refused upgrades each time reported",
            upgrade_steps.clone(),
        );
        let reconcile_errors = ReconcileErrors::default();
        reconcile_errors.register(&mut registry);
        let db_size = Family::<MemberLabels, Gauge>::default();
        registry.register(
            "member_db_size_bytes",
            "Size of each member's database file",
            db_size.clone(),
        );
        let db_size_in_use = Family::<MemberLabels, Gauge>::default();
        registry.register(
            "member_db_size_in_use_bytes",
            "Part of each member's database file in use (the rest is freed by defragmentation)",
            db_size_in_use.clone(),
        );
        let db_quota = Family::<MemberLabels, Gauge>::default();
        registry.register(
            "member_db_quota_bytes",
            "Each member's backend quota: etcd refuses writes (alarm NOSPACE) when the file reaches it",
            db_quota.clone(),
        );
        let last_defrag = Family::<MemberLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "member_last_defrag_timestamp_seconds",
            "Unix time each member's last defragmentation by the operator ended",
            last_defrag.clone(),
        );
        let last_defrag_duration = Family::<MemberLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "member_last_defrag_duration_seconds",
            "How long each member's last defragmentation took, until its call answered (or, the answer lost, it served reads again)",
            last_defrag_duration.clone(),
        );
        let alarms = Family::<AlarmLabels, Gauge>::default();
        registry.register(
            "alarm",
            "1 while etcd reports the alarm (NOSPACE, CORRUPT) for the cluster",
            alarms.clone(),
        );
        let quorum_loss_recoveries = Family::<ChangeLabels, Counter>::default();
        registry.register(
            "quorum_loss_recoveries",
            "Recoveries of a lost quorum started by spec.quorumLoss (step: FromSurvivor, FromBackup)",
            quorum_loss_recoveries.clone(),
        );
        Metrics {
            seen: Mutex::default(),
            quorum_loss_recoveries,
            db_size,
            db_size_in_use,
            db_quota,
            last_defrag,
            last_defrag_duration,
            alarms,
            registry,
            size,
            members,
            members_healthy,
            quorum_lost,
            membership_changes,
            upgrade_steps,
            reconcile_errors,
        }
    }
}

impl Metrics {
    /// A recovery of a lost quorum was started (`spec.quorumLoss`).
    pub fn recovery_started(&self, namespace: &str, name: &str, recovery: &str) {
        let labels = self.cluster_labels(namespace, name);
        self.quorum_loss_recoveries
            .get_or_create(&change_labels(&labels, recovery))
            .inc();
    }

    pub fn observe(
        &self,
        namespace: &str,
        name: &str,
        size: i32,
        observed: &MembershipObserved,
        step: &MembershipStep,
    ) {
        let labels = self.cluster_labels(namespace, name);
        self.size.get_or_create(&labels).set(size.into());
        // Series of members no longer in etcd's member list (scaled down, replaced) go.
        if let Some(members) = &observed.members {
            let names: BTreeSet<String> = members.iter().filter_map(|m| m.name.clone()).collect();
            self.keep_members(&labels, &names);
        }
        let members = observed.members.as_deref().unwrap_or(&[]);
        self.members
            .get_or_create(&labels)
            .set(members.len() as i64);
        self.members_healthy
            .get_or_create(&labels)
            .set(members.iter().filter(|m| m.healthy).count() as i64);
        self.quorum_lost
            .get_or_create(&labels)
            .set(crate::status::quorum_lost(observed, step) as i64);
        let kind = match step {
            MembershipStep::Seed { .. } => "seed",
            MembershipStep::AddLearner { .. } => "add",
            MembershipStep::StartMember { .. } => "start",
            MembershipStep::Promote { .. } => "promote",
            MembershipStep::RemoveMember { .. } => "remove",
            MembershipStep::DeleteMemberResources { .. } => "delete",
            MembershipStep::DeletePod { .. } => "restart",
            _ => return,
        };
        self.membership_changes
            .get_or_create(&change_labels(&labels, kind))
            .inc();
    }

    pub fn observe_upgrade(&self, namespace: &str, name: &str, step: &UpgradeStep) {
        let kind = match step {
            UpgradeStep::Upgrade { .. } => "upgrade",
            UpgradeStep::Revert { .. } => "revert",
            UpgradeStep::FlushLog { .. } => "flush-log",
            UpgradeStep::Failed { .. } => "failed",
            UpgradeStep::Refused(_) => "refused",
            UpgradeStep::Wait { .. } | UpgradeStep::Done => return,
        };
        let cluster = self.cluster_labels(namespace, name);
        self.upgrade_steps
            .get_or_create(&change_labels(&cluster, kind))
            .inc();
    }

    /// The labels of a cluster, now one with series.
    pub fn cluster_labels(&self, namespace: &str, name: &str) -> ClusterLabels {
        let labels = ClusterLabels {
            namespace: namespace.into(),
            name: name.into(),
        };
        self.seen_clusters().entry(labels.clone()).or_default();
        labels
    }

    /// The labels of a cluster's member, now one with series.
    pub fn member_labels(&self, namespace: &str, name: &str, member: &str) -> MemberLabels {
        let cluster = self.cluster_labels(namespace, name);
        if let Some(members) = self.seen_clusters().get_mut(&cluster) {
            members.insert(member.into());
        }
        MemberLabels {
            namespace: namespace.into(),
            name: name.into(),
            member: member.into(),
        }
    }

    fn keep_members(&self, cluster: &ClusterLabels, keep: &BTreeSet<String>) {
        let gone: BTreeSet<String> = match self.seen_clusters().get_mut(cluster) {
            Some(members) => {
                let gone = members.difference(keep).cloned().collect();
                members.retain(|m| keep.contains(m));
                gone
            }
            None => return,
        };
        self.remove_members(cluster, &gone);
    }

    fn remove(&self, cluster: &ClusterLabels, members: &BTreeSet<String>) {
        self.size.remove(cluster);
        self.members.remove(cluster);
        self.members_healthy.remove(cluster);
        self.quorum_lost.remove(cluster);
        for step in MEMBERSHIP_STEPS {
            self.membership_changes
                .remove(&change_labels(cluster, step));
        }
        for step in UPGRADE_STEPS {
            self.upgrade_steps.remove(&change_labels(cluster, step));
        }
        for alarm in ALARMS {
            self.alarms.remove(&AlarmLabels {
                namespace: cluster.namespace.clone(),
                name: cluster.name.clone(),
                alarm: alarm.into(),
            });
        }
        self.remove_members(cluster, members);
    }

    fn remove_members(&self, cluster: &ClusterLabels, members: &BTreeSet<String>) {
        for member in members {
            let labels = MemberLabels {
                namespace: cluster.namespace.clone(),
                name: cluster.name.clone(),
                member: member.clone(),
            };
            self.db_size.remove(&labels);
            self.db_size_in_use.remove(&labels);
            self.db_quota.remove(&labels);
            self.last_defrag.remove(&labels);
            self.last_defrag_duration.remove(&labels);
        }
    }

    fn seen_clusters(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<ClusterLabels, BTreeSet<String>>> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("metrics encode");
        text
    }
}

/// A deleted cluster's series go with it.
impl PerObjectState for Metrics {
    /// The cluster is gone: its series go with it.
    fn forget(&self, namespace: &str, name: &str) {
        let labels = ClusterLabels {
            namespace: namespace.into(),
            name: name.into(),
        };
        let members = self.seen_clusters().remove(&labels).unwrap_or_default();
        self.remove(&labels, &members);
    }

    fn retain(&self, exists: &dyn Fn(&str, &str) -> bool) {
        let gone: Vec<(ClusterLabels, BTreeSet<String>)> = {
            let mut seen = self.seen_clusters();
            let gone = seen
                .iter()
                .filter(|(l, _)| !exists(&l.namespace, &l.name))
                .map(|(l, m)| (l.clone(), m.clone()))
                .collect();
            seen.retain(|l, _| exists(&l.namespace, &l.name));
            gone
        };
        for (labels, members) in &gone {
            self.remove(labels, members);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upgrade_steps_are_counted_per_cluster_and_kind() {
        let metrics = Metrics::default();
        let step = UpgradeStep::Upgrade {
            member: "c-1".into(),
            from: "3.4.23".into(),
        };
        metrics.observe_upgrade("ns", "c", &step);
        metrics.observe_upgrade("ns", "c", &UpgradeStep::Done);
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"etcd_cluster_upgrade_steps_total{namespace="ns",name="c",step="upgrade"} 1"#
            ),
            "{text}"
        );
        assert!(!text.contains(r#"step="done""#), "{text}");
    }

    #[test]
    fn a_deleted_cluster_and_a_removed_member_take_their_series_with_them() {
        let metrics = Metrics::default();
        for cluster in ["gone", "kept", "relisted-away"] {
            for member in ["m-0", "m-1"] {
                let labels = metrics.member_labels("ns", cluster, member);
                metrics.db_size.get_or_create(&labels).set(1);
            }
            metrics.observe_upgrade(
                "ns",
                cluster,
                &UpgradeStep::Revert {
                    member: "m-0".into(),
                    to: "3.5.16".into(),
                },
            );
        }
        let kept = metrics.cluster_labels("ns", "kept");
        metrics.keep_members(&kept, &BTreeSet::from(["m-0".to_string()]));
        metrics.forget("ns", "gone");
        metrics.retain(&|_, name| name != "relisted-away");
        let text = metrics.encode();
        assert!(!text.contains(r#"name="gone""#), "{text}");
        assert!(!text.contains(r#"name="relisted-away""#), "{text}");
        assert!(
            text.contains(
                r#"etcd_cluster_member_db_size_bytes{namespace="ns",name="kept",member="m-0"} 1"#
            ),
            "{text}"
        );
        assert!(!text.contains(r#"member="m-1""#), "{text}");
        assert!(
            text.contains(
                r#"etcd_cluster_upgrade_steps_total{namespace="ns",name="kept",step="revert"} 1"#
            ),
            "{text}"
        );
    }
}
