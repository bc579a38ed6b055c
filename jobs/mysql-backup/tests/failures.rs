//! Failures must never leave a backup that looks good, and must say what went wrong in one line.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// Pid of the child of `parent` named `comm`, waiting for it to appear.
async fn child_named(parent: u32, comm: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // comm is in parentheses; ppid is the second field after it.
            let Some((head, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            let ppid: u32 = rest
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            if ppid == parent && head.ends_with(&format!("({comm}")) {
                return pid;
            }
        }
        assert!(Instant::now() < deadline, "no {comm} child of {parent}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_killed_mid_stream_leaves_no_object() {
    let garage = testbed::Garage::start().await.expect("garage");
    let (s3_args, env) = garage.cli_args();
    let source = Mariadb::fresh(1);
    source.write_sample();
    let url = format!("s3://{}/killed.xbstream", garage.bucket);
    let mut a = source.backup_to(&url, &["--tool-arg=--throttle=1"]);
    a.extend(s3_args.clone());
    let mut child = command(&a, &env)
        .env("RUST_LOG", "info,backup_storage=debug")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let tool = child_named(child.id().unwrap(), "mariadb-backup").await;
    // Killed once parts are on their way: there is an upload to leave behind.
    let mut log = testbed::cli::StderrLog::of(&mut child);
    log.wait_for("multipart upload started", Duration::from_secs(60))
        .await;
    std::process::Command::new("kill")
        .args(["-9", &tool.to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().await.unwrap();
    let stderr = log.read_to_end().await.to_string();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("mariadb-backup failed (signal: 9"),
        "{stderr}"
    );

    // Nothing under the key, no manifest, no multipart upload left behind.
    let aws = |sub: &[&str]| garage.aws(sub);
    let listing = aws(&["s3api", "list-objects-v2", "--bucket", &garage.bucket]);
    assert!(
        listing.status.success(),
        "{}",
        String::from_utf8_lossy(&listing.stderr)
    );
    assert!(
        !String::from_utf8_lossy(&listing.stdout).contains("killed"),
        "{}",
        String::from_utf8_lossy(&listing.stdout)
    );
    let uploads = aws(&[
        "s3api",
        "list-multipart-uploads",
        "--bucket",
        &garage.bucket,
    ]);
    assert!(
        uploads.status.success(),
        "{}",
        String::from_utf8_lossy(&uploads.stderr)
    );
    assert!(
        !String::from_utf8_lossy(&uploads.stdout).contains("killed"),
        "{}",
        String::from_utf8_lossy(&uploads.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_disappearing_mid_pull_leaves_no_object() {
    let source = Mariadb::fresh(1);
    source.write_sample();
    let serve_addr = format!("127.0.0.1:{}", testbed::free_port());
    let mut a = args(&["serve", "--listen", &serve_addr]);
    a.extend(source.backup_args());
    let _serve = command(&a, &[])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let proxy_addr = faulty_proxy(serve_addr, Fault::CutAfter(3_000_000)).await;
    let store = tempfile::tempdir().unwrap();
    let url = format!("file://{}/pulled.xbstream", store.path().display());
    let r = run(&args(&["pull", "--from", &proxy_addr, "--to", &url]), &[]).await;
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.error_line().contains("connection lost mid-stream"),
        "{}",
        r.error_line()
    );
    assert_eq!(
        list_files(store.path()),
        Vec::<String>::new(),
        "no object, no manifest, no temp file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cut_mid_clone_fails_and_leaves_the_data_dir_empty() {
    let source = Mariadb::fresh(1);
    source.write_sample();
    let serve_addr = format!("127.0.0.1:{}", testbed::free_port());
    let mut a = args(&["serve", "--listen", &serve_addr]);
    a.extend(source.backup_args());
    let _serve = command(&a, &[])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();

    let proxy_addr = faulty_proxy(serve_addr.clone(), Fault::CutAfter(3_000_000)).await;

    let dir = tempfile::tempdir().unwrap();
    let datadir = dir.path().join("replica");
    let run = run(
        &args(&[
            "clone",
            "--from",
            &proxy_addr,
            "--datadir",
            datadir.to_str().unwrap(),
        ]),
        &[],
    )
    .await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.error_line().contains("connection lost mid-stream"),
        "{}",
        run.error_line()
    );
    assert_eq!(
        list_files(&datadir),
        Vec::<String>::new(),
        "the data dir must stay empty"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_truncated_or_unmanifested_objects_are_refused() {
    let source = Mariadb::fresh(1);
    source.write_sample();
    let store = tempfile::tempdir().unwrap();
    let object = store.path().join("b.xbstream");
    let url = format!("file://{}", object.display());
    let a = source.backup_to(&url, &[]);
    run(&a, &[]).await.ok();
    let good = std::fs::read(&object).unwrap();
    let restore = |datadir: &std::path::Path, force: bool| restore_from(&url, datadir, force);
    let dir = tempfile::tempdir().unwrap();
    let datadir = dir.path().join("d");

    // One flipped bit in the middle of the object.
    let mut bad = good.clone();
    bad[good.len() / 2] ^= 0x10;
    std::fs::write(&object, &bad).unwrap();
    let r = run(&restore(&datadir, false), &[]).await;
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.error_line().contains("corrupted or truncated"),
        "{}",
        r.error_line()
    );
    assert_eq!(list_files(&datadir), Vec::<String>::new());

    // Same bytes, manifest gone: refused unless forced; forced, the CRC check still catches it.
    let manifest = store.path().join("b.xbstream.manifest.json");
    let manifest_bytes = std::fs::read(&manifest).unwrap();
    std::fs::remove_file(&manifest).unwrap();
    let r = run(&restore(&datadir, false), &[]).await;
    assert_eq!(r.code, 3);
    assert!(
        r.error_line().contains("no valid manifest"),
        "{}",
        r.error_line()
    );
    let r = run(&restore(&datadir, true), &[]).await;
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.error_line().contains("CRC32"), "{}", r.error_line());
    assert_eq!(list_files(&datadir), Vec::<String>::new());

    // Truncated at a chunk boundary (mbstream would extract it with exit 0), forced.
    let cut = find_chunk_start(&good, good.len() / 2);
    std::fs::write(&object, &good[..cut]).unwrap();
    let r = run(&restore(&datadir, true), &[]).await;
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.error_line().contains("truncated"), "{}", r.error_line());
    assert_eq!(list_files(&datadir), Vec::<String>::new());

    // With the manifest back and the good bytes written anew (as a copied backup is: another
    // file, so another ETag, the same sha256), the same data dir restores fine.
    std::fs::write(&manifest, manifest_bytes).unwrap();
    std::fs::write(&object, &good).unwrap();
    run(&restore(&datadir, false), &[]).await.ok();
    // ... and a second restore into it is refused without touching it.
    let before = list_files(&datadir);
    let r = run(&restore(&datadir, false), &[]).await;
    assert_eq!(r.code, 1);
    assert!(
        r.error_line().contains("is not empty"),
        "{}",
        r.error_line()
    );
    assert_eq!(list_files(&datadir), before);
}

/// The first chunk magic at or after `from`.
fn find_chunk_start(stream: &[u8], from: usize) -> usize {
    from + stream[from..]
        .windows(8)
        .position(|w| w == b"XBSTCK01")
        .expect("a later chunk")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_server_down_and_missing_tool_are_clear_errors() {
    let source = Mariadb::fresh(1);
    let store = tempfile::tempdir().unwrap();
    let url = format!("file://{}/x.xbstream", store.path().display());
    let a = source.backup_to(&url, &[]);

    let r = run(
        &a,
        &[("MYSQL_BACKUP_PASSWORD".into(), "wrong-password".into())],
    )
    .await;
    assert_eq!(r.code, 1);
    assert!(
        r.error_line()
            .contains("could not log in to the database (wrong user or password)"),
        "{}",
        r.error_line()
    );
    assert!(!r.stderr.contains("wrong-password"), "password in the logs");

    let mut down = args(&[
        "backup",
        "--to",
        &url,
        "--socket",
        "/nonexistent/mysqld.sock",
        "--user",
        BACKUP_USER,
    ]);
    down.push(format!("--datadir={}", source.datadir.display()));
    let r = run(&down, &[]).await;
    assert_eq!(r.code, 1);
    assert!(
        r.error_line().contains("cannot reach the database server"),
        "{}",
        r.error_line()
    );

    let mut percona = a.clone();
    percona.push("--tool=percona".into());
    let r = run(&percona, &[]).await;
    assert_eq!(r.code, 1);
    assert!(
        r.error_line().contains("xtrabackup not found on PATH"),
        "{}",
        r.error_line()
    );

    assert_eq!(
        list_files(store.path()),
        Vec::<String>::new(),
        "no object after failures"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_busy_to_a_second_client() {
    let source = Mariadb::fresh(1);
    source.write_sample();
    let addr = format!("127.0.0.1:{}", testbed::free_port());
    let mut a = args(&["serve", "--listen", &addr, "--tool-arg=--throttle=1"]);
    a.extend(source.backup_args());
    let serve = command(&a, &[])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(&addr).await.is_err() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let store = tempfile::tempdir().unwrap();
    let first_url = format!("file://{}/first.xbstream", store.path().display());
    let first = command(&args(&["pull", "--from", &addr, "--to", &first_url]), &[])
        .spawn()
        .unwrap();
    // The serve process starts the tool only once the first client holds its one slot.
    child_named(serve.id().unwrap(), "mariadb-backup").await;
    let second = run(
        &args(&[
            "pull",
            "--from",
            &addr,
            "--to",
            &format!("file://{}/second.xbstream", store.path().display()),
        ]),
        &[],
    )
    .await;
    assert_eq!(second.code, 1);
    assert!(
        second.error_line().contains("busy with another backup"),
        "{}",
        second.error_line()
    );
    drop(first);
}

/// Unmounts on drop, so a failed assertion does not leave a mount behind.
struct Tmpfs(std::path::PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// Needs root (tmpfs mount), as the rest of the suite does for mariadbd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_full_during_restore_is_named_and_leaves_the_data_dir_empty() {
    let source = Mariadb::fresh(1);
    source.write_sample();
    let store = tempfile::tempdir().unwrap();
    let url = format!("file://{}/b.xbstream", store.path().display());
    let a = source.backup_to(&url, &[]);
    run(&a, &[]).await.ok();

    let mount = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
        .arg(mount.path())
        .status()
        .unwrap();
    assert!(
        status.success(),
        "mounting a small tmpfs needs root (CAP_SYS_ADMIN)"
    );
    let _unmount = Tmpfs(mount.path().to_path_buf());
    let datadir = mount.path().join("data");
    let r = run(&restore_from(&url, &datadir, false), &[]).await;
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.error_line().contains("no space left on the device"),
        "{}",
        r.error_line()
    );
    assert_eq!(list_files(&datadir), Vec::<String>::new());
}

/// Every entry under `dir` (directories with a trailing `/`), to compare a tree before and after.
fn tree(dir: &std::path::Path) -> Vec<String> {
    fn walk(base: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                out.push(format!("{rel}/"));
                walk(base, &p, out);
            } else {
                out.push(rel);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} {pid}");
}

/// The S3 server dies while a restore is downloading: the restore must fail, say so, and leave
/// the data dir exactly as it was.
///
/// To have the download provably in flight when the server dies, the extractor is paused
/// (SIGSTOP) as soon as it starts: the restore stops reading, the socket buffers fill and Garage
/// blocks mid-body. Garage is then killed and the extractor resumed. The object is several
/// times larger than what the pipe and socket buffers can hold, so most of it is still on the
/// dead server; the storage layer's ranged-GET resumes then meet a closed port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_dying_mid_restore_fails_and_leaves_the_data_dir_as_it_was() {
    let started = Instant::now();
    let mut garage = testbed::Garage::start().await.expect("garage");
    let (s3_args, env) = garage.cli_args();
    let source = Mariadb::fresh(1);
    source.write_sample();
    // A paused restore had read about 6 MB when the server died (pipe and socket buffers),
    // so most of the object is unread.
    add_48_mb(&source);
    let url = format!("s3://{}/big.xbstream", garage.bucket);
    let mut a = source.backup_to(&url, &[]);
    a.extend(s3_args.clone());
    let stored = run(&a, &env).await.ok().json()["storedBytes"]
        .as_u64()
        .unwrap();
    assert!(stored > 60 << 20, "object too small for the test: {stored}");
    eprintln!("backup stored {stored} bytes after {:?}", started.elapsed());

    // A data dir as a fresh volume looks: lost+found only.
    let volume = tempfile::tempdir().unwrap();
    let datadir = volume.path().join("data");
    std::fs::create_dir_all(datadir.join("lost+found")).unwrap();
    let before = tree(&datadir);

    let mut a = restore_from(&url, &datadir, false);
    a.extend(s3_args);
    let child = command(&a, &env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let extractor = child_named(child.id().unwrap(), "mbstream").await;
    signal(extractor, "-STOP");
    // Let the restore fill the pipe and the socket buffers and block.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        datadir.join(".mysql-backup-staging").exists(),
        "the restore should be extracting into its staging dir"
    );
    garage.kill();
    let killed = Instant::now();
    signal(extractor, "-CONT");

    let out = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("restore still running 90 s after the S3 server died")
        .unwrap();
    let failed_after = killed.elapsed();
    let r = Run::from(out);
    eprintln!(
        "restore failed {failed_after:?} after the kill: {}",
        r.error_line()
    );
    // The storage layer's resumes (8, with backoff, each retried by the SDK) end in ~30 s.
    assert!(failed_after < Duration::from_secs(60), "{failed_after:?}");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stdout.trim().is_empty(),
        "no success report: {}",
        r.stdout
    );
    let line = r.error_line();
    assert!(
        line.contains(&format!(
            "restore from {url} stopped, nothing was installed"
        )),
        "{line}"
    );
    // The cause: the endpoint no longer answers.
    assert!(
        line.contains(&format!("cannot reach S3 endpoint {}", garage.endpoint))
            && line.contains("Connection refused"),
        "{line}"
    );
    // The download really was cut in the middle: "stopped at byte X of Y" with 0 < X < Y.
    let (at, of) = download_stop(&line).unwrap_or_else(|| panic!("no byte position: {line}"));
    assert_eq!(of, stored, "{line}");
    assert!(0 < at && at < of, "{line}");
    // The data dir is exactly as it was: no staging dir, no marker, nothing half-moved.
    assert_eq!(tree(&datadir), before);
    eprintln!("whole test: {:?}", started.elapsed());
}

/// `X` and `Y` from "... stopped at byte X of Y ...".
fn download_stop(line: &str) -> Option<(u64, u64)> {
    let rest = &line[line.find("stopped at byte ")? + "stopped at byte ".len()..];
    let mut words = rest.split_whitespace();
    let at = words.next()?.parse().ok()?;
    (words.next()? == "of").then_some(())?;
    let of = words
        .next()?
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()?;
    Some((at, of))
}

/// The data object commits, then the manifest write fails for real: the local backend writes
/// the manifest to a temp file and renames it over `<object>.manifest.json`, and a directory
/// occupies that path, so the rename fails (EISDIR). The command must fail, say that the object
/// exists without a manifest, and never print a success report; restore must refuse the object
/// unless forced, and the forced restore shows the object itself is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_write_failing_after_the_commit_is_an_error_not_a_success() {
    let source = Mariadb::fresh(1);
    source.write_sample();
    let expected = source.sample_digest();
    let store = tempfile::tempdir().unwrap();
    let object = store.path().join("b.xbstream");
    let manifest = store.path().join("b.xbstream.manifest.json");
    std::fs::create_dir(&manifest).unwrap();
    let url = format!("file://{}", object.display());

    let a = source.backup_to(&url, &[]);
    let r = run(&a, &[]).await;
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stdout.trim().is_empty(), "reported success: {}", r.stdout);
    let line = r.error_line();
    assert!(
        line.contains(&format!(
            "the backup object {url} was stored, but writing its manifest file://{} failed",
            manifest.display()
        )),
        "{line}"
    );
    assert!(line.contains("Is a directory"), "the cause: {line}");
    assert!(line.contains("restore refuses it unless --force"), "{line}");
    // The object is there, complete; no temp files are left beside it.
    assert_eq!(list_files(store.path()), ["b.xbstream"]);
    assert!(std::fs::metadata(&object).unwrap().len() > 1 << 20);

    let dir = tempfile::tempdir().unwrap();
    let datadir = dir.path().join("d");
    let restore = |force: bool| restore_from(&url, &datadir, force);
    // Whatever blocked the manifest also blocks restore.
    let r = run(&restore(false), &[]).await;
    assert_ne!(r.code, 0, "{}", r.stderr);
    assert_eq!(list_files(&datadir), Vec::<String>::new());
    // With the path free again: refused for the missing manifest, as the error said.
    std::fs::remove_dir(&manifest).unwrap();
    let r = run(&restore(false), &[]).await;
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.error_line().contains("no valid manifest"),
        "{}",
        r.error_line()
    );
    assert_eq!(list_files(&datadir), Vec::<String>::new());
    // Forced, the object restores to the backed-up rows.
    run(&restore(true), &[]).await.ok();
    let server = Mariadb::start_on(&datadir, 7);
    assert_eq!(server.sample_digest(), expected);
}

/// SIGTERM mid-upload: the runner kills the backup tool, aborts the multipart upload, waits for
/// the abort, exits 143, and leaves no object and no pending upload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_upload_aborts_and_stores_nothing() {
    let garage = testbed::Garage::start().await.expect("garage");
    let (s3_args, env) = garage.cli_args();
    let source = Mariadb::fresh(1);
    source.write_sample();
    let url = format!("s3://{}/interrupted.xbstream", garage.bucket);
    // About 8 IO operations a second: the stream stays in flight for many seconds.
    let mut a = source.backup_to(&url, &["--tool-arg=--throttle=8"]);
    a.extend(s3_args.clone());
    let mut child = command(&a, &env)
        .env("RUST_LOG", "backup_storage=debug")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let tool = child_named(child.id().unwrap(), "mariadb-backup").await;
    let mut log = testbed::cli::StderrLog::of(&mut child);
    log.wait_for("multipart upload started", Duration::from_secs(60))
        .await;
    let pid = child.id().unwrap().to_string();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    assert!(kill.unwrap().success());

    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the runner exits within 30 s of SIGTERM")
        .unwrap();
    let log = log.read_to_end().await;
    assert_eq!(status.code(), Some(143), "{log}");
    assert!(log.contains("interrupted by SIGTERM"), "{log}");
    // The tool was killed with the runner's work.
    assert_gone(tool, "mariadb-backup");
    for listing in ["list-objects-v2", "list-multipart-uploads"] {
        let out = garage.aws(&["s3api", listing, "--bucket", &garage.bucket]);
        assert!(out.status.success());
        let out = String::from_utf8_lossy(&out.stdout);
        assert!(!out.contains("interrupted"), "{listing}: {out}");
    }
}

/// SIGTERM mid-restore (a pod deleted during its init container): the restore's task is
/// dropped, which kills the extractor and undoes the staging, so the data dir is exactly as it
/// was (no staging dir, no marker), the last line says so, and the next restore succeeds.
///
/// The extractor is paused (SIGSTOP) once it runs, so the restore is provably mid-way when the
/// signal comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_restore_leaves_the_data_dir_as_it_was() {
    let source = Mariadb::fresh(1);
    source.write_sample();
    // So that the extraction lasts long enough to be caught and paused.
    add_48_mb(&source);
    let backups = tempfile::tempdir().unwrap();
    let url = format!("file://{}/shop.xbstream", backups.path().display());
    run(&source.backup_to(&url, &[]), &[]).await.ok();

    // A data dir as a fresh volume looks: lost+found only.
    let volume = tempfile::tempdir().unwrap();
    let datadir = volume.path().join("data");
    std::fs::create_dir_all(datadir.join("lost+found")).unwrap();
    let before = tree(&datadir);
    let mut child = command(&restore_from(&url, &datadir, false), &[])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = testbed::cli::StderrLog::of(&mut child);
    let extractor = child_named(child.id().unwrap(), "mbstream").await;
    signal(extractor, "-STOP");
    let staging = datadir.join(".mysql-backup-staging");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !staging.exists() {
        assert!(Instant::now() < deadline, "no staging dir after 20 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(datadir.join(".mysql-backup-incomplete").exists());
    signal(child.id().unwrap(), "-TERM");

    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the restore exits within 30 s of SIGTERM")
        .unwrap();
    let log = log.read_to_end().await;
    assert_eq!(status.code(), Some(143), "{log}");
    assert!(
        log.contains("interrupted by SIGTERM; a restore in progress was undone"),
        "{log}"
    );
    assert_eq!(tree(&datadir), before, "{log}");
    // The paused extractor went with the restore's task (a zombie at most, until reaped).
    signal_if_alive(extractor, "-CONT");
    assert_gone(extractor, "mbstream");
    run(&restore_from(&url, &datadir, false), &[]).await.ok();
    assert!(datadir.join("ibdata1").exists());
}

/// 48 MB more in `source` (in 8 MB rows, under max_allowed_packet).
fn add_48_mb(source: &Mariadb) {
    source.sql("CREATE TABLE shop.padding (id INT PRIMARY KEY, b LONGBLOB) ENGINE=InnoDB;");
    for i in 0..6 {
        source.sql(&format!(
            "INSERT INTO shop.padding VALUES ({i}, REPEAT(SHA2('{i}', 256), 131072));"
        ));
    }
}

/// Process `pid` (named `name`) no longer runs: gone, or a zombie until its parent reaps it.
fn assert_gone(pid: u32, name: &str) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .map(|(_, r)| r.trim_start().chars().next());
    assert!(
        matches!(state, None | Some(Some('Z'))),
        "{name} still runs: {state:?}"
    );
}

/// `kill SIG PID` for a process that may be gone already.
fn signal_if_alive(pid: u32, sig: &str) {
    let _ = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status();
}

/// `clean-uploads` aborts the unfinished uploads a runner killed outright left under its
/// prefix, once they are older than the limit, and nothing else.
#[tokio::test]
async fn clean_uploads_aborts_old_unfinished_uploads_under_the_prefix_only() {
    let garage = testbed::Garage::start().await.expect("garage");
    let (s3_args, env) = garage.cli_args();
    garage.start_abandoned_upload("mysql/nightly.xbstream");
    garage.start_abandoned_upload("other/tool.bin");
    let prefix = format!("s3://{}/mysql/", garage.bucket);
    let clean = |older_than: &'static str| {
        let mut a = vec!["clean-uploads".to_string(), prefix.clone()];
        a.extend(["--older-than".to_string(), older_than.to_string()]);
        a.extend(s3_args.clone());
        command(&a, &env)
    };
    // Younger than the default hour: a backup may still be writing it.
    let young = clean("3600").output().await.unwrap();
    assert!(young.status.success(), "{young:?}");
    assert!(String::from_utf8_lossy(&young.stdout).contains(r#""abortedUploads":0"#));
    let old = clean("0").output().await.unwrap();
    assert!(old.status.success(), "{old:?}");
    assert!(String::from_utf8_lossy(&old.stdout).contains(r#""abortedUploads":1"#));
    let left = garage.aws(&[
        "s3api",
        "list-multipart-uploads",
        "--bucket",
        &garage.bucket,
    ]);
    let left = String::from_utf8_lossy(&left.stdout);
    assert!(
        left.contains("other/tool.bin") && !left.contains("mysql/nightly"),
        "{left}"
    );
}

/// Bad keys are refused before anything is read or written: one `error: ` line that says what
/// is wrong, no object stored, no data dir made.
#[tokio::test]
async fn bad_keys_get_one_line_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let backups = dir.path().join("backups");
    let url = format!("file://{}/shop.xbstream", backups.display());
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "# no keys yet\n").unwrap();
    let (_, public) = backup_storage::encryption::Identity::generate();
    // A public key where the identity belongs.
    let not_an_identity = dir.path().join("identity.txt");
    std::fs::write(&not_an_identity, format!("{public}\n")).unwrap();
    let datadir = dir.path().join("restored");

    let backup = |flags: &[&str]| {
        let mut a = args(&["backup", "--to", &url, "--socket", "/nonexistent.sock"]);
        a.extend(args(flags));
        a
    };
    let mut restore = restore_from(&url, &datadir, false);
    restore.extend(args(&["--identity", not_an_identity.to_str().unwrap()]));
    // Bad recipients are a failure (1); an identity that is none, exit 4 (the key is wrong).
    let cases = [
        (
            backup(&["--encrypt-to", "age1notakey"]),
            1,
            "--encrypt-to (number 1), line 1: not an age X25519 recipient",
        ),
        (
            backup(&["--encrypt-to-file", empty.to_str().unwrap()]),
            1,
            "holds no age recipient",
        ),
        (restore, 4, "line 1: not an age X25519 identity"),
    ];
    for (a, code, message) in cases {
        let result = run(&a, &[]).await;
        assert_eq!(result.code, code, "{a:?}: {}", result.stderr);
        result.assert_one_error_line(message);
        // The identity file is not quoted back: it could have held a private key.
        assert!(!result.stderr.contains(&public), "{}", result.stderr);
        assert!(!backups.exists(), "{a:?} wrote to storage");
        assert!(!datadir.exists(), "{a:?} made the data dir");
    }
}
