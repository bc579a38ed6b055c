//! Restore to a point: which full backup to start from and which archived binlog files carry
//! the transactions from it to the point. Pure: decided from the catalog and the archive's
//! manifests before the data dir is touched, so a point the archive cannot reach is refused
//! first, naming why.
//!
//! Rules, in order:
//! 1. **Base**: a complete backup with a GTID state, before the point (for a GTID, its state
//!    has not reached it in its domain; for a time, it completed at or before it). The newest
//!    first; an older one only when rules 2-4 refuse every newer one (its file was never
//!    archived, say), and then the refusal named is the newest's.
//! 2. **Start file**: the archived file whose GTID range holds the backup's GTID state (its
//!    start state is at or before it, its end state at or after it, in every domain): by GTIDs,
//!    not by the backup's binlog file name, so a backup taken on a replica (whose binlog
//!    coordinates are its own) continues in the primary's archive. When several do (a restored
//!    server repeats sequence numbers), the newest created before the backup completed.
//! 3. **Chain**: a file is followed by the first later file whose recorded start state is its
//!    end state (per domain), else (a failover: the new primary's files) by the newest other
//!    server's file, not older than the chain's start, that starts at or before it and holds
//!    transactions after it, written later than its last; never by a file of the
//!    same server that starts before its end (a fork: the server was restored, or lost
//!    transactions in a crash); none: the archive ends (a gap if the file was complete). The
//!    replay checks that each transaction is the next one.
//! 4. **Reached**: the chain holds the point: the GTID's transaction began in it, or an event at
//!    or after the time was archived.

use chrono::{DateTime, Utc};

use crate::binlog::{Gtid, GtidState};
use crate::binlog_archive::{Archive, ArchivedFile};
use crate::catalog::Backup;
use crate::metadata::BinlogPosition;

/// Where a replay stops: before this transaction, or before the first transaction at or after
/// this time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    BeforeGtid(Gtid),
    BeforeTime(DateTime<Utc>),
}

impl std::fmt::Display for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Point::BeforeGtid(g) => write!(f, "just before transaction {g}"),
            Point::BeforeTime(t) => write!(f, "just before {}", t.to_rfc3339()),
        }
    }
}

/// The full backup and the archived files to replay after it.
#[derive(Debug, Clone)]
pub struct ReplayPlan {
    pub base: Backup,
    pub base_state: GtidState,
    pub files: Vec<ArchivedFile>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Unreachable {
    #[error("no complete backup with binlog coordinates was taken before the point{oldest}")]
    NoBackupBefore { oldest: String },
    #[error(
        "no archived binlog file holds the backup {backup}'s position {position}: was the \
         archiver running when it was taken?"
    )]
    NoStartFile { position: String, backup: String },
    #[error(
        "the archive ends before the point: its last transaction is {last_gtid} at {last_time}{gap}"
    )]
    ArchiveEnds {
        last_gtid: String,
        last_time: String,
        gap: String,
    },
}

pub fn plan(
    backups: &[Backup],
    archive: &Archive,
    point: Point,
) -> Result<ReplayPlan, Unreachable> {
    let candidates = bases_before(backups, point)?;
    let mut first_refusal = None;
    for (base, base_state, position) in candidates {
        let position = format!("{} {} ({})", position.file, position.position, base_state);
        let planned = find_start_file(archive, &base, &base_state, &position)
            .map(|start| follow_chain(archive, start))
            .and_then(|files| check_reached(&files, point).map(|()| files));
        match planned {
            Ok(files) => {
                return Ok(ReplayPlan {
                    base,
                    base_state,
                    files,
                });
            }
            Err(e) => {
                first_refusal.get_or_insert(e);
            }
        }
    }
    Err(first_refusal.unwrap_or(Unreachable::NoBackupBefore {
        oldest: " (there is none)".into(),
    }))
}

/// Rule 1: the bases, newest first. `backups` are newest first (as the catalog gives them).
fn bases_before(
    backups: &[Backup],
    point: Point,
) -> Result<Vec<(Backup, GtidState, BinlogPosition)>, Unreachable> {
    let mut bases = Vec::new();
    for backup in backups {
        // Without a GTID state nothing says which transactions the backup holds.
        let Some(binlog) = &backup.manifest.backup.binlog else {
            continue;
        };
        let Some(Ok(state)) = binlog.gtid.as_deref().map(GtidState::parse) else {
            continue;
        };
        let before = match point {
            Point::BeforeGtid(g) => !state.reaches(g),
            Point::BeforeTime(t) => backup.manifest.completion_time <= t,
        };
        if before {
            bases.push((backup.clone(), state, binlog.clone()));
        }
    }
    if !bases.is_empty() {
        return Ok(bases);
    }
    let oldest = backups
        .last()
        .map(|b| {
            format!(
                " (the oldest, {}, completed {})",
                b.key,
                b.manifest.completion_time.to_rfc3339()
            )
        })
        .unwrap_or_else(|| " (there is none)".into());
    Err(Unreachable::NoBackupBefore { oldest })
}

/// Rule 2.
fn find_start_file<'a>(
    archive: &'a Archive,
    base: &Backup,
    base_state: &GtidState,
    position: &str,
) -> Result<&'a ArchivedFile, Unreachable> {
    let holds_base = |f: &ArchivedFile| {
        let (start, end) = (f.state_at_start(), f.state_at_end());
        base_state.domains().all(|domain| {
            let at = base_state.last_seq(domain).unwrap_or(0);
            start.last_seq(domain).unwrap_or(0) <= at && end.last_seq(domain).unwrap_or(0) >= at
        })
    };
    archive
        .files
        .iter()
        .rev()
        .find(|f| f.created() <= base.manifest.completion_time && holds_base(f))
        .ok_or_else(|| Unreachable::NoStartFile {
            position: position.to_string(),
            backup: base.key.clone(),
        })
}

/// Rule 3.
fn follow_chain(archive: &Archive, start: &ArchivedFile) -> Vec<ArchivedFile> {
    let mut chain = vec![start.clone()];
    let mut visited = std::collections::BTreeSet::new();
    let mut at = archive.files.iter().position(|f| f.dir == start.dir);
    while let Some(index) = at {
        visited.insert(index);
        let current = &archive.files[index];
        let end_state = current.state_at_end();
        // The same server's next file starts exactly where this one ended. Otherwise, after a
        // failover, another server's file (the promoted replica's, possibly older than this
        // one) starts at or before it and goes beyond. Never the same server's file that starts
        // before: that is a fork (the server restored, or it lost transactions in a crash).
        at = archive.files[index + 1..]
            .iter()
            .position(|f| f.state_at_start().same_position(&end_state))
            .map(|offset| index + 1 + offset)
            .or_else(|| {
                // The newest such file whose last transaction is later than this file's, and
                // none older than the chain's start: an earlier history's files (before a
                // restore) reuse the sequence numbers, but not the times.
                archive
                    .files
                    .iter()
                    .enumerate()
                    .filter(|(i, f)| {
                        !visited.contains(i)
                            && f.server_id() != current.server_id()
                            && f.created() >= start.created()
                            && f.last_event_time() > current.last_event_time()
                            && continues(f, &end_state)
                    })
                    .max_by_key(|(i, f)| (f.created(), *i))
                    .map(|(i, _)| i)
            });
        if let Some(next) = at {
            chain.push(archive.files[next].clone());
        }
    }
    chain
}

/// `file` starts at or before `end` in every domain and holds a transaction after it.
fn continues(file: &ArchivedFile, end: &GtidState) -> bool {
    let (start, file_end) = (file.state_at_start(), file.state_at_end());
    let seq = |state: &GtidState, domain| state.last_seq(domain).unwrap_or(0);
    let starts_before = start
        .domains()
        .chain(end.domains())
        .all(|d| seq(&start, d) <= seq(end, d));
    starts_before && file_end.domains().any(|d| seq(&file_end, d) > seq(end, d))
}

/// Rule 4.
fn check_reached(chain: &[ArchivedFile], point: Point) -> Result<(), Unreachable> {
    let last = &chain[chain.len() - 1];
    let reached = match point {
        Point::BeforeGtid(g) => last.state_at_end().reaches(g),
        Point::BeforeTime(t) => chain
            .iter()
            .filter_map(|f| f.last_event_time())
            .any(|e| e >= t),
    };
    if reached {
        return Ok(());
    }
    let last_gtid = chain
        .iter()
        .rev()
        .find_map(|f| f.last_gtid())
        .unwrap_or("(none)")
        .to_string();
    let last_time = chain
        .iter()
        .rev()
        .find_map(|f| f.last_event_time())
        .map_or_else(|| "(no event)".to_string(), |t| t.to_rfc3339());
    let gap = if last.complete() {
        format!(
            "; {} is complete but no archived file continues from its end state {} (a gap: \
             binlogs purged before they were archived, or the archiver stopped)",
            last.name(),
            last.state_at_end()
        )
    } else {
        format!(" ({} is still being archived)", last.name())
    };
    Err(Unreachable::ArchiveEnds {
        last_gtid,
        last_time,
        gap,
    })
}

#[cfg(test)]
mod tests;
