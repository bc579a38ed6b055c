//! The `serve` wire protocol over TCP.
//!
//! 1. server: `MYSQL-BACKUP/1 <nonce hex>\n`
//! 2. client: `BACKUP <hex HMAC-SHA256(token, nonce)>\n` (the token never crosses the wire)
//! 3. server: `OK\n`, `BUSY\n` or `ERR <reason>\n`
//! 4. after `OK`, frames: tag byte, u32 big-endian length, payload. `D` carries stream bytes;
//!    the last frame is `S` (success, JSON summary) or `F` (failure, message). A connection that
//!    ends without `S` is a failed backup.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

pub const GREETING: &str = "MYSQL-BACKUP/1";
pub const MAX_FRAME: u32 = 4 << 20;
/// Longest control line accepted (greeting, auth, answer).
const MAX_LINE: u64 = 1024;

pub const TAG_DATA: u8 = b'D';
pub const TAG_SUCCESS: u8 = b'S';
pub const TAG_FAILURE: u8 = b'F';

pub fn auth_proof(token: &[u8], nonce: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(token).expect("HMAC takes any key length");
    mac.update(nonce.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// Constant-time check of a client's proof.
pub fn verify_proof(token: &[u8], nonce: &str, proof_hex: &str) -> bool {
    let Ok(proof) = hex::decode(proof_hex.trim()) else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(token).expect("HMAC takes any key length");
    mac.update(nonce.as_bytes());
    mac.verify_slice(&proof).is_ok()
}

pub async fn read_line<R: AsyncRead + Unpin>(reader: &mut BufReader<R>) -> std::io::Result<String> {
    let mut line = String::new();
    let n = (&mut *reader).take(MAX_LINE).read_line(&mut line).await?;
    if n == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    if !line.ends_with('\n') {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "control line too long",
        ));
    }
    Ok(line.trim_end().to_string())
}

pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    tag: u8,
    payload: &[u8],
) -> std::io::Result<()> {
    let mut header = [0u8; 5];
    header[0] = tag;
    header[1..].copy_from_slice(&(payload.len() as u32).to_be_bytes());
    w.write_all(&header).await?;
    w.write_all(payload).await
}

/// Reads one frame into `buf` (reused, so memory stays at one frame).
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> std::io::Result<(u8, usize)> {
    let mut header = [0u8; 5];
    r.read_exact(&mut header).await?;
    let len = u32::from_be_bytes(header[1..].try_into().unwrap());
    if len > MAX_FRAME || ![TAG_DATA, TAG_SUCCESS, TAG_FAILURE].contains(&header[0]) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "bad frame header",
        ));
    }
    buf.resize(len as usize, 0);
    r.read_exact(&mut buf[..]).await?;
    Ok((header[0], len as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_token_and_nonce() {
        let p = auth_proof(b"secret", "abc");
        assert!(verify_proof(b"secret", "abc", &p));
        assert!(!verify_proof(b"secret", "abd", &p));
        assert!(!verify_proof(b"other", "abc", &p));
        assert!(!verify_proof(b"secret", "abc", "zz"));
    }

    #[tokio::test]
    async fn frames_roundtrip_and_garbage_is_refused() {
        let mut wire = Vec::new();
        write_frame(&mut wire, TAG_DATA, b"hello").await.unwrap();
        write_frame(&mut wire, TAG_SUCCESS, b"{}").await.unwrap();
        let mut r = wire.as_slice();
        let mut buf = Vec::new();
        assert_eq!(read_frame(&mut r, &mut buf).await.unwrap(), (TAG_DATA, 5));
        assert_eq!(buf, b"hello");
        assert_eq!(read_frame(&mut r, &mut buf).await.unwrap().0, TAG_SUCCESS);
        assert!(read_frame(&mut r, &mut buf).await.is_err(), "EOF");
        let mut bad: &[u8] = b"X\0\0\0\x01a";
        assert!(read_frame(&mut bad, &mut buf).await.is_err());
    }
}
