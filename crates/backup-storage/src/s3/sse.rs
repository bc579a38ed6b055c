//! S3 server-side encryption, passed through for users whose policy demands it: SSE-S3
//! (`AES256`), SSE-KMS (a key ID, or the bucket's default KMS key) and SSE-C (a 256-bit key the
//! caller holds and sends with every request that writes or reads the object). The server
//! holds the plaintext while it handles a request; client-side encryption (age,
//! `crate::encryption`) is what keeps a leaked bucket unreadable.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use md5::{Digest, Md5};

/// Which server-side encryption the requests ask for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ServerSideEncryption {
    /// Whatever the bucket's default encryption is.
    #[default]
    BucketDefault,
    /// SSE-S3: `x-amz-server-side-encryption: AES256`.
    S3Managed,
    /// SSE-KMS: `aws:kms`, with this key ID (else the account's default KMS key for S3).
    Kms { key_id: Option<String> },
    /// SSE-C with this key, on every write and read.
    Customer(CustomerKey),
}

/// A 256-bit SSE-C key, kept base64-encoded with its MD5 as the headers carry them. Debug and
/// messages never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct CustomerKey {
    pub(crate) key_base64: String,
    pub(crate) md5_base64: String,
}

impl fmt::Debug for CustomerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CustomerKey(md5 {})", self.md5_base64)
    }
}

impl CustomerKey {
    /// A key from a file's bytes: exactly 32 raw bytes, or their base64 (surrounding
    /// whitespace ignored), as `openssl rand 32` or `openssl rand -base64 32` write it.
    pub fn from_file_bytes(bytes: &[u8]) -> Result<CustomerKey, String> {
        let raw = if bytes.len() == 32 {
            bytes.to_vec()
        } else {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| "neither 32 raw bytes nor base64 text".to_string())?;
            STANDARD
                .decode(text.trim())
                .map_err(|_| "neither 32 raw bytes nor base64 of 32 bytes".to_string())?
        };
        if raw.len() != 32 {
            return Err(format!(
                "an SSE-C key is 32 bytes (AES-256); this one has {}",
                raw.len()
            ));
        }
        Ok(CustomerKey {
            key_base64: STANDARD.encode(&raw),
            md5_base64: STANDARD.encode(Md5::digest(&raw)),
        })
    }
}

/// Adds the headers of a request that writes an object (PutObject, CreateMultipartUpload).
macro_rules! sse_write {
    ($request:expr, $sse:expr) => {{
        use aws_sdk_s3::types::ServerSideEncryption as Sse;
        use $crate::s3::sse::ServerSideEncryption as Ours;
        let request = $request;
        match $sse {
            Ours::BucketDefault => request,
            Ours::S3Managed => request.server_side_encryption(Sse::Aes256),
            Ours::Kms { key_id } => request
                .server_side_encryption(Sse::AwsKms)
                .set_ssekms_key_id(key_id.clone()),
            Ours::Customer(key) => request
                .sse_customer_algorithm("AES256")
                .sse_customer_key(&key.key_base64)
                .sse_customer_key_md5(&key.md5_base64),
        }
    }};
}

/// Adds the SSE-C headers, which every request on an SSE-C object needs (UploadPart,
/// CompleteMultipartUpload, GetObject, HeadObject); the other modes need none there.
macro_rules! sse_customer {
    ($request:expr, $sse:expr) => {{
        let request = $request;
        match $sse {
            $crate::s3::sse::ServerSideEncryption::Customer(key) => request
                .sse_customer_algorithm("AES256")
                .sse_customer_key(&key.key_base64)
                .sse_customer_key_md5(&key.md5_base64),
            _ => request,
        }
    }};
}

pub(crate) use {sse_customer, sse_write};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_32_bytes_raw_or_base64_and_never_shown() {
        let raw = [7u8; 32];
        let a = CustomerKey::from_file_bytes(&raw).unwrap();
        let b =
            CustomerKey::from_file_bytes(format!("{}\n", STANDARD.encode(raw)).as_bytes()).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.md5_base64, STANDARD.encode(Md5::digest(raw)));
        assert!(!format!("{a:?}").contains(&a.key_base64));
        let short = CustomerKey::from_file_bytes(STANDARD.encode([1u8; 16]).as_bytes());
        assert!(short.unwrap_err().contains("has 16"));
        assert!(CustomerKey::from_file_bytes(b"not a key at all").is_err());
    }
}
