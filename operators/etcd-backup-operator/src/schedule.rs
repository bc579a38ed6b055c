//! When the next backup is due. Pure: the controller feeds in the spec, what status recorded and
//! the current time, so restarts, missed runs and schedule changes are all decided here.

use std::time::Duration;

use chrono::{DateTime, Utc};
use croner::Cron;
use etcd_api::BackupSchedule;
use operator_runtime::cron;
pub use operator_runtime::cron::InvalidSchedule;

/// A parsed trigger.
#[derive(Debug, Clone)]
pub enum Trigger {
    OneShot,
    Interval(Duration),
    Cron(Box<Cron>),
}

impl Trigger {
    pub fn parse(schedule: BackupSchedule<'_>) -> Result<Trigger, InvalidSchedule> {
        match schedule {
            BackupSchedule::OneShot => Ok(Trigger::OneShot),
            BackupSchedule::Interval(every) => Ok(Trigger::Interval(every)),
            BackupSchedule::Cron(text) => Trigger::cron("spec.backupPolicy.schedule", text),
        }
    }

    /// A cron schedule (UTC) given in `field`.
    pub fn cron(field: &'static str, text: &str) -> Result<Trigger, InvalidSchedule> {
        Ok(Trigger::Cron(Box::new(cron::parse(field, text)?)))
    }

    pub fn is_one_shot(&self) -> bool {
        matches!(self, Trigger::OneShot)
    }

    /// The time between two runs from `now` on (for a cron, its next two occurrences): the
    /// unit of the "no backup for too long" alert. `None` for a one-shot backup.
    pub fn period(&self, now: DateTime<Utc>) -> Option<Duration> {
        match self {
            Trigger::OneShot => None,
            Trigger::Interval(every) => Some(*every),
            Trigger::Cron(cron) => {
                let first = cron.find_next_occurrence(&now, false).ok()?;
                let second = cron.find_next_occurrence(&first, false).ok()?;
                (second - first).to_std().ok()
            }
        }
    }
}

/// What the scheduler should do for one object now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Start a backup now.
    Now,
    /// Nothing until then.
    At(DateTime<Utc>),
    /// A finished one-shot: never again.
    Never,
}

/// What status says about earlier runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct History {
    /// When the last scheduled run started (`status.lastScheduleTime`).
    pub last_run: Option<DateTime<Utc>>,
    /// A one-shot already has a result (`succeeded` or `Reason`): coreos never redoes those.
    pub one_shot_finished: bool,
    /// Status says a run was under way but none is: the operator stopped mid-backup.
    pub interrupted: bool,
}

/// Decides whether a backup is due.
///
/// - One-shot: due until it has a result.
/// - Interval: the first run is due at once (coreos waited one interval); afterwards one
///   interval after the last start. Runs missed while the operator was down collapse into one.
/// - Cron: the first occurrence after the last run (or after `created` for a new object);
///   a missed occurrence is due at once, once.
pub fn due(trigger: &Trigger, history: History, created: DateTime<Utc>, now: DateTime<Utc>) -> Due {
    // An interrupted run is retried once, at once; nothing of it is visible in storage.
    if history.interrupted && !(trigger.is_one_shot() && history.one_shot_finished) {
        return Due::Now;
    }
    let at = match trigger {
        Trigger::OneShot if history.one_shot_finished => return Due::Never,
        Trigger::OneShot => return Due::Now,
        Trigger::Interval(every) => match history.last_run {
            None => return Due::Now,
            Some(last) => {
                last + chrono::Duration::from_std(*every).unwrap_or(chrono::TimeDelta::MAX)
            }
        },
        Trigger::Cron(cron) => {
            let from = history.last_run.unwrap_or(created);
            match cron.find_next_occurrence(&from, false) {
                Ok(next) => next,
                Err(_) => return Due::Never,
            }
        }
    };
    if at <= now { Due::Now } else { Due::At(at) }
}

/// `status.nextScheduleTime` after a run that started at `started`: what `due` will answer
/// once that run is recorded.
pub fn next_after_run(trigger: &Trigger, started: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let history = History {
        last_run: Some(started),
        one_shot_finished: true,
        interrupted: false,
    };
    match due(trigger, history, started, started) {
        Due::At(at) => Some(at),
        Due::Now => Some(started),
        Due::Never => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    fn cron(s: &str) -> Trigger {
        Trigger::parse(BackupSchedule::Cron(s)).unwrap()
    }

    #[test]
    fn period_is_the_time_between_the_next_two_runs() {
        let now = t("2026-11-24T10:07:00Z");
        assert_eq!(Trigger::OneShot.period(now), None);
        let every = Duration::from_secs(600);
        assert_eq!(Trigger::Interval(every).period(now), Some(every));
        assert_eq!(
            cron("*/15 * * * *").period(now),
            Some(Duration::from_secs(900))
        );
        assert_eq!(
            cron("0 3 * * *").period(now),
            Some(Duration::from_secs(86400))
        );
    }

    #[test]
    fn one_shot_runs_until_it_has_a_result() {
        let now = t("2026-01-01T00:00:00Z");
        assert_eq!(
            due(&Trigger::OneShot, History::default(), now, now),
            Due::Now
        );
        let done = History {
            one_shot_finished: true,
            ..Default::default()
        };
        assert_eq!(due(&Trigger::OneShot, done, now, now), Due::Never);
    }

    #[test]
    fn first_interval_backup_runs_right_away() {
        let created = t("2026-01-01T00:00:00Z");
        let every = Trigger::Interval(Duration::from_secs(125));
        assert_eq!(due(&every, History::default(), created, created), Due::Now);
        let history = History {
            last_run: Some(created),
            ..Default::default()
        };
        assert_eq!(
            due(&every, history, created, t("2026-01-01T00:01:00Z")),
            Due::At(t("2026-01-01T00:02:05Z"))
        );
        assert_eq!(
            due(&every, history, created, t("2026-01-01T00:02:05Z")),
            Due::Now
        );
    }

    #[test]
    fn runs_missed_while_down_collapse_into_one() {
        let every = Trigger::Interval(Duration::from_secs(60));
        let last = t("2026-01-01T00:00:00Z");
        let back_up = t("2026-01-01T05:00:00Z");
        let history = History {
            last_run: Some(last),
            ..Default::default()
        };
        assert_eq!(due(&every, history, last, back_up), Due::Now);
        // Once that one run is recorded, the next is one interval later, not 300 catch-ups.
        let after = History {
            last_run: Some(back_up),
            ..Default::default()
        };
        assert_eq!(
            due(&every, after, last, back_up),
            Due::At(t("2026-01-01T05:01:00Z"))
        );

        let hourly = cron("0 * * * *");
        let history = History {
            last_run: Some(t("2026-01-01T01:00:00Z")),
            ..Default::default()
        };
        assert_eq!(due(&hourly, history, last, back_up), Due::Now);
    }

    #[test]
    fn an_interrupted_run_is_retried_once() {
        let last = t("2026-01-01T00:00:00Z");
        let now = t("2026-01-01T00:00:30Z");
        let history = History {
            last_run: Some(last),
            interrupted: true,
            ..Default::default()
        };
        let hourly = Trigger::Interval(Duration::from_secs(3600));
        assert_eq!(due(&hourly, history, last, now), Due::Now);
        assert_eq!(due(&Trigger::OneShot, history, last, now), Due::Now);
        let finished = History {
            one_shot_finished: true,
            ..history
        };
        assert_eq!(due(&Trigger::OneShot, finished, last, now), Due::Never);
    }

    #[test]
    fn cron_waits_for_its_first_occurrence() {
        let daily = cron("30 2 * * *");
        let created = t("2026-01-01T10:00:00Z");
        assert_eq!(
            due(&daily, History::default(), created, created),
            Due::At(t("2026-01-02T02:30:00Z"))
        );
        assert_eq!(
            next_after_run(&daily, t("2026-01-02T02:30:00Z")),
            Some(t("2026-01-03T02:30:00Z"))
        );
    }

    #[test]
    fn changing_the_schedule_changes_the_next_time() {
        let last = t("2026-01-01T00:00:00Z");
        let history = History {
            last_run: Some(last),
            ..Default::default()
        };
        let now = t("2026-01-01T00:00:10Z");
        let a = due(
            &Trigger::Interval(Duration::from_secs(3600)),
            history,
            last,
            now,
        );
        let b = due(
            &Trigger::Interval(Duration::from_secs(60)),
            history,
            last,
            now,
        );
        assert_eq!(a, Due::At(t("2026-01-01T01:00:00Z")));
        assert_eq!(b, Due::At(t("2026-01-01T00:01:00Z")));
        assert_eq!(
            due(&cron("*/5 * * * *"), history, last, now),
            Due::At(t("2026-01-01T00:05:00Z"))
        );
    }

    #[test]
    fn cron_uses_posix_weekdays_and_macros() {
        // 0 is Sunday in POSIX cron; 2026-01-04 is a Sunday.
        let sunday = cron("0 0 * * 0");
        let from = t("2026-01-01T00:00:00Z");
        assert_eq!(
            due(&sunday, History::default(), from, from),
            Due::At(t("2026-01-04T00:00:00Z"))
        );
        assert_eq!(
            due(&cron("@hourly"), History::default(), from, from),
            Due::At(t("2026-01-01T01:00:00Z"))
        );
    }

    #[test]
    fn bad_cron_is_an_input_error() {
        for bad in [
            "every day",
            "* * * *",
            "0 0 * * * *",
            "61 * * * *",
            "0 0 30 2 *",
        ] {
            let err = Trigger::parse(BackupSchedule::Cron(bad)).unwrap_err();
            assert!(err.to_string().contains(bad), "{err}");
        }
    }
}
