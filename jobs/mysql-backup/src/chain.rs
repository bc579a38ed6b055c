//! Incremental backup chains, decided from manifests alone (no I/O): which backup a new
//! incremental builds on, whether the source takes it, whether the stream is what was asked
//! for, and whether a chain can be restored.
//!
//! A chain is a full backup and the incrementals that follow it, each holding the pages changed
//! since the one before (`from_lsn` = the base's `to_lsn`). Restoring any backup of a chain
//! needs every backup before it in the chain, so each link is checked by the rules of
//! [`check_link`], in this order: the base is present, it comes from the same data dir
//! (lineage), the LSNs continue, and the base is older.

use std::fmt;

use crate::binlog::GtidState;
pub use crate::error::ChainError;
use crate::lineage::Lineage;
use crate::manifest::{Backup, IncrementalOf};
use crate::metadata::BackupMetadata;

/// What the checkpoints file says of an incremental backup.
pub const INCREMENTAL_TYPE: &str = "incremental";

/// More links than any chain `--max-incrementals` allows: manifests (edited, or with equal
/// times) that loop.
pub const MAX_CHAIN: usize = 1000;

/// Guards a walk down a chain (newest first so far) against manifests that loop.
pub fn check_length(walked: &[Backup]) -> Result<(), ChainError> {
    match walked.first() {
        Some(first) if walked.len() > MAX_CHAIN => Err(ChainError::TooLong {
            limit: MAX_CHAIN,
            backup: first.key.clone(),
        }),
        _ => Ok(()),
    }
}

fn lsn(value: Option<u64>) -> String {
    value.map_or_else(|| "unknown".into(), |v| v.to_string())
}

/// Rule 1: the base an incremental names is a complete backup.
fn base_present<'a>(
    backup: &Backup,
    base_key: &str,
    base: Option<&'a Backup>,
) -> Result<&'a Backup, ChainError> {
    base.ok_or_else(|| ChainError::MissingBase {
        backup: backup.key.clone(),
        base: base_key.to_string(),
    })
}

/// Rule 2: both come from one data dir (LSNs only compare within one).
fn same_data_dir(backup: &Backup, base: &Backup) -> Result<(), ChainError> {
    match (&backup.manifest.lineage, &base.manifest.lineage) {
        (Some(found), Some(expected)) if found == expected => Ok(()),
        (found, expected) => Err(ChainError::OtherDataDir {
            backup: backup.key.clone(),
            base: base.key.clone(),
            found: found.clone().unwrap_or_else(|| "none".into()),
            expected: expected.clone().unwrap_or_else(|| "none".into()),
        }),
    }
}

/// Rule 3: the incremental starts where its base ends, as both the stream and the manifest say.
fn lsn_continues(backup: &Backup, base: &Backup) -> Result<(), ChainError> {
    let from = backup.manifest.backup.from_lsn;
    let recorded = backup.manifest.incremental.as_ref().map(|i| i.base_to_lsn);
    let base_to = base.manifest.backup.to_lsn;
    if from.is_some() && from == base_to && recorded == base_to {
        Ok(())
    } else {
        Err(ChainError::LsnGap {
            backup: backup.key.clone(),
            base: base.key.clone(),
            from: lsn(from),
            base_to: lsn(base_to),
        })
    }
}

/// Rule 4: the base completed before the incremental started (also: no chain loops).
fn base_older(backup: &Backup, base: &Backup) -> Result<(), ChainError> {
    if base.manifest.completion_time <= backup.manifest.start_time {
        Ok(())
    } else {
        Err(ChainError::BaseNotOlder {
            backup: backup.key.clone(),
            base: base.key.clone(),
        })
    }
}

/// Checks the link from an incremental to the backup its manifest names (`None`: not found).
pub fn check_link<'a>(backup: &Backup, base: Option<&'a Backup>) -> Result<&'a Backup, ChainError> {
    let base_key = backup.manifest.base_key(&backup.key).unwrap_or_default();
    let base = base_present(backup, &base_key, base)?;
    same_data_dir(backup, base)?;
    lsn_continues(backup, base)?;
    base_older(backup, base)?;
    Ok(base)
}

/// The chain that restores `backup`, full backup first, every link checked; `backups` are the
/// complete backups the base keys are looked up in.
pub fn resolve<'a>(
    backup: &'a Backup,
    backups: &'a [Backup],
) -> Result<Vec<&'a Backup>, ChainError> {
    let mut chain = vec![backup];
    let mut current = backup;
    while let Some(base_key) = current.manifest.base_key(&current.key) {
        let found = backups.iter().find(|b| b.key == base_key);
        current = check_link(current, found)?;
        chain.push(current);
        if chain.len() > MAX_CHAIN {
            return Err(ChainError::TooLong {
                limit: MAX_CHAIN,
                backup: backup.key.clone(),
            });
        }
    }
    chain.reverse();
    Ok(chain)
}

/// The backup a new incremental would build on, as the client sees the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base {
    pub key: String,
    pub lineage: Lineage,
    pub to_lsn: u64,
    /// Its binlog GTID state, when it recorded one: the incremental's must continue it.
    pub gtid: Option<String>,
}

impl Base {
    /// What the source is asked for to build on this base.
    pub fn request(&self) -> IncrementalRequest {
        IncrementalRequest {
            lineage: self.lineage.clone(),
            from_lsn: self.to_lsn,
        }
    }
}

/// The client's choice (when an incremental was asked for) as the base to ask for, or why not.
pub fn split(choice: Option<Result<Base, FullBecause>>) -> (Option<Base>, Option<FullBecause>) {
    match choice {
        None => (None, None),
        Some(Ok(base)) => (Some(base), None),
        Some(Err(because)) => (None, Some(because)),
    }
}

/// Why a backup asked to be incremental is a full one. Logged, and said in the command's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FullBecause {
    NoBackupYet,
    /// The newest backup's manifest records no lineage or no `to_lsn` (an older mysql-backup).
    NewestUntraceable {
        key: String,
    },
    NewestChainBroken(ChainError),
    ChainComplete {
        key: String,
        incrementals: usize,
    },
    /// The new backup's key is not in the newest backup's directory (a manifest names its base
    /// by its name beside it).
    OtherDirectory {
        key: String,
    },
    /// The source cannot tell its data dir's lineage (no `--datadir`, or not writable).
    SourceLineageUnknown,
    /// The source's data dir is not the one the chain was taken from.
    OtherDataDir {
        chain: String,
        source: String,
    },
    /// The source's data dir has the chain's lineage but never ended a backup at the chain's
    /// LSN: it was rewound to an older copy of itself (a volume snapshot restored).
    NotAnEndHere {
        lsn: u64,
    },
    /// The incremental was taken, but its GTIDs do not continue the base's (see
    /// [`gtid_continues`]): taken again as a full backup.
    GtidsDoNotContinue {
        detail: String,
    },
}

impl fmt::Display for FullBecause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FullBecause::NoBackupYet => write!(f, "there is no backup to build on yet"),
            FullBecause::NewestUntraceable { key } => write!(
                f,
                "the newest backup {key} records no data dir lineage or end LSN (taken by an older mysql-backup)"
            ),
            FullBecause::NewestChainBroken(e) => {
                write!(f, "the newest backup's chain cannot be restored: {e}")
            }
            FullBecause::ChainComplete { key, incrementals } => write!(
                f,
                "the newest backup {key} already ends a chain of {incrementals} incrementals (--max-incrementals)"
            ),
            FullBecause::SourceLineageUnknown => write!(
                f,
                "the source does not know its data dir's lineage (give `backup` or `serve` --datadir, writable)"
            ),
            FullBecause::OtherDirectory { key } => write!(
                f,
                "the newest backup {key} is in another directory than the new backup's key"
            ),
            FullBecause::NotAnEndHere { lsn } => write!(
                f,
                "the source's data dir never ended a backup at the chain's LSN {lsn}: it was rewound (a volume snapshot restored?)"
            ),
            FullBecause::GtidsDoNotContinue { detail } => write!(f, "{detail}"),
            FullBecause::OtherDataDir { chain, source } => write!(
                f,
                "the source's data dir (lineage {source}) is not the one the chain was taken from (lineage {chain}): re-cloned, restored, or another server"
            ),
        }
    }
}

/// The client's choice for a backup to be stored under `new_key`: build on the newest complete
/// backup under the prefix, unless a rule says a full backup, in this order: none yet; it is
/// not beside `new_key`; its manifest cannot be traced; its chain is broken; its chain already
/// holds `max_incrementals`.
pub fn choose_base(
    newest_first: &[Backup],
    max_incrementals: usize,
    new_key: &str,
) -> Result<Base, FullBecause> {
    let Some(newest) = newest_first.first() else {
        return Err(FullBecause::NoBackupYet);
    };
    if IncrementalOf::name_beside(new_key, &newest.key).is_none() {
        return Err(FullBecause::OtherDirectory {
            key: newest.key.clone(),
        });
    }
    let m = &newest.manifest;
    let (Some(lineage), Some(to_lsn)) = (
        m.lineage.as_deref().and_then(Lineage::parse),
        m.backup.to_lsn,
    ) else {
        return Err(FullBecause::NewestUntraceable {
            key: newest.key.clone(),
        });
    };
    let chain = resolve(newest, newest_first).map_err(FullBecause::NewestChainBroken)?;
    let incrementals = chain.len() - 1;
    if incrementals >= max_incrementals {
        return Err(FullBecause::ChainComplete {
            key: newest.key.clone(),
            incrementals,
        });
    }
    Ok(Base {
        key: newest.key.clone(),
        lineage,
        to_lsn,
        gtid: m.backup.binlog.as_ref().and_then(|b| b.gtid.clone()),
    })
}

/// What the source was asked for: the base's lineage and end LSN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncrementalRequest {
    pub lineage: Lineage,
    pub from_lsn: u64,
}

/// What the source takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    Full(Option<FullBecause>),
    Incremental { from_lsn: u64 },
}

/// What the source knows of its data dir: its lineage and the end LSNs of its last backups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceDataDir {
    pub lineage: Lineage,
    pub backup_ends: Vec<u64>,
}

/// The source's decision: an incremental only when its data dir is the base's (its lineage)
/// and ended a backup at the base's LSN (not rewound since).
pub fn decide_at_source(
    request: Option<&IncrementalRequest>,
    here: Option<&SourceDataDir>,
) -> Taken {
    let Some(request) = request else {
        return Taken::Full(None);
    };
    match here {
        None => Taken::Full(Some(FullBecause::SourceLineageUnknown)),
        Some(here) if here.lineage != request.lineage => {
            Taken::Full(Some(FullBecause::OtherDataDir {
                chain: request.lineage.to_string(),
                source: here.lineage.to_string(),
            }))
        }
        Some(here) if !here.backup_ends.contains(&request.from_lsn) => {
            Taken::Full(Some(FullBecause::NotAnEndHere {
                lsn: request.from_lsn,
            }))
        }
        Some(_) => Taken::Incremental {
            from_lsn: request.from_lsn,
        },
    }
}

/// An incremental's binlog GTID state must continue its base's: every domain at least as far.
/// Checked when the base recorded one in MariaDB's form; a data dir re-initialised under an old
/// lineage file starts its GTIDs again and fails here.
pub fn gtid_continues(base: Option<&str>, incremental: Option<&str>) -> Result<(), String> {
    let Some(base_state) = base.and_then(|g| GtidState::parse(g).ok()) else {
        return Ok(());
    };
    let state = incremental.and_then(|g| GtidState::parse(g).ok());
    let behind: Vec<u32> = base_state
        .domains()
        .filter(|d| state.as_ref().and_then(|s| s.last_seq(*d)) < base_state.last_seq(*d))
        .collect();
    if behind.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the source's binlog GTID state {} does not continue the base's {} (domains {behind:?}): its data dir is not the base's history (re-initialised?); remove its {} and take a full backup",
            incremental.unwrap_or("(none)"),
            base.unwrap_or_default(),
            crate::lineage::LINEAGE_FILE
        ))
    }
}

/// The stream's checkpoints must say what was taken: a full backup, or an incremental from the
/// LSN asked for that does not end before it (it would, from a data dir behind the chain).
pub fn check_stream(taken: &Taken, metadata: &BackupMetadata) -> Result<(), String> {
    let kind = metadata.backup_type.as_deref().unwrap_or("unknown");
    match taken {
        Taken::Full(_) if kind != INCREMENTAL_TYPE => Ok(()),
        Taken::Full(_) => Err("a full backup was asked for, the stream is incremental".into()),
        Taken::Incremental { from_lsn } => {
            if kind != INCREMENTAL_TYPE {
                return Err(format!(
                    "an incremental backup was asked for, the stream's type is {kind}"
                ));
            }
            if metadata.from_lsn != Some(*from_lsn) {
                return Err(format!(
                    "the incremental starts at LSN {}, not at the base's {from_lsn}",
                    lsn(metadata.from_lsn)
                ));
            }
            match metadata.to_lsn {
                Some(to) if to >= *from_lsn => Ok(()),
                to => Err(format!(
                    "the incremental ends at LSN {} before its start {from_lsn}: the source's data dir is behind the chain's (restored from a snapshot?); remove its {} and take a full backup",
                    lsn(to),
                    crate::lineage::LINEAGE_FILE
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests;
