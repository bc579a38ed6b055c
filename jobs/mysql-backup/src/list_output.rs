//! What `list` and `list-binlogs` print: the complete backups under a prefix, newest first, and
//! the binlog archive's files, as a table or as one JSON array.

use backup_storage::Store;
use mysql_backup::binlog_archive::Archive;
use mysql_backup::catalog::Backup;
use mysql_backup::manifest::Manifest;
use serde_json::json;

use crate::cli::Output;

/// One row a backup: its URL, whether it is full or incremental (and on which base), stored
/// size, completion time, compression and whether it is encrypted (the JSON rows also carry
/// the LSNs, data dir lineage, binlog position, server version and source).
pub fn print_list(storage: &Store, backups: &[Backup], output: Output) {
    match output {
        Output::Json => {
            let rows: Vec<_> = backups
                .iter()
                .map(|b| {
                    let m = &b.manifest;
                    json!({
                        "url": storage.location(&b.key).to_string(),
                        "type": kind(m),
                        "base": m.base_key(&b.key).map(|k| storage.location(&k).to_string()),
                        "fromLsn": m.backup.from_lsn,
                        "toLsn": m.backup.to_lsn,
                        "lineage": m.lineage,
                        "storedBytes": m.stored_bytes,
                        "completionTime": m.completion_time,
                        "compression": m.compression.as_str(),
                        "encrypted": m.encryption.is_some(),
                        "binlog": m.backup.binlog,
                        "serverVersion": m.backup.server_version,
                        "source": m.source,
                    })
                })
                .collect();
            println!("{}", json!(rows));
        }
        Output::Text => {
            println!(
                "{:<70} {:<11} {:>12} {:<25} {:<6} {:<4} BASE",
                "BACKUP", "TYPE", "BYTES", "COMPLETED", "COMPR", "AGE"
            );
            for b in backups {
                let m = &b.manifest;
                println!(
                    "{:<70} {:<11} {:>12} {:<25} {:<6} {:<4} {}",
                    storage.location(&b.key).to_string(),
                    kind(m),
                    m.stored_bytes,
                    m.completion_time.to_rfc3339(),
                    m.compression.as_str(),
                    if m.encryption.is_some() { "yes" } else { "no" },
                    m.base_key(&b.key)
                        .map_or_else(|| "-".to_string(), |k| storage.location(&k).to_string()),
                )
            }
        }
    }
}

fn kind(m: &Manifest) -> &'static str {
    if m.is_incremental() {
        "incremental"
    } else {
        "full"
    }
}

/// What `list-binlogs` prints: each archived file (oldest first), how far it is archived, its
/// GTID states and last transaction, and whether the server finished it.
pub fn print_binlogs(storage: &Store, archive: &Archive, output: Output) {
    match output {
        Output::Json => {
            let rows: Vec<_> = archive
                .files
                .iter()
                .map(|f| {
                    json!({
                        "url": storage.location(&f.dir).to_string(),
                        "file": f.name(),
                        "serverId": f.pieces[0].manifest.server_id,
                        "created": f.created(),
                        "archivedBytes": f.end(),
                        "pieces": f.pieces.len(),
                        "complete": f.complete(),
                        "stateAtStart": f.state_at_start().to_string(),
                        "stateAtEnd": f.state_at_end().to_string(),
                        "lastGtid": f.last_gtid(),
                        "lastEventTime": f.last_event_time(),
                    })
                })
                .collect();
            println!("{}", json!(rows));
        }
        Output::Text => {
            println!(
                "{:<16} {:>6} {:<25} {:>12} {:<8} {:<20} {:<25}",
                "FILE", "SERVER", "CREATED", "BYTES", "COMPLETE", "LAST GTID", "LAST EVENT"
            );
            for f in &archive.files {
                println!(
                    "{:<16} {:>6} {:<25} {:>12} {:<8} {:<20} {:<25}",
                    f.name(),
                    f.pieces[0].manifest.server_id,
                    f.created().to_rfc3339(),
                    f.end(),
                    if f.complete() { "yes" } else { "no" },
                    f.last_gtid().unwrap_or("-"),
                    f.last_event_time()
                        .map_or_else(|| "-".to_string(), |t| t.to_rfc3339()),
                )
            }
        }
    }
}
