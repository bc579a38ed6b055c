//! `backup`: runs the tool beside the server and stores its stream.

use tokio::io::AsyncReadExt;

use crate::chain::{self, Base, FullBecause, IncrementalRequest, SourceDataDir, Taken};
use crate::credentials::DbConnection;
use crate::ingest::{Destination, Ingest, Origin};
use crate::lineage;
use crate::manifest::Manifest;
use crate::profile::{BackupToolOptions, ToolProfile};
use crate::tool::Tool;
use crate::{Error, Result};

/// Read size from the tool's stdout; the tool writes 10 MiB chunks, in pieces.
pub(crate) const READ_BUFFER: usize = 1 << 20;

/// A running backup tool with its credentials file (removed when this is dropped).
pub struct BackupProcess {
    pub tool: Tool,
    pub stdout: tokio::process::ChildStdout,
    profile: ToolProfile,
    _defaults: crate::credentials::DefaultsFile,
    _target_dir: tempfile::TempDir,
}

impl BackupProcess {
    pub fn start(
        profile: &ToolProfile,
        db: &DbConnection,
        options: &BackupToolOptions,
    ) -> Result<BackupProcess> {
        let defaults = db.defaults_file()?;
        // The tools keep a few small files in --target-dir even when streaming.
        let target_dir = tempfile::Builder::new()
            .prefix("mysql-backup-target-")
            .tempdir()
            .map_err(|e| Error::io(std::env::temp_dir(), e))?;
        let args = profile.backup_args(defaults.path(), target_dir.path(), options);
        let mut tool = Tool::spawn(&profile.backup_tool, &args, false, profile.package())?;
        let stdout = tool.stdout();
        Ok(BackupProcess {
            tool,
            stdout,
            profile: profile.clone(),
            _defaults: defaults,
            _target_dir: target_dir,
        })
    }

    /// Waits for the exit; a non-zero exit becomes a classified error.
    pub async fn wait_success(&mut self) -> Result<()> {
        let (status, tail) = self.tool.wait().await?;
        if status.success() {
            Ok(())
        } else {
            Err(self
                .profile
                .classify_failure(&self.tool.name, &status.to_string(), &tail))
        }
    }
}

/// The data dir's lineage and backup ends, when the data dir is known and its lineage file can
/// be read or written (a backup without one is still good, it only cannot be built on).
pub fn source_data_dir(tool_options: &BackupToolOptions) -> Option<SourceDataDir> {
    let datadir = tool_options.datadir.as_ref()?;
    match lineage::read(datadir) {
        Ok((lineage, backup_ends)) => Some(SourceDataDir {
            lineage,
            backup_ends,
        }),
        Err(e) => {
            tracing::warn!("no data dir lineage (this backup cannot be built on): {e}");
            None
        }
    }
}

/// Records in the data dir that a backup of it ended at `to_lsn` (an incremental may start
/// there); a failure only means the next backup cannot build on this one.
pub fn record_backup_end(
    tool_options: &BackupToolOptions,
    here: Option<&SourceDataDir>,
    to_lsn: Option<u64>,
) {
    let (Some(datadir), Some(here), Some(lsn)) = (&tool_options.datadir, here, to_lsn) else {
        return;
    };
    if let Err(e) = lineage::record_end(datadir, &here.lineage, lsn) {
        tracing::warn!("could not record the backup's end LSN (the next backup will be full): {e}");
    }
}

/// What the source takes for `request`, and the tool options that take it.
pub fn take(
    tool_options: &BackupToolOptions,
    request: Option<&IncrementalRequest>,
    here: Option<&SourceDataDir>,
) -> (BackupToolOptions, Taken) {
    let taken = chain::decide_at_source(request, here);
    let mut options = tool_options.clone();
    options.incremental_lsn = match &taken {
        Taken::Incremental { from_lsn } => Some(*from_lsn),
        Taken::Full(_) => None,
    };
    (options, taken)
}

/// A backup beside the server: full, or (`choice`, when an incremental was asked for) an
/// incremental on the client's chosen base when this data dir is the base's. Returns the
/// manifest, and why a full backup was taken when an incremental was asked for.
pub async fn backup_choosing(
    profile: &ToolProfile,
    db: &DbConnection,
    tool_options: &BackupToolOptions,
    to: Destination<'_>,
    choice: Option<std::result::Result<Base, FullBecause>>,
) -> Result<(Manifest, Option<FullBecause>)> {
    let here = source_data_dir(tool_options);
    let (base, mut full_because) = chain::split(choice);
    let request = base.as_ref().map(Base::request);
    let (taking, taken) = take(tool_options, request.as_ref(), here.as_ref());
    let origin = Origin {
        source: "local".into(),
        lineage: here.as_ref().map(|h| h.lineage.clone()),
        base: match taken {
            Taken::Incremental { .. } => base,
            Taken::Full(because) => {
                full_because = full_because.or(because);
                None
            }
        },
    };
    if let Some(because) = &full_because {
        tracing::warn!("taking a full backup, not an incremental: {because}");
    }
    let manifest = match backup(profile, db, &taking, to, &origin).await {
        // Stored nothing: taken again, whole (the newest backup then continues the GTIDs).
        Err(Error::NotContinuing(detail)) => {
            tracing::warn!("taking a full backup after all: {detail}");
            full_because = Some(FullBecause::GtidsDoNotContinue { detail });
            let (full, _) = take(tool_options, None, here.as_ref());
            let origin = Origin {
                base: None,
                ..origin
            };
            backup(profile, db, &full, to, &origin).await?
        }
        done => done?,
    };
    record_backup_end(tool_options, here.as_ref(), manifest.backup.to_lsn);
    Ok((manifest, full_because))
}

/// Backs up to `key`; commits only when the tool exited 0 and the stream parsed to its end (and
/// is what `origin` says was taken).
pub async fn backup(
    profile: &ToolProfile,
    db: &DbConnection,
    tool_options: &BackupToolOptions,
    to: Destination<'_>,
    origin: &Origin,
) -> Result<Manifest> {
    let mut process = BackupProcess::start(profile, db, tool_options)?;
    let mut ingest = Ingest::start(to.store, to.key, to.options).await?;
    let mut buf = vec![0u8; READ_BUFFER];
    let streamed: Result<()> = async {
        loop {
            let n = process
                .stdout
                .read(&mut buf)
                .await
                .map_err(|e| Error::io(&profile.backup_tool, e))?;
            if n == 0 {
                return Ok(());
            }
            ingest.write(&buf[..n]).await?;
        }
    }
    .await;
    if let Err(e) = streamed {
        process.tool.kill().await;
        ingest.abort().await;
        return Err(e);
    }
    // The exit status first: a killed tool also truncates the stream, and its stderr says why.
    if let Err(e) = process.wait_success().await {
        ingest.abort().await;
        return Err(e);
    }
    let finished = ingest.finish().await?;
    tracing::info!(
        files = finished.summary.files,
        bytes = finished.stored_bytes(),
        "stream complete, committing"
    );
    finished
        .commit(to.store, to.key, profile.family, origin)
        .await
}
