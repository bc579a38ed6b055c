//! The last stage of reading a backup: etcd's sha256 trailer check and, for `fetch`, the
//! snapshot file's writes, on a blocking thread of their own. The download, the decryption and
//! the decompression stay on the reading task; hashing and writing run beside them, so a fetch
//! of an encrypted backup uses two cores instead of queueing every step on one (and an
//! operator's `verify` hashes off its async runtime).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::{Error, Result, TrailerVerifier, Verified};

/// Pieces queued for the thread: each at most a stored chunk (as the HTTP client or the file
/// read hands it over) or a decoder's piece (256 KiB), so a few MiB between the two stages.
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

/// Why the thread stopped before the end.
enum Stopped {
    /// The read gave up (or the sink was dropped): nothing more was written.
    Abandoned,
    /// A write failed.
    Failed(Error),
}

/// Hands pieces of plaintext to the thread. Dropped before [`PlaintextSink::finish`] (a
/// cancelled read), the thread writes nothing more and stops without checking the trailer.
pub(crate) struct PlaintextSink {
    pieces: Option<mpsc::Sender<Message>>,
    thread: Option<tokio::task::JoinHandle<std::result::Result<Finished, Stopped>>>,
    abandoned: Arc<AtomicBool>,
    /// The output's path, for messages.
    path: PathBuf,
}

impl PlaintextSink {
    /// Starts the thread; `output` is the file to write the plaintext to, and its path.
    pub(crate) fn start(output: Option<(File, PathBuf)>) -> PlaintextSink {
        let (pieces, received) = mpsc::channel(IN_FLIGHT);
        let abandoned = Arc::new(AtomicBool::new(false));
        let path = output.as_ref().map(|(_, p)| p.clone()).unwrap_or_default();
        let thread = {
            let abandoned = abandoned.clone();
            tokio::task::spawn_blocking(move || check_and_write(received, output, &abandoned))
        };
        PlaintextSink {
            pieces: Some(pieces),
            thread: Some(thread),
            abandoned,
            path,
        }
    }

    /// Queues `piece`; waits while the thread is [`IN_FLIGHT`] pieces behind. False when the
    /// thread stopped (a write failed): [`PlaintextSink::finish`] returns why.
    pub(crate) async fn take(&mut self, piece: Bytes) -> bool {
        let pieces = self.pieces.as_ref().expect("open until finish or abandon");
        pieces.send(Message::Piece(piece)).await.is_ok()
    }

    /// Ends the plaintext and waits for the thread: the trailer's verdict and the file.
    pub(crate) async fn finish(mut self) -> Result<Finished> {
        let pieces = self.pieces.take().expect("open until finish or abandon");
        // A thread that already stopped has its error waiting below.
        let _ = pieces.send(Message::End).await;
        match self.join().await {
            Ok(finished) => Ok(finished),
            Err(Stopped::Failed(e)) => Err(e),
            Err(Stopped::Abandoned) => Err(self.io(std::io::Error::other(
                "the snapshot's writer stopped before the end",
            ))),
        }
    }

    /// The read failed: the thread writes nothing more (what it buffered is dropped), and this
    /// returns once it stopped, so the caller can remove the file. Returns the error the
    /// thread stopped with on its own (a failed write), if it did.
    pub(crate) async fn abandon(mut self) -> Option<Error> {
        self.abandoned.store(true, Ordering::Relaxed);
        self.pieces.take();
        match self.join().await {
            Err(Stopped::Failed(e)) => Some(e),
            Ok(_) | Err(Stopped::Abandoned) => None,
        }
    }

    async fn join(&mut self) -> std::result::Result<Finished, Stopped> {
        let thread = self.thread.take().expect("joined once");
        match thread.await {
            Ok(outcome) => outcome,
            Err(e) => match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(_) => Err(Stopped::Failed(self.io(std::io::Error::other(
                    "the snapshot's writer was cancelled: the process is shutting down",
                )))),
            },
        }
    }

    fn io(&self, source: std::io::Error) -> Error {
        Error::Io {
            path: self.path.clone(),
            source,
        }
    }
}

impl Drop for PlaintextSink {
    fn drop(&mut self) {
        // Cancelled (the future was dropped) or done: either way nothing more is to be written.
        self.abandoned.store(true, Ordering::Relaxed);
    }
}

fn check_and_write(
    mut pieces: mpsc::Receiver<Message>,
    output: Option<(File, PathBuf)>,
    abandoned: &AtomicBool,
) -> std::result::Result<Finished, Stopped> {
    let mut verifier = TrailerVerifier::new();
    let (mut out, path) = match output {
        Some((file, path)) => (Some(BufWriter::with_capacity(WRITE_BUFFER, file)), path),
        None => (None, PathBuf::new()),
    };
    let io = |path: &Path, source| {
        Stopped::Failed(Error::Io {
            path: path.to_path_buf(),
            source,
        })
    };
    loop {
        let piece = match pieces.blocking_recv() {
            Some(Message::Piece(piece)) if !abandoned.load(Ordering::Relaxed) => piece,
            Some(Message::End) => break,
            // The read gave up: drop what is buffered instead of writing it.
            Some(Message::Piece(_)) | None => {
                drop(out.map(BufWriter::into_parts));
                return Err(Stopped::Abandoned);
            }
        };
        verifier.update(&piece);
        if let Some(writer) = out.as_mut()
            && let Err(e) = writer.write_all(&piece)
        {
            drop(out.map(BufWriter::into_parts));
            return Err(io(&path, e));
        }
    }
    let verified = verifier.finish().map_err(Stopped::Failed)?;
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

    /// Sends `bytes` in uneven pieces, small and large, as the reader lends them; false once
    /// the thread refused one.
    async fn send(sink: &mut PlaintextSink, bytes: &[u8]) -> bool {
        for piece in bytes.chunks(70_001) {
            if !sink.take(Bytes::copy_from_slice(piece)).await {
                return false;
            }
        }
        true
    }

    /// A sink writing to `out.db` in `dir`; `broken`: the file is opened for reading only, so
    /// every write fails, as on a full or broken disk.
    fn sink_to_file(dir: &tempfile::TempDir, broken: bool) -> (PlaintextSink, PathBuf) {
        let path = dir.path().join("out.db");
        std::fs::write(&path, b"").unwrap();
        let file = match broken {
            true => File::open(&path).unwrap(),
            false => File::create(&path).unwrap(),
        };
        (PlaintextSink::start(Some((file, path.clone()))), path)
    }

    fn is_io_of(err: &Error, path: &Path) -> bool {
        matches!(err, Error::Io { path: p, .. } if p == path)
    }

    #[tokio::test]
    async fn the_thread_checks_the_trailer_and_writes_every_piece_in_order() {
        let snap = snapshot();
        let dir = tempfile::tempdir().unwrap();
        let (mut sink, path) = sink_to_file(&dir, false);
        assert!(send(&mut sink, &snap).await);
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
        assert!(send(&mut sink, &snap).await);
        assert!(sink.finish().await.unwrap().file.is_none());
    }

    #[tokio::test]
    async fn a_wrong_trailer_fails_the_finish() {
        let mut snap = snapshot();
        snap[100] ^= 1;
        let mut sink = PlaintextSink::start(None);
        assert!(send(&mut sink, &snap).await);
        let err = sink.finish().await.err().expect("the hash differs");
        assert!(matches!(err, Error::HashMismatch { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_failed_write_stops_the_thread_and_finish_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let (mut sink, path) = sink_to_file(&dir, true);
        // 18 pieces against 16 in flight: the stopped thread refuses one.
        assert!(!send(&mut sink, &snapshot()).await);
        let err = sink.finish().await.err().expect("the write failed");
        assert!(is_io_of(&err, &path), "{err}");
    }

    #[tokio::test]
    async fn an_abandoned_sink_returns_once_its_thread_stopped_writing() {
        let snap = snapshot();
        let dir = tempfile::tempdir().unwrap();
        let (mut sink, path) = sink_to_file(&dir, false);
        // Ten small pieces: all still in the writer's buffer, none written yet.
        for piece in snap[..10_000].chunks(1_000) {
            assert!(sink.take(Bytes::copy_from_slice(piece)).await);
        }
        assert!(sink.abandon().await.is_none(), "no write failed");
        // The thread is gone, and what it had buffered was dropped, not written.
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);

        // A thread that stopped on a failed write: abandoning it returns that error.
        let (mut sink, path) = sink_to_file(&dir, true);
        assert!(!send(&mut sink, &snap).await);
        let err = sink.abandon().await.expect("the write's error");
        assert!(is_io_of(&err, &path), "{err}");
    }
}
