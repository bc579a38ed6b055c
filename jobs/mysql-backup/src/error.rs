use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Failures of the runner, phrased so the one-line message tells an operator what to fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{tool} not found on PATH; install {package} or pass --tool-path")]
    ToolMissing { tool: String, package: &'static str },

    #[error("{tool} could not log in to the database (wrong user or password): {detail}")]
    AccessDenied { tool: String, detail: String },

    #[error(
        "{tool} cannot reach the database server (is it running? socket/host right?): {detail}"
    )]
    ServerDown { tool: String, detail: String },

    #[error(
        "{tool} does not support this server ({detail}); use --tool mariadb for MariaDB and --tool percona for MySQL 8"
    )]
    WrongToolFamily { tool: String, detail: String },

    #[error("no space left on the device while {during}: {detail}")]
    DiskFull { during: String, detail: String },

    #[error("{tool} failed ({status}); last output: {tail}")]
    ToolFailed {
        tool: String,
        status: String,
        tail: String,
    },

    #[error("the backup stream is invalid: {0}")]
    Stream(#[from] crate::xbstream::StreamError),

    #[error("the binary log {path} cannot be read: {source}")]
    Binlog {
        path: PathBuf,
        source: crate::binlog::BinlogError,
    },

    #[error("incremental backup refused: {0}")]
    Incremental(String),

    /// The source's GTIDs do not continue the base's: `backup`/`pull` take a full backup instead.
    #[error("incremental backup refused: {0}")]
    NotContinuing(String),

    #[error("the backup chain cannot be restored: {0}")]
    ChainBroken(#[from] ChainError),

    #[error("the backup stream is incomplete: {0}")]
    Incomplete(String),

    #[error("the stored object {url} is corrupted or truncated: {detail}")]
    Corrupted { url: String, detail: String },

    #[error(
        "no valid manifest for {url}: {detail}; the backup may be unfinished (pass --force to restore anyway)"
    )]
    NoManifest { url: String, detail: String },

    #[error(
        "the backup object {url} was stored, but writing its manifest {manifest} failed: {detail}; \
         the backup has no manifest, so restore refuses it unless --force is given (rerun the backup)"
    )]
    ManifestNotWritten {
        url: String,
        manifest: String,
        detail: String,
    },

    #[error("restore from {url} stopped, nothing was installed in the data dir: {detail}")]
    DownloadFailed { url: String, detail: String },

    #[error("data directory {path} is not empty; restore only into an empty directory")]
    DataDirNotEmpty { path: PathBuf },

    #[error("peer {peer}: {detail}")]
    Peer { peer: String, detail: String },

    #[error(
        "the handshake with {peer} failed: one side does not hold the same token (or {peer} is not a mysql-backup serve port of this version); nothing was exchanged"
    )]
    AuthRejected { peer: String },

    #[error(
        "peer {peer} hung up on the request without an answer: a mysql-backup serve older than this client (which takes only full backups), or one that stopped"
    )]
    RequestRefused { peer: String },

    #[error("peer {peer} is busy with another backup; retry later")]
    Busy { peer: String },

    #[error("the source reported a failed backup: {0}")]
    RemoteFailure(String),

    #[error("no replication coordinates in {path}: {detail}")]
    NoCoordinates { path: PathBuf, detail: String },

    #[error("invalid configuration: {0}")]
    Config(String),

    #[error(transparent)]
    Compression(#[from] backup_storage::compress::CompressionError),

    #[error(transparent)]
    Encryption(#[from] backup_storage::encryption::EncryptionError),

    #[error(transparent)]
    Storage(#[from] backup_storage::StorageError),

    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl From<backup_storage::layers::ReadError> for Error {
    fn from(error: backup_storage::layers::ReadError) -> Self {
        use backup_storage::layers::ReadError;
        match error {
            ReadError::Storage(e) => Error::Storage(e),
            ReadError::Compression(e) => Error::Compression(e),
            ReadError::Encryption(e) => Error::Encryption(e),
        }
    }
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        let path = path.into();
        if source.raw_os_error() == Some(28) {
            return Error::DiskFull {
                during: format!("writing {}", path.display()),
                detail: source.to_string(),
            };
        }
        Error::Io { path, source }
    }

    /// True for failures that mean "the data is bad" rather than "something was unreachable".
    pub fn is_integrity(&self) -> bool {
        matches!(
            self,
            Error::Stream(_)
                | Error::Incomplete(_)
                | Error::Corrupted { .. }
                | Error::NoManifest { .. }
                | Error::ChainBroken(_)
        )
    }

    /// True when the identity given cannot decrypt (exit code 4), not the data.
    pub fn is_identity_problem(&self) -> bool {
        matches!(self, Error::Encryption(e) if e.is_identity_problem())
    }
}

/// Why a chain of incremental backups cannot be restored (the rules of `crate::chain`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error(
        "{backup} builds on {base}, which is not a complete backup (deleted, or its manifest is missing)"
    )]
    MissingBase { backup: String, base: String },
    #[error(
        "{backup} was not taken from the data dir its base {base} was taken from (lineage {found}, the base's {expected})"
    )]
    OtherDataDir {
        backup: String,
        base: String,
        found: String,
        expected: String,
    },
    #[error("{backup} starts at LSN {from}, but its base {base} ends at LSN {base_to}")]
    LsnGap {
        backup: String,
        base: String,
        from: String,
        base_to: String,
    },
    #[error("{backup} completed before its base {base}")]
    BaseNotOlder { backup: String, base: String },
    #[error("the chain of {backup} is longer than {limit} backups (its manifests loop)")]
    TooLong { backup: String, limit: usize },
}
