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

/// The files `prune` would delete, by their marker's directory.
fn pruned(state: &str, completed: &str) -> Vec<String> {
    let state = GtidState::parse(state).unwrap();
    archive()
        .select_for_deletion(&state, time(completed))
        .into_iter()
        .map(|f| f.marker.trim_end_matches(PRUNED).to_string())
        .collect()
}

#[test]
fn when_the_oldest_kept_backup_holds_every_transaction_of_a_finished_file_then_its_pieces_go_objects_first()
 {
    let state = GtidState::parse("0-7-15").unwrap();
    assert_eq!(
        archive().select_for_deletion(&state, time("02:30")),
        [PrunedFile {
            marker: "a/1-bin.000001/pruned".into(),
            keys: vec![
                "a/1-bin.000001/000000000000".into(),
                "a/1-bin.000001/000000000100".into(),
                "a/1-bin.000001/000000000000.manifest.json".into(),
                "a/1-bin.000001/000000000100.manifest.json".into(),
            ],
        }]
    );
}

#[test]
fn when_a_file_ends_exactly_at_the_backups_state_then_it_stays_as_the_start_of_a_restore() {
    // A quiet server: nothing committed between the backup and the rotation, so the next file
    // (created after the backup) starts at its state and this one is where a restore starts.
    assert_eq!(pruned("0-7-20", "04:00"), ["a/1-bin.000001/"]);
    assert_eq!(
        pruned("0-7-21", "04:00"),
        ["a/1-bin.000001/", "a/2-bin.000002/"]
    );
}

#[test]
fn when_a_file_holds_a_transaction_after_the_backup_or_is_still_written_then_it_stays() {
    assert_eq!(pruned("0-7-19", "04:00"), ["a/1-bin.000001/"]);
    assert!(!pruned("0-7-40", "04:00").contains(&"a/3-bin.000003/".to_string()));
}

#[test]
fn when_a_restored_servers_file_was_created_after_the_backup_then_it_stays_whatever_its_gtids() {
    assert!(!pruned("0-7-20", "04:00").contains(&"a/5-bin.000001/".to_string()));
    assert!(pruned("0-7-20", "06:00").contains(&"a/5-bin.000001/".to_string()));
}

#[tokio::test]
async fn when_a_file_was_pruned_then_readers_skip_what_is_left_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/a/", dir.path().display());
    let location = backup_storage::Location::parse(&url).unwrap();
    let store = Store::open(&location, backup_storage::StoreOptions::default())
        .await
        .unwrap();
    let prefix = location.key();
    for (name, complete) in [("1-bin.000001", true), ("2-bin.000002", false)] {
        let key = piece_key(&format!("{prefix}{name}/"), 0);
        let mut m = testing::manifest(name, time("01:00"), (0, 10), ("", "0-7-1"), complete);
        m.stored_bytes = 3;
        store
            .put_small(&key, vec![1, 2, 3].into(), "")
            .await
            .unwrap();
        let manifest = manifest_key(&key);
        store
            .put_small(&manifest, m.to_json().into(), "")
            .await
            .unwrap();
    }
    // A prune that stopped after the marker and the first object.
    let marker = format!("{prefix}1-bin.000001/{PRUNED}");
    store
        .put_small(&marker, b"{}".to_vec().into(), "")
        .await
        .unwrap();
    store
        .delete(&piece_key(&format!("{prefix}1-bin.000001/"), 0))
        .await
        .unwrap();
    let archive = Archive::read(&store, &prefix).await.unwrap();
    assert_eq!(archive.files.len(), 1);
    assert!(archive.files[0].dir.ends_with("2-bin.000002/"));
    let (last, pruned) = Archive::read_last_pieces(&store, &prefix).await.unwrap();
    assert_eq!(last.len(), 1);
    assert_eq!(
        pruned.into_iter().collect::<Vec<_>>(),
        [format!("{prefix}1-bin.000001/")]
    );
}
