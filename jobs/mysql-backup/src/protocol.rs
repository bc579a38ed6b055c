//! The `serve` wire protocol over TCP: confidential, integrity-protected and mutually
//! authenticated by the shared token, through the Noise protocol framework (the `snow` crate).
//!
//! 1. A Noise `NNpsk0` handshake (X25519, ChaCha20-Poly1305, SHA-256), the pre-shared key being
//!    the SHA-256 of the token (so the token must be random, e.g. `openssl rand -hex 32`: one
//!    recorded handshake lets an eavesdropper test guesses offline), the prologue naming this
//!    protocol version. Each side learns that the other holds the token: the client's message
//!    is sealed under it, the server's answer too, and the token never crosses the wire. Fresh ephemeral keys give each connection its
//!    own session keys, so nothing recorded from one connection works in another.
//! 2. client: the request `BACKUP` (a full backup) or `BACKUP INCREMENTAL <lineage> <lsn>` (the
//!    pages changed since `lsn`, if the source's data dir has that lineage), the first sealed message. Only the client that made the
//!    handshake can seal it, so a handshake message replayed by someone else starts nothing.
//! 3. server: `OK`, or `BUSY` when a backup is already running.
//! 4. after `OK`, frames: tag byte, u32 big-endian length, payload. `D` carries stream bytes;
//!    the last frame is `S` (success, JSON summary) or `F` (failure, message). A connection that
//!    ends without `S` is a failed backup.
//!
//! On the wire every message is a u16 big-endian length and a Noise message (at most 65535
//! bytes; a frame spans as many as it needs). A byte changed, dropped, reordered or inserted by
//! anyone without the token fails the next message's authentication tag.

use sha2::{Digest, Sha256};
use snow::{HandshakeState, TransportState};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::chain::IncrementalRequest;
use crate::lineage::Lineage;

const PATTERN: &str = "Noise_NNpsk0_25519_ChaChaPoly_SHA256";
const PROLOGUE: &[u8] = b"MYSQL-BACKUP/2";
/// Largest Noise message, and the plaintext that fits in one with its 16-byte tag.
const MAX_MESSAGE: usize = 65535;
const MAX_PLAINTEXT: usize = MAX_MESSAGE - 16;

pub const MAX_FRAME: u32 = 4 << 20;
pub const REQUEST: &str = "BACKUP";

/// What the client asks the source for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Full,
    Incremental(IncrementalRequest),
}

impl Request {
    fn encode(&self) -> String {
        match self {
            Request::Full => REQUEST.into(),
            Request::Incremental(r) => {
                format!("{REQUEST} INCREMENTAL {} {}", r.lineage, r.from_lsn)
            }
        }
    }

    fn decode(plain: &[u8]) -> Option<Request> {
        let text = std::str::from_utf8(plain).ok()?;
        let mut words = text.split(' ');
        if words.next()? != REQUEST {
            return None;
        }
        let request = match (words.next(), words.next(), words.next()) {
            (None, _, _) => Request::Full,
            (Some("INCREMENTAL"), Some(lineage), Some(lsn)) => {
                Request::Incremental(IncrementalRequest {
                    lineage: Lineage::parse(lineage)?,
                    from_lsn: lsn.parse().ok()?,
                })
            }
            _ => return None,
        };
        words.next().is_none().then_some(request)
    }

    pub fn incremental(&self) -> Option<&IncrementalRequest> {
        match self {
            Request::Full => None,
            Request::Incremental(r) => Some(r),
        }
    }
}

pub const TAG_DATA: u8 = b'D';
pub const TAG_SUCCESS: u8 = b'S';
pub const TAG_FAILURE: u8 = b'F';

/// Why a connection failed, so the caller can tell a wrong token from a broken network.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error(
        "the handshake failed: the peer does not hold the same token, or is not a mysql-backup serve port of this version"
    )]
    Handshake,
    #[error("a message failed its authentication check: the stream was altered in transit")]
    Tampered,
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("protocol violation: {0}")]
    Protocol(String),
}

type Result<T> = std::result::Result<T, ChannelError>;

fn noise(token: &[u8], initiator: bool) -> HandshakeState {
    let psk: [u8; 32] = Sha256::digest(token).into();
    let builder = snow::Builder::new(PATTERN.parse().expect("a valid Noise pattern"))
        .prologue(PROLOGUE)
        .expect("prologue is set once")
        .psk(0, &psk)
        .expect("psk 0 is valid for NNpsk0");
    if initiator {
        builder.build_initiator()
    } else {
        builder.build_responder()
    }
    .expect("the default resolver supports the pattern")
}

async fn write_message<W: AsyncWrite + Unpin>(w: &mut W, message: &[u8]) -> Result<()> {
    w.write_all(&(message.len() as u16).to_be_bytes()).await?;
    w.write_all(message).await?;
    Ok(())
}

async fn read_message<R: AsyncRead + Unpin>(r: &mut R, buf: &mut Vec<u8>) -> Result<()> {
    let mut length = [0u8; 2];
    r.read_exact(&mut length).await?;
    buf.resize(u16::from_be_bytes(length) as usize, 0);
    r.read_exact(buf).await?;
    Ok(())
}

/// The client's side of the handshake and request; then it only reads.
pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    token: &[u8],
    request: &Request,
) -> Result<Receiver> {
    let mut handshake = noise(token, true);
    let mut message = vec![0u8; MAX_MESSAGE];
    let n = handshake
        .write_message(&[], &mut message)
        .map_err(|_| ChannelError::Handshake)?;
    write_message(stream, &message[..n]).await?;
    let mut answer = Vec::new();
    // A server without the token cannot answer; one that refuses us closes the connection.
    read_message(stream, &mut answer)
        .await
        .map_err(|e| match e {
            ChannelError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
                ChannelError::Handshake
            }
            other => other,
        })?;
    handshake
        .read_message(&answer, &mut message)
        .map_err(|_| ChannelError::Handshake)?;
    let mut transport = handshake
        .into_transport_mode()
        .map_err(|_| ChannelError::Handshake)?;
    let n = transport
        .write_message(request.encode().as_bytes(), &mut message)
        .map_err(|_| ChannelError::Handshake)?;
    write_message(stream, &message[..n]).await?;
    Ok(Receiver {
        transport,
        message: Vec::new(),
        plain: vec![0u8; MAX_MESSAGE],
    })
}

/// The server's side of the handshake; returns once the client's request arrived sealed.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    token: &[u8],
) -> Result<(Sender, Request)> {
    let (sender, plain) = accept_request(stream, token).await?;
    let Some(request) = Request::decode(&plain) else {
        return Err(ChannelError::Protocol("unknown request".into()));
    };
    Ok((sender, request))
}

/// A serve from before incremental backups: it took exactly `BACKUP` and hung up on anything
/// else (what a new client meets when the StatefulSet's image is older than the CronJob's).
#[cfg(test)]
pub(crate) async fn accept_as_before_incrementals<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    token: &[u8],
) -> Result<Sender> {
    let (sender, plain) = accept_request(stream, token).await?;
    if plain != REQUEST.as_bytes() {
        return Err(ChannelError::Protocol("unknown request".into()));
    }
    Ok(sender)
}

/// The handshake, then the sealed request's bytes.
async fn accept_request<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    token: &[u8],
) -> Result<(Sender, Vec<u8>)> {
    let mut handshake = noise(token, false);
    let mut message = Vec::new();
    let mut plain = vec![0u8; MAX_MESSAGE];
    read_message(stream, &mut message).await?;
    handshake
        .read_message(&message, &mut plain)
        .map_err(|_| ChannelError::Handshake)?;
    let mut answer = vec![0u8; MAX_MESSAGE];
    let n = handshake
        .write_message(&[], &mut answer)
        .map_err(|_| ChannelError::Handshake)?;
    write_message(stream, &answer[..n]).await?;
    let mut transport = handshake
        .into_transport_mode()
        .map_err(|_| ChannelError::Handshake)?;
    read_message(stream, &mut message).await?;
    let n = transport
        .read_message(&message, &mut plain)
        .map_err(|_| ChannelError::Handshake)?;
    Ok((
        Sender {
            transport,
            message: vec![0u8; MAX_MESSAGE],
        },
        plain[..n].to_vec(),
    ))
}

/// Seals what the server sends.
pub struct Sender {
    transport: TransportState,
    message: Vec<u8>,
}

impl Sender {
    async fn seal<W: AsyncWrite + Unpin>(&mut self, w: &mut W, plain: &[u8]) -> Result<()> {
        for piece in plain.chunks(MAX_PLAINTEXT) {
            let n = self
                .transport
                .write_message(piece, &mut self.message)
                .map_err(|e| ChannelError::Protocol(e.to_string()))?;
            write_message(w, &self.message[..n]).await?;
        }
        Ok(())
    }

    /// The answer to the request: `OK` or `BUSY`.
    pub async fn answer<W: AsyncWrite + Unpin>(&mut self, w: &mut W, answer: &str) -> Result<()> {
        self.seal(w, answer.as_bytes()).await
    }

    pub async fn frame<W: AsyncWrite + Unpin>(
        &mut self,
        w: &mut W,
        tag: u8,
        payload: &[u8],
    ) -> Result<()> {
        let mut header = [0u8; 5];
        header[0] = tag;
        header[1..].copy_from_slice(&(payload.len() as u32).to_be_bytes());
        self.seal(w, &header).await?;
        self.seal(w, payload).await
    }
}

/// Opens what the client receives.
pub struct Receiver {
    transport: TransportState,
    message: Vec<u8>,
    plain: Vec<u8>,
}

impl Receiver {
    /// Reads one sealed message; its plaintext is in `self.plain[..n]`.
    async fn open<R: AsyncRead + Unpin>(&mut self, r: &mut R) -> Result<usize> {
        read_message(r, &mut self.message).await?;
        self.transport
            .read_message(&self.message, &mut self.plain)
            .map_err(|_| ChannelError::Tampered)
    }

    pub async fn answer<R: AsyncRead + Unpin>(&mut self, r: &mut R) -> Result<String> {
        let n = self.open(r).await?;
        Ok(String::from_utf8_lossy(&self.plain[..n]).into_owned())
    }

    /// Reads one frame into `buf` (reused, so memory stays at one frame).
    pub async fn frame<R: AsyncRead + Unpin>(
        &mut self,
        r: &mut R,
        buf: &mut Vec<u8>,
    ) -> Result<(u8, usize)> {
        let n = self.open(r).await?;
        let header: [u8; 5] = self.plain[..n]
            .try_into()
            .map_err(|_| ChannelError::Protocol("bad frame header".into()))?;
        let len = u32::from_be_bytes(header[1..].try_into().expect("4 bytes"));
        if len > MAX_FRAME || ![TAG_DATA, TAG_SUCCESS, TAG_FAILURE].contains(&header[0]) {
            return Err(ChannelError::Protocol("bad frame header".into()));
        }
        buf.clear();
        while buf.len() < len as usize {
            let n = self.open(r).await?;
            if buf.len() + n > len as usize {
                return Err(ChannelError::Protocol("frame longer than announced".into()));
            }
            buf.extend_from_slice(&self.plain[..n]);
        }
        Ok((header[0], len as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected pair after the handshake, over an in-memory duplex pipe.
    async fn pair(
        client_token: &[u8],
        server_token: &[u8],
    ) -> (
        Result<(Receiver, tokio::io::DuplexStream)>,
        Result<(Sender, tokio::io::DuplexStream)>,
    ) {
        let (client, server) = pair_asking(client_token, server_token, &Request::Full).await;
        (
            client,
            server.map(|(sender, request, io)| {
                assert_eq!(request, Request::Full);
                (sender, io)
            }),
        )
    }

    async fn pair_asking(
        client_token: &[u8],
        server_token: &[u8],
        request: &Request,
    ) -> (
        Result<(Receiver, tokio::io::DuplexStream)>,
        Result<(Sender, Request, tokio::io::DuplexStream)>,
    ) {
        let (mut client, mut server) = tokio::io::duplex(1 << 20);
        let (client_token, server_token) = (client_token.to_vec(), server_token.to_vec());
        let server = tokio::spawn(async move {
            let (sender, request) = accept(&mut server, &server_token).await?;
            Ok((sender, request, server))
        });
        let client = connect(&mut client, &client_token, request)
            .await
            .map(|r| (r, client));
        (client, server.await.unwrap())
    }

    #[tokio::test]
    async fn frames_roundtrip_sealed_across_message_boundaries() {
        let (client, server) = pair(b"token-0123456789", b"token-0123456789").await;
        let ((mut receiver, mut client), (mut sender, mut server)) =
            (client.unwrap(), server.unwrap());
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let writer = tokio::spawn(async move {
            sender.answer(&mut server, "OK").await.unwrap();
            sender.frame(&mut server, TAG_DATA, &big).await.unwrap();
            sender.frame(&mut server, TAG_SUCCESS, b"{}").await.unwrap();
            big
        });
        assert_eq!(receiver.answer(&mut client).await.unwrap(), "OK");
        let mut buf = Vec::new();
        let (tag, n) = receiver.frame(&mut client, &mut buf).await.unwrap();
        let big = writer.await.unwrap();
        assert_eq!((tag, n), (TAG_DATA, big.len()));
        assert_eq!(buf, big);
        assert_eq!(
            receiver.frame(&mut client, &mut buf).await.unwrap().0,
            TAG_SUCCESS
        );
    }

    #[tokio::test]
    async fn an_incremental_request_arrives_as_sent_and_garbage_is_refused() {
        let request = Request::Incremental(IncrementalRequest {
            lineage: Lineage::parse("0123456789abcdef0123456789abcdef").unwrap(),
            from_lsn: 44848,
        });
        let (client, server) =
            pair_asking(b"token-0123456789", b"token-0123456789", &request).await;
        assert!(client.is_ok());
        assert_eq!(server.unwrap().1, request);
        for garbage in [
            "BACKUP INCREMENTAL",
            "BACKUP INCREMENTAL nothex 5",
            "BACKUP INCREMENTAL 0123456789abcdef0123456789abcdef -1",
            "BACKUP INCREMENTAL 0123456789abcdef0123456789abcdef 5 more",
            "BACKUPS",
        ] {
            assert_eq!(Request::decode(garbage.as_bytes()), None, "{garbage}");
        }
    }

    #[tokio::test]
    async fn different_tokens_fail_the_handshake_on_both_sides() {
        let (client, server) = pair(b"token-0123456789", b"other-0123456789").await;
        assert!(
            matches!(server, Err(ChannelError::Handshake)),
            "{:?}",
            server.err()
        );
        assert!(client.is_err());
    }
}
