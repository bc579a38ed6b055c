//! Whether a drill is due, pure: from the drill plan and the status (the newest backup, the
//! newest drill). A drill recorded as `Running` is watched, never started twice.

use chrono::{DateTime, Utc};
use etcd_api::{DrillRecord, DrillResult, EtcdBackupStatus};

use crate::schedule::Trigger;
use crate::status::chrono_time;
use crate::validate::{DrillPlan, DrillWhen};

/// What the drill side does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// No drill now: no backup yet, or not due; for a cron, when it is due next.
    Idle(Option<DateTime<Utc>>),
    /// Drill the newest backup (`status.lastBackup`).
    Start,
    /// A drill is recorded as running: follow its pod.
    Watch(Box<DrillRecord>),
}

pub fn next(
    plan: &DrillPlan,
    status: &EtcdBackupStatus,
    created: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Next {
    let last = status.last_drill.as_ref();
    if let Some(running) = last.filter(|d| d.result == DrillResult::Running) {
        return Next::Watch(Box::new(running.clone()));
    }
    let Some(backup) = &status.last_backup else {
        return Next::Idle(None);
    };
    match &plan.when {
        DrillWhen::EveryBackups(every) => {
            let Some(last) = last else {
                // The first backup after drills were turned on is proven at once.
                return Next::Start;
            };
            if last.object_key == backup.object_key {
                return Next::Idle(None);
            }
            let due = match (backup.number, last.backup_number) {
                (Some(newest), Some(drilled)) => newest - drilled >= *every,
                // Numbers from before they were recorded: drill the newer backup.
                _ => true,
            };
            if due { Next::Start } else { Next::Idle(None) }
        }
        DrillWhen::Cron(trigger) => {
            let Trigger::Cron(cron) = trigger else {
                return Next::Idle(None);
            };
            let from = last
                .and_then(|d| d.start_time.as_ref())
                .map(chrono_time)
                .unwrap_or(created);
            match cron.find_next_occurrence(&from, false) {
                Ok(at) if at <= now => Next::Start,
                Ok(at) => Next::Idle(Some(at)),
                Err(_) => Next::Idle(None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_api::BackupDrill;
    use std::time::Duration;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    fn every(n: i64) -> DrillPlan {
        DrillPlan {
            when: DrillWhen::EveryBackups(n),
            spec: BackupDrill::default(),
            timeout: Duration::from_secs(1800),
        }
    }

    fn status(yaml: &str) -> EtcdBackupStatus {
        serde_saphyr::from_str(yaml).unwrap()
    }

    const NOW: &str = "2026-11-27T04:00:00Z";

    #[test]
    fn every_nth_backup_counts_from_the_last_drill() {
        let now = at(NOW);
        assert_eq!(next(&every(1), &status("{}"), now, now), Next::Idle(None));
        let first = status("lastBackup: {objectKey: 's3://b/k_v1', number: 1}");
        assert_eq!(next(&every(3), &first, now, now), Next::Start);
        let drilled = "lastDrill: {objectKey: 's3://b/k_v1', backupNumber: 1, result: Succeeded}";
        let same = status(&format!(
            "lastBackup: {{objectKey: 's3://b/k_v1', number: 1}}\n{drilled}"
        ));
        assert_eq!(next(&every(1), &same, now, now), Next::Idle(None));
        let third = status(&format!(
            "lastBackup: {{objectKey: 's3://b/k_v3', number: 3}}\n{drilled}"
        ));
        assert_eq!(next(&every(3), &third, now, now), Next::Idle(None));
        assert_eq!(next(&every(2), &third, now, now), Next::Start);
    }

    #[test]
    fn a_running_drill_is_followed_not_started_again() {
        let now = at(NOW);
        let running = status(
            "lastBackup: {objectKey: 's3://b/k_v2', number: 2}\n\
             lastDrill: {objectKey: 's3://b/k_v1', backupNumber: 1, result: Running, pod: d}",
        );
        assert!(
            matches!(next(&every(1), &running, now, now), Next::Watch(d) if d.pod.as_deref() == Some("d"))
        );
    }

    #[test]
    fn a_failed_drill_is_not_repeated_on_the_same_backup() {
        let now = at(NOW);
        let failed = status(
            "lastBackup: {objectKey: 's3://b/k_v1', number: 1}\n\
             lastDrill: {objectKey: 's3://b/k_v1', backupNumber: 1, result: Failed}",
        );
        assert_eq!(next(&every(1), &failed, now, now), Next::Idle(None));
    }

    #[test]
    fn a_cron_drill_waits_for_its_time_after_the_last_one() {
        let plan = DrillPlan {
            when: DrillWhen::Cron(Trigger::cron("spec.drill.schedule", "0 3 * * *").unwrap()),
            spec: BackupDrill::default(),
            timeout: Duration::from_secs(1800),
        };
        let created = at("2026-11-26T12:00:00Z");
        let backup = "lastBackup: {objectKey: 's3://b/k_v1', number: 1}";
        // Due at 03:00 on the 27th, the first occurrence after creation.
        assert_eq!(next(&plan, &status(backup), created, at(NOW)), Next::Start);
        assert_eq!(
            next(&plan, &status(backup), created, at("2026-11-27T02:00:00Z")),
            Next::Idle(Some(at("2026-11-27T03:00:00Z")))
        );
        let drilled = status(&format!(
            "{backup}\nlastDrill: {{objectKey: 's3://b/k_v1', result: Succeeded, startTime: '2026-11-27T03:00:05Z'}}"
        ));
        assert_eq!(
            next(&plan, &drilled, created, at(NOW)),
            Next::Idle(Some(at("2026-11-28T03:00:00Z")))
        );
    }
}
