//! Stream a stored backup back and prove it: etcd's sha256 trailer, the zstd frame, the age
//! encryption, and the manifest's size and hashes. `fetch` also writes the snapshot to a file,
//! which appears under its name only when every check passed.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use backup_storage::Store;
use backup_storage::encryption::Identity;
use backup_storage::layers::{Declared, ObjectReader, ReadError, identity_needed};
use backup_storage::stored_checksum::{ChecksumKind, StoredChecksum};

use crate::plaintext_sink::PlaintextSink;
use crate::{Compression, Error, Manifest, Result};

#[derive(Debug, Clone)]
pub struct VerifyReport {
    pub url: String,
    pub stored_bytes: u64,
    /// The kind the manifest records (sha256, or CRC32C for an encrypted object).
    pub stored: StoredChecksum,
    pub compression: Compression,
    pub encrypted: bool,
    pub db_bytes: u64,
    pub db_sha256: String,
    /// `None` for objects written by other tools (e.g. the coreos operator): only the trailer
    /// could be checked.
    pub manifest: Option<Manifest>,
}

/// What could be checked of an encrypted object without its identity: it is complete (size
/// and checksum as recorded), and its age header is well formed. Its content was not read.
#[derive(Debug, Clone)]
pub struct StoredReport {
    pub url: String,
    pub stored_bytes: u64,
    pub stored: StoredChecksum,
    pub manifest: Option<Manifest>,
}

/// The result of [`verify_what_can_be`].
#[derive(Debug, Clone)]
pub enum Checked {
    /// Every layer was read and every check passed.
    Content(VerifyReport),
    /// Encrypted, and no identity was given: only the stored bytes were checked.
    StoredOnly(StoredReport),
}

/// Reads the whole object and checks it; nothing is written. An encrypted object needs
/// `identity`.
pub async fn verify(store: &Store, key: &str, identity: Option<&Identity>) -> Result<VerifyReport> {
    match check_layers(store, key, identity, None, false).await?.0 {
        Checked::Content(report) => Ok(report),
        Checked::StoredOnly(_) => {
            unreachable!("check refuses an object whose content it cannot read")
        }
    }
}

/// Like [`verify`], but an encrypted object without an identity is checked as far as it can
/// be (complete, header well formed, size and checksum as recorded) instead of refused.
pub async fn verify_what_can_be(
    store: &Store,
    key: &str,
    identity: Option<&Identity>,
) -> Result<Checked> {
    Ok(check_layers(store, key, identity, None, true).await?.0)
}

/// Downloads, verifies, decrypts and decompresses `key` into `out`. The file is written as
/// `<out>.part` and renamed only after every check passed, so `out` is never a bad snapshot.
/// The download and decryption run on the calling task, the hashing and the file's writes on a
/// blocking thread beside it.
pub async fn fetch(
    store: &Store,
    key: &str,
    out: &Path,
    identity: Option<&Identity>,
) -> Result<VerifyReport> {
    let part = PathBuf::from(format!("{}.part", out.display()));
    let io = |path: &Path, source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    // A new file, never a leftover `.part` reopened: that one may be of another mode, or still
    // open in the writer of a cancelled fetch. Owner-only, like `etcdctl snapshot save` (a
    // snapshot holds every Kubernetes Secret).
    match std::fs::remove_file(&part) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&part, e)),
        _ => {}
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&part)
        .map_err(|e| io(&part, e))?;
    let mut part_file = PartFile::new(part.clone());
    let (checked, file) =
        check_layers(store, key, identity, Some((file, part.clone())), false).await?;
    let report = match checked {
        Checked::Content(report) => report,
        Checked::StoredOnly(_) => unreachable!("a file to write asks for the content"),
    };
    let file = tokio::fs::File::from_std(file.expect("the file given is handed back"));
    file.sync_all().await.map_err(|e| io(&part, e))?;
    tokio::fs::rename(&part, out)
        .await
        .map_err(|e| io(out, e))?;
    part_file.mark_renamed();
    // The rename lasts through a crash only once the directory is synced too.
    let dir = match out.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    backup_storage::sync_dir(dir)
        .await
        .map_err(|e| io(dir, e))?;
    Ok(report)
}

/// The `<out>.part` a fetch writes: removed when the fetch ends without renaming it, by an
/// error or by being dropped (a cancelled task, or a CLI stopped by a signal), so no partial
/// snapshot is left behind.
struct PartFile {
    path: PathBuf,
    renamed: bool,
}

impl PartFile {
    fn new(path: PathBuf) -> PartFile {
        PartFile {
            path,
            renamed: false,
        }
    }

    fn mark_renamed(&mut self) {
        self.renamed = true;
    }
}

impl Drop for PartFile {
    fn drop(&mut self) {
        // A writer thread still holding the file (a cancelled fetch's) writes to an unlinked
        // file, freed when it closes it.
        if !self.renamed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// `output`: the file the plaintext is written to (handed back, written, once every check
/// passed). `stored_only_is_enough`: an encrypted object without `identity` is checked without
/// its content instead of refused.
async fn check_layers(
    store: &Store,
    key: &str,
    identity: Option<&Identity>,
    output: Option<(std::fs::File, PathBuf)>,
    stored_only_is_enough: bool,
) -> Result<(Checked, Option<std::fs::File>)> {
    let url = store.location(key).to_string();
    let download = store.download(key).await?;
    let manifest = Manifest::load(store, key).await?;
    // A backup copied elsewhere (another bucket, a restored volume) has another ETag and keeps
    // its manifest: the content decides, by its size and checksums, checked below.
    if let Some(why) = manifest.as_ref().and_then(|m| m.staleness(download.info())) {
        tracing::warn!(%url, %why, "the manifest was written for an object with another size or ETag (copied, or rewritten); checking the content against it");
    }
    let declared = declared_layers(manifest.as_ref(), download.info());
    let mut reader = ObjectReader::open(download, &declared, identity, &url).await?;
    if !reader.content_readable() && !stored_only_is_enough {
        return Err(identity_needed(&url, &declared).into());
    }

    // Unreadable content: the stored bytes are all that can be checked.
    let mut sink = reader
        .content_readable()
        .then(|| PlaintextSink::start(output));
    if let Err(read) = read_into(&mut reader, sink.as_mut()).await {
        // The writer stops before the caller removes its file. A write that failed first (a
        // full disk) is the cause to report, unless the data itself is bad.
        let write = match sink {
            Some(sink) => sink.abandon().await,
            None => None,
        };
        return Err(match write {
            Some(write) if !read.is_integrity() => write,
            _ => read.into(),
        });
    }
    let (verified, file) = match sink {
        Some(sink) => {
            let finished = sink.finish().await?;
            (Some(finished.verified), finished.file)
        }
        None => (None, None),
    };
    let stored_bytes = reader.stored_bytes();
    let stored = match (reader.stored_checksum(), &verified) {
        (Some(checksum), _) => checksum,
        (None, Some(verified)) => StoredChecksum {
            kind: ChecksumKind::Sha256,
            hex: verified.stream_sha256.clone(),
        },
        (None, None) => unreachable!("encrypted objects are hashed as they are read"),
    };
    if let Some(m) = &manifest {
        expect(
            "stored size",
            m.stored_bytes.to_string(),
            stored_bytes.to_string(),
        )?;
        let recorded = m.stored_checksum();
        expect(
            match recorded.kind {
                ChecksumKind::Sha256 => "stored sha256",
                ChecksumKind::Crc32c => "stored CRC32C",
            },
            recorded.hex,
            stored.hex.clone(),
        )?;
        if let Some(verified) = &verified {
            expect(
                "database size",
                m.db_bytes.to_string(),
                verified.db_bytes.to_string(),
            )?;
            expect(
                "database sha256",
                m.db_sha256.clone(),
                verified.db_sha256.clone(),
            )?;
        }
    }
    let Some(verified) = verified else {
        return Ok((
            Checked::StoredOnly(StoredReport {
                url,
                stored_bytes,
                stored,
                manifest,
            }),
            file,
        ));
    };
    let report = Checked::Content(VerifyReport {
        url,
        stored_bytes,
        stored,
        compression: reader.compression().unwrap_or_default(),
        encrypted: reader.encrypted(),
        db_bytes: verified.db_bytes,
        db_sha256: verified.db_sha256,
        manifest,
    });
    Ok((report, file))
}

/// Reads every piece into `sink`; stops early when the sink stopped (a write failed), whose
/// `finish` says why.
async fn read_into(
    reader: &mut ObjectReader,
    mut sink: Option<&mut PlaintextSink>,
) -> std::result::Result<(), ReadError> {
    while reader.advance().await? {
        let sink = sink.as_mut().expect("only readable content has pieces");
        if !sink.take(reader.piece_bytes()).await {
            break;
        }
    }
    Ok(())
}

fn expect(what: &'static str, expected: String, found: String) -> Result<()> {
    if expected == found {
        Ok(())
    } else {
        Err(Error::ManifestMismatch {
            what,
            expected,
            found,
        })
    }
}

/// The layers the manifest records; without one, the compression the object's metadata
/// declares, and the rest sniffed from its first bytes.
fn declared_layers(manifest: Option<&Manifest>, info: &backup_storage::ObjectInfo) -> Declared {
    match manifest {
        Some(m) => Declared::recorded(
            m.compression,
            m.encryption.as_ref(),
            Some(m.stored_checksum().kind),
        ),
        None => Declared {
            compression: info
                .metadata
                .get("compression")
                .and_then(|c| c.parse().ok()),
            encrypted: None,
            recipients: None,
            stored_checksum: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TRAILER_LEN;
    use backup_storage::encryption::Recipients;
    use backup_storage::layers::LayerEncoder;
    use backup_storage::stored_checksum::StoredHasher;
    use backup_storage::{Location, S3Options};
    use sha2::{Digest, Sha256};

    /// Whole pages of database, then their sha256.
    fn snapshot() -> Vec<u8> {
        crate::trailer::test_snapshot(4096 * 40)
    }

    fn stored(snap: &[u8], compression: Compression, recipients: Option<&Recipients>) -> Vec<u8> {
        let mut encoder = LayerEncoder::new(compression, 3, 1, recipients).unwrap();
        let mut out = Vec::new();
        for chunk in snap.chunks(10_000) {
            out.extend_from_slice(encoder.encode(chunk).unwrap());
        }
        out.extend(encoder.finish().unwrap());
        out
    }

    /// A store holding `bytes` as its only object, and that object's key.
    async fn store_with(dir: &tempfile::TempDir, bytes: &[u8]) -> (Store, String) {
        let path = dir.path().join("etcd.backup");
        std::fs::write(&path, bytes).unwrap();
        let location = Location::Local { path };
        let store = Store::open(&location, &S3Options::default()).await.unwrap();
        (store, location.key())
    }

    async fn verify_file(bytes: &[u8]) -> VerifyReport {
        let dir = tempfile::tempdir().unwrap();
        let (store, key) = store_with(&dir, bytes).await;
        verify(&store, &key, None).await.unwrap()
    }

    #[tokio::test]
    async fn the_stored_hash_is_the_objects_whether_compressed_or_not() {
        let snap = snapshot();
        let db_sha256 = hex::encode(&snap[snap.len() - TRAILER_LEN..]);

        // Uncompressed, the stored hash comes from the trailer check's own pass.
        let plain = verify_file(&snap).await;
        assert_eq!(plain.compression, Compression::None);
        assert_eq!(plain.stored, sha256_of(&snap));
        assert_eq!(plain.stored_bytes, snap.len() as u64);
        assert_eq!(plain.db_sha256, db_sha256);

        let zstd = stored(&snap, Compression::Zstd, None);
        let compressed = verify_file(&zstd).await;
        assert_eq!(compressed.compression, Compression::Zstd);
        assert_eq!(compressed.stored, sha256_of(&zstd));
        assert_eq!(compressed.stored_bytes, zstd.len() as u64);
        assert_eq!(compressed.db_sha256, db_sha256);
    }

    fn sha256_of(bytes: &[u8]) -> StoredChecksum {
        StoredChecksum {
            kind: ChecksumKind::Sha256,
            hex: hex::encode(Sha256::digest(bytes)),
        }
    }

    fn crc32c_of(bytes: &[u8]) -> StoredChecksum {
        let mut crc = StoredHasher::new(ChecksumKind::Crc32c);
        crc.update(bytes);
        crc.finish()
    }

    fn keys() -> (Identity, Recipients) {
        let (secret, public) = Identity::generate();
        (
            Identity::parse(&secret, "identity").unwrap(),
            Recipients::parse(&public, "recipients").unwrap(),
        )
    }

    #[tokio::test]
    async fn a_leftover_part_file_is_replaced_not_reopened() {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let snap = snapshot();
        let dir = tempfile::tempdir().unwrap();
        let (store, key) = store_with(&dir, &snap).await;
        let out = dir.path().join("restored.db");
        let part = dir.path().join("restored.db.part");
        // A cancelled fetch's leftover, world-readable and still open in its writer.
        std::fs::write(&part, vec![b'x'; snap.len() * 2]).unwrap();
        std::fs::set_permissions(&part, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut stale_writer = std::fs::OpenOptions::new().write(true).open(&part).unwrap();

        fetch(&store, &key, &out, None).await.unwrap();
        stale_writer.write_all(b"late write").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), snap);
        let mode = std::fs::metadata(&out).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!part.exists());
    }

    #[tokio::test]
    async fn a_fetch_dropped_mid_way_leaves_no_part_file() {
        let snap = crate::trailer::test_snapshot(32 << 20);
        let dir = tempfile::tempdir().unwrap();
        let (store, key) = store_with(&dir, &snap).await;
        let out = dir.path().join("restored.db");
        let part = dir.path().join("restored.db.part");

        // Drive the fetch until it has written part of the file, then drop it, as a cancelled
        // task or a CLI stopped by a signal does.
        let mut fetching = Box::pin(fetch(&store, &key, &out, None));
        loop {
            tokio::select! {
                biased;
                done = &mut fetching => panic!("the fetch ended before it was dropped: {done:?}"),
                _ = tokio::time::sleep(std::time::Duration::from_millis(1)) => {}
            }
            let written = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
            if written > 0 {
                assert!(written < snap.len() as u64, "{written}");
                break;
            }
        }
        drop(fetching);
        assert!(!part.exists());
        assert!(!out.exists());
    }

    #[tokio::test]
    async fn a_failed_write_is_reported_as_the_writes_not_as_bad_data() {
        let snap = snapshot();
        let dir = tempfile::tempdir().unwrap();
        let (store, key) = store_with(&dir, &snap).await;
        let path = dir.path().join("restored.db.part");
        std::fs::write(&path, b"").unwrap();
        // Opened for reading only: every write fails, as on a full or broken disk.
        let read_only = std::fs::File::open(&path).unwrap();
        let err = check_layers(&store, &key, None, Some((read_only, path.clone())), false)
            .await
            .expect_err("the writes failed");
        assert!(
            matches!(&err, Error::Io { path: p, .. } if *p == path),
            "{err}"
        );
        assert!(!err.is_integrity(), "{err}");
    }

    #[tokio::test]
    async fn an_encrypted_backup_fetches_only_with_its_identity() {
        let snap = snapshot();
        let (identity, recipients) = keys();
        let (stranger, _) = keys();
        let encrypted = stored(&snap, Compression::Zstd, Some(&recipients));
        let dir = tempfile::tempdir().unwrap();
        let (store, key) = store_with(&dir, &encrypted).await;
        let out = dir.path().join("restored.db");

        let report = fetch(&store, &key, &out, Some(&identity)).await.unwrap();
        assert!(report.encrypted);
        assert_eq!(report.compression, Compression::Zstd);
        // No manifest: the checksum a new manifest of an encrypted object records.
        assert_eq!(report.stored, crc32c_of(&encrypted));
        assert_eq!(std::fs::read(&out).unwrap(), snap);
        std::fs::remove_file(&out).unwrap();

        let part = dir.path().join("restored.db.part");
        for identity in [None, Some(&stranger)] {
            let err = fetch(&store, &key, &out, identity).await.unwrap_err();
            assert!(matches!(err, Error::Encryption(_)), "{err}");
            assert!(!err.is_integrity(), "a missing key is not bad data: {err}");
            assert!(err.is_identity_problem(), "{err}");
            assert!(!out.exists() && !part.exists());
        }
        // No manifest records the recipients, so another key's refusal cannot tell a stanza for
        // other keys from a damaged one, and says so; a damaged stanza reads the same.
        let mut damaged_stanza = encrypted.clone();
        let share = damaged_stanza
            .windows(7)
            .position(|w| w == b"X25519 ")
            .unwrap()
            + 7;
        damaged_stanza[share] = if damaged_stanza[share] == b'A' {
            b'B'
        } else {
            b'A'
        };
        let damaged_dir = tempfile::tempdir().unwrap();
        let (damaged, damaged_key) = store_with(&damaged_dir, &damaged_stanza).await;
        let damaged_out = damaged_dir.path().join("restored.db");
        for (store, key, out, identity) in [
            (&store, &key, &out, &stranger),
            (&damaged, &damaged_key, &damaged_out, &identity),
        ] {
            let err = fetch(store, key, out, Some(identity)).await.unwrap_err();
            assert!(
                err.to_string()
                    .contains("encrypted to other keys, or its header was damaged"),
                "{err}"
            );
            assert!(!err.is_integrity(), "{err}");
            assert!(err.is_identity_problem(), "{err}");
            assert!(!out.exists());
        }

        // Without the identity, verify checks what it can and says so.
        match verify_what_can_be(&store, &key, None).await.unwrap() {
            Checked::StoredOnly(r) => {
                assert_eq!(r.stored_bytes, encrypted.len() as u64);
                assert_eq!(r.stored, crc32c_of(&encrypted));
            }
            Checked::Content(_) => panic!("the content cannot have been checked"),
        }
        assert!(verify(&store, &key, None).await.is_err());
    }

    /// The manifest `save` would have written beside `stored`.
    fn manifest_for(snap: &[u8], stored: &[u8], recipients: &Recipients) -> Manifest {
        let time = chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        Manifest {
            format: crate::manifest::FORMAT.into(),
            stored_bytes: stored.len() as u64,
            stored_sha256: None,
            stored_crc32c: Some(crc32c_of(stored).hex),
            stored_etag: None,
            compression: Compression::None,
            encryption: Some(backup_storage::encryption::Encryption::age(recipients)),
            db_bytes: (snap.len() - TRAILER_LEN) as u64,
            db_sha256: hex::encode(&snap[snap.len() - TRAILER_LEN..]),
            etcd_revision: 1,
            etcd_version: "3.6.10".into(),
            contents: None,
            cluster_id: "c".into(),
            member_id: "m".into(),
            endpoint: "http://127.0.0.1:2379".into(),
            start_time: time,
            completion_time: time,
            duration_seconds: 1.0,
            tool: "test".into(),
            labels: Default::default(),
        }
    }

    #[tokio::test]
    async fn a_flipped_or_missing_byte_fails_the_fetch_as_bad_data() {
        let snap = snapshot();
        let (identity, recipients) = keys();
        let encrypted = stored(&snap, Compression::None, Some(&recipients));
        let manifest = manifest_for(&snap, &encrypted, &recipients);
        let mut damaged = Vec::new();
        for at in [30, 150, encrypted.len() / 2, encrypted.len() - 1] {
            let mut bad = encrypted.clone();
            bad[at] ^= 0x01;
            damaged.push((format!("byte {at} flipped"), bad));
        }
        damaged.push((
            "truncated".into(),
            encrypted[..encrypted.len() - 100].to_vec(),
        ));
        damaged.push((
            "truncated at a chunk boundary".into(),
            encrypted[..encrypted.len() - (encrypted.len() - 200) % (64 * 1024 + 16)].to_vec(),
        ));
        for (what, bytes) in damaged {
            let (err, left_a_file) = failed_fetch(&what, &bytes, &manifest, &identity).await;
            assert!(err.is_integrity(), "{what}: {err}");
            assert!(!err.is_identity_problem(), "{what}: {err}");
            assert!(!left_a_file, "{what}");
        }
    }

    /// Fetches `bytes`, stored with `manifest` beside it, which must fail: the error, and
    /// whether the output file or its `.part` was left behind.
    async fn failed_fetch(
        what: &str,
        bytes: &[u8],
        manifest: &Manifest,
        identity: &Identity,
    ) -> (Error, bool) {
        let dir = tempfile::tempdir().unwrap();
        let (store, key) = store_with(&dir, bytes).await;
        std::fs::write(
            dir.path().join("etcd.backup.manifest.json"),
            manifest.to_json(),
        )
        .unwrap();
        let out = dir.path().join("restored.db");
        let err = fetch(&store, &key, &out, Some(identity))
            .await
            .expect_err(what);
        let left_a_file = out.exists() || dir.path().join("restored.db.part").exists();
        (err, left_a_file)
    }

    #[tokio::test]
    async fn a_database_size_other_than_the_manifests_fails_the_fetch() {
        let snap = snapshot();
        let (identity, recipients) = keys();
        let encrypted = stored(&snap, Compression::None, Some(&recipients));
        let mut manifest = manifest_for(&snap, &encrypted, &recipients);
        manifest.db_bytes += 4096;
        let what = "the manifest records another size";
        let (err, left_a_file) = failed_fetch(what, &encrypted, &manifest, &identity).await;
        assert!(
            matches!(
                &err,
                Error::ManifestMismatch {
                    what: "database size",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.is_integrity(), "{err}");
        assert!(!left_a_file);
    }

    /// Without its identity, an encrypted object is checked by the checksum its manifest
    /// records: the CRC32C new manifests record, and the sha256 older ones recorded.
    #[tokio::test]
    async fn without_the_identity_a_damaged_object_fails_by_either_recorded_checksum() {
        let snap = snapshot();
        let (identity, recipients) = keys();
        let encrypted = stored(&snap, Compression::None, Some(&recipients));
        let new = manifest_for(&snap, &encrypted, &recipients);
        let old = Manifest {
            stored_sha256: Some(sha256_of(&encrypted).hex),
            stored_crc32c: None,
            ..new.clone()
        };
        let mut damaged = encrypted.clone();
        damaged[encrypted.len() / 2] ^= 0x01;
        for (manifest, kind) in [(&new, ChecksumKind::Crc32c), (&old, ChecksumKind::Sha256)] {
            let with = |bytes: Vec<u8>| {
                let manifest = manifest.to_json();
                async move {
                    let dir = tempfile::tempdir().unwrap();
                    let (store, key) = store_with(&dir, &bytes).await;
                    std::fs::write(dir.path().join("etcd.backup.manifest.json"), manifest).unwrap();
                    (dir, store, key)
                }
            };
            let (_dir, store, key) = with(encrypted.clone()).await;
            match verify_what_can_be(&store, &key, None).await.unwrap() {
                Checked::StoredOnly(r) => assert_eq!(r.stored.kind, kind),
                Checked::Content(_) => panic!("the content cannot have been checked"),
            }
            let report = verify(&store, &key, Some(&identity)).await.unwrap();
            assert_eq!((report.stored.kind, report.db_bytes), (kind, new.db_bytes));

            let (_dir, store, key) = with(damaged.clone()).await;
            let err = verify_what_can_be(&store, &key, None).await.unwrap_err();
            assert!(err.is_integrity(), "{kind:?}: {err}");
            assert!(
                err.to_string().contains(&format!(
                    "stored {}",
                    match kind {
                        ChecksumKind::Sha256 => "sha256",
                        ChecksumKind::Crc32c => "CRC32C",
                    }
                )),
                "{kind:?}: {err}"
            );
        }
    }
}
