//! Stream a stored backup back and prove it: etcd's sha256 trailer, the zstd frame, and the
//! manifest's size and hashes. `fetch` also writes the snapshot to a file, which appears under
//! its name only when every check passed.

use std::path::{Path, PathBuf};

use backup_storage::Store;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};

use crate::{Compression, Error, Manifest, Result, TrailerVerifier};
use backup_storage::compress::Decoder;

#[derive(Debug, Clone)]
pub struct VerifyReport {
    pub url: String,
    pub stored_bytes: u64,
    pub stored_sha256: String,
    pub compression: Compression,
    pub db_bytes: u64,
    pub db_sha256: String,
    /// `None` for objects written by other tools (e.g. the coreos operator): only the trailer
    /// could be checked.
    pub manifest: Option<Manifest>,
}

/// Reads the whole object and checks it; nothing is written.
pub async fn verify(store: &Store, key: &str) -> Result<VerifyReport> {
    check(store, key, None).await
}

/// Downloads, verifies and decompresses `key` into `out`. The file is written as `<out>.part`
/// and renamed only after every check passed, so `out` is never a bad snapshot.
pub async fn fetch(store: &Store, key: &str, out: &Path) -> Result<VerifyReport> {
    let part = PathBuf::from(format!("{}.part", out.display()));
    let io = |path: &Path, source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    // Owner-only, like `etcdctl snapshot save` (a snapshot holds every Kubernetes Secret); set
    // again on the open file in case a leftover `.part` of another mode was truncated.
    let file = tokio::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&part)
        .await
        .map_err(|e| io(&part, e))?;
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .await
        .map_err(|e| io(&part, e))?;
    let mut writer = BufWriter::with_capacity(1 << 20, file);
    let result = async {
        let report = check(store, key, Some(&mut writer)).await?;
        writer.flush().await.map_err(|e| io(&part, e))?;
        writer
            .get_ref()
            .sync_all()
            .await
            .map_err(|e| io(&part, e))?;
        tokio::fs::rename(&part, out)
            .await
            .map_err(|e| io(out, e))?;
        Ok(report)
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&part).await;
    }
    result
}

async fn check(
    store: &Store,
    key: &str,
    mut sink: Option<&mut (dyn AsyncWrite + Unpin + Send)>,
) -> Result<VerifyReport> {
    let url = store.location(key).to_string();
    let mut download = store.download(key).await?;
    let manifest = Manifest::load(store, key).await?;
    // A backup copied elsewhere (another bucket, a restored volume) has another ETag and keeps
    // its manifest: the content decides, by its size and sha256, checked below.
    if let Some(why) = manifest.as_ref().and_then(|m| m.staleness(download.info())) {
        tracing::warn!(%url, %why, "the manifest was written for an object with another size or ETag (copied, or rewritten); checking the content against it");
    }
    let declared = manifest.as_ref().map(|m| m.compression).or_else(|| {
        download
            .info()
            .metadata
            .get("compression")
            .and_then(|c| c.parse().ok())
    });

    // Uncompressed, the stored bytes are the stream, whose hash the verifier already computes
    // in the same pass: a second sha256 would double the CPU of every fetch.
    let mut stored_hash: Option<Sha256> = None;
    let mut stored_bytes = 0u64;
    let mut verifier = TrailerVerifier::new();
    let mut decoder: Option<(Compression, Decoder)> = None;
    while let Some(chunk) = download.next_chunk().await? {
        stored_bytes += chunk.len() as u64;
        if decoder.is_none() {
            let compression = declared.unwrap_or_else(|| Compression::sniff(&chunk));
            decoder = Some((compression, Decoder::new(compression)?));
            stored_hash = (compression != Compression::None).then(Sha256::new);
        }
        if let Some(hash) = stored_hash.as_mut() {
            hash.update(&chunk);
        }
        let (_, decoder) = decoder.as_mut().expect("set above");
        decoder.feed(chunk);
        while let Some(piece) = decoder.next_piece()? {
            verifier.update(piece);
            if let Some(sink) = sink.as_mut() {
                sink.write_all(piece).await.map_err(|e| Error::Io {
                    path: PathBuf::from("<output>"),
                    source: e,
                })?;
            }
        }
    }
    let compression = match decoder {
        Some((compression, decoder)) => {
            decoder.finish()?;
            compression
        }
        None => Compression::None,
    };
    let verified = verifier.finish()?;
    let stored_sha256 = match stored_hash {
        Some(hash) => hex::encode(hash.finalize()),
        None => verified.stream_sha256.clone(),
    };

    if let Some(m) = &manifest {
        let expect = |what, expected: String, found: String| {
            if expected == found {
                Ok(())
            } else {
                Err(Error::ManifestMismatch {
                    what,
                    expected,
                    found,
                })
            }
        };
        expect(
            "stored size",
            m.stored_bytes.to_string(),
            stored_bytes.to_string(),
        )?;
        expect(
            "stored sha256",
            m.stored_sha256.clone(),
            stored_sha256.clone(),
        )?;
        expect(
            "database sha256",
            m.db_sha256.clone(),
            verified.db_sha256.clone(),
        )?;
    }
    Ok(VerifyReport {
        url,
        stored_bytes,
        stored_sha256,
        compression,
        db_bytes: verified.db_bytes,
        db_sha256: verified.db_sha256,
        manifest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TRAILER_LEN;
    use backup_storage::compress::Encoder;
    use backup_storage::{Location, S3Options};

    /// A snapshot as etcd streams it: whole pages of database, then their sha256.
    fn snapshot() -> Vec<u8> {
        let mut snap: Vec<u8> = (0..4096 * 3).map(|i| (i * 7 % 251) as u8).collect();
        let trailer = Sha256::digest(&snap);
        snap.extend_from_slice(&trailer);
        snap
    }

    async fn verify_file(bytes: &[u8]) -> VerifyReport {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("etcd.backup");
        std::fs::write(&path, bytes).unwrap();
        let location = Location::Local { path };
        let store = Store::open(&location, &S3Options::default()).await.unwrap();
        verify(&store, &location.key()).await.unwrap()
    }

    #[tokio::test]
    async fn the_stored_hash_is_the_objects_whether_compressed_or_not() {
        let snap = snapshot();
        let db_sha256 = hex::encode(&snap[snap.len() - TRAILER_LEN..]);

        // Uncompressed, the stored hash comes from the trailer check's own pass.
        let plain = verify_file(&snap).await;
        assert_eq!(plain.compression, Compression::None);
        assert_eq!(plain.stored_sha256, hex::encode(Sha256::digest(&snap)));
        assert_eq!(plain.stored_bytes, snap.len() as u64);
        assert_eq!(plain.db_sha256, db_sha256);

        let mut encoder = Encoder::new(Compression::Zstd, 3, 1).unwrap();
        let mut zstd = encoder.encode(&snap).unwrap().to_vec();
        zstd.extend(encoder.finish().unwrap());
        let compressed = verify_file(&zstd).await;
        assert_eq!(compressed.compression, Compression::Zstd);
        assert_eq!(compressed.stored_sha256, hex::encode(Sha256::digest(&zstd)));
        assert_eq!(compressed.stored_bytes, zstd.len() as u64);
        assert_eq!(compressed.db_sha256, db_sha256);
    }
}
