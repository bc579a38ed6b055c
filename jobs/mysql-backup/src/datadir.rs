//! Data directory states for restore and clone.
//!
//! Work happens in a staging directory inside the data dir (same filesystem, so the final moves
//! are renames), under an "incomplete" marker created first and removed last. A data dir with the
//! marker is never mistaken for an initialised one, whatever a crashed attempt left in it.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

pub const STAGING: &str = ".mysql-backup-staging";
/// Where an incremental backup of a chain is extracted, one at a time, to be applied to staging.
pub const INCREMENTAL: &str = ".mysql-backup-incremental";
pub const INCOMPLETE: &str = ".mysql-backup-incomplete";
/// Backup metadata of the restored data (read by `configure-replication`).
pub const RESTORED: &str = ".mysql-backup-restored.json";
pub const REPLICATION_CONFIGURED: &str = ".mysql-backup-replication-configured";

/// Entries a fresh volume may hold that do not count as data.
fn ignorable(name: &str) -> bool {
    name == "lost+found"
}

#[derive(Debug, PartialEq, Eq)]
pub enum State {
    /// Nothing but ignorable entries (or missing).
    Empty,
    /// Left by an interrupted restore or clone of ours; safe to wipe.
    Incomplete,
    /// Holds data we did not put there, or a finished restore.
    Initialised,
}

fn entries(dir: &Path) -> Result<Vec<String>> {
    match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| {
                e.map(|e| e.file_name().to_string_lossy().into_owned())
                    .map_err(|e| Error::io(dir, e))
            })
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::io(dir, e)),
    }
}

pub fn state(datadir: &Path) -> Result<State> {
    let names = entries(datadir)?;
    if names.iter().any(|n| n == INCOMPLETE) {
        return Ok(State::Incomplete);
    }
    // A staging dir without the marker cannot come from us after the marker was written, but
    // a crash between mkdir and marker write could leave one: it is not data.
    if names
        .iter()
        .all(|n| ignorable(n) || n == STAGING || n == INCREMENTAL)
    {
        Ok(State::Empty)
    } else {
        Ok(State::Initialised)
    }
}

/// An in-progress restore into `datadir`. Dropped before [`Staging::install`] began (the
/// restore's task dropped by SIGTERM, say), it discards what it staged, as a failure does.
pub struct Staging {
    pub datadir: PathBuf,
    pub dir: PathBuf,
    /// The data dir did not exist before; a failed attempt removes it again.
    created: bool,
    /// Installing began or the attempt was discarded: nothing is left for `drop` to undo. A
    /// failed install keeps the marker (its files are half in the data dir).
    settled: bool,
}

impl Staging {
    /// Marks the data dir incomplete and creates an empty staging dir. The caller checked the
    /// state; an Incomplete data dir is wiped first.
    pub fn begin(datadir: &Path) -> Result<Staging> {
        let created = !datadir.exists();
        std::fs::create_dir_all(datadir).map_err(|e| Error::io(datadir, e))?;
        if state(datadir)? != State::Empty {
            wipe(datadir)?;
        }
        let marker = datadir.join(INCOMPLETE);
        std::fs::write(
            &marker,
            b"restore or clone in progress; delete the data dir contents to retry\n",
        )
        .map_err(|e| Error::io(&marker, e))?;
        sync_dir(datadir)?;
        let dir = datadir.join(STAGING);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        }
        std::fs::create_dir(&dir).map_err(|e| Error::io(&dir, e))?;
        Ok(Staging {
            datadir: datadir.to_path_buf(),
            dir,
            created,
            settled: false,
        })
    }

    /// An empty directory for the next incremental of a chain (what the previous one left is
    /// removed first).
    pub fn incremental_dir(&self) -> Result<PathBuf> {
        let dir = self.datadir.join(INCREMENTAL);
        remove_dir_if_present(&dir)?;
        std::fs::create_dir(&dir).map_err(|e| Error::io(&dir, e))?;
        Ok(dir)
    }

    /// Moves the prepared files into the data dir, gives it a new lineage (its LSN history
    /// departs from the backup's source from here on), then removes the marker (last).
    pub fn install(mut self, restored_json: &[u8]) -> Result<()> {
        self.settled = true;
        remove_dir_if_present(&self.datadir.join(INCREMENTAL))?;
        for name in entries(&self.dir)? {
            let from = self.dir.join(&name);
            let to = self.datadir.join(&name);
            std::fs::rename(&from, &to).map_err(|e| Error::io(&to, e))?;
        }
        let info = self.datadir.join(RESTORED);
        std::fs::write(&info, restored_json).map_err(|e| Error::io(&info, e))?;
        crate::lineage::Lineage::renew(&self.datadir)?;
        std::fs::remove_dir(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        sync_dir(&self.datadir)?;
        let marker = self.datadir.join(INCOMPLETE);
        std::fs::remove_file(&marker).map_err(|e| Error::io(&marker, e))?;
        sync_dir(&self.datadir)
    }

    /// After a failure: removes everything this attempt added, leaving the data dir as it was
    /// (empty, or absent if this attempt created it). If even that fails, the marker stays so
    /// nobody starts a server on it.
    pub fn discard(mut self) {
        self.undo();
    }

    fn undo(&mut self) {
        self.settled = true;
        if let Err(e) = remove_dir_if_present(&self.datadir.join(INCREMENTAL)) {
            tracing::warn!("{e}; the data dir stays marked incomplete");
            return;
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(
                "could not remove {}: {e}; the data dir stays marked incomplete",
                self.dir.display()
            );
            return;
        }
        let _ = std::fs::remove_file(self.datadir.join(INCOMPLETE));
        let _ = sync_dir(&self.datadir);
        if self.created {
            // Only succeeds while it is empty.
            let _ = std::fs::remove_dir(&self.datadir);
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.settled {
            self.undo();
        }
    }
}

/// Removes everything but ignorable entries; only called on a dir we marked incomplete.
fn wipe(datadir: &Path) -> Result<()> {
    tracing::warn!(
        "{} holds an interrupted restore; removing it",
        datadir.display()
    );
    for name in entries(datadir)? {
        if ignorable(&name) || name == INCOMPLETE {
            continue;
        }
        let path = datadir.join(&name);
        let removed = if path.is_dir() && !path.is_symlink() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(|e| Error::io(&path, e))?;
    }
    Ok(())
}

fn remove_dir_if_present(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(dir, e)),
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_attempt_is_never_taken_for_initialised_data() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(state(d).unwrap(), State::Empty);
        std::fs::create_dir(d.join("lost+found")).unwrap();
        assert_eq!(state(d).unwrap(), State::Empty);

        let staging = Staging::begin(d).unwrap();
        std::fs::create_dir(staging.dir.join("mysql")).unwrap();
        // Simulate a crash in the middle of the moves: `mysql/` is in place, marker still there.
        std::fs::rename(staging.dir.join("mysql"), d.join("mysql")).unwrap();
        assert_eq!(state(d).unwrap(), State::Incomplete);

        // The next attempt wipes the leftovers and starts clean.
        let staging = Staging::begin(d).unwrap();
        assert!(!d.join("mysql").exists() && d.join("lost+found").exists());
        std::fs::write(staging.dir.join("ibdata1"), b"x").unwrap();
        staging.install(b"{}").unwrap();
        assert_eq!(state(d).unwrap(), State::Initialised);
        assert!(
            d.join("ibdata1").exists() && d.join(RESTORED).exists() && !d.join(INCOMPLETE).exists()
        );
    }

    /// Dropped without install or discard (its task cancelled): undone as by discard. A
    /// failed install is not undone: its files are half in the data dir, under the marker.
    #[test]
    fn a_dropped_staging_is_discarded_but_a_failed_install_keeps_the_marker() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("lost+found")).unwrap();
        let staging = Staging::begin(dir.path()).unwrap();
        std::fs::write(staging.dir.join("ibdata1"), b"x").unwrap();
        drop(staging);
        assert_eq!(entries(dir.path()).unwrap(), ["lost+found"]);

        let staging = Staging::begin(dir.path()).unwrap();
        std::fs::write(staging.dir.join("ibdata1"), b"x").unwrap();
        // The data dir already holds an entry of that name: the move fails half-way.
        std::fs::create_dir_all(dir.path().join("ibdata1/taken")).unwrap();
        assert!(staging.install(b"{}").is_err());
        assert_eq!(state(dir.path()).unwrap(), State::Incomplete);
    }

    /// A backup tool that copied the source's lineage file into the backup must not make the
    /// restored data dir look like the source: install gives it a lineage of its own. An
    /// incremental's scratch dir does not count as data and is gone after install.
    #[test]
    fn an_installed_data_dir_has_a_lineage_of_its_own() {
        use crate::lineage::{LINEAGE_FILE, Lineage};
        let dir = tempfile::tempdir().unwrap();
        let source = Lineage::new_random();
        let staging = Staging::begin(dir.path()).unwrap();
        std::fs::write(staging.dir.join(LINEAGE_FILE), source.as_str()).unwrap();
        std::fs::write(staging.dir.join("ibdata1"), b"x").unwrap();
        std::fs::write(
            staging.incremental_dir().unwrap().join("ibdata1.delta"),
            b"x",
        )
        .unwrap();
        staging.install(b"{}").unwrap();
        assert_ne!(Lineage::of_datadir(dir.path()).unwrap(), source);
        assert!(!dir.path().join(INCREMENTAL).exists());
    }

    #[test]
    fn discard_leaves_the_dir_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("lost+found")).unwrap();
        let staging = Staging::begin(dir.path()).unwrap();
        std::fs::write(staging.dir.join("ibdata1"), b"x").unwrap();
        std::fs::write(
            staging.incremental_dir().unwrap().join("ibdata1.delta"),
            b"x",
        )
        .unwrap();
        staging.discard();
        assert_eq!(entries(dir.path()).unwrap(), ["lost+found"]);

        // A data dir this attempt created is removed again.
        let absent = dir.path().join("new");
        let staging = Staging::begin(&absent).unwrap();
        std::fs::write(staging.dir.join("ibdata1"), b"x").unwrap();
        staging.discard();
        assert!(!absent.exists());
    }
}
