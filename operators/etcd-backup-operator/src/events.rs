//! Every Event this operator publishes, one constructor each: its type, reason, action and
//! note are decided here and nowhere else, so the list users read in
//! docs/operations/troubleshooting.md can be checked against it (the test below). The stages
//! call these and hand the Event to [`crate::context::publish`], the one path to the API.

use std::fmt::Display;

use kube::runtime::events::{Event, EventType};

/// The reasons with a fixed name (a failed run's and an invalid spec's reasons are the
/// failure's own, listed with them in the troubleshooting page).
pub const REASONS: [&str; 10] = [
    "BackupSucceeded",
    "BackupFailed",
    "PruneFailed",
    "DeleteBackupsFailed",
    "BackupsKept",
    "DrillStepFailed",
    "DrillSucceeded",
    "DrillFailed",
    "ArchiveGap",
    "InvalidObject",
];

fn event(type_: EventType, reason: &str, action: &str, note: String) -> Event {
    Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    }
}

/// A backup stored and verified: where, how big, of which revision, its checksum, how long.
pub fn backup_succeeded(
    url: &str,
    stored_bytes: u64,
    revision: i64,
    checksum: &str,
    seconds: f64,
) -> Event {
    let note =
        format!("{url} ({stored_bytes} bytes, revision {revision}, {checksum}) in {seconds:.1} s");
    event(EventType::Normal, "BackupSucceeded", "Backup", note)
}

/// A failed run: the failure's reason, then its cause.
pub fn backup_failed(reason: &str, message: &str) -> Event {
    let note = format!("{reason}: {message}");
    event(EventType::Warning, "BackupFailed", "Backup", note)
}

/// The backup stands; removing old ones (`maxBackups`) failed.
pub fn prune_failed(error: &dyn Display) -> Event {
    let note = format!("removing old backups failed: {error}");
    event(EventType::Warning, "PruneFailed", "Prune", note)
}

/// `deletionPolicy: Delete` could not remove the backups; retried.
pub fn delete_backups_failed(error: &dyn Display) -> Event {
    event(
        EventType::Warning,
        "DeleteBackupsFailed",
        "Delete",
        error.to_string(),
    )
}

/// The finalizer is released without deleting anything (the spec cannot say where the backups
/// are, or their Secret has been gone too long): the event says so, so nobody believes the
/// backups are gone.
pub fn backups_kept(cause: &str) -> Event {
    let note =
        format!("deletionPolicy Delete was not applied, the stored backups were kept: {cause}");
    event(EventType::Warning, "BackupsKept", "Delete", note)
}

/// A drill step failed against the API server; retried, backups not held up.
pub fn drill_step_failed(error: &dyn Display) -> Event {
    let note = format!("the restore drill could not go on (retried): {error}");
    event(EventType::Warning, "DrillStepFailed", "Drill", note)
}

/// A drill's verdict about the backup `object_key`.
pub fn drill_finished(succeeded: bool, object_key: &str, reason: &str, message: &str) -> Event {
    let note = format!("{object_key}: {reason}: {message}");
    if succeeded {
        event(EventType::Normal, "DrillSucceeded", "Drill", note)
    } else {
        event(EventType::Warning, "DrillFailed", "Drill", note)
    }
}

/// The cluster compacted changes before the archive stored them: no point in between can be
/// restored.
pub fn archive_gap(archived_through: i64, resumed_after: i64) -> Event {
    let note = format!(
        "the cluster compacted changes before the archive stored them: no point after revision {archived_through} up to {resumed_after} can be restored; the archive goes on after the backup at {resumed_after}"
    );
    event(EventType::Warning, "ArchiveGap", "Archive", note)
}

/// A spec that cannot be acted on: the reason and message of the validation.
pub fn invalid_spec(reason: &str, message: String) -> Event {
    event(EventType::Warning, reason, "Validate", message)
}

/// An object that does not even parse.
pub fn invalid_object(message: String) -> Event {
    event(EventType::Warning, "InvalidObject", "Validate", message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_fixed_event() -> Vec<Event> {
        vec![
            backup_succeeded("s3://b/k", 10, 7, "sha256:ab", 1.26),
            backup_failed("Timeout", "after 60 s"),
            prune_failed(&"denied"),
            delete_backups_failed(&"denied"),
            backups_kept("the Secret is gone"),
            drill_step_failed(&"forbidden"),
            drill_finished(true, "k", "Passed", "ok"),
            drill_finished(false, "k", "BackupCorrupt", "bad"),
            archive_gap(5, 9),
            invalid_object("cannot be read".into()),
        ]
    }

    #[test]
    fn every_fixed_reason_is_listed_and_only_successes_are_normal() {
        let events = every_fixed_event();
        let reasons: Vec<&str> = events.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(reasons, REASONS);
        for event in &events {
            let normal = event.reason.ends_with("Succeeded");
            assert_eq!(
                matches!(event.type_, EventType::Normal),
                normal,
                "{}",
                event.reason
            );
        }
    }

    #[test]
    fn when_a_run_fails_the_note_starts_with_the_failures_reason() {
        let event = backup_failed("SnapshotStalled", "etcd sent nothing for 60 s");
        assert_eq!(
            event.note.as_deref(),
            Some("SnapshotStalled: etcd sent nothing for 60 s")
        );
        assert_eq!(event.action, "Backup");
    }

    #[test]
    fn when_a_backup_succeeds_the_note_names_object_size_revision_checksum_and_time() {
        let event = backup_succeeded("s3://b/k", 10, 7, "sha256:ab", 1.26);
        assert_eq!(
            event.note.as_deref(),
            Some("s3://b/k (10 bytes, revision 7, sha256:ab) in 1.3 s")
        );
    }

    #[test]
    fn when_an_archive_gap_is_found_the_note_names_the_revisions_lost() {
        let note = archive_gap(5, 9).note.unwrap();
        assert!(note.contains("after revision 5 up to 9"), "{note}");
    }

    /// The troubleshooting page's event tables name every reason a user can meet.
    #[test]
    fn the_troubleshooting_page_explains_every_fixed_reason() {
        let page = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/operations/troubleshooting.md"
        );
        let text = std::fs::read_to_string(page).unwrap();
        for reason in REASONS {
            assert!(
                text.contains(&format!("`{reason}`")),
                "docs/operations/troubleshooting.md does not explain {reason}"
            );
        }
    }
}
