use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use backup_storage::{Location, PartSizer, Store, UploadOptions};
use mysql_backup::archiver::{self, ArchiveOptions};
use mysql_backup::binlog::GtidState;
use mysql_backup::binlog_archive::Archive;
use mysql_backup::catalog::Catalog;
use mysql_backup::chain::{self, Base, FullBecause};
use mysql_backup::credentials::DbConnection;
use mysql_backup::ingest::{Destination, IngestOptions};
use mysql_backup::manifest::{Manifest, manifest_key};
use mysql_backup::point_in_time::{self, Point};
use mysql_backup::profile::{BackupToolOptions, Family, ToolProfile};
use mysql_backup::remote::{self, CloneOutcome, RemoteOptions};
use mysql_backup::replication::{self, ReplicationOutcome, SourceSettings};
use mysql_backup::restore::{self, PrepareOptions};
use mysql_backup::serve::{self, ServeConfig};
use serde_json::json;

use crate::cli::{
    AuthArgs, BackupToolArgs, Cli, Command, DbArgs, IncrementalArgs, PointArgs, PrepareArgs,
    RemoteArgs, StorageArgs, StoreArgs, ToolArg,
};
use crate::list_output::{print_binlogs, print_list};

/// 3 marks "the data is bad" as opposed to "something was unreachable" (1); 4 an identity
/// that cannot decrypt the backup ("the key is wrong").
pub fn exit_code(err: &anyhow::Error) -> u8 {
    let integrity = err.chain().any(|e| {
        e.downcast_ref::<mysql_backup::Error>()
            .is_some_and(|e| e.is_integrity())
    });
    let identity = err.chain().any(|e| {
        e.downcast_ref::<mysql_backup::Error>()
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
pub fn left_when_interrupted(command: &Command) -> &'static str {
    match command {
        // The staging dir is dropped with the task, which undoes it (datadir::Staging).
        Command::Restore { .. } | Command::Clone { .. } => {
            "a restore in progress was undone and the data dir is as it was, unless a warning \
             above says it stays marked incomplete (the next restore or clone clears it)"
        }
        _ => command_line::NOTHING_STORED,
    }
}

pub async fn run(cli: Cli) -> Result<()> {
    let profile = match cli.tool {
        ToolArg::Auto => ToolProfile::detect(),
        ToolArg::Mariadb => ToolProfile::new(Family::Mariadb),
        ToolArg::Percona => ToolProfile::new(Family::Percona),
    };
    match cli.command {
        Command::Backup {
            to,
            db,
            tool,
            store,
            incremental,
        } => {
            let (storage, location) = open(&to, &cli.storage).await?;
            let choice = choose_base(&storage, &location, &incremental).await?;
            let (manifest, full_because) = mysql_backup::backup::backup_choosing(
                &profile,
                &db_connection(&db)?,
                &tool_options(&tool),
                Destination {
                    store: &storage,
                    key: &location.key(),
                    options: &ingest_options(&store)?,
                },
                choice,
            )
            .await?;
            let because = full_because.map(|b| b.to_string());
            print_manifest(
                &storage.location(&location.key()).to_string(),
                &manifest,
                because.as_deref(),
            );
        }
        Command::Serve {
            listen,
            db,
            tool,
            auth,
        } => {
            let listener = tokio::net::TcpListener::bind(&listen)
                .await
                .with_context(|| format!("cannot listen on {listen}"))?;
            let config = ServeConfig {
                profile,
                db: db_connection(&db)?,
                tool_options: tool_options(&tool),
                token: token(&auth)?,
            };
            serve::serve(listener, Arc::new(config)).await?;
        }
        Command::Pull {
            from,
            to,
            auth,
            remote,
            store,
            incremental,
        } => {
            let (storage, location) = open(&to, &cli.storage).await?;
            let choice = choose_base(&storage, &location, &incremental).await?;
            let (manifest, full_because) = remote::pull(
                &from,
                &token(&auth)?,
                &remote_options(&remote),
                &profile,
                Destination {
                    store: &storage,
                    key: &location.key(),
                    options: &ingest_options(&store)?,
                },
                choice,
            )
            .await?;
            print_manifest(
                &storage.location(&location.key()).to_string(),
                &manifest,
                full_because.as_deref(),
            );
        }
        Command::Clone {
            from,
            datadir,
            auth,
            remote,
            prepare,
        } => {
            let outcome = remote::clone(
                &from,
                &token(&auth)?,
                &remote_options(&remote),
                &profile,
                &datadir,
                &prepare_options(&prepare),
            )
            .await?;
            match outcome {
                CloneOutcome::Skipped => println!(
                    "{}",
                    json!({"datadir": datadir, "cloned": false, "reason": "already initialised"})
                ),
                CloneOutcome::Cloned(s) => println!(
                    "{}",
                    json!({"datadir": datadir, "cloned": true, "files": s.files, "streamBytes": s.stream_bytes})
                ),
            }
        }
        Command::Restore {
            from,
            newest: _,
            datadir,
            force: _,
            identity,
            prepare,
            point: point_args,
        } if point_args.binlogs.is_some() => {
            restore_to_point(
                &profile,
                &cli.storage,
                &from,
                &datadir,
                &identity,
                &prepare,
                &point_args,
            )
            .await?;
        }
        Command::Restore {
            from,
            newest,
            datadir,
            force,
            identity,
            prepare,
            point: _,
        } => {
            let identity = identity.load()?;
            let (storage, location) = open(&from, &cli.storage).await?;
            let key = if newest {
                let backups = Catalog::read(&storage, &location.key()).await?.restorable();
                let Some(newest) = backups.into_iter().next() else {
                    bail!(
                        "no complete backup (object and manifest, and its chain for an incremental) under {from}"
                    );
                };
                tracing::info!(
                    backup = %storage.location(&newest.key),
                    completed = %newest.manifest.completion_time,
                    "restoring the newest backup under {from}"
                );
                newest.key
            } else {
                location.key()
            };
            let from = storage.location(&key).to_string();
            let restored = restore::restore(
                &profile,
                &storage,
                &key,
                &datadir,
                &prepare_options(&prepare),
                force,
                identity.as_ref(),
            )
            .await?;
            println!(
                "{}",
                json!({
                    "restored": from,
                    "datadir": datadir,
                    "chain": restored.keys.iter().map(|k| storage.location(k).to_string()).collect::<Vec<_>>(),
                    "files": restored.files(),
                    "streamBytes": restored.stream_bytes(),
                })
            );
        }
        Command::ArchiveBinlogs {
            to,
            datadir,
            binlog_index,
            interval,
            max_piece_mib,
            once,
            store,
        } => {
            let (storage, location) = open(&to, &cli.storage).await?;
            let options = ArchiveOptions {
                datadir,
                index: binlog_index,
                max_piece: (max_piece_mib as usize) << 20,
                compression: store.compress.into(),
                zstd_level: store.zstd_level,
                recipients: store.encrypt.recipients()?,
            };
            let prefix = location.key();
            if once {
                let mut progress = archiver::Progress::read(&storage, &prefix).await?;
                let pass =
                    archiver::archive_pass(&storage, &prefix, &options, &mut progress).await?;
                println!(
                    "{}",
                    json!({"archive": to, "pieces": pass.pieces, "binlogBytes": pass.binlog_bytes})
                );
            } else {
                tracing::info!(archive = %to, "archiving binary logs every {interval} s");
                archiver::archive_forever(
                    &storage,
                    &prefix,
                    &options,
                    Duration::from_secs(interval),
                )
                .await?;
            }
        }
        Command::ListBinlogs { prefix, output } => {
            let (storage, location) = open(&prefix, &cli.storage).await?;
            let archive = Archive::read(&storage, &location.key()).await?;
            print_binlogs(&storage, &archive, output);
        }
        Command::List { prefix, output } => {
            let (storage, location) = open(&prefix, &cli.storage).await?;
            let backups = Catalog::read(&storage, &location.key()).await?.backups();
            print_list(&storage, &backups, output);
        }
        Command::Prune {
            prefix,
            keep,
            dry_run,
            binlogs,
        } => {
            let (storage, location) = open(&prefix, &cli.storage).await?;
            let catalog = Catalog::read(&storage, &location.key()).await?;
            let delete = catalog.select_for_deletion(keep as usize);
            if !dry_run {
                for key in &delete {
                    storage.delete(key).await?;
                }
            }
            let urls: Vec<String> = delete
                .iter()
                .map(|k| storage.location(k).to_string())
                .collect();
            let mut report =
                json!({"prefix": prefix, "keep": keep, "dryRun": dry_run, "deleted": urls});
            if let Some(binlogs) = binlogs {
                // The oldest backup kept (newest first; a kept chain's full backup is older
                // than its incrementals).
                let kept = catalog.kept(keep as usize);
                let kept = kept.last();
                report["deletedBinlogs"] =
                    json!(prune_binlogs(&cli.storage, &binlogs, kept, dry_run).await?);
            }
            println!("{report}");
        }
        Command::CleanUploads { prefix, older_than } => {
            let (storage, location) = open(&prefix, &cli.storage).await?;
            let older_than = Duration::from_secs(older_than);
            // The prefix is the user's statement of what this runner writes.
            let removed = storage
                .clean_incomplete(&location.key(), older_than, &|_| true)
                .await?;
            println!("{}", json!({"prefix": prefix, "abortedUploads": removed}));
        }
        Command::ConfigureReplication {
            datadir,
            source_host,
            source_port,
            replication_user,
            replication_password_file,
            wait_timeout,
            db,
        } => {
            let password = secret(
                replication_password_file.as_deref(),
                "MYSQL_REPLICATION_PASSWORD",
                "replication password",
            )?;
            let source = SourceSettings {
                host: source_host,
                port: source_port,
                user: replication_user,
                password,
            };
            let outcome = replication::configure(
                &profile,
                &db_connection(&db)?,
                &datadir,
                &source,
                Duration::from_secs(wait_timeout),
            )
            .await?;
            match outcome {
                ReplicationOutcome::AlreadyConfigured => println!(
                    "{}",
                    json!({"configured": false, "reason": "already configured"})
                ),
                ReplicationOutcome::Configured(pos) => {
                    println!("{}", json!({"configured": true, "binlog": pos}))
                }
            }
        }
    }
    Ok(())
}

/// Deletes the archived binlogs no restore since `oldest_kept` needs; returns their URLs.
async fn prune_binlogs(
    storage_args: &StorageArgs,
    binlogs: &str,
    oldest_kept: Option<&mysql_backup::catalog::Backup>,
    dry_run: bool,
) -> Result<Vec<String>> {
    let state = oldest_kept.and_then(|b| {
        let gtid = b.manifest.backup.binlog.as_ref()?.gtid.as_deref()?;
        GtidState::parse(gtid).ok()
    });
    let (Some(kept), Some(state)) = (oldest_kept, state) else {
        tracing::warn!("no kept backup with a MariaDB GTID state: no binary log is deleted");
        return Ok(Vec::new());
    };
    let (store, location) = open(binlogs, storage_args).await?;
    let archive = Archive::read(&store, &location.key()).await?;
    let delete = archive.select_for_deletion(&state, kept.manifest.completion_time);
    let mut urls = Vec::new();
    for file in &delete {
        if !dry_run {
            // The marker first: an archiver never stores this file again, even if the prune
            // stops halfway.
            let note = json!({"prunedAt": chrono::Utc::now(), "oldestKeptBackup": kept.key});
            store
                .put_small(&file.marker, note.to_string().into(), "application/json")
                .await?;
            for key in &file.keys {
                store.delete(key).await?;
            }
        }
        urls.extend(file.keys.iter().map(|k| store.location(k).to_string()));
    }
    Ok(urls)
}

async fn restore_to_point(
    profile: &ToolProfile,
    storage_args: &StorageArgs,
    from: &str,
    datadir: &Path,
    identity: &command_line::IdentityArgs,
    prepare: &PrepareArgs,
    args: &PointArgs,
) -> Result<()> {
    let point = match (&args.until, &args.until_gtid) {
        (Some(time), None) => Point::BeforeTime(
            chrono::DateTime::parse_from_rfc3339(time)
                .with_context(|| {
                    format!("--until {time:?} is not an RFC 3339 time (e.g. 2026-11-30T10:15:00Z)")
                })?
                .with_timezone(&chrono::Utc),
        ),
        (None, Some(gtid)) => Point::BeforeGtid(gtid.parse().map_err(anyhow::Error::msg)?),
        _ => bail!("name the point with --until or --until-gtid"),
    };
    let binlogs_url = args.binlogs.as_deref().unwrap_or_default();
    let identity = identity.load()?;
    let (storage, location) = open(from, storage_args).await?;
    let (archive_store, archive_location) = open(binlogs_url, storage_args).await?;
    // Refused here, before the data dir is touched, when the point is out of reach.
    restore::check_empty(datadir)?;
    let backups = Catalog::read(&storage, &location.key()).await?.restorable();
    let archive = Archive::read(&archive_store, &archive_location.key()).await?;
    let plan = point_in_time::plan(&backups, &archive, point)
        .with_context(|| format!("cannot restore to {point}"))?;
    tracing::info!(
        backup = %storage.location(&plan.base.key),
        files = plan.files.len(),
        "restoring the newest backup before the point, then its binary logs {point}"
    );
    let replay = restore::Replay {
        store: &archive_store,
        plan: &plan,
        point,
    };
    let (restored, applied) = restore::restore_then_replay(
        profile,
        &storage,
        &plan.base.key,
        datadir,
        &prepare_options(prepare),
        false,
        identity.as_ref(),
        Some(replay),
    )
    .await?;
    let applied = applied.unwrap_or_default();
    println!(
        "{}",
        json!({
            "restored": storage.location(&plan.base.key).to_string(),
            "datadir": datadir,
            "chain": restored.keys.iter().map(|k| storage.location(k).to_string()).collect::<Vec<_>>(),
            "files": restored.files(),
            "backupGtid": plan.base_state.to_string(),
            "binlogFiles": plan.files.iter().map(|f| f.name().to_string()).collect::<Vec<_>>(),
            "transactionsApplied": applied.transactions,
            "lastAppliedGtid": applied.last_gtid.map(|g| g.to_string()),
            "lastAppliedEventTime": applied.last_event_time,
            "stoppedBefore": applied.stopped_before.map(|g| g.to_string()),
        })
    );
    Ok(())
}

/// With `--incremental PREFIX`: the base the catalog under PREFIX offers, or why a full backup.
async fn choose_base(
    storage: &Store,
    to: &Location,
    args: &IncrementalArgs,
) -> Result<Option<std::result::Result<Base, FullBecause>>> {
    let Some(prefix) = &args.incremental else {
        return Ok(None);
    };
    let chain_location = Location::parse(prefix)?;
    // A manifest names its base by key, and `list`, `prune` and `restore --newest` see one
    // prefix: the whole chain lives under it (a base elsewhere could be pruned from under it).
    if chain_location.with_key("") != to.with_key("")
        || !to.key().starts_with(&chain_location.key())
    {
        bail!("--to must be under the --incremental prefix {prefix}, where the chain lives");
    }
    let catalog = Catalog::read(storage, &chain_location.key()).await?;
    let key = to.key();
    if catalog
        .objects
        .iter()
        .any(|o| o.key == key || o.key == manifest_key(&key))
    {
        bail!(
            "{} already exists: a backup never replaces another (a chain's base would be lost)",
            storage.location(&key)
        );
    }
    Ok(Some(chain::choose_base(
        &catalog.backups(),
        args.max_incrementals as usize,
        &key,
    )))
}

/// The manifest as JSON, with the object's URL, the peak memory and, when an incremental was
/// asked for, why a full backup was taken.
fn print_manifest(url: &str, m: &Manifest, full_because: Option<&str>) {
    let mut value = serde_json::to_value(m).expect("manifest serializes");
    value["object"] = json!(url);
    if let Some(because) = full_because {
        value["fullBecause"] = json!(because);
    }
    value["peakRssMiB"] = json!(peak_rss_mib());
    println!("{value}");
}

/// This process's peak resident memory (VmHWM), for the benchmark and capacity planning.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some((kib / 1024.0 * 10.0).round() / 10.0)
}

async fn open(url: &str, args: &StorageArgs) -> Result<(Store, Location)> {
    Ok(args.open(url).await?)
}

/// A secret from a file, else from an environment variable; never from a flag value.
fn secret(file: Option<&Path>, env: &str, what: &str) -> Result<String> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the {what} file {}", path.display()))?;
        return Ok(text.trim_end_matches(['\r', '\n']).to_string());
    }
    match std::env::var(env) {
        Ok(v) => Ok(v),
        Err(_) => bail!("no {what}: set {env} or pass the --*-file flag"),
    }
}

fn db_connection(args: &DbArgs) -> Result<DbConnection> {
    let password = match &args.password_file {
        Some(path) => Some(secret(
            Some(path),
            "MYSQL_BACKUP_PASSWORD",
            "database password",
        )?),
        None => std::env::var("MYSQL_BACKUP_PASSWORD").ok(),
    };
    Ok(DbConnection {
        user: args.user.clone(),
        password,
        socket: args.socket.clone(),
        host: args.host.clone(),
        port: args.port,
        defaults_file: args.defaults_extra_file.clone(),
    })
}

fn token(args: &AuthArgs) -> Result<Vec<u8>> {
    let token = secret(
        args.token_file.as_deref(),
        "MYSQL_BACKUP_TOKEN",
        "serve token",
    )?;
    check_token(&token)?;
    Ok(token.into_bytes())
}

/// The example's placeholder (`examples/mysql/secrets.yaml`): anyone who read the example
/// knows it, so it authenticates nothing.
const PLACEHOLDER_TOKEN_PREFIX: &str = "change-me";

fn check_token(token: &str) -> Result<()> {
    if token.len() < 16 {
        bail!(
            "the serve token is too short: use at least 16 characters (e.g. `openssl rand -hex 32`)"
        );
    }
    if token
        .trim()
        .to_ascii_lowercase()
        .starts_with(PLACEHOLDER_TOKEN_PREFIX)
    {
        bail!(
            "the serve token is the example's placeholder, which anyone can read: put a token of your own in the Secret (e.g. `openssl rand -hex 32`)"
        );
    }
    Ok(())
}

fn tool_options(args: &BackupToolArgs) -> BackupToolOptions {
    BackupToolOptions {
        datadir: args.datadir.clone(),
        parallel: args.parallel,
        replica_info: args.replica_info,
        incremental_lsn: None,
        extra_args: args.tool_args.clone(),
    }
}

fn ingest_options(args: &StoreArgs) -> Result<IngestOptions> {
    Ok(IngestOptions {
        compression: args.compress.into(),
        recipients: args.encrypt.recipients()?,
        zstd_level: args.zstd_level,
        zstd_threads: args.zstd_threads,
        upload: UploadOptions {
            part_sizer: PartSizer::new((args.part_size_mib as usize) << 20),
            max_in_flight: args.parts_in_flight as usize,
            content_type: Some("application/octet-stream".into()),
            ..UploadOptions::default()
        },
    })
}

fn remote_options(args: &RemoteArgs) -> RemoteOptions {
    RemoteOptions {
        connect_timeout: Duration::from_secs(args.connect_timeout),
        stall_timeout: Duration::from_secs(args.stall_timeout),
    }
}

fn prepare_options(args: &PrepareArgs) -> PrepareOptions {
    PrepareOptions {
        use_memory: args.use_memory.clone(),
        parallel: args.parallel,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_examples_placeholder_token_and_short_tokens_are_refused() {
        let placeholder = "change-me-0123456789abcdef0123456789abcdef";
        let example = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/mysql/secrets.yaml"
        ))
        .unwrap();
        assert!(example.contains(placeholder), "the example's token changed");
        let refused = check_token(placeholder).unwrap_err().to_string();
        assert!(refused.contains("placeholder"), "{refused}");
        assert!(check_token("Change-Me-please-0123456789").is_err());
        assert!(check_token("0f0f").is_err());
        assert!(check_token(&"0f".repeat(32)).is_ok());
    }
}
