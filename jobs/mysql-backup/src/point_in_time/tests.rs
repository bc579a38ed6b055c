use chrono::{DateTime, Utc};

use super::*;
use crate::binlog_archive::{Piece, PieceManifest};
use crate::manifest::{FORMAT, Manifest};
use crate::metadata::BackupMetadata;

fn time(hhmm: &str) -> DateTime<Utc> {
    format!("2026-11-30T{hhmm}:00Z").parse().unwrap()
}

/// A backup completed at `completed`, taken at `file`:`position` with binlog state `gtid`.
fn backup(key: &str, completed: &str, file: &str, position: u64, gtid: Option<&str>) -> Backup {
    let t = time(completed);
    Backup {
        key: key.into(),
        manifest: Manifest {
            format: FORMAT.into(),
            stored_bytes: 1,
            stored_sha256: Some(String::new()),
            stored_crc32c: None,
            stored_etag: None,
            compression: Default::default(),
            encryption: None,
            stream_bytes: 1,
            stream_sha256: None,
            payload_bytes: 1,
            file_count: 1,
            tool_family: crate::profile::Family::Mariadb,
            backup: BackupMetadata {
                binlog: gtid.map(|g| BinlogPosition {
                    file: file.into(),
                    position,
                    gtid: Some(g.into()),
                }),
                ..Default::default()
            },
            source: "local".into(),
            lineage: None,
            incremental: None,
            start_time: t,
            completion_time: t,
            duration_seconds: 0.0,
            runner: String::new(),
        },
    }
}

/// An archived file created at `created`, archived to `end`, from state `start` to `end_state`.
fn file(
    name: &str,
    created: &str,
    end: u64,
    (start_state, end_state): (&str, &str),
    last_event: &str,
    complete: bool,
) -> ArchivedFile {
    let dir = format!("a/{created}-7-{name}/");
    ArchivedFile {
        pieces: vec![Piece {
            key: format!("{dir}000000000000"),
            manifest: PieceManifest {
                last_gtid: end_state.split(',').next_back().map(String::from),
                last_event_time: Some(time(last_event)),
                ..crate::binlog_archive::testing::manifest(
                    name,
                    time(created),
                    (0, end),
                    (start_state, end_state),
                    complete,
                )
            },
        }],
        dir,
    }
}

fn gtid(s: &str) -> Point {
    Point::BeforeGtid(s.parse().unwrap())
}

/// Backups at 01:00 (0-7-10 in bin.000001) and 02:00 (0-7-20 in bin.000002); bin.000001
/// rotated into bin.000002, which is still being written (last event 02:30, 0-7-30).
fn world() -> (Vec<Backup>, Archive) {
    let backups = vec![
        backup("full-2", "02:00", "bin.000002", 900, Some("0-7-20")),
        backup("full-1", "01:00", "bin.000001", 500, Some("0-7-10")),
    ];
    let archive = Archive {
        files: vec![
            file("bin.000001", "00:00", 1000, ("", "0-7-15"), "01:30", true),
            file(
                "bin.000002",
                "01:30",
                2000,
                ("0-7-15", "0-7-30"),
                "02:30",
                false,
            ),
        ],
    };
    (backups, archive)
}

#[test]
fn when_the_point_is_after_the_newest_backup_then_it_is_the_base() {
    let (backups, archive) = world();
    let plan = plan(&backups, &archive, gtid("0-7-25")).unwrap();
    assert_eq!(plan.base.key, "full-2");
    assert_eq!(plan.base_state.to_string(), "0-7-20");
    assert_eq!(plan.files.len(), 1);
}

#[test]
fn when_the_newest_backup_holds_the_point_then_an_older_one_is_the_base_and_the_chain_follows_the_rotation()
 {
    let (backups, archive) = world();
    let plan = plan(&backups, &archive, gtid("0-7-18")).unwrap();
    assert_eq!(plan.base.key, "full-1");
    let names: Vec<&str> = plan.files.iter().map(|f| f.name()).collect();
    assert_eq!(names, ["bin.000001", "bin.000002"]);
}

#[test]
fn when_the_point_is_a_time_then_the_base_completed_at_or_before_it() {
    let (backups, archive) = world();
    let at_one_thirty = plan(&backups, &archive, Point::BeforeTime(time("01:30"))).unwrap();
    assert_eq!(at_one_thirty.base.key, "full-1");
    let at_two = plan(&backups, &archive, Point::BeforeTime(time("02:00"))).unwrap();
    assert_eq!(at_two.base.key, "full-2");
}

#[test]
fn when_every_backup_holds_the_point_then_it_is_refused_naming_the_oldest() {
    let (backups, archive) = world();
    let err = plan(&backups, &archive, gtid("0-7-5")).unwrap_err();
    assert!(
        matches!(&err, Unreachable::NoBackupBefore { oldest } if oldest.contains("full-1")),
        "{err}"
    );
}

#[test]
fn when_a_backup_has_no_binlog_coordinates_then_it_is_never_the_base() {
    let (mut backups, archive) = world();
    backups.insert(0, backup("no-binlog", "02:10", "", 0, None));
    assert_eq!(
        plan(&backups, &archive, gtid("0-7-25")).unwrap().base.key,
        "full-2"
    );
}

#[test]
fn when_two_archived_files_share_the_name_then_the_newest_created_before_the_backup_starts() {
    let (mut backups, mut archive) = world();
    // A restored server started its own bin.000001 at 03:00 and was backed up at 04:00.
    archive.files.push(file(
        "bin.000001",
        "03:00",
        700,
        ("0-7-15", "0-7-40"),
        "04:30",
        false,
    ));
    backups.insert(
        0,
        backup("full-3", "04:00", "bin.000001", 600, Some("0-7-35")),
    );
    let plan = plan(&backups, &archive, gtid("0-7-38")).unwrap();
    assert_eq!(plan.base.key, "full-3");
    assert_eq!(plan.files[0].created(), time("03:00"));
    // full-2's file is untouched by it.
    let older = super::plan(&backups, &archive, gtid("0-7-25")).unwrap();
    assert_eq!(older.files[0].created(), time("01:30"));
}

#[test]
fn when_the_archive_does_not_reach_the_backups_position_then_it_is_refused() {
    let (backups, mut archive) = world();
    archive.files[1] = file(
        "bin.000002",
        "01:30",
        800,
        ("0-7-15", "0-7-19"),
        "01:59",
        false,
    );
    let err = plan(&backups[..1], &archive, gtid("0-7-25")).unwrap_err();
    assert!(
        matches!(&err, Unreachable::NoStartFile { backup, .. } if backup == "full-2"),
        "{err}"
    );
}

#[test]
fn when_the_point_is_past_the_archive_then_it_is_refused_naming_its_last_transaction() {
    let (backups, archive) = world();
    let err = plan(&backups, &archive, gtid("0-7-31"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("its last transaction is 0-7-30 at 2026-11-30T02:30:00"),
        "{err}"
    );
    assert!(err.contains("bin.000002 is still being archived"), "{err}");
    let err = plan(&backups, &archive, Point::BeforeTime(time("02:31"))).unwrap_err();
    assert!(matches!(err, Unreachable::ArchiveEnds { .. }));
}

#[test]
fn when_no_archived_file_continues_a_complete_one_then_the_gap_is_named() {
    let (backups, mut archive) = world();
    // bin.000002 purged before it was archived; bin.000003 starts at another state.
    archive.files[1] = file(
        "bin.000003",
        "02:40",
        300,
        ("0-7-31", "0-7-33"),
        "02:45",
        false,
    );
    let err = plan(&backups[1..], &archive, gtid("0-7-32"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "bin.000001 is complete but no archived file continues from its end state 0-7-15"
        ),
        "{err}"
    );
}

#[test]
fn when_the_newest_bases_file_was_never_archived_then_an_older_base_that_reaches_is_taken() {
    let (mut backups, archive) = world();
    // full-2 holds transactions of a domain the archive never saw (another primary's).
    backups[0] = backup("full-2", "02:00", "bin.000002", 900, Some("0-7-20,1-9-5"));
    let plan = plan(&backups, &archive, gtid("0-7-25")).unwrap();
    assert_eq!(plan.base.key, "full-1");
    assert_eq!(plan.files.len(), 2);
    // When none reaches, the newest base's refusal is the one named.
    let err = super::plan(&backups, &archive, gtid("0-7-31")).unwrap_err();
    assert!(
        matches!(&err, Unreachable::NoStartFile { backup, .. } if backup == "full-2"),
        "{err}"
    );
}

#[test]
fn when_the_backup_was_taken_on_a_replica_then_its_gtid_state_finds_the_primarys_file() {
    let (mut backups, archive) = world();
    // The replica's own binlog coordinates name a file the primary's archive does not have.
    backups[0] = backup("full-r", "02:00", "bin.000009", 123, Some("0-7-22"));
    let plan = plan(&backups, &archive, gtid("0-7-25")).unwrap();
    assert_eq!(plan.base.key, "full-r");
    assert_eq!(plan.files[0].name(), "bin.000002");
}

#[test]
fn when_files_hold_no_transactions_then_the_chain_still_only_moves_forward() {
    let (backups, mut archive) = world();
    // bin.000002 complete, then two files without a transaction in the same second.
    archive.files[1] = file(
        "bin.000002",
        "01:30",
        2000,
        ("0-7-15", "0-7-30"),
        "02:30",
        true,
    );
    archive.files.push(file(
        "bin.000003",
        "02:40",
        400,
        ("0-7-30", "0-7-30"),
        "02:40",
        true,
    ));
    archive.files.push(file(
        "bin.000004",
        "02:40",
        400,
        ("0-7-30", "0-7-30"),
        "02:40",
        false,
    ));
    let err = plan(&backups, &archive, gtid("0-7-31"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("bin.000004 is still being archived"), "{err}");
}

#[test]
fn when_a_backups_gtid_cannot_be_read_then_it_is_never_the_base() {
    let (mut backups, archive) = world();
    // A MySQL GTID set: not a MariaDB state, nothing says what the backup holds.
    backups.insert(
        0,
        backup(
            "mysql",
            "02:10",
            "bin.000002",
            950,
            Some("3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5"),
        ),
    );
    assert_eq!(
        plan(&backups, &archive, gtid("0-7-25")).unwrap().base.key,
        "full-2"
    );
}

#[test]
fn when_the_point_has_another_server_id_then_its_domain_and_sequence_decide() {
    let (backups, archive) = world();
    // After a failover 0-9-25 follows 0-7-24 in domain 0: full-2 (0-7-20) is before it.
    let plan = plan(&backups, &archive, gtid("0-9-25")).unwrap();
    assert_eq!(plan.base.key, "full-2");
    // full-2 reached 0-9-18 (sequence 18 of domain 0), so full-1 is the base for it.
    assert_eq!(
        super::plan(&backups, &archive, gtid("0-9-18"))
            .unwrap()
            .base
            .key,
        "full-1"
    );
}

#[test]
fn when_a_replica_became_the_primary_then_its_files_continue_the_history() {
    let (backups, mut archive) = world();
    // The old primary (server 7) died in bin.000002 at 0-7-30; the promoted replica (server 8)
    // had received up to 0-7-28 and writes on from there in its own file.
    let mut promoted = file(
        "mysql-1-bin.000005",
        "02:35",
        900,
        ("0-7-28", "0-8-45"),
        "03:00",
        false,
    );
    promoted.pieces[0].manifest.server_id = 8;
    archive.files.push(promoted);
    let plan = plan(&backups, &archive, gtid("0-8-40")).unwrap();
    let names: Vec<&str> = plan.files.iter().map(|f| f.name()).collect();
    assert_eq!(names, ["bin.000002", "mysql-1-bin.000005"]);
}

#[test]
fn when_the_same_server_starts_a_file_before_an_earlier_ones_end_then_the_chain_never_crosses_the_fork()
 {
    let (mut backups, mut archive) = world();
    // The server was restored at 03:00 to 0-7-25: its own new file repeats sequence numbers
    // 26 to 30, which bin.000002 holds as other transactions.
    archive.files.push(file(
        "bin.000001",
        "03:00",
        700,
        ("0-7-25", "0-7-40"),
        "04:30",
        false,
    ));
    let err = plan(&backups, &archive, gtid("0-7-35")).unwrap_err();
    assert!(matches!(err, Unreachable::ArchiveEnds { .. }), "{err}");
    // A backup taken after the restore reaches into the new history.
    backups.insert(
        0,
        backup("full-3", "04:00", "bin.000001", 600, Some("0-7-33")),
    );
    let plan = plan(&backups, &archive, gtid("0-7-35")).unwrap();
    assert_eq!(plan.base.key, "full-3");
    assert_eq!(plan.files.len(), 1);
    assert_eq!(plan.files[0].created(), time("03:00"));
}

#[test]
fn when_another_servers_file_is_older_than_the_chains_start_then_it_never_continues_it() {
    let (backups, mut archive) = world();
    // A replica's file of an earlier history (before a restore) that spans bin.000002's end.
    let mut earlier = file(
        "bin.000009",
        "00:30",
        900,
        ("0-7-25", "0-9-50"),
        "01:00",
        true,
    );
    earlier.pieces[0].manifest.server_id = 9;
    archive.files.insert(0, earlier);
    let err = plan(&backups, &archive, gtid("0-9-40")).unwrap_err();
    assert!(matches!(err, Unreachable::ArchiveEnds { .. }), "{err}");
}
