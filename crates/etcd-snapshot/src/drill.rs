//! A restore drill: fetch a backup (verified), restore it into a scratch data dir with the etcd
//! of the version its manifest records, start a throw-away single member on loopback, and
//! compare what it serves with what the manifest recorded at backup time (revision, key count,
//! `HashKV`). Only a restore proves that etcd opens the bytes and that the key space is the
//! one that was backed up; the trailer proves only the bytes.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use backup_storage::Store;
use backup_storage::encryption::Identity;

use crate::contents::{self, Contents, HashKv};
use crate::scratch::{Tools, free_port, log_tail};
use crate::{EtcdConnection, Manifest, select_member};

/// How the drill finds and runs etcd.
#[derive(Debug, Clone)]
pub struct DrillOptions {
    /// Directory holding `etcd` and `etcdutl` (3.5 and later) or `etcdctl` (3.4); else `PATH`.
    pub etcd_bin_dir: Option<PathBuf>,
    /// Where the scratch directory is made (default: the system's temporary directory). It
    /// holds the snapshot and the restored data dir, and is removed at the end.
    pub scratch_parent: Option<PathBuf>,
    /// How long the restored member may take to serve.
    pub start_timeout: Duration,
}

impl Default for DrillOptions {
    fn default() -> Self {
        DrillOptions {
            etcd_bin_dir: None,
            scratch_parent: None,
            start_timeout: Duration::from_secs(120),
        }
    }
}

/// Why a drill gave no report: the backup failed its fetch (bad data when
/// [`DrillError::is_integrity`], exit 3), or the drill could not run (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum DrillError {
    #[error(transparent)]
    Fetch(#[from] crate::Error),
    #[error(
        "{url} has no manifest with recorded contents (taken by an older version or another tool): there is nothing to compare a restore with"
    )]
    NothingRecorded { url: String },
    #[error("{0}")]
    Etcd(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The verdict of a drill that ran.
#[derive(Debug, Clone)]
pub struct DrillReport {
    pub url: String,
    /// The etcd version that restored and served it.
    pub etcd_version: String,
    pub recorded: Contents,
    /// The restored member's answers at the recorded revision; `None` when it does not reach
    /// that revision (the snapshot is older, or not this cluster's).
    pub restored: Option<Contents>,
    /// The revision the restored member serves (at least the recorded one).
    pub restored_revision: i64,
    /// What differs; empty when the backup is good.
    pub differences: Vec<String>,
    pub seconds: f64,
}

impl From<crate::scratch::ScratchError> for DrillError {
    fn from(error: crate::scratch::ScratchError) -> Self {
        match error {
            crate::scratch::ScratchError::Etcd(message) => DrillError::Etcd(message),
            crate::scratch::ScratchError::Io { path, source } => DrillError::Io { path, source },
        }
    }
}

impl DrillError {
    /// The backup itself failed verification while it was fetched.
    pub fn is_integrity(&self) -> bool {
        matches!(self, DrillError::Fetch(e) if e.is_integrity())
    }

    /// The identity given cannot decrypt the backup (exit code 4).
    pub fn is_identity_problem(&self) -> bool {
        matches!(self, DrillError::Fetch(e) if e.is_identity_problem())
    }
}

impl DrillReport {
    pub fn passed(&self) -> bool {
        self.differences.is_empty()
    }
}

/// Runs the drill on `key`. A report that did not pass names what differs (exit 3). Fetches
/// with [`crate::fetch`].
pub async fn drill(
    store: &Store,
    key: &str,
    identity: Option<&Identity>,
    options: &DrillOptions,
) -> Result<DrillReport, DrillError> {
    let started = Instant::now();
    let url = store.location(key).to_string();
    let manifest = Manifest::load(store, key).await?;
    let Some((manifest, recorded)) = manifest.and_then(|m| m.contents.clone().map(|c| (m, c)))
    else {
        return Err(DrillError::NothingRecorded { url });
    };
    let tools = Tools::find(options.etcd_bin_dir.as_deref(), &manifest.etcd_version).await?;
    let parent = options
        .scratch_parent
        .clone()
        .unwrap_or_else(std::env::temp_dir);
    let scratch = tempfile::Builder::new()
        .prefix("etcd-drill-")
        .tempdir_in(&parent)
        .map_err(|source| DrillError::Io {
            path: parent.clone(),
            source,
        })?;
    let snapshot = scratch.path().join("snapshot.db");
    crate::fetch(store, key, &snapshot, identity).await?;

    let data_dir = scratch.path().join("data");
    let peer = format!("http://127.0.0.1:{}", free_port()?);
    let client_url = format!("http://127.0.0.1:{}", free_port()?);
    tools.restore(&snapshot, &data_dir, &peer).await?;
    // The restored copy is all it needs from now on.
    let _ = std::fs::remove_file(&snapshot);
    let log = scratch.path().join("etcd.log");
    let mut etcd = tools.start(&data_dir, &peer, &client_url, &log, &[])?;
    let served = serve_and_answer(
        &client_url,
        &recorded,
        options.start_timeout,
        Some(&mut etcd),
    )
    .await;
    let _ = etcd.kill().await;
    let _ = etcd.wait().await;
    let (restored_revision, restored) = match served {
        Ok((revision, answers, _)) => (revision, answers),
        Err(message) => {
            let tail = log_tail(&log);
            return Err(DrillError::Etcd(format!(
                "the restored member did not serve: {message}; its log ends: {tail}"
            )));
        }
    };
    Ok(report(
        url,
        tools.version,
        recorded,
        restored,
        restored_revision,
        started,
    ))
}

/// The drill's last step alone, for a member restored and started by someone else (the
/// operator's drill pod runs the fetch, the restore and etcd in containers of their own):
/// waits until the member at `endpoint` serves, then compares it with `recorded`. `object`
/// names the backup in the report.
pub async fn check_restored(
    object: &str,
    endpoint: &str,
    recorded: &Contents,
    timeout: Duration,
) -> Result<DrillReport, DrillError> {
    let started = Instant::now();
    let served = serve_and_answer(endpoint, recorded, timeout, None).await;
    let (restored_revision, restored, version) = served.map_err(|message| {
        DrillError::Etcd(format!("the restored member did not serve: {message}"))
    })?;
    Ok(report(
        object.to_string(),
        version,
        recorded.clone(),
        restored,
        restored_revision,
        started,
    ))
}

fn report(
    url: String,
    etcd_version: String,
    recorded: Contents,
    restored: Option<Contents>,
    restored_revision: i64,
    started: Instant,
) -> DrillReport {
    let differences = match &restored {
        Some(restored) => contents::compare(&recorded, restored),
        None => vec![format!(
            "the restore serves revision {restored_revision}, below the recorded {}",
            recorded.revision
        )],
    };
    DrillReport {
        url,
        etcd_version,
        recorded,
        restored,
        restored_revision,
        differences,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// Waits until the member at `url` serves, then asks it the recorded questions: its revision,
/// its answers (none below the recorded revision) and its version. `etcd`: the member's
/// process, when it is ours to watch.
async fn serve_and_answer(
    url: &str,
    recorded: &Contents,
    timeout: Duration,
    mut etcd: Option<&mut tokio::process::Child>,
) -> Result<(i64, Option<Contents>, String), String> {
    let deadline = Instant::now() + timeout;
    let mut connection = EtcdConnection::new(vec![url.to_string()]);
    connection.dial_timeout = Duration::from_secs(2);
    let mut member = loop {
        if let Some(Ok(Some(status))) = etcd.as_mut().map(|e| e.try_wait()) {
            return Err(format!("etcd exited ({status})"));
        }
        match select_member(&connection).await {
            Ok(member) => break member,
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("not within {} s: {e}", timeout.as_secs()));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    // A revision the restore never reached cannot be asked about: the snapshot is not the one
    // recorded.
    if member.revision < recorded.revision {
        return Ok((member.revision, None, member.version));
    }
    let hash = if recorded.hash_kv.is_some() {
        HashKv::Take
    } else {
        HashKv::Skip
    };
    let answers = contents::take(&mut member.client, url, recorded.revision, hash)
        .await
        .map_err(|e| e.to_string())?;
    Ok((member.revision, Some(answers), member.version))
}
