//! Streaming object storage for backups.
//!
//! Two backends behind one [`Store`]: S3 (any S3-compatible server) and a local directory
//! (a PVC mount, or the embedded default when no S3 is configured).
//!
//! The contract every caller relies on:
//! - [`Upload`] takes a stream of unknown length with bounded memory. Nothing is visible under
//!   the key until [`Upload::commit`]; [`Upload::abort`] (or dropping the upload) leaves nothing
//!   behind.
//! - [`Download`] streams an object and resumes after a dropped connection.
//! - Listing paginates, so retention sees every object.

pub mod compress;
pub mod encryption;
mod error;
pub mod layers;
mod local;
mod location;
mod part_size;
mod s3;
mod store;

use std::sync::LazyLock;
use std::time::Duration;

use tokio_util::task::TaskTracker;

pub use error::{Result, StorageError};

/// Every backup object (etcd or MySQL) has a JSON manifest beside it, under this suffix.
pub const MANIFEST_SUFFIX: &str = ".manifest.json";

/// The key of the manifest of `object_key`.
pub fn manifest_key(object_key: &str) -> String {
    format!("{object_key}{MANIFEST_SUFFIX}")
}
/// The aborts of uploads dropped without commit or abort (a cancelled task, a signal), which
/// run in the background; also the requests that start multipart uploads, which abort what
/// they started when its writer was dropped meanwhile.
static DROPPED_UPLOAD_ABORTS: LazyLock<TaskTracker> = LazyLock::new(TaskTracker::new);

/// Runs `abort` in the background and tracks it, so [`finish_aborts`] can wait for it.
pub(crate) fn spawn_abort(
    runtime: &tokio::runtime::Handle,
    abort: impl Future<Output = ()> + Send + 'static,
) {
    runtime.spawn(DROPPED_UPLOAD_ABORTS.track_future(abort));
}

/// Waits, at most `limit`, for the aborts of dropped uploads: a process that exits before they
/// reach the server leaves parts behind. Call it last, once nothing uploads any more (on a
/// signal, after the work was dropped). True when every abort finished in time.
pub async fn finish_aborts(limit: Duration) -> bool {
    DROPPED_UPLOAD_ABORTS.close();
    let finished = tokio::time::timeout(limit, DROPPED_UPLOAD_ABORTS.wait())
        .await
        .is_ok();
    DROPPED_UPLOAD_ABORTS.reopen();
    finished
}

pub use location::Location;
pub use part_size::PartSizer;
pub use s3::{CustomerKey, S3Credentials, S3Options, ServerSideEncryption};
pub use store::{Download, ObjectInfo, Precondition, Store, Upload, UploadOptions};
