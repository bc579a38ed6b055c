use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use etcd_snapshot::changes::PointInTimeError;
use etcd_snapshot::naming::{is_backup_of, parse_scheduled, select_for_deletion};
use etcd_snapshot::{
    Checked, Contents, DrillOptions, DrillReport, HashKv, MANIFEST_SUFFIX, ObjectName, SaveOptions,
    read_manifest,
};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::cli::{Cli, Command, Output, PruneArgs, SaveArgs, StorageArgs};
use crate::setup::{connection, open, upload_options};

/// Exit code 3 marks a backup that failed verification, so scripts can tell "the data is bad"
/// from "the network was down" (1); 4 an identity that cannot decrypt it ("the key is wrong").
pub fn exit_code(err: &anyhow::Error) -> u8 {
    let integrity = err.chain().any(|e| {
        e.downcast_ref::<etcd_snapshot::Error>()
            .is_some_and(|e| e.is_integrity())
            || e.downcast_ref::<etcd_snapshot::DrillError>()
                .is_some_and(|e| e.is_integrity())
            || e.is::<DrillFailed>()
            || e.downcast_ref::<PointInTimeError>()
                .is_some_and(|e| e.is_integrity())
    });
    let identity = err.chain().any(|e| {
        e.downcast_ref::<etcd_snapshot::Error>()
            .is_some_and(|e| e.is_identity_problem())
            || e.downcast_ref::<etcd_snapshot::DrillError>()
                .is_some_and(|e| e.is_identity_problem())
            || e.downcast_ref::<PointInTimeError>()
                .is_some_and(|e| e.is_identity_problem())
            || e.downcast_ref::<command_line::KeyError>()
                .is_some_and(|e| e.is_identity_problem())
    });
    if integrity {
        command_line::EXIT_DATA_BAD
    } else if identity {
        command_line::EXIT_NO_USABLE_IDENTITY
    } else {
        command_line::EXIT_FAILED
    }
}

/// What `command` leaves when a signal stops it, for its last line.
pub fn left_when_interrupted(command: &Command) -> String {
    match command {
        // The signal may come after the verified file was renamed into place: it stays.
        Command::Fetch { out, .. } => format!(
            "any partial download {0}.part was removed; {0} exists only if it was verified \
             whole before the signal",
            out.display()
        ),
        _ => command_line::NOTHING_STORED.to_string(),
    }
}

pub async fn run(cli: Cli) -> Result<()> {
    let output = cli.output;
    match cli.command {
        Command::Save(args) => save(args, &cli.storage, output).await,
        Command::Verify { url, identity } => {
            let identity = identity.load()?;
            let (store, location) = open(&url, &cli.storage).await?;
            match etcd_snapshot::verify_what_can_be(&store, &location.key(), identity.as_ref())
                .await?
            {
                Checked::Content(report) => print_verified("verified", &report, output),
                Checked::StoredOnly(report) => print_stored_only(&report, output),
            }
            Ok(())
        }
        Command::Fetch { url, out, identity } => {
            let identity = identity.load()?;
            let (store, location) = open(&url, &cli.storage).await?;
            let report =
                etcd_snapshot::fetch(&store, &location.key(), &out, identity.as_ref()).await?;
            print_verified(&format!("fetched to {}", out.display()), &report, output);
            Ok(())
        }
        Command::Drill {
            url,
            identity,
            etcd_bin_dir,
            scratch_dir,
            start_timeout,
        } => {
            let identity = identity.load()?;
            let (store, location) = open(&url, &cli.storage).await?;
            let options = DrillOptions {
                etcd_bin_dir,
                scratch_parent: scratch_dir,
                start_timeout: Duration::from_secs(start_timeout),
            };
            let report =
                etcd_snapshot::drill(&store, &location.key(), identity.as_ref(), &options).await?;
            print_drill(&report, output);
            if report.passed() {
                Ok(())
            } else {
                Err(DrillFailed(report.differences.join("; ")).into())
            }
        }
        Command::DrillCheck {
            member,
            expect,
            object,
            report_file,
            start_timeout,
        } => {
            let recorded: Contents = serde_json::from_str(&expect)
                .context("--expect is not the JSON of recorded contents")?;
            let report = etcd_snapshot::check_restored(
                &object,
                &member,
                &recorded,
                Duration::from_secs(start_timeout),
            )
            .await?;
            print_drill(&report, output);
            if let Some(path) = report_file {
                std::fs::write(&path, drill_json(&report).to_string())
                    .with_context(|| format!("cannot write the verdict to {}", path.display()))?;
            }
            if report.passed() {
                Ok(())
            } else {
                Err(DrillFailed(report.differences.join("; ")).into())
            }
        }
        Command::List { prefix } => list(&prefix, &cli.storage, output).await,
        Command::Prune(args) => prune(args, &cli.storage, output).await,
        Command::Archive(args) => crate::changes::archive(args, &cli.storage, output).await,
        Command::PointInTime(args) => {
            crate::changes::point_in_time(args, &cli.storage, output).await
        }
        Command::PreparePoint(args) => {
            crate::changes::prepare_point(args, &cli.storage, output).await
        }
        Command::ReplayPoint(args) => {
            crate::changes::replay_point(args, &cli.storage, output).await
        }
    }
}

async fn save(args: SaveArgs, storage: &StorageArgs, output: Output) -> Result<()> {
    let connection = connection(&args.etcd)?;
    let (store, location) = open(&args.to, storage).await?;
    let key = location.key();
    let mut options = SaveOptions::new(if args.scheduled_name {
        ObjectName::Scheduled(key)
    } else {
        ObjectName::Exact(key)
    });
    options.compression = args.compress.into();
    options.recipients = args.encrypt.recipients()?;
    if args.no_hash_kv {
        options.hash_kv = HashKv::Skip;
    }
    options.stall_timeout = Duration::from_secs(args.stall_timeout);
    options.deadline = args.timeout.map(Duration::from_secs);
    options.upload = upload_options(&args.parts);
    let bar = progress_bar(output);
    if let Some(bar) = bar.clone() {
        options.progress = Some(Arc::new(move |p| {
            bar.set_length(p.expected.max(p.received));
            bar.set_position(p.received);
        }));
    }
    let started = Instant::now();
    let result = etcd_snapshot::save(&connection, &store, &options).await;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let report = result?;
    let seconds = started.elapsed().as_secs_f64();
    let m = &report.manifest;
    let mb_per_s = m.db_bytes as f64 / 1e6 / seconds.max(1e-9);
    match output {
        Output::Json => println!(
            "{}",
            with_stored(
                &m.stored_checksum(),
                json!({
                    "object": report.url, "bytes": m.stored_bytes,
                    "dbBytes": m.db_bytes, "dbSha256": m.db_sha256, "compression": m.compression,
                    "encryption": m.encryption, "contents": m.contents, "revision": m.etcd_revision, "etcdVersion": m.etcd_version,
                    "clusterId": m.cluster_id, "memberId": m.member_id, "endpoint": m.endpoint,
                    "seconds": round(seconds), "mbPerSecond": round(mb_per_s),
                })
            )
        ),
        Output::Text => println!(
            "saved {} ({} bytes stored, {} compression, {}, {})\n  snapshot of {} at revision {} (etcd {}), {} database bytes, trailer sha256 {} verified\n  {:.1} s, {:.1} MB/s",
            report.url,
            m.stored_bytes,
            m.compression.as_str(),
            encryption_text(m.encryption.as_ref()),
            m.stored_checksum(),
            m.endpoint,
            m.etcd_revision,
            m.etcd_version,
            m.db_bytes,
            m.db_sha256,
            seconds,
            mb_per_s
        ),
    }
    Ok(())
}

/// The stored checksum under its own name: `"sha256"`, or `"crc32c"` for an encrypted object
/// (see `backup_storage::stored_checksum`).
fn with_stored(
    stored: &backup_storage::stored_checksum::StoredChecksum,
    mut report: serde_json::Value,
) -> serde_json::Value {
    report[stored.kind.as_str()] = stored.hex.clone().into();
    report
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A progress bar on a terminal only: logs and JSON output stay clean in jobs.
fn progress_bar(output: Output) -> Option<ProgressBar> {
    use std::io::IsTerminal;
    if output == Output::Json || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{bytes}/{total_bytes} {wide_bar} {bytes_per_sec} {eta}")
            .expect("valid template"),
    );
    Some(bar)
}

fn print_verified(what: &str, r: &etcd_snapshot::VerifyReport, output: Output) {
    let m = r.manifest.as_ref();
    match output {
        Output::Json => println!(
            "{}",
            with_stored(
                &r.stored,
                json!({
                    "object": r.url, "bytes": r.stored_bytes,
                    "dbBytes": r.db_bytes, "dbSha256": r.db_sha256, "compression": r.compression,
                    "encrypted": r.encrypted, "contentChecked": true, "manifest": m.is_some(), "revision": m.map(|m| m.etcd_revision),
                    "etcdVersion": m.map(|m| m.etcd_version.clone()),
                })
            )
        ),
        Output::Text => {
            println!(
                "{what}: {} ({} bytes stored, {} compression, {}, {} database bytes)",
                r.url,
                r.stored_bytes,
                r.compression.as_str(),
                if r.encrypted {
                    "decrypted"
                } else {
                    "not encrypted"
                },
                r.db_bytes
            );
            println!("  sha256 trailer matches the data: {}", r.db_sha256);
            match m {
                Some(m) => println!(
                    "  manifest matches: size, stored {}, revision {}, etcd {}, taken {}",
                    r.stored, m.etcd_revision, m.etcd_version, m.start_time
                ),
                None => println!("  no manifest beside the object: only the trailer was checked"),
            }
        }
    }
}

/// A drill that ran and found the restore different from the record: the backup is bad.
#[derive(Debug)]
struct DrillFailed(String);

impl std::fmt::Display for DrillFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the drill found the restore different from the backup's record: {}",
            self.0
        )
    }
}

impl std::error::Error for DrillFailed {}

/// The verdict as JSON: printed with `--output json`, read by the operator from drill pods.
fn drill_json(r: &DrillReport) -> serde_json::Value {
    json!({
        "object": r.url, "passed": r.passed(), "etcdVersion": r.etcd_version,
        "revision": r.recorded.revision, "restoredRevision": r.restored_revision,
        "keyCount": r.recorded.key_count,
        "restoredKeyCount": r.restored.as_ref().map(|c| c.key_count),
        "hashKv": r.recorded.hash_kv,
        "restoredHashKv": r.restored.as_ref().and_then(|c| c.hash_kv),
        "contentSha256": r.recorded.content_sha256,
        "restoredContentSha256": r.restored.as_ref().and_then(|c| c.content_sha256.clone()),
        "differences": r.differences, "seconds": round(r.seconds),
    })
}

fn print_drill(r: &DrillReport, output: Output) {
    match output {
        Output::Json => println!("{}", drill_json(r)),
        Output::Text if r.passed() => println!(
            "drill passed: {} restored by etcd {} serves revision {} with {} keys at revision {}{} as recorded ({:.1} s)",
            r.url,
            r.etcd_version,
            r.restored_revision,
            r.recorded.key_count,
            r.recorded.revision,
            r.recorded
                .hash_kv
                .map_or(String::new(), |h| format!(" and HashKV {h}")),
            r.seconds
        ),
        Output::Text => println!(
            "drill FAILED: {} restored by etcd {}: {}",
            r.url,
            r.etcd_version,
            r.differences.join("; ")
        ),
    }
}

fn encryption_text(encryption: Option<&etcd_snapshot::Encryption>) -> String {
    match encryption {
        Some(e) => format!("encrypted to {}", e.recipients.join(", ")),
        None => "not encrypted".into(),
    }
}

/// An encrypted backup checked without its identity: say plainly what was not checked.
fn print_stored_only(r: &etcd_snapshot::StoredReport, output: Output) {
    let m = r.manifest.as_ref();
    match output {
        Output::Json => println!(
            "{}",
            with_stored(
                &r.stored,
                json!({
                    "object": r.url, "bytes": r.stored_bytes,
                    "encrypted": true, "contentChecked": false, "manifest": m.is_some(),
                    "revision": m.map(|m| m.etcd_revision),
                    "etcdVersion": m.map(|m| m.etcd_version.clone()),
                })
            )
        ),
        Output::Text => {
            println!(
                "checked without decrypting: {} ({} bytes stored, age header well formed)",
                r.url, r.stored_bytes
            );
            match m {
                Some(m) => println!(
                    "  manifest matches: size, stored {}, revision {}, etcd {}, taken {}",
                    r.stored, m.etcd_revision, m.etcd_version, m.start_time
                ),
                None => println!("  no manifest beside the object: only its header was checked"),
            }
            println!(
                "  the content (etcd's sha256 trailer) was NOT checked: pass --identity to check it"
            );
        }
    }
}

async fn list(prefix: &str, storage: &StorageArgs, output: Output) -> Result<()> {
    let (store, location) = open(prefix, storage).await?;
    let objects = store.list(&location.key()).await?;
    let mut rows = Vec::new();
    for object in objects.iter().filter(|o| !o.key.ends_with(MANIFEST_SUFFIX)) {
        // An unreadable or stale manifest is shown as none: nothing vouches for the object.
        let manifest = match read_manifest(&store, object).await {
            Ok(manifest) => manifest,
            Err(etcd_snapshot::Error::Storage(e)) => return Err(e.into()),
            Err(_) => None,
        };
        rows.push((object, manifest));
    }
    match output {
        Output::Json => {
            for (object, manifest) in &rows {
                println!(
                    "{}",
                    json!({
                        "object": store.location(&object.key).to_string(), "bytes": object.size,
                        "lastModified": object.last_modified, "manifest": manifest,
                    })
                );
            }
        }
        Output::Text => {
            println!(
                "{:<60} {:>12} {:>10} {:<6} {:<4} {:<25}",
                "OBJECT", "BYTES", "REVISION", "COMPR", "ENC", "TAKEN"
            );
            for (object, manifest) in &rows {
                let (revision, compression, encrypted, taken) = match manifest {
                    Some(m) => (
                        m.etcd_revision.to_string(),
                        m.compression.as_str().to_string(),
                        if m.encryption.is_some() { "age" } else { "no" },
                        m.start_time.to_rfc3339(),
                    ),
                    None => ("-".into(), "-".into(), "-", "(no manifest)".into()),
                };
                println!(
                    "{:<60} {:>12} {:>10} {:<6} {:<4} {:<25}",
                    store.location(&object.key).to_string(),
                    object.size,
                    revision,
                    compression,
                    encrypted,
                    taken
                );
            }
        }
    }
    Ok(())
}

async fn prune(args: PruneArgs, storage: &StorageArgs, output: Output) -> Result<()> {
    let (store, location) = open(&args.base, storage).await?;
    let base = location.key();
    let objects = store.list(&base).await?;
    let delete = select_for_deletion(
        &base,
        objects.iter().map(|o| o.key.as_str()),
        args.keep as usize,
    );
    let kept: Vec<String> = objects
        .iter()
        .filter_map(|o| parse_scheduled(&base, &o.key))
        .map(|s| s.key)
        .filter(|key| !delete.contains(key))
        .collect();
    let mut delete = delete;
    delete.extend(etcd_snapshot::changes::segments_to_prune(&store, &base, &kept).await?);
    let mut cleaned = 0;
    if !args.dry_run {
        for key in &delete {
            store.delete(key).await?;
        }
        // Only uploads of this base's backups and segments, never another tool's under the
        // same prefix.
        let owned = |key: &str| {
            is_backup_of(&base, key)
                || etcd_snapshot::changes::parse_segment_key(&base, key).is_some()
        };
        let older_than = Duration::from_secs(args.incomplete_older_than);
        cleaned = store.clean_incomplete(&base, older_than, &owned).await?;
    }
    let urls: Vec<String> = delete
        .iter()
        .map(|k| store.location(k).to_string())
        .collect();
    match output {
        Output::Json => println!(
            "{}",
            json!({ "deleted": urls, "dryRun": args.dry_run, "incompleteUploadsRemoved": cleaned })
        ),
        Output::Text => {
            let verb = if args.dry_run {
                "would delete"
            } else {
                "deleted"
            };
            for url in &urls {
                println!("{verb} {url}");
            }
            println!(
                "{} objects {verb}; {cleaned} unfinished uploads removed",
                urls.len()
            );
        }
    }
    Ok(())
}
