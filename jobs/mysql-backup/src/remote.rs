//! The receiving side of `serve`: `pull` (to storage) and `clone` (into a new replica's data dir).

use std::path::Path;
use std::time::Duration;

use tokio::io::BufReader;
use tokio::net::TcpStream;

#[cfg(test)]
use crate::chain::IncrementalRequest;
use crate::chain::{self, Base, FullBecause};
use crate::datadir::{self, Staging, State};
use crate::extract::Extraction;
use crate::ingest::{Destination, Ingest, Origin};
use crate::lineage::Lineage;
use crate::manifest::Manifest;
use crate::metadata::BackupMetadata;
use crate::profile::ToolProfile;
use crate::protocol::{self, Request, TAG_DATA, TAG_FAILURE, TAG_SUCCESS};
use crate::restore::{PrepareOptions, prepare_and_install};
use crate::serve::Summary;
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
    /// The source's tool exited 0 and its stream was complete; its summary (JSON).
    Success(&'a [u8]),
}

impl RemoteStream {
    pub async fn connect(
        addr: &str,
        token: &[u8],
        options: &RemoteOptions,
        request: &Request,
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
            let mut receiver = protocol::connect(&mut socket, token, request).await?;
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
                // The handshake held, the request was sealed, and the peer hung up without an
                // answer: an older serve that knows only `BACKUP`.
                protocol::ChannelError::Io(io)
                    if io.kind() == std::io::ErrorKind::UnexpectedEof
                        && !matches!(request, Request::Full) =>
                {
                    Error::RequestRefused { peer: addr.into() }
                }
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
            TAG_SUCCESS => Ok(Next::Success(&self.buf)),
            TAG_FAILURE => Err(Error::RemoteFailure(
                String::from_utf8_lossy(&self.buf).into_owned(),
            )),
            _ => unreachable!("frame() checks tags"),
        }
    }
}

/// `pull`: stores the stream; commits only after the success frame and a clean parse. With
/// `choice` (an incremental asked for), the source is asked for an incremental on the chosen
/// base; it takes a full backup when its data dir is not the base's. Returns the manifest and
/// why a full backup was taken when an incremental was asked for.
pub async fn pull(
    addr: &str,
    token: &[u8],
    remote: &RemoteOptions,
    profile: &ToolProfile,
    to: Destination<'_>,
    choice: Option<std::result::Result<Base, FullBecause>>,
) -> Result<(Manifest, Option<String>)> {
    let (base, client_because) = chain::split(choice);
    let client_because = client_because.map(|b| b.to_string());
    let pulled = pull_once(addr, token, remote, profile, to, base).await;
    match pulled {
        // Stored nothing: pulled again, whole (the newest backup then continues the GTIDs).
        Err(Error::NotContinuing(detail)) => {
            tracing::warn!("pulling a full backup after all: {detail}");
            let (manifest, _) = pull_once(addr, token, remote, profile, to, None).await?;
            Ok((manifest, Some(detail)))
        }
        Ok((manifest, None)) => Ok((manifest, client_because)),
        done => done,
    }
}

/// One `pull`: an incremental on `base` when given and the source takes it. Returns why a full
/// backup was taken when an incremental was asked for.
async fn pull_once(
    addr: &str,
    token: &[u8],
    remote: &RemoteOptions,
    profile: &ToolProfile,
    to: Destination<'_>,
    base: Option<Base>,
) -> Result<(Manifest, Option<String>)> {
    let request = match &base {
        Some(b) => Request::Incremental(b.request()),
        None => Request::Full,
    };
    let (mut stream, refused) = match RemoteStream::connect(addr, token, remote, &request).await {
        Err(Error::RequestRefused { .. }) => {
            let stream = RemoteStream::connect(addr, token, remote, &Request::Full).await?;
            (stream, true)
        }
        connected => (connected?, false),
    };
    let mut ingest = Ingest::start(to.store, to.key, to.options).await?;
    let received: Result<Summary> = async {
        loop {
            match stream.next().await? {
                Next::Data(data) => ingest.write(data).await?,
                Next::Success(summary) => {
                    return serde_json::from_slice(summary).map_err(|e| Error::Peer {
                        peer: addr.to_string(),
                        detail: format!("unreadable success summary: {e}"),
                    });
                }
            }
        }
    }
    .await;
    let summary = match received {
        Ok(summary) => summary,
        Err(e) => {
            ingest.abort().await;
            return Err(e);
        }
    };
    let origin = Origin {
        source: format!("serve {addr}"),
        // Checked against the base's before an incremental is committed.
        lineage: summary.lineage.as_deref().and_then(Lineage::parse),
        // What the source says it took; the commit checks the stream says the same.
        base: match summary.incremental_from_lsn {
            Some(from) if base.as_ref().is_some_and(|b| b.to_lsn == from) => base,
            Some(from) => {
                ingest.abort().await;
                return Err(Error::Peer {
                    peer: addr.to_string(),
                    detail: format!("sent an incremental from LSN {from}, which was not asked for"),
                });
            }
            None => None,
        },
    };
    let full_because = match (&request, &origin.base) {
        _ if refused => Some(format!(
            "{addr} hung up on the incremental request without an answer (a mysql-backup serve older than this client?)"
        )),
        (Request::Incremental(_), None) => Some(
            summary
                .full_because
                .unwrap_or_else(|| format!("{addr} did not say why it took a full backup")),
        ),
        _ => None,
    };
    if let Some(because) = &full_because {
        tracing::warn!("took a full backup, not an incremental: {because}");
    }
    let finished = ingest.finish().await?;
    let manifest = finished
        .commit(to.store, to.key, profile.family, &origin)
        .await?;
    Ok((manifest, full_because))
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
    let mut stream = RemoteStream::connect(addr, token, remote, &Request::Full).await?;
    let staging = Staging::begin(datadir)?;
    let received = async {
        let mut extraction = Extraction::start(profile, &staging.dir, options.parallel)?;
        let streamed: Result<()> = async {
            loop {
                match stream.next().await? {
                    Next::Data(data) => extraction.write(data).await?,
                    Next::Success(_) => return Ok(()),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A serve from before incremental backups hangs up on the incremental request: the client
    /// tells that apart (and `pull` then asks it for a full backup), while a full request is
    /// answered.
    #[tokio::test]
    async fn an_older_serve_refusing_the_incremental_request_is_told_apart() {
        let token = b"token-0123456789".to_vec();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server_token = token.clone();
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                if let Ok(mut sender) =
                    protocol::accept_as_before_incrementals(&mut socket, &server_token).await
                {
                    sender.answer(&mut socket, "OK").await.unwrap();
                }
            }
        });
        let incremental = Request::Incremental(IncrementalRequest {
            lineage: Lineage::new_random(),
            from_lsn: 5,
        });
        let options = RemoteOptions::default();
        let refused = RemoteStream::connect(&addr, &token, &options, &incremental).await;
        assert!(
            matches!(refused, Err(Error::RequestRefused { .. })),
            "{:?}",
            refused.err()
        );
        assert!(
            RemoteStream::connect(&addr, &token, &options, &Request::Full)
                .await
                .is_ok()
        );
    }
}
