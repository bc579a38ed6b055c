//! Streaming physical MySQL/MariaDB backups with Percona XtraBackup or mariadb-backup.
//!
//! The tool runs beside the server (sidecar or init container); its xbstream is parsed while it
//! flows (chunk CRCs, file ends, metadata), optionally zstd-compressed, and stored as one object
//! with a manifest. A backup is committed only when the tool exited 0 and the stream ended
//! cleanly; everything else aborts the upload.

pub mod archiver;
pub mod backup;
pub mod binlog;
pub mod binlog_archive;
pub mod catalog;
pub mod chain;
pub use backup_storage::compress;
pub mod credentials;
pub mod datadir;
mod error;
pub mod extract;
pub mod ingest;
pub mod lineage;
pub mod manifest;
mod manifest_fetch;
pub mod metadata;
pub mod point_in_time;
pub mod profile;
pub mod protocol;
pub mod remote;
pub mod replay;
pub mod replication;
pub mod restore;
pub mod serve;
pub mod tool;
pub mod xbstream;

pub use error::{Error, Result};
