//! Prometheus metrics (`/metrics`), prefixed `etcd_cluster_`.

use etcd_cluster::{MembershipObserved, MembershipStep, UpgradeStep};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
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
    pub reconcile_errors: Counter,
    pub db_size: Family<MemberLabels, Gauge>,
    pub db_size_in_use: Family<MemberLabels, Gauge>,
    pub db_quota: Family<MemberLabels, Gauge>,
    pub last_defrag: Family<MemberLabels, Gauge<f64, AtomicU64>>,
    pub last_defrag_duration: Family<MemberLabels, Gauge<f64, AtomicU64>>,
    pub alarms: Family<AlarmLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AlarmLabels {
    pub namespace: String,
    pub name: String,
    pub alarm: String,
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
        let reconcile_errors = Counter::default();
        registry.register(
            "reconcile_errors",
            "Reconciles that failed",
            reconcile_errors.clone(),
        );
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
            "How long each member's last defragmentation took, until it answered healthy again",
            last_defrag_duration.clone(),
        );
        let alarms = Family::<AlarmLabels, Gauge>::default();
        registry.register(
            "alarm",
            "1 while etcd reports the alarm (NOSPACE, CORRUPT) for the cluster",
            alarms.clone(),
        );
        Metrics {
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
    pub fn observe(
        &self,
        namespace: &str,
        name: &str,
        size: i32,
        observed: &MembershipObserved,
        step: &MembershipStep,
    ) {
        let labels = ClusterLabels {
            namespace: namespace.into(),
            name: name.into(),
        };
        self.size.get_or_create(&labels).set(size.into());
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
        let labels = ChangeLabels {
            namespace: namespace.into(),
            name: name.into(),
            step: kind.into(),
        };
        self.membership_changes.get_or_create(&labels).inc();
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
        let labels = ChangeLabels {
            namespace: namespace.into(),
            name: name.into(),
            step: kind.into(),
        };
        self.upgrade_steps.get_or_create(&labels).inc();
    }

    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("metrics encode");
        text
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
}
