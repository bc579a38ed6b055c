//! A snapshot file at a chosen revision or time, from a snapshot and the archived changes
//! after it: the snapshot is restored into a throw-away member on loopback, the changes are
//! applied one revision per transaction (so the member's revision must equal the archived
//! one after each, which proves nothing was missed or added), then the member is
//! snapshotted. Stock `etcdutl snapshot restore` restores the file.
//!
//! The member runs with `--unsafe-no-fsync` (it is thrown away; the file is written from its
//! database at the end and checked by etcd's own trailer) and with room for one revision of
//! any size (a range delete is one revision of many events).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use backup_storage::Store;
use backup_storage::encryption::Identity;
use chrono::{DateTime, Utc};
use etcd_client::{Client, LeaseGrantOptions, PutOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::task::JoinSet;

use super::plan::{self, Reach, SnapshotAt, Target, Unreachable};
use super::reader::SegmentReader;
use super::record::{Change, ChangeKind};
use super::segment::{SegmentManifest, archive_prefix, parse_segment_key};
use super::writer::time_of;
use crate::contents::{self, Contents, HashKv};
use crate::naming::parse_scheduled;
use crate::scratch::{Tools, free_port, log_tail, minor};
use crate::{DrillOptions, EtcdConnection, Manifest, TrailerVerifier, select_member};

/// TTL given to a lease the archive could not ask about (it had expired when asked).
pub const UNKNOWN_LEASE_TTL: i64 = 60;
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(1);
/// The flags of the member changes are replayed into (here or in a restore pod's sidecar).
pub const REPLAY_MEMBER_FLAGS: &[&str] = &[
    "--unsafe-no-fsync",
    "--max-txn-ops",
    "10000000",
    "--max-request-bytes",
    "268435456",
    "--quota-backend-bytes",
    "8589934592",
];

#[derive(Debug, Clone, Default)]
pub struct PointInTimeOptions {
    /// Where etcd is found, where the scratch directory goes, how long it may take to start.
    pub scratch: DrillOptions,
    /// Only snapshots and changes of this cluster (after a restore, a base holds the archives
    /// of the old and the new cluster, whose revision numbers may meet).
    pub cluster_id: Option<String>,
}

#[derive(Debug, Clone)]
pub struct PointInTimeReport {
    /// The revision the file holds.
    pub revision: i64,
    /// When the archive saw that revision's change (none: the snapshot's own revision).
    pub revision_time: Option<DateTime<Utc>>,
    pub snapshot: String,
    pub snapshot_revision: i64,
    pub cluster_id: String,
    pub segments: Vec<String>,
    pub revisions_applied: u64,
    pub events_applied: u64,
    pub leases_granted: u64,
    /// Leases granted [`UNKNOWN_LEASE_TTL`] because their TTL was not known.
    pub leases_defaulted: u64,
    /// What the file serves at `revision` (key count, HashKV, the key space's sha256).
    pub contents: Contents,
    pub etcd_version: String,
    pub db_bytes: u64,
    pub db_sha256: String,
    pub seconds: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum PointInTimeError {
    #[error(transparent)]
    Unreachable(#[from] Unreachable),
    #[error(transparent)]
    Read(#[from] crate::Error),
    #[error(transparent)]
    Scratch(#[from] crate::scratch::ScratchError),
    #[error(
        "the segment {key} has no manifest yet (the archiver stopped between storing it and its manifest; it writes it when it starts again)"
    )]
    NoSegmentManifest { key: String },
    #[error(
        "replaying revision {expected} left the member at revision {found}: the archive does not reproduce the cluster's history ({detail})"
    )]
    Diverged {
        expected: i64,
        found: i64,
        detail: String,
    },
    #[error(
        "the snapshot {snapshot} holds revision {holds}, past the point {target} (writes went on while it was taken), and no older snapshot reaches the point"
    )]
    SnapshotBeyond {
        snapshot: String,
        holds: i64,
        target: i64,
    },
    #[error(
        "the snapshot {snapshot} was taken by etcd {taken}, a newer minor version than the etcd {scratch} that would replay it (etcd never goes back a minor version)"
    )]
    NewerMinor {
        snapshot: String,
        taken: String,
        scratch: String,
    },
    #[error("the scratch member: {0}")]
    Etcd(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl PointInTimeError {
    /// The stored data is at fault (exit code 3).
    pub fn is_integrity(&self) -> bool {
        match self {
            PointInTimeError::Read(e) => e.is_integrity(),
            PointInTimeError::Diverged { .. } => true,
            _ => false,
        }
    }

    pub fn is_identity_problem(&self) -> bool {
        match self {
            PointInTimeError::Read(e) => e.is_identity_problem(),
            _ => false,
        }
    }
}

fn etcd_error(what: &str) -> impl Fn(etcd_client::Error) -> PointInTimeError + '_ {
    move |e| PointInTimeError::Etcd(format!("{what}: {e}"))
}

/// Writes to `out` a snapshot of `base`'s backups at `target`. `out` appears only when
/// complete and checked; nothing else is left behind.
pub async fn restore_to_point(
    store: &Store,
    base: &str,
    target: Target,
    identity: Option<&Identity>,
    out: &Path,
    options: &PointInTimeOptions,
) -> Result<PointInTimeReport, PointInTimeError> {
    let started = Instant::now();
    let snapshots = snapshots_of(store, base, options.cluster_id.as_deref()).await?;
    let candidates = plan::snapshots_before(&snapshots, target)?;
    let keys = segment_keys(store, base).await?;
    let last = candidates.len() - 1;
    for (i, snapshot) in candidates.iter().enumerate() {
        // The newest snapshot first; an older one only when it holds more than recorded.
        match from_snapshot(
            store, &snapshots, &keys, snapshot, target, identity, out, options,
        )
        .await
        {
            Err(PointInTimeError::SnapshotBeyond {
                snapshot, holds, ..
            }) if i < last => {
                tracing::info!(%snapshot, holds, "the snapshot holds changes past the point; starting from an older one");
            }
            Err(e) => return Err(e),
            Ok(mut report) => {
                report.seconds = started.elapsed().as_secs_f64();
                return Ok(report);
            }
        }
    }
    unreachable!("the last candidate returns")
}

/// Which segments, read up to where, take `snapshot` to `target`.
async fn segments_to_replay(
    store: &Store,
    snapshots: &[SnapshotAt],
    keys: &[super::segment::SegmentKey],
    snapshot: &SnapshotAt,
    target: Target,
) -> Result<(Vec<(String, SegmentManifest)>, Reach), PointInTimeError> {
    let mut manifests = Vec::new();
    for key in plan::segments_after(keys, snapshot, target) {
        match SegmentManifest::load(store, &key.key).await? {
            Some(manifest) => manifests.push((key.key.clone(), manifest)),
            None => {
                return Err(PointInTimeError::NoSegmentManifest {
                    key: key.key.clone(),
                });
            }
        }
    }
    let only: Vec<SegmentManifest> = manifests.iter().map(|(_, m)| m.clone()).collect();
    let next_snapshot = snapshots
        .iter()
        .filter(|s| s.cluster_id == snapshot.cluster_id && s.revision > snapshot.revision)
        .min_by_key(|s| s.revision);
    let reach = plan::reach(snapshot, &only, next_snapshot, target)?;
    manifests.truncate(reach.segments);
    Ok((manifests, reach))
}

/// The point from `snapshot` and the segments after it.
#[allow(clippy::too_many_arguments)]
async fn from_snapshot(
    store: &Store,
    snapshots: &[SnapshotAt],
    keys: &[super::segment::SegmentKey],
    snapshot: &SnapshotAt,
    target: Target,
    identity: Option<&Identity>,
    out: &Path,
    options: &PointInTimeOptions,
) -> Result<PointInTimeReport, PointInTimeError> {
    let (manifests, reach) = segments_to_replay(store, snapshots, keys, snapshot, target).await?;
    tracing::info!(snapshot = %snapshot.key, revision = reach.revision, segments = manifests.len(), "restoring to a point");

    let recorded = Manifest::load(store, &snapshot.key)
        .await?
        .ok_or_else(|| PointInTimeError::Etcd(format!("{} lost its manifest", snapshot.key)))?;
    let parent = options
        .scratch
        .scratch_parent
        .clone()
        .unwrap_or_else(std::env::temp_dir);
    let scratch = tempfile::Builder::new()
        .prefix("etcd-point-in-time-")
        .tempdir_in(&parent)
        .map_err(io(&parent))?;
    let snapshot_file = scratch.path().join("snapshot.db");
    // First: a wrong or missing identity is said before anything else is looked for.
    crate::fetch(store, &snapshot.key, &snapshot_file, identity).await?;
    let tools = Tools::find(
        options.scratch.etcd_bin_dir.as_deref(),
        &recorded.etcd_version,
    )
    .await?;
    let data_dir = scratch.path().join("data");
    let peer = format!("http://127.0.0.1:{}", free_port()?);
    let client_url = format!("http://127.0.0.1:{}", free_port()?);
    tools.restore(&snapshot_file, &data_dir, &peer).await?;
    let _ = std::fs::remove_file(&snapshot_file);
    let log = scratch.path().join("etcd.log");
    let mut flags = REPLAY_MEMBER_FLAGS.to_vec();
    if tools.version.starts_with("3.4") {
        // 3.4 has no --unsafe-no-fsync (slower, same result).
        flags.retain(|f| *f != "--unsafe-no-fsync");
    }
    let mut etcd = tools.start(&data_dir, &peer, &client_url, &log, &flags)?;
    let prepared = PreparedPoint {
        target,
        snapshot: snapshot.clone(),
        segments: manifests,
        reach,
        etcd_version: recorded.etcd_version,
    };
    let replayed = replay(
        store,
        &client_url,
        &prepared,
        identity,
        options.scratch.start_timeout,
        Some(&mut etcd),
        out,
    )
    .await;
    let _ = etcd.kill().await;
    let _ = etcd.wait().await;
    match replayed {
        Err(PointInTimeError::Etcd(message)) => Err(PointInTimeError::Etcd(format!(
            "{message}; its log ends: {}",
            log_tail(&log)
        ))),
        replayed => replayed,
    }
}

/// The first half of a restore to a point whose scratch member runs apart from this process
/// (a restore pod's sidecar, from the cluster's etcd image): which snapshot and segments
/// reach the point, decided once, with the snapshot fetched and verified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreparedPoint {
    pub target: Target,
    pub snapshot: SnapshotAt,
    /// The segments to replay, in order, with the manifests they are checked against.
    pub segments: Vec<(String, SegmentManifest)>,
    pub reach: Reach,
    /// The etcd version the snapshot was taken with.
    pub etcd_version: String,
}

/// Decides how `base`'s backups reach `target` (from the newest snapshot at or before it)
/// and fetches that snapshot into `snapshot_file` (verified while it streams). Refuses a
/// snapshot taken by a newer etcd minor than `scratch_version`, the etcd that will replay it
/// (etcd never goes back a minor version).
pub async fn prepare_point(
    store: &Store,
    base: &str,
    target: Target,
    identity: Option<&Identity>,
    cluster_id: Option<&str>,
    scratch_version: &str,
    snapshot_file: &Path,
) -> Result<PreparedPoint, PointInTimeError> {
    let snapshots = snapshots_of(store, base, cluster_id).await?;
    let candidates = plan::snapshots_before(&snapshots, target)?;
    let snapshot = candidates[0];
    let keys = segment_keys(store, base).await?;
    let (segments, reach) = segments_to_replay(store, &snapshots, &keys, snapshot, target).await?;
    let recorded = Manifest::load(store, &snapshot.key)
        .await?
        .ok_or_else(|| PointInTimeError::Etcd(format!("{} lost its manifest", snapshot.key)))?;
    if minor(&recorded.etcd_version) > minor(scratch_version) {
        return Err(PointInTimeError::NewerMinor {
            snapshot: snapshot.key.clone(),
            taken: recorded.etcd_version,
            scratch: scratch_version.to_string(),
        });
    }
    crate::fetch(store, &snapshot.key, snapshot_file, identity).await?;
    tracing::info!(snapshot = %snapshot.key, revision = reach.revision, segments = segments.len(), "prepared a restore to a point");
    Ok(PreparedPoint {
        target,
        snapshot: snapshot.clone(),
        segments,
        reach,
        etcd_version: recorded.etcd_version,
    })
}

/// The second half: replays `prepared`'s segments into the scratch member serving at
/// `client_url` (restored from the prepared snapshot, nothing else written to it) and writes
/// its snapshot at the point to `out` (complete and checked, or not at all).
pub async fn replay_point(
    store: &Store,
    prepared: &PreparedPoint,
    identity: Option<&Identity>,
    client_url: &str,
    start_timeout: Duration,
    out: &Path,
) -> Result<PointInTimeReport, PointInTimeError> {
    let started = Instant::now();
    let mut report = replay(
        store,
        client_url,
        prepared,
        identity,
        start_timeout,
        None,
        out,
    )
    .await?;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PointInTimeError + use<> {
    let path = path.to_path_buf();
    move |source| PointInTimeError::Io { path, source }
}

async fn segment_keys(
    store: &Store,
    base: &str,
) -> Result<Vec<super::segment::SegmentKey>, PointInTimeError> {
    Ok(store
        .list(&archive_prefix(base))
        .await
        .map_err(crate::Error::from)?
        .iter()
        .filter_map(|o| parse_segment_key(base, &o.key))
        .collect())
}

/// Every scheduled snapshot of `base` with a readable manifest (of `cluster_id` if given).
async fn snapshots_of(
    store: &Store,
    base: &str,
    cluster_id: Option<&str>,
) -> Result<Vec<SnapshotAt>, PointInTimeError> {
    let listed = store.list(base).await.map_err(crate::Error::from)?;
    let mut snapshots = Vec::new();
    for scheduled in listed.iter().filter_map(|o| parse_scheduled(base, &o.key)) {
        match Manifest::load(store, &scheduled.key).await {
            Ok(Some(m)) if cluster_id.is_none_or(|c| c == m.cluster_id) => {
                snapshots.push(SnapshotAt {
                    key: scheduled.key,
                    revision: m.etcd_revision,
                    cluster_id: m.cluster_id,
                    taken: m.start_time,
                });
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(key = %scheduled.key, error = %e, "skipped a snapshot whose manifest cannot be read");
            }
        }
    }
    Ok(snapshots)
}

/// `etcd`: the scratch member's process when this process started it (its exit is noticed
/// while waiting for it to serve).
async fn replay(
    store: &Store,
    client_url: &str,
    prepared: &PreparedPoint,
    identity: Option<&Identity>,
    start_timeout: Duration,
    etcd: Option<&mut tokio::process::Child>,
    out: &Path,
) -> Result<PointInTimeReport, PointInTimeError> {
    let PreparedPoint {
        target,
        snapshot,
        segments: manifests,
        reach,
        ..
    } = prepared;
    let target = *target;
    let mut client = serving(client_url, start_timeout, etcd).await?;
    let etcd_version = client
        .status()
        .await
        .map_err(etcd_error("asking its version"))?
        .version()
        .to_string();
    let restored = revision_of(&mut client).await?;
    let limit = match reach.until_time {
        None => Some(reach.revision),
        Some(_) => None,
    };
    if limit.is_some_and(|r| restored > r) {
        return Err(PointInTimeError::SnapshotBeyond {
            snapshot: snapshot.key.clone(),
            holds: restored,
            target: reach.revision,
        });
    }
    let mut leases = ScratchLeases::start(&mut client).await?;
    let mut replay = Replay {
        at: restored,
        at_time: None,
        time_limit: match target {
            Target::Time(t) => Some(t),
            Target::Revision(_) => None,
        },
        revisions: 0,
        events: 0,
    };
    let last = manifests.len().saturating_sub(1);
    for (i, (key, manifest)) in manifests.iter().enumerate() {
        let until_time = if i == last { reach.until_time } else { None };
        replay
            .segment(
                store,
                key,
                manifest,
                identity,
                limit,
                until_time,
                &mut client,
                &mut leases,
            )
            .await
            .map_err(|e| match e {
                PointInTimeError::SnapshotBeyond { holds, target, .. } => {
                    PointInTimeError::SnapshotBeyond {
                        snapshot: snapshot.key.clone(),
                        holds,
                        target,
                    }
                }
                e => e,
            })?;
    }
    let revision = replay.at;
    if limit.is_some_and(|r| r != revision) {
        return Err(PointInTimeError::Diverged {
            expected: reach.revision,
            found: revision,
            detail: "the archive ended before the point".into(),
        });
    }
    // The leases stay alive until the file is written: one expiring meanwhile would delete
    // keys in a revision the archive never had.
    let contents = contents::take(&mut client, client_url, revision, HashKv::Take).await?;
    let (db_bytes, db_sha256) = write_snapshot(&mut client, out).await?;
    leases.stop();
    let after = revision_of(&mut client).await?;
    if after != revision {
        let _ = std::fs::remove_file(out);
        return Err(PointInTimeError::Diverged {
            expected: revision,
            found: after,
            detail: "the scratch member changed while its snapshot was written".into(),
        });
    }
    Ok(PointInTimeReport {
        revision,
        revision_time: replay.at_time,
        snapshot: snapshot.key.clone(),
        snapshot_revision: snapshot.revision,
        cluster_id: snapshot.cluster_id.clone(),
        segments: manifests.iter().map(|(k, _)| k.clone()).collect(),
        revisions_applied: replay.revisions,
        events_applied: replay.events,
        leases_granted: leases.granted,
        leases_defaulted: leases.defaulted,
        contents,
        etcd_version,
        db_bytes,
        db_sha256,
        seconds: 0.0,
    })
}

/// Waits until the scratch member serves.
async fn serving(
    url: &str,
    timeout: Duration,
    mut etcd: Option<&mut tokio::process::Child>,
) -> Result<Client, PointInTimeError> {
    let deadline = Instant::now() + timeout;
    let mut connection = EtcdConnection::new(vec![url.to_string()]);
    connection.dial_timeout = Duration::from_secs(2);
    loop {
        if let Some(Ok(Some(status))) = etcd.as_mut().map(|e| e.try_wait()) {
            return Err(PointInTimeError::Etcd(format!("etcd exited ({status})")));
        }
        match select_member(&connection).await {
            Ok(member) => return Ok(member.client),
            Err(e) if Instant::now() >= deadline => {
                return Err(PointInTimeError::Etcd(format!(
                    "did not serve within {} s: {e}",
                    timeout.as_secs()
                )));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn revision_of(client: &mut Client) -> Result<i64, PointInTimeError> {
    let answer = client
        .status()
        .await
        .map_err(etcd_error("asking its revision"))?;
    Ok(answer.header().map_or(0, |h| h.revision()))
}

/// Where the replay is.
struct Replay {
    at: i64,
    at_time: Option<DateTime<Utc>>,
    /// The point, when it is a time.
    time_limit: Option<DateTime<Utc>>,
    revisions: u64,
    events: u64,
}

impl Replay {
    /// Applies one segment's revisions after `at` up to the limit, and reads it to its end
    /// either way: its end record and manifest are checked before the file is written.
    #[allow(clippy::too_many_arguments)]
    async fn segment(
        &mut self,
        store: &Store,
        key: &str,
        manifest: &SegmentManifest,
        identity: Option<&Identity>,
        limit: Option<i64>,
        until_time: Option<DateTime<Utc>>,
        client: &mut Client,
        leases: &mut ScratchLeases,
    ) -> Result<(), PointInTimeError> {
        let mut reader = SegmentReader::open(store, key, Some(manifest.clone()), identity).await?;
        let mut group: Vec<Change> = Vec::new();
        let mut done = false;
        while let Some(change) = reader.next().await? {
            if change.revision <= self.at {
                // Held by the snapshot already; one seen after the time means the snapshot
                // holds more than the point.
                if until_time
                    .or(self.time_limit)
                    .is_some_and(|t| time_of(change.time_ms) > t && !change.late)
                {
                    return Err(PointInTimeError::SnapshotBeyond {
                        snapshot: String::new(),
                        holds: self.at,
                        target: change.revision - 1,
                    });
                }
                continue;
            }
            if done {
                continue;
            }
            if group.first().is_some_and(|g| g.revision != change.revision) {
                self.apply(&group, client, leases).await?;
                group.clear();
            }
            let past_limit = limit.is_some_and(|r| change.revision > r);
            let past_time = until_time.is_some_and(|t| time_of(change.time_ms) > t);
            if past_time && change.late {
                // Read after the time, but maybe committed before it.
                return Err(Unreachable::TimeUnknown {
                    from: change.revision,
                    to: manifest.late_through_revision.unwrap_or(change.revision),
                }
                .into());
            }
            if past_limit || past_time {
                done = true;
                continue;
            }
            group.push(change);
        }
        if !group.is_empty() {
            self.apply(&group, client, leases).await?;
        }
        Ok(())
    }

    /// One archived revision, as one transaction.
    async fn apply(
        &mut self,
        group: &[Change],
        client: &mut Client,
        leases: &mut ScratchLeases,
    ) -> Result<(), PointInTimeError> {
        let revision = group[0].revision;
        let mut ops = Vec::with_capacity(group.len());
        for change in group {
            ops.push(match change.kind {
                ChangeKind::Put => {
                    let mut options = PutOptions::new();
                    if change.lease != 0 {
                        leases
                            .ensure(client, change.lease, change.lease_ttl)
                            .await?;
                        options = options.with_lease(change.lease);
                    }
                    TxnOp::put(change.key.clone(), change.value.clone(), Some(options))
                }
                ChangeKind::Delete => TxnOp::delete(change.key.clone(), None),
            });
        }
        // An error here is the scratch member's (gone, restarted, a limit), not the archive's.
        let answer = client
            .txn(Txn::new().and_then(ops))
            .await
            .map_err(|e| PointInTimeError::Etcd(format!("applying revision {revision}: {e}")))?;
        let found = answer.header().map_or(0, |h| h.revision());
        if found != revision {
            return Err(PointInTimeError::Diverged {
                expected: revision,
                found,
                detail: format!("{} events applied as one transaction", group.len()),
            });
        }
        self.at = revision;
        self.at_time = Some(time_of(group[0].time_ms));
        self.revisions += 1;
        self.events += group.len() as u64;
        Ok(())
    }
}

/// The leases of the scratch member: those the snapshot held and those granted on the way,
/// each kept alive while the replay runs (a lease the cluster kept alive must not expire in
/// the scratch member and delete keys in a revision the archive never had).
struct ScratchLeases {
    known: HashSet<i64>,
    keepers: JoinSet<()>,
    granted: u64,
    defaulted: u64,
}

impl ScratchLeases {
    async fn start(client: &mut Client) -> Result<ScratchLeases, PointInTimeError> {
        let mut leases = ScratchLeases {
            known: HashSet::new(),
            keepers: JoinSet::new(),
            granted: 0,
            defaulted: 0,
        };
        let held = client
            .leases()
            .await
            .map_err(etcd_error("listing its leases"))?;
        for lease in held.leases() {
            leases.keep_alive(client, lease.id()).await?;
        }
        Ok(leases)
    }

    async fn ensure(
        &mut self,
        client: &mut Client,
        id: i64,
        ttl: i64,
    ) -> Result<(), PointInTimeError> {
        if self.known.contains(&id) {
            return Ok(());
        }
        let ttl = if ttl > 0 {
            ttl
        } else {
            self.defaulted += 1;
            UNKNOWN_LEASE_TTL
        };
        client
            .lease_grant(ttl, Some(LeaseGrantOptions::new().with_id(id)))
            .await
            .map_err(etcd_error("granting a lease"))?;
        self.granted += 1;
        self.keep_alive(client, id).await
    }

    async fn keep_alive(&mut self, client: &mut Client, id: i64) -> Result<(), PointInTimeError> {
        self.known.insert(id);
        let (mut keeper, mut answers) = client
            .lease_keep_alive(id)
            .await
            .map_err(etcd_error("keeping a lease alive"))?;
        self.keepers.spawn(async move {
            loop {
                if keeper.keep_alive().await.is_err() {
                    return;
                }
                if !matches!(answers.message().await, Ok(Some(_))) {
                    return;
                }
                tokio::time::sleep(KEEP_ALIVE_EVERY).await;
            }
        });
        Ok(())
    }

    fn stop(&mut self) {
        self.keepers.abort_all();
    }
}

/// Streams the scratch member's snapshot into `out` (written as `<out>.part`, renamed once
/// etcd's trailer checks); returns the database size and sha256.
async fn write_snapshot(
    client: &mut Client,
    out: &Path,
) -> Result<(u64, String), PointInTimeError> {
    let part = PathBuf::from(format!("{}.part", out.display()));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PointInTimeError::Io { path, source }
    };
    let _ = std::fs::remove_file(&part);
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&part)
        .await
        .map_err(io(&part))?;
    let written = async {
        let mut stream = client.snapshot().await.map_err(etcd_error("snapshot"))?;
        let mut verifier = TrailerVerifier::new();
        while let Some(message) = stream
            .message()
            .await
            .map_err(etcd_error("snapshot stream"))?
        {
            verifier.update(message.blob());
            file.write_all(message.blob()).await.map_err(io(&part))?;
        }
        let verified = verifier.finish()?;
        file.sync_all().await.map_err(io(&part))?;
        Ok::<_, PointInTimeError>(verified)
    }
    .await;
    let verified = match written {
        Ok(verified) => verified,
        Err(e) => {
            let _ = std::fs::remove_file(&part);
            return Err(e);
        }
    };
    tokio::fs::rename(&part, out).await.map_err(io(out))?;
    Ok((verified.db_bytes, verified.db_sha256))
}
