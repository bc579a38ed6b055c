//! Which data dir a backup comes from. InnoDB's log sequence numbers (LSNs) only compare within
//! one history of one data dir: an incremental backup "since LSN N" taken from another data dir
//! (a replica re-cloned, a restore) would silently miss every page that changed there before N.
//! So each data dir carries a random lineage id in [`LINEAGE_FILE`]; a backup records it, and an
//! incremental is taken only from a data dir with the lineage of its base.
//!
//! A data dir gets a new id when mysql-backup restores or clones into it (its LSN history starts
//! from the backup's, then diverges), and when it has none (a server initialised by its image).
//! The file also lists the end LSNs of the last backups taken of this data dir
//! ([`record_end`]): an incremental is taken only from an LSN the data dir itself ended a backup
//! at, so a data dir rewound to an older copy of itself (a volume snapshot restored, which brings
//! back the file as it was) does not build on backups of the history it lost.

use std::fmt;
use std::path::Path;

use crate::{Error, Result};

/// In the data dir's root, beside the server's files; the server ignores it.
pub const LINEAGE_FILE: &str = ".mysql-backup-lineage";
/// How many backup end LSNs the file keeps (far more than any chain's length).
const ENDS_KEPT: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lineage(String);

impl Lineage {
    /// A new random id (128 bits, hex).
    pub fn new_random() -> Lineage {
        let bytes: [u8; 16] = rand::random();
        Lineage(hex::encode(bytes))
    }

    pub fn parse(text: &str) -> Option<Lineage> {
        let text = text.trim();
        (text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| Lineage(text.to_ascii_lowercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The data dir's lineage, created (and synced) when it has none or an unreadable one.
    pub fn of_datadir(datadir: &Path) -> Result<Lineage> {
        Ok(read(datadir)?.0)
    }

    /// Gives `datadir` a new lineage (and no backup ends).
    pub fn renew(datadir: &Path) -> Result<Lineage> {
        let lineage = Lineage::new_random();
        write(datadir, &lineage, &[])?;
        Ok(lineage)
    }
}

/// The data dir's lineage and the end LSNs of its last backups (oldest first); a new lineage
/// when it has none or an unreadable one.
pub fn read(datadir: &Path) -> Result<(Lineage, Vec<u64>)> {
    let path = datadir.join(LINEAGE_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let mut lines = text.lines();
            if let Some(lineage) = lines.next().and_then(Lineage::parse) {
                let ends = lines
                    .filter_map(|l| l.strip_prefix("backup-end "))
                    .filter_map(|lsn| lsn.trim().parse().ok())
                    .collect();
                return Ok((lineage, ends));
            }
            tracing::warn!("{} is not a lineage id; writing a new one", path.display());
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(&path, e)),
    }
    Ok((Lineage::renew(datadir)?, Vec::new()))
}

/// Records that a backup of `datadir` (of lineage `lineage`) ended at `lsn`, so an incremental
/// may later start there. Nothing is recorded if the data dir's lineage changed meanwhile.
pub fn record_end(datadir: &Path, lineage: &Lineage, lsn: u64) -> Result<()> {
    let (current, mut ends) = read(datadir)?;
    if current != *lineage {
        return Ok(());
    }
    if !ends.contains(&lsn) {
        ends.push(lsn);
    }
    let from = ends.len().saturating_sub(ENDS_KEPT);
    write(datadir, lineage, &ends[from..])
}

/// Written to a temporary name, synced, renamed.
fn write(datadir: &Path, lineage: &Lineage, ends: &[u64]) -> Result<()> {
    let path = datadir.join(LINEAGE_FILE);
    // Its own temporary name: a `backup` and a `serve` on one data dir may write at once.
    let suffix: u64 = rand::random();
    let temporary = datadir.join(format!("{LINEAGE_FILE}.{suffix:016x}.new"));
    let mut text = format!("{lineage}\n");
    for lsn in ends {
        text.push_str(&format!("backup-end {lsn}\n"));
    }
    let written = (|| {
        use std::io::Write;
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, &path)?;
        std::fs::File::open(datadir)?.sync_all()
    })();
    written.map_err(|e| Error::io(&path, e))
}

impl fmt::Display for Lineage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_dir_keeps_its_lineage_until_renewed() {
        let dir = tempfile::tempdir().unwrap();
        let first = Lineage::of_datadir(dir.path()).unwrap();
        assert_eq!(Lineage::of_datadir(dir.path()).unwrap(), first);
        let renewed = Lineage::renew(dir.path()).unwrap();
        assert_ne!(renewed, first);
        assert_eq!(Lineage::of_datadir(dir.path()).unwrap(), renewed);
        std::fs::write(dir.path().join(LINEAGE_FILE), "garbage").unwrap();
        let replaced = Lineage::of_datadir(dir.path()).unwrap();
        assert_ne!(replaced, renewed);
        assert_eq!(Lineage::parse(replaced.as_str()), Some(replaced));
    }

    #[test]
    fn backup_ends_are_kept_per_lineage_and_a_renewal_forgets_them() {
        let dir = tempfile::tempdir().unwrap();
        let lineage = Lineage::of_datadir(dir.path()).unwrap();
        for lsn in [100, 200, 200, 300] {
            record_end(dir.path(), &lineage, lsn).unwrap();
        }
        assert_eq!(
            read(dir.path()).unwrap(),
            (lineage.clone(), vec![100, 200, 300])
        );
        for lsn in 1000..1100 {
            record_end(dir.path(), &lineage, lsn).unwrap();
        }
        let (_, ends) = read(dir.path()).unwrap();
        assert_eq!((ends.len(), ends[0], ends[63]), (64, 1036, 1099));
        // Another lineage's end is not recorded; a renewed data dir has none.
        record_end(dir.path(), &Lineage::new_random(), 5).unwrap();
        assert!(!read(dir.path()).unwrap().1.contains(&5));
        let renewed = Lineage::renew(dir.path()).unwrap();
        assert_eq!(read(dir.path()).unwrap(), (renewed, vec![]));
    }
}
