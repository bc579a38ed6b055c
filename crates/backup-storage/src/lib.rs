//! Streaming object storage for backups.
//!
//! Four backends behind one [`Store`]: S3 (any S3-compatible server), Google Cloud Storage,
//! Azure Blob Storage, and a local directory (a PVC mount, or the embedded default when no
//! object store is configured).
//!
//! The contract every caller relies on:
//! - [`Upload`] takes a stream of unknown length with bounded memory. Nothing is visible under
//!   the key until [`Upload::commit`]; [`Upload::abort`] (or dropping the upload) leaves nothing
//!   behind.
//! - [`Download`] streams an object and resumes after a dropped connection.
//! - Listing paginates, so retention sees every object.

mod aborts;
mod azure;
pub mod compress;
pub mod coreos_secrets;
pub mod encryption;
mod error;
mod gcs;
mod http;
pub mod layers;
mod local;
mod location;
mod object;
mod part_size;
mod s3;
mod store;
pub mod stored_checksum;

pub use error::{Result, StorageError};

/// Every backup object (etcd or MySQL) has a JSON manifest beside it, under this suffix.
pub const MANIFEST_SUFFIX: &str = ".manifest.json";

/// The key of the manifest of `object_key`.
pub fn manifest_key(object_key: &str) -> String {
    format!("{object_key}{MANIFEST_SUFFIX}")
}
pub use aborts::finish_aborts;
pub use azure::{AzureCredentials, AzureOptions};
pub use gcs::{GcsCredentials, GcsOptions};
pub use local::sync_dir;
pub use location::Location;
pub use object::{ObjectInfo, Precondition, UploadOptions};
pub use part_size::PartSizer;
pub use s3::{CustomerKey, S3Credentials, S3Options, ServerSideEncryption};
pub use store::{Download, Store, StoreOptions, Upload};
