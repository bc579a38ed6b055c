//! `restore`: download, verify, extract into staging, prepare, move into the empty data dir.

use std::path::Path;

use backup_storage::Store;
use backup_storage::encryption::{EncryptionError, Identity};
use backup_storage::layers::{Declared, ObjectReader, ReadError, identity_needed};
use backup_storage::stored_checksum::{ChecksumKind, StoredChecksum};
use sha2::{Digest, Sha256};

use crate::catalog::Backup;
use crate::chain;
use crate::compress::Compression;
use crate::datadir::{self, Staging, State};
use crate::extract::Extraction;
use crate::manifest::{Manifest, manifest_key};
use crate::metadata::BackupMetadata;
use crate::point_in_time::{Point, ReplayPlan};
use crate::profile::{PrepareStep, ToolProfile};
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
    if let Err(e) = prepare(profile, &staging.dir, options, PrepareStep::ALONE).await {
        staging.discard();
        return Err(e);
    }
    replay_and_install(staging, options, metadata, None, None).await?;
    Ok(())
}

/// One `--prepare` of the staging dir (with an incremental dir, when a chain is applied).
async fn prepare(
    profile: &ToolProfile,
    target: &Path,
    options: &PrepareOptions,
    step: PrepareStep<'_>,
) -> Result<()> {
    let args = profile.prepare_args(target, options.use_memory.as_deref(), step);
    let mut tool = Tool::spawn(&profile.backup_tool, &args, false, profile.package())?;
    let (status, tail) = tool.wait().await?;
    if !status.success() {
        return Err(profile.classify_failure(&tool.name, &status.to_string(), &tail));
    }
    Ok(())
}

/// Archived binlogs replayed on the prepared staging dir (when asked), then the install.
async fn replay_and_install(
    staging: Staging,
    options: &PrepareOptions,
    metadata: &BackupMetadata,
    replay: Option<Replay<'_>>,
    identity: Option<&Identity>,
) -> Result<Option<Applied>> {
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

/// What a restore installed: the backups applied (full backup first) and their streams.
#[derive(Debug)]
pub struct Restored {
    pub keys: Vec<String>,
    pub summaries: Vec<StreamSummary>,
}

impl Restored {
    pub fn files(&self) -> u64 {
        self.summaries.iter().map(|s| s.files).sum()
    }

    pub fn stream_bytes(&self) -> u64 {
        self.summaries.iter().map(|s| s.stream_bytes).sum()
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
) -> Result<Restored> {
    let (restored, _) =
        restore_then_replay(profile, store, key, datadir, options, force, identity, None).await?;
    Ok(restored)
}

/// One backup of the chain being restored.
struct Part {
    key: String,
    url: String,
    /// None only for an object restored with --force.
    manifest: Option<Manifest>,
}

/// The chain that restores `key` (full backup first): every link checked by the chain's rules
/// and every object present with its recorded size, before the data dir is touched.
async fn load_chain(store: &Store, key: &str, manifest: Option<Manifest>) -> Result<Vec<Part>> {
    let Some(manifest) = manifest else {
        return Ok(vec![Part {
            key: key.to_string(),
            url: store.location(key).to_string(),
            manifest: None,
        }]);
    };
    let mut chain = Vec::new();
    let mut current = Backup {
        key: key.to_string(),
        manifest,
    };
    while let Some(base_key) = current.manifest.base_key(&current.key) {
        let base = match store.get_small(&manifest_key(&base_key)).await? {
            Some(bytes) => Manifest::parse(&bytes).ok().map(|manifest| Backup {
                key: base_key.clone(),
                manifest,
            }),
            None => None,
        };
        let base = chain::check_link(&current, base.as_ref())?.clone();
        chain.push(std::mem::replace(&mut current, base));
        chain::check_length(&chain)?;
    }
    chain.push(current);
    chain.reverse();
    let mut parts = Vec::with_capacity(chain.len());
    for backup in chain {
        let url = store.location(&backup.key).to_string();
        let size = store.head(&backup.key).await?.map(|info| info.size);
        if size != Some(backup.manifest.stored_bytes) {
            return Err(Error::Corrupted {
                url,
                detail: match size {
                    None => "the object is missing".into(),
                    Some(size) => format!(
                        "{size} bytes stored, the manifest says {}",
                        backup.manifest.stored_bytes
                    ),
                },
            });
        }
        parts.push(Part {
            key: backup.key,
            url,
            manifest: Some(backup.manifest),
        });
    }
    Ok(parts)
}

/// [`restore`], then the binlogs of `replay` applied before the data dir receives anything. An
/// incremental backup is restored with its chain: the full backup extracted and prepared in the
/// staging dir, then each incremental extracted beside it and applied in order.
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
) -> Result<(Restored, Option<Applied>)> {
    let url = store.location(key).to_string();
    check_empty(datadir)?;
    let manifest = load_manifest(store, key, &url, force).await?;
    let chain = load_chain(store, key, manifest).await?;
    if chain.len() > 1 {
        tracing::info!(
            chain = ?chain.iter().map(|p| p.url.as_str()).collect::<Vec<_>>(),
            "restoring an incremental backup with its chain"
        );
    }
    // Before the data dir is touched: the identity must open every part (by the recipients
    // their manifests record; the first is opened too, which checks its header).
    for part in &chain[1..] {
        check_recipient(part, identity)?;
    }
    let first = open_verified(store, &chain[0], identity).await?;
    let staging = Staging::begin(datadir)?;
    let result = async {
        let mut summaries = Vec::with_capacity(chain.len());
        let summary = extract_verified(profile, first, &chain[0], &staging.dir, options).await?;
        let metadata = BackupMetadata::from_files(&summary.metadata);
        if metadata.backup_type.as_deref() == Some(chain::INCREMENTAL_TYPE) {
            return Err(Error::Corrupted {
                url: chain[0].url.clone(),
                detail: "it is an incremental backup, restorable only with its manifest and chain (not with --force)".into(),
            });
        }
        summaries.push(summary);
        let mut metadata = metadata;
        prepare(
            profile,
            &staging.dir,
            options,
            PrepareStep {
                incremental_dir: None,
                last: chain.len() == 1,
            },
        )
        .await?;
        for (i, part) in chain.iter().enumerate().skip(1) {
            let reader = open_verified(store, part, identity).await?;
            let dir = staging.incremental_dir()?;
            let summary = extract_verified(profile, reader, part, &dir, options).await?;
            let next = BackupMetadata::from_files(&summary.metadata);
            // The stream matched its manifest's checksum; its own checkpoints must agree.
            if next.backup_type.as_deref() != Some(chain::INCREMENTAL_TYPE)
                || next.from_lsn != metadata.to_lsn
            {
                return Err(Error::Corrupted {
                    url: part.url.clone(),
                    detail: format!(
                        "its checkpoints say {:?} from LSN {:?}, the chain needs an incremental from {:?}",
                        next.backup_type, next.from_lsn, metadata.to_lsn
                    ),
                });
            }
            let step = PrepareStep {
                incremental_dir: Some(&dir),
                last: i + 1 == chain.len(),
            };
            prepare(profile, &staging.dir, options, step).await?;
            summaries.push(summary);
            metadata = next;
        }
        Ok((summaries, metadata))
    }
    .await;
    let (summaries, metadata) = match result {
        Ok(done) => done,
        Err(e) => {
            staging.discard();
            return Err(explain_download_failure(store, key, &url, e).await);
        }
    };
    let applied = replay_and_install(staging, options, &metadata, replay, identity).await?;
    let restored = Restored {
        keys: chain.into_iter().map(|p| p.key).collect(),
        summaries,
    };
    Ok((restored, applied))
}

/// An encrypted part needs an identity among the recipients its manifest records.
fn check_recipient(part: &Part, identity: Option<&Identity>) -> Result<()> {
    let Some(encryption) = part.manifest.as_ref().and_then(|m| m.encryption.as_ref()) else {
        return Ok(());
    };
    let recipients = &encryption.recipients;
    match identity {
        Some(identity) if identity.matches_any(recipients) => Ok(()),
        Some(identity) => Err(EncryptionError::NotARecipient {
            what: part.url.clone(),
            given: identity.public_keys().join(", "),
            recipients: format!(" ({})", recipients.join(", ")),
        }
        .into()),
        None => Err(EncryptionError::IdentityNeeded {
            what: part.url.clone(),
            recipients: format!(" ({})", recipients.join(", ")),
        }
        .into()),
    }
}

/// Downloads a part, checks its size and ETag against the manifest and opens its layers.
async fn open_verified(
    store: &Store,
    part: &Part,
    identity: Option<&Identity>,
) -> Result<ObjectReader> {
    let corrupted = |detail: String| Error::Corrupted {
        url: part.url.clone(),
        detail,
    };
    let manifest = part.manifest.as_ref();
    let download = store.download(&part.key).await?;
    if let Some(m) = manifest {
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
                "{}: ETag {found}, the manifest recorded {recorded} (copied, or rewritten); checking the content against the manifest's checksums",
                part.url
            );
        }
    }
    let declared = manifest
        .map(|m| {
            Declared::recorded(
                m.compression,
                m.encryption.as_ref(),
                Some(m.stored_checksum().kind),
            )
        })
        .unwrap_or_default();
    let reader = ObjectReader::open(download, &declared, identity, &part.url)
        .await
        .map_err(|e| read_error(e, &corrupted))?;
    if !reader.content_readable() {
        return Err(read_error(
            identity_needed(&part.url, &declared),
            &corrupted,
        ));
    }
    Ok(reader)
}

/// Extracts a part into `dir`, checking its checksums and file count against the manifest.
async fn extract_verified(
    profile: &ToolProfile,
    mut reader: ObjectReader,
    part: &Part,
    dir: &Path,
    options: &PrepareOptions,
) -> Result<StreamSummary> {
    let corrupted = |detail: String| Error::Corrupted {
        url: part.url.clone(),
        detail,
    };
    let manifest = part.manifest.as_ref();
    let mut extraction = Extraction::start(profile, dir, options.parallel)?;
    let streamed = stream_into(&mut reader, &mut extraction, manifest, &corrupted).await;
    if let Err(e) = streamed {
        extraction.abort().await;
        return Err(e);
    }
    let summary = extraction.finish().await.map_err(|e| match e {
        Error::Stream(s) => corrupted(s.to_string()),
        other => other,
    })?;
    if let Some(m) = manifest
        && m.file_count != summary.files
    {
        return Err(corrupted(format!(
            "{} files, the manifest says {}",
            summary.files, m.file_count
        )));
    }
    Ok(summary)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A later part of a chain encrypted to other keys, or with no identity given, is refused
    /// before anything is downloaded (by its manifest's recipients).
    #[test]
    fn every_part_of_a_chain_must_open_with_the_identity() {
        let (secret, public) = Identity::generate();
        let identity = Identity::parse(&secret, "test").unwrap();
        let (_, other) = Identity::generate();
        let part = |recipient: &str| Part {
            key: "inc".into(),
            url: "file:///b/inc".into(),
            manifest: Some(
                Manifest::parse(
                    &serde_json::to_vec(&serde_json::json!({
                        "format": crate::manifest::FORMAT, "storedBytes": 1,
                        "storedCrc32c": "00000000", "compression": "none",
                        "encryption": {"scheme": "age", "recipients": [recipient]},
                        "streamBytes": 1, "payloadBytes": 1, "fileCount": 1,
                        "toolFamily": "mariadb", "source": "local",
                        "startTime": "2026-11-30T00:00:00Z",
                        "completionTime": "2026-11-30T00:00:00Z",
                        "durationSeconds": 1.0, "runner": "test",
                    }))
                    .unwrap(),
                )
                .unwrap(),
            ),
        };
        assert!(check_recipient(&part(&public), Some(&identity)).is_ok());
        let e = check_recipient(&part(&other), Some(&identity)).unwrap_err();
        assert!(
            e.is_identity_problem() && e.to_string().contains("other keys"),
            "{e}"
        );
        let e = check_recipient(&part(&public), None).unwrap_err();
        assert!(
            e.is_identity_problem() && e.to_string().contains("no identity"),
            "{e}"
        );
    }
}
