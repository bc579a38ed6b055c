//! The checksum a manifest records of an object's stored bytes, so that `verify` can tell a
//! complete, unaltered object from a damaged one without its content (an encrypted object
//! checked without its identity).
//!
//! Which one is recorded depends on what the bytes cost to hash:
//! - **sha256** where the stored bytes are the plaintext (or its zstd frame): the plaintext's
//!   sha256 is computed anyway for etcd's trailer, and it is what users compare by hand.
//! - **CRC32C** of the whole object for encrypted objects. Their content is authenticated by
//!   age itself (every 64 KiB chunk carries a Poly1305 tag, and the plaintext's sha256 is in
//!   the manifest), so a second cryptographic hash of the ciphertext proves nothing a restore
//!   does not prove anyway; it only has to catch a truncated or damaged object, which a CRC
//!   does for a small fraction of sha256's CPU. Without the identity it is no proof against a
//!   deliberate swap (the recipients are public: another age file can be made to the same size
//!   and CRC); only reading with the identity proves the content, as every restore does.
//!
//! Manifests written before encrypted objects got a CRC32C record their sha256; readers accept
//! both.

use sha2::{Digest, Sha256};

/// Which checksum of the stored bytes a manifest records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecksumKind {
    Sha256,
    Crc32c,
}

impl ChecksumKind {
    /// What new manifests record for an object that is (or is not) encrypted.
    pub fn for_new_object(encrypted: bool) -> ChecksumKind {
        match encrypted {
            true => ChecksumKind::Crc32c,
            false => ChecksumKind::Sha256,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ChecksumKind::Sha256 => "sha256",
            ChecksumKind::Crc32c => "crc32c",
        }
    }
}

/// A checksum of stored bytes, as lowercase hex (a CRC32C as 8 digits, big-endian).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredChecksum {
    pub kind: ChecksumKind,
    pub hex: String,
}

impl StoredChecksum {
    /// The checksum a manifest records in its `storedSha256` and `storedCrc32c` fields: its
    /// sha256 if it has one, else its CRC32C. The error says which rule the manifest breaks (for
    /// a "bad manifest" message): it must record one of them, and a sha256 unless the object is
    /// encrypted, since a CRC32C is enough only where age authenticates the content.
    pub fn from_manifest(
        sha256: Option<&str>,
        crc32c: Option<&str>,
        encrypted: bool,
    ) -> Result<StoredChecksum, &'static str> {
        let (kind, hex) = match (sha256, crc32c) {
            (Some(hex), _) => (ChecksumKind::Sha256, hex),
            (None, Some(_)) if !encrypted => {
                return Err(
                    "it records no storedSha256, which an unencrypted object's manifest must",
                );
            }
            (None, Some(hex)) => (ChecksumKind::Crc32c, hex),
            (None, None) => {
                return Err(
                    "it records no checksum of the stored bytes (storedSha256 or storedCrc32c)",
                );
            }
        };
        Ok(StoredChecksum {
            kind,
            hex: hex.to_string(),
        })
    }

    /// The value for a manifest's `storedSha256` field.
    pub fn sha256(&self) -> Option<String> {
        (self.kind == ChecksumKind::Sha256).then(|| self.hex.clone())
    }

    /// The value for a manifest's `storedCrc32c` field.
    pub fn crc32c(&self) -> Option<String> {
        (self.kind == ChecksumKind::Crc32c).then(|| self.hex.clone())
    }
}

impl std::fmt::Display for StoredChecksum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind.as_str(), self.hex)
    }
}

/// Computes a [`StoredChecksum`] over bytes as they pass.
#[derive(Clone)]
pub enum StoredHasher {
    Sha256(Sha256),
    Crc32c(crc_fast::Digest),
}

impl StoredHasher {
    pub fn new(kind: ChecksumKind) -> StoredHasher {
        match kind {
            ChecksumKind::Sha256 => StoredHasher::Sha256(Sha256::new()),
            ChecksumKind::Crc32c => {
                StoredHasher::Crc32c(crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi))
            }
        }
    }

    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            StoredHasher::Sha256(sha) => sha.update(bytes),
            StoredHasher::Crc32c(crc) => crc.update(bytes),
        }
    }

    pub fn finish(self) -> StoredChecksum {
        match self {
            StoredHasher::Sha256(sha) => StoredChecksum {
                kind: ChecksumKind::Sha256,
                hex: hex::encode(sha.finalize()),
            },
            StoredHasher::Crc32c(crc) => StoredChecksum {
                kind: ChecksumKind::Crc32c,
                hex: format!("{:08x}", crc.finalize() as u32),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checksum(kind: ChecksumKind, pieces: &[&[u8]]) -> StoredChecksum {
        let mut hasher = StoredHasher::new(kind);
        for piece in pieces {
            hasher.update(piece);
        }
        hasher.finish()
    }

    #[test]
    fn crc32c_is_the_published_check_value_in_any_pieces() {
        // CRC-32C (Castagnoli) of "123456789" is e3069283 (RFC 3720, B.4).
        for pieces in [&[&b"123456789"[..]][..], &[b"1234", b"", b"56789"]] {
            let crc = checksum(ChecksumKind::Crc32c, pieces);
            assert_eq!(crc.to_string(), "crc32c e3069283");
            assert_eq!(
                (crc.sha256(), crc.crc32c()),
                (None, Some("e3069283".into()))
            );
        }
    }

    #[test]
    fn sha256_is_the_hex_digest() {
        let sha = checksum(ChecksumKind::Sha256, &[b"ab", b"c"]);
        assert_eq!(
            sha.hex,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(sha.crc32c(), None);
    }

    #[test]
    fn a_manifest_records_its_sha256_or_else_its_crc32c_and_a_crc32c_only_when_encrypted() {
        let recorded = |sha: Option<&str>, crc: Option<&str>, encrypted: bool| {
            StoredChecksum::from_manifest(sha, crc, encrypted).map(|c| c.to_string())
        };
        for encrypted in [false, true] {
            assert_eq!(
                recorded(Some("ab"), None, encrypted),
                Ok("sha256 ab".into())
            );
            assert_eq!(
                recorded(Some("ab"), Some("0a0b0c0d"), encrypted),
                Ok("sha256 ab".into())
            );
            let neither = recorded(None, None, encrypted).unwrap_err();
            assert!(neither.contains("records no checksum"), "{neither}");
        }
        assert_eq!(
            recorded(None, Some("0a0b0c0d"), true),
            Ok("crc32c 0a0b0c0d".into())
        );
        let plain_with_a_crc = recorded(None, Some("0a0b0c0d"), false).unwrap_err();
        assert!(
            plain_with_a_crc.contains("no storedSha256"),
            "{plain_with_a_crc}"
        );
        assert_eq!(
            ChecksumKind::for_new_object(true),
            ChecksumKind::Crc32c,
            "encrypted objects are authenticated by age: a CRC finds damage"
        );
        assert_eq!(ChecksumKind::for_new_object(false), ChecksumKind::Sha256);
    }
}
