use std::path::PathBuf;

use super::*;

fn strings(args: Vec<OsString>) -> Vec<String> {
    args.into_iter().map(|a| a.into_string().unwrap()).collect()
}

#[test]
fn percona_backup_arguments_put_the_defaults_file_first() {
    let p = ToolProfile::new(Family::Percona);
    let o = BackupToolOptions {
        datadir: Some(PathBuf::from("/var/lib/mysql")),
        parallel: Some(4),
        replica_info: true,
        incremental_lsn: Some(44848),
        extra_args: vec!["--compress=zstd".into()],
    };
    let args = strings(p.backup_args(Path::new("/run/x/creds.cnf"), Path::new("/tmp/t"), &o));
    assert_eq!(
        args,
        [
            "--defaults-extra-file=/run/x/creds.cnf",
            "--backup",
            "--stream=xbstream",
            "--target-dir=/tmp/t",
            "--datadir=/var/lib/mysql",
            "--parallel=4",
            "--slave-info",
            "--incremental-lsn=44848",
            "--compress=zstd",
        ]
    );
    assert_eq!(
        (
            p.backup_tool.as_str(),
            p.extractor.as_str(),
            p.client.as_str()
        ),
        ("xtrabackup", "xbstream", "mysql")
    );
    assert!(
        args.iter().all(|a| !a.contains("password")),
        "credentials never on the command line"
    );
}

/// A chain: XtraBackup keeps uncommitted transactions (--apply-log-only) until the last step;
/// mariadb-backup takes each incremental dir as it is.
#[test]
fn prepare_arguments_along_a_chain() {
    let percona = ToolProfile::new(Family::Percona);
    let mariadb = ToolProfile::new(Family::Mariadb);
    let dir = Path::new("/d/s");
    let inc = Path::new("/d/i");
    let first = PrepareStep {
        incremental_dir: None,
        last: false,
    };
    let middle = PrepareStep {
        incremental_dir: Some(inc),
        last: false,
    };
    let last = PrepareStep {
        incremental_dir: Some(inc),
        last: true,
    };
    assert_eq!(
        strings(percona.prepare_args(dir, None, first)),
        [
            "--no-defaults",
            "--prepare",
            "--target-dir=/d/s",
            "--apply-log-only"
        ]
    );
    assert_eq!(
        strings(percona.prepare_args(dir, None, middle)),
        [
            "--no-defaults",
            "--prepare",
            "--target-dir=/d/s",
            "--incremental-dir=/d/i",
            "--apply-log-only"
        ]
    );
    assert_eq!(
        strings(percona.prepare_args(dir, None, last)),
        [
            "--no-defaults",
            "--prepare",
            "--target-dir=/d/s",
            "--incremental-dir=/d/i",
            "--rollback-prepared-trx"
        ]
    );
    for step in [first, middle] {
        assert!(
            !strings(mariadb.prepare_args(dir, None, step))
                .contains(&"--apply-log-only".to_string())
        );
    }
    assert_eq!(
        strings(mariadb.prepare_args(dir, None, last)),
        [
            "--no-defaults",
            "--prepare",
            "--target-dir=/d/s",
            "--incremental-dir=/d/i"
        ]
    );
}

#[test]
fn prepare_and_extract_arguments_per_family() {
    let percona = ToolProfile::new(Family::Percona);
    let mariadb = ToolProfile::new(Family::Mariadb);
    let dir = Path::new("/data/.mysql-backup-staging");
    assert_eq!(
        strings(percona.prepare_args(dir, Some("1G"), PrepareStep::ALONE)),
        [
            "--no-defaults",
            "--prepare",
            "--target-dir=/data/.mysql-backup-staging",
            "--use-memory=1G",
            "--rollback-prepared-trx"
        ]
    );
    assert_eq!(
        strings(mariadb.prepare_args(dir, None, PrepareStep::ALONE)),
        [
            "--no-defaults",
            "--prepare",
            "--target-dir=/data/.mysql-backup-staging"
        ]
    );
    assert_eq!(
        strings(percona.extract_args(dir, Some(2))),
        ["-x", "-C", "/data/.mysql-backup-staging", "--parallel=2"]
    );
    assert_eq!(
        (mariadb.backup_tool.as_str(), mariadb.extractor.as_str()),
        ("mariadb-backup", "mbstream")
    );
}

/// Recorded stderr tails (tests/data) map to the error a user can act on.
#[test]
fn classifies_recorded_failures() {
    let p = ToolProfile::new(Family::Percona);
    let data = |name| {
        std::fs::read_to_string(
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/").to_string() + name,
        )
        .unwrap()
    };
    type Check = fn(&Error) -> bool;
    let cases: [(&str, Check); 4] = [
        ("percona-access-denied.stderr", |e| {
            matches!(e, Error::AccessDenied { .. })
        }),
        ("percona-on-mariadb.stderr", |e| {
            matches!(e, Error::WrongToolFamily { .. })
        }),
        ("mariadb-server-down.stderr", |e| {
            matches!(e, Error::ServerDown { .. })
        }),
        ("mbstream-disk-full.stderr", |e| {
            matches!(e, Error::DiskFull { .. })
        }),
    ];
    for (file, expected) in cases {
        let err = p.classify_failure("xtrabackup", "exit status: 1", &data(file));
        assert!(expected(&err), "{file}: {err}");
        assert!(!err.to_string().contains('\n'), "one line: {err}");
    }
    let other = p.classify_failure(
        "xtrabackup",
        "exit status: 1",
        "a\nb\nsomething odd happened\n",
    );
    assert!(
        matches!(other, Error::ToolFailed { ref tail, .. } if tail.contains("something odd")),
        "{other}"
    );
}
