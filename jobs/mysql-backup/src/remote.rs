//! The receiving side of `serve`: `pull` (to storage) and `clone` (into a new replica's data dir).

use std::path::Path;
use std::time::Duration;

use backup_storage::Store;
use tokio::io::BufReader;
use tokio::net::TcpStream;

use crate::datadir::{self, Staging, State};
use crate::extract::Extraction;
use crate::ingest::{Ingest, IngestOptions};
use crate::manifest::Manifest;
use crate::metadata::BackupMetadata;
use crate::profile::ToolProfile;
use crate::protocol::{self, TAG_DATA, TAG_FAILURE, TAG_SUCCESS};
use crate::restore::{PrepareOptions, prepare_and_install};
use crate::xbstream::StreamSummary;
use crate::{Error, Result};

#[derive(Debug, Clone)]
pub struct RemoteOptions {
    pub connect_timeout: Duration,
    /// Fail when the peer sends nothing for this long (the tool may pause while locking).
    pub stall_timeout: Duration,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            connect_timeout: Duration::from_secs(10),
            stall_timeout: Duration::from_secs(600),
        }
    }
}

/// An authenticated, sealed stream from `serve`.
pub struct RemoteStream {
    socket: BufReader<TcpStream>,
    receiver: protocol::Receiver,
    pub peer: String,
    buf: Vec<u8>,
    stall: Duration,
}

pub enum Next<'a> {
    Data(&'a [u8]),
    /// The source's tool exited 0 and its stream was complete.
    Success,
}

impl RemoteStream {
    pub async fn connect(
        addr: &str,
        token: &[u8],
        options: &RemoteOptions,
    ) -> Result<RemoteStream> {
        let peer_err = |detail: String| Error::Peer {
            peer: addr.to_string(),
            detail,
        };
        let socket = tokio::time::timeout(options.connect_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| peer_err("connection timed out".into()))?
            .map_err(|e| peer_err(format!("cannot connect: {e}")))?;
        let _ = socket.set_nodelay(true);
        // Reads of whole sealed messages, not a syscall per length prefix.
        let mut socket = BufReader::with_capacity(1 << 20, socket);
        let handshake = async {
            let mut receiver = protocol::connect(&mut socket, token).await?;
            let answer = receiver.answer(&mut socket).await?;
            Ok::<_, protocol::ChannelError>((receiver, answer))
        };
        let (receiver, answer) = tokio::time::timeout(options.connect_timeout, handshake)
            .await
            .map_err(|_| {
                peer_err("no handshake in time (is this a mysql-backup serve port?)".into())
            })?
            .map_err(|e| match e {
                protocol::ChannelError::Handshake => Error::AuthRejected { peer: addr.into() },
                other => peer_err(other.to_string()),
            })?;
        match answer.as_str() {
            "OK" => {}
            "BUSY" => return Err(Error::Busy { peer: addr.into() }),
            other => return Err(peer_err(format!("unexpected answer {other:?}"))),
        }
        tracing::info!(peer = addr, "receiving backup");
        Ok(RemoteStream {
            socket,
            receiver,
            peer: addr.to_string(),
            buf: Vec::new(),
            stall: options.stall_timeout,
        })
    }

    pub async fn next(&mut self) -> Result<Next<'_>> {
        let peer_err = |detail: String| Error::Peer {
            peer: self.peer.clone(),
            detail,
        };
        let (tag, _) = tokio::time::timeout(
            self.stall,
            self.receiver.frame(&mut self.socket, &mut self.buf),
        )
        .await
        .map_err(|_| peer_err(format!("sent nothing for {:?}", self.stall)))?
        .map_err(|e| match e {
            protocol::ChannelError::Io(e) => peer_err(format!("connection lost mid-stream ({e})")),
            other => peer_err(other.to_string()),
        })?;
        match tag {
            TAG_DATA => Ok(Next::Data(&self.buf)),
            TAG_SUCCESS => Ok(Next::Success),
            TAG_FAILURE => Err(Error::RemoteFailure(
                String::from_utf8_lossy(&self.buf).into_owned(),
            )),
            _ => unreachable!("frame() checks tags"),
        }
    }
}

/// `pull`: stores the stream; commits only after the success frame and a clean parse.
pub async fn pull(
    addr: &str,
    token: &[u8],
    remote: &RemoteOptions,
    profile: &ToolProfile,
    store: &Store,
    key: &str,
    options: &IngestOptions,
) -> Result<Manifest> {
    let mut stream = RemoteStream::connect(addr, token, remote).await?;
    let mut ingest = Ingest::start(store, key, options).await?;
    let received: Result<()> = async {
        loop {
            match stream.next().await? {
                Next::Data(data) => ingest.write(data).await?,
                Next::Success => return Ok(()),
            }
        }
    }
    .await;
    if let Err(e) = received {
        ingest.abort().await;
        return Err(e);
    }
    let finished = ingest.finish().await?;
    finished
        .commit(store, key, profile.family, &format!("serve {addr}"))
        .await
}

pub enum CloneOutcome {
    /// The data dir was already initialised; nothing was touched.
    Skipped,
    Cloned(StreamSummary),
}

/// `clone`: receives into staging, checks, prepares and installs; skips an initialised data dir.
pub async fn clone(
    addr: &str,
    token: &[u8],
    remote: &RemoteOptions,
    profile: &ToolProfile,
    datadir: &Path,
    options: &PrepareOptions,
) -> Result<CloneOutcome> {
    if datadir::state(datadir)? == State::Initialised {
        tracing::info!("{} is already initialised; not cloning", datadir.display());
        return Ok(CloneOutcome::Skipped);
    }
    let mut stream = RemoteStream::connect(addr, token, remote).await?;
    let staging = Staging::begin(datadir)?;
    let received = async {
        let mut extraction = Extraction::start(profile, &staging.dir, options.parallel)?;
        let streamed: Result<()> = async {
            loop {
                match stream.next().await? {
                    Next::Data(data) => extraction.write(data).await?,
                    Next::Success => return Ok(()),
                }
            }
        }
        .await;
        if let Err(e) = streamed {
            extraction.abort().await;
            return Err(e);
        }
        extraction.finish().await
    }
    .await;
    let summary = match received {
        Ok(s) => s,
        Err(e) => {
            staging.discard();
            return Err(e);
        }
    };
    let metadata = BackupMetadata::from_files(&summary.metadata);
    prepare_and_install(profile, staging, options, &metadata).await?;
    Ok(CloneOutcome::Cloned(summary))
}
