use super::*;
use crate::binlog::testing::{file, gtid_event, gtid_list, query, rows, xid};

/// A data dir with binlog files `files` (name, bytes) and their index; a file:// archive.
struct World {
    _dir: tempfile::TempDir,
    options: ArchiveOptions,
    store: Store,
    prefix: String,
}

impl World {
    async fn new(files: &[(&str, Vec<u8>)], max_piece: usize) -> World {
        let dir = tempfile::tempdir().unwrap();
        let datadir = dir.path().join("data");
        std::fs::create_dir(&datadir).unwrap();
        let mut index = String::new();
        for (name, bytes) in files {
            std::fs::write(datadir.join(name), bytes).unwrap();
            index.push_str(&format!("./{name}\n"));
        }
        std::fs::write(datadir.join("bin.index"), index).unwrap();
        let url = format!("file://{}/archive/", dir.path().display());
        let location = backup_storage::Location::parse(&url).unwrap();
        let store = Store::open(&location, backup_storage::StoreOptions::default())
            .await
            .unwrap();
        World {
            options: ArchiveOptions {
                datadir,
                index: None,
                max_piece,
                compression: Compression::None,
                zstd_level: 3,
                recipients: None,
            },
            store,
            prefix: location.key(),
            _dir: dir,
        }
    }

    async fn pass(&self) -> PassSummary {
        let mut progress = Progress::read(&self.store, &self.prefix).await.unwrap();
        archive_pass(&self.store, &self.prefix, &self.options, &mut progress)
            .await
            .unwrap()
    }

    async fn archive(&self) -> Archive {
        Archive::read(&self.store, &self.prefix).await.unwrap()
    }
}

fn transaction(seq: u64) -> Vec<Vec<u8>> {
    vec![gtid_event(seq, 0), query("BEGIN"), rows(40), xid()]
}

/// bin.000001 with transaction 1 and then `tail`, rotated into bin.000002 with transaction 2.
fn two_files(tail: Vec<Vec<u8>>) -> [(&'static str, Vec<u8>); 2] {
    let mut first = vec![gtid_list(&[])];
    first.extend(transaction(1));
    first.extend(tail);
    let mut second = vec![gtid_list(&[(0, 7, 1)])];
    second.extend(transaction(2));
    [("bin.000001", file(&first)), ("bin.000002", file(&second))]
}

#[tokio::test]
async fn when_a_crash_left_a_transaction_unfinished_and_a_later_file_exists_then_the_file_is_complete_without_it()
 {
    let committed = two_files(Vec::new())[0].1.len() as u64;
    // The server died while writing transaction 2: its BEGIN is there, its XID is not.
    let files = two_files(vec![gtid_event(2, 0), query("BEGIN")]);
    let world = World::new(&files, 1 << 20).await;
    world.pass().await;
    let archive = world.archive().await;
    assert_eq!(archive.files.len(), 2);
    let crashed = &archive.files[0];
    assert!(
        crashed.complete(),
        "a file the server ended must be complete"
    );
    assert_eq!(
        crashed.end(),
        committed,
        "the unfinished transaction is not archived"
    );
    assert_eq!(crashed.state_at_end().to_string(), "0-7-1");
    assert!(
        archive.files[1]
            .state_at_start()
            .same_position(&crashed.state_at_end())
    );
}

#[tokio::test]
async fn when_a_transaction_spans_several_pieces_then_each_but_the_last_says_it_ends_inside_it() {
    let mut events = vec![gtid_list(&[]), gtid_event(1, 0), query("BEGIN")];
    for _ in 0..10 {
        events.push(rows(300));
    }
    events.push(xid());
    events.extend(transaction(2));
    let world = World::new(&[("bin.000001", file(&events))], 700).await;
    world.pass().await;
    let archive = world.archive().await;
    let pieces: Vec<&PieceManifest> = archive.files[0]
        .pieces
        .iter()
        .map(|p| &p.manifest)
        .collect();
    assert!(pieces.len() >= 4, "{pieces:?}");
    let inside: Vec<bool> = pieces.iter().map(|m| m.ends_in_transaction).collect();
    // The first piece ends before the transaction; the middle ones inside it; the last after.
    let first_inside = inside.iter().position(|&i| i).unwrap();
    let last_inside = inside.iter().rposition(|&i| i).unwrap();
    assert!(
        inside[first_inside..=last_inside].iter().all(|&i| i),
        "{inside:?}"
    );
    assert!(!inside[pieces.len() - 1], "{inside:?}");
    for m in &pieces[first_inside..=last_inside] {
        assert_eq!(m.open_transaction.as_ref().unwrap().gtid, "0-7-1");
    }
    assert_eq!(pieces[pieces.len() - 1].state_at_end, "0-7-2");
}

#[tokio::test]
async fn when_a_pass_runs_again_then_nothing_is_stored_twice_and_new_bytes_follow_on() {
    let mut events = vec![gtid_list(&[])];
    events.extend(transaction(1));
    let world = World::new(&[("bin.000001", file(&events))], 1 << 20).await;
    assert_eq!(world.pass().await.pieces, 1);
    assert_eq!(world.pass().await.pieces, 0);
    events.extend(transaction(2));
    std::fs::write(world.options.datadir.join("bin.000001"), file(&events)).unwrap();
    assert_eq!(world.pass().await.pieces, 1);
    let archive = world.archive().await;
    let ends: Vec<(u64, u64)> = archive.files[0]
        .pieces
        .iter()
        .map(|p| (p.manifest.start, p.manifest.end))
        .collect();
    assert_eq!(ends[1].0, ends[0].1);
    assert_eq!(ends[1].1, file(&events).len() as u64);
    assert!(
        !archive.files[0].complete(),
        "the server may still write to it"
    );
}

#[tokio::test]
async fn when_the_servers_file_became_shorter_than_the_archive_then_the_file_is_finished_and_kept()
{
    let mut events = vec![gtid_list(&[])];
    events.extend(transaction(1));
    events.extend(transaction(2));
    let world = World::new(&[("bin.000001", file(&events))], 1 << 20).await;
    world.pass().await;
    let archived = world.archive().await.files[0].end();
    // A crash with sync_binlog=0 took transaction 2 back; the server went on in a new file.
    events.truncate(1 + 4);
    let data = &world.options.datadir;
    std::fs::write(data.join("bin.000001"), file(&events)).unwrap();
    let mut next = vec![gtid_list(&[(0, 7, 1)])];
    next.extend(transaction(2));
    std::fs::write(data.join("bin.000002"), file(&next)).unwrap();
    std::fs::write(data.join("bin.index"), "./bin.000001\n./bin.000002\n").unwrap();
    world.pass().await;
    let archive = world.archive().await;
    assert!(archive.files[0].complete());
    assert_eq!(archive.files[0].end(), archived, "what was archived stays");
    assert_eq!(archive.files.len(), 2);
}

#[tokio::test]
async fn when_a_left_files_tail_is_damaged_then_it_ends_where_it_can_be_read() {
    let readable = two_files(Vec::new())[0].1.len() as u64;
    let mut damaged = rows(40);
    let at = damaged.len() - 6;
    damaged[at] ^= 0xff;
    let files = two_files(vec![damaged]);
    let world = World::new(&files, 1 << 20).await;
    world.pass().await;
    let archive = world.archive().await;
    assert!(archive.files[0].complete());
    assert_eq!(archive.files[0].end(), readable);
    assert_eq!(
        archive.files[1].state_at_end().to_string(),
        "0-7-2",
        "the next file is archived"
    );
}

#[tokio::test]
async fn when_a_file_was_pruned_then_it_is_never_stored_again() {
    let world = World::new(&two_files(Vec::new()), 1 << 20).await;
    world.pass().await;
    let archive = world.archive().await;
    let pruned = archive.select_for_deletion(
        &GtidState::parse("0-7-2").unwrap(),
        Utc::now() + chrono::Duration::days(1),
    );
    assert_eq!(pruned.len(), 1, "{pruned:?}");
    world
        .store
        .put_small(&pruned[0].marker, b"{}".to_vec().into(), "")
        .await
        .unwrap();
    for key in &pruned[0].keys {
        world.store.delete(key).await.unwrap();
    }
    // The server still lists bin.000001; the archive does not take it again.
    assert_eq!(world.pass().await.pieces, 0);
    assert_eq!(world.archive().await.files.len(), 1);
}
