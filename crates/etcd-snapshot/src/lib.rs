//! The etcd snapshot data path, free of Kubernetes.
//!
//! `save` streams `Maintenance.Snapshot` from the member with the highest revision into backup
//! storage, verifies etcd's sha256 trailer while the bytes flow, and commits the object only
//! when the trailer matches; a manifest beside the object records what was stored.
//! `verify` and `fetch` stream an object back and check it the same way, so a fetched file
//! restores with stock `etcdutl`/`etcdctl snapshot restore` and its hash check.

pub mod changes;
mod connector;
pub mod contents;
mod drill;
mod error;
mod manifest;
mod member;
pub mod naming;
mod plaintext_sink;
mod save;
mod scratch;
mod trailer;
mod verify;

pub use backup_storage::compress::Compression;
pub use backup_storage::encryption::{Encryption, Identity, Recipients};
pub use contents::{Contents, HashKv};
pub use drill::{DrillError, DrillOptions, DrillReport, check_restored, drill};
pub use error::{Error, Result};
pub use manifest::{MANIFEST_SUFFIX, Manifest, manifest_key, read_manifest};
pub use member::{EtcdConnection, Member, TlsPem, select_member};
pub use save::{ObjectName, Progress, SaveOptions, SaveReport, save};
pub use trailer::{TRAILER_LEN, TrailerVerifier, Verified};
pub use verify::{Checked, StoredReport, VerifyReport, fetch, verify, verify_what_can_be};
