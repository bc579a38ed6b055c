use std::fmt;
use std::path::{Path, PathBuf};

use crate::{Result, StorageError};

/// Where a backup lives: `s3://bucket/key` or a local path (`file:///dir/name` or `/dir/name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    S3 { bucket: String, key: String },
    Local { path: PathBuf },
}

impl Location {
    /// Parses a URL a user typed. Relative local paths are resolved against the working directory.
    pub fn parse(url: &str) -> Result<Location> {
        let invalid = |reason: &str| StorageError::InvalidLocation {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(invalid(
                    "the bucket name is missing (expected s3://bucket/key)",
                ));
            }
            return Ok(Location::S3 {
                bucket: bucket.to_string(),
                key: key.to_string(),
            });
        }
        if let Some(rest) = url.strip_prefix("file://") {
            if !rest.starts_with('/') {
                return Err(invalid("file URLs must be absolute (file:///dir/name)"));
            }
            return Ok(Location::Local {
                path: PathBuf::from(rest),
            });
        }
        if url.contains("://") {
            return Err(invalid(
                "unsupported scheme; use s3://bucket/key or file:///path",
            ));
        }
        if url.is_empty() {
            return Err(invalid("empty location"));
        }
        let path = Path::new(url);
        let path = if path.is_absolute() {
            path.to_path_buf()
        } else {
            std::env::current_dir()
                .map_err(|e| StorageError::io(".", e))?
                .join(path)
        };
        Ok(Location::Local { path })
    }

    /// The coreos `s3.path` form, `bucket/key`.
    pub fn from_s3_path(path: &str) -> Result<Location> {
        Location::parse(&format!("s3://{}", path.trim_start_matches('/')))
    }

    /// The key (S3) or the path without its leading `/` (local); used as the object name.
    pub fn key(&self) -> String {
        match self {
            Location::S3 { key, .. } => key.clone(),
            Location::Local { path } => path.to_string_lossy().trim_start_matches('/').to_string(),
        }
    }

    /// The same store with another key (a sibling object such as a manifest).
    pub fn with_key(&self, key: &str) -> Location {
        match self {
            Location::S3 { bucket, .. } => Location::S3 {
                bucket: bucket.clone(),
                key: key.to_string(),
            },
            Location::Local { .. } => Location::Local {
                path: Path::new("/").join(key),
            },
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::S3 { bucket, key } => write!(f, "s3://{bucket}/{key}"),
            Location::Local { path } => write!(f, "file://{}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_s3_urls_with_nested_keys() {
        let loc = Location::parse("s3://bucket/a/b/etcd.backup").unwrap();
        assert_eq!(
            loc,
            Location::S3 {
                bucket: "bucket".into(),
                key: "a/b/etcd.backup".into()
            }
        );
        assert_eq!(loc.to_string(), "s3://bucket/a/b/etcd.backup");
    }

    #[test]
    fn parses_coreos_paths() {
        let loc = Location::from_s3_path("mybucket/etcd.backup").unwrap();
        assert_eq!(loc.key(), "etcd.backup");
        assert!(Location::from_s3_path("").is_err());
    }

    #[test]
    fn parses_local_forms() {
        let a = Location::parse("file:///var/backups/snap.db").unwrap();
        let b = Location::parse("/var/backups/snap.db").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.key(), "var/backups/snap.db");
        assert_eq!(
            a.with_key("var/backups/x"),
            Location::parse("/var/backups/x").unwrap()
        );
    }

    #[test]
    fn rejects_bad_urls_with_a_reason() {
        for bad in ["s3:///key", "gs://bucket/key", "file://relative", ""] {
            let err = Location::parse(bad).unwrap_err().to_string();
            assert!(err.contains("invalid storage location"), "{bad}: {err}");
        }
    }
}
