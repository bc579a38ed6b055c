//! Incremental xbstream parser: fed the stream as it flows, it checks every chunk's CRC32, the
//! offsets of each file, and that every file ends with its EOF chunk. It keeps the small metadata
//! files (binlog position, LSNs, tool info) and nothing else, so memory stays bounded.
//!
//! Chunk layout: magic `XBSTCK01` | flags u8 | type u8 (`P`, `S`, `E`) | path_len u32 | path |
//! [`S`: sparse_map_len u32] | payload_len u64 | payload_offset u64 | crc32 u32 |
//! [`S`: sparse map, 8 bytes per entry] | payload. An `E` chunk ends after the path.
//! All integers little-endian. The CRC covers the sparse map and the payload.

use std::collections::{BTreeMap, HashMap};

const MAGIC: &[u8; 8] = b"XBSTCK01";
const FIXED_PREFIX: usize = 14;
/// Longest path xtrabackup writes is FN_REFLEN (512); allow margin but refuse garbage lengths.
const MAX_PATH: usize = 4096;
/// Sparse-map entries one chunk may carry. xtrabackup writes one per hole in a chunk of at most
/// a few MiB (a few hundred with 16 KiB pages); the bound keeps a corrupted count from making
/// the header buffer grow to gigabytes (4 bytes of count could ask for 32 GiB).
const MAX_SPARSE_ENTRIES: usize = 1 << 16;
/// Metadata files are a few hundred bytes; anything larger is not kept.
const MAX_METADATA: usize = 1 << 20;
const FLAG_IGNORABLE: u8 = 1;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    #[error("not an xbstream: bad chunk magic at byte {offset}")]
    BadMagic { offset: u64 },
    #[error("chunk for {path:?} at byte {offset} fails its CRC32 check (corrupted data)")]
    BadChecksum { path: String, offset: u64 },
    #[error("chunk at byte {offset} has an unsafe or invalid path {path:?}")]
    BadPath { path: String, offset: u64 },
    #[error("chunk at byte {offset} has unknown type {kind:#04x}")]
    UnknownType { kind: u8, offset: u64 },
    #[error("chunk for {path:?} at byte {offset} has offset {found}, expected {expected}")]
    OutOfOrder {
        path: String,
        offset: u64,
        expected: u64,
        found: u64,
    },
    #[error("the stream ends in the middle of a chunk at byte {offset} (truncated)")]
    TruncatedChunk { offset: u64 },
    #[error("the stream ends before {count} file(s) were finished, e.g. {example:?} (truncated)")]
    UnfinishedFiles { count: usize, example: String },
    #[error("the stream contains no files")]
    Empty,
    #[error(
        "chunk at byte {offset} claims {entries} sparse-map entries (at most {MAX_SPARSE_ENTRIES}; corrupted data)"
    )]
    BadSparseMap { entries: usize, offset: u64 },
}

/// What a complete stream held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamSummary {
    pub files: u64,
    /// Payload bytes (file contents) across all files.
    pub payload_bytes: u64,
    /// Stream bytes including chunk headers.
    pub stream_bytes: u64,
    /// Captured metadata files by name (`xtrabackup_binlog_info`, ...).
    pub metadata: BTreeMap<String, Vec<u8>>,
}

enum State {
    /// Collecting a chunk header; `need` is the header length known so far.
    Header { need: usize },
    Payload {
        remaining: u64,
        expected_crc: u32,
        path: String,
    },
}

pub struct Parser {
    state: State,
    header: Vec<u8>,
    crc: crc32fast::Hasher,
    /// Next expected offset of files that have started and not ended.
    open: HashMap<String, u64>,
    /// Metadata files being collected (chunks of files may interleave with `--parallel`).
    captures: HashMap<String, Vec<u8>>,
    summary: StreamSummary,
    /// Stream offset of the current chunk's first byte.
    chunk_start: u64,
}

impl Default for Parser {
    fn default() -> Self {
        Self::new()
    }
}

impl Parser {
    pub fn new() -> Parser {
        Parser {
            state: State::Header { need: FIXED_PREFIX },
            header: Vec::with_capacity(256),
            crc: crc32fast::Hasher::new(),
            open: HashMap::new(),
            captures: HashMap::new(),
            summary: StreamSummary::default(),
            chunk_start: 0,
        }
    }

    /// Bytes seen so far.
    pub fn position(&self) -> u64 {
        self.summary.stream_bytes
    }

    pub fn feed(&mut self, mut data: &[u8]) -> Result<(), StreamError> {
        while !data.is_empty() {
            match &mut self.state {
                State::Header { need } => {
                    let take = (*need - self.header.len()).min(data.len());
                    self.header.extend_from_slice(&data[..take]);
                    data = &data[take..];
                    self.summary.stream_bytes += take as u64;
                    if self.header.len() == *need {
                        self.header_progress()?;
                    }
                }
                State::Payload {
                    remaining,
                    expected_crc,
                    path,
                } => {
                    let take = (*remaining).min(data.len() as u64) as usize;
                    let piece = &data[..take];
                    self.crc.update(piece);
                    if let Some(buf) = self.captures.get_mut(path.as_str()) {
                        buf.extend_from_slice(piece);
                    }
                    *remaining -= take as u64;
                    data = &data[take..];
                    self.summary.stream_bytes += take as u64;
                    self.summary.payload_bytes += take as u64;
                    if *remaining == 0 {
                        let crc = std::mem::take(&mut self.crc).finalize();
                        if crc != *expected_crc {
                            return Err(StreamError::BadChecksum {
                                path: path.clone(),
                                offset: self.chunk_start,
                            });
                        }
                        self.next_chunk();
                    }
                }
            }
        }
        Ok(())
    }

    /// Called when the stream ended: it must end at a chunk boundary with every file finished.
    pub fn finish(self) -> Result<StreamSummary, StreamError> {
        if !matches!(self.state, State::Header { .. }) || !self.header.is_empty() {
            return Err(StreamError::TruncatedChunk {
                offset: self.chunk_start,
            });
        }
        if let Some(example) = self.open.keys().min() {
            return Err(StreamError::UnfinishedFiles {
                count: self.open.len(),
                example: example.clone(),
            });
        }
        if self.summary.files == 0 {
            return Err(StreamError::Empty);
        }
        Ok(self.summary)
    }

    fn next_chunk(&mut self) {
        self.header.clear();
        self.chunk_start = self.summary.stream_bytes;
        self.state = State::Header { need: FIXED_PREFIX };
    }

    /// Parses as much of the header as is buffered; either asks for more or moves on.
    fn header_progress(&mut self) -> Result<(), StreamError> {
        let h = &self.header;
        let offset = self.chunk_start;
        if &h[..8] != MAGIC {
            return Err(StreamError::BadMagic { offset });
        }
        let flags = h[8];
        let kind = h[9];
        let path_len = u32::from_le_bytes(h[10..14].try_into().unwrap()) as usize;
        if path_len == 0 || path_len > MAX_PATH {
            return Err(StreamError::BadPath {
                path: format!("<{path_len} bytes>"),
                offset,
            });
        }
        let after_path = FIXED_PREFIX + path_len;
        let sparse = kind == b'S';
        let fixed_end = after_path + if sparse { 4 } else { 0 } + 20;
        if h.len() < after_path {
            self.state = State::Header { need: after_path };
            return Ok(());
        }
        if kind == b'E' {
            let path = self.path(after_path)?;
            self.end_file(path);
            self.next_chunk();
            return Ok(());
        }
        if !matches!(kind, b'P' | b'S') && flags & FLAG_IGNORABLE == 0 {
            return Err(StreamError::UnknownType { kind, offset });
        }
        if h.len() < fixed_end {
            self.state = State::Header { need: fixed_end };
            return Ok(());
        }
        let map_entries = if sparse {
            u32::from_le_bytes(h[after_path..after_path + 4].try_into().unwrap()) as usize
        } else {
            0
        };
        if map_entries > MAX_SPARSE_ENTRIES {
            return Err(StreamError::BadSparseMap {
                entries: map_entries,
                offset,
            });
        }
        let full = fixed_end + map_entries * 8;
        if h.len() < full {
            self.state = State::Header { need: full };
            return Ok(());
        }
        let p = fixed_end - 20;
        let payload_len = u64::from_le_bytes(h[p..p + 8].try_into().unwrap());
        let payload_offset = u64::from_le_bytes(h[p + 8..p + 16].try_into().unwrap());
        let expected_crc = u32::from_le_bytes(h[p + 16..p + 20].try_into().unwrap());
        let path = self.path(after_path)?;
        self.crc = crc32fast::Hasher::new();
        self.crc.update(&self.header[fixed_end..full]);
        if kind == b'P' {
            let next = self.open.entry(path.clone()).or_insert(0);
            if *next != payload_offset {
                return Err(StreamError::OutOfOrder {
                    path,
                    offset,
                    expected: *next,
                    found: payload_offset,
                });
            }
            *next = payload_offset + payload_len;
            self.start_capture(&path, payload_offset, payload_len);
        } else {
            // Sparse (and ignorable unknown) chunks carry holes; only order is not checkable.
            self.open.entry(path.clone()).or_insert(0);
        }
        if payload_len == 0 {
            let crc = std::mem::take(&mut self.crc).finalize();
            if crc != expected_crc {
                return Err(StreamError::BadChecksum { path, offset });
            }
            self.next_chunk();
        } else {
            self.state = State::Payload {
                remaining: payload_len,
                expected_crc,
                path,
            };
        }
        Ok(())
    }

    fn path(&self, after_path: usize) -> Result<String, StreamError> {
        let raw = &self.header[FIXED_PREFIX..after_path];
        let path = String::from_utf8_lossy(raw).into_owned();
        let unsafe_path = path.starts_with('/')
            || path.contains('\0')
            || path.split('/').any(|c| c == ".." || c.is_empty());
        if unsafe_path {
            return Err(StreamError::BadPath {
                path,
                offset: self.chunk_start,
            });
        }
        Ok(path)
    }

    fn end_file(&mut self, path: String) {
        self.open.remove(&path);
        self.summary.files += 1;
        if let Some(buf) = self.captures.remove(&path) {
            self.summary.metadata.insert(path, buf);
        }
    }

    fn start_capture(&mut self, path: &str, offset: u64, len: u64) {
        if !is_metadata_file(path) {
            return;
        }
        if offset + len > MAX_METADATA as u64 {
            self.captures.remove(path);
        } else if offset == 0 {
            self.captures.insert(path.to_string(), Vec::new());
        }
    }
}

/// Top-level metadata files written by xtrabackup and mariadb-backup (both naming schemes).
pub fn is_metadata_file(path: &str) -> bool {
    !path.contains('/')
        && (path.starts_with("xtrabackup_")
            || path.starts_with("mariadb_backup_")
            || path == "backup-my.cnf")
        && path != "xtrabackup_logfile"
}

#[cfg(test)]
mod tests;
