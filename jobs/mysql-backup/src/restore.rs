//! `restore`: download, verify, extract into staging, prepare, move into the empty data dir.

use std::path::Path;

use backup_storage::Store;
use backup_storage::encryption::Identity;
use backup_storage::layers::{Declared, ObjectReader, ReadError, identity_needed};
use backup_storage::stored_checksum::{ChecksumKind, StoredChecksum};
use sha2::{Digest, Sha256};

use crate::compress::Compression;
use crate::datadir::{self, Staging, State};
use crate::extract::Extraction;
use crate::manifest::{Manifest, manifest_key};
use crate::metadata::BackupMetadata;
use crate::point_in_time::{Point, ReplayPlan};
use crate::profile::ToolProfile;
use crate::replay::Applied;
use crate::tool::Tool;
use crate::xbstream::StreamSummary;
use crate::{Error, Result};

#[derive(Debug, Clone, Default)]
pub struct PrepareOptions {
    /// `--use-memory` for `--prepare` (e.g. `1G`).
    pub use_memory: Option<String>,
    /// Extractor threads.
    pub parallel: Option<u32>,
}

/// Binary logs to apply after the backup is prepared, before it is installed.
pub struct Replay<'a> {
    pub store: &'a Store,
    pub plan: &'a ReplayPlan,
    pub point: Point,
}

/// Runs `--prepare` in the staging dir, then moves the result into the data dir. On any error
/// the staging dir is discarded.
pub async fn prepare_and_install(
    profile: &ToolProfile,
    staging: Staging,
    options: &PrepareOptions,
    metadata: &BackupMetadata,
) -> Result<()> {
    prepare_replay_install(profile, staging, options, metadata, None, None).await?;
    Ok(())
}

/// [`prepare_and_install`], with archived binlogs replayed between prepare and install.
pub async fn prepare_replay_install(
    profile: &ToolProfile,
    staging: Staging,
    options: &PrepareOptions,
    metadata: &BackupMetadata,
    replay: Option<Replay<'_>>,
    identity: Option<&Identity>,
) -> Result<Option<Applied>> {
    let args = profile.prepare_args(&staging.dir, options.use_memory.as_deref());
    let prepared = async {
        let mut tool = Tool::spawn(&profile.backup_tool, &args, false, profile.package())?;
        let (status, tail) = tool.wait().await?;
        if !status.success() {
            return Err(profile.classify_failure(&tool.name, &status.to_string(), &tail));
        }
        Ok(())
    }
    .await;
    if let Err(e) = prepared {
        staging.discard();
        return Err(e);
    }
    let applied = match replay {
        None => None,
        Some(r) => {
            let replayed = crate::replay::replay(
                r.store,
                r.plan,
                r.point,
                identity,
                &staging.dir,
                options.use_memory.as_deref(),
            )
            .await;
            match replayed {
                Ok(applied) => Some(applied),
                Err(e) => {
                    staging.discard();
                    return Err(e);
                }
            }
        }
    };
    let json = serde_json::to_vec_pretty(metadata).expect("metadata serializes");
    staging.install(&json)?;
    Ok(applied)
}

/// Checks that `datadir` may receive a restore.
pub fn check_empty(datadir: &Path) -> Result<()> {
    match datadir::state(datadir)? {
        State::Empty | State::Incomplete => Ok(()),
        State::Initialised => Err(Error::DataDirNotEmpty {
            path: datadir.to_path_buf(),
        }),
    }
}

async fn load_manifest(
    store: &Store,
    key: &str,
    url: &str,
    force: bool,
) -> Result<Option<Manifest>> {
    let problem = match store.get_small(&manifest_key(key)).await? {
        None => "the manifest object is missing".to_string(),
        Some(bytes) => match Manifest::parse(&bytes) {
            Ok(m) => return Ok(Some(m)),
            Err(e) => e,
        },
    };
    if force {
        tracing::warn!(
            "{url}: {problem}; restoring anyway (--force), integrity rests on the stream checks"
        );
        Ok(None)
    } else {
        Err(Error::NoManifest {
            url: url.to_string(),
            detail: problem,
        })
    }
}

pub async fn restore(
    profile: &ToolProfile,
    store: &Store,
    key: &str,
    datadir: &Path,
    options: &PrepareOptions,
    force: bool,
    identity: Option<&Identity>,
) -> Result<StreamSummary> {
    let (summary, _) =
        restore_then_replay(profile, store, key, datadir, options, force, identity, None).await?;
    Ok(summary)
}

/// [`restore`], then the binlogs of `replay` applied before the data dir receives anything.
#[allow(clippy::too_many_arguments)]
pub async fn restore_then_replay(
    profile: &ToolProfile,
    store: &Store,
    key: &str,
    datadir: &Path,
    options: &PrepareOptions,
    force: bool,
    identity: Option<&Identity>,
    replay: Option<Replay<'_>>,
) -> Result<(StreamSummary, Option<Applied>)> {
    let url = store.location(key).to_string();
    check_empty(datadir)?;
    let manifest = load_manifest(store, key, &url, force).await?;
    let corrupted = |detail: String| Error::Corrupted {
        url: url.clone(),
        detail,
    };
    let download = store.download(key).await?;
    if let Some(m) = &manifest {
        let stored = download.info();
        if stored.size != m.stored_bytes {
            return Err(corrupted(format!(
                "{} bytes stored, the manifest says {}",
                stored.size, m.stored_bytes
            )));
        }
        // A copied backup has another ETag: its checksums, checked while streaming, decide.
        if let (Some(recorded), Some(found)) = (&m.stored_etag, &stored.etag)
            && recorded != found
        {
            tracing::warn!(
                "{url}: ETag {found}, the manifest recorded {recorded} (copied, or rewritten); checking the content against the manifest's checksums"
            );
        }
    }
    // The layers are opened before the data dir is touched: a missing identity, or one that
    // is not a recipient, fails here.
    let declared = Declared {
        compression: manifest.as_ref().map(|m| m.compression),
        encrypted: manifest.as_ref().map(|m| m.encryption.is_some()),
        recipients: manifest
            .as_ref()
            .and_then(|m| m.encryption.as_ref())
            .map(|e| e.recipients.clone()),
        stored_checksum: manifest.as_ref().map(|m| m.stored_checksum().kind),
    };
    let mut reader = ObjectReader::open(download, &declared, identity, &url)
        .await
        .map_err(|e| read_error(e, &corrupted))?;
    if !reader.content_readable() {
        return Err(read_error(identity_needed(&url, &declared), &corrupted));
    }
    let staging = Staging::begin(datadir)?;
    let result = async {
        let mut extraction = Extraction::start(profile, &staging.dir, options.parallel)?;
        let streamed =
            stream_into(&mut reader, &mut extraction, manifest.as_ref(), &corrupted).await;
        if let Err(e) = streamed {
            extraction.abort().await;
            return Err(e);
        }
        let summary = extraction.finish().await.map_err(|e| match e {
            Error::Stream(s) => corrupted(s.to_string()),
            other => other,
        })?;
        if let Some(m) = &manifest
            && m.file_count != summary.files
        {
            return Err(corrupted(format!(
                "{} files, the manifest says {}",
                summary.files, m.file_count
            )));
        }
        Ok(summary)
    }
    .await;
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            staging.discard();
            return Err(explain_download_failure(store, key, &url, e).await);
        }
    };
    let metadata = BackupMetadata::from_files(&summary.metadata);
    let applied =
        prepare_replay_install(profile, staging, options, &metadata, replay, identity).await?;
    Ok((summary, applied))
}

/// A storage error while streaming means the download broke off (the S3 layer has already
/// retried with ranged GETs). Its message tells how the last attempt ended; one more request
/// tells whether the store answers at all, which is usually the real cause.
async fn explain_download_failure(store: &Store, key: &str, url: &str, err: Error) -> Error {
    let Error::Storage(storage) = err else {
        return err;
    };
    let now = match store.head(key).await {
        Ok(_) => String::new(),
        Err(probe) => format!("; the store does not answer now either: {probe}"),
    };
    Error::DownloadFailed {
        url: url.to_string(),
        detail: format!("{storage}{now}"),
    }
}

/// Bad data is [`Error::Corrupted`] (exit 3); keys and transport keep their own errors.
fn read_error(e: ReadError, corrupted: &dyn Fn(String) -> Error) -> Error {
    if e.is_integrity() {
        corrupted(e.to_string())
    } else {
        e.into()
    }
}

async fn stream_into(
    reader: &mut ObjectReader,
    extraction: &mut Extraction,
    manifest: Option<&Manifest>,
    corrupted: &dyn Fn(String) -> Error,
) -> Result<()> {
    // Stored bytes that are the plaintext itself are hashed here; the reader hashes the others.
    let mut plain_sha: Option<Sha256> = None;
    // An encrypted backup's manifest also records the plaintext's hash.
    let mut stream_sha = manifest
        .and_then(|m| m.stream_sha256.as_ref())
        .map(|_| Sha256::new());
    loop {
        match reader.advance().await {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return Err(read_error(e, corrupted)),
        }
        if plain_sha.is_none()
            && !reader.encrypted()
            && reader.compression() == Some(Compression::None)
        {
            plain_sha = Some(Sha256::new());
        }
        let piece = reader.piece();
        if let Some(sha) = plain_sha.as_mut() {
            sha.update(piece);
        }
        if let Some(sha) = stream_sha.as_mut() {
            sha.update(piece);
        }
        extraction.write(piece).await.map_err(|e| match e {
            Error::Stream(s) => corrupted(s.to_string()),
            other => other,
        })?;
    }
    let found = match (reader.stored_checksum(), plain_sha) {
        (Some(checksum), _) => checksum,
        (None, sha) => StoredChecksum {
            kind: ChecksumKind::Sha256,
            hex: hex::encode(sha.unwrap_or_default().finalize()),
        },
    };
    if let Some(m) = manifest
        && found != m.stored_checksum()
    {
        return Err(corrupted(format!(
            "{found} does not match the manifest's {}",
            m.stored_checksum()
        )));
    }
    if let (Some(m), Some(sha)) = (manifest, stream_sha) {
        let digest = hex::encode(sha.finalize());
        if m.stream_sha256.as_deref() != Some(digest.as_str()) {
            return Err(corrupted(format!(
                "the decrypted stream's sha256 {digest} does not match the manifest's {:?}",
                m.stream_sha256
            )));
        }
    }
    Ok(())
}
