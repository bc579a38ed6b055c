//! Which data dir a backup comes from. InnoDB's log sequence numbers (LSNs) only compare within
//! one history of one data dir: an incremental backup "since LSN N" taken from another data dir
//! (a replica re-cloned, a restore) would silently miss every page that changed there before N.
//! So each data dir carries a random lineage id in [`LINEAGE_FILE`]; a backup records it, and an
//! incremental is taken only from a data dir with the lineage of its base.
//!
//! A data dir gets a new id when mysql-backup restores or clones into it (its LSN history starts
//! from the backup's, then diverges), and when it has none (a server initialised by its image).
//! A data dir copied by other means (a volume snapshot restored) keeps the file it had: remove it
//! then, and the next backup of the chain is a full one.

use std::fmt;
use std::path::Path;

use crate::{Error, Result};

/// In the data dir's root, beside the server's files; the server ignores it.
pub const LINEAGE_FILE: &str = ".mysql-backup-lineage";

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
        let path = datadir.join(LINEAGE_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                if let Some(lineage) = Lineage::parse(&text) {
                    return Ok(lineage);
                }
                tracing::warn!("{} is not a lineage id; writing a new one", path.display());
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&path, e)),
        }
        Lineage::renew(datadir)
    }

    /// Gives `datadir` a new lineage: written to a temporary name, synced, renamed.
    pub fn renew(datadir: &Path) -> Result<Lineage> {
        let lineage = Lineage::new_random();
        let path = datadir.join(LINEAGE_FILE);
        let temporary = datadir.join(format!("{LINEAGE_FILE}.new"));
        let written = (|| {
            use std::io::Write;
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(format!("{}\n", lineage.0).as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&temporary, &path)?;
            std::fs::File::open(datadir)?.sync_all()
        })();
        written.map_err(|e| Error::io(&path, e))?;
        Ok(lineage)
    }
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
}
