//! The plaintext of a segment of the change archive: a magic line, one record per watch event,
//! and an end record that proves the segment whole (its count, revision range and the sha256
//! of every byte before it).
//!
//! Binary and big-endian, so values (any bytes) need no escaping and a 1 KiB value costs
//! 1 KiB plus 53 bytes of record. [`RecordDecoder`] takes the bytes in pieces of any size and
//! keeps at most one record's worth buffered.
//!
//! ```text
//! "ETCDCHG1"
//! event: tag u8 (1 put, 2 delete; | 0x80 when the time is only an upper bound), revision i64,
//!        create_revision i64, version i64, lease i64, lease_ttl i64 (-1: unknown or none),
//!        time_ms i64 (when the archive saw it), key_len u32, key, value_len u32, value
//! end:   tag u8 (0xFF), events u64, first_revision i64, last_revision i64, sha256 [32]
//! ```

use sha2::{Digest, Sha256};

pub const MAGIC: &[u8; 8] = b"ETCDCHG1";
const TAG_PUT: u8 = 1;
const TAG_DELETE: u8 = 2;
/// On an event's tag: the archive read it while catching up (after a start or a broken
/// watch), so it was committed at or before `time_ms`, maybe long before.
const LATE: u8 = 0x80;
const TAG_END: u8 = 0xFF;
/// Fixed part of an event record: the tag, six i64 and the two lengths.
const EVENT_HEAD: usize = 1 + 6 * 8 + 4;
const END_LEN: usize = 1 + 8 + 8 + 8 + 32;
/// Larger than etcd accepts in any request (`--max-request-bytes` tops at 2 GiB in theory,
/// clusters run 1.5 MiB to a few MiB); a length beyond it is damage, not data.
const MAX_FIELD: u32 = 512 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Put,
    Delete,
}

/// One watch event as archived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub kind: ChangeKind,
    /// The revision that made the change (the key's mod revision for a put).
    pub revision: i64,
    pub create_revision: i64,
    pub version: i64,
    /// The lease the key was put with (0: none).
    pub lease: i64,
    /// That lease's granted TTL in seconds as the archive asked it; -1 when there is no lease
    /// or it had already expired when asked.
    pub lease_ttl: i64,
    /// When the archive received the event (Unix milliseconds): at or shortly after its commit,
    /// or, when `late`, only no earlier than its commit.
    pub time_ms: i64,
    /// Received while the archive caught up with history (after a start or a broken watch):
    /// `time_ms` bounds its commit time from above only.
    pub late: bool,
    pub key: Vec<u8>,
    /// Empty for deletes.
    pub value: Vec<u8>,
}

/// What the end record proves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentEnd {
    pub events: u64,
    pub first_revision: i64,
    pub last_revision: i64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("not a segment of the change archive (no ETCDCHG1 header)")]
    NoHeader,
    #[error("unknown record tag {0:#04x} at byte {1}")]
    UnknownTag(u8, u64),
    #[error("a record at byte {0} claims a field of {1} bytes")]
    FieldTooLarge(u64, u32),
    #[error("the segment ends without its end record (cut short)")]
    NoEnd,
    #[error("bytes after the end record")]
    TrailingBytes,
    #[error("the end record says {recorded}, the segment holds {found}")]
    EndMismatch { recorded: String, found: String },
    #[error("revision {revision} follows {previous}: the segment is out of order")]
    OutOfOrder { previous: i64, revision: i64 },
}

/// Encodes a segment's records, hashing as it goes.
pub struct RecordEncoder {
    hash: Sha256,
    events: u64,
    first: Option<i64>,
    last: i64,
    out: Vec<u8>,
}

impl Default for RecordEncoder {
    fn default() -> Self {
        Self::new()
    }
}

impl RecordEncoder {
    pub fn new() -> RecordEncoder {
        let mut encoder = RecordEncoder {
            hash: Sha256::new(),
            events: 0,
            first: None,
            last: 0,
            out: Vec::with_capacity(64 * 1024),
        };
        encoder.emit(MAGIC);
        encoder
    }

    fn emit(&mut self, bytes: &[u8]) {
        self.hash.update(bytes);
        self.out.extend_from_slice(bytes);
    }

    /// Appends one event.
    pub fn push(&mut self, change: &Change) {
        let mut head = [0u8; EVENT_HEAD];
        head[0] = match change.kind {
            ChangeKind::Put => TAG_PUT,
            ChangeKind::Delete => TAG_DELETE,
        } | if change.late { LATE } else { 0 };
        let numbers = [
            change.revision,
            change.create_revision,
            change.version,
            change.lease,
            change.lease_ttl,
            change.time_ms,
        ];
        for (i, n) in numbers.iter().enumerate() {
            head[1 + i * 8..9 + i * 8].copy_from_slice(&n.to_be_bytes());
        }
        head[49..53].copy_from_slice(&(change.key.len() as u32).to_be_bytes());
        self.emit(&head);
        self.emit(&change.key);
        self.emit(&(change.value.len() as u32).to_be_bytes());
        self.emit(&change.value);
        self.events += 1;
        self.first.get_or_insert(change.revision);
        self.last = change.revision;
    }

    /// The bytes encoded since the last call (taken, so the buffer stays small).
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Appends the end record and returns the last bytes with what it proves, and the sha256
    /// of the whole plaintext.
    pub fn finish(mut self) -> (Vec<u8>, SegmentEnd, String) {
        let end = SegmentEnd {
            events: self.events,
            first_revision: self.first.unwrap_or(0),
            last_revision: self.last,
        };
        let before_end = self.hash.clone().finalize();
        let mut record = Vec::with_capacity(END_LEN);
        record.push(TAG_END);
        record.extend_from_slice(&end.events.to_be_bytes());
        record.extend_from_slice(&end.first_revision.to_be_bytes());
        record.extend_from_slice(&end.last_revision.to_be_bytes());
        record.extend_from_slice(&before_end);
        self.emit(&record);
        let whole = hex::encode(self.hash.finalize());
        (self.out, end, whole)
    }
}

/// Decodes a segment from pieces of any size. Checks the order of revisions, and at the end
/// that the end record matches what was read.
pub struct RecordDecoder {
    buffer: Vec<u8>,
    /// Bytes consumed from the start of the segment (for messages).
    offset: u64,
    hash: Sha256,
    header_seen: bool,
    events: u64,
    first: Option<i64>,
    last: i64,
    end: Option<SegmentEnd>,
}

impl Default for RecordDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl RecordDecoder {
    pub fn new() -> RecordDecoder {
        RecordDecoder {
            buffer: Vec::new(),
            offset: 0,
            hash: Sha256::new(),
            header_seen: false,
            events: 0,
            first: None,
            last: 0,
            end: None,
        }
    }

    /// Takes the next piece of plaintext and hands every whole event in it to `each`.
    pub fn feed(&mut self, piece: &[u8], each: &mut dyn FnMut(Change)) -> Result<(), RecordError> {
        if self.end.is_some() && !piece.is_empty() {
            return Err(RecordError::TrailingBytes);
        }
        self.buffer.extend_from_slice(piece);
        let mut at = 0;
        loop {
            let rest = &self.buffer[at..];
            if !self.header_seen {
                if rest.len() < MAGIC.len() {
                    break;
                }
                if &rest[..MAGIC.len()] != MAGIC {
                    return Err(RecordError::NoHeader);
                }
                self.hash.update(MAGIC);
                self.header_seen = true;
                at += MAGIC.len();
                continue;
            }
            let Some(&tag) = rest.first() else { break };
            let position = self.offset + at as u64;
            match tag {
                TAG_END => {
                    if rest.len() < END_LEN {
                        break;
                    }
                    let record: [u8; END_LEN] = rest[..END_LEN].try_into().expect("END_LEN bytes");
                    self.end = Some(self.check_end(&record)?);
                    at += END_LEN;
                    if at != self.buffer.len() {
                        return Err(RecordError::TrailingBytes);
                    }
                    break;
                }
                tag if matches!(tag & !LATE, TAG_PUT | TAG_DELETE) => {
                    let Some((change, len)) = parse_event(rest, position)? else {
                        break;
                    };
                    if change.revision < self.last {
                        return Err(RecordError::OutOfOrder {
                            previous: self.last,
                            revision: change.revision,
                        });
                    }
                    self.hash.update(&rest[..len]);
                    self.events += 1;
                    self.first.get_or_insert(change.revision);
                    self.last = change.revision;
                    at += len;
                    each(change);
                }
                other => return Err(RecordError::UnknownTag(other, position)),
            }
        }
        self.buffer.drain(..at);
        self.offset += at as u64;
        Ok(())
    }

    fn check_end(&mut self, record: &[u8]) -> Result<SegmentEnd, RecordError> {
        let number = |i: usize| i64::from_be_bytes(record[i..i + 8].try_into().expect("8 bytes"));
        let recorded = SegmentEnd {
            events: number(1) as u64,
            first_revision: number(9),
            last_revision: number(17),
        };
        let found = SegmentEnd {
            events: self.events,
            first_revision: self.first.unwrap_or(0),
            last_revision: self.last,
        };
        let hash = self.hash.clone().finalize();
        if recorded != found || record[25..] != hash[..] {
            return Err(RecordError::EndMismatch {
                recorded: describe(&recorded, &hex::encode(&record[25..])),
                found: describe(&found, &hex::encode(hash)),
            });
        }
        self.hash.update(record);
        Ok(recorded)
    }

    /// Ends the segment: it must have had its end record. Returns it and the sha256 of the
    /// whole plaintext.
    pub fn finish(self) -> Result<(SegmentEnd, String), RecordError> {
        let end = self.end.ok_or(RecordError::NoEnd)?;
        Ok((end, hex::encode(self.hash.finalize())))
    }
}

fn describe(end: &SegmentEnd, sha256: &str) -> String {
    format!(
        "{} events, revisions {}..={}, sha256 {sha256}",
        end.events, end.first_revision, end.last_revision
    )
}

/// One event record from the start of `bytes`, or `None` when it is not all there yet.
fn parse_event(bytes: &[u8], position: u64) -> Result<Option<(Change, usize)>, RecordError> {
    if bytes.len() < EVENT_HEAD {
        return Ok(None);
    }
    let number = |i: usize| i64::from_be_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
    let length = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
    let key_len = length(49);
    if key_len > MAX_FIELD {
        return Err(RecordError::FieldTooLarge(position, key_len));
    }
    let value_at = EVENT_HEAD + key_len as usize;
    if bytes.len() < value_at + 4 {
        return Ok(None);
    }
    let value_len = length(value_at);
    if value_len > MAX_FIELD {
        return Err(RecordError::FieldTooLarge(position, value_len));
    }
    let len = value_at + 4 + value_len as usize;
    if bytes.len() < len {
        return Ok(None);
    }
    let change = Change {
        kind: if bytes[0] & !LATE == TAG_PUT {
            ChangeKind::Put
        } else {
            ChangeKind::Delete
        },
        late: bytes[0] & LATE != 0,
        revision: number(1),
        create_revision: number(9),
        version: number(17),
        lease: number(25),
        lease_ttl: number(33),
        time_ms: number(41),
        key: bytes[EVENT_HEAD..value_at].to_vec(),
        value: bytes[value_at + 4..len].to_vec(),
    };
    Ok(Some((change, len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(revision: i64, key: &str, value: &str) -> Change {
        Change {
            kind: if value.is_empty() {
                ChangeKind::Delete
            } else {
                ChangeKind::Put
            },
            revision,
            create_revision: 2,
            version: 3,
            lease: if revision % 2 == 0 { 0x1234 } else { 0 },
            lease_ttl: if revision % 2 == 0 { 30 } else { -1 },
            time_ms: 1_700_000_000_000 + revision,
            late: revision == 6,
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
        }
    }

    fn encode(changes: &[Change]) -> (Vec<u8>, SegmentEnd, String) {
        let mut encoder = RecordEncoder::new();
        let mut bytes = Vec::new();
        for c in changes {
            encoder.push(c);
            bytes.extend(encoder.take());
        }
        let (tail, end, sha) = encoder.finish();
        bytes.extend(tail);
        (bytes, end, sha)
    }

    fn decode(
        bytes: &[u8],
        piece: usize,
    ) -> Result<(Vec<Change>, SegmentEnd, String), RecordError> {
        let mut decoder = RecordDecoder::new();
        let mut out = Vec::new();
        for chunk in bytes.chunks(piece) {
            decoder.feed(chunk, &mut |c| out.push(c))?;
        }
        let (end, sha) = decoder.finish()?;
        Ok((out, end, sha))
    }

    fn sample() -> Vec<Change> {
        vec![
            change(5, "/a", "one"),
            change(6, "/b", &"x".repeat(5000)),
            change(6, "/c", "three"),
            change(7, "/a", ""),
        ]
    }

    #[test]
    fn what_is_encoded_decodes_the_same_whatever_the_piece_size() {
        let changes = sample();
        let (bytes, end, sha) = encode(&changes);
        assert_eq!(
            end,
            SegmentEnd {
                events: 4,
                first_revision: 5,
                last_revision: 7
            }
        );
        assert_eq!(sha, hex::encode(Sha256::digest(&bytes)));
        for piece in [1, 7, 53, 4096, bytes.len()] {
            let (decoded, decoded_end, decoded_sha) = decode(&bytes, piece).unwrap();
            assert_eq!(decoded, changes, "piece size {piece}");
            assert_eq!(decoded_end, end);
            assert_eq!(decoded_sha, sha);
        }
    }

    #[test]
    fn a_segment_cut_short_is_refused() {
        let (bytes, _, _) = encode(&sample());
        for cut in [bytes.len() - 1, bytes.len() - END_LEN, 20] {
            assert_eq!(
                decode(&bytes[..cut], 16).unwrap_err(),
                RecordError::NoEnd,
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_changed_byte_fails_the_end_record() {
        let (mut bytes, _, _) = encode(&sample());
        // Inside the first value.
        let at = MAGIC.len() + EVENT_HEAD + 2 + 4 + 1;
        bytes[at] ^= 1;
        assert!(matches!(
            decode(&bytes, 100).unwrap_err(),
            RecordError::EndMismatch { .. }
        ));
    }

    #[test]
    fn a_missing_record_fails_the_end_record() {
        let changes = sample();
        let (bytes, _, _) = encode(&changes);
        let (without_first, _, _) = encode(&changes[1..]);
        // The end record of the whole segment after the records of all but the first.
        let mut spliced = without_first[..without_first.len() - END_LEN].to_vec();
        spliced.extend_from_slice(&bytes[bytes.len() - END_LEN..]);
        assert!(matches!(
            decode(&spliced, 64).unwrap_err(),
            RecordError::EndMismatch { .. }
        ));
    }

    #[test]
    fn other_bytes_are_not_a_segment() {
        assert_eq!(
            decode(b"SQLite format 3\0....", 8).unwrap_err(),
            RecordError::NoHeader
        );
        let (mut bytes, _, _) = encode(&sample());
        bytes.push(0);
        assert_eq!(decode(&bytes, 64).unwrap_err(), RecordError::TrailingBytes);
    }

    #[test]
    fn revisions_going_back_are_refused() {
        let mut changes = sample();
        changes.swap(0, 3);
        let (bytes, _, _) = encode(&changes);
        assert!(matches!(
            decode(&bytes, 64).unwrap_err(),
            RecordError::OutOfOrder { .. }
        ));
    }

    #[test]
    fn an_empty_segment_is_whole() {
        let (bytes, end, _) = encode(&[]);
        assert_eq!(end.events, 0);
        assert!(decode(&bytes, 3).unwrap().0.is_empty());
    }
}
