//! Why a restore failed: one word, the prefix of the EtcdRestore's `status.reason`, the reason
//! of its `Ready` condition and of its Warning event, and the `reason` label of
//! `etcd_restore_finished_total`.

use std::fmt;

/// Why a restore failed. The documentation lists every one with what to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RestoreFailure {
    /// The backup cannot be read with what the restore names (its Secret, its storage).
    BadSource,
    /// The API server refused a write of the restore (a quota, an admission policy).
    Refused,
    /// The EtcdCluster was deleted during the restore.
    ClusterDeleted,
    /// No such EtcdCluster and no `spec.newCluster`.
    ClusterNotFound,
    /// The cluster's members have no claims.
    NotPersistent,
    /// The cluster's version is not `MAJOR.MINOR.PATCH`.
    InvalidVersion,
    /// A restore pod did not start in time (no node fits, an image cannot be pulled).
    PodNotStarted,
    /// The backup failed verification, or could not be read.
    BackupInvalid,
    /// A fetch was killed before it judged the backup (memory limit, eviction).
    FetchFailed,
    /// Restoring a member's data failed.
    RestoreFailed,
    /// A claim or restore pod was deleted under the restore.
    ClaimLost,
    /// The cluster was unpaused or taken over before every member verified the backup.
    ClusterReleased,
    /// The members fetched different snapshots (the object was replaced meanwhile).
    BackupChanged,
    /// The recorded plan is unusable (no members).
    BadPlan,
    /// The backup comes from a newer minor version than the cluster runs.
    BackupTooNew,
    /// The backup is encrypted and the restore names no identity, or one that opens none of
    /// its recipients' stanzas (the key is wrong, not the backup).
    NoUsableIdentity,
    /// A `backupRef` backup's checksums or revision are not what its EtcdBackup recorded (the
    /// object was replaced by another one).
    BackupNotAsRecorded,
    /// The restored members do not serve the key space the EtcdBackup recorded.
    RestoredContentMismatch,
    /// A recovery from a survivor was asked while a member still has a leader.
    QuorumNotLost,
    /// A restore to a point (`spec.pointInTime`) cannot reach it from what is stored: the
    /// point is before the oldest snapshot, inside a gap of the archive, not archived yet, or
    /// the snapshots of several clusters lie before it (none named); or the replay's scratch
    /// member failed. (An archive that does not replay as recorded is `BackupInvalid`.)
    PointNotReached,
}

impl RestoreFailure {
    pub const ALL: [RestoreFailure; 20] = [
        RestoreFailure::BadSource,
        RestoreFailure::Refused,
        RestoreFailure::ClusterDeleted,
        RestoreFailure::ClusterNotFound,
        RestoreFailure::NotPersistent,
        RestoreFailure::InvalidVersion,
        RestoreFailure::PodNotStarted,
        RestoreFailure::BackupInvalid,
        RestoreFailure::FetchFailed,
        RestoreFailure::RestoreFailed,
        RestoreFailure::ClaimLost,
        RestoreFailure::ClusterReleased,
        RestoreFailure::BackupChanged,
        RestoreFailure::BadPlan,
        RestoreFailure::BackupTooNew,
        RestoreFailure::NoUsableIdentity,
        RestoreFailure::BackupNotAsRecorded,
        RestoreFailure::RestoredContentMismatch,
        RestoreFailure::QuorumNotLost,
        RestoreFailure::PointNotReached,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RestoreFailure::BadSource => "BadSource",
            RestoreFailure::Refused => "Refused",
            RestoreFailure::ClusterDeleted => "ClusterDeleted",
            RestoreFailure::ClusterNotFound => "ClusterNotFound",
            RestoreFailure::NotPersistent => "NotPersistent",
            RestoreFailure::InvalidVersion => "InvalidVersion",
            RestoreFailure::PodNotStarted => "PodNotStarted",
            RestoreFailure::BackupInvalid => "BackupInvalid",
            RestoreFailure::FetchFailed => "FetchFailed",
            RestoreFailure::RestoreFailed => "RestoreFailed",
            RestoreFailure::ClaimLost => "ClaimLost",
            RestoreFailure::ClusterReleased => "ClusterReleased",
            RestoreFailure::BackupChanged => "BackupChanged",
            RestoreFailure::BadPlan => "BadPlan",
            RestoreFailure::BackupTooNew => "BackupTooNew",
            RestoreFailure::NoUsableIdentity => "NoUsableIdentity",
            RestoreFailure::BackupNotAsRecorded => "BackupNotAsRecorded",
            RestoreFailure::RestoredContentMismatch => "RestoredContentMismatch",
            RestoreFailure::QuorumNotLost => "QuorumNotLost",
            RestoreFailure::PointNotReached => "PointNotReached",
        }
    }

    pub fn parse(word: &str) -> Option<RestoreFailure> {
        RestoreFailure::ALL.into_iter().find(|f| f.as_str() == word)
    }

    /// The `status.reason` text: `<Reason>: <message>`.
    pub fn record(self, message: &str) -> String {
        format!("{self}: {message}")
    }

    /// A recorded `status.reason`, back as reason and message. A reason this version does not
    /// know (written by a newer operator) still fails the restore, as `RestoreFailed` with the
    /// whole text: a recorded failure is never dropped.
    pub fn from_record(record: &str) -> (RestoreFailure, String) {
        match record
            .split_once(": ")
            .and_then(|(word, message)| Some((RestoreFailure::parse(word)?, message)))
        {
            Some((reason, message)) => (reason, message.to_string()),
            None => (RestoreFailure::RestoreFailed, record.to_string()),
        }
    }
}

impl fmt::Display for RestoreFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_reads_back_from_its_record() {
        for reason in RestoreFailure::ALL {
            let record = reason.record("the backup: gone");
            assert_eq!(
                RestoreFailure::from_record(&record),
                (reason, "the backup: gone".to_string())
            );
        }
        let unknown = "SomethingNew: from a newer operator";
        assert_eq!(
            RestoreFailure::from_record(unknown),
            (RestoreFailure::RestoreFailed, unknown.to_string())
        );
    }
}
