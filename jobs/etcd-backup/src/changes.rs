//! `archive` and `point-in-time`: the continuous archive of changes and restores to a point.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use etcd_snapshot::changes::{
    ArchiveEvent, ArchiveOptions, PointInTimeOptions, PointInTimeReport, PreparedPoint,
    SegmentLayers, Target,
};
use etcd_snapshot::{DrillOptions, HashKv, ObjectName, SaveOptions};
use serde_json::json;

use crate::cli::{
    ArchiveArgs, Output, PointArgs, PointInTimeArgs, PreparePointArgs, ReplayPointArgs, StorageArgs,
};
use crate::setup::{connection, open, upload_options};

pub async fn archive(args: ArchiveArgs, storage: &StorageArgs, output: Output) -> Result<()> {
    let connection = connection(&args.etcd)?;
    let (store, location) = open(&args.to, storage).await?;
    let base = location.key();
    let compression = args.compress.into();
    let recipients = args.encrypt.recipients()?;
    let upload = upload_options(&args.parts);
    let mut snapshot = SaveOptions::new(ObjectName::Scheduled(base.clone()));
    snapshot.compression = compression;
    snapshot.recipients = recipients.clone();
    snapshot.upload = upload.clone();
    if args.no_hash_kv {
        snapshot.hash_kv = HashKv::Skip;
    }
    let options = ArchiveOptions {
        base,
        segment_seconds: Duration::from_secs(args.segment_seconds),
        segment_max_bytes: args.segment_max_mib << 20,
        layers: SegmentLayers {
            compression,
            recipients,
            upload,
        },
        snapshot,
        // No other writer of snapshots in this process.
        snapshot_lock: Arc::default(),
        identity: args.identity.load()?,
        report: Arc::new(move |event| print_event(&event, output)),
    };
    // SIGTERM/SIGINT: the open segment is stored, then the archive ends (exit 0).
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        let _ = stop.send(true);
    });
    etcd_snapshot::changes::archive(&connection, &store, &options, stopped).await?;
    eprintln!("archive stopped; every change received was stored");
    Ok(())
}

fn print_event(event: &ArchiveEvent, output: Output) {
    let line = match event {
        ArchiveEvent::Started {
            cluster_id,
            after_revision,
            reason,
        } => {
            json!({"event": "started", "clusterId": cluster_id, "afterRevision": after_revision, "reason": reason})
        }
        ArchiveEvent::SegmentStored { key, manifest } => json!({
            "event": "segment", "key": key, "firstRevision": manifest.first_revision,
            "lastRevision": manifest.last_revision, "events": manifest.events,
            "storedBytes": manifest.stored_bytes, "lastTime": manifest.last_time,
        }),
        ArchiveEvent::Gap {
            archived_through,
            compacted,
            resumed_after,
        } => {
            tracing::warn!(
                archived_through,
                compacted,
                resumed_after,
                "the cluster compacted past the archive: revisions after {archived_through} up to {resumed_after} cannot be restored to"
            );
            json!({"event": "gap", "archivedThrough": archived_through, "compacted": compacted, "resumedAfter": resumed_after})
        }
        ArchiveEvent::SnapshotTaken { key, revision } => {
            json!({"event": "snapshot", "key": key, "revision": revision})
        }
        ArchiveEvent::WatchLost {
            archived_through,
            error,
        } => {
            tracing::warn!(archived_through, %error, "the watch broke; resuming");
            json!({"event": "watchLost", "archivedThrough": archived_through, "error": error})
        }
    };
    match output {
        Output::Json => println!("{line}"),
        Output::Text => println!("{}", text_of(&line)),
    }
}

/// `event key=value ...` for humans.
fn text_of(line: &serde_json::Value) -> String {
    let Some(fields) = line.as_object() else {
        return line.to_string();
    };
    let mut text = fields
        .get("event")
        .and_then(|e| e.as_str())
        .unwrap_or("")
        .to_string();
    for (name, value) in fields.iter().filter(|(n, _)| *n != "event") {
        match value.as_str() {
            Some(s) => text.push_str(&format!(" {name}={s}")),
            None => text.push_str(&format!(" {name}={value}")),
        }
    }
    text
}

/// `--revision` or `--time` (clap requires one of them).
fn target(point: &PointArgs) -> Result<Target> {
    match (point.revision, point.time.as_deref()) {
        (Some(revision), _) => Ok(Target::Revision(revision)),
        (None, Some(time)) => Ok(Target::Time(
            chrono::DateTime::parse_from_rfc3339(time)
                .with_context(|| format!("--time {time:?} is not an RFC 3339 time"))?
                .to_utc(),
        )),
        (None, None) => anyhow::bail!("name the point: --revision or --time"),
    }
}

pub async fn point_in_time(
    args: PointInTimeArgs,
    storage: &StorageArgs,
    output: Output,
) -> Result<()> {
    let target = target(&args.point)?;
    let identity = args.identity.load()?;
    let (store, location) = open(&args.point.base, storage).await?;
    let options = PointInTimeOptions {
        scratch: DrillOptions {
            etcd_bin_dir: args.etcd_bin_dir,
            scratch_parent: args.scratch_dir,
            start_timeout: Duration::from_secs(args.start_timeout),
        },
        cluster_id: args.point.cluster_id,
    };
    let report = etcd_snapshot::changes::restore_to_point(
        &store,
        &location.key(),
        target,
        identity.as_ref(),
        &args.out,
        &options,
    )
    .await?;
    print_point(&report, &args.out, output);
    Ok(())
}

/// Where `prepare-point` leaves its decision for `replay-point`.
const PREPARED: &str = "point.json";

pub async fn prepare_point(
    args: PreparePointArgs,
    storage: &StorageArgs,
    output: Output,
) -> Result<()> {
    let target = target(&args.point)?;
    let identity = args.identity.load()?;
    let (store, location) = open(&args.point.base, storage).await?;
    let prepared = etcd_snapshot::changes::prepare_point(
        &store,
        &location.key(),
        target,
        identity.as_ref(),
        args.point.cluster_id.as_deref(),
        &args.etcd_version,
        &args.dir.join("snapshot.db"),
    )
    .await?;
    let path = args.dir.join(PREPARED);
    std::fs::write(&path, serde_json::to_vec(&prepared)?)
        .with_context(|| format!("writing {}", path.display()))?;
    let line = json!({
        "prepared": path.display().to_string(), "snapshot": prepared.snapshot.key,
        "snapshotRevision": prepared.snapshot.revision, "etcdVersion": prepared.etcd_version,
        "segments": prepared.segments.len(), "revision": prepared.reach.revision,
    });
    match output {
        Output::Json => println!("{line}"),
        Output::Text => println!("{}", text_of(&line)),
    }
    Ok(())
}

pub async fn replay_point(
    args: ReplayPointArgs,
    storage: &StorageArgs,
    output: Output,
) -> Result<()> {
    let path = args.dir.join(PREPARED);
    let text = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let prepared: PreparedPoint = serde_json::from_slice(&text)
        .with_context(|| format!("{} is not what prepare-point writes", path.display()))?;
    let identity = args.identity.load()?;
    let (store, _) = open(&args.base, storage).await?;
    let report = etcd_snapshot::changes::replay_point(
        &store,
        &prepared,
        identity.as_ref(),
        &args.endpoint,
        Duration::from_secs(args.start_timeout),
        &args.out,
    )
    .await?;
    print_point(&report, &args.out, output);
    Ok(())
}

fn print_point(r: &PointInTimeReport, out: &std::path::Path, output: Output) {
    match output {
        Output::Json => println!(
            "{}",
            json!({
                "out": out.display().to_string(), "revision": r.revision,
                "revisionTime": r.revision_time, "snapshot": r.snapshot,
                "snapshotRevision": r.snapshot_revision, "clusterId": r.cluster_id,
                // The count and the ends: a day of 60 s segments is about 100 KB of keys, and a
                // restore pod's report must stay within the log tail the operator reads.
                "segments": r.segments.len(), "firstSegment": r.segments.first(),
                "lastSegment": r.segments.last(), "revisionsApplied": r.revisions_applied,
                "eventsApplied": r.events_applied, "leasesGranted": r.leases_granted,
                "leasesDefaulted": r.leases_defaulted, "contents": r.contents,
                "etcdVersion": r.etcd_version, "dbBytes": r.db_bytes, "dbSha256": r.db_sha256,
                "seconds": (r.seconds * 1000.0).round() / 1000.0,
            })
        ),
        Output::Text => {
            println!(
                "wrote {} at revision {}{}: snapshot {} (revision {}) and {} revisions ({} changes) from {} segments, in {:.1} s",
                out.display(),
                r.revision,
                r.revision_time
                    .map(|t| format!(" (changed {})", t.to_rfc3339()))
                    .unwrap_or_default(),
                r.snapshot,
                r.snapshot_revision,
                r.revisions_applied,
                r.events_applied,
                r.segments.len(),
                r.seconds
            );
            println!(
                "  keys: {}, sha256 of the key space: {}",
                r.contents.key_count,
                r.contents.content_sha256.as_deref().unwrap_or("-")
            );
            if r.leases_defaulted > 0 {
                println!(
                    "  {} leases had expired before the archive asked their TTL: granted {} s",
                    r.leases_defaulted,
                    etcd_snapshot::changes::UNKNOWN_LEASE_TTL
                );
            }
        }
    }
}
