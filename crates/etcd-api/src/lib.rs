//! The `etcd.database.coreos.com/v1beta2` API: `EtcdBackup`, `EtcdRestore` and `EtcdCluster`.
//!
//! Field for field compatible with the archived coreos etcd-operator, so its manifests apply
//! unchanged, plus optional fields for what coreos lacked (cron schedules, compression, local
//! storage, conditions). Types only: no runtime, no storage SDK, no YAML library. The CRD YAML in
//! `crds/` is generated from these types by the `crdgen` crate (`cargo run -p crdgen`).

pub mod backup;
pub mod cluster;
pub mod condition;
mod crd;
pub mod defrag;
pub mod drill;
pub mod encryption;
pub mod error;
pub mod restore;
pub mod restore_record;
pub mod storage;

pub use backup::{
    ArchiveGap, ArchiveStatus, BackupFailure, BackupPolicy, BackupRecord, BackupSchedule,
    Compression, ContinuousArchive, DEFAULT_SEGMENT_MAX_BYTES, DEFAULT_SEGMENT_SECONDS,
    DeletionPolicy, EtcdBackup, EtcdBackupSpec, EtcdBackupStatus, LocalVolumeRecord,
};
pub use cluster::{
    ClusterCondition, ClusterPhase, EtcdCluster, EtcdClusterSpec, EtcdClusterStatus,
    MemberReplacement, MemberSecret, MembersStatus, MembershipChange, PodPolicy, QuorumLoss,
    QuorumLossFencing, QuorumLossRecovery, StaticTls, TlsPolicy,
};
pub use crd::crds;
pub use defrag::{
    AutoCompaction, CompactionMode, DefragMember, DefragRound, DefragRoundResult, DefragStatus,
    Defragmentation,
};
pub use drill::{BackupDrill, DrillRecord, DrillResult, RecordedContents};
pub use encryption::{BackupEncryption, RestoreDecryption, SecretKeyRef};
pub use error::SpecError;
pub use restore::{
    BackupRef, EtcdClusterRef, EtcdRestore, EtcdRestoreSpec, EtcdRestoreStatus, ExpectedBackup,
    FromSurvivor, KeySpace, NewCluster, OldVolumesPolicy, PointInTime, RestorePhase, RestorePlan,
    ScratchMedium, Survivor, VerifiedSnapshot,
};
pub use storage::{
    AbsSource, GcsSource, LocalSource, OssSource, S3Path, S3PathError, S3ServerSideEncryption,
    S3Source, SseMode, StorageType,
};

/// API group of all three kinds.
pub const GROUP: &str = "etcd.database.coreos.com";
/// API version of all three kinds.
pub const VERSION: &str = "v1beta2";
/// `apiVersion` as written in manifests.
pub const API_VERSION: &str = "etcd.database.coreos.com/v1beta2";
/// `kubectl get etcd` lists all three kinds. kubectl expands categories before short names, so
/// EtcdCluster's short name is `etcdc` rather than a second meaning of `etcd`.
pub const CATEGORY: &str = "etcd";

/// Secret keys of `clientTLSSecret`, as coreos defined them.
pub mod client_tls {
    /// Client certificate (PEM).
    pub const CERT_KEY: &str = "etcd-client.crt";
    /// Client private key (PEM).
    pub const KEY_KEY: &str = "etcd-client.key";
    /// CA bundle that signed the etcd server certificates (PEM).
    pub const CA_KEY: &str = "etcd-client-ca.crt";
}
