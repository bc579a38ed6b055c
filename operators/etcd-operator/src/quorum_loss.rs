//! `spec.quorumLoss`: when the planner says the quorum is lost, the pure rules of
//! [`etcd_cluster::quorum_loss`] decide whether to recover automatically; this carries the
//! decision out by creating the EtcdRestore a human would (named like the cluster, so there is
//! only ever one, and its existence is the record: an operator restarted after creating it
//! finds it and makes no second one). The restore operator does the rest.

use etcd_api::cluster::DEFAULT_QUORUM_LOSS_AFTER_SECONDS;
use etcd_api::{
    BackupRef, EtcdCluster, EtcdClusterRef, EtcdRestore, EtcdRestoreSpec, FromSurvivor,
    OldVolumesPolicy, QuorumLossFencing, QuorumLossRecovery, RestorePhase,
};
use etcd_cluster::MembershipObserved;
use etcd_cluster::quorum_loss::{
    self, ExistingRestore, MADE_FOR_ANNOTATION, MADE_FOR_QUORUM_LOSS, QuorumLossDecision,
    QuorumLossObserved, Recovery,
};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, ResourceExt};

use crate::context::{Context, Error, warn};

/// What `spec.quorumLoss` asks for.
pub fn recovery_of(cluster: &EtcdCluster) -> (Recovery, u64) {
    let Some(policy) = cluster.spec.quorum_loss.as_ref() else {
        return (Recovery::None, DEFAULT_QUORUM_LOSS_AFTER_SECONDS);
    };
    let after = policy
        .after_seconds
        .and_then(|s| u64::try_from(s).ok())
        .unwrap_or(DEFAULT_QUORUM_LOSS_AFTER_SECONDS)
        .max(10);
    let recovery = match (policy.recovery, &policy.backup_ref) {
        (QuorumLossRecovery::None, _) => Recovery::None,
        (QuorumLossRecovery::FromSurvivor, _) => Recovery::FromSurvivor,
        (QuorumLossRecovery::FromBackup, Some(b)) if !b.name.is_empty() => Recovery::FromBackup {
            backup: b.name.clone(),
        },
        // Refused by the schema; without CEL, nothing is restored from an unnamed backup.
        (QuorumLossRecovery::FromBackup, _) => Recovery::None,
    };
    (recovery, after)
}

/// Decides about a lost quorum and, when the rules say so, creates the recovery's EtcdRestore
/// (with a Warning and the metric). Returns what to add to the `Available` condition's message.
pub async fn reconcile(
    ctx: &Context,
    cluster: &EtcdCluster,
    membership: &MembershipObserved,
) -> Result<String, Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = cluster.name_any();
    let restores: Api<EtcdRestore> = Api::namespaced(ctx.client.clone(), &ns);
    let (recovery, after_seconds) = recovery_of(cluster);
    let restore = match recovery {
        // Not read when nothing would be done with it.
        Recovery::None => None,
        _ => restores.get_opt(&name).await?.map(|r| existing(&r)),
    };
    let fencing = cluster.spec.quorum_loss.as_ref().and_then(|q| q.fencing);
    let observed = QuorumLossObserved {
        recovery,
        after_seconds,
        fencing_required: fencing == Some(QuorumLossFencing::Required),
        membership,
        restore,
    };
    match quorum_loss::decide(&observed) {
        QuorumLossDecision::Leave { reason } => Ok(reason),
        // The EtcdRestore of an earlier incident holds the name: it goes first, and the next
        // reconcile (which finds it gone) makes the recovery.
        QuorumLossDecision::Recover { replace: true, .. } => {
            match restores.delete(&name, &Default::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
            Ok(format!(
                "deleting the finished EtcdRestore {name} of an earlier incident to make the \
                 recovery"
            ))
        }
        QuorumLossDecision::Recover {
            recovery, reason, ..
        } => {
            let restore = recovery_restore(cluster, &recovery);
            match restores.create(&PostParams::default(), &restore).await {
                Ok(_) => {}
                // Made a moment ago (by this operator before a restart, or by a human).
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
            let kind = kind(&recovery);
            let note = format!(
                "quorum lost: {reason}; recovering {kind} (EtcdRestore {name}, spec.quorumLoss)"
            );
            warn(ctx, cluster, "QuorumLossRecoveryStarted", &note).await;
            ctx.metrics
                .recovery_started(&ns, &name, kind_label(&recovery));
            Ok(note)
        }
    }
}

/// The EtcdRestore named like the cluster, as the rules need it.
fn existing(restore: &EtcdRestore) -> ExistingRestore {
    let phase = restore.status.as_ref().and_then(|s| s.phase);
    let deleting = restore.metadata.deletion_timestamp.is_some();
    ExistingRestore {
        phase: match phase {
            _ if deleting => "being deleted".to_string(),
            Some(p) => format!("{p:?}"),
            None => "Pending".to_string(),
        },
        // One being deleted is waited for (it is not over until it is gone).
        ended: !deleting && phase.is_some_and(|p| p.is_terminal()),
        failed: phase == Some(RestorePhase::Failed),
        made_for_quorum_loss: restore
            .annotations()
            .get(MADE_FOR_ANNOTATION)
            .map(String::as_str)
            == Some(MADE_FOR_QUORUM_LOSS),
    }
}

fn kind(recovery: &Recovery) -> String {
    match recovery {
        Recovery::FromSurvivor => "from the surviving member".into(),
        Recovery::FromBackup { backup } => format!("from the newest backup of EtcdBackup {backup}"),
        Recovery::None => "nothing".into(),
    }
}

fn kind_label(recovery: &Recovery) -> &'static str {
    match recovery {
        Recovery::FromSurvivor => "FromSurvivor",
        Recovery::FromBackup { .. } => "FromBackup",
        Recovery::None => "None",
    }
}

/// The EtcdRestore of `recovery` for `cluster`: what the runbook has a human write.
pub fn recovery_restore(cluster: &EtcdCluster, recovery: &Recovery) -> EtcdRestore {
    let name = cluster.name_any();
    let mut spec = EtcdRestoreSpec {
        etcd_cluster: EtcdClusterRef { name: name.clone() },
        // The lost members' claims may hold writes made after the backup (or not yet on the
        // survivor): no automatic recovery deletes them; a human does, once they are judged.
        old_volumes: Some(OldVolumesPolicy::Keep),
        ..Default::default()
    };
    match recovery {
        Recovery::FromBackup { backup } => {
            spec.backup_ref = Some(BackupRef {
                name: backup.clone(),
            })
        }
        _ => spec.from_survivor = Some(FromSurvivor::default()),
    }
    EtcdRestore {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: cluster.namespace(),
            annotations: Some(
                [(
                    MADE_FOR_ANNOTATION.to_string(),
                    MADE_FOR_QUORUM_LOSS.to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        spec,
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    fn cluster(quorum_loss: serde_json::Value) -> EtcdCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"size": 3, "quorumLoss": quorum_loss},
        }))
        .unwrap()
    }

    #[test]
    fn the_policy_reads_with_its_defaults_and_an_unnamed_backup_restores_nothing() {
        assert_eq!(
            recovery_of(&cluster(serde_json::json!({}))),
            (Recovery::None, 300)
        );
        assert_eq!(
            recovery_of(&cluster(
                serde_json::json!({"recovery": "FromSurvivor", "afterSeconds": 2})
            )),
            (Recovery::FromSurvivor, 10)
        );
        assert_eq!(
            recovery_of(&cluster(serde_json::json!({"recovery": "FromBackup"}))).0,
            Recovery::None
        );
    }

    #[test]
    fn the_recovery_is_the_restore_a_human_would_write_named_like_the_cluster() {
        let c = cluster(serde_json::json!({"recovery": "FromSurvivor"}));
        let restore = recovery_restore(&c, &Recovery::FromSurvivor);
        assert_eq!(restore.name_any(), "c");
        assert_eq!(restore.namespace().as_deref(), Some("ns"));
        assert!(restore.spec.from_survivor.is_some());
        assert_eq!(restore.spec.validate("c"), Ok(()));
        let backup = recovery_restore(
            &c,
            &Recovery::FromBackup {
                backup: "nightly".into(),
            },
        );
        assert_eq!(backup.spec.backup_ref.as_ref().unwrap().name, "nightly");
        assert!(backup.spec.from_survivor.is_none());
        // The lost members' claims are never deleted by an automatic recovery.
        assert_eq!(backup.spec.old_volumes, Some(OldVolumesPolicy::Keep));
        assert_eq!(backup.spec.validate("c"), Ok(()));
        assert_eq!(
            restore
                .annotations()
                .get(MADE_FOR_ANNOTATION)
                .map(String::as_str),
            Some("quorum-loss")
        );
        // Its object reference names the cluster's namespace (events go there).
        assert_eq!(restore.object_ref(&()).namespace.as_deref(), Some("ns"));
    }
}
