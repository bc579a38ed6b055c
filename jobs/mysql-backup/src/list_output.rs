//! What `list` prints: the complete backups under a prefix, newest first, as a table or as one
//! JSON array.

use backup_storage::Store;
use mysql_backup::catalog::Backup;
use serde_json::json;

use crate::cli::Output;

/// One row a backup: its URL, stored size, completion time, compression and whether it is
/// encrypted (the JSON rows also carry the binlog position, server version and source).
pub fn print_list(storage: &Store, backups: &[Backup], output: Output) {
    match output {
        Output::Json => {
            let rows: Vec<_> = backups
                .iter()
                .map(|b| {
                    let m = &b.manifest;
                    json!({
                        "url": storage.location(&b.key).to_string(),
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
                "{:<70} {:>12} {:<25} {:<6} {:<4}",
                "BACKUP", "BYTES", "COMPLETED", "COMPR", "AGE"
            );
            for b in backups {
                let m = &b.manifest;
                println!(
                    "{:<70} {:>12} {:<25} {:<6} {:<4}",
                    storage.location(&b.key).to_string(),
                    m.stored_bytes,
                    m.completion_time.to_rfc3339(),
                    m.compression.as_str(),
                    if m.encryption.is_some() { "yes" } else { "no" },
                )
            }
        }
    }
}
