//! Local directory backend: write under a temporary name beside the target, fsync, rename.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use chrono::{DateTime, Utc};
use tokio::fs::File;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};

use crate::object::{ObjectInfo, Precondition};
use crate::{Result, StorageError};

const TEMP_MARKER: &str = ".part-";
const WRITE_BUFFER: usize = 1024 * 1024;
const READ_CHUNK: usize = 256 * 1024;

#[derive(Debug, Clone, Copy)]
pub struct LocalStore;

fn path_of(key: &str) -> PathBuf {
    Path::new("/").join(key.trim_start_matches('/'))
}

fn key_of(path: &Path) -> String {
    path.to_string_lossy().trim_start_matches('/').to_string()
}

/// Temporary files are hidden (`.name.part-<random>`) so listings and retention skip them.
fn is_temp(name: &str) -> bool {
    temp_target(name).is_some()
}

/// The file name a temp file `.<name>.part-<hex>` becomes on commit.
fn temp_target(name: &str) -> Option<&str> {
    let (target, _) = name.strip_prefix('.')?.rsplit_once(TEMP_MARKER)?;
    (!target.is_empty()).then_some(target)
}

fn info_of(path: &Path, meta: &std::fs::Metadata) -> ObjectInfo {
    use std::os::unix::fs::MetadataExt;
    ObjectInfo {
        key: key_of(path),
        size: meta.len(),
        last_modified: meta.modified().ok().map(DateTime::<Utc>::from),
        // A commit renames a new file over the old one: another inode, another mtime. So this
        // tells a rewritten file from the one a manifest was written for, as an S3 ETag does.
        etag: Some(format!(
            "{:x}-{:x}.{:x}",
            meta.ino(),
            meta.mtime(),
            meta.mtime_nsec()
        )),
        metadata: BTreeMap::new(),
    }
}

/// fsync the directory `dir`, so a rename into it survives a crash.
pub async fn sync_dir(dir: &Path) -> std::io::Result<()> {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || std::fs::File::open(&dir).and_then(|d| d.sync_all()))
        .await
        .expect("fsync task panicked")
}

impl LocalStore {
    pub async fn upload(
        &self,
        key: &str,
        precondition: Option<Precondition>,
    ) -> Result<LocalUpload> {
        let target = path_of(key);
        let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
            return Err(StorageError::InvalidLocation {
                url: target.display().to_string(),
                reason: "a local backup needs a file name".into(),
            });
        };
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| StorageError::io(dir, e))?;
        let temp = dir.join(format!(
            ".{}{TEMP_MARKER}{:016x}",
            name.to_string_lossy(),
            rand::random::<u64>()
        ));
        // Owner-only, like `etcdctl snapshot save`: an etcd snapshot holds every Kubernetes
        // Secret, a MySQL backup every password hash. The rename keeps the mode.
        let file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .await
            .map_err(|e| StorageError::io(&temp, e))?;
        Ok(LocalUpload {
            target,
            temp,
            file: Some(BufWriter::with_capacity(WRITE_BUFFER, file)),
            bytes: 0,
            failed: None,
            precondition,
        })
    }

    pub async fn put_small(&self, key: &str, body: Bytes) -> Result<()> {
        let mut upload = self.upload(key, None).await?;
        upload.write(&body).await?;
        upload.commit().await.map(|_| ())
    }

    pub async fn get_small(&self, key: &str) -> Result<Option<Bytes>> {
        let path = path_of(key);
        match tokio::fs::read(&path).await {
            Ok(bytes) => Ok(Some(bytes.into())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StorageError::io(path, e)),
        }
    }

    pub async fn download(&self, key: &str) -> Result<LocalDownload> {
        let path = path_of(key);
        let file = File::open(&path).await.map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => StorageError::NotFound {
                url: format!("file://{}", path.display()),
            },
            _ => StorageError::io(&path, e),
        })?;
        let meta = file
            .metadata()
            .await
            .map_err(|e| StorageError::io(&path, e))?;
        Ok(LocalDownload {
            info: info_of(&path, &meta),
            file,
        })
    }

    pub async fn head(&self, key: &str) -> Result<Option<ObjectInfo>> {
        let path = path_of(key);
        match tokio::fs::metadata(&path).await {
            Ok(meta) if meta.is_file() => Ok(Some(info_of(&path, &meta))),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StorageError::io(path, e)),
        }
    }

    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        Ok(self
            .walk(prefix)
            .await?
            .into_iter()
            .filter(|(path, _)| !is_temp(&path.file_name().unwrap_or_default().to_string_lossy()))
            .map(|(path, meta)| info_of(&path, &meta))
            .collect())
    }

    /// Every file under the directory part of `prefix` whose key starts with `prefix`.
    async fn walk(&self, prefix: &str) -> Result<Vec<(PathBuf, std::fs::Metadata)>> {
        let prefix_path = path_of(prefix);
        let start = if prefix.ends_with('/') {
            prefix_path.clone()
        } else {
            prefix_path.parent().unwrap_or(Path::new("/")).to_path_buf()
        };
        let prefix = prefix.trim_start_matches('/').to_string();
        let mut found = Vec::new();
        let mut dirs = vec![start];
        while let Some(dir) = dirs.pop() {
            let mut entries = match tokio::fs::read_dir(&dir).await {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(StorageError::io(dir, e)),
            };
            while let Some(entry) = entries
                .next_entry()
                .await
                .map_err(|e| StorageError::io(&dir, e))?
            {
                let path = entry.path();
                let key = key_of(&path);
                let meta = entry
                    .metadata()
                    .await
                    .map_err(|e| StorageError::io(&path, e))?;
                if meta.is_dir() && (key.starts_with(&prefix) || prefix.starts_with(&key)) {
                    dirs.push(path);
                } else if meta.is_file() && key.starts_with(&prefix) {
                    found.push((path, meta));
                }
            }
        }
        Ok(found)
    }

    pub async fn delete(&self, key: &str) -> Result<()> {
        let path = path_of(key);
        match tokio::fs::remove_file(&path).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StorageError::io(path, e)),
            _ => Ok(()),
        }
    }

    pub async fn clean_incomplete(
        &self,
        prefix: &str,
        older_than: Duration,
        owned: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<usize> {
        // Temp files are named `.<name>.part-…`, so match them on the directory of the prefix.
        let prefix_path = path_of(prefix);
        let dir = if prefix.ends_with('/') {
            prefix_path
        } else {
            prefix_path.parent().unwrap_or(Path::new("/")).to_path_buf()
        };
        let mut removed = 0;
        for (path, meta) in self.walk(&format!("{}/", key_of(&dir))).await? {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let age = meta
                .modified()
                .ok()
                .and_then(|m| SystemTime::now().duration_since(m).ok())
                .unwrap_or_default();
            let Some(target) = temp_target(&name) else {
                continue;
            };
            let target_key = key_of(&path.with_file_name(target));
            if age >= older_than && target_key.starts_with(prefix) && owned(&target_key) {
                self.delete(&key_of(&path)).await?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

pub struct LocalUpload {
    target: PathBuf,
    temp: PathBuf,
    file: Option<BufWriter<File>>,
    bytes: u64,
    /// Why a write failed: the temp file is gone, and every later write or commit is refused.
    failed: Option<String>,
    precondition: Option<Precondition>,
}

impl LocalUpload {
    pub async fn write(&mut self, data: &[u8]) -> Result<()> {
        self.refuse_if_failed()?;
        let file = self.file.as_mut().expect("upload already finished");
        if let Err(e) = file.write_all(data).await {
            let err = StorageError::io(&self.temp, e);
            self.failed = Some(err.to_string());
            self.discard().await;
            return Err(err);
        }
        self.bytes += data.len() as u64;
        Ok(())
    }

    fn refuse_if_failed(&self) -> Result<()> {
        match &self.failed {
            Some(cause) => Err(StorageError::UploadFailed {
                url: format!("file://{}", self.target.display()),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    pub async fn commit(mut self) -> Result<ObjectInfo> {
        self.refuse_if_failed()?;
        match self.finish().await {
            Ok(info) => Ok(info),
            Err(e) => {
                self.discard().await;
                Err(e)
            }
        }
    }

    async fn finish(&mut self) -> Result<ObjectInfo> {
        let mut file = self.file.take().expect("upload already finished");
        let io = |e| StorageError::io(&self.temp, e);
        file.flush().await.map_err(io)?;
        let file = file.into_inner();
        file.sync_all().await.map_err(io)?;
        drop(file);
        self.put_in_place().await?;
        let dir = self.target.parent().unwrap_or(Path::new("/"));
        sync_dir(dir).await.map_err(|e| StorageError::io(dir, e))?;
        let meta = tokio::fs::metadata(&self.target)
            .await
            .map_err(|e| StorageError::io(&self.target, e))?;
        // Committed: nothing left for Drop to remove.
        self.temp = PathBuf::new();
        Ok(info_of(&self.target, &meta))
    }

    /// Moves the temp file to the target, as the precondition allows.
    async fn put_in_place(&mut self) -> Result<()> {
        let refused = || StorageError::PreconditionFailed {
            url: self.target.display().to_string(),
        };
        let io = |e| StorageError::io(&self.target, e);
        match &self.precondition {
            // A hard link never replaces an existing name: create-if-absent, atomically.
            Some(Precondition::Absent) => {
                match tokio::fs::hard_link(&self.temp, &self.target).await {
                    Ok(()) => tokio::fs::remove_file(&self.temp).await.map_err(io),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(refused()),
                    // A filesystem without hard links (some SMB or FUSE volumes): check, then
                    // rename, which leaves a short window to a writer racing us.
                    Err(e) => {
                        tracing::warn!(target = %self.target.display(), error = %e, "no hard links here; the commit checks for an existing file, then renames");
                        if tokio::fs::try_exists(&self.target).await.map_err(io)? {
                            return Err(refused());
                        }
                        tokio::fs::rename(&self.temp, &self.target)
                            .await
                            .map_err(io)
                    }
                }
            }
            Some(Precondition::Unchanged(etag)) => {
                let current = match tokio::fs::metadata(&self.target).await {
                    Ok(meta) => info_of(&self.target, &meta).etag,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(e) => return Err(io(e)),
                };
                if current.as_ref() != Some(etag) {
                    return Err(refused());
                }
                tokio::fs::rename(&self.temp, &self.target)
                    .await
                    .map_err(io)
            }
            None => tokio::fs::rename(&self.temp, &self.target)
                .await
                .map_err(io),
        }
    }

    pub async fn abort(mut self) -> Result<()> {
        self.file.take();
        match tokio::fs::remove_file(&self.temp).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(StorageError::io(&self.temp, e))
            }
            _ => {
                self.temp = PathBuf::new();
                Ok(())
            }
        }
    }

    async fn discard(&mut self) {
        self.file.take();
        let _ = tokio::fs::remove_file(&self.temp).await;
        self.temp = PathBuf::new();
    }
}

impl Drop for LocalUpload {
    fn drop(&mut self) {
        if !self.temp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

pub struct LocalDownload {
    info: ObjectInfo,
    file: File,
}

impl LocalDownload {
    pub fn info(&self) -> &ObjectInfo {
        &self.info
    }

    pub async fn next_chunk(&mut self) -> Result<Option<Bytes>> {
        let mut buf = BytesMut::with_capacity(READ_CHUNK);
        let n = self
            .file
            .read_buf(&mut buf)
            .await
            .map_err(|e| StorageError::io(path_of(&self.info.key), e))?;
        Ok((n > 0).then(|| buf.freeze()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn after_a_failed_write_nothing_can_be_written_or_committed() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("etcd.backup");
        let mut upload = LocalStore
            .upload(key.to_str().unwrap(), None)
            .await
            .unwrap();
        upload.write(b"first").await.unwrap();
        // The disk goes bad: the file handle can no longer be written (opened read-only).
        let read_only = File::open(&upload.temp).await.unwrap();
        upload.file = Some(BufWriter::with_capacity(WRITE_BUFFER, read_only));
        // tokio reports a background write's error on the next operation.
        let mut failed = None;
        for _ in 0..4 {
            if let Err(e) = upload.write(&vec![0; 2 * WRITE_BUFFER]).await {
                failed = Some(e);
                break;
            }
        }
        let failed = failed.expect("writing to a read-only handle fails");
        assert!(matches!(failed, StorageError::Io { .. }), "{failed}");

        let again = upload.write(b"more").await.unwrap_err();
        assert!(
            matches!(again, StorageError::UploadFailed { .. }),
            "{again}"
        );
        let commit = upload.commit().await.unwrap_err();
        assert!(
            matches!(commit, StorageError::UploadFailed { .. }),
            "{commit}"
        );
        assert!(
            commit.to_string().contains("Bad file descriptor"),
            "{commit}"
        );
        // Neither the object nor the temp file exists.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
