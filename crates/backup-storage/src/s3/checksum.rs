//! What the server stored is checked, not assumed.
//!
//! Every part (and a single-request object) is sent with its CRC32C (`x-amz-checksum-crc32c`),
//! which the server recomputes and refuses on mismatch, and which it keeps for the object. A
//! server that checks it echoes the value back; once one has, and the connection is TLS, the
//! payloads are sent `UNSIGNED-PAYLOAD`: SigV4's payload sha256 would be a second full hash
//! pass over the data (our own sha256 of the stream is the first) for integrity that TLS and
//! the CRC already give. Over plain HTTP a CRC is no defence against someone on the path, so
//! the payloads stay signed there, as they do for a server that does not echo the CRC.
//!
//! After the commit, the object's composite checksum (the CRC32C of the parts' CRC32Cs, "-N")
//! and its size must be those of what was sent: a server that assembled other parts, or
//! fewer, is caught before anything is reported good.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use aws_smithy_types::base64;

/// The base64 of a CRC32C, as S3 writes it.
pub(super) fn encode(crc: u32) -> String {
    base64::encode(crc.to_be_bytes())
}

pub(super) fn crc32c(data: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(data)
}

/// The composite checksum S3 reports for a multipart object whose parts, in part order, had
/// the CRC32Cs `parts`.
pub(super) fn composite(parts: &[u32]) -> String {
    let concatenated: Vec<u8> = parts.iter().flat_map(|c| c.to_be_bytes()).collect();
    format!("{}-{}", encode(crc32c(&concatenated)), parts.len())
}

/// The CRC32C in a part's `ChecksumCRC32C`, if it is one.
pub(super) fn decode(value: &str) -> Option<u32> {
    let bytes: [u8; 4] = base64::decode(value).ok()?.try_into().ok()?;
    Some(u32::from_be_bytes(bytes))
}

/// Whether this endpoint has shown that it verifies the checksums it is sent, shared by all
/// uploads of one store.
#[derive(Clone, Default)]
pub(super) struct ServerChecks(Arc<AtomicBool>);

impl ServerChecks {
    pub(super) fn confirmed(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Records the server's answer to a request that carried `sent`; an answer with another
    /// value is an error of the caller's to raise.
    pub(super) fn saw_echo(&self, sent: &str, echoed: Option<&str>) {
        if echoed == Some(sent) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_published_check_value() {
        // The CRC-32C check value of "123456789" (RFC 3720, B.4).
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(decode(&encode(0xE306_9283)), Some(0xE306_9283));
        assert_eq!(decode("not base64"), None);
    }

    #[test]
    fn composite_is_the_crc_of_the_part_crcs_and_their_count() {
        let parts = [crc32c(b"first part"), crc32c(b"second part")];
        let mut joined = parts[0].to_be_bytes().to_vec();
        joined.extend(parts[1].to_be_bytes());
        assert_eq!(composite(&parts), format!("{}-2", encode(crc32c(&joined))));
        assert_ne!(composite(&parts), composite(&[parts[1], parts[0]]));
    }

    #[test]
    fn only_an_echo_of_the_value_sent_confirms_the_server() {
        let checks = ServerChecks::default();
        checks.saw_echo("AAAAAA==", None);
        checks.saw_echo("AAAAAA==", Some("AAAAAQ=="));
        assert!(!checks.confirmed());
        checks.saw_echo("AAAAAA==", Some("AAAAAA=="));
        assert!(checks.confirmed());
    }
}
