//! `archive-binlogs`: the sidecar that copies the server's binary logs into the archive as they
//! are written. It reads the files in the data dir (the server writes every commit to its
//! binlog file before the client hears of it; `sync_binlog` only decides when it is fsynced),
//! so it needs no account on the server and follows the active file while it grows.
//!
//! Each pass looks at every file in the server's index: what the archive already holds of it
//! (read from the store, never from local state) is skipped; the rest is read in pieces of at
//! most `max_piece` bytes that end between transactions, each stored, then its manifest. A
//! restart resumes from the store, so there is neither gap nor duplicate.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use backup_storage::encryption::{Encryption, Recipients};
use backup_storage::layers::LayerEncoder;
use backup_storage::stored_checksum::{ChecksumKind, StoredHasher};
use backup_storage::{Store, manifest_key};
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use crate::binlog::{BinlogError, Framer, Gtid, GtidState, MAGIC, Transactions};
use crate::binlog_archive::{
    Archive, OpenTransaction, PIECE_FORMAT, Piece, PieceManifest, file_dir, piece_key,
};
use crate::compress::Compression;
use crate::{Error, Result};

#[derive(Debug, Clone)]
pub struct ArchiveOptions {
    pub datadir: PathBuf,
    /// The binlog index file; None: the one `*.index` in the data dir that is not a relay log's.
    pub index: Option<PathBuf>,
    pub max_piece: usize,
    pub compression: Compression,
    pub zstd_level: i32,
    pub recipients: Option<Recipients>,
}

/// What one pass stored.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PassSummary {
    pub pieces: u64,
    pub binlog_bytes: u64,
}

/// Archives until stopped, a pass every `interval`. What the archive holds is read from the
/// store at the start and after a failed pass (the store is the truth); in between, this
/// process remembers what it stored, so a pass costs no listing.
pub async fn archive_forever(
    store: &Store,
    prefix: &str,
    options: &ArchiveOptions,
    interval: Duration,
) -> Result<()> {
    let mut progress: Option<Progress> = None;
    loop {
        if progress.is_none() {
            match Progress::read(store, prefix).await {
                Ok(p) => progress = Some(p),
                Err(e) => tracing::warn!("cannot read the archive, retrying: {e}"),
            }
        }
        if let Some(p) = progress.as_mut() {
            match archive_pass(store, prefix, options, p).await {
                Ok(s) if s.pieces > 0 => {
                    tracing::info!(pieces = s.pieces, bytes = s.binlog_bytes, "archived")
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!("archive pass failed, retrying: {e}");
                    progress = None;
                }
            }
        }
        tokio::time::sleep(interval).await;
    }
}

/// How far each file is archived (by its key directory).
#[derive(Debug, Default)]
pub struct Progress {
    files: BTreeMap<String, FileProgress>,
}

#[derive(Debug, Clone, Default)]
struct FileProgress {
    end: u64,
    state: GtidState,
    open: Option<(Gtid, u8)>,
    complete: bool,
    last: Option<Piece>,
}

impl Progress {
    /// How far the archive under `prefix` holds each file: one manifest read per file.
    pub async fn read(store: &Store, prefix: &str) -> Result<Progress> {
        let (last_pieces, pruned) = Archive::read_last_pieces(store, prefix).await?;
        let mut files: BTreeMap<String, FileProgress> = last_pieces
            .into_iter()
            .filter_map(|last| {
                let (dir, _) = last.key.rsplit_once('/')?;
                let m = &last.manifest;
                let progress = FileProgress {
                    end: m.end,
                    state: m.state_at_end(),
                    open: m.open_transaction.as_ref().and_then(|o| o.parsed()),
                    complete: m.file_complete,
                    last: Some(last.clone()),
                };
                Some((format!("{dir}/"), progress))
            })
            .collect();
        // Pruned files are done: never stored again, though the server may still list them.
        for dir in pruned {
            files.insert(
                dir,
                FileProgress {
                    complete: true,
                    ..FileProgress::default()
                },
            );
        }
        Ok(Progress { files })
    }
}

/// One pass over the server's binlog files.
pub async fn archive_pass(
    store: &Store,
    prefix: &str,
    options: &ArchiveOptions,
    progress: &mut Progress,
) -> Result<PassSummary> {
    let files = binlog_files(&options.datadir, options.index.as_deref())?;
    let mut summary = PassSummary::default();
    for (i, path) in files.iter().enumerate() {
        let later_file_exists = i + 1 < files.len();
        let Some(head) = FileHead::read(path)? else {
            continue; // just created, its header not written yet
        };
        let dir = file_dir(prefix, head.created, head.server_id, &head.name);
        let file = progress.files.entry(dir.clone()).or_default();
        while !file.complete {
            let len = file_len(path)?;
            if len < file.end {
                tracing::warn!(
                    file = head.name,
                    archived = file.end,
                    now = len,
                    "the server's file is shorter than the archive's copy: the server lost transactions the archive holds (a crash with sync_binlog=0: set sync_binlog=1); restores will not cross this point"
                );
                finish(store, file).await?;
                break;
            }
            let piece = match read_piece(path, &head, file, options.max_piece) {
                Ok(Some(piece)) => piece,
                Ok(None) => break,
                // A damaged tail of a file the server has left (a crash): the file ends where it
                // can be read, and a restore across it reports the gap. (An I/O error is
                // passed up: the pass is retried.)
                Err(e @ Error::Binlog { .. }) if later_file_exists => {
                    tracing::warn!(
                        file = head.name,
                        "the rest of the file cannot be read ({e}); it is archived up to byte {}",
                        file.end
                    );
                    finish(store, file).await?;
                    break;
                }
                Err(e) => return Err(e),
            };
            if piece.end == file.end {
                // Nothing more can be cut. A later file means the server ended this one: after
                // a crash it may end in a transaction that never committed, which is dropped.
                if later_file_exists {
                    if len > file.end {
                        tracing::warn!(
                            file = head.name,
                            bytes = len - file.end,
                            "the file ends in an unfinished transaction (the server stopped mid-write); it is not archived"
                        );
                    }
                    finish(store, file).await?;
                }
                break;
            }
            let at_eof = piece.end == len;
            let complete = piece.ends_file || (later_file_exists && at_eof);
            let stored = store_piece(store, &dir, &head, &piece, complete, options).await?;
            summary.pieces += 1;
            summary.binlog_bytes += piece.end - file.end;
            *file = FileProgress {
                end: piece.end,
                state: piece.state_at_end,
                open: piece.open_at_end,
                complete,
                last: Some(stored),
            };
            if at_eof {
                break;
            }
        }
    }
    Ok(summary)
}

/// The files the server's index lists, oldest first.
fn binlog_files(datadir: &Path, index: Option<&Path>) -> Result<Vec<PathBuf>> {
    let index = match index {
        Some(i) => i.to_path_buf(),
        None => find_index(datadir)?,
    };
    let text = std::fs::read_to_string(&index).map_err(|e| Error::io(&index, e))?;
    let base = index.parent().unwrap_or(datadir);
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| base.join(l))
        .collect())
}

fn find_index(datadir: &Path) -> Result<PathBuf> {
    let entries = std::fs::read_dir(datadir).map_err(|e| Error::io(datadir, e))?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.ends_with(".index") && !name.contains("relay")
        })
        .collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(Error::Config(format!(
            "no binary log index in {} (is log-bin set on the server?)",
            datadir.display()
        ))),
        _ => Err(Error::Config(format!(
            "several binary log indexes in {}: name one with --binlog-index",
            datadir.display()
        ))),
    }
}

fn file_len(path: &Path) -> Result<u64> {
    Ok(std::fs::metadata(path)
        .map_err(|e| Error::io(path, e))?
        .len())
}

/// What a file's first event says: who wrote it and when it was created.
pub struct FileHead {
    pub name: String,
    pub server_id: u32,
    pub created: DateTime<Utc>,
    /// Magic and format description event: what a replay of a later piece is prefixed with.
    pub prefix: Vec<u8>,
}

impl FileHead {
    /// None while the server has not yet written the format description.
    pub fn read(path: &Path) -> Result<Option<FileHead>> {
        let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let mut bytes = vec![0u8; 4096];
        let n = read_up_to(&mut file, &mut bytes).map_err(|e| Error::io(path, e))?;
        bytes.truncate(n);
        FileHead::parse(path, &bytes)
    }

    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Option<FileHead>> {
        if bytes.len() < MAGIC.len() {
            return Ok(None);
        }
        if &bytes[..4] != MAGIC {
            return Err(binlog_error(path, BinlogError::NoMagic));
        }
        let Some(framed) = Framer::default()
            .next(&bytes[4..], 4)
            .map_err(|e| binlog_error(path, e))?
        else {
            return Ok(None);
        };
        Ok(Some(FileHead {
            name: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            server_id: framed.event.server_id,
            created: framed.event.time(),
            prefix: bytes[..4 + framed.len].to_vec(),
        }))
    }
}

fn binlog_error(path: &Path, e: BinlogError) -> Error {
    Error::Binlog {
        path: path.to_path_buf(),
        source: e,
    }
}

fn read_up_to(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// A range of a file ready to store.
struct ReadPiece {
    bytes: Vec<u8>,
    end: u64,
    state_at_start: GtidState,
    state_at_end: GtidState,
    first_gtid: Option<String>,
    last_gtid: Option<String>,
    first_time: Option<DateTime<Utc>>,
    last_time: Option<DateTime<Utc>>,
    events: u64,
    ends_in_transaction: bool,
    open_at_end: Option<(Gtid, u8)>,
    ends_file: bool,
}

/// The largest event a server writes (`max_allowed_packet` is at most 1 GiB), with room for
/// its headers: a length beyond it is a damaged header, not an event to read into memory.
const MAX_EVENT: usize = (1 << 30) + (1 << 20);

/// Reads from `offset` at most `max` bytes and cuts after the last transaction that ended
/// in them (or, when one transaction is larger than `max`, after the last whole event).
fn read_piece(
    path: &Path,
    head: &FileHead,
    from: &FileProgress,
    max: usize,
) -> Result<Option<ReadPiece>> {
    let offset = from.end;
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| Error::io(path, e))?;
    let mut bytes = vec![0u8; max];
    let n = read_up_to(&mut file, &mut bytes).map_err(|e| Error::io(path, e))?;
    bytes.truncate(n);
    // The framer learns the checksum setting from the format description; a resumed file
    // shows it the file's own first.
    let mut framer = Framer::default();
    let mut at = if offset == 0 {
        if bytes.len() < 4 {
            return Ok(None);
        }
        4
    } else {
        framer
            .next(&head.prefix[4..], 4)
            .map_err(|e| binlog_error(path, e))?;
        0
    };
    // One event larger than a piece (a big row): the piece holds that event whole.
    if n == max
        && let Some(len) = event_len_at(&bytes, at)
        && at + len > max
    {
        if len > MAX_EVENT {
            return Err(binlog_error(
                path,
                BinlogError::BadEvent {
                    offset: offset + at as u64,
                    detail: format!("length {len} is larger than any event a server writes"),
                },
            ));
        }
        bytes.resize(at + len, 0);
        let more = read_up_to(&mut file, &mut bytes[max..]).map_err(|e| Error::io(path, e))?;
        bytes.truncate(max + more);
    }
    let mut state_at_start = from.state.clone();
    let mut tx = Transactions::resuming(from.state.clone(), from.open);
    let mut cut = CutPoint::default();
    let mut last_event_end = 0;
    let mut seen = Seen::default();
    loop {
        let f = match framer.next(&bytes[at..], offset + at as u64) {
            Ok(Some(f)) => f,
            Ok(None) => break,
            // What comes before an unreadable event is stored; the next read starts at it.
            Err(_) if cut.at > 0 => break,
            Err(e) => return Err(binlog_error(path, e)),
        };
        // A file's start state is its Gtid_list event's (the server's binlog state then).
        if offset == 0
            && let Some(list) = f.event.gtid_list()
        {
            state_at_start = list;
        }
        if let Some(gtid) = tx.observe(&f.event) {
            seen.first_gtid.get_or_insert(gtid.to_string());
            seen.last_gtid = Some(gtid.to_string());
        }
        seen.events += 1;
        seen.first_time.get_or_insert(f.event.time());
        seen.last_time = Some(f.event.time());
        at += f.len;
        last_event_end = at;
        if tx.between() {
            cut = CutPoint {
                at,
                state: tx.state.clone(),
                seen: seen.clone(),
                ends_file: f.event.ends_file(),
                open: None,
            };
        }
    }
    let ends_in_transaction = cut.at == 0 && last_event_end > 0 && bytes.len() >= max;
    if ends_in_transaction {
        cut = CutPoint {
            at: last_event_end,
            state: tx.state.clone(),
            seen,
            ends_file: false,
            open: tx.open(),
        };
    }
    bytes.truncate(cut.at);
    Ok(Some(ReadPiece {
        end: offset + cut.at as u64,
        bytes,
        state_at_start,
        state_at_end: cut.state,
        first_gtid: cut.seen.first_gtid,
        last_gtid: cut.seen.last_gtid,
        first_time: cut.seen.first_time,
        last_time: cut.seen.last_time,
        events: cut.seen.events,
        ends_in_transaction,
        open_at_end: cut.open,
        ends_file: cut.ends_file,
    }))
}

/// The length an event header at `at` announces.
fn event_len_at(bytes: &[u8], at: usize) -> Option<usize> {
    let header = bytes.get(at..at + crate::binlog::HEADER_LEN)?;
    Some(u32::from_le_bytes(header[9..13].try_into().ok()?) as usize)
}

#[derive(Debug, Default, Clone)]
struct Seen {
    first_gtid: Option<String>,
    last_gtid: Option<String>,
    first_time: Option<DateTime<Utc>>,
    last_time: Option<DateTime<Utc>>,
    events: u64,
}

#[derive(Debug, Default)]
struct CutPoint {
    at: usize,
    state: GtidState,
    seen: Seen,
    ends_file: bool,
    open: Option<(Gtid, u8)>,
}

/// The server writes no more to this file: its last stored piece says so.
async fn finish(store: &Store, file: &mut FileProgress) -> Result<()> {
    if let Some(last) = &file.last {
        file.last = Some(mark_complete(store, last).await?);
    }
    file.complete = true;
    Ok(())
}

/// Rewrites a piece's manifest (never its object) to say the file ends with it.
async fn mark_complete(store: &Store, piece: &Piece) -> Result<Piece> {
    let manifest = PieceManifest {
        file_complete: true,
        ..piece.manifest.clone()
    };
    store
        .put_small(
            &manifest_key(&piece.key),
            manifest.to_json().into(),
            "application/json",
        )
        .await?;
    Ok(Piece {
        key: piece.key.clone(),
        manifest,
    })
}

async fn store_piece(
    store: &Store,
    dir: &str,
    head: &FileHead,
    piece: &ReadPiece,
    complete: bool,
    options: &ArchiveOptions,
) -> Result<Piece> {
    let encrypted = options.recipients.is_some();
    let mut encoder = LayerEncoder::new(
        options.compression,
        options.zstd_level,
        1,
        options.recipients.as_ref(),
    )?;
    let mut stored = encoder.encode(&piece.bytes)?.to_vec();
    stored.extend(encoder.finish()?);
    let mut hasher = StoredHasher::new(ChecksumKind::for_new_object(encrypted));
    hasher.update(&stored);
    let checksum = hasher.finish();
    let start = piece.end - piece.bytes.len() as u64;
    let key = piece_key(dir, start);
    let mut manifest = PieceManifest {
        format: PIECE_FORMAT.into(),
        file: head.name.clone(),
        server_id: head.server_id,
        file_created: head.created,
        start,
        end: piece.end,
        state_at_start: piece.state_at_start.to_string(),
        state_at_end: piece.state_at_end.to_string(),
        first_gtid: piece.first_gtid.clone(),
        last_gtid: piece.last_gtid.clone(),
        first_event_time: piece.first_time,
        last_event_time: piece.last_time,
        events: piece.events,
        ends_in_transaction: piece.ends_in_transaction,
        open_transaction: piece.open_at_end.map(OpenTransaction::new),
        file_complete: complete,
        binlog_sha256: hex::encode(Sha256::digest(&piece.bytes)),
        stored_bytes: stored.len() as u64,
        stored_sha256: checksum.sha256(),
        stored_crc32c: checksum.crc32c(),
        compression: options.compression,
        encryption: options.recipients.as_ref().map(Encryption::age),
        archived_at: Utc::now(),
        runner: format!("mysql-backup {}", env!("CARGO_PKG_VERSION")),
    };
    store
        .put_small(&key, stored.into(), "application/octet-stream")
        .await?;
    // When the piece was stored: what the archive's lag is measured by.
    manifest.archived_at = Utc::now();
    store
        .put_small(
            &manifest_key(&key),
            manifest.to_json().into(),
            "application/json",
        )
        .await?;
    tracing::debug!(key, start, end = piece.end, complete, "piece stored");
    Ok(Piece { key, manifest })
}

#[cfg(test)]
mod tests;
