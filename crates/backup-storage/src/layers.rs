//! The layers of a stored object: the plaintext (an etcd snapshot, an xbstream), optionally
//! zstd-compressed, then optionally age-encrypted. [`LayerEncoder`] builds them while a backup
//! streams; [`ObjectReader`] peels them off while a download streams, tallying the stored bytes
//! for the manifest checks. Both keep bounded buffers: no temp file, no whole object in memory.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::{AsyncRead, AsyncReadExt, TryStreamExt};

use crate::compress::{Compression, CompressionError, DECODE_PIECE, Decoder, Encoder};
use crate::encryption::{
    AGE_MAGIC, EncryptionError, Encryptor, Identity, Recipients, check_header, header_error,
    recipients_note,
};
use crate::stored_checksum::{ChecksumKind, StoredChecksum, StoredHasher};
use crate::{Download, StorageError};

/// Largest age header we wait for when checking one without a key; real ones are a few
/// hundred bytes per recipient.
const MAX_HEADER: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Compression(#[from] CompressionError),
    #[error(transparent)]
    Encryption(#[from] EncryptionError),
}

impl ReadError {
    /// True when the stored data is at fault, not the transport, the keys or this machine.
    pub fn is_integrity(&self) -> bool {
        match self {
            ReadError::Storage(_) => false,
            ReadError::Compression(e) => e.is_integrity(),
            ReadError::Encryption(e) => e.is_integrity(),
        }
    }
}

/// Compresses, then encrypts, chunk by chunk.
pub struct LayerEncoder {
    compress: Encoder,
    encrypt: Option<Encryptor>,
}

impl LayerEncoder {
    /// `threads` as in [`Encoder::new`]; `recipients` turns encryption on.
    pub fn new(
        compression: Compression,
        level: i32,
        threads: u32,
        recipients: Option<&Recipients>,
    ) -> Result<LayerEncoder, ReadError> {
        Ok(LayerEncoder {
            compress: Encoder::new(compression, level, threads)?,
            encrypt: recipients.map(Encryptor::new).transpose()?,
        })
    }

    /// Feeds plaintext; returns the bytes to store (possibly empty), borrowed until the next call.
    pub fn encode<'a>(&'a mut self, input: &'a [u8]) -> Result<&'a [u8], ReadError> {
        let compressed = self.compress.encode(input)?;
        match self.encrypt.as_mut() {
            None => Ok(compressed),
            Some(encryptor) => Ok(encryptor.encrypt(compressed)?),
        }
    }

    /// Ends both layers; returns the last bytes to store.
    pub fn finish(self) -> Result<Vec<u8>, ReadError> {
        let tail = self.compress.finish()?;
        match self.encrypt {
            None => Ok(tail),
            Some(mut encryptor) => {
                let mut out = encryptor.encrypt(&tail)?.to_vec();
                out.extend(encryptor.finish()?);
                Ok(out)
            }
        }
    }
}

/// What the manifest (or the object's metadata) says about the layers; `None` fields are
/// sniffed from the first bytes, for objects written by other tools.
#[derive(Debug, Clone, Default)]
pub struct Declared {
    pub compression: Option<Compression>,
    pub encrypted: Option<bool>,
    /// The recipients the manifest records, for messages.
    pub recipients: Option<Vec<String>>,
    /// Which checksum of the stored bytes the manifest records; without a manifest, the one
    /// a new manifest would record.
    pub stored_checksum: Option<ChecksumKind>,
}

impl Declared {
    /// What a manifest records of an object's layers: its compression, its encryption (and to
    /// whom), and which checksum of the stored bytes.
    pub fn recorded(
        compression: Compression,
        encryption: Option<&crate::encryption::Encryption>,
        stored_checksum: Option<ChecksumKind>,
    ) -> Declared {
        Declared {
            compression: Some(compression),
            encrypted: Some(encryption.is_some()),
            recipients: encryption.map(|e| e.recipients.clone()),
            stored_checksum,
        }
    }

    fn stored_checksum(&self, encrypted: bool) -> ChecksumKind {
        self.stored_checksum
            .unwrap_or(ChecksumKind::for_new_object(encrypted))
    }
}

/// The stored bytes as they pass: their count and, when they differ from the plaintext (or
/// the checksum recorded is not the plaintext's sha256), their checksum. A failed download is
/// kept here, so it is reported as such and not as corruption.
#[derive(Default)]
struct Tally {
    bytes: u64,
    checksum: Option<StoredHasher>,
    failure: Option<StorageError>,
}

type Shared = Arc<Mutex<Tally>>;

fn count(tally: &Shared, chunk: &[u8]) {
    let mut tally = tally.lock().expect("not poisoned");
    tally.bytes += chunk.len() as u64;
    if let Some(checksum) = tally.checksum.as_mut() {
        checksum.update(chunk);
    }
}

enum Source {
    /// Not encrypted: the stored chunks are (compressed) plaintext.
    Plain {
        download: Download,
        first: Option<Bytes>,
    },
    /// age, opened with an identity.
    Age(Box<dyn AsyncRead + Unpin + Send>),
    /// age, without an identity: only the header and the stored bytes can be checked.
    Opaque {
        download: Download,
        first: Option<Bytes>,
        header: Vec<u8>,
        header_checked: bool,
    },
}

/// Streams an object's plaintext in pieces lent to the caller until the next call: a piece is
/// where it was made, not copied by the reader: a stored chunk as the store sent it (an object
/// neither compressed nor encrypted), or at most [`DECODE_PIECE`] bytes of age's or the
/// decoder's output. [`ObjectReader::piece_bytes`] gives it as bytes of its own, copying only
/// what is not a stored chunk.
pub struct ObjectReader {
    what: String,
    source: Source,
    declared_compression: Option<Compression>,
    declared_checksum: ChecksumKind,
    decoder: Option<(Compression, Decoder)>,
    tally: Shared,
    /// age's plaintext is read into this.
    buffer: Vec<u8>,
    /// The stored chunk the last piece was, when the stored bytes are the plaintext.
    chunk: Bytes,
    piece: Option<Piece>,
    encrypted: bool,
}

/// Where the piece [`ObjectReader::advance`] found lies.
#[derive(Clone, Copy)]
enum Piece {
    /// `chunk`.
    Chunk,
    /// The first `n` bytes of `buffer`.
    Buffer(usize),
    /// The decoder's piece.
    Decoded,
}

/// A chunk of (compressed) plaintext from the source.
enum PlainChunk {
    /// A stored chunk (the object is not encrypted).
    Stored(Bytes),
    /// The first `n` bytes of `buffer` (age's output).
    Buffer(usize),
}

impl ObjectReader {
    /// Opens `download`. An encrypted object needs `identity` to yield its content; without one
    /// the reader only checks the header and tallies the stored bytes (see
    /// [`ObjectReader::content_readable`]). An identity that is no recipient fails here, before
    /// a byte of content is read. `what` names the object in messages (its URL).
    pub async fn open(
        mut download: Download,
        declared: &Declared,
        identity: Option<&Identity>,
        what: &str,
    ) -> Result<ObjectReader, ReadError> {
        let first = download.next_chunk().await?;
        let encrypted = declared.encrypted.unwrap_or_else(|| {
            first
                .as_deref()
                .is_some_and(|bytes| bytes.starts_with(AGE_MAGIC))
        });
        let tally: Shared = Arc::default();
        let checksum = declared.stored_checksum(encrypted);
        // Plain stored bytes are the plaintext (or its zstd frame, found on the first piece),
        // whose sha256 the caller computes: hashed here only if the manifest records another.
        if encrypted || checksum != ChecksumKind::Sha256 {
            tally.lock().expect("not poisoned").checksum = Some(StoredHasher::new(checksum));
        }
        let source = match (encrypted, identity) {
            (false, _) => Source::Plain { download, first },
            (true, None) => Source::Opaque {
                download,
                first,
                header: Vec::new(),
                header_checked: false,
            },
            (true, Some(identity)) => {
                let stored = stored_stream(download, first, tally.clone());
                let decryptor = match age::Decryptor::new_async(stored).await {
                    Ok(d) => d,
                    Err(e) => {
                        return Err(failure_or(&tally, || {
                            header_error(what, e, identity, declared.recipients.as_deref())
                        }));
                    }
                };
                let reader = decryptor.decrypt_async(identity.as_dyn()).map_err(|e| {
                    failure_or(&tally, || {
                        header_error(what, e, identity, declared.recipients.as_deref())
                    })
                })?;
                Source::Age(Box::new(reader))
            }
        };
        Ok(ObjectReader {
            what: what.to_string(),
            source,
            declared_compression: declared.compression,
            declared_checksum: checksum,
            decoder: None,
            tally,
            buffer: vec![0; DECODE_PIECE],
            chunk: Bytes::new(),
            piece: None,
            encrypted,
        })
    }

    pub fn encrypted(&self) -> bool {
        self.encrypted
    }

    /// False for an encrypted object opened without an identity: `advance` finds no piece,
    /// and only the stored bytes and the header are checked.
    pub fn content_readable(&self) -> bool {
        !matches!(self.source, Source::Opaque { .. })
    }

    /// The compression found (or declared); `None` before the first piece.
    pub fn compression(&self) -> Option<Compression> {
        self.decoder.as_ref().map(|(c, _)| *c)
    }

    /// Stored bytes read so far.
    pub fn stored_bytes(&self) -> u64 {
        self.tally.lock().expect("not poisoned").bytes
    }

    /// The checksum of the stored bytes (of the kind the manifest records) once the reader is
    /// done, or `None` when they are the plaintext itself (neither compressed nor encrypted)
    /// and their sha256 is asked for: the caller hashes that anyway, and a second pass would
    /// double the CPU of every fetch.
    pub fn stored_checksum(&self) -> Option<StoredChecksum> {
        let tally = self.tally.lock().expect("not poisoned");
        tally.checksum.clone().map(StoredHasher::finish)
    }

    /// Finds the next piece of plaintext, which [`ObjectReader::piece`] then lends (so a
    /// caller can ask the reader other things while holding it); false at the end, once every
    /// layer ended cleanly.
    pub async fn advance(&mut self) -> Result<bool, ReadError> {
        // Cleared first: after an error (or a cancelled call) there is no piece.
        self.piece = None;
        self.piece = self.find_piece().await?;
        Ok(self.piece.is_some())
    }

    /// The piece the last [`ObjectReader::advance`] found; empty at the end or after an error.
    pub fn piece(&self) -> &[u8] {
        match self.piece {
            None => &[],
            Some(Piece::Chunk) => &self.chunk,
            Some(Piece::Buffer(n)) => &self.buffer[..n],
            Some(Piece::Decoded) => self.decoder.as_ref().expect("decoding").1.piece(),
        }
    }

    /// The piece [`ObjectReader::piece`] lends, as bytes of its own to hand to another thread:
    /// a stored chunk without a copy, age's or the decoder's output copied.
    pub fn piece_bytes(&self) -> Bytes {
        match self.piece {
            Some(Piece::Chunk) => self.chunk.clone(),
            _ => Bytes::copy_from_slice(self.piece()),
        }
    }

    async fn find_piece(&mut self) -> Result<Option<Piece>, ReadError> {
        loop {
            if let Some((_, decoder)) = self.decoder.as_mut()
                && decoder.advance()?
            {
                return Ok(Some(Piece::Decoded));
            }
            let Some(chunk) = self.next_plain_chunk().await? else {
                if let Some((_, decoder)) = &self.decoder {
                    decoder.finish()?;
                }
                return Ok(None);
            };
            let bytes: &[u8] = match &chunk {
                PlainChunk::Stored(bytes) => bytes,
                PlainChunk::Buffer(n) => &self.buffer[..*n],
            };
            if bytes.is_empty() {
                continue;
            }
            let plain = matches!(self.source, Source::Plain { .. });
            if self.decoder.is_none() {
                let compression = self
                    .declared_compression
                    .unwrap_or_else(|| Compression::sniff(bytes));
                let mut tally = self.tally.lock().expect("not poisoned");
                if plain && compression != Compression::None && tally.checksum.is_none() {
                    tally.checksum = Some(StoredHasher::new(self.declared_checksum));
                }
                drop(tally);
                self.decoder = Some((compression, Decoder::new(compression)?));
            }
            // Encrypted chunks were counted as they left the store.
            if plain {
                count(&self.tally, bytes);
            }
            let (compression, decoder) = self.decoder.as_mut().expect("set above");
            match (*compression, chunk) {
                (Compression::None, PlainChunk::Stored(bytes)) => {
                    self.chunk = bytes;
                    return Ok(Some(Piece::Chunk));
                }
                (Compression::None, PlainChunk::Buffer(n)) => return Ok(Some(Piece::Buffer(n))),
                (_, PlainChunk::Stored(bytes)) => decoder.feed(bytes),
                // The decoder keeps its input across reads of the next; compressed bytes are
                // the smaller side to copy.
                (_, PlainChunk::Buffer(n)) => {
                    decoder.feed(Bytes::copy_from_slice(&self.buffer[..n]))
                }
            }
        }
    }

    /// The next chunk of (compressed) plaintext; encrypted stored bytes are counted as they pass.
    async fn next_plain_chunk(&mut self) -> Result<Option<PlainChunk>, ReadError> {
        match &mut self.source {
            Source::Plain { download, first } => match first.take() {
                Some(chunk) => Ok(Some(PlainChunk::Stored(chunk))),
                None => Ok(download.next_chunk().await?.map(PlainChunk::Stored)),
            },
            Source::Age(reader) => match reader.read(&mut self.buffer).await {
                Ok(0) => Ok(None),
                Ok(n) => Ok(Some(PlainChunk::Buffer(n))),
                Err(e) => Err(failure_or(&self.tally, || {
                    let reason = if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        "it ends before its last chunk".to_string()
                    } else {
                        e.to_string()
                    };
                    EncryptionError::Corrupt {
                        what: self.what.clone(),
                        reason,
                    }
                })),
            },
            Source::Opaque {
                download,
                first,
                header,
                header_checked,
            } => {
                while let Some(chunk) = match first.take() {
                    Some(chunk) => Some(chunk),
                    None => download.next_chunk().await?,
                } {
                    count(&self.tally, &chunk);
                    if !*header_checked && header.len() < MAX_HEADER {
                        header.extend_from_slice(&chunk[..chunk.len().min(MAX_HEADER)]);
                        *header_checked = check_header(&self.what, header)?.is_some();
                    }
                }
                if !*header_checked {
                    return Err(EncryptionError::Corrupt {
                        what: self.what.clone(),
                        reason: "no complete age header in its first 64 KiB".into(),
                    }
                    .into());
                }
                Ok(None)
            }
        }
    }
}

/// The stored chunks as an `AsyncRead` for age, counted and hashed as they pass.
fn stored_stream(
    download: Download,
    first: Option<Bytes>,
    tally: Shared,
) -> Box<dyn AsyncRead + Unpin + Send> {
    let chunks = futures::stream::try_unfold(
        (download, first, tally),
        |(mut download, mut first, tally)| async move {
            let chunk = match first.take() {
                Some(chunk) => Some(chunk),
                None => match download.next_chunk().await {
                    Ok(chunk) => chunk,
                    Err(e) => {
                        tally.lock().expect("not poisoned").failure = Some(e);
                        return Err(std::io::Error::other("the download failed"));
                    }
                },
            };
            Ok(chunk.map(|chunk| {
                count(&tally, &chunk);
                (chunk, (download, None, tally))
            }))
        },
    );
    Box::new(Box::pin(chunks).into_async_read())
}

/// The download's own failure if there was one (the transport, not the data), else `other`.
fn failure_or(tally: &Shared, other: impl FnOnce() -> EncryptionError) -> ReadError {
    match tally.lock().expect("not poisoned").failure.take() {
        Some(failure) => ReadError::Storage(failure),
        None => ReadError::Encryption(other()),
    }
}

/// `what` is encrypted and no identity was given: the error a caller that needs the content
/// returns.
pub fn identity_needed(what: &str, declared: &Declared) -> ReadError {
    ReadError::Encryption(EncryptionError::IdentityNeeded {
        what: what.to_string(),
        recipients: recipients_note(declared.recipients.as_deref()),
    })
}
