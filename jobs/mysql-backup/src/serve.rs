//! `serve`: the sidecar that streams a fresh backup to one authenticated client at a time and
//! ends the stream with an explicit success or failure frame.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::backup::{BackupProcess, READ_BUFFER, record_backup_end, source_data_dir, take};
use crate::chain::{self, Taken};
use crate::credentials::DbConnection;
use crate::metadata::BackupMetadata;
use crate::profile::{BackupToolOptions, ToolProfile};
use crate::protocol::{self, TAG_DATA, TAG_FAILURE, TAG_SUCCESS};
use crate::xbstream::Parser;
use crate::{Error, Result};

const AUTH_TIMEOUT: Duration = Duration::from_secs(10);

/// The success frame's payload.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub files: u64,
    pub stream_bytes: u64,
    /// The source data dir's lineage (absent from sources before incremental backups).
    #[serde(default)]
    pub lineage: Option<String>,
    /// Set when the source took an incremental from this LSN.
    #[serde(default)]
    pub incremental_from_lsn: Option<u64>,
    /// Why an incremental asked for was taken as a full backup.
    #[serde(default)]
    pub full_because: Option<String>,
}

pub struct ServeConfig {
    pub profile: ToolProfile,
    pub db: DbConnection,
    pub tool_options: BackupToolOptions,
    pub token: Vec<u8>,
}

pub async fn serve(listener: TcpListener, config: Arc<ServeConfig>) -> Result<()> {
    let busy = Arc::new(Semaphore::new(1));
    tracing::info!(addr = ?listener.local_addr().ok(), "serving backups");
    loop {
        let (socket, peer) = listener
            .accept()
            .await
            .map_err(|e| Error::io("accept", e))?;
        let config = config.clone();
        let busy = busy.clone();
        tokio::spawn(async move {
            match handle(socket, &config, &busy).await {
                Ok(()) => tracing::info!(%peer, "backup sent"),
                Err(e) => tracing::warn!(%peer, "{e}"),
            }
        });
    }
}

async fn handle(mut socket: TcpStream, config: &ServeConfig, busy: &Arc<Semaphore>) -> Result<()> {
    let _ = socket.set_nodelay(true);
    let io = |e: std::io::Error| Error::io("client connection", e);
    // Nothing is sent before the client proved, in a sealed request, that it holds the token.
    let (mut sender, request) =
        tokio::time::timeout(AUTH_TIMEOUT, protocol::accept(&mut socket, &config.token))
            .await
            .map_err(|_| Error::Config("client did not authenticate in time".into()))?
            .map_err(|e| Error::Config(format!("client failed authentication: {e}")))?;
    let write = &mut socket;
    let Ok(_permit) = busy.clone().try_acquire_owned() else {
        let _ = sender.answer(write, "BUSY").await;
        return Err(Error::Config(
            "refused a second client: a backup is already running".into(),
        ));
    };
    sender.answer(write, "OK").await.map_err(channel)?;
    let verdict = stream_backup(config, request.incremental(), &mut sender, write).await;
    match verdict {
        Ok(summary) => {
            sender
                .frame(write, TAG_SUCCESS, summary.as_bytes())
                .await
                .map_err(channel)?;
            write.shutdown().await.map_err(io)?;
            Ok(())
        }
        Err(StreamEnd::ClientGone(e)) => Err(Error::Peer {
            peer: "client".into(),
            detail: format!("went away mid-stream ({e}); backup stopped"),
        }),
        Err(StreamEnd::Failed(e)) => {
            // Best effort: the client treats a missing success frame as failure anyway.
            let _ = sender
                .frame(write, TAG_FAILURE, e.to_string().as_bytes())
                .await;
            let _ = write.shutdown().await;
            Err(e)
        }
    }
}

enum StreamEnd {
    ClientGone(Error),
    Failed(Error),
}

fn channel(e: protocol::ChannelError) -> Error {
    Error::Peer {
        peer: "client".into(),
        detail: e.to_string(),
    }
}

/// Streams one backup, incremental when asked for and this data dir is the base's; checks it
/// as `backup` does before declaring success. The success frame's summary says what was taken
/// and the data dir's lineage (the client records both in the manifest).
async fn stream_backup(
    config: &ServeConfig,
    incremental: Option<&chain::IncrementalRequest>,
    sender: &mut protocol::Sender,
    write: &mut TcpStream,
) -> std::result::Result<String, StreamEnd> {
    let here = source_data_dir(&config.tool_options);
    let (tool_options, taken) = take(&config.tool_options, incremental, here.as_ref());
    if let Taken::Full(Some(because)) = &taken {
        tracing::warn!("taking a full backup, not the incremental asked for: {because}");
    }
    let mut process = BackupProcess::start(&config.profile, &config.db, &tool_options)
        .map_err(StreamEnd::Failed)?;
    let mut parser = Parser::new();
    let mut buf = vec![0u8; READ_BUFFER];
    loop {
        let n = match process.stdout.read(&mut buf).await {
            Ok(n) => n,
            Err(e) => return Err(StreamEnd::Failed(Error::io(&config.profile.backup_tool, e))),
        };
        if n == 0 {
            break;
        }
        if let Err(e) = parser.feed(&buf[..n]) {
            process.tool.kill().await;
            return Err(StreamEnd::Failed(e.into()));
        }
        if let Err(e) = sender.frame(write, TAG_DATA, &buf[..n]).await {
            process.tool.kill().await;
            return Err(StreamEnd::ClientGone(channel(e)));
        }
    }
    process.wait_success().await.map_err(StreamEnd::Failed)?;
    let summary = parser.finish().map_err(|e| StreamEnd::Failed(e.into()))?;
    let missing = BackupMetadata::missing_final_files(&summary.metadata);
    if !missing.is_empty() {
        return Err(StreamEnd::Failed(Error::Incomplete(format!(
            "the tool's final files {} are missing",
            missing.join(", ")
        ))));
    }
    let metadata = BackupMetadata::from_files(&summary.metadata);
    chain::check_stream(&taken, &metadata).map_err(|e| StreamEnd::Failed(Error::Incremental(e)))?;
    // Recorded before the client commits: an end recorded for a backup that is then not
    // stored is harmless (no chain names it).
    record_backup_end(&config.tool_options, here.as_ref(), metadata.to_lsn);
    Ok(serde_json::to_string(&Summary {
        files: summary.files,
        stream_bytes: summary.stream_bytes,
        lineage: here.map(|h| h.lineage.to_string()),
        incremental_from_lsn: match taken {
            Taken::Incremental { from_lsn } => Some(from_lsn),
            Taken::Full(_) => None,
        },
        full_because: match taken {
            Taken::Full(Some(because)) => Some(because.to_string()),
            _ => None,
        },
    })
    .expect("a summary serializes"))
}
