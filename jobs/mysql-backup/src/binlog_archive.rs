//! The binary log archive in the store: each binlog file is kept as pieces (byte ranges that
//! end between transactions), each piece an object with a manifest beside it, written after
//! the object. A piece without its manifest does not count; a piece is named by its start
//! offset, so writing it again after a crash replaces it (no duplicate, no gap).
//!
//! Key: `<prefix><created>-<server id>-<file>/<start offset, 12 digits>`, where `created` is
//! the file's format description time (`%Y%m%dT%H%M%SZ`): two servers' `bin.000001` (a
//! restored primary starts its own) never share a key, and keys sort by file creation.

use std::collections::{BTreeMap, BTreeSet};

use backup_storage::encryption::Encryption;
use backup_storage::stored_checksum::StoredChecksum;
use backup_storage::{MANIFEST_SUFFIX, Store, manifest_key};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::binlog::{Gtid, GtidState};
use crate::compress::Compression;
use crate::error::Result;
use crate::manifest_fetch::fetch_manifests;

pub const PIECE_FORMAT: &str = "mysql-backup-binlog/v1";

/// What is recorded of one archived piece.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PieceManifest {
    pub format: String,
    /// The server's file name, e.g. `bin.000003`.
    pub file: String,
    pub server_id: u32,
    pub file_created: DateTime<Utc>,
    /// Byte range of the file: [start, end).
    pub start: u64,
    pub end: u64,
    /// The binlog state (`gtid_binlog_state`) before and after the piece.
    pub state_at_start: String,
    pub state_at_end: String,
    /// The first and last transaction that begins in this piece.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_gtid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_gtid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_event_time: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event_time: Option<DateTime<Utc>>,
    pub events: u64,
    /// Set only when one transaction is larger than a piece may be.
    pub ends_in_transaction: bool,
    /// That transaction (its GTID and GTID event flags): the next piece continues it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_transaction: Option<OpenTransaction>,
    /// The server writes nothing more to this file (it rotated, stopped, or a later file
    /// exists and this piece reached the file's end).
    pub file_complete: bool,
    /// The binlog bytes' sha256 (before compression and encryption).
    pub binlog_sha256: String,
    pub stored_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_crc32c: Option<String>,
    pub compression: Compression,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<Encryption>,
    /// When the piece's object was stored (its manifest follows).
    pub archived_at: DateTime<Utc>,
    pub runner: String,
}

/// A transaction a piece ends inside of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenTransaction {
    pub gtid: String,
    pub flags: u8,
}

impl OpenTransaction {
    pub fn new((gtid, flags): (Gtid, u8)) -> OpenTransaction {
        OpenTransaction {
            gtid: gtid.to_string(),
            flags,
        }
    }

    pub fn parsed(&self) -> Option<(Gtid, u8)> {
        Some((self.gtid.parse().ok()?, self.flags))
    }
}

impl PieceManifest {
    pub fn parse(bytes: &[u8]) -> std::result::Result<PieceManifest, String> {
        let m: PieceManifest = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if m.format != PIECE_FORMAT {
            return Err(format!("unknown format {:?}", m.format));
        }
        if m.end <= m.start {
            return Err(format!("empty range {}..{}", m.start, m.end));
        }
        GtidState::parse(&m.state_at_start)?;
        GtidState::parse(&m.state_at_end)?;
        m.stored_checksum()?;
        Ok(m)
    }

    pub fn stored_checksum(&self) -> std::result::Result<StoredChecksum, &'static str> {
        StoredChecksum::from_manifest(
            self.stored_sha256.as_deref(),
            self.stored_crc32c.as_deref(),
            self.encryption.is_some(),
        )
    }

    pub fn state_at_start(&self) -> GtidState {
        GtidState::parse(&self.state_at_start).unwrap_or_default()
    }

    pub fn state_at_end(&self) -> GtidState {
        GtidState::parse(&self.state_at_end).unwrap_or_default()
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("a piece manifest always serializes")
    }
}

/// Where a file's pieces live: `<prefix><created>-<server id>-<file>/`.
pub fn file_dir(prefix: &str, created: DateTime<Utc>, server_id: u32, file: &str) -> String {
    format!(
        "{prefix}{}-{server_id}-{file}/",
        created.format("%Y%m%dT%H%M%SZ")
    )
}

pub fn piece_key(file_dir: &str, start: u64) -> String {
    format!("{file_dir}{start:012}")
}

/// Left in a file's directory by `prune` before its pieces are deleted: the archiver then
/// never stores that file again (the server may still list it), and readers skip the rest.
pub const PRUNED: &str = "pruned";

/// A file `prune` deletes: its marker, written first, then its pieces' keys in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrunedFile {
    pub marker: String,
    pub keys: Vec<String>,
}

/// The directories under a listing that `prune` marked.
fn pruned_dirs(objects: &[backup_storage::ObjectInfo]) -> BTreeSet<String> {
    objects
        .iter()
        .filter_map(|o| o.key.strip_suffix(PRUNED))
        .filter(|dir| dir.ends_with('/'))
        .map(String::from)
        .collect()
}

/// One stored piece.
#[derive(Debug, Clone)]
pub struct Piece {
    pub key: String,
    pub manifest: PieceManifest,
}

/// One archived binlog file: its pieces that are contiguous from the file's start.
#[derive(Debug, Clone)]
pub struct ArchivedFile {
    pub dir: String,
    pub pieces: Vec<Piece>,
}

impl ArchivedFile {
    fn first(&self) -> &PieceManifest {
        &self.pieces[0].manifest
    }

    fn last(&self) -> &PieceManifest {
        &self.pieces[self.pieces.len() - 1].manifest
    }

    pub fn name(&self) -> &str {
        &self.first().file
    }

    pub fn server_id(&self) -> u32 {
        self.first().server_id
    }

    pub fn created(&self) -> DateTime<Utc> {
        self.first().file_created
    }

    /// How far the file is archived.
    pub fn end(&self) -> u64 {
        self.last().end
    }

    pub fn complete(&self) -> bool {
        self.last().file_complete
    }

    pub fn state_at_start(&self) -> GtidState {
        self.first().state_at_start()
    }

    pub fn state_at_end(&self) -> GtidState {
        self.last().state_at_end()
    }

    pub fn last_gtid(&self) -> Option<&str> {
        self.pieces
            .iter()
            .rev()
            .find_map(|p| p.manifest.last_gtid.as_deref())
    }

    pub fn last_event_time(&self) -> Option<DateTime<Utc>> {
        self.pieces
            .iter()
            .rev()
            .find_map(|p| p.manifest.last_event_time)
    }
}

/// The archive under a prefix: files in creation order, each with its contiguous pieces.
#[derive(Debug, Clone, Default)]
pub struct Archive {
    pub files: Vec<ArchivedFile>,
}

impl Archive {
    pub async fn read(store: &Store, prefix: &str) -> Result<Archive> {
        let objects = store.list(prefix).await?;
        let sizes: BTreeMap<&str, u64> = objects.iter().map(|o| (o.key.as_str(), o.size)).collect();
        let pruned = pruned_dirs(&objects);
        // A piece lies in its file's directory, which must not be pruned.
        let in_kept_dir = |described: &str| {
            described
                .rsplit_once('/')
                .is_some_and(|(dir, _)| !pruned.contains(&format!("{dir}/")))
        };
        let mut pieces = Vec::new();
        for (key, bytes) in fetch_manifests(store, &objects, in_kept_dir).await? {
            match PieceManifest::parse(&bytes) {
                // A piece counts only with its object of the recorded size.
                Ok(m) if sizes.get(key) == Some(&m.stored_bytes) => pieces.push(Piece {
                    key: key.to_string(),
                    manifest: m,
                }),
                Ok(_) => tracing::warn!(key, "piece without its object (or of another size)"),
                Err(e) => tracing::warn!(key, "not a binlog piece manifest of ours: {e}"),
            }
        }
        Ok(Archive::from_pieces(pieces))
    }

    /// Groups pieces by file and keeps each file's run that is contiguous from offset 0.
    pub fn from_pieces(pieces: Vec<Piece>) -> Archive {
        let mut by_dir: BTreeMap<String, Vec<Piece>> = BTreeMap::new();
        for piece in pieces {
            let Some((dir, _)) = piece.key.rsplit_once('/') else {
                continue;
            };
            by_dir.entry(format!("{dir}/")).or_default().push(piece);
        }
        let mut files: Vec<ArchivedFile> = by_dir
            .into_iter()
            .filter_map(|(dir, mut pieces)| {
                pieces.sort_by_key(|p| p.manifest.start);
                let mut run: Vec<Piece> = Vec::new();
                for piece in pieces {
                    let expected = run.last().map_or(0, |p| p.manifest.end);
                    if piece.manifest.start != expected {
                        if piece.manifest.start > expected {
                            tracing::warn!(
                                dir,
                                expected,
                                found = piece.manifest.start,
                                "gap in an archived file: later pieces ignored"
                            );
                        }
                        continue;
                    }
                    run.push(piece);
                }
                (!run.is_empty()).then_some(ArchivedFile { dir, pieces: run })
            })
            .collect();
        files.sort_by(|a, b| (a.created(), &a.dir).cmp(&(b.created(), &b.dir)));
        Archive { files }
    }

    /// Each file's last stored piece (with its manifest), reading one manifest per file: what
    /// the archiver resumes from. The archiver stores a file's pieces one after another, each
    /// manifest before the next piece, so only the newest piece can lack its manifest, and the
    /// newest with one ends the file's contiguous run.
    pub async fn read_last_pieces(
        store: &Store,
        prefix: &str,
    ) -> Result<(Vec<Piece>, BTreeSet<String>)> {
        let objects = store.list(prefix).await?;
        let pruned = pruned_dirs(&objects);
        let sizes: BTreeMap<&str, u64> = objects.iter().map(|o| (o.key.as_str(), o.size)).collect();
        let mut by_dir: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for object in &objects {
            if let Some(piece) = object.key.strip_suffix(MANIFEST_SUFFIX)
                && let Some((dir, _)) = piece.rsplit_once('/')
                && !pruned.contains(&format!("{dir}/"))
            {
                by_dir.entry(dir).or_default().push(piece);
            }
        }
        let mut last = Vec::new();
        for (_, mut pieces) in by_dir {
            pieces.sort();
            for key in pieces.into_iter().rev() {
                let Some(bytes) = store.get_small(&manifest_key(key)).await? else {
                    continue;
                };
                match PieceManifest::parse(&bytes) {
                    Ok(m) if sizes.get(key) == Some(&m.stored_bytes) => {
                        last.push(Piece {
                            key: key.to_string(),
                            manifest: m,
                        });
                        break;
                    }
                    _ => tracing::warn!(key, "not a complete piece; looking at the one before"),
                }
            }
        }
        Ok((last, pruned))
    }

    /// What `prune --binlogs` deletes once the oldest kept backup holds `kept_state` and
    /// completed at `kept_completed`: the files the server finished, created before that
    /// backup, whose every transaction the backup holds and that end strictly before its state
    /// in one of its domains (a file ending exactly at it may be where a restore from it
    /// starts). A restore to any point since the oldest kept backup needs none of them; files of
    /// another history created after it (a restored server's) are kept.
    pub fn select_for_deletion(
        &self,
        kept_state: &GtidState,
        kept_completed: DateTime<Utc>,
    ) -> Vec<PrunedFile> {
        let seq = |state: &GtidState, domain| state.last_seq(domain).unwrap_or(0);
        self.files
            .iter()
            .filter(|file| {
                let end = file.state_at_end();
                let all_held = end.domains().all(|d| seq(&end, d) <= seq(kept_state, d));
                let behind = kept_state
                    .domains()
                    .any(|d| seq(&end, d) < seq(kept_state, d));
                file.complete() && file.created() < kept_completed && all_held && behind
            })
            .map(|file| PrunedFile {
                marker: format!("{}{PRUNED}", file.dir),
                // Objects first: a manifest without its object is not a piece.
                keys: file
                    .pieces
                    .iter()
                    .map(|p| p.key.clone())
                    .chain(file.pieces.iter().map(|p| manifest_key(&p.key)))
                    .collect(),
            })
            .collect()
    }

    pub fn file_at(&self, dir: &str) -> Option<&ArchivedFile> {
        self.files.iter().find(|f| f.dir == dir)
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A piece manifest of `file` (server 7) for tests: bytes `start..end`, the GTID states
    /// before and after, its file's creation time, whether the file ends with it.
    pub fn manifest(
        file: &str,
        created: DateTime<Utc>,
        (start, end): (u64, u64),
        (state_at_start, state_at_end): (&str, &str),
        complete: bool,
    ) -> PieceManifest {
        PieceManifest {
            format: PIECE_FORMAT.into(),
            file: file.into(),
            server_id: 7,
            file_created: created,
            start,
            end,
            state_at_start: state_at_start.into(),
            state_at_end: state_at_end.into(),
            first_gtid: None,
            last_gtid: None,
            first_event_time: None,
            last_event_time: None,
            events: 1,
            ends_in_transaction: false,
            open_transaction: None,
            file_complete: complete,
            binlog_sha256: String::new(),
            stored_bytes: 1,
            stored_sha256: Some(String::new()),
            stored_crc32c: None,
            compression: Default::default(),
            encryption: None,
            archived_at: created,
            runner: String::new(),
        }
    }
}
