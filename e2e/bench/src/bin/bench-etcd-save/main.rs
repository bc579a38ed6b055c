//! Benchmark of `etcd-backup save` against the way users back up etcd today, in one run.
//!
//! It fills a real etcd with incompressible values and measures each way with GNU time (wall
//! time and peak RSS) against a real Garage S3 server behind a TLS front (S3 as users reach it,
//! over https; the front's CPU counts as the server's). Every way that uploads gets an empty
//! Garage of its own: Garage keeps a block it already holds only once, so a way storing the
//! bytes an earlier way stored (the same snapshot) would write almost nothing. A real S3 server
//! does not work that way, and a real backup is of new data. The ways:
//!   (a) `etcd-backup save` straight to S3,
//!   (b) `etcdctl snapshot save FILE && aws s3 cp FILE s3://...` (today's two-step way),
//!   (c) `etcdctl snapshot save FILE` alone,
//!   (d) `aws s3 cp FILE s3://...` alone,
//! and, for encryption (age), the same save encrypted (e), and `etcd-backup fetch` of the plain
//! (f) and the encrypted (g) object: encrypted against plain, same run;
//! (i) and (j), `etcd-backup fetch` of a plain and an encrypted backup from a directory (a
//! PVC's), where no S3 server shares the cores;
//! (h) `etcd-backup drill` of (a)'s backup, with what recording its contents cost inside (a);
//! then (a), (e) and (g) again on a small database, to show that memory does not grow with
//! snapshot size.
//!
//! `--clouds` measures instead `etcd-backup save` and `fetch` to Garage, fake-gcs-server and
//! Azurite, all over plain HTTP on loopback (see [`clouds`]).
//!
//! `--etcd-tls` runs etcd over TLS with client certificates (as a Kubernetes control plane
//! does); `--hold` fills etcd, prints the command of (a) with its environment and keeps the
//! servers up, to profile (a) by hand.
//!
//! Run it with `e2e/bench-etcd.sh` (builds release binaries first). Not a test: nothing here
//! asserts timings; it prints the figures and the ratios docs/benchmarks/etcd-backup.md records.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use testbed::{Etcd, Garage};

mod clouds;
mod encryption;
mod measure;

use measure::{Measured, measure};

use encryption::{
    ENCRYPTION_ROUNDS, Keys, directory_rounds, encryption_cost, encryption_round, fetch_script,
};

struct Args {
    size_mib: u64,
    small_mib: u64,
    etcd_backup: PathBuf,
    /// etcd over TLS with client certificates, as a Kubernetes control plane runs it.
    etcd_tls: bool,
    /// Fill etcd, print the command of (a) and its environment, then wait (for profiling).
    hold: bool,
    /// Save and fetch to S3, GCS and Azure emulators instead.
    clouds: bool,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        size_mib: 1024,
        small_mib: 100,
        etcd_backup: PathBuf::from("target/release/etcd-backup"),
        etcd_tls: false,
        hold: false,
        clouds: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--size-mib" => args.size_mib = value()?.parse()?,
            "--small-mib" => args.small_mib = value()?.parse()?,
            "--etcd-backup" => args.etcd_backup = value()?.into(),
            "--etcd-tls" => args.etcd_tls = true,
            "--hold" => args.hold = true,
            "--clouds" => args.clouds = true,
            _ => bail!(
                "usage: bench-etcd-save [--size-mib 1024] [--small-mib 100] [--etcd-backup PATH] [--etcd-tls] [--hold] [--clouds]"
            ),
        }
    }
    if !args.etcd_backup.exists() {
        bail!(
            "{} not found: build it with `cargo build --release -p etcd-backup`",
            args.etcd_backup.display()
        );
    }
    Ok(args)
}

async fn filled_etcd(mib: u64, tls: Option<&testbed::TlsFiles>) -> Result<(Etcd, u64)> {
    let etcd = match tls {
        Some(tls) => Etcd::start_tls(tls).await?,
        None => Etcd::start().await?,
    };
    etcd.fill_random(mib << 20, 256 << 10).await?;
    let out = etcd
        .etcdctl()
        .args(["endpoint", "status", "-w", "json"])
        .output()
        .await?;
    let status: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let db_size = status[0]["Status"]["dbSize"].as_u64().context("dbSize")?;
    Ok((etcd, db_size))
}

/// An empty S3 server for one way: Garage, reached over TLS as users reach S3, through a TLS
/// front in this process (see the module's comment for why each way gets its own).
struct Store {
    garage: Garage,
    /// The front's `https://` address.
    endpoint: String,
    /// What clients trust.
    ca_cert: PathBuf,
    /// The AWS CLI's environment for it.
    env: Vec<(String, String)>,
    /// Garage's process.
    pid: u32,
}

impl Store {
    async fn empty(tls: &testbed::TlsFiles) -> Result<Store> {
        let garage = Garage::start().await?;
        let front = testbed::proxy::tls_proxy(
            garage.endpoint.trim_start_matches("http://").to_string(),
            tls,
        )
        .await;
        let endpoint = format!("https://{front}");
        let mut env = garage.env();
        for (key, value) in &mut env {
            if key == "AWS_ENDPOINT_URL" {
                *value = endpoint.clone();
            }
        }
        env.push(("AWS_CA_BUNDLE".into(), tls.ca_cert.display().to_string()));
        let pid = std::fs::read_to_string(garage.dir().join("garage.pid"))?
            .trim()
            .parse()?;
        Ok(Store {
            garage,
            endpoint,
            ca_cert: tls.ca_cert.clone(),
            env,
            pid,
        })
    }

    /// The processes whose CPU counts as the server's while a way runs against this store
    /// and `etcd` (the TLS front runs in this process, which does nothing else meanwhile).
    fn servers(&self, etcd: &Etcd) -> [u32; 3] {
        [etcd.pid(), self.pid, std::process::id()]
    }

    fn url(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.garage.bucket)
    }

    /// The S3 flags of `etcd-backup`.
    fn flags(&self) -> String {
        format!(
            "--s3-endpoint {} --s3-ca-file {} --s3-region {} --s3-force-path-style",
            self.endpoint,
            self.ca_cert.display(),
            self.garage.region
        )
    }
}

fn save_script(etcd_backup: &Path, store: &Store, etcd: &Etcd, key: &str) -> String {
    format!(
        "{} {} save --endpoints {} {} --to {} >/dev/null",
        etcd_backup.display(),
        store.flags(),
        etcd.endpoint,
        etcd.client_tls_flags().join(" "),
        store.url(key)
    )
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let etcd_backup = std::fs::canonicalize(&args.etcd_backup)?;
    // What S3 clients trust; `--etcd-tls` uses the same certificates for etcd.
    let tls = testbed::TlsFiles::generate()?;
    let work = tempfile::tempdir()?;
    let file = work.path().join("snapshot.db");
    let file = file.display();

    eprintln!(
        "filling etcd with {} MiB of random values ...",
        args.size_mib
    );
    let etcd_tls = args.etcd_tls.then_some(&tls);
    let (etcd, db_size) = filled_etcd(args.size_mib, etcd_tls).await?;
    let mb = db_size as f64 / 1e6;
    let snapshot = format!(
        "{} --endpoints {} {} snapshot save {file} >/dev/null",
        testbed::etcd_tool("etcdctl").display(),
        etcd.endpoint,
        etcd.client_tls_flags().join(" ")
    );
    let upload = |store: &Store, key: &str| {
        format!("aws s3 cp --only-show-errors {file} {}", store.url(key))
    };

    if args.clouds {
        return clouds::run(&etcd_backup, &etcd, db_size, work.path()).await;
    }
    if args.hold {
        let store = Store::empty(&tls).await?;
        let script = save_script(&etcd_backup, &store, &etcd, "bench/held");
        for (key, value) in &store.env {
            println!("export {key}='{value}'");
        }
        println!("{script}");
        eprintln!("holding etcd ({mb:.0} MB), Garage and the TLS front; Ctrl-C ends");
        tokio::signal::ctrl_c().await?;
        return Ok(());
    }
    eprintln!("measuring (database {:.0} MB) ...", mb);
    measure::stop_ways_on_interrupt();
    // (c) stores nothing: any store's environment will do.
    let store_d = Store::empty(&tls).await?;
    let c = measure(
        "(c) etcdctl snapshot save",
        &snapshot,
        &store_d.env,
        &store_d.servers(&etcd),
    )?;
    let d = measure(
        "(d) aws s3 cp (upload alone)",
        &upload(&store_d, "bench/upload-only"),
        &store_d.env,
        &store_d.servers(&etcd),
    )?;
    drop(store_d);
    std::fs::remove_file(work.path().join("snapshot.db"))?;
    let store_b = Store::empty(&tls).await?;
    let two_step = format!("{snapshot} && {}", upload(&store_b, "bench/two-step"));
    let b = measure(
        "(b) etcdctl save + aws s3 cp",
        &two_step,
        &store_b.env,
        &store_b.servers(&etcd),
    )?;
    drop(store_b);
    // Encryption (age), in the same run: save and fetch, plain against encrypted, in
    // ENCRYPTION_ROUNDS rounds (the ratio is their median: one fetch can pay for the page
    // cache writeback of the one before).
    let keys = Keys::generate(work.path())?;
    let fetched = work.path().join("fetched.db");
    let mut rounds = Vec::new();
    let mut first_plain = None;
    for round in 0..ENCRYPTION_ROUNDS {
        let (round, plain) =
            encryption_round(round, &etcd_backup, &tls, &etcd, &keys, &fetched).await?;
        rounds.push(round);
        first_plain.get_or_insert(plain);
    }
    let plain = first_plain.context("at least one round")?;
    let [a, e, f, g] = rounds[0].clone();
    let directory = directory_rounds(&etcd_backup, &etcd, &keys, work.path())?;
    let [i, j] = directory[0].clone();
    // The drill of (a)'s backup, and what recording its contents (key count, HashKV) cost
    // inside (a), from the manifest.
    let h = measure(
        "(h) etcd-backup drill",
        &drill_script(&etcd_backup, &plain, "bench/etcd-backup", work.path()),
        &plain.env,
        &plain.servers(&etcd),
    )?;
    let recorded = recorded_contents_seconds(&plain, "bench/etcd-backup")?;
    drop(plain);
    drop(etcd);

    eprintln!("measuring (a) on a {} MiB database ...", args.small_mib);
    let (small, small_size) = filled_etcd(args.small_mib, etcd_tls).await?;
    let plain = Store::empty(&tls).await?;
    let a_small = measure(
        "(a) etcd-backup save, small db",
        &save_script(&etcd_backup, &plain, &small, "bench/etcd-backup-small"),
        &plain.env,
        &plain.servers(&small),
    )?;
    drop(plain);
    let encrypted = Store::empty(&tls).await?;
    let e_small = measure(
        "(e) encrypted save, small db",
        &format!(
            "{} --encrypt-to {}",
            save_script(&etcd_backup, &encrypted, &small, "bench/encrypted-small"),
            keys.recipient
        ),
        &encrypted.env,
        &encrypted.servers(&small),
    )?;
    let g_small = measure(
        "(g) encrypted fetch, small db",
        &fetch_script(
            &etcd_backup,
            Some(&encrypted),
            &encrypted.url("bench/encrypted-small"),
            &fetched,
            Some(&keys),
        ),
        &encrypted.env,
        &encrypted.servers(&small),
    )?;

    println!(
        "\ndatabase: {mb:.0} MB (small run: {:.0} MB)",
        small_size as f64 / 1e6
    );
    println!(
        "{:<34} {:>9} {:>10} {:>14} {:>12} {:>12} {:>12}",
        "way", "seconds", "MB/s", "peak RSS MiB", "client usr s", "client sys s", "server CPU s"
    );
    let row = |m: &Measured, bytes: u64| {
        println!(
            "{:<34} {:>9.2} {:>10.1} {:>14.1} {:>12.2} {:>12.2} {:>12.2}",
            m.label,
            m.seconds,
            bytes as f64 / 1e6 / m.seconds.max(0.01),
            m.peak_rss_mib,
            m.user_seconds,
            m.system_seconds,
            m.server_cpu_seconds
        )
    };
    for m in [&a, &b, &c, &d, &e, &f, &g, &h, &i, &j] {
        row(m, db_size);
    }
    for m in [&a_small, &e_small, &g_small] {
        row(m, small_size);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let client = |m: &Measured| m.user_seconds + m.system_seconds;
    let busy = |m: &Measured| client(m) + m.server_cpu_seconds;
    println!(
        "\n{cores} cores. CPU seconds (client + etcd + Garage) per way: (a) {:.1}, (b) {:.1}, \
         (c) {:.1}, (d) {:.1}. (a) cannot take less than {:.1} s here: its steps overlap, so \
         it needs their CPU at the same time.",
        busy(&a),
        busy(&b),
        busy(&c),
        busy(&d),
        busy(&a) / cores as f64
    );
    let gib = db_size as f64 / (1u64 << 30) as f64;
    println!(
        "\nclient CPU-s per GiB backed up (user + system = all) [targets for (a): user <= 1.0, all <= 1.8]:"
    );
    for m in [&a, &b] {
        println!(
            "  {:<34} {:.2} + {:.2} = {:.2}",
            m.label,
            m.user_seconds / gib,
            m.system_seconds / gib,
            client(m) / gib
        );
    }
    println!("  (a) / (b) client CPU = {:.2}", client(&a) / client(&b));
    let slowest_step = c.seconds.max(d.seconds);
    println!("\nratios (target in brackets):");
    println!(
        "  (a) / (b)            = {:.2}  [<= 0.60]",
        a.seconds / b.seconds
    );
    println!(
        "  (a) / max((c), (d))  = {:.2}  [<= 1.15]",
        a.seconds / slowest_step
    );
    println!(
        "  RSS (a) big / small  = {:.2}  [<= 1.10; big <= 64 MiB: {:.1} MiB]",
        a.peak_rss_mib / a_small.peak_rss_mib,
        a.peak_rss_mib
    );
    println!(
        "\ndrill (h): {:.1} s, peak RSS {:.1} MiB (fetch, etcdutl restore, a member started and asked); \
         recording the key count and HashKV took {recorded:.2} s of (a)",
        h.seconds, h.peak_rss_mib
    );
    println!(
        "\nencryption (age), against the same way unencrypted, median of {ENCRYPTION_ROUNDS} rounds \
         (target in brackets):"
    );
    for (label, p, e, small) in [("save", 0, 1, &e_small), ("fetch", 2, 3, &g_small)] {
        let ratios: Vec<f64> = rounds.iter().map(|r| r[e].seconds / r[p].seconds).collect();
        let (plain, encrypted) = (&rounds[0][p], &rounds[0][e]);
        println!(
            "  {label}: {} [time <= 1.10]; RSS big / small {:.2} [<= 1.10; {:.1} MiB]",
            encryption_cost(&ratios, client(plain) / gib, client(encrypted) / gib),
            encrypted.peak_rss_mib / small.peak_rss_mib,
            encrypted.peak_rss_mib
        );
    }
    let ratios: Vec<f64> = directory
        .iter()
        .map(|[i, j]| j.seconds / i.seconds)
        .collect();
    let use_of_cores = |m: &Measured| 100.0 * client(m) / m.seconds / cores as f64;
    println!(
        "  fetch from a directory (a PVC's backup; no server on the cores): {}; the client kept \
         {:.0} % -> {:.0} % of the {cores} cores busy",
        encryption_cost(&ratios, client(&i) / gib, client(&j) / gib),
        use_of_cores(&i),
        use_of_cores(&j)
    );
    Ok(())
}

fn drill_script(etcd_backup: &Path, store: &Store, key: &str, scratch: &Path) -> String {
    format!(
        "{} {} drill {} --etcd-bin-dir {} --scratch-dir {} >/dev/null",
        etcd_backup.display(),
        store.flags(),
        store.url(key),
        testbed::etcd_tool("etcd")
            .parent()
            .unwrap_or(Path::new("."))
            .display(),
        scratch.display()
    )
}

/// The seconds `save` spent asking for the key count and HashKV, from the manifest of `key`.
fn recorded_contents_seconds(store: &Store, key: &str) -> Result<f64> {
    let output = Command::new("aws")
        .args(["s3", "cp", &store.url(&format!("{key}.manifest.json")), "-"])
        .envs(store.env.iter().map(|(k, v)| (k, v)))
        .output()?;
    let manifest: serde_json::Value = serde_json::from_slice(&output.stdout)
        .with_context(|| String::from_utf8_lossy(&output.stderr).into_owned())?;
    manifest["contents"]["seconds"]
        .as_f64()
        .context("the manifest records no contents")
}
