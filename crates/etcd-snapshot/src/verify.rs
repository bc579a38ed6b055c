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

    let mut stored_hash = Sha256::new();
    let mut stored_bytes = 0u64;
    let mut verifier = TrailerVerifier::new();
    let mut decoder: Option<(Compression, Decoder)> = None;
    while let Some(chunk) = download.next_chunk().await? {
        stored_hash.update(&chunk);
        stored_bytes += chunk.len() as u64;
        if decoder.is_none() {
            let compression = declared.unwrap_or_else(|| Compression::sniff(&chunk));
            decoder = Some((compression, Decoder::new(compression)?));
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
    let stored_sha256 = hex::encode(stored_hash.finalize());

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
