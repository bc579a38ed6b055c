//! The chain rules as specifications: "when X, then Y".

use chrono::{DateTime, Duration, Utc};

use super::*;
use crate::manifest::{FORMAT, FORMAT_INCREMENTAL, IncrementalOf, Manifest};

const DIR_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const DIR_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

fn at(hour: i64) -> DateTime<Utc> {
    "2026-11-30T00:00:00Z".parse::<DateTime<Utc>>().unwrap() + Duration::hours(hour)
}

/// A backup completed at `hour` (started half an hour before), from data dir `lineage`,
/// covering LSNs `from..to`, built on `base` when given.
fn backup(key: &str, hour: i64, lineage: &str, lsns: (u64, u64), base: Option<&str>) -> Backup {
    let mut manifest = Manifest::parse(
        &serde_json::to_vec(&serde_json::json!({
            "format": FORMAT, "storedBytes": 1, "storedSha256": "", "compression": "none",
            "streamBytes": 1, "payloadBytes": 1, "fileCount": 1, "toolFamily": "mariadb",
            "source": "local", "startTime": at(hour) - Duration::minutes(30),
            "completionTime": at(hour), "durationSeconds": 1.0, "runner": "test",
        }))
        .unwrap(),
    )
    .unwrap();
    manifest.lineage = Some(lineage.to_string());
    manifest.backup.from_lsn = Some(lsns.0);
    manifest.backup.to_lsn = Some(lsns.1);
    if let Some(base) = base {
        manifest.format = FORMAT_INCREMENTAL.into();
        manifest.backup.backup_type = Some(INCREMENTAL_TYPE.into());
        manifest.incremental = Some(IncrementalOf {
            base: base.into(),
            base_to_lsn: lsns.0,
        });
    }
    Backup {
        key: key.into(),
        manifest,
    }
}

/// full (0..100) <- inc1 (100..150) <- inc2 (150..180), newest first.
fn chain_of_two() -> Vec<Backup> {
    vec![
        backup("inc2", 3, DIR_A, (150, 180), Some("inc1")),
        backup("inc1", 2, DIR_A, (100, 150), Some("full")),
        backup("full", 1, DIR_A, (0, 100), None),
    ]
}

fn keys(chain: &[&Backup]) -> Vec<String> {
    chain.iter().map(|b| b.key.clone()).collect()
}

#[test]
fn when_every_link_holds_then_the_chain_is_the_full_backup_and_its_incrementals_in_order() {
    let backups = chain_of_two();
    assert_eq!(
        keys(&resolve(&backups[0], &backups).unwrap()),
        ["full", "inc1", "inc2"]
    );
    assert_eq!(keys(&resolve(&backups[2], &backups).unwrap()), ["full"]);
}

#[test]
fn when_a_base_is_gone_then_the_chain_names_the_missing_link() {
    let mut backups = chain_of_two();
    backups.remove(1);
    let e = resolve(&backups[0], &backups).unwrap_err();
    assert!(
        matches!(&e, ChainError::MissingBase { backup, base } if backup == "inc2" && base == "inc1"),
        "{e}"
    );
}

#[test]
fn when_a_link_crosses_data_dirs_then_it_is_refused_even_with_matching_lsns() {
    let mut backups = chain_of_two();
    backups[0].manifest.lineage = Some(DIR_B.into());
    let e = resolve(&backups[0], &backups).unwrap_err();
    assert!(matches!(e, ChainError::OtherDataDir { .. }), "{e}");
    // A base without a recorded lineage cannot prove it either.
    let mut backups = chain_of_two();
    backups[1].manifest.lineage = None;
    assert!(matches!(
        resolve(&backups[0], &backups).unwrap_err(),
        ChainError::OtherDataDir { .. }
    ));
}

#[test]
fn when_the_lsns_do_not_continue_then_the_link_is_refused() {
    let mut backups = chain_of_two();
    backups[0].manifest.backup.from_lsn = Some(151);
    assert!(matches!(
        resolve(&backups[0], &backups).unwrap_err(),
        ChainError::LsnGap { .. }
    ));
    // The stream and the manifest's record of the base must agree too.
    let mut backups = chain_of_two();
    backups[0]
        .manifest
        .incremental
        .as_mut()
        .unwrap()
        .base_to_lsn = 149;
    assert!(matches!(
        resolve(&backups[0], &backups).unwrap_err(),
        ChainError::LsnGap { .. }
    ));
}

#[test]
fn when_a_base_completed_after_its_incremental_started_then_the_link_is_refused() {
    let mut backups = chain_of_two();
    backups[1].manifest.completion_time = at(3);
    assert!(matches!(
        resolve(&backups[0], &backups).unwrap_err(),
        ChainError::BaseNotOlder { .. }
    ));
}

#[test]
fn when_there_is_no_backup_yet_then_a_full_one() {
    assert_eq!(choose_base(&[], 6, "new"), Err(FullBecause::NoBackupYet));
}

#[test]
fn when_the_newest_backup_records_no_lineage_or_end_lsn_then_a_full_one() {
    let mut backups = chain_of_two();
    backups[0].manifest.lineage = None;
    assert!(matches!(
        choose_base(&backups, 6, "new"),
        Err(FullBecause::NewestUntraceable { .. })
    ));
    let mut backups = chain_of_two();
    backups[0].manifest.backup.to_lsn = None;
    assert!(matches!(
        choose_base(&backups, 6, "new"),
        Err(FullBecause::NewestUntraceable { .. })
    ));
}

#[test]
fn when_the_newest_chain_is_broken_then_a_full_one_rather_than_an_unrestorable_incremental() {
    let mut backups = chain_of_two();
    backups.remove(2);
    assert!(matches!(
        choose_base(&backups, 6, "new"),
        Err(FullBecause::NewestChainBroken(
            ChainError::MissingBase { .. }
        ))
    ));
}

#[test]
fn when_the_chain_holds_max_incrementals_then_a_full_one_else_the_newest_is_the_base() {
    let backups = chain_of_two();
    assert_eq!(
        choose_base(&backups, 2, "new"),
        Err(FullBecause::ChainComplete {
            key: "inc2".into(),
            incrementals: 2
        })
    );
    assert_eq!(
        choose_base(&backups, 3, "new"),
        Ok(Base {
            key: "inc2".into(),
            lineage: Lineage::parse(DIR_A).unwrap(),
            to_lsn: 180,
            gtid: None,
        })
    );
    // A full backup is a chain of none: the first incremental builds on it.
    assert_eq!(choose_base(&backups[2..], 1, "new").unwrap().key, "full");
}

#[test]
fn when_the_new_backup_is_not_beside_the_newest_then_a_full_one() {
    let backups = chain_of_two();
    assert_eq!(choose_base(&backups, 6, "new").unwrap().key, "inc2");
    assert_eq!(
        choose_base(&backups, 6, "elsewhere/new"),
        Err(FullBecause::OtherDirectory { key: "inc2".into() })
    );
}

#[test]
fn the_source_takes_an_incremental_only_from_the_data_dir_of_the_chain_at_one_of_its_ends() {
    let here = |lineage: &str, ends: &[u64]| SourceDataDir {
        lineage: Lineage::parse(lineage).unwrap(),
        backup_ends: ends.to_vec(),
    };
    let request = IncrementalRequest {
        lineage: Lineage::parse(DIR_A).unwrap(),
        from_lsn: 180,
    };
    let a = here(DIR_A, &[100, 150, 180]);
    assert_eq!(decide_at_source(None, Some(&a)), Taken::Full(None));
    assert_eq!(
        decide_at_source(Some(&request), Some(&a)),
        Taken::Incremental { from_lsn: 180 }
    );
    assert_eq!(
        decide_at_source(Some(&request), None),
        Taken::Full(Some(FullBecause::SourceLineageUnknown))
    );
    assert!(matches!(
        decide_at_source(Some(&request), Some(&here(DIR_B, &[180]))),
        Taken::Full(Some(FullBecause::OtherDataDir { .. }))
    ));
    // Rewound to a copy from before the chain's newest backup: the file came back without it.
    assert_eq!(
        decide_at_source(Some(&request), Some(&here(DIR_A, &[100, 150]))),
        Taken::Full(Some(FullBecause::NotAnEndHere { lsn: 180 }))
    );
}

#[test]
fn an_incremental_must_continue_its_bases_gtids() {
    assert!(gtid_continues(Some("0-1-50"), Some("0-1-60")).is_ok());
    assert!(gtid_continues(Some("0-1-50"), Some("0-1-50")).is_ok());
    // Another server id in the domain continues it too (a promoted replica's writes).
    assert!(gtid_continues(Some("0-1-50"), Some("0-2-51")).is_ok());
    let restarted = gtid_continues(Some("0-1-50,1-1-7"), Some("0-1-60,1-1-3")).unwrap_err();
    assert!(restarted.contains("[1]"), "{restarted}");
    assert!(gtid_continues(Some("0-1-50"), None).is_err());
    // A base without a MariaDB GTID state cannot be checked.
    assert!(gtid_continues(None, Some("0-1-1")).is_ok());
    assert!(gtid_continues(Some("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-23"), None).is_ok());
}

#[test]
fn the_stream_must_be_what_was_taken() {
    let metadata = |kind: &str, from: u64, to: u64| BackupMetadata {
        backup_type: Some(kind.into()),
        from_lsn: Some(from),
        to_lsn: Some(to),
        ..Default::default()
    };
    let full = Taken::Full(None);
    let incremental = Taken::Incremental { from_lsn: 180 };
    assert!(check_stream(&full, &metadata("full-backuped", 0, 100)).is_ok());
    assert!(check_stream(&full, &metadata(INCREMENTAL_TYPE, 100, 180)).is_err());
    assert!(check_stream(&incremental, &metadata(INCREMENTAL_TYPE, 180, 180)).is_ok());
    assert!(check_stream(&incremental, &metadata("full-backuped", 0, 200)).is_err());
    assert!(check_stream(&incremental, &metadata(INCREMENTAL_TYPE, 100, 200)).is_err());
    let behind = check_stream(&incremental, &metadata(INCREMENTAL_TYPE, 180, 120)).unwrap_err();
    assert!(behind.contains("behind the chain"), "{behind}");
}

#[test]
fn when_manifests_loop_then_the_walk_stops_with_an_error() {
    // Two incrementals naming each other, all times equal (base_older cannot tell them apart).
    let mut a = backup("a", 1, DIR_A, (100, 100), Some("b"));
    let mut b = backup("b", 1, DIR_A, (100, 100), Some("a"));
    for m in [&mut a.manifest, &mut b.manifest] {
        m.start_time = at(1);
    }
    let backups = vec![a, b];
    assert!(matches!(
        resolve(&backups[0], &backups).unwrap_err(),
        ChainError::TooLong { .. }
    ));
    assert!(check_length(&vec![backups[0].clone(); MAX_CHAIN + 1]).is_err());
    assert!(check_length(&vec![backups[0].clone(); MAX_CHAIN]).is_ok());
}
