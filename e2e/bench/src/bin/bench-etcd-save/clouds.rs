//! `--clouds`: `etcd-backup save` and `fetch` of one database to Garage (S3), fake-gcs-server
//! (GCS) and Azurite (Azure Blob), all on loopback over plain HTTP, in the same run, ROUNDS
//! times: time and peak RSS of each, and each cloud's time as a ratio of S3's (the median of
//! the rounds). Each save goes to a fresh name, so no server holds the bytes already.

use std::path::Path;

use anyhow::Result;
use testbed::{Azurite, Etcd, FakeGcs, Garage};

use crate::measure::{Measured, measure};

const ROUNDS: usize = 3;

/// One store: its name, the URL of a key, and the `etcd-backup` flags and environment.
struct Target {
    name: &'static str,
    base: String,
    flags: Vec<String>,
    env: Vec<(String, String)>,
    server: u32,
}

pub(crate) async fn run(etcd_backup: &Path, etcd: &Etcd, db_size: u64, work: &Path) -> Result<()> {
    let garage = Garage::start().await?;
    let gcs = FakeGcs::start().await?;
    let azurite = Azurite::start().await?;
    let (flags, env) = garage.cli_args();
    let (gcs_flags, _) = gcs.cli_args();
    let (azure_flags, _) = azurite.cli_args();
    let targets = [
        Target {
            name: "S3 (Garage)",
            base: format!("s3://{}/bench", garage.bucket),
            flags,
            env,
            server: garage.pid().unwrap_or(0),
        },
        Target {
            name: "GCS (fake-gcs-server)",
            base: format!("gs://{}/bench", gcs.bucket),
            flags: gcs_flags,
            env: vec![],
            server: gcs.pid().unwrap_or(0),
        },
        Target {
            name: "Azure (Azurite)",
            base: format!("azblob://{}/bench", azurite.container),
            flags: azure_flags,
            env: vec![],
            server: azurite.pid().unwrap_or(0),
        },
    ];
    let out = work.join("cloud-fetched.db");
    // [target][round] = (save, fetch)
    let mut all: Vec<Vec<(Measured, Measured)>> = targets.iter().map(|_| Vec::new()).collect();
    for round in 0..ROUNDS {
        for (t, target) in targets.iter().enumerate() {
            let url = format!("{}/round-{round}", target.base);
            let flags = target.flags.join(" ");
            let save = measure(
                "save",
                &format!(
                    "{} {flags} save --endpoints {} --to {url} >/dev/null",
                    etcd_backup.display(),
                    etcd.endpoint
                ),
                &target.env,
                &[etcd.pid(), target.server],
            )?;
            let fetch = measure(
                "fetch",
                &format!(
                    "{} {flags} fetch {url} --out {} >/dev/null",
                    etcd_backup.display(),
                    out.display()
                ),
                &target.env,
                &[target.server],
            )?;
            std::fs::remove_file(&out)?;
            eprintln!(
                "round {round} {}: save {:.2} s, fetch {:.2} s",
                target.name, save.seconds, fetch.seconds
            );
            all[t].push((save, fetch));
        }
    }
    println!(
        "\ndatabase: {:.0} MB, {ROUNDS} rounds (first round's figures; ratios are medians)",
        db_size as f64 / 1e6
    );
    println!(
        "{:<24} {:>6} {:>9} {:>10} {:>10} {:>12} {:>10} {:>10}",
        "store", "way", "seconds", "MB/s", "RSS MiB", "client CPU-s", "server CPU", "time / S3"
    );
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (t, target) in targets.iter().enumerate() {
        for (way, pick) in [("save", 0), ("fetch", 1)] {
            let of = |i: usize, r: usize| {
                let (s, f) = &all[i][r];
                if pick == 0 { s } else { f }
            };
            let ratio = median(
                (0..ROUNDS)
                    .map(|r| of(t, r).seconds / of(0, r).seconds)
                    .collect(),
            );
            let m = of(t, 0);
            println!(
                "{:<24} {:>6} {:>9.2} {:>10.1} {:>10.1} {:>12.2} {:>10.2} {:>10.2}",
                target.name,
                way,
                m.seconds,
                db_size as f64 / 1e6 / m.seconds.max(0.01),
                m.peak_rss_mib,
                m.user_seconds + m.system_seconds,
                m.server_cpu_seconds,
                ratio
            );
        }
    }
    Ok(())
}
