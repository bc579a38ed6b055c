//! Benchmark, run by hand (not a timed test): an incremental backup against a full one, with a
//! real MariaDB on this machine. Figures: docs/benchmarks/mysql-backup.md.
//!
//!   cargo test --release -p mysql-backup --test incremental_bench -- --ignored --nocapture
//!
//! A table of BENCH_INCREMENTAL_MIB (1024) MiB of incompressible rows (1 KiB each), flushed so
//! its pages are older than the first backup's checkpoint; a full backup (zstd, as the example's
//! CronJob stores it, to a local directory); then BENCH_CHANGED_PERCENT (5) % of the rows (a
//! contiguous range of ids: as many pages) updated. Then, of the same data, the night's backup
//! two ways: `--incremental` on the full backup, and a full backup (what a user without
//! incrementals stores every night). Reported: each one's stored bytes and time and the ratios
//! incremental / full; and the restore of the chain (full + incremental) against the restore
//! of the second full backup alone, both checked row by row against the server.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Waits until InnoDB has no dirty page left (so the next backup's checkpoint is after them).
fn flushed(server: &Mariadb) {
    server.sql("SET GLOBAL innodb_max_dirty_pages_pct_lwm = 0.001; SET GLOBAL innodb_max_dirty_pages_pct = 0;");
    let deadline = Instant::now() + Duration::from_secs(600);
    while server.sql("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'INNODB_BUFFER_POOL_PAGES_DIRTY'") != "0" {
        assert!(Instant::now() < deadline, "dirty pages never flushed");
        std::thread::sleep(Duration::from_millis(200));
    }
}

async fn timed(a: &[String]) -> (serde_json::Value, Duration) {
    let started = Instant::now();
    let report = run(a, &[]).await.ok().json();
    (report, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run by hand"]
async fn incremental_against_full() {
    let mib = env_number("BENCH_INCREMENTAL_MIB", 1024);
    let percent = env_number("BENCH_CHANGED_PERCENT", 5);
    let rows = mib * 1024;
    let server = Mariadb::fresh(1);
    let loading = Instant::now();
    server.sql(&format!(
        "CREATE DATABASE bench; CREATE TABLE bench.t (id BIGINT PRIMARY KEY, v VARBINARY(1024)) ENGINE=InnoDB;
         INSERT INTO bench.t SELECT seq, RANDOM_BYTES(1000) FROM bench.seq_1_to_{rows};"
    ));
    flushed(&server);
    eprintln!("loaded {rows} rows ({mib} MiB) in {:?}", loading.elapsed());

    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("file://{}/nightly-", dir.path().display());
    let backup = |name: &str, incremental: bool| {
        let mut extra = vec!["--compress", "zstd"];
        if incremental {
            extra.extend(["--incremental", prefix.as_str()]);
        }
        server.backup_to(&format!("{prefix}{name}"), &extra)
    };
    let (first, first_time) = timed(&backup("1-full", false)).await;
    server.sql(&format!(
        "UPDATE bench.t SET v = RANDOM_BYTES(1000) WHERE id <= {};",
        rows * percent / 100
    ));
    let expected = server.sql("SELECT COUNT(*), SUM(CRC32(v)) FROM bench.t");
    // Both of the same data: the incremental first, so the full one cannot make it smaller.
    let (incremental, incremental_time) = timed(&backup("2-incremental", true)).await;
    assert_eq!(
        incremental["format"], "mysql-backup/v1-incremental",
        "{incremental}"
    );
    let other = format!("file://{}/other-2-full", dir.path().display());
    let (full, full_time) = timed(&server.backup_to(&other, &["--compress", "zstd"])).await;

    let restore = async |from: &str, name: &str| {
        let target = dir.path().join(name);
        let a = args(&[
            "restore",
            "--from",
            from,
            "--datadir",
            target.to_str().unwrap(),
        ]);
        let (_, took) = timed(&a).await;
        let restored = Mariadb::start_on(&target, 7);
        assert_eq!(
            restored.sql("SELECT COUNT(*), SUM(CRC32(v)) FROM bench.t"),
            expected
        );
        drop(restored);
        std::fs::remove_dir_all(&target).unwrap();
        took
    };
    let chain_restore = restore(&format!("{prefix}2-incremental"), "chain").await;
    let full_restore = restore(&other, "full").await;

    let bytes = |r: &serde_json::Value| r["storedBytes"].as_u64().unwrap();
    let mib_of = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "data set {mib} MiB, {percent} % of the rows (and pages) changed; first full backup {:.1} MiB in {:.1} s",
        mib_of(bytes(&first)),
        first_time.as_secs_f64()
    );
    println!("| backup of the changed data | stored MiB | seconds |");
    println!("|---|---:|---:|");
    println!(
        "| incremental on the full backup | {:.1} | {:.1} |",
        mib_of(bytes(&incremental)),
        incremental_time.as_secs_f64()
    );
    println!(
        "| full backup | {:.1} | {:.1} |",
        mib_of(bytes(&full)),
        full_time.as_secs_f64()
    );
    println!(
        "| ratio incremental / full | {:.3} | {:.3} |",
        bytes(&incremental) as f64 / bytes(&full) as f64,
        incremental_time.as_secs_f64() / full_time.as_secs_f64()
    );
    println!(
        "restore of the chain (full + incremental) {:.1} s, of the full backup alone {:.1} s, ratio {:.2}",
        chain_restore.as_secs_f64(),
        full_restore.as_secs_f64(),
        chain_restore.as_secs_f64() / full_restore.as_secs_f64()
    );
}
