//! The last stage of reading a backup: etcd's sha256 trailer check and, for `fetch`, the
//! snapshot file's writes, on a blocking thread of their own. The download, the decryption and
//! the decompression stay on the reading task; hashing and writing run beside them, so a fetch
//! of an encrypted backup uses two cores instead of queueing every step on one (and an
//! operator's `verify` hashes off its async runtime).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::{Error, Result, TrailerVerifier, Verified};

/// Pieces queued for the thread. A piece is at most a stored chunk or a decoder's piece
/// (256 KiB), so this bounds the memory between the two stages to a few MiB.
const IN_FLIGHT: usize = 16;

/// Small pieces are gathered into writes of this size; age's (its 64 KiB chunks) and the
/// decoder's (up to 256 KiB) go straight to the file without another copy.
const WRITE_BUFFER: usize = 64 * 1024;

enum Message {
    Piece(Bytes),
    /// Every piece was sent: the plaintext is complete.
    End,
}

/// What the thread found once the plaintext ended.
pub(crate) struct Finished {
    pub verified: Verified,
    /// The file written, flushed but not yet synced, for `fetch` to sync and rename.
    pub file: Option<File>,
}

/// Hands pieces of plaintext to the thread. Dropped before [`PlaintextSink::finish`] (the read
/// failed), the thread stops without checking the trailer.
pub(crate) struct PlaintextSink {
    pieces: mpsc::Sender<Message>,
    thread: tokio::task::JoinHandle<Result<Finished>>,
}

impl PlaintextSink {
    /// Starts the thread; `output` is the file to write the plaintext to, and its path for
    /// messages.
    pub(crate) fn start(output: Option<(File, PathBuf)>) -> PlaintextSink {
        let (pieces, received) = mpsc::channel(IN_FLIGHT);
        let thread = tokio::task::spawn_blocking(move || check_and_write(received, output));
        PlaintextSink { pieces, thread }
    }

    /// Queues `piece`; waits while the thread is [`IN_FLIGHT`] pieces behind. False when the
    /// thread stopped (a write failed): [`PlaintextSink::finish`] returns why.
    pub(crate) async fn take(&mut self, piece: Bytes) -> bool {
        self.pieces.send(Message::Piece(piece)).await.is_ok()
    }

    /// Ends the plaintext and waits for the thread: the trailer's verdict and the file.
    pub(crate) async fn finish(self) -> Result<Finished> {
        // A thread that already stopped has its error waiting below.
        let _ = self.pieces.send(Message::End).await;
        match self.thread.await {
            Ok(result) => result,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

fn check_and_write(
    mut pieces: mpsc::Receiver<Message>,
    output: Option<(File, PathBuf)>,
) -> Result<Finished> {
    let mut verifier = TrailerVerifier::new();
    let (mut out, path) = match output {
        Some((file, path)) => (Some(BufWriter::with_capacity(WRITE_BUFFER, file)), path),
        None => (None, PathBuf::new()),
    };
    let io = |path: &Path, source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    loop {
        match pieces.blocking_recv() {
            Some(Message::Piece(piece)) => {
                verifier.update(&piece);
                if let Some(out) = out.as_mut() {
                    out.write_all(&piece).map_err(|e| io(&path, e))?;
                }
            }
            Some(Message::End) => break,
            None => {
                return Err(io(
                    &path,
                    std::io::Error::other("the read stopped before the end of the snapshot"),
                ));
            }
        }
    }
    let verified = verifier.finish()?;
    let file = match out {
        Some(out) => Some(out.into_inner().map_err(|e| io(&path, e.into_error()))?),
        None => None,
    };
    Ok(Finished { verified, file })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    /// Whole pages of database, then their sha256: 18 pieces of 70,001 bytes.
    fn snapshot() -> Vec<u8> {
        crate::trailer::test_snapshot(4096 * 300)
    }

    async fn send(sink: &mut PlaintextSink, bytes: &[u8]) {
        // Uneven pieces, small and large, as the reader lends them.
        for piece in bytes.chunks(70_001) {
            assert!(sink.take(Bytes::copy_from_slice(piece)).await);
        }
    }

    #[tokio::test]
    async fn the_thread_checks_the_trailer_and_writes_every_piece_in_order() {
        let snap = snapshot();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.db");
        let file = File::create(&path).unwrap();
        let mut sink = PlaintextSink::start(Some((file, path.clone())));
        send(&mut sink, &snap).await;
        let finished = sink.finish().await.unwrap();
        assert_eq!(finished.verified.db_bytes, snap.len() as u64 - 32);
        assert_eq!(
            finished.verified.stream_sha256,
            hex::encode(Sha256::digest(&snap))
        );
        drop(finished.file.expect("the file comes back"));
        assert_eq!(std::fs::read(&path).unwrap(), snap);

        // Without a file, only the check.
        let mut sink = PlaintextSink::start(None);
        send(&mut sink, &snap).await;
        assert!(sink.finish().await.unwrap().file.is_none());
    }

    #[tokio::test]
    async fn a_wrong_trailer_fails_the_finish() {
        let mut snap = snapshot();
        snap[100] ^= 1;
        let mut sink = PlaintextSink::start(None);
        send(&mut sink, &snap).await;
        let err = sink.finish().await.err().expect("the hash differs");
        assert!(matches!(err, Error::HashMismatch { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_failed_write_stops_the_thread_and_finish_says_why() {
        let snap = snapshot();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.db");
        std::fs::write(&path, b"").unwrap();
        // Opened for reading only: the first write fails, as on a full or broken disk.
        let file = File::open(&path).unwrap();
        let mut sink = PlaintextSink::start(Some((file, path.clone())));
        let mut refused = false;
        for piece in snap.chunks(70_001) {
            if !sink.take(Bytes::copy_from_slice(piece)).await {
                refused = true;
                break;
            }
        }
        let err = sink.finish().await.err().expect("the write failed");
        assert!(
            matches!(&err, Error::Io { path: p, .. } if *p == path),
            "{err}"
        );
        // 18 pieces against 16 in flight: the stopped thread refused one.
        assert!(refused);
    }
}
