//! The continuous archive: watch every key of the cluster from the revision after the newest
//! snapshot (or the newest segment) and store what happens in segments.
//!
//! Where it starts, in this order:
//! 1. after the newest segment of this cluster's archive (a restart: no gap, no duplicate);
//! 2. after the newest snapshot of `base` taken of this cluster;
//! 3. after a snapshot it takes at once (nothing to start from).
//!
//! When the cluster compacted past the revision it needs (it was stopped, or fell behind), the
//! changes in between are gone: it says so ([`ArchiveEvent::Gap`]), takes a snapshot at once
//! and goes on after it. A watch that breaks (a member restarted) ends the open segment and
//! resumes after it. A stop request ends the open segment cleanly.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use backup_storage::Store;
use backup_storage::encryption::Identity;
use etcd_client::{EventType, WatchOptions};
use tokio::time::Instant;

use super::reader::SegmentReader;
use super::record::{Change, ChangeKind};
use super::segment::{SegmentManifest, cluster_prefix, parse_segment_key};
use super::writer::{SegmentLayers, SegmentWriter};
use crate::naming::parse_scheduled;
use crate::{Error, EtcdConnection, Manifest, Result, SaveOptions, select_member};

/// Lease TTLs remembered; cleared when full (asking again costs one call per lease).
const LEASE_CACHE: usize = 65_536;
/// The largest watch response taken (one response holds whole revisions, and etcd never
/// splits a revision's events): a delete of a large range is one revision.
const MAX_WATCH_MESSAGE: usize = 256 * 1024 * 1024;
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// How long a lease's TTL may take to be told (a member that stopped answering must not hold
/// the archive).
const LEASE_ASK_TIMEOUT: Duration = Duration::from_secs(5);
const RETRY_MAX: Duration = Duration::from_secs(30);

pub struct ArchiveOptions {
    /// The base name of the scheduled snapshots (`<base>_v<revision>_<time>`); the archive is
    /// `<base>.changes/`.
    pub base: String,
    /// A segment closes this long after its first event...
    pub segment_seconds: Duration,
    /// ...or once it holds this many bytes of plaintext, whichever comes first.
    pub segment_max_bytes: u64,
    pub layers: SegmentLayers,
    /// How the snapshots it takes (no start point, a gap) are made.
    pub snapshot: SaveOptions,
    /// Held while it looks for a snapshot to start from and takes one if there is none. Whoever
    /// else takes snapshots under `base` in the same process (the operator's scheduled runs)
    /// holds it too: the archive then starts from theirs instead of taking one beside it, and
    /// two snapshots are never written at once under one name.
    pub snapshot_lock: Arc<tokio::sync::Mutex<()>>,
    /// To read back a segment whose manifest a crash left unwritten (encrypted archives).
    pub identity: Option<Identity>,
    /// Told of each step, for the CLI's lines and the operator's metrics.
    pub report: Arc<dyn Fn(ArchiveEvent) + Send + Sync>,
}

/// What the archive did.
#[derive(Debug, Clone)]
pub enum ArchiveEvent {
    /// It starts (or starts again) after `revision`.
    Started {
        cluster_id: String,
        after_revision: i64,
        reason: String,
    },
    SegmentStored {
        key: String,
        manifest: Box<SegmentManifest>,
    },
    /// The cluster compacted past `archived_through` (etcd keeps history from `compacted`
    /// on): no point in `archived_through + 1 ..= resumed_after` can be restored from this
    /// archive. It goes on after the snapshot at `resumed_after` (one taken at once, or a
    /// newer one that was already there).
    Gap {
        archived_through: i64,
        compacted: i64,
        resumed_after: i64,
    },
    SnapshotTaken {
        key: String,
        revision: i64,
    },
    /// The watch broke; the archive resumes after `archived_through`.
    WatchLost {
        archived_through: i64,
        error: String,
    },
}

/// Archives until `stop` turns true (the open segment is then closed and stored) or a storage
/// failure (the open segment is discarded: the next run resumes before it).
pub async fn archive(
    connection: &EtcdConnection,
    store: &Store,
    options: &ArchiveOptions,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<()> {
    let mut leases = LeaseTtls::default();
    let mut retry = RETRY_FIRST;
    // After a gap: the snapshot the archive goes on from, later than any segment.
    let mut floor: Option<(i64, String)> = None;
    loop {
        if *stop.borrow() {
            return Ok(());
        }
        let mut member = match select_member(connection).await {
            Ok(member) => member,
            Err(e) => {
                tracing::warn!(error = %e, "no member answers; trying again");
                (options.report)(ArchiveEvent::WatchLost {
                    archived_through: floor.as_ref().map_or(0, |(r, _)| *r),
                    error: format!("no member answers: {e}"),
                });
                if wait_or_stop(&mut stop, retry).await {
                    return Ok(());
                }
                retry = (retry * 2).min(RETRY_MAX);
                continue;
            }
        };
        let cluster_id = member.cluster_id_hex();
        let (mut after, mut reason) =
            start_point(connection, store, options, &cluster_id, member.revision).await?;
        if let Some((revision, why)) = floor.as_ref().filter(|(revision, _)| *revision > after) {
            after = *revision;
            reason = why.clone();
        }
        (options.report)(ArchiveEvent::Started {
            cluster_id: cluster_id.clone(),
            after_revision: after,
            reason,
        });
        let mut session = Session {
            store,
            options,
            cluster_id,
            etcd_version: member.version.clone(),
            archived_through: after,
            open: None,
        };
        let watched = session
            .watch(&mut member.client, &mut leases, &mut stop)
            .await;
        match watched {
            Ok(Ended::Stopped) => return Ok(()),
            Ok(Ended::Compacted { compacted }) => {
                let cluster_id = session.cluster_id.clone();
                let (key, revision) =
                    snapshot_to_resume_after(connection, store, options, &cluster_id, compacted)
                        .await?;
                (options.report)(ArchiveEvent::Gap {
                    archived_through: session.archived_through,
                    compacted,
                    resumed_after: revision,
                });
                floor = Some((revision, format!("after the snapshot {key}, past the gap")));
                retry = RETRY_FIRST;
            }
            Ok(Ended::WatchLost(error)) => {
                (options.report)(ArchiveEvent::WatchLost {
                    archived_through: session.archived_through,
                    error,
                });
                if wait_or_stop(&mut stop, retry).await {
                    return Ok(());
                }
                retry = (retry * 2).min(RETRY_MAX);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Waits `delay`, or less when asked to stop (true).
async fn wait_or_stop(stop: &mut tokio::sync::watch::Receiver<bool>, delay: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(delay) => false,
        _ = stopped(stop) => true,
    }
}

/// Returns once asked to stop (or once no one can ask any more). The borrow `wait_for` returns
/// is dropped here, so the futures that wait on this stay `Send`.
pub async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// The revision the archive has everything up to, and why.
async fn start_point(
    connection: &EtcdConnection,
    store: &Store,
    options: &ArchiveOptions,
    cluster_id: &str,
    revision: i64,
) -> Result<(i64, String)> {
    if let Some(last) = newest_segment_end(store, options, cluster_id).await? {
        // A cluster behind its own archive was rewound: going on would mix two histories.
        if last > revision {
            return Err(Error::ClusterRewound {
                cluster_id: cluster_id.to_string(),
                revision,
                archived: last,
            });
        }
        return Ok((
            last,
            format!("after the newest archived segment (revision {last})"),
        ));
    }
    let _one_snapshot_at_a_time = options.snapshot_lock.lock().await;
    if let Some((key, revision)) = newest_snapshot(store, &options.base, cluster_id).await? {
        return Ok((revision, format!("after the newest snapshot {key}")));
    }
    let report = crate::save(connection, store, &options.snapshot).await?;
    (options.report)(ArchiveEvent::SnapshotTaken {
        key: report.key.clone(),
        revision: report.manifest.etcd_revision,
    });
    Ok((
        report.manifest.etcd_revision,
        format!("after a snapshot taken to start from ({})", report.key),
    ))
}

/// After a gap: the newest snapshot if the watch can go on from it (etcd still has every
/// revision after it), else one taken now.
async fn snapshot_to_resume_after(
    connection: &EtcdConnection,
    store: &Store,
    options: &ArchiveOptions,
    cluster_id: &str,
    compacted: i64,
) -> Result<(String, i64)> {
    let _one_snapshot_at_a_time = options.snapshot_lock.lock().await;
    if let Some((key, revision)) = newest_snapshot(store, &options.base, cluster_id).await?
        && revision + 1 >= compacted
    {
        return Ok((key, revision));
    }
    let report = crate::save(connection, store, &options.snapshot).await?;
    (options.report)(ArchiveEvent::SnapshotTaken {
        key: report.key.clone(),
        revision: report.manifest.etcd_revision,
    });
    Ok((report.key, report.manifest.etcd_revision))
}

/// The last revision of this cluster's newest segment. A segment committed without its
/// manifest (a crash between the two) is read back whole and its manifest written.
async fn newest_segment_end(
    store: &Store,
    options: &ArchiveOptions,
    cluster_id: &str,
) -> Result<Option<i64>> {
    let listed = store
        .list(&cluster_prefix(&options.base, cluster_id))
        .await?;
    let Some(newest) = listed
        .iter()
        .filter_map(|o| parse_segment_key(&options.base, &o.key))
        .max_by_key(|s| s.first_revision)
    else {
        return Ok(None);
    };
    if let Some(manifest) = SegmentManifest::load(store, &newest.key).await? {
        return Ok(Some(manifest.last_revision));
    }
    if let Some(manifest) = promote_pending(store, &newest.key).await? {
        return Ok(Some(manifest.last_revision));
    }
    let manifest = rebuild_manifest(store, &newest.key, cluster_id, options).await?;
    Ok(Some(manifest.last_revision))
}

/// The manifest a segment's writer left pending before a crash, written as the manifest when
/// it describes the segment that is there (its size).
async fn promote_pending(store: &Store, key: &str) -> Result<Option<SegmentManifest>> {
    let pending = super::writer::pending_manifest_key(key);
    let Some(bytes) = store.get_small(&pending).await? else {
        return Ok(None);
    };
    let manifest = SegmentManifest::parse(&pending, &bytes)?;
    let Some(info) = store.head(key).await? else {
        return Ok(None);
    };
    if info.size != manifest.stored_bytes {
        return Ok(None);
    }
    manifest.write_beside(store, key).await?;
    let _ = store.delete(&pending).await;
    tracing::warn!(%key, "a segment had no manifest (the archiver stopped between the two); wrote the one its writer left pending");
    Ok(Some(manifest))
}

async fn rebuild_manifest(
    store: &Store,
    key: &str,
    cluster_id: &str,
    options: &ArchiveOptions,
) -> Result<SegmentManifest> {
    let mut reader = SegmentReader::open(store, key, None, options.identity.as_ref()).await?;
    let (mut first_ms, mut last_ms, mut late_through) = (None, 0, None);
    while let Some(change) = reader.next().await? {
        first_ms.get_or_insert(change.time_ms);
        last_ms = change.time_ms;
        if change.late {
            late_through = Some(change.revision);
        }
    }
    let (end, plaintext_sha256) = reader.end().cloned().expect("read to the end");
    let info = store.head(key).await?.ok_or_else(|| Error::BadSegment {
        url: store.location(key).to_string(),
        message: "gone while it was read".into(),
    })?;
    let stored = reader.stored_checksum();
    let manifest = SegmentManifest {
        format: super::segment::SEGMENT_FORMAT.into(),
        cluster_id: cluster_id.to_string(),
        first_revision: end.first_revision,
        last_revision: end.last_revision,
        events: end.events,
        first_time: super::writer::time_of(first_ms.unwrap_or(last_ms)),
        last_time: super::writer::time_of(last_ms),
        late_through_revision: late_through,
        stored_sha256: stored
            .as_ref()
            .map_or(Some(plaintext_sha256.clone()), |c| c.sha256()),
        stored_crc32c: stored.as_ref().and_then(|c| c.crc32c()),
        plaintext_sha256,
        stored_bytes: info.size,
        compression: reader.compression(),
        encryption: options
            .layers
            .recipients
            .as_ref()
            .filter(|_| reader.encrypted())
            .map(backup_storage::encryption::Encryption::age),
        etcd_version: String::new(),
        completion_time: info.last_modified.unwrap_or_else(chrono::Utc::now),
        tool: concat!(
            "etcd-backup ",
            env!("CARGO_PKG_VERSION"),
            " (manifest rebuilt)"
        )
        .into(),
        labels: options.layers.upload.metadata.clone(),
    };
    manifest.write_beside(store, key).await?;
    tracing::warn!(%key, "a segment had no manifest (the archiver stopped between the two); rebuilt it from the segment");
    Ok(manifest)
}

/// The newest scheduled snapshot of `base` taken of `cluster_id`, by its manifest.
pub async fn newest_snapshot(
    store: &Store,
    base: &str,
    cluster_id: &str,
) -> Result<Option<(String, i64)>> {
    let listed = store.list(base).await?;
    let mut snapshots: Vec<_> = listed
        .iter()
        .filter_map(|o| parse_scheduled(base, &o.key))
        .collect();
    snapshots.sort_by_key(|s| std::cmp::Reverse((s.revision, s.time)));
    for snapshot in snapshots {
        match Manifest::load(store, &snapshot.key).await {
            Ok(Some(m)) if m.cluster_id == cluster_id => {
                return Ok(Some((snapshot.key, m.etcd_revision)));
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(key = %snapshot.key, error = %e, "skipped a snapshot whose manifest cannot be read")
            }
        }
    }
    Ok(None)
}

/// Why a watch ended.
enum Ended {
    Stopped,
    Compacted { compacted: i64 },
    WatchLost(String),
}

/// One watch, from `archived_through + 1`.
struct Session<'a> {
    store: &'a Store,
    options: &'a ArchiveOptions,
    cluster_id: String,
    etcd_version: String,
    archived_through: i64,
    open: Option<(SegmentWriter, Instant)>,
}

impl Session<'_> {
    async fn watch(
        &mut self,
        client: &mut etcd_client::Client,
        leases: &mut LeaseTtls,
        stop: &mut tokio::sync::watch::Receiver<bool>,
    ) -> Result<Ended> {
        let watch_options = WatchOptions::new()
            .with_all_keys()
            .with_start_revision(self.archived_through + 1);
        let mut watcher = client
            .watch_client()
            .max_decoding_message_size(MAX_WATCH_MESSAGE);
        let mut stream = match watcher.watch("", Some(watch_options)).await {
            Ok(stream) => stream,
            Err(e) => return Ok(Ended::WatchLost(e.to_string())),
        };
        // Events up to the revision etcd had when the watch was created are history read
        // while catching up: when they were committed is known only to be before now.
        let mut live_after: Option<i64> = None;
        loop {
            let deadline = self.open.as_ref().map(|(_, closes)| *closes);
            let message = tokio::select! {
                message = stream.message() => message,
                _ = sleep_until(deadline) => {
                    self.close().await?;
                    continue;
                }
                _ = stopped(stop) => {
                    self.close().await?;
                    return Ok(Ended::Stopped);
                }
            };
            let response = match message {
                Ok(Some(response)) => response,
                Ok(None) => {
                    self.close().await?;
                    return Ok(Ended::WatchLost("the watch stream ended".into()));
                }
                Err(e) => {
                    self.close().await?;
                    return Ok(Ended::WatchLost(e.to_string()));
                }
            };
            if response.canceled() {
                self.close().await?;
                if response.compact_revision() > 0 {
                    return Ok(Ended::Compacted {
                        compacted: response.compact_revision(),
                    });
                }
                return Ok(Ended::WatchLost(format!(
                    "etcd cancelled the watch: {}",
                    response.cancel_reason()
                )));
            }
            if response.created() {
                live_after = response.header().map(|h| h.revision());
            }
            let time_ms = chrono::Utc::now().timestamp_millis();
            for event in response.events() {
                let Some(kv) = event.kv() else { continue };
                let kind = match event.event_type() {
                    EventType::Put => ChangeKind::Put,
                    EventType::Delete => ChangeKind::Delete,
                };
                let lease_ttl = match (kind, kv.lease()) {
                    (ChangeKind::Put, lease) if lease != 0 => leases.ttl(client, lease).await,
                    _ => -1,
                };
                let change = Change {
                    kind,
                    revision: kv.mod_revision(),
                    create_revision: kv.create_revision(),
                    version: kv.version(),
                    lease: kv.lease(),
                    lease_ttl,
                    time_ms,
                    late: live_after.is_none_or(|live| kv.mod_revision() <= live),
                    key: kv.key().to_vec(),
                    value: kv.value().to_vec(),
                };
                self.push(&change).await?;
            }
            // A response holds whole revisions: here the segment may end.
            if self
                .open
                .as_ref()
                .is_some_and(|(w, _)| w.plaintext_bytes() >= self.options.segment_max_bytes)
            {
                self.close().await?;
            }
        }
    }

    async fn push(&mut self, change: &Change) -> Result<()> {
        if self.open.is_none() {
            let writer = SegmentWriter::start(
                self.store,
                &self.options.base,
                &self.cluster_id,
                change.revision,
                &self.options.layers,
            )
            .await?;
            let closes = Instant::now() + self.options.segment_seconds;
            self.open = Some((writer, closes));
        }
        let (writer, _) = self.open.as_mut().expect("opened above");
        if let Err(e) = writer.push(change).await {
            self.open = None;
            return Err(e);
        }
        Ok(())
    }

    /// Stores the open segment, if any.
    async fn close(&mut self) -> Result<()> {
        let Some((writer, _)) = self.open.take() else {
            return Ok(());
        };
        let key = writer.key().to_string();
        let manifest = writer.close(self.store, &self.etcd_version).await?;
        self.archived_through = manifest.last_revision;
        tracing::info!(%key, first = manifest.first_revision, last = manifest.last_revision, events = manifest.events, "segment stored");
        (self.options.report)(ArchiveEvent::SegmentStored {
            key,
            manifest: Box::new(manifest),
        });
        Ok(())
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Granted TTLs of the leases seen, asked once each.
#[derive(Default)]
struct LeaseTtls(HashMap<i64, i64>);

impl LeaseTtls {
    async fn ttl(&mut self, client: &mut etcd_client::Client, lease: i64) -> i64 {
        if let Some(ttl) = self.0.get(&lease) {
            return *ttl;
        }
        let asked = tokio::time::timeout(LEASE_ASK_TIMEOUT, client.lease_time_to_live(lease, None));
        let ttl = match asked.await {
            // An expired lease answers TTL -1; its keys' delete events follow.
            Ok(Ok(answer)) if answer.ttl() >= 0 => answer.granted_ttl(),
            Ok(Ok(_)) => -1,
            Ok(Err(e)) => {
                tracing::warn!(lease, error = %e, "cannot ask a lease's TTL; a restore grants it the default");
                return -1;
            }
            Err(_) => {
                tracing::warn!(
                    lease,
                    "a lease's TTL was not told in time; a restore grants it the default"
                );
                return -1;
            }
        };
        if self.0.len() >= LEASE_CACHE {
            self.0.clear();
        }
        self.0.insert(lease, ttl);
        ttl
    }
}
