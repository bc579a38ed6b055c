//! How the operators' run-once pods (restore pods, drill pods) reach a backup.
//!
//! - [`source`]: where the backup is and which Secrets reach it, from an EtcdRestore's own
//!   block or from an EtcdBackup's newest verified backup. Pure.
//! - [`container`]: the `etcd-backup fetch` container and the volumes it mounts: every
//!   credential is a file from a Secret (never an argument or an environment value), the pod
//!   gets no service account token, and the node's identity is off unless the operator was
//!   told otherwise.
//! - [`scratch`]: the throw-away etcd member a drill or a restore to a point serves on the
//!   pod's loopback (the restore tool's container and the etcd sidecar).

pub mod container;
pub mod scratch;
pub mod source;

pub use container::{FetchMounts, fetch_container, tool_args};
pub use source::{CloudAccess, S3Access, Source, SourceError};
