//! coreos-compatible object names for scheduled backups, and retention.
//!
//! Scheduled runs write `<base>_v<revision>_<YYYY-MM-DD-HH:MM:SS>` (UTC), exactly as the coreos
//! backup-operator did, so existing tooling still finds them. Retention orders by the parsed
//! time and revision, never by string order: coreos sorted names as strings and deleted the
//! newest backup when the revision gained a digit (`_v99_` sorts after `_v100_`).

use chrono::{DateTime, NaiveDateTime, Utc};

use crate::manifest::MANIFEST_SUFFIX;

const TIME_FORMAT: &str = "%Y-%m-%d-%H:%M:%S";

/// The name of a scheduled backup of `base` taken at `time` with `revision`.
pub fn scheduled_name(base: &str, revision: i64, time: DateTime<Utc>) -> String {
    format!("{base}_v{revision}_{}", time.format(TIME_FORMAT))
}

/// A scheduled backup recognised by its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledBackup {
    pub key: String,
    pub revision: i64,
    pub time: DateTime<Utc>,
}

/// Parses `key` as a scheduled backup of `base`; anything else (other objects sharing the
/// prefix, manifests, temp files) is not ours and yields `None`.
pub fn parse_scheduled(base: &str, key: &str) -> Option<ScheduledBackup> {
    let rest = key.strip_prefix(base)?.strip_prefix("_v")?;
    let (revision, time) = rest.split_once('_')?;
    if revision.is_empty() || !revision.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let time = NaiveDateTime::parse_from_str(time, TIME_FORMAT).ok()?;
    Some(ScheduledBackup {
        key: key.to_string(),
        revision: revision.parse().ok()?,
        time: time.and_utc(),
    })
}

/// True for the keys backups of `base` are stored under: `base` itself (a one-shot backup) and
/// its scheduled names. What abandoned-upload cleanup may touch; never a manifest, another
/// base's backups or another tool's objects under the same prefix.
pub fn is_backup_of(base: &str, key: &str) -> bool {
    key == base || parse_scheduled(base, key).is_some()
}

/// Keys to delete so that the newest `keep` backups of `base` remain (at least one: the
/// newest is never deleted). Newest means latest time, then highest revision. The manifest of
/// each deleted backup is listed right after it. Keys that are not backups of `base` are never
/// returned.
pub fn select_for_deletion<'a>(
    base: &str,
    keys: impl IntoIterator<Item = &'a str>,
    keep: usize,
) -> Vec<String> {
    let keys: Vec<&str> = keys.into_iter().collect();
    let mut backups: Vec<ScheduledBackup> = keys
        .iter()
        .filter(|k| !k.ends_with(MANIFEST_SUFFIX))
        .filter_map(|k| parse_scheduled(base, k))
        .collect();
    backups.sort_by_key(|b| std::cmp::Reverse((b.time, b.revision)));
    let mut delete = Vec::new();
    for old in backups.into_iter().skip(keep.max(1)) {
        let manifest = format!("{}{MANIFEST_SUFFIX}", old.key);
        delete.push(old.key);
        if keys.contains(&manifest.as_str()) {
            delete.push(manifest);
        }
    }
    delete
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backups_of_a_base_are_its_own_key_and_its_scheduled_names() {
        let base = "etcd/prod.backup";
        assert!(is_backup_of(base, base));
        assert!(is_backup_of(
            base,
            "etcd/prod.backup_v42_2026-11-24-06:00:00"
        ));
        for other in [
            "etcd/prod.backup.manifest.json",
            "etcd/prod.backup-notes",
            "etcd/prod.backup_v42_2026-11-24-06:00:00.manifest.json",
            "etcd/prod.backup2_v1_2026-11-24-06:00:00",
            "etcd/mysql.xbstream",
        ] {
            assert!(!is_backup_of(base, other), "{other}");
        }
    }

    fn at(s: &str) -> DateTime<Utc> {
        NaiveDateTime::parse_from_str(s, TIME_FORMAT)
            .unwrap()
            .and_utc()
    }

    #[test]
    fn names_match_coreos() {
        let t = at("2019-12-15-15:57:59");
        assert_eq!(
            scheduled_name("etcd.backup", 3, t),
            "etcd.backup_v3_2019-12-15-15:57:59"
        );
        let parsed = parse_scheduled("etcd.backup", "etcd.backup_v3_2019-12-15-15:57:59").unwrap();
        assert_eq!((parsed.revision, parsed.time), (3, t));
    }

    #[test]
    fn foreign_keys_are_not_ours() {
        for key in [
            "etcd.backup",
            "etcd.backup-old_v3_2019-12-15-15:57:59",
            "etcd.backup_vx_2019-12-15-15:57:59",
            "etcd.backup_v3_yesterday",
            "etcd.backup_v3_2019-12-15-15:57:59.manifest.json.tmp",
            "other_v3_2019-12-15-15:57:59",
        ] {
            assert_eq!(parse_scheduled("etcd.backup", key), None, "{key}");
        }
    }

    #[test]
    fn revision_gaining_a_digit_keeps_the_newest() {
        // String order would put _v99_ first and delete _v100_, the newest (coreos #2113).
        let keys = [
            "b_v98_2020-01-01-00:00:00",
            "b_v99_2020-01-01-00:01:00",
            "b_v100_2020-01-01-00:02:00",
        ];
        let delete = select_for_deletion("b", keys, 2);
        assert_eq!(delete, vec!["b_v98_2020-01-01-00:00:00"]);
    }

    #[test]
    fn same_second_orders_by_revision() {
        let keys = ["b_v100_2020-01-01-00:00:00", "b_v9_2020-01-01-00:00:00"];
        assert_eq!(
            select_for_deletion("b", keys, 1),
            vec!["b_v9_2020-01-01-00:00:00"]
        );
    }

    #[test]
    fn keep_zero_still_keeps_the_newest_and_manifests_go_with_their_backup() {
        let keys = [
            "b_v1_2020-01-01-00:00:00",
            "b_v1_2020-01-01-00:00:00.manifest.json",
            "b_v2_2020-01-02-00:00:00",
            "b_v2_2020-01-02-00:00:00.manifest.json",
            "b-unrelated",
        ];
        let delete = select_for_deletion("b", keys, 0);
        assert_eq!(
            delete,
            vec![
                "b_v1_2020-01-01-00:00:00",
                "b_v1_2020-01-01-00:00:00.manifest.json"
            ]
        );
    }
}
