//! The cron schedules users give the operators (scheduled backups and drills, defragmentation):
//! five fields or a macro, in UTC, checked when the spec is read so that a bad one is an input
//! error with a reason, never a schedule that silently never fires.

use std::str::FromStr;

use chrono::Utc;
use croner::Cron;

/// A `schedule` the operators do not accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {schedule:?} is not a valid cron expression: {message}")]
pub struct InvalidSchedule {
    /// The field it was given in, e.g. `spec.backupPolicy.schedule`.
    pub field: &'static str,
    pub schedule: String,
    pub message: String,
}

/// Parses `text`, given in `field`: `minute hour day-of-month month day-of-week` or a macro
/// (`@daily`, ...).
pub fn parse(field: &'static str, text: &str) -> Result<Cron, InvalidSchedule> {
    let invalid = |message: String| InvalidSchedule {
        field,
        schedule: text.to_string(),
        message,
    };
    // Five fields or a macro, as documented; croner would also take seconds and years.
    let text = text.trim();
    if !text.starts_with('@') && text.split_whitespace().count() != 5 {
        return Err(invalid(
            "expected five fields: minute hour day-of-month month day-of-week".into(),
        ));
    }
    let cron = Cron::from_str(text).map_err(|e| invalid(e.to_string()))?;
    // A pattern that never fires (e.g. 30 February) is an input error, not a hang.
    cron.find_next_occurrence(&Utc::now(), false)
        .map_err(|e| invalid(e.to_string()))?;
    Ok(cron)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_fields_or_a_macro_that_fires() {
        for ok in ["0 3 * * *", "*/15 * * * 1-5", "@daily", " 0 3 * * 0 "] {
            assert!(parse("spec.x", ok).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("0 0 3 * * *", "expected five fields"),
            ("0 3 * *", "expected five fields"),
            ("0 0 30 2 *", ""),
            ("61 * * * *", ""),
        ] {
            let err = parse("spec.x", bad).unwrap_err();
            assert_eq!(err.field, "spec.x");
            assert!(err.message.contains(why), "{bad}: {err}");
            assert!(err.to_string().starts_with("spec.x "), "{err}");
        }
    }
}
