use backup_storage::StorageError;
use backup_storage::compress::CompressionError;
use backup_storage::encryption::EncryptionError;
use backup_storage::layers::ReadError;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Snapshot failures, each naming its cause in one line.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no etcd endpoint given")]
    NoEndpoints,

    #[error("cannot reach etcd at {endpoint}: {message}")]
    Unreachable { endpoint: String, message: String },

    #[error("TLS failure talking to etcd at {endpoint}: {message}")]
    Tls { endpoint: String, message: String },

    #[error("none of the etcd endpoints answered: {0}")]
    NoMemberAnswered(String),

    #[error(
        "the endpoints belong to different etcd clusters ({0}); list the members of one cluster"
    )]
    MixedClusters(String),

    #[error("invalid TLS material: {0}")]
    TlsMaterial(String),

    #[error("etcd snapshot stream from {endpoint} failed after {bytes} bytes: {message}")]
    Stream {
        endpoint: String,
        bytes: u64,
        message: String,
    },

    #[error("etcd sent no snapshot data for {seconds} s (stall timeout) after {bytes} bytes")]
    Stalled { seconds: u64, bytes: u64 },

    #[error("backup deadline of {seconds} s exceeded after {bytes} bytes")]
    DeadlineExceeded { seconds: u64, bytes: u64 },

    #[error("snapshot has no sha256 trailer ({bytes} bytes is not a bbolt database plus 32 bytes)")]
    MissingTrailer { bytes: u64 },

    #[error("snapshot hash mismatch: the trailer says {expected}, the data hashes to {actual}")]
    HashMismatch { expected: String, actual: String },

    #[error("{what} mismatch with the manifest: expected {expected}, found {found}")]
    ManifestMismatch {
        what: &'static str,
        expected: String,
        found: String,
    },

    #[error("invalid manifest {key}: {message}")]
    BadManifest { key: String, message: String },

    #[error(
        "the manifest {key} describes an earlier object ({why}): the object was rewritten after it, so nothing vouches for it; take a new backup"
    )]
    StaleManifest { key: String, why: String },

    #[error(
        "cluster {cluster_id} is at revision {revision}, below what its archive already holds ({archived}): it was restored from an older snapshot under the same cluster ID, so its history from here is not the archived one; archive it under another base, or move the old archive away"
    )]
    ClusterRewound {
        cluster_id: String,
        revision: i64,
        archived: i64,
    },

    #[error("the archived changes {url} are damaged: {message}")]
    BadSegment { url: String, message: String },

    #[error(transparent)]
    Compression(#[from] CompressionError),

    #[error(transparent)]
    Encryption(#[from] EncryptionError),

    #[error(transparent)]
    Storage(#[from] StorageError),

    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// True for failures that mean the data is wrong (not the transport): exit code 3 in the CLI.
    pub fn is_integrity(&self) -> bool {
        matches!(
            self,
            Error::MissingTrailer { .. }
                | Error::HashMismatch { .. }
                | Error::ManifestMismatch { .. }
                | Error::BadManifest { .. }
                | Error::StaleManifest { .. }
                | Error::BadSegment { .. }
        ) || matches!(self, Error::Compression(e) if e.is_integrity())
            || matches!(self, Error::Encryption(e) if e.is_integrity())
    }

    /// True when the identity given cannot decrypt (exit code 4), not the data.
    pub fn is_identity_problem(&self) -> bool {
        matches!(self, Error::Encryption(e) if e.is_identity_problem())
    }
}

impl From<ReadError> for Error {
    fn from(error: ReadError) -> Self {
        match error {
            ReadError::Storage(e) => Error::Storage(e),
            ReadError::Compression(e) => Error::Compression(e),
            ReadError::Encryption(e) => Error::Encryption(e),
        }
    }
}
