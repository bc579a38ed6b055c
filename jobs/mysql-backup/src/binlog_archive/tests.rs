use super::*;

fn piece(
    dir: &str,
    start: u64,
    end: u64,
    states: (&str, &str),
    created: &str,
    complete: bool,
) -> Piece {
    let file = dir.trim_end_matches('/').rsplit('-').next().unwrap();
    Piece {
        key: format!("{dir}{start:012}"),
        manifest: testing::manifest(file, time(created), (start, end), states, complete),
    }
}

/// bin.000001 (two pieces, 0-7-1..10), bin.000002 (10..20), bin.000003 (20..30, still
/// written), and a restored server's own bin.000001 created at 05:00 (0-7-5..8, complete).
fn archive() -> Archive {
    Archive::from_pieces(vec![
        piece("a/1-bin.000001/", 0, 100, ("", "0-7-6"), "01:00", false),
        piece(
            "a/1-bin.000001/",
            100,
            200,
            ("0-7-6", "0-7-10"),
            "01:00",
            true,
        ),
        piece(
            "a/2-bin.000002/",
            0,
            100,
            ("0-7-10", "0-7-20"),
            "02:00",
            true,
        ),
        piece(
            "a/3-bin.000003/",
            0,
            100,
            ("0-7-20", "0-7-30"),
            "03:00",
            false,
        ),
        piece("a/5-bin.000001/", 0, 100, ("0-7-5", "0-7-8"), "05:00", true),
    ])
}

fn time(hhmm: &str) -> DateTime<Utc> {
    format!("2026-11-30T{hhmm}:00Z").parse().unwrap()
}

#[test]
fn when_the_oldest_kept_backup_holds_every_transaction_of_a_finished_file_then_its_pieces_go_objects_first()
 {
    let state = GtidState::parse("0-7-15").unwrap();
    assert_eq!(
        archive().select_for_deletion(&state, time("02:30")),
        [
            "a/1-bin.000001/000000000000",
            "a/1-bin.000001/000000000100",
            "a/1-bin.000001/000000000000.manifest.json",
            "a/1-bin.000001/000000000100.manifest.json",
        ]
    );
}

#[test]
fn when_a_file_holds_a_transaction_after_the_backup_or_is_still_written_then_it_stays() {
    // bin.000002 ends at 20: a backup at 0-7-20 needs nothing of it; bin.000003 is not finished.
    let state = GtidState::parse("0-7-20").unwrap();
    let deleted = archive().select_for_deletion(&state, time("04:00"));
    assert!(deleted.iter().any(|k| k.starts_with("a/2-bin.000002/")));
    assert!(!deleted.iter().any(|k| k.starts_with("a/3-bin.000003/")));
    // At 0-7-19, bin.000002 still holds transaction 20.
    let state = GtidState::parse("0-7-19").unwrap();
    let deleted = archive().select_for_deletion(&state, time("04:00"));
    assert!(!deleted.iter().any(|k| k.starts_with("a/2-bin.000002/")));
}

#[test]
fn when_a_restored_servers_file_was_created_after_the_backup_then_it_stays_whatever_its_gtids() {
    let state = GtidState::parse("0-7-20").unwrap();
    let deleted = archive().select_for_deletion(&state, time("04:00"));
    assert!(
        !deleted.iter().any(|k| k.starts_with("a/5-bin.000001/")),
        "{deleted:?}"
    );
}
