//! Real MariaDB servers (Debian's mariadbd) on temporary data dirs, unix sockets and free
//! loopback ports, a runner for the real `mysql-backup` binary, and SQL in the example
//! StatefulSet's pods on the kubelet bed.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const BACKUP_USER: &str = "backup";
/// Quotes, a comment sign, a backslash and a tab: option-file quoting must carry them exactly.
pub const BACKUP_PASSWORD: &str = "b4ckup 'pw\" #;x\\y\tz";
pub const REPL_USER: &str = "repl";
/// Quotes, a backslash before a quote and a comment marker: it only authenticates if every SQL
/// literal carrying it is quoted right, also under `NO_BACKSLASH_ESCAPES`.
pub const REPL_PASSWORD: &str = "r3pl 'it\\'s\" -- \\z";
pub const TOKEN: &str = "0123456789abcdef-serve-token";

/// A freshly installed data dir with the test users, copied for each server (install is slow).
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<tempfile::TempDir> = OnceLock::new();
    TEMPLATE
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let datadir = dir.path().join("data");
            let out = Command::new("mariadb-install-db")
                .args(["--no-defaults", "--user=root", "--auth-root-authentication-method=socket", "--skip-test-db"])
                .arg(format!("--datadir={}", datadir.display()))
                .output()
                .expect("mariadb-install-db (apt-get install mariadb-server)");
            assert!(out.status.success(), "install-db: {}", String::from_utf8_lossy(&out.stderr));
            let server = Mariadb::start_on(&datadir, 99);
            server.sql(&format!(
                "CREATE USER '{BACKUP_USER}'@'localhost' IDENTIFIED BY '{}';
                 GRANT RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR, SLAVE MONITOR, SELECT ON *.* TO '{BACKUP_USER}'@'localhost';
                 CREATE USER '{REPL_USER}'@'%' IDENTIFIED BY '{}';
                 GRANT REPLICATION SLAVE ON *.* TO '{REPL_USER}'@'%';",
                BACKUP_PASSWORD.replace('\\', "\\\\").replace('\'', "\\'"),
                REPL_PASSWORD.replace('\\', "\\\\").replace('\'', "\\'")
            ));
            drop(server);
            dir
        })
        .path()
}

pub struct Mariadb {
    pub datadir: PathBuf,
    pub socket: PathBuf,
    pub port: u16,
    /// Holds the socket and error log (and the data dir for fresh servers).
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Mariadb {
    /// A new server with the template's users and an empty `shop` database.
    pub fn fresh(server_id: u32) -> Mariadb {
        let dir = tempfile::tempdir().unwrap();
        let datadir = dir.path().join("data");
        let status = Command::new("cp")
            .arg("-a")
            .arg(template().join("data"))
            .arg(&datadir)
            .status()
            .unwrap();
        assert!(status.success());
        // Each server needs its own binlog history and server UUID.
        for entry in std::fs::read_dir(&datadir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name.starts_with("bin.") || name == "auto.cnf" {
                std::fs::remove_file(datadir.join(name)).unwrap();
            }
        }
        Mariadb::start_in(dir, datadir, server_id)
    }

    /// A server on an existing data dir (e.g. a restored one).
    pub fn start_on(datadir: &Path, server_id: u32) -> Mariadb {
        Mariadb::start_in(
            tempfile::tempdir().unwrap(),
            datadir.to_path_buf(),
            server_id,
        )
    }

    fn start_in(dir: tempfile::TempDir, datadir: PathBuf, server_id: u32) -> Mariadb {
        let socket = dir.path().join("mysqld.sock");
        let port = testbed::free_port();
        let log = dir.path().join("error.log");
        let child = Command::new("mariadbd")
            .arg("--no-defaults")
            .arg("--user=root")
            .arg(format!("--datadir={}", datadir.display()))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--port={port}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!(
                "--pid-file={}",
                dir.path().join("mysqld.pid").display()
            ))
            .arg(format!("--log-error={}", log.display()))
            .arg("--log-bin=bin")
            .arg("--log-slave-updates")
            .arg(format!("--server-id={server_id}"))
            .arg("--innodb-buffer-pool-size=32M")
            .arg("--innodb-log-file-size=16M")
            .arg("--skip-name-resolve")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd (apt-get install mariadb-server)");
        let mut server = Mariadb {
            datadir,
            socket,
            port,
            dir,
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if server.try_sql("SELECT 1").is_ok() {
                return server;
            }
            if let Some(status) = server.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("mariadbd exited ({status}):\n{}", tail(&log));
            }
            assert!(
                Instant::now() < deadline,
                "mariadbd did not start:\n{}",
                tail(&log)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn try_sql(&self, sql: &str) -> Result<String, String> {
        let out = Command::new("mariadb")
            .arg("--no-defaults")
            .arg("-uroot")
            .arg(format!("--socket={}", self.socket.display()))
            .args(["--batch", "--skip-column-names", "-e", sql])
            .output()
            .unwrap();
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    #[track_caller]
    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Sample data: many rows, a multi-megabyte value, an InnoDB and an Aria table.
    pub fn write_sample(&self) {
        self.sql(
            "CREATE DATABASE shop;
             CREATE TABLE shop.orders (id INT PRIMARY KEY, item VARCHAR(64), body LONGBLOB) ENGINE=InnoDB;
             CREATE TABLE shop.notes (id INT PRIMARY KEY, note TEXT) ENGINE=Aria;
             INSERT INTO shop.notes VALUES (1, 'aria row');",
        );
        let mut values = Vec::new();
        for i in 0..2000 {
            values.push(format!(
                "({i}, 'item-{i}', REPEAT('{}', {}))",
                (b'a' + (i % 26) as u8) as char,
                100 + i
            ));
        }
        self.sql(&format!(
            "INSERT INTO shop.orders VALUES {};",
            values.join(",")
        ));
        self.sql("INSERT INTO shop.orders VALUES (100000, 'big', REPEAT(SHA2('x', 256), 100000));");
    }

    /// Everything the sample holds, as one comparable string.
    pub fn sample_digest(&self) -> String {
        self.sql(
            "SELECT COUNT(*), SUM(CRC32(CONCAT(id, item, body))), MAX(LENGTH(body)) FROM shop.orders;
             SELECT COUNT(*), SUM(CRC32(note)) FROM shop.notes;",
        )
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn error_log(&self) -> String {
        tail(&self.dir.path().join("error.log"))
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while child.try_wait().unwrap().is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Connection flags for `mysql-backup` (password via the environment).
    /// `backup --to <url> <extra...>` from this server.
    pub fn backup_to(&self, url: &str, extra: &[&str]) -> Vec<String> {
        let mut a = args(&["backup", "--to", url]);
        a.extend(args(extra));
        a.extend(self.backup_args());
        a
    }

    pub fn backup_args(&self) -> Vec<String> {
        vec![
            format!("--socket={}", self.socket.display()),
            format!("--user={BACKUP_USER}"),
            format!("--datadir={}", self.datadir.display()),
        ]
    }
}

impl Drop for Mariadb {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

pub use testbed::cli::Run;

/// A new age key pair in `dir`: the identity file `key.txt` (the private key) and the
/// recipients file `recipients.txt` (its public key), as a user keeps them.
pub fn age_key_files(dir: &Path) -> (PathBuf, PathBuf) {
    let (secret, public) = backup_storage::encryption::Identity::generate();
    let identity = dir.join("key.txt");
    std::fs::write(&identity, secret).unwrap();
    let recipients = dir.join("recipients.txt");
    std::fs::write(&recipients, format!("{public}\n")).unwrap();
    (identity, recipients)
}

/// The binary with a clean AWS environment, the test passwords in the environment, plus `env`.
pub fn command(args: &[String], env: &[(String, String)]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_mysql-backup"));
    testbed::cli::without_ambient_aws(command.args(args))
        .env("MYSQL_BACKUP_PASSWORD", BACKUP_PASSWORD)
        .env("MYSQL_BACKUP_TOKEN", TOKEN)
        .env("MYSQL_REPLICATION_USER", REPL_USER)
        .env("MYSQL_REPLICATION_PASSWORD", REPL_PASSWORD)
        .env("RUST_LOG", "info")
        .kill_on_drop(true);
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

pub async fn run(args: &[String], env: &[(String, String)]) -> Run {
    command(args, env).output().await.unwrap().into()
}

pub fn args(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// `restore --from <url> --datadir <datadir>`, with `--force` when asked.
pub fn restore_from(url: &str, datadir: &Path, force: bool) -> Vec<String> {
    let mut a = args(&[
        "restore",
        "--from",
        url,
        "--datadir",
        datadir.to_str().unwrap(),
    ]);
    if force {
        a.push("--force".into());
    }
    a
}

/// Restores `from` into a new data dir, starts a server on it and returns the sample digest.
pub async fn restore_and_digest(from: &str, extra: &[String], env: &[(String, String)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let datadir = dir.path().join("restored");
    let mut a = args(&[
        "restore",
        "--from",
        from,
        "--datadir",
        datadir.to_str().unwrap(),
    ]);
    a.extend_from_slice(extra);
    run(&a, env).await.ok();
    assert!(!datadir.join(".mysql-backup-incomplete").exists());
    let server = Mariadb::start_on(&datadir, 7);
    server.sample_digest()
}

/// Every file (relative path) under `dir`.
pub fn list_files(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Starts `serve` for `server` on a free port; killed on drop.
pub fn serve(server: &Mariadb, extra: &[&str]) -> (tokio::process::Child, String) {
    let addr = format!("127.0.0.1:{}", testbed::free_port());
    let mut a = args(&["serve", "--listen", &addr]);
    a.extend(server.backup_args());
    a.extend(args(extra));
    let child = command(&a, &[])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    (child, addr)
}

pub async fn wait_listening(addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "serve did not listen on {addr}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How [`faulty_proxy`] breaks the stream from the server to the client.
#[derive(Clone)]
pub enum Fault {
    /// Forwards this many bytes, then drops both sides (a source pod that disappears).
    CutAfter(usize),
    /// Flips one bit of the byte at this offset (a corrupting network or a man in the middle).
    FlipAt(usize),
    /// Forwards everything and records what the client sent (for replaying it).
    RecordRequests(std::sync::Arc<std::sync::Mutex<Vec<u8>>>),
}

/// A one-connection proxy to `target` (retried until it listens) that applies `fault`.
pub async fn faulty_proxy(target: String, fault: Fault) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_addr = proxy.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let (mut client, _) = proxy.accept().await.unwrap();
        let mut upstream = loop {
            match tokio::net::TcpStream::connect(&target).await {
                Ok(s) => break s,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        let (mut cr, mut cw) = client.split();
        let (mut ur, mut uw) = upstream.split();
        let recorder = match &fault {
            Fault::RecordRequests(record) => Some(record.clone()),
            _ => None,
        };
        let up = async {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match cr.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if let Some(record) = &recorder {
                    record.lock().unwrap().extend_from_slice(&buf[..n]);
                }
                if uw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        };
        let down = async {
            let mut sent = 0usize;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                if let Fault::CutAfter(limit) = fault
                    && sent >= limit
                {
                    break;
                }
                let n = match ur.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if let Fault::FlipAt(at) = fault
                    && (sent..sent + n).contains(&at)
                {
                    buf[at - sent] ^= 0x01;
                }
                if cw.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                sent += n;
            }
        };
        tokio::select! { _ = up => {}, _ = down => {} }
    });
    proxy_addr
}

/// `statement` run by the `mariadb` client in POD's `mysql` container as root, the password
/// read from the mounted Secret (never an argument); `host` empty for the local socket. Its
/// stdout, or its stderr as the error.
pub async fn sql(
    kube: &testbed::kube::KubeTestbed,
    ns: &str,
    pod: &str,
    host: &str,
    statement: &str,
) -> Result<String, String> {
    let script = r#"MYSQL_PWD=$(cat /etc/mysql-backup/root-password) exec mariadb -uroot -N -B ${1:+-h "$1"} -e "$0""#;
    let output = tokio::process::Command::from(testbed::cluster::kubectl(&kube.kubeconfig))
        .args(["--namespace", ns, "exec", pod, "-c", "mysql", "--"])
        .args(["bash", "-c", script, statement, host])
        .output()
        .await
        .map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).to_string())
    }
}
