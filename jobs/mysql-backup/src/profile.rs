//! Tool profiles. The backup tool must match the server family (Percona XtraBackup cannot read
//! MariaDB 10.3+ redo logs, mariadb-backup cannot read MySQL 8); only the xbstream container is
//! shared.

use std::ffi::OsString;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// `mariadb-backup` + `mbstream`, MariaDB servers.
    Mariadb,
    /// Percona XtraBackup 8.x (`xtrabackup` + `xbstream`), MySQL 8.0 / 8.4 and Percona Server.
    Percona,
}

/// Everything that differs between the two tool families.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolProfile {
    pub family: Family,
    pub backup_tool: String,
    pub extractor: String,
    /// SQL client used by `configure-replication`.
    pub client: String,
}

/// Where a `--prepare` stands in a chain: the full backup (no incremental dir) or one of its
/// incrementals, and whether more follow.
#[derive(Debug, Clone, Copy)]
pub struct PrepareStep<'a> {
    pub incremental_dir: Option<&'a Path>,
    pub last: bool,
}

impl PrepareStep<'_> {
    /// A full backup restored alone (or cloned).
    pub const ALONE: PrepareStep<'static> = PrepareStep {
        incremental_dir: None,
        last: true,
    };
}

/// What a backup run needs besides credentials.
#[derive(Debug, Clone, Default)]
pub struct BackupToolOptions {
    /// Server data directory (the tool reads files from it).
    pub datadir: Option<std::path::PathBuf>,
    /// Copy threads (`--parallel`); chunks of different files then interleave in the stream.
    pub parallel: Option<u32>,
    /// Write `xtrabackup_slave_info` (backing up a replica).
    pub replica_info: bool,
    /// Copy only the pages changed since this LSN (`--incremental-lsn`).
    pub incremental_lsn: Option<u64>,
    /// Passed through verbatim, after ours.
    pub extra_args: Vec<String>,
}

impl ToolProfile {
    pub fn new(family: Family) -> ToolProfile {
        match family {
            Family::Mariadb => ToolProfile {
                family,
                backup_tool: "mariadb-backup".into(),
                extractor: "mbstream".into(),
                client: "mariadb".into(),
            },
            Family::Percona => ToolProfile {
                family,
                backup_tool: "xtrabackup".into(),
                extractor: "xbstream".into(),
                client: "mysql".into(),
            },
        }
    }

    /// `auto`: mariadb-backup when installed, else xtrabackup.
    pub fn detect() -> ToolProfile {
        if on_path("mariadb-backup") || !on_path("xtrabackup") {
            ToolProfile::new(Family::Mariadb)
        } else {
            ToolProfile::new(Family::Percona)
        }
    }

    pub fn package(&self) -> &'static str {
        match self.family {
            Family::Mariadb => "mariadb-backup",
            Family::Percona => "percona-xtrabackup-80 (repo.percona.com)",
        }
    }

    /// `--defaults-extra-file` must come first: both tools ignore it anywhere else.
    pub fn backup_args(
        &self,
        defaults_file: &Path,
        target_dir: &Path,
        o: &BackupToolOptions,
    ) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            flag("--defaults-extra-file=", defaults_file),
            "--backup".into(),
            "--stream=xbstream".into(),
            flag("--target-dir=", target_dir),
        ];
        if let Some(datadir) = &o.datadir {
            args.push(flag("--datadir=", datadir));
        }
        if let Some(n) = o.parallel {
            args.push(format!("--parallel={n}").into());
        }
        if o.replica_info {
            args.push("--slave-info".into());
        }
        if let Some(lsn) = o.incremental_lsn {
            args.push(format!("--incremental-lsn={lsn}").into());
        }
        args.extend(o.extra_args.iter().map(OsString::from));
        args
    }

    /// `--no-defaults` keeps the machine's my.cnf out: the prepared files must only depend on
    /// the backup's own `backup-my.cnf`. `step` says where in a chain this prepare is.
    pub fn prepare_args(
        &self,
        target_dir: &Path,
        use_memory: Option<&str>,
        step: PrepareStep<'_>,
    ) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "--no-defaults".into(),
            "--prepare".into(),
            flag("--target-dir=", target_dir),
        ];
        if let Some(dir) = step.incremental_dir {
            args.push(flag("--incremental-dir=", dir));
        }
        if let Some(mem) = use_memory {
            args.push(format!("--use-memory={mem}").into());
        }
        if self.family == Family::Percona && !step.last {
            // XtraBackup must not roll back uncommitted transactions before the last
            // incremental is applied; mariadb-backup (10.2+) needs no such flag.
            args.push("--apply-log-only".into());
            return args;
        }
        if self.family == Family::Percona {
            // Prepared-but-uncommitted XA transactions would otherwise block the server start.
            args.push("--rollback-prepared-trx".into());
        }
        args
    }

    pub fn extract_args(&self, dir: &Path, parallel: Option<u32>) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["-x".into(), "-C".into(), dir.into()];
        if let Some(n) = parallel {
            args.push(format!("--parallel={n}").into());
        }
        args
    }

    /// Turns a failed run's exit status and stderr tail into the error a user can act on.
    pub fn classify_failure(&self, tool: &str, status: &str, tail: &str) -> Error {
        let has = |needles: &[&str]| needles.iter().any(|n| tail.contains(n));
        let last_line = tail
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .to_string();
        let detail = tail
            .lines()
            .rev()
            .find(|l| {
                let l = l.to_ascii_lowercase();
                l.contains("error")
                    || l.contains("failed")
                    || l.contains("denied")
                    || l.contains("can't")
            })
            .map(|l| l.trim().to_string())
            .unwrap_or(last_line);
        let tool = tool.to_string();
        if has(&["Access denied"]) {
            Error::AccessDenied { tool, detail }
        } else if has(&[
            "No space left",
            "Errcode: 28",
            "errno: 28",
            "error 28",
            "(errno 28",
        ]) {
            Error::DiskFull {
                during: format!("running {tool}"),
                detail,
            }
        } else if has(&[
            "Can't connect",
            "Lost connection",
            "Connection refused",
            "Unknown MySQL server host",
        ]) {
            Error::ServerDown { tool, detail }
        } else if has(&[
            "Unsupported server version",
            "Unknown redo log format",
            "Unsupported redo log format",
            "unsupported redo log",
            "This version of Percona XtraBackup can only perform backups",
        ]) {
            Error::WrongToolFamily { tool, detail }
        } else {
            Error::ToolFailed {
                tool,
                status: status.to_string(),
                tail: tail
                    .lines()
                    .rev()
                    .take(5)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join(" | "),
            }
        }
    }
}

fn flag(name: &str, path: &Path) -> OsString {
    let mut s = OsString::from(name);
    s.push(path.as_os_str());
    s
}

pub fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(tool).is_file()))
}

#[cfg(test)]
mod tests;
