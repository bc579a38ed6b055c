//! Encryption (age) against the same way unencrypted, in rounds: save and fetch to and from S3,
//! and fetch from a directory (a PVC's backup), where no server shares the cores.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use testbed::Etcd;

use crate::measure::{Measured, measure};
use crate::{Store, save_script};

/// Rounds of the encryption comparison: on a 2-core machine shared with etcd and Garage, single
/// rounds of the fetch ratio ranged from 1.09 to 1.24 in one run.
pub(crate) const ENCRYPTION_ROUNDS: usize = 7;

/// Round `round` of (a), (e), (f) and (g), each save into an empty store; also gives the plain
/// store, which holds (a)'s backup. Both stores are up before the first way, and the ways turn
/// about from round to round (even rounds plain first, odd rounds encrypted first), so that
/// neither way always runs beside a Garage still settling the other's gigabyte, or after the
/// other's page cache.
pub(crate) async fn encryption_round(
    round: usize,
    etcd_backup: &Path,
    tls: &testbed::TlsFiles,
    etcd: &Etcd,
    keys: &Keys,
    fetched: &Path,
) -> Result<([Measured; 4], Store)> {
    let plain = Store::empty(tls).await?;
    let encrypted = Store::empty(tls).await?;
    let save = |store: &Store, encrypt: bool| -> Result<Measured> {
        if encrypt {
            let script = format!(
                "{} --encrypt-to {}",
                save_script(etcd_backup, store, etcd, "bench/encrypted"),
                keys.recipient
            );
            let label = "(e) etcd-backup save, encrypted";
            measure(label, &script, &store.env, &store.servers(etcd))
        } else {
            let script = save_script(etcd_backup, store, etcd, "bench/etcd-backup");
            let label = "(a) etcd-backup save -> S3";
            measure(label, &script, &store.env, &store.servers(etcd))
        }
    };
    let fetch = |store: &Store, encrypt: bool| -> Result<Measured> {
        let (label, key, with) = if encrypt {
            (
                "(g) etcd-backup fetch, encrypted",
                "bench/encrypted",
                Some(keys),
            )
        } else {
            ("(f) etcd-backup fetch", "bench/etcd-backup", None)
        };
        let script = fetch_script(etcd_backup, Some(store), &store.url(key), fetched, with);
        let measured = measure(label, &script, &store.env, &store.servers(etcd))?;
        std::fs::remove_file(fetched)?;
        Ok(measured)
    };
    let [a, e, f, g] = if round.is_multiple_of(2) {
        let a = save(&plain, false)?;
        let e = save(&encrypted, true)?;
        let f = fetch(&plain, false)?;
        [a, e, f, fetch(&encrypted, true)?]
    } else {
        let e = save(&encrypted, true)?;
        let a = save(&plain, false)?;
        let g = fetch(&encrypted, true)?;
        [a, e, fetch(&plain, false)?, g]
    };
    Ok(([a, e, f, g], plain))
}

/// The time ratio of the rounds (their median, each round's), and the client CPU-s/GiB that
/// encryption added in the first round.
pub(crate) fn encryption_cost(ratios: &[f64], plain_cpu: f64, encrypted_cpu: f64) -> String {
    let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    format!(
        "time {:.2} (rounds: {}); client CPU-s/GiB added {:.2} ({plain_cpu:.2} -> \
         {encrypted_cpu:.2})",
        median(ratios.to_vec()),
        each.join(", "),
        encrypted_cpu - plain_cpu
    )
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// An age key pair made by the reference tool (`age-keygen`).
pub(crate) struct Keys {
    pub(crate) identity: PathBuf,
    pub(crate) recipient: String,
}

impl Keys {
    pub(crate) fn generate(dir: &Path) -> Result<Keys> {
        let identity = dir.join("restore-key.txt");
        let made = Command::new("age-keygen")
            .arg("-o")
            .arg(&identity)
            .output()
            .context("cannot run age-keygen (apt install age)")?;
        if !made.status.success() {
            bail!("age-keygen: {}", String::from_utf8_lossy(&made.stderr));
        }
        let public = Command::new("age-keygen")
            .arg("-y")
            .arg(&identity)
            .output()?;
        Ok(Keys {
            identity,
            recipient: String::from_utf8(public.stdout)?.trim().to_string(),
        })
    }
}

/// `etcd-backup fetch` of the backup at `url` in `store` (`None`: `url` is a path).
pub(crate) fn fetch_script(
    etcd_backup: &Path,
    store: Option<&Store>,
    url: &str,
    out: &Path,
    keys: Option<&Keys>,
) -> String {
    let identity = keys.map_or(String::new(), |k| {
        format!(" --identity {}", k.identity.display())
    });
    format!(
        "{} {} fetch {url} --out {}{identity} >/dev/null",
        etcd_backup.display(),
        store.map_or(String::new(), Store::flags),
        out.display()
    )
}

/// (i) and (j), [`ENCRYPTION_ROUNDS`] times: `etcd-backup fetch` of a plain and of an encrypted
/// backup of `etcd` from a directory, as from a PVC. No S3 server shares the cores: this shows
/// what the client makes of them, as where S3 runs on other machines. The backups were just
/// written, so they are read from the page cache (as Garage reads what it just stored), and
/// the fetched file is written to memory (tmpfs): its flush to this machine's disk, the same
/// bytes in both ways, took seconds more or less from run to run and charged the fsync's work
/// to whichever way left more pages unwritten, which decided the ratio instead of the client.
pub(crate) fn directory_rounds(
    etcd_backup: &Path,
    etcd: &Etcd,
    keys: &Keys,
    dir: &Path,
) -> Result<Vec<[Measured; 2]>> {
    let memory = tempfile::tempdir_in("/dev/shm").context("a directory in /dev/shm (tmpfs)")?;
    let fetched = &memory.path().join("fetched.db");
    let backups = dir.join("pvc");
    std::fs::create_dir_all(&backups)?;
    let plain = backups.join("plain.backup");
    let encrypted = backups.join("encrypted.backup");
    let save = |to: &Path, encrypt: &str| {
        format!(
            "{} save --endpoints {} {} --to {}{encrypt} >/dev/null",
            etcd_backup.display(),
            etcd.endpoint,
            etcd.client_tls_flags().join(" "),
            to.display()
        )
    };
    measure("save to a directory", &save(&plain, ""), &[], &[])?;
    let encrypt = format!(" --encrypt-to {}", keys.recipient);
    measure("save to a directory", &save(&encrypted, &encrypt), &[], &[])?;
    let fetch = |backup: &Path, keys| {
        fetch_script(etcd_backup, None, &backup.to_string_lossy(), fetched, keys)
    };
    let fetch_from = |label, backup: &Path, keys| -> Result<Measured> {
        let measured = measure(label, &fetch(backup, keys), &[], &[])?;
        std::fs::remove_file(fetched)?;
        Ok(measured)
    };
    let mut rounds = Vec::new();
    for round in 0..ENCRYPTION_ROUNDS {
        // Turn about, so neither way always runs after the other's writeback.
        let [i, j] = if round % 2 == 0 {
            let i = fetch_from("(i) fetch from a directory", &plain, None)?;
            [
                i,
                fetch_from(
                    "(j) fetch from a directory, encrypted",
                    &encrypted,
                    Some(keys),
                )?,
            ]
        } else {
            let j = fetch_from(
                "(j) fetch from a directory, encrypted",
                &encrypted,
                Some(keys),
            )?;
            [fetch_from("(i) fetch from a directory", &plain, None)?, j]
        };
        rounds.push([i, j]);
    }
    std::fs::remove_dir_all(&backups)?;
    Ok(rounds)
}
