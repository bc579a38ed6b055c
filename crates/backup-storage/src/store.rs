use std::time::Duration;

use bytes::Bytes;

use crate::azure::{AzureDownload, AzureOptions, AzureStore, AzureUpload};
use crate::gcs::{GcsDownload, GcsOptions, GcsStore, GcsUpload};
use crate::local::{LocalDownload, LocalStore, LocalUpload};
use crate::object::{ObjectInfo, UploadOptions};
use crate::s3::{S3Download, S3Options, S3Store, S3Upload};
use crate::{Location, Result};

/// How to reach each kind of object store; a location uses the one of its scheme.
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    pub s3: S3Options,
    pub gcs: GcsOptions,
    pub azure: AzureOptions,
}

impl From<&S3Options> for StoreOptions {
    fn from(s3: &S3Options) -> Self {
        StoreOptions {
            s3: s3.clone(),
            ..StoreOptions::default()
        }
    }
}

impl From<&StoreOptions> for StoreOptions {
    fn from(options: &StoreOptions) -> Self {
        options.clone()
    }
}

impl From<&GcsOptions> for StoreOptions {
    fn from(gcs: &GcsOptions) -> Self {
        StoreOptions {
            gcs: gcs.clone(),
            ..StoreOptions::default()
        }
    }
}

impl From<&AzureOptions> for StoreOptions {
    fn from(azure: &AzureOptions) -> Self {
        StoreOptions {
            azure: azure.clone(),
            ..StoreOptions::default()
        }
    }
}

/// A backup store: an S3 or GCS bucket, an Azure container, or the local filesystem.
#[derive(Debug, Clone)]
pub enum Store {
    S3(S3Store),
    Gcs(GcsStore),
    Azure(AzureStore),
    Local(LocalStore),
}

impl Store {
    /// Opens the store that holds `location`, with the options of its kind (`&S3Options`
    /// alone will do for S3 and local locations). For an object store this builds a client
    /// and checks that the bucket or container exists, so a typo fails before any data is read.
    pub async fn open(location: &Location, options: impl Into<StoreOptions>) -> Result<Store> {
        let options: StoreOptions = options.into();
        match location {
            Location::S3 { bucket, .. } => {
                let store = S3Store::connect(bucket, &options.s3).await?;
                store.check_bucket().await?;
                Ok(Store::S3(store))
            }
            Location::Gcs { bucket, .. } => {
                let store = GcsStore::connect(bucket, &options.gcs).await?;
                store.check_bucket().await?;
                Ok(Store::Gcs(store))
            }
            Location::Azure { container, .. } => {
                let store = AzureStore::connect(container, &options.azure).await?;
                store.check_bucket().await?;
                Ok(Store::Azure(store))
            }
            Location::Local { .. } => Ok(Store::Local(LocalStore)),
        }
    }

    /// The location of `key` in this store, for messages and status.
    pub fn location(&self, key: &str) -> Location {
        match self {
            Store::S3(s) => Location::S3 {
                bucket: s.bucket().to_string(),
                key: key.to_string(),
            },
            Store::Gcs(s) => Location::Gcs {
                bucket: s.bucket().to_string(),
                key: key.to_string(),
            },
            Store::Azure(s) => Location::Azure {
                container: s.container().to_string(),
                key: key.to_string(),
            },
            Store::Local(_) => Location::Local {
                path: std::path::Path::new("/").join(key),
            },
        }
    }

    /// Starts an upload to `key`. Nothing is visible under `key` until [`Upload::commit`].
    pub async fn upload(&self, key: &str, options: UploadOptions) -> Result<Upload> {
        Ok(match self {
            Store::S3(s) => Upload::S3(s.upload(key, options)),
            Store::Gcs(s) => Upload::Gcs(s.upload(key, options)),
            Store::Azure(s) => Upload::Azure(s.upload(key, options)),
            Store::Local(s) => Upload::Local(s.upload(key, options.precondition).await?),
        })
    }

    /// Writes a small object in one request (manifests).
    pub async fn put_small(&self, key: &str, body: Bytes, content_type: &str) -> Result<()> {
        match self {
            Store::S3(s) => s.put_small(key, body, content_type).await,
            Store::Gcs(s) => s.put_small(key, body, content_type).await,
            Store::Azure(s) => s.put_small(key, body, content_type).await,
            Store::Local(s) => s.put_small(key, body).await,
        }
    }

    /// Reads a whole small object, or `None` when it does not exist.
    pub async fn get_small(&self, key: &str) -> Result<Option<Bytes>> {
        match self {
            Store::S3(s) => s.get_small(key).await,
            Store::Gcs(s) => s.get_small(key).await,
            Store::Azure(s) => s.get_small(key).await,
            Store::Local(s) => s.get_small(key).await,
        }
    }

    /// Streams an object; S3 downloads resume with ranged GETs after a dropped connection.
    pub async fn download(&self, key: &str) -> Result<Download> {
        Ok(match self {
            Store::S3(s) => Download::S3(s.download(key).await?),
            Store::Gcs(s) => Download::Gcs(s.download(key).await?),
            Store::Azure(s) => Download::Azure(s.download(key).await?),
            Store::Local(s) => Download::Local(s.download(key).await?),
        })
    }

    pub async fn head(&self, key: &str) -> Result<Option<ObjectInfo>> {
        match self {
            Store::S3(s) => s.head(key).await,
            Store::Gcs(s) => s.head(key).await,
            Store::Azure(s) => s.head(key).await,
            Store::Local(s) => s.head(key).await,
        }
    }

    /// Every object whose key starts with `prefix`, all pages, sorted by key.
    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let mut objects = match self {
            Store::S3(s) => s.list(prefix).await?,
            Store::Gcs(s) => s.list(prefix).await?,
            Store::Azure(s) => s.list(prefix).await?,
            Store::Local(s) => s.list(prefix).await?,
        };
        objects.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(objects)
    }

    /// Deletes an object; deleting a missing object is not an error.
    pub async fn delete(&self, key: &str) -> Result<()> {
        match self {
            Store::S3(s) => s.delete(key).await,
            Store::Gcs(s) => s.delete(key).await,
            Store::Azure(s) => s.delete(key).await,
            Store::Local(s) => s.delete(key).await,
        }
    }

    /// Removes uploads under `prefix` that were started more than `older_than` ago and never
    /// committed or aborted (a process killed mid-upload), but only those whose key `owned`
    /// accepts: another tool's upload under the same prefix is never touched. Returns how many
    /// were removed. GCS and Azure have none to remove: an unfinished resumable session or
    /// uncommitted blocks are invisible, cannot be listed, and expire after a week.
    pub async fn clean_incomplete(
        &self,
        prefix: &str,
        older_than: Duration,
        owned: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<usize> {
        match self {
            Store::S3(s) => s.clean_incomplete(prefix, older_than, owned).await,
            Store::Gcs(_) | Store::Azure(_) => Ok(0),
            Store::Local(s) => s.clean_incomplete(prefix, older_than, owned).await,
        }
    }
}

/// An upload in progress. Commit makes it visible; abort or drop leaves nothing behind.
/// If `write` or `commit` fails, the upload has already been aborted.
pub enum Upload {
    S3(S3Upload),
    Gcs(GcsUpload),
    Azure(AzureUpload),
    Local(LocalUpload),
}

impl Upload {
    pub async fn write(&mut self, data: &[u8]) -> Result<()> {
        match self {
            Upload::S3(u) => u.write(data).await,
            Upload::Gcs(u) => u.write(data).await,
            Upload::Azure(u) => u.write(data).await,
            Upload::Local(u) => u.write(data).await,
        }
    }

    /// Bytes accepted so far.
    pub fn bytes_written(&self) -> u64 {
        match self {
            Upload::S3(u) => u.bytes_written(),
            Upload::Gcs(u) => u.bytes_written(),
            Upload::Azure(u) => u.bytes_written(),
            Upload::Local(u) => u.bytes_written(),
        }
    }

    /// Makes the object visible under its key and returns what was stored.
    pub async fn commit(self) -> Result<ObjectInfo> {
        match self {
            Upload::S3(u) => u.commit().await,
            Upload::Gcs(u) => u.commit().await,
            Upload::Azure(u) => u.commit().await,
            Upload::Local(u) => u.commit().await,
        }
    }

    /// Discards everything written; the key is left as it was before the upload.
    pub async fn abort(self) -> Result<()> {
        match self {
            Upload::S3(u) => u.abort().await,
            Upload::Gcs(u) => u.abort().await,
            Upload::Azure(u) => u.abort().await,
            Upload::Local(u) => u.abort().await,
        }
    }
}

/// An object being read, chunk by chunk.
pub enum Download {
    S3(S3Download),
    Gcs(GcsDownload),
    Azure(AzureDownload),
    Local(LocalDownload),
}

impl Download {
    pub fn info(&self) -> &ObjectInfo {
        match self {
            Download::S3(d) => d.info(),
            Download::Gcs(d) => d.info(),
            Download::Azure(d) => d.info(),
            Download::Local(d) => d.info(),
        }
    }

    /// The next chunk, or `None` at the end of the object.
    pub async fn next_chunk(&mut self) -> Result<Option<Bytes>> {
        match self {
            Download::S3(d) => d.next_chunk().await,
            Download::Gcs(d) => d.next_chunk().await,
            Download::Azure(d) => d.next_chunk().await,
            Download::Local(d) => d.next_chunk().await,
        }
    }
}
