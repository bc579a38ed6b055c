//! The metadata files a backup carries: binlog coordinates, LSN checkpoints, tool and server
//! versions. Both naming schemes are read: `xtrabackup_*` (Percona, MariaDB before 11.1) and
//! `mariadb_backup_*` (MariaDB 11.1+).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BinlogPosition {
    pub file: String,
    pub position: u64,
    /// MySQL: a UUID set (`uuid:1-5,uuid2:1-9`); MariaDB: `domain-server-seq[,...]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtid: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupMetadata {
    pub tool_name: Option<String>,
    pub tool_version: Option<String>,
    pub server_version: Option<String>,
    pub backup_type: Option<String>,
    pub from_lsn: Option<u64>,
    pub to_lsn: Option<u64>,
    pub last_lsn: Option<u64>,
    pub binlog: Option<BinlogPosition>,
    /// `xtrabackup_slave_info` as written (with `--slave-info` on a replica).
    pub replica_info: Option<String>,
}

/// Finds `<prefix>_<suffix>` under either naming scheme.
fn file<'a>(files: &'a BTreeMap<String, Vec<u8>>, suffix: &str) -> Option<&'a str> {
    ["xtrabackup_", "mariadb_backup_"]
        .iter()
        .find_map(|prefix| {
            files
                .get(&format!("{prefix}{suffix}"))
                .and_then(|b| std::str::from_utf8(b).ok())
        })
}

/// `key = value` lines (xtrabackup_info, xtrabackup_checkpoints).
pub fn key_values(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// `file<TAB>position[<TAB>gtid]`; a long MySQL GTID set continues on following lines.
/// Fields are split on any run of whitespace: the tools write tabs, copies (and Percona's
/// documented examples) have spaces.
pub fn parse_binlog_info(text: &str) -> Option<BinlogPosition> {
    let text = text.trim();
    let (file, rest) = text.split_once(char::is_whitespace)?;
    let rest = rest.trim_start();
    let (position, gtid) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let position = position.parse().ok()?;
    let gtid: String = gtid.split_whitespace().collect();
    Some(BinlogPosition {
        file: file.to_string(),
        position,
        gtid: (!gtid.is_empty()).then_some(gtid),
    })
}

impl BackupMetadata {
    pub fn from_files(files: &BTreeMap<String, Vec<u8>>) -> BackupMetadata {
        let info = file(files, "info").map(key_values).unwrap_or_default();
        let checkpoints = file(files, "checkpoints")
            .map(key_values)
            .unwrap_or_default();
        let lsn = |k: &str| checkpoints.get(k).and_then(|v| v.parse().ok());
        BackupMetadata {
            tool_name: info.get("tool_name").cloned(),
            tool_version: info.get("tool_version").cloned(),
            server_version: info.get("server_version").cloned(),
            backup_type: checkpoints.get("backup_type").cloned(),
            from_lsn: lsn("from_lsn"),
            to_lsn: lsn("to_lsn"),
            last_lsn: lsn("last_lsn"),
            binlog: file(files, "binlog_info").and_then(parse_binlog_info),
            replica_info: file(files, "slave_info")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        }
    }

    /// The files the tools write last; a stream without them did not finish, whatever the
    /// exit codes said.
    pub fn missing_final_files(files: &BTreeMap<String, Vec<u8>>) -> Vec<&'static str> {
        let mut missing = Vec::new();
        if file(files, "checkpoints").is_none() {
            missing.push("xtrabackup_checkpoints");
        }
        if file(files, "info").is_none() {
            missing.push("xtrabackup_info");
        }
        missing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn reads_mariadb_10_11_metadata_as_written_by_the_tool() {
        let f = files(&[
            ("xtrabackup_binlog_info", "bin.000001\t1079\t0-1-5\n"),
            (
                "xtrabackup_checkpoints",
                "backup_type = full-backuped\nfrom_lsn = 0\nto_lsn = 44848\nlast_lsn = 48186\n",
            ),
            (
                "xtrabackup_info",
                "tool_name = mariadb-backup\ntool_version = 10.11.19-MariaDB\nserver_version = 10.11.19-MariaDB-0+deb12u1-log\n",
            ),
        ]);
        let m = BackupMetadata::from_files(&f);
        assert_eq!(m.tool_name.as_deref(), Some("mariadb-backup"));
        assert_eq!(
            m.server_version.as_deref(),
            Some("10.11.19-MariaDB-0+deb12u1-log")
        );
        assert_eq!(
            (m.from_lsn, m.to_lsn, m.last_lsn),
            (Some(0), Some(44848), Some(48186))
        );
        let b = m.binlog.unwrap();
        assert_eq!(
            (b.file.as_str(), b.position, b.gtid.as_deref()),
            ("bin.000001", 1079, Some("0-1-5"))
        );
        assert!(BackupMetadata::missing_final_files(&f).is_empty());
    }

    #[test]
    fn reads_the_mariadb_11_1_names() {
        let f = files(&[
            (
                "mariadb_backup_binlog_info",
                "mysql-bin.000007\t342\t0-1-100,1-2-7\n",
            ),
            ("mariadb_backup_checkpoints", "to_lsn = 5\n"),
            ("mariadb_backup_info", "tool_name = mariadb-backup\n"),
        ]);
        let m = BackupMetadata::from_files(&f);
        assert_eq!(m.binlog.unwrap().gtid.as_deref(), Some("0-1-100,1-2-7"));
        assert_eq!(m.to_lsn, Some(5));
        assert!(BackupMetadata::missing_final_files(&f).is_empty());
    }

    #[test]
    fn binlog_without_gtid_and_missing_files() {
        let b = parse_binlog_info("bin.000002\t4\n").unwrap();
        assert_eq!(b.gtid, None);
        assert_eq!(parse_binlog_info("garbage"), None);
        let f = files(&[("xtrabackup_info", "x = y")]);
        assert_eq!(
            BackupMetadata::missing_final_files(&f),
            ["xtrabackup_checkpoints"]
        );
    }

    /// The multi-line GTID form: xtrabackup writes `file\tposition\tgtid_executed\n`, and MySQL
    /// separates the UUID sets of `gtid_executed` with `,\n`. Constructed from that format, not
    /// recorded (no citable recorded sample was found; see tests/data/percona-8.0/SOURCE.md).
    #[test]
    fn parse_binlog_info_spans_lines_and_whitespace() {
        let b = parse_binlog_info(
            "binlog.000003\t197\t3e11fa47-71ca-11e1-9e33-c80aa9429562:1-23,\n9a511b7b-7059-11ed-9ff2-0242ac120002:1-4\n",
        )
        .unwrap();
        assert_eq!((b.file.as_str(), b.position), ("binlog.000003", 197));
        assert_eq!(
            b.gtid.as_deref(),
            Some(
                "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-23,9a511b7b-7059-11ed-9ff2-0242ac120002:1-4"
            )
        );
        let b = parse_binlog_info("bin.000009   77\n").unwrap();
        assert_eq!(
            (b.file.as_str(), b.position, b.gtid),
            ("bin.000009", 77, None)
        );
        assert_eq!(parse_binlog_info("bin.000009\n"), None);
        assert_eq!(parse_binlog_info("bin.000009 x 0-1-2"), None);
    }

    /// Recorded Percona XtraBackup samples (tests/data/percona-8.0, sources in SOURCE.md). They
    /// come from three different backups, so each file is checked on its own.
    #[test]
    fn reads_percona_8_0_recorded_samples() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/percona-8.0");
        let f: BTreeMap<String, Vec<u8>> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().into_string().unwrap(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .filter(|(name, _)| name.starts_with("xtrabackup_"))
            .collect();
        assert_eq!(f.len(), 3, "{:?}", f.keys());
        let m = BackupMetadata::from_files(&f);
        // xtrabackup_info (wal-g's recorded 8.0.35 stream backup)
        assert_eq!(m.tool_name.as_deref(), Some("xtrabackup"));
        assert_eq!(m.tool_version.as_deref(), Some("8.0.35-35"));
        assert_eq!(m.server_version.as_deref(), Some("8.0.43-34"));
        // xtrabackup_checkpoints (Percona's documented full backup)
        assert_eq!(m.backup_type.as_deref(), Some("full-backuped"));
        assert_eq!(
            (m.from_lsn, m.to_lsn, m.last_lsn),
            (Some(0), Some(1626007), Some(1626007))
        );
        // xtrabackup_binlog_info (Percona's documented GTID backup, space-separated)
        let b = m.binlog.unwrap();
        assert_eq!((b.file.as_str(), b.position), ("mysql-bin.000002", 1232));
        assert_eq!(
            b.gtid.as_deref(),
            Some("c777888a-b6df-11e2-a604-080027635ef5:1-4")
        );
        assert_eq!(m.replica_info, None);
        assert!(BackupMetadata::missing_final_files(&f).is_empty());
        // `key = value` lines: a value with quotes and commas, and an empty value.
        let info = key_values(std::str::from_utf8(&f["xtrabackup_info"]).unwrap());
        assert!(info["binlog_pos"].ends_with("'3f6cd603-8d0b-11f1-8432-d00dc21b3e49:1-2647395'"));
        assert_eq!(info["name"], "");
    }
}
