use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// etcd appends the sha256 of the database after the last data chunk.
pub const TRAILER_LEN: usize = 32;

/// bbolt databases are whole pages, so a snapshot with its trailer has `len % 512 == 32`
/// (the same test `etcdutl snapshot restore` applies).
const PAGE_ALIGNMENT: u64 = 512;

/// Checks the sha256 trailer of a snapshot while it streams: every byte except the last 32 is
/// hashed, and the last 32 must equal that hash. Holds only the last 32 bytes.
#[derive(Default)]
pub struct TrailerVerifier {
    hasher: Sha256,
    tail: Vec<u8>,
    total: u64,
}

/// A snapshot whose trailer matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// Database bytes, without the trailer.
    pub db_bytes: u64,
    /// The trailer, hex: sha256 of the database.
    pub db_sha256: String,
    /// sha256 of the whole stream, trailer included: the sha256 of an uncompressed object.
    pub stream_sha256: String,
}

impl TrailerVerifier {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes seen so far, trailer included.
    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn update(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        if chunk.len() >= TRAILER_LEN {
            // Everything held back so far, and all but the last 32 bytes of the chunk, is data.
            self.hasher.update(&self.tail);
            let (data, tail) = chunk.split_at(chunk.len() - TRAILER_LEN);
            self.hasher.update(data);
            self.tail.clear();
            self.tail.extend_from_slice(tail);
        } else {
            self.tail.extend_from_slice(chunk);
            let overflow = self.tail.len().saturating_sub(TRAILER_LEN);
            self.hasher.update(&self.tail[..overflow]);
            self.tail.drain(..overflow);
        }
    }

    pub fn finish(self) -> Result<Verified> {
        if self.total % PAGE_ALIGNMENT != TRAILER_LEN as u64 {
            return Err(Error::MissingTrailer { bytes: self.total });
        }
        // One pass gives both hashes: the state before the trailer is the database's hash, and
        // the same state fed the trailer is the whole stream's.
        let actual = hex::encode(self.hasher.clone().finalize());
        let expected = hex::encode(&self.tail);
        if actual != expected {
            return Err(Error::HashMismatch { expected, actual });
        }
        let mut whole = self.hasher;
        whole.update(&self.tail);
        Ok(Verified {
            db_bytes: self.total - TRAILER_LEN as u64,
            db_sha256: actual,
            stream_sha256: hex::encode(whole.finalize()),
        })
    }
}

/// A snapshot as etcd streams it, for tests: `db_len` bytes of database, then their sha256.
#[cfg(test)]
pub(crate) fn test_snapshot(db_len: usize) -> Vec<u8> {
    let mut snap: Vec<u8> = (0..db_len).map(|i| (i * 7 % 251) as u8).collect();
    let trailer = Sha256::digest(&snap);
    snap.extend_from_slice(&trailer);
    snap
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(db_len: usize) -> Vec<u8> {
        test_snapshot(db_len)
    }

    fn verify_in_chunks(bytes: &[u8], chunk: usize) -> Result<Verified> {
        let mut v = TrailerVerifier::new();
        for c in bytes.chunks(chunk) {
            v.update(c);
        }
        v.finish()
    }

    #[test]
    fn accepts_a_good_snapshot_whatever_the_chunking() {
        let snap = snapshot(4096 * 3);
        for chunk in [1, 7, 31, 32, 33, 1000, 32 * 1024, snap.len()] {
            let v = verify_in_chunks(&snap, chunk).unwrap();
            assert_eq!(v.db_bytes, 4096 * 3);
            assert_eq!(v.db_sha256, hex::encode(Sha256::digest(&snap[..4096 * 3])));
            assert_eq!(v.stream_sha256, hex::encode(Sha256::digest(&snap)));
        }
    }

    #[test]
    fn rejects_a_flipped_byte() {
        let mut snap = snapshot(4096);
        snap[100] ^= 1;
        assert!(matches!(
            verify_in_chunks(&snap, 512),
            Err(Error::HashMismatch { .. })
        ));
    }

    #[test]
    fn rejects_a_truncated_snapshot() {
        let snap = snapshot(4096 * 2);
        let cut = &snap[..4096 + TRAILER_LEN];
        assert!(matches!(
            verify_in_chunks(cut, 512),
            Err(Error::HashMismatch { .. })
        ));
        let cut = &snap[..snap.len() - 1];
        assert!(matches!(
            verify_in_chunks(cut, 512),
            Err(Error::MissingTrailer { .. })
        ));
    }

    #[test]
    fn rejects_a_database_without_trailer() {
        let db = vec![0u8; 4096];
        assert!(matches!(
            verify_in_chunks(&db, 100),
            Err(Error::MissingTrailer { .. })
        ));
    }
}
