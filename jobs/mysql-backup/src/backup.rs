//! `backup`: runs the tool beside the server and stores its stream.

use backup_storage::Store;
use tokio::io::AsyncReadExt;

use crate::credentials::DbConnection;
use crate::ingest::{Ingest, IngestOptions};
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

/// Backs up to `key`; commits only when the tool exited 0 and the stream parsed to its end.
pub async fn backup(
    profile: &ToolProfile,
    db: &DbConnection,
    tool_options: &BackupToolOptions,
    store: &Store,
    key: &str,
    options: &IngestOptions,
) -> Result<Manifest> {
    let mut process = BackupProcess::start(profile, db, tool_options)?;
    let mut ingest = Ingest::start(store, key, options).await?;
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
    finished.commit(store, key, profile.family, "local").await
}
