//! `configure-replication`: turns the binlog coordinates captured in the backup into
//! `CHANGE MASTER TO` (MariaDB) / `CHANGE REPLICATION SOURCE TO` (MySQL 8) and starts the
//! replica, once: a marker in the data dir makes reruns (container restarts) no-ops.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use crate::credentials::DbConnection;
use crate::datadir::{REPLICATION_CONFIGURED, RESTORED};
use crate::metadata::{BackupMetadata, BinlogPosition, parse_binlog_info};
use crate::profile::{Family, ToolProfile};
use crate::{Error, Result};

#[derive(Clone)]
pub struct SourceSettings {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
}

/// SQL string literal with backslash escapes (as `mysql_real_escape_string`), which hold
/// because [`ESCAPES_ON`] runs first in the same session.
fn lit(s: &str) -> String {
    let mut quoted = String::from("'");
    for c in s.chars() {
        match c {
            '\\' => quoted.push_str("\\\\"),
            '\'' => quoted.push_str("\\'"),
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\0' => quoted.push_str("\\0"),
            '\u{1a}' => quoted.push_str("\\Z"),
            c => quoted.push(c),
        }
    }
    quoted.push('\'');
    quoted
}

/// Turns backslash escapes on for the session whatever the server's `sql_mode`: under
/// `NO_BACKSLASH_ESCAPES` a `\'` would end the literal and let the rest of a password run as
/// SQL. (Itself free of backslashes, so it parses in either mode.)
const ESCAPES_ON: &str =
    "SET SESSION sql_mode = REPLACE(@@SESSION.sql_mode, 'NO_BACKSLASH_ESCAPES', '');\n";

/// Statements that make the local server replicate from `source`, starting at `pos`.
/// MariaDB 10.x servers older than 10.5 lack `CHANGE REPLICATION SOURCE`, so MariaDB gets
/// `CHANGE MASTER TO` everywhere.
pub fn replication_sql(
    family: Family,
    server_version: Option<&str>,
    pos: &BinlogPosition,
    source: &SourceSettings,
) -> String {
    let common = |host: &str, port: &str, user: &str, password: &str| {
        format!(
            "{host}={}, {port}={}, {user}={}, {password}={}",
            lit(&source.host),
            source.port,
            lit(&source.user),
            lit(&source.password)
        )
    };
    let statements = match family {
        Family::Mariadb => {
            let target = common(
                "MASTER_HOST",
                "MASTER_PORT",
                "MASTER_USER",
                "MASTER_PASSWORD",
            );
            match &pos.gtid {
                Some(gtid) => format!(
                    "STOP SLAVE;\nSET GLOBAL gtid_slave_pos = {};\nCHANGE MASTER TO {target}, MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=5;\nSTART SLAVE;\n",
                    lit(gtid)
                ),
                None => format!(
                    "STOP SLAVE;\nCHANGE MASTER TO {target}, MASTER_LOG_FILE={}, MASTER_LOG_POS={}, MASTER_CONNECT_RETRY=5;\nSTART SLAVE;\n",
                    lit(&pos.file),
                    pos.position
                ),
            }
        }
        Family::Percona => {
            let target = common(
                "SOURCE_HOST",
                "SOURCE_PORT",
                "SOURCE_USER",
                "SOURCE_PASSWORD",
            );
            // 8.4 removed RESET MASTER.
            let reset = if server_version.is_some_and(|v| v.starts_with("8.0")) {
                "RESET MASTER"
            } else {
                "RESET BINARY LOGS AND GTIDS"
            };
            match &pos.gtid {
                Some(gtid) => format!(
                    "STOP REPLICA;\n{reset};\nSET GLOBAL gtid_purged = {};\nCHANGE REPLICATION SOURCE TO {target}, SOURCE_AUTO_POSITION=1, GET_SOURCE_PUBLIC_KEY=1, SOURCE_CONNECT_RETRY=5;\nSTART REPLICA;\n",
                    lit(gtid)
                ),
                None => format!(
                    "STOP REPLICA;\nCHANGE REPLICATION SOURCE TO {target}, SOURCE_LOG_FILE={}, SOURCE_LOG_POS={}, GET_SOURCE_PUBLIC_KEY=1, SOURCE_CONNECT_RETRY=5;\nSTART REPLICA;\n",
                    lit(&pos.file),
                    pos.position
                ),
            }
        }
    };
    format!("{ESCAPES_ON}{statements}")
}

/// Coordinates captured at restore/clone time, else the tool's own file in the data dir.
pub fn read_coordinates(datadir: &Path) -> Result<(BinlogPosition, Option<String>)> {
    let restored = datadir.join(RESTORED);
    if let Ok(bytes) = std::fs::read(&restored) {
        let meta: BackupMetadata =
            serde_json::from_slice(&bytes).map_err(|e| Error::NoCoordinates {
                path: restored.clone(),
                detail: e.to_string(),
            })?;
        return meta
            .binlog
            .map(|b| (b, meta.server_version))
            .ok_or_else(|| Error::NoCoordinates {
                path: restored,
                detail: "the backup has no binlog position (was binary logging off on the source?)"
                    .into(),
            });
    }
    for name in ["xtrabackup_binlog_info", "mariadb_backup_binlog_info"] {
        if let Ok(text) = std::fs::read_to_string(datadir.join(name)) {
            return parse_binlog_info(&text).map(|b| (b, None)).ok_or_else(|| {
                Error::NoCoordinates {
                    path: datadir.join(name),
                    detail: "unreadable".into(),
                }
            });
        }
    }
    Err(Error::NoCoordinates {
        path: datadir.to_path_buf(),
        detail: "this data dir was not restored or cloned by mysql-backup".into(),
    })
}

pub enum ReplicationOutcome {
    AlreadyConfigured,
    Configured(BinlogPosition),
}

/// Waits for the local server, configures replication once, writes the marker.
pub async fn configure(
    profile: &ToolProfile,
    local: &DbConnection,
    datadir: &Path,
    source: &SourceSettings,
    wait: Duration,
) -> Result<ReplicationOutcome> {
    let marker = datadir.join(REPLICATION_CONFIGURED);
    if marker.exists() {
        tracing::info!(
            "replication already configured ({} exists)",
            marker.display()
        );
        return Ok(ReplicationOutcome::AlreadyConfigured);
    }
    let (pos, server_version) = read_coordinates(datadir)?;
    let sql = replication_sql(profile.family, server_version.as_deref(), &pos, source);
    let deadline = Instant::now() + wait;
    loop {
        match run_sql(profile, local, "SELECT 1;").await {
            Ok(()) => break,
            Err(e @ Error::AccessDenied { .. }) => return Err(e),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(e) => {
                tracing::info!("waiting for the local server: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    run_sql(profile, local, &sql).await?;
    std::fs::write(
        &marker,
        format!(
            "{}\t{}\t{}\n",
            pos.file,
            pos.position,
            pos.gtid.as_deref().unwrap_or("")
        ),
    )
    .map_err(|e| Error::io(&marker, e))?;
    tracing::info!(file = %pos.file, position = pos.position, gtid = ?pos.gtid, "replication configured");
    Ok(ReplicationOutcome::Configured(pos))
}

/// Runs SQL through the client binary; statements (with the replication password) go through
/// stdin, credentials through the defaults file.
pub async fn run_sql(profile: &ToolProfile, db: &DbConnection, sql: &str) -> Result<()> {
    let defaults = db.defaults_file()?;
    let mut arg = std::ffi::OsString::from("--defaults-extra-file=");
    arg.push(defaults.path());
    let mut child = tokio::process::Command::new(&profile.client)
        .arg(arg)
        .arg("--batch")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::ToolMissing {
                tool: profile.client.clone(),
                package: if profile.family == Family::Mariadb {
                    "mariadb-client"
                } else {
                    "mysql-client"
                },
            },
            _ => Error::io(&profile.client, e),
        })?;
    let mut stdin = child.stdin.take().expect("piped");
    let _ = stdin.write_all(sql.as_bytes()).await;
    drop(stdin);
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| Error::io(&profile.client, e))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(profile.classify_failure(&profile.client, &out.status.to_string(), &stderr))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> SourceSettings {
        SourceSettings {
            host: "mysql-0.mysql".into(),
            port: 3306,
            user: "repl".into(),
            password: "it's".into(),
        }
    }

    #[test]
    fn mariadb_uses_the_gtid_when_there_is_one() {
        let pos = parse_binlog_info("bin.000001\t1079\t0-1-5\n").unwrap();
        let sql = replication_sql(Family::Mariadb, None, &pos, &source());
        assert!(
            sql.contains("SET GLOBAL gtid_slave_pos = '0-1-5';"),
            "{sql}"
        );
        assert!(sql.contains("MASTER_HOST='mysql-0.mysql', MASTER_PORT=3306, MASTER_USER='repl', MASTER_PASSWORD='it\\'s'"), "{sql}");
        assert!(sql.contains("MASTER_USE_GTID=slave_pos") && sql.ends_with("START SLAVE;\n"));
        let no_gtid = parse_binlog_info("bin.000002\t4\n").unwrap();
        let sql = replication_sql(Family::Mariadb, None, &no_gtid, &source());
        assert!(
            sql.contains("MASTER_LOG_FILE='bin.000002', MASTER_LOG_POS=4"),
            "{sql}"
        );
    }

    #[test]
    fn literals_escape_everything_and_escapes_are_on_first() {
        assert_eq!(lit("a'b\\c\nd\0"), r"'a\'b\\c\nd\0'");
        let pos = parse_binlog_info("bin.000001\t1079\t0-1-5\n").unwrap();
        let sql = replication_sql(Family::Mariadb, None, &pos, &source());
        assert!(sql.starts_with(ESCAPES_ON), "{sql}");
        assert!(
            !ESCAPES_ON.contains('\\'),
            "parses with or without backslash escapes"
        );
    }

    #[test]
    fn mysql_8_uses_auto_position_and_the_right_reset() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/percona-8.0/xtrabackup_binlog_info"
        ))
        .unwrap();
        let pos = parse_binlog_info(&text).unwrap();
        let sql = replication_sql(Family::Percona, Some("8.0.35"), &pos, &source());
        assert!(sql.contains("RESET MASTER;"), "{sql}");
        assert!(
            sql.contains(&format!(
                "SET GLOBAL gtid_purged = '{}';",
                pos.gtid.clone().unwrap()
            )),
            "{sql}"
        );
        assert!(sql.contains("SOURCE_AUTO_POSITION=1") && sql.ends_with("START REPLICA;\n"));
        let sql = replication_sql(Family::Percona, Some("8.4.3"), &pos, &source());
        assert!(sql.contains("RESET BINARY LOGS AND GTIDS;"), "{sql}");
    }
}
