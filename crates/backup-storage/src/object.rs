//! What the store and its backends say about objects, and ask of an upload.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::PartSizer;

/// What a listing or a HEAD tells about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Key within the store (for local storage: the path without its leading `/`).
    pub key: String,
    pub size: u64,
    pub last_modified: Option<DateTime<Utc>>,
    pub etag: Option<String>,
    /// User metadata (`x-amz-meta-*` on S3). Only HEAD fills it; listings leave it empty.
    pub metadata: BTreeMap<String, String>,
}

/// Tuning for one upload. The defaults keep at most `(max_in_flight + 1) * 8 MiB` in memory.
#[derive(Debug, Clone)]
pub struct UploadOptions {
    pub part_sizer: PartSizer,
    /// Parts being sent at once; the writer waits when this many are in flight.
    pub max_in_flight: usize,
    /// Stored with the object (S3 user metadata; ignored by local storage).
    pub metadata: BTreeMap<String, String>,
    pub content_type: Option<String>,
    /// What must be under the key for the commit to happen; `None` overwrites whatever is there.
    pub precondition: Option<Precondition>,
}

/// A conditional commit: it fails with [`StorageError::PreconditionFailed`] instead of replacing
/// an object someone else wrote after the caller looked. On S3 the server decides
/// (`If-None-Match: *`, `If-Match: <ETag>` on the PutObject or CompleteMultipartUpload), on
/// servers that implement conditional writes (AWS S3, MinIO; Garage 2.5 ignores them, so there
/// only the caller's own check before the upload holds). Locally, `Absent` is an atomic
/// no-replace link; `Unchanged` is checked just before the rename.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Precondition {
    /// Nothing is under the key.
    Absent,
    /// The object under the key still has this ETag.
    Unchanged(String),
}

impl Default for UploadOptions {
    fn default() -> Self {
        UploadOptions {
            part_sizer: PartSizer::default(),
            max_in_flight: 3,
            metadata: BTreeMap::new(),
            content_type: None,
            precondition: None,
        }
    }
}
