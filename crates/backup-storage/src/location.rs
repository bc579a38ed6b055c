use std::fmt;
use std::path::{Path, PathBuf};

use crate::{Result, StorageError};

/// Where a backup lives: `s3://bucket/key`, `gs://bucket/key` (Google Cloud Storage),
/// `azblob://container/key` (Azure Blob Storage; the account comes with the credentials, as in
/// Go CDK's and Thanos' URLs) or a local path (`file:///dir/name` or `/dir/name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    S3 { bucket: String, key: String },
    Gcs { bucket: String, key: String },
    Azure { container: String, key: String },
    Local { path: PathBuf },
}

/// The URL schemes of the object stores, with the word for their top-level namespace.
const SCHEMES: [(&str, &str); 3] = [
    ("s3://", "bucket"),
    ("gs://", "bucket"),
    ("azblob://", "container"),
];

impl Location {
    /// Parses a URL a user typed. Relative local paths are resolved against the working directory.
    pub fn parse(url: &str) -> Result<Location> {
        let invalid = |reason: &str| StorageError::InvalidLocation {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        for (scheme, namespace) in SCHEMES {
            let Some(rest) = url.strip_prefix(scheme) else {
                continue;
            };
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(invalid(&format!(
                    "the {namespace} name is missing (expected {scheme}{namespace}/key)"
                )));
            }
            let (bucket, key) = (bucket.to_string(), key.to_string());
            return Ok(match scheme {
                "s3://" => Location::S3 { bucket, key },
                "gs://" => Location::Gcs { bucket, key },
                _ => Location::Azure {
                    container: bucket,
                    key,
                },
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
                "unsupported scheme; use s3://bucket/key, gs://bucket/key, azblob://container/key or file:///path",
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

    /// The coreos `gcs.path` form, `bucket/key`.
    pub fn from_gcs_path(path: &str) -> Result<Location> {
        Location::parse(&format!("gs://{}", path.trim_start_matches('/')))
    }

    /// The coreos `abs.path` form, `container/key`.
    pub fn from_abs_path(path: &str) -> Result<Location> {
        Location::parse(&format!("azblob://{}", path.trim_start_matches('/')))
    }

    /// The key (object stores) or the path without its leading `/` (local); used as the object
    /// name.
    pub fn key(&self) -> String {
        match self {
            Location::S3 { key, .. } | Location::Gcs { key, .. } | Location::Azure { key, .. } => {
                key.clone()
            }
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
            Location::Gcs { bucket, .. } => Location::Gcs {
                bucket: bucket.clone(),
                key: key.to_string(),
            },
            Location::Azure { container, .. } => Location::Azure {
                container: container.clone(),
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
            Location::Gcs { bucket, key } => write!(f, "gs://{bucket}/{key}"),
            Location::Azure { container, key } => write!(f, "azblob://{container}/{key}"),
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
    fn parses_gcs_and_azure_urls_and_their_coreos_paths() {
        let gcs = Location::parse("gs://b/etcd/x.backup").unwrap();
        assert_eq!(
            gcs,
            Location::Gcs {
                bucket: "b".into(),
                key: "etcd/x.backup".into()
            }
        );
        assert_eq!(gcs.to_string(), "gs://b/etcd/x.backup");
        assert_eq!(Location::from_gcs_path("b/etcd/x.backup").unwrap(), gcs);
        let azure = Location::parse("azblob://c/etcd/x.backup").unwrap();
        assert_eq!(
            azure,
            Location::Azure {
                container: "c".into(),
                key: "etcd/x.backup".into()
            }
        );
        assert_eq!(azure.to_string(), "azblob://c/etcd/x.backup");
        assert_eq!(Location::from_abs_path("c/etcd/x.backup").unwrap(), azure);
        assert_eq!(azure.with_key("etcd/y").to_string(), "azblob://c/etcd/y");
    }

    #[test]
    fn rejects_bad_urls_with_a_reason() {
        for bad in [
            "s3:///key",
            "gs:///key",
            "azblob:///k",
            "wasb://c/k",
            "file://relative",
            "",
        ] {
            let err = Location::parse(bad).unwrap_err().to_string();
            assert!(err.contains("invalid storage location"), "{bad}: {err}");
        }
    }
}
