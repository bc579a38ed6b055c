//! Incremental backups with real MariaDB servers: a full backup, an incremental taken beside the
//! server and one pulled from `serve`, each restored (with its chain) to a server that holds
//! exactly the rows of its moment; a broken chain refused before the data dir is touched; a
//! restored data dir starting a chain of its own; prune keeping whole chains.

mod common;

use std::path::Path;

use common::*;

/// Every row of the sample's InnoDB table, as one comparable string (id, item, body's CRC).
fn orders(server: &Mariadb) -> String {
    server.sql("SELECT id, item, CRC32(body) FROM shop.orders ORDER BY id")
}

/// A server on a data dir restored from `args`, and the restore's report.
async fn restored(restore: &[String], dir: &Path) -> (Mariadb, serde_json::Value) {
    let datadir = dir.join(format!("restored-{}", rand_suffix()));
    let mut a = restore.to_vec();
    a.extend(args(&["--datadir", datadir.to_str().unwrap()]));
    let report = run(&a, &[]).await.ok().json();
    (Mariadb::start_on(&datadir, 7), report)
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_incrementals_restores_each_moment_row_by_row() {
    let source = Mariadb::fresh(1);
    source.write_sample();
    let work = tempfile::tempdir().unwrap();
    let prefix = format!("file://{}/chain/", work.path().display());
    let key = |name: &str| format!("{prefix}{name}");
    let backup = async |server: &Mariadb, name: &str| {
        let a = server.backup_to(
            &key(name),
            &["--compress", "zstd", "--incremental", &prefix],
        );
        run(&a, &[]).await.ok().json()
    };

    // A chain lives under one prefix: a backup elsewhere cannot build on it.
    let elsewhere = format!("file://{}/elsewhere/1", work.path().display());
    let a = source.backup_to(&elsewhere, &["--incremental", &prefix]);
    run(&a, &[])
        .await
        .assert_one_error_line("--to must be under the --incremental prefix");

    // No backup yet: a full one, and the output says why.
    let full = backup(&source, "1-full").await;
    assert_eq!(full["format"], "mysql-backup/v1", "{full}");
    assert!(
        full["fullBecause"].as_str().unwrap().contains("no backup"),
        "{full}"
    );
    assert!(full["lineage"].as_str().is_some(), "{full}");
    let at_full = orders(&source);
    // A backup never replaces another (here the base the next one would build on).
    let a = source.backup_to(&key("1-full"), &["--incremental", &prefix]);
    run(&a, &[]).await.assert_one_error_line("already exists");

    // A few pages change (100 neighbouring rows), two rows are added: an incremental on the full backup.
    source.sql("UPDATE shop.orders SET item = CONCAT(item, '-changed') WHERE id < 100;");
    source.sql(
        "INSERT INTO shop.orders VALUES (5000, 'after-full', 'x'), (5001, 'after-full', 'y');",
    );
    let first = backup(&source, "2-incremental").await;
    assert_eq!(first["format"], "mysql-backup/v1-incremental", "{first}");
    assert_eq!(
        first["incremental"]["base"], "1-full",
        "named beside it, so a copied prefix stays whole: {first}"
    );
    assert_eq!(first["fromLsn"], full["toLsn"]);
    assert_eq!(first["lineage"], full["lineage"]);
    assert!(first.get("fullBecause").is_none(), "{first}");
    // Smaller, not much smaller: the pages the sample wrote just before the full backup are
    // newer than its checkpoint, so they are copied again (sizes at scale: the benchmark).
    assert!(
        first["payloadBytes"].as_u64().unwrap() < full["payloadBytes"].as_u64().unwrap(),
        "an incremental copies only changed pages: {} vs {}",
        first["payloadBytes"],
        full["payloadBytes"]
    );
    let at_first = orders(&source);

    // Rows deleted, then an incremental pulled from `serve`: the protocol carries the base.
    source.sql("DELETE FROM shop.orders WHERE id BETWEEN 100 AND 199;");
    let (_serve, addr) = serve(&source, &[]);
    wait_listening(&addr).await;
    let a = args(&[
        "pull",
        "--from",
        &addr,
        "--to",
        &key("3-pulled"),
        "--incremental",
        &prefix,
    ]);
    let second = run(&a, &[]).await.ok().json();
    assert_eq!(second["format"], "mysql-backup/v1-incremental", "{second}");
    assert_eq!(second["fromLsn"], first["toLsn"]);
    assert_eq!(second["source"], format!("serve {addr}"));
    let at_second = orders(&source);
    assert_ne!(at_first, at_second);
    source.sql("DELETE FROM shop.orders WHERE id < 50;");

    // `list` shows the chain.
    let list = run(&args(&["list", &prefix, "--output", "json"]), &[])
        .await
        .ok()
        .json();
    let kinds: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["incremental", "incremental", "full"], "{list}");

    // Each backup restores its own moment: the newest applies the whole chain.
    let (server, report) = restored(
        &args(&["restore", "--from", &prefix, "--newest"]),
        work.path(),
    )
    .await;
    assert_eq!(report["chain"].as_array().unwrap().len(), 3, "{report}");
    assert_eq!(orders(&server), at_second);
    drop(server);
    let (server, _) = restored(
        &args(&["restore", "--from", &key("2-incremental")]),
        work.path(),
    )
    .await;
    assert_eq!(orders(&server), at_first);
    drop(server);
    let (restored_server, _) =
        restored(&args(&["restore", "--from", &key("1-full")]), work.path()).await;
    assert_eq!(orders(&restored_server), at_full);

    // The chain copied to another prefix (a copy off site, say) restores there as it is.
    let copy = work.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for entry in std::fs::read_dir(work.path().join("chain")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
    }
    let copied = format!("file://{}/", copy.display());
    let (server, report) = restored(
        &args(&["restore", "--from", &copied, "--newest"]),
        work.path(),
    )
    .await;
    assert_eq!(report["chain"].as_array().unwrap().len(), 3, "{report}");
    assert_eq!(orders(&server), at_second);
    drop(server);

    // A data dir made by a restore has a history of its own: asked for an incremental on the
    // chain, it takes a full backup and says why.
    let other = backup(&restored_server, "4-from-restored").await;
    assert_eq!(other["format"], "mysql-backup/v1", "{other}");
    assert!(
        other["fullBecause"]
            .as_str()
            .unwrap()
            .contains("not the one the chain was taken from"),
        "{other}"
    );
    assert_ne!(other["lineage"], full["lineage"]);
    drop(restored_server);
    std::fs::remove_file(work.path().join("chain/4-from-restored.manifest.json")).unwrap();
    std::fs::remove_file(work.path().join("chain/4-from-restored")).unwrap();

    // The middle link's manifest gone: the last incremental is refused, naming the link, and
    // the data dir is left as it was; --newest takes the newest backup that can be restored.
    let middle = work.path().join("chain/2-incremental.manifest.json");
    let saved = std::fs::read(&middle).unwrap();
    std::fs::remove_file(&middle).unwrap();
    let datadir = work.path().join("refused");
    let a = args(&[
        "restore",
        "--from",
        &key("3-pulled"),
        "--datadir",
        datadir.to_str().unwrap(),
    ]);
    let refused = run(&a, &[]).await;
    assert_eq!(refused.code, 3, "{}", refused.stderr);
    assert!(
        refused
            .error_line()
            .contains("2-incremental, which is not a complete backup"),
        "{}",
        refused.stderr
    );
    assert!(!datadir.exists());
    let (server, report) = restored(
        &args(&["restore", "--from", &prefix, "--newest"]),
        work.path(),
    )
    .await;
    assert_eq!(report["chain"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(orders(&server), at_full);
    drop(server);
    // Nor does a new incremental build on a broken chain.
    let after_break = backup(&source, "5-after-break").await;
    assert_eq!(after_break["format"], "mysql-backup/v1", "{after_break}");
    assert!(
        after_break["fullBecause"]
            .as_str()
            .unwrap()
            .contains("chain cannot be restored"),
        "{after_break}"
    );
    std::fs::write(&middle, saved).unwrap();

    // Prune keeping 2 restore points: the newest (a full backup) and 3-pulled, which keeps its
    // whole chain; nothing of the chain goes while 3-pulled is kept.
    let pruned = run(&args(&["prune", &prefix, "--keep", "2"]), &[])
        .await
        .ok()
        .json();
    assert_eq!(pruned["deleted"].as_array().unwrap().len(), 0, "{pruned}");
    let pruned = run(&args(&["prune", &prefix, "--keep", "1"]), &[])
        .await
        .ok()
        .json();
    let deleted: Vec<&str> = pruned["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert_eq!(deleted.len(), 6, "{pruned}");
    assert!(
        deleted[0].ends_with("3-pulled")
            && deleted[2].ends_with("2-incremental")
            && deleted[4].ends_with("1-full"),
        "{pruned}"
    );

    // The server's binlog GTIDs start again (RESET MASTER): an incremental would not continue
    // its base's history as recorded, so the night's backup is taken again, whole, naming why.
    source.sql("RESET MASTER;");
    let after_reset = backup(&source, "6-after-reset").await;
    assert_eq!(after_reset["format"], "mysql-backup/v1", "{after_reset}");
    assert!(
        after_reset["fullBecause"]
            .as_str()
            .unwrap()
            .contains("does not continue the base's"),
        "{after_reset}"
    );
    let (server, _) = restored(
        &args(&["restore", "--from", &key("6-after-reset")]),
        work.path(),
    )
    .await;
    assert_eq!(orders(&server), orders(&source));
}
