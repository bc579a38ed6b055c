use std::path::PathBuf;

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// Storage failures, phrased so that the one-line message tells a user what to fix.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("invalid storage location {url:?}: {reason}")]
    InvalidLocation { url: String, reason: String },

    #[error("cannot reach {service} endpoint {endpoint}: {message}")]
    Unreachable {
        /// "S3", "GCS" or "Azure Blob".
        service: &'static str,
        endpoint: String,
        message: String,
    },

    #[error("TLS failure talking to {service} endpoint {endpoint}: {message}")]
    Tls {
        service: &'static str,
        endpoint: String,
        message: String,
    },

    #[error("{service} rejected the credentials ({code}): {message}; check {check}")]
    Credentials {
        service: &'static str,
        code: String,
        message: String,
        /// What the user should look at.
        check: &'static str,
    },

    #[error("no {service} credentials found: {message}")]
    NoCredentials {
        service: &'static str,
        message: String,
    },

    #[error("access denied to bucket {bucket:?} ({code}): {message}")]
    AccessDenied {
        bucket: String,
        code: String,
        message: String,
    },

    #[error("bucket {bucket:?} does not exist")]
    NoSuchBucket { bucket: String },

    #[error("object {url} not found")]
    NotFound { url: String },

    #[error("object {url} changed while it was being read (ETag {expected} became {found})")]
    ChangedWhileReading {
        url: String,
        expected: String,
        found: String,
    },

    #[error("S3 {operation} on {url} failed: {message}")]
    S3 {
        operation: &'static str,
        url: String,
        message: String,
    },

    #[error("{service} {operation} on {url} failed: {message}")]
    Cloud {
        /// "GCS" or "Azure Blob".
        service: &'static str,
        operation: &'static str,
        url: String,
        message: String,
    },

    #[error(
        "the upload of {url} failed earlier and was aborted ({cause}); it cannot go on or be committed"
    )]
    UploadFailed { url: String, cause: String },

    #[error(
        "the store kept other bytes than were sent for {url}: {what} is {stored}, expected {sent}; nothing was reported good"
    )]
    StoredMismatch {
        url: String,
        what: String,
        sent: String,
        stored: String,
    },

    #[error(
        "{url} changed after it was checked (another writer): the commit was refused and nothing was overwritten"
    )]
    PreconditionFailed { url: String },

    #[error("object too large: part {part} would exceed the S3 limit of 10,000 parts")]
    TooManyParts { part: i32 },

    #[error("SSE-C key {source_name}: {reason}")]
    SseCustomerKey { source_name: String, reason: String },

    #[error("custom CA bundle {path}: {message}")]
    CaBundle { path: PathBuf, message: String },

    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl StorageError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StorageError::Io {
            path: path.into(),
            source,
        }
    }

    /// True when retrying later may succeed (network, server unavailable); false for
    /// configuration problems a user must fix.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StorageError::Unreachable { .. }
                | StorageError::S3 { .. }
                | StorageError::Cloud { .. }
                | StorageError::StoredMismatch { .. }
                | StorageError::Io { .. }
        )
    }
}
