//! Restore to a point with real MariaDB servers: a full backup, binlogs archived by
//! `archive-binlogs` (compressed and age-encrypted) while the server writes and rotates, a
//! `DROP TABLE`, then `restore --until-gtid` / `--until` bring back every row committed before
//! the point and none after, on a server started on the restored data dir.

mod common;

use std::time::Duration;

use common::*;

/// Inserts rows `from..to` of `table`, one transaction each.
fn insert_rows(server: &Mariadb, table: &str, rows: std::ops::Range<u32>) {
    let sql: String = rows
        .map(|i| format!("INSERT INTO {table} VALUES ({i}, 'row-{i}');"))
        .collect();
    server.sql(&sql);
}

fn rows(server: &Mariadb, table: &str) -> Vec<u32> {
    server
        .sql(&format!("SELECT id FROM {table} ORDER BY id"))
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

struct Archive {
    _dir: tempfile::TempDir,
    backups: String,
    binlogs: String,
    binlogs_dir: std::path::PathBuf,
    identity: String,
    recipients: String,
}

impl Archive {
    fn new() -> Archive {
        let dir = tempfile::tempdir().unwrap();
        let (identity, recipients) = age_key_files(dir.path());
        let binlogs_dir = dir.path().join("binlogs");
        Archive {
            backups: format!("file://{}/backups/", dir.path().display()),
            binlogs: format!("file://{}/", binlogs_dir.display()),
            binlogs_dir,
            identity: identity.display().to_string(),
            recipients: recipients.display().to_string(),
            _dir: dir,
        }
    }

    async fn archive_once(&self, server: &Mariadb) -> serde_json::Value {
        let a = args(&[
            "archive-binlogs",
            "--once",
            "--to",
            &self.binlogs,
            "--datadir",
            server.datadir.to_str().unwrap(),
            "--compress",
            "zstd",
            "--encrypt-to-file",
            &self.recipients,
            // Small pieces: every file is archived in several.
            "--max-piece-mib",
            "1",
        ]);
        run(&a, &[]).await.ok().json()
    }

    /// `restore --until...` into a new data dir; the run and the data dir.
    async fn restore(&self, point: &[&str]) -> (Run, tempfile::TempDir) {
        let target = tempfile::tempdir().unwrap();
        let datadir = target.path().join("restored");
        let mut a = args(&[
            "restore",
            "--from",
            &self.backups,
            "--binlogs",
            &self.binlogs,
            "--datadir",
            datadir.to_str().unwrap(),
            "--identity",
            &self.identity,
        ]);
        a.extend(args(point));
        (run(&a, &[]).await, target)
    }

    /// The pieces' manifests: (key, manifest), sorted by key.
    fn pieces(&self) -> Vec<(String, serde_json::Value)> {
        let mut out = Vec::new();
        for dir in std::fs::read_dir(&self.binlogs_dir).unwrap() {
            for f in std::fs::read_dir(dir.unwrap().path()).unwrap() {
                let path = f.unwrap().path();
                let name = path.display().to_string();
                if let Some(piece) = name.strip_suffix(".manifest.json") {
                    let m = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
                    out.push((piece.to_string(), m));
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_table_comes_back_as_it_was_one_transaction_before() {
    let source = Mariadb::fresh(7);
    source.sql(
        "CREATE DATABASE shop;
         CREATE TABLE shop.orders (id INT PRIMARY KEY, item VARCHAR(64)) ENGINE=InnoDB;
         CREATE TABLE shop.notes (id INT PRIMARY KEY, note TEXT) ENGINE=Aria;",
    );
    insert_rows(&source, "shop.orders", 0..50);
    let archive = Archive::new();
    let a = source.backup_to(
        &format!("{}full-1", archive.backups),
        &["--compress", "zstd"],
    );
    run(&a, &[]).await.ok();

    // After the backup: rows in both engines (Aria commits with a COMMIT query, InnoDB with
    // an XID), big rows (logged as rows) that make several pieces, a rotation in the middle.
    insert_rows(&source, "shop.orders", 50..120);
    insert_rows(&source, "shop.notes", 0..20);
    source.sql("FLUSH BINARY LOGS;");
    source.sql("CREATE TABLE shop.big (id INT PRIMARY KEY, body LONGBLOB);");
    for i in 0..6 {
        source.sql(&format!(
            "SET SESSION binlog_format = 'ROW';
             INSERT INTO shop.big VALUES ({i}, REPEAT(SHA2('{i}', 256), 20000));"
        ));
    }
    insert_rows(&source, "shop.orders", 120..150);
    let first = archive.archive_once(&source).await;
    assert!(first["pieces"].as_u64().unwrap() >= 3, "{first}");
    // Killed between a piece and its manifest: the piece does not count, and the next pass
    // stores that range again under the same key.
    let mut pieces_before = archive.pieces();
    let (unfinished, _) = pieces_before.pop().unwrap();
    std::fs::remove_file(format!("{unfinished}.manifest.json")).unwrap();

    // The incident, and writes after it.
    source.sql("DROP TABLE shop.orders;");
    let after_drop = source.sql("SELECT @@gtid_binlog_pos");
    let drop_gtid = {
        let g: Vec<&str> = after_drop.split('-').collect();
        format!("{}-{}-{}", g[0], g[1], g[2])
    };
    source.sql("CREATE TABLE shop.later (id INT PRIMARY KEY, item VARCHAR(64));");
    insert_rows(&source, "shop.later", 0..5);
    insert_rows(&source, "shop.notes", 20..25);
    let second = archive.archive_once(&source).await;
    assert!(second["pieces"].as_u64().unwrap() >= 1, "{second}");

    // Resumed from the store: what the first pass stored is untouched (a complete file is
    // never rewritten), and every byte of every file is in exactly one piece.
    let pieces = archive.pieces();
    assert!(
        pieces.iter().any(|(k, _)| *k == unfinished),
        "{unfinished} not stored again"
    );
    for (key, manifest) in &pieces_before {
        let now = pieces.iter().find(|(k, _)| k == key).unwrap();
        if manifest["fileComplete"] == true {
            assert_eq!(&now.1, manifest, "{key} was rewritten");
        }
    }
    let mut next_start = std::collections::BTreeMap::new();
    for (key, m) in &pieces {
        let dir = key.rsplit_once('/').unwrap().0;
        let expected = next_start.get(dir).copied().unwrap_or(0);
        assert_eq!(
            m["start"].as_u64().unwrap(),
            expected,
            "{key}: gap or overlap"
        );
        next_start.insert(dir, m["end"].as_u64().unwrap());
    }
    for (dir, end) in &next_start {
        let file = dir.rsplit_once('-').unwrap().1;
        let len = std::fs::metadata(source.datadir.join(file)).unwrap().len();
        assert_eq!(*end, len, "{file} not archived to its end");
    }
    assert!(next_start.len() >= 2, "the rotation made a second file");
    let listed = run(
        &args(&["list-binlogs", &archive.binlogs, "--output", "json"]),
        &[],
    )
    .await
    .ok()
    .json();
    let files = listed.as_array().unwrap();
    assert_eq!(files.len(), next_start.len(), "{listed}");
    assert_eq!(files[0]["complete"], true, "rotated: {listed}");
    assert_eq!(
        files[files.len() - 1]["complete"],
        false,
        "still written: {listed}"
    );

    // Just before the DROP: every order, notes up to 20, no table created after it.
    let (restored, target) = archive.restore(&["--until-gtid", &drop_gtid]).await;
    let report = restored.ok().json();
    assert_eq!(report["stoppedBefore"], drop_gtid.as_str(), "{report}");
    assert!(
        report["transactionsApplied"].as_u64().unwrap() >= 100,
        "{report}"
    );
    let server = Mariadb::start_on(&target.path().join("restored"), 7);
    assert_eq!(rows(&server, "shop.orders"), (0..150).collect::<Vec<_>>());
    assert_eq!(rows(&server, "shop.notes"), (0..20).collect::<Vec<_>>());
    assert_eq!(server.sql("SELECT COUNT(*) FROM shop.big"), "6");
    assert_eq!(
        server.sql("SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'later'"),
        "0"
    );
    // The restored server continues the history: its binlog holds the replayed GTIDs.
    assert_eq!(
        server.sql("SELECT @@gtid_binlog_pos"),
        report["lastAppliedGtid"].as_str().unwrap()
    );
    drop(server);

    // A point the archive does not reach is refused before the data dir is touched.
    let beyond = format!(
        "0-7-{}",
        drop_gtid
            .rsplit('-')
            .next()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            + 1000
    );
    let (refused, target) = archive.restore(&["--until-gtid", &beyond]).await;
    assert_ne!(refused.code, 0);
    assert!(
        refused.stderr.contains("the archive ends before the point"),
        "{}",
        refused.stderr
    );
    assert!(!target.path().join("restored").exists());

    // Pruned to a newer backup: the finished files it holds entirely go, the backup before it
    // too, and a restore to a point after it still works from what is left.
    source.sql("FLUSH BINARY LOGS;");
    let a = source.backup_to(&format!("{}full-2", archive.backups), &[]);
    run(&a, &[]).await.ok();
    insert_rows(&source, "shop.notes", 25..30);
    source.sql("INSERT INTO shop.notes VALUES (99, 'marker');");
    let marker = source.sql("SELECT @@gtid_binlog_pos");
    archive.archive_once(&source).await;
    let prune = args(&[
        "prune",
        &archive.backups,
        "--keep",
        "1",
        "--binlogs",
        &archive.binlogs,
    ]);
    let pruned = run(&prune, &[]).await.ok().json();
    assert_eq!(pruned["deleted"].as_array().unwrap().len(), 2, "{pruned}");
    let deleted = pruned["deletedBinlogs"].as_array().unwrap();
    assert!(
        deleted
            .iter()
            .any(|k| k.as_str().unwrap().contains("-bin.000001/")),
        "{pruned}"
    );
    assert!(
        !deleted
            .iter()
            .any(|k| k.as_str().unwrap().contains("-bin.000003/")),
        "{pruned}"
    );
    let (restored, target) = archive.restore(&["--until-gtid", &marker]).await;
    assert_eq!(restored.ok().json()["stoppedBefore"], marker.as_str());
    let server = Mariadb::start_on(&target.path().join("restored"), 7);
    assert_eq!(rows(&server, "shop.notes"), (0..30).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_until_a_time_keeps_what_was_committed_before_it() {
    let source = Mariadb::fresh(8);
    source.sql(
        "CREATE DATABASE shop; CREATE TABLE shop.orders (id INT PRIMARY KEY, item VARCHAR(64));",
    );
    insert_rows(&source, "shop.orders", 0..10);
    let archive = Archive::new();
    let a = source.backup_to(&format!("{}full-1", archive.backups), &[]);
    run(&a, &[]).await.ok();
    insert_rows(&source, "shop.orders", 10..20);
    // Events carry whole seconds: the point is the start of a second after the first batch.
    let now = chrono::Utc::now();
    let point = chrono::DateTime::from_timestamp(now.timestamp() + 1, 0).unwrap();
    tokio::time::sleep(Duration::from_millis(
        (point - chrono::Utc::now()).num_milliseconds().max(0) as u64 + 50,
    ))
    .await;
    insert_rows(&source, "shop.orders", 20..30);
    archive.archive_once(&source).await;

    let (restored, target) = archive.restore(&["--until", &point.to_rfc3339()]).await;
    restored.ok();
    let server = Mariadb::start_on(&target.path().join("restored"), 8);
    assert_eq!(rows(&server, "shop.orders"), (0..20).collect::<Vec<_>>());
    drop(server);

    // A time after the last archived event: refused, naming how far the archive reaches.
    let later = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let (refused, _target) = archive.restore(&["--until", &later]).await;
    assert_ne!(refused.code, 0);
    assert!(
        refused.stderr.contains("its last transaction is 0-8-"),
        "{}",
        refused.stderr
    );
}
