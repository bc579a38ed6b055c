//! Status building, pure. Each function takes the previous status and returns the complete new
//! one, because a server-side apply drops fields the manager stops sending.

use chrono::{DateTime, Utc};
use etcd_api::condition::{self, PROGRESSING, READY};
use etcd_api::{
    BackupFailure, BackupRecord, Compression, EtcdBackup, EtcdBackupStatus, LocalVolumeRecord,
    RecordedContents,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::execute::Outcome;

/// metav1.Time has whole seconds; truncating here keeps a status equal to itself after a
/// round trip through the API server.
pub fn time(t: DateTime<Utc>) -> Time {
    Time(Timestamp::from_second(t.timestamp()).unwrap_or_default())
}

pub fn chrono_time(t: &Time) -> DateTime<Utc> {
    DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32)
        .unwrap_or_default()
}

/// A run has started (written before any data moves, so a restart sees it).
pub fn running(
    prev: &EtcdBackupStatus,
    generation: Option<i64>,
    started: DateTime<Utc>,
) -> EtcdBackupStatus {
    let retry = prev_run_interrupted(prev);
    let mut s = prev.clone();
    s.observed_generation = generation;
    s.last_schedule_time = Some(time(started));
    let (reason, message) = if retry {
        (
            RETRYING,
            "taking a snapshot again: the operator stopped during the last one",
        )
    } else {
        ("BackupRunning", "taking a snapshot")
    };
    condition::set(
        &mut s.conditions,
        condition::new(
            PROGRESSING,
            true,
            reason,
            message,
            generation,
            time(started),
        ),
    );
    s
}

/// The Progressing reason of the one retry of an interrupted run.
const RETRYING: &str = "RetryingInterruptedRun";
/// The drills' condition (written by [`crate::drill`] under its own field manager): True after
/// a successful drill, False after a failed one.
pub const DRILLED: &str = "Drilled";
/// The condition the archive side owns ([`crate::archive_status`]).
pub const ARCHIVING: &str = "Archiving";

/// Status says a run was under way (recorded before it started); with no run in this process,
/// the operator stopped during it.
pub fn prev_run_interrupted(prev: &EtcdBackupStatus) -> bool {
    condition::is_true(&prev.conditions, PROGRESSING)
}

/// The interrupted run was itself the retry of an interrupted run: it is not retried again.
pub fn retry_interrupted(prev: &EtcdBackupStatus) -> bool {
    condition::find(&prev.conditions, PROGRESSING)
        .is_some_and(|c| c.status == "True" && c.reason == RETRYING)
}

/// A verified backup was committed.
pub fn succeeded(
    prev: &EtcdBackupStatus,
    generation: Option<i64>,
    outcome: &Outcome,
    local_volume: Option<LocalVolumeRecord>,
    next: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> EtcdBackupStatus {
    let m = &outcome.report.manifest;
    let mut s = prev.clone();
    s.observed_generation = generation;
    s.succeeded = true;
    s.reason = None;
    s.etcd_version = Some(m.etcd_version.clone());
    s.etcd_revision = Some(m.etcd_revision);
    s.last_success_date = Some(time(m.start_time));
    s.last_backup = Some(BackupRecord {
        object_key: outcome.report.url.clone(),
        local_volume,
        size_bytes: i64::try_from(m.stored_bytes).ok(),
        sha256: m.stored_sha256.clone(),
        crc32c: m.stored_crc32c.clone(),
        db_sha256: Some(m.db_sha256.clone()).filter(|s| !s.is_empty()),
        etcd_revision: Some(m.etcd_revision),
        etcd_version: Some(m.etcd_version.clone()),
        duration_seconds: Some((m.duration_seconds * 1000.0).round() / 1000.0),
        start_time: Some(time(m.start_time)),
        completion_time: Some(time(m.completion_time)),
        compression: Some(match m.compression {
            etcd_snapshot::Compression::None => Compression::None,
            etcd_snapshot::Compression::Zstd => Compression::Zstd,
        }),
        encrypted_to: m
            .encryption
            .as_ref()
            .map(|e| e.recipients.clone())
            .unwrap_or_default(),
        number: Some(
            prev.last_backup
                .as_ref()
                .and_then(|b| b.number)
                .unwrap_or(0)
                + 1,
        ),
        contents: m.contents.as_ref().map(|c| RecordedContents {
            revision: c.revision,
            key_count: c.key_count,
            hash_kv: c.hash_kv.map(i64::from),
            compact_revision: c.compact_revision,
            content_sha256: c.content_sha256.clone(),
        }),
    });
    s.next_schedule_time = next.map(time);
    let message = match &outcome.pruned {
        Ok(_) => format!("backup {} verified and stored", outcome.report.url),
        Err(e) => format!(
            "backup {} verified and stored; removing old backups failed: {e}",
            outcome.report.url
        ),
    };
    set(&mut s, generation, now, true, "BackupSucceeded", message);
    s
}

/// A run failed; the last good backup stays recorded, `Ready` turns false with the cause.
pub fn failed(
    prev: &EtcdBackupStatus,
    generation: Option<i64>,
    reason: &str,
    message: &str,
    next: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> EtcdBackupStatus {
    let mut s = prev.clone();
    s.observed_generation = generation;
    s.succeeded = false;
    s.reason = Some(message.to_string());
    s.last_failure = Some(BackupFailure {
        time: Some(time(now)),
        reason: reason.to_string(),
        message: Some(message.to_string()),
    });
    s.next_schedule_time = next.map(time);
    set(&mut s, generation, now, false, reason, message.to_string());
    s
}

/// The spec cannot be acted on. No run happens, so nothing is scheduled.
pub fn invalid(
    prev: &EtcdBackupStatus,
    generation: Option<i64>,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) -> EtcdBackupStatus {
    let mut s = prev.clone();
    s.observed_generation = generation;
    s.next_schedule_time = None;
    set(&mut s, generation, now, false, reason, message.to_string());
    s
}

/// A valid, idle object waiting for its next run.
pub fn scheduled(
    prev: &EtcdBackupStatus,
    generation: Option<i64>,
    next: Option<DateTime<Utc>>,
) -> EtcdBackupStatus {
    let mut s = prev.clone();
    s.observed_generation = generation;
    s.next_schedule_time = next.map(time);
    // A spec fixed after an input error: clear the error; Ready follows from the next run.
    if let Some(ready) = condition::find(&s.conditions, READY)
        && is_input_error(&ready.reason)
    {
        s.conditions.retain(|c| c.type_ != READY);
    }
    s
}

fn is_input_error(reason: &str) -> bool {
    matches!(
        reason,
        "InvalidSpec" | "InvalidSchedule" | "UnsupportedStorageType" | "InvalidObject"
    )
}

fn set(
    s: &mut EtcdBackupStatus,
    generation: Option<i64>,
    now: DateTime<Utc>,
    ready: bool,
    reason: &str,
    message: String,
) {
    let now = time(now);
    condition::set(
        &mut s.conditions,
        condition::new(READY, ready, reason, message, generation, now.clone()),
    );
    condition::set(
        &mut s.conditions,
        // Never an empty message: k8s-openapi writes "" as null, which the CRD schema rejects.
        condition::new(
            PROGRESSING,
            false,
            "Idle",
            "no backup running",
            generation,
            now,
        ),
    );
}

/// Whether a one-shot already has its result (coreos: `succeeded` or `Reason` set).
pub fn one_shot_finished(s: &EtcdBackupStatus) -> bool {
    s.succeeded || s.reason.is_some()
}

/// The server-side apply body for the status subresource.
/// The backup side's fields: everything but the drills', which the drill side applies under
/// its own field manager ([`crate::drill`]), so neither overwrites the other's with a stale
/// copy (a backup run's status is built from the object as it was when the run started).
pub fn apply_body(status: &EtcdBackupStatus) -> serde_json::Value {
    let mut status = status.clone();
    status.last_drill = None;
    status.last_successful_drill = None;
    status.conditions.retain(|c| c.type_ != DRILLED);
    // And not the archive side's ([`crate::archive_status`]).
    status.continuous = None;
    status.conditions.retain(|c| c.type_ != ARCHIVING);
    operator_runtime::status_apply::body::<EtcdBackup, _>(&status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_snapshot::{Manifest, SaveReport};

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    fn outcome(pruned: Result<Vec<String>, String>) -> Outcome {
        let manifest: Manifest = serde_json::from_value(serde_json::json!({
            "format": "etcd-snapshot/v1", "storedBytes": 20512, "storedSha256": "ab12",
            "compression": "none", "dbBytes": 20480, "dbSha256": "cd34", "etcdRevision": 100,
            "etcdVersion": "3.4.30", "clusterId": "c", "memberId": "m",
            "endpoint": "http://127.0.0.1:2379", "startTime": "2026-01-01T00:00:00Z",
            "completionTime": "2026-01-01T00:00:02Z", "durationSeconds": 2.0004, "tool": "t"
        }))
        .unwrap();
        Outcome {
            report: SaveReport {
                key: "etcd.backup".into(),
                url: "s3://b/etcd.backup".into(),
                manifest,
            },
            pruned,
        }
    }

    #[test]
    fn an_encrypted_backup_is_recorded_with_the_crc32c_its_manifest_records() {
        let mut encrypted = outcome(Ok(vec![]));
        let m = &mut encrypted.report.manifest;
        (m.stored_sha256, m.stored_crc32c) = (None, Some("0a0b0c0d".into()));
        m.encryption = Some(backup_storage::encryption::Encryption {
            scheme: "age".into(),
            recipients: vec!["age1example".into()],
        });
        assert_eq!(m.stored_checksum().to_string(), "crc32c 0a0b0c0d");
        let prev = running(&Default::default(), Some(3), at("2026-01-01T00:00:00Z"));
        let s = succeeded(
            &prev,
            Some(3),
            &encrypted,
            None,
            None,
            at("2026-01-01T00:00:02Z"),
        );
        let last = s.last_backup.unwrap();
        assert_eq!(
            (last.sha256, last.crc32c.as_deref()),
            (None, Some("0a0b0c0d"))
        );
    }

    #[test]
    fn success_records_the_verified_backup_in_coreos_and_new_fields() {
        let prev = running(&Default::default(), Some(3), at("2026-01-01T00:00:00Z"));
        let s = succeeded(
            &prev,
            Some(3),
            &outcome(Ok(vec![])),
            None,
            None,
            at("2026-01-01T00:00:02Z"),
        );
        assert!(s.succeeded);
        assert_eq!(s.reason, None);
        assert_eq!(s.etcd_revision, Some(100));
        assert_eq!(s.etcd_version.as_deref(), Some("3.4.30"));
        let last = s.last_backup.as_ref().unwrap();
        assert_eq!(last.object_key, "s3://b/etcd.backup");
        assert_eq!(last.size_bytes, Some(20512));
        assert_eq!(last.sha256.as_deref(), Some("ab12"));
        assert_eq!(last.crc32c, None);
        assert_eq!(last.duration_seconds, Some(2.0));
        let ready = condition::find(&s.conditions, READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.observed_generation),
            ("True", Some(3))
        );
        assert!(!condition::is_true(&s.conditions, PROGRESSING));
        assert!(one_shot_finished(&s));
    }

    #[test]
    fn failed_prune_keeps_the_backup_good_but_says_so() {
        let s = succeeded(
            &Default::default(),
            Some(1),
            &outcome(Err("access denied".into())),
            None,
            Some(at("2026-01-01T00:02:05Z")),
            at("2026-01-01T00:00:02Z"),
        );
        assert!(s.succeeded);
        let ready = condition::find(&s.conditions, READY).unwrap();
        assert_eq!(ready.status, "True");
        assert!(ready.message.contains("access denied"), "{}", ready.message);
        assert_eq!(s.next_schedule_time, Some(time(at("2026-01-01T00:02:05Z"))));
    }

    #[test]
    fn failure_keeps_the_last_good_backup_and_names_the_cause() {
        let good = succeeded(
            &Default::default(),
            Some(1),
            &outcome(Ok(vec![])),
            None,
            None,
            at("2026-01-01T00:00:02Z"),
        );
        let s = failed(
            &good,
            Some(1),
            "BucketNotFound",
            "bucket \"b\" does not exist",
            None,
            at("2026-01-02T00:00:00Z"),
        );
        assert!(!s.succeeded);
        assert_eq!(s.reason.as_deref(), Some("bucket \"b\" does not exist"));
        assert_eq!(s.last_backup, good.last_backup);
        assert_eq!(s.last_failure.as_ref().unwrap().reason, "BucketNotFound");
        let ready = condition::find(&s.conditions, READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "BucketNotFound")
        );
        assert!(one_shot_finished(&s));
    }

    #[test]
    fn fixing_an_invalid_spec_clears_the_input_error() {
        let bad = invalid(
            &Default::default(),
            Some(1),
            "InvalidSchedule",
            "nope",
            at("2026-01-01T00:00:00Z"),
        );
        assert!(
            !one_shot_finished(&bad),
            "an input error is not a backup result"
        );
        let fixed = scheduled(&bad, Some(2), Some(at("2026-01-01T01:00:00Z")));
        assert!(condition::find(&fixed.conditions, READY).is_none());
        assert_eq!(fixed.observed_generation, Some(2));
    }

    fn nulls(v: &serde_json::Value, path: &str, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Null => out.push(path.to_string()),
            serde_json::Value::Array(a) => a
                .iter()
                .enumerate()
                .for_each(|(i, v)| nulls(v, &format!("{path}[{i}]"), out)),
            serde_json::Value::Object(m) => m
                .iter()
                .for_each(|(k, v)| nulls(v, &format!("{path}.{k}"), out)),
            _ => {}
        }
    }

    #[test]
    fn no_status_has_nulls_the_crd_schema_rejects() {
        // The API server refuses `conditions[].message: null` (found by the e2e test).
        let now = at("2026-01-01T00:00:02Z");
        let statuses = [
            running(&Default::default(), Some(1), now),
            succeeded(
                &Default::default(),
                Some(1),
                &outcome(Ok(vec![])),
                None,
                Some(now),
                now,
            ),
            failed(
                &Default::default(),
                Some(1),
                "Timeout",
                "deadline",
                None,
                now,
            ),
            invalid(&Default::default(), Some(1), "InvalidSpec", "bad", now),
        ];
        for s in statuses {
            let mut found = Vec::new();
            nulls(&apply_body(&s), "", &mut found);
            assert!(found.is_empty(), "nulls at {found:?}");
        }
    }

    #[test]
    fn apply_body_keeps_the_coreos_reason_key() {
        let s = failed(
            &Default::default(),
            None,
            "Timeout",
            "deadline",
            None,
            at("2026-01-01T00:00:00Z"),
        );
        let body = apply_body(&s);
        assert_eq!(body["status"]["Reason"], "deadline");
        assert_eq!(body["status"]["succeeded"], false);
        assert_eq!(body["kind"], "EtcdBackup");
    }
}
