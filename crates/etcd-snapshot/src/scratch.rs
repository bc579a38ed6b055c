//! A throw-away single etcd member on loopback, restored from a snapshot file: what a drill
//! and a restore to a point run.

use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Why the scratch member could not be set up or run.
#[derive(Debug, thiserror::Error)]
pub enum ScratchError {
    #[error("{0}")]
    Etcd(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The etcd programs of one version.
pub(crate) struct Tools {
    pub etcd: PathBuf,
    /// `etcdutl` from 3.5, `etcdctl` (with `ETCDCTL_API=3`) in 3.4.
    pub restore_tool: PathBuf,
    pub version: String,
}

impl Tools {
    /// Finds `etcd` and its restore tool, and checks that they are of the recorded version's
    /// minor: a snapshot is restored by the etcd that wrote it (never an older minor).
    pub(crate) async fn find(dir: Option<&Path>, recorded: &str) -> Result<Tools, ScratchError> {
        let locate = |name: &str| -> Option<PathBuf> {
            match dir {
                Some(dir) => Some(dir.join(name)).filter(|p| p.is_file()),
                None => std::env::var_os("PATH").and_then(|paths| {
                    std::env::split_paths(&paths)
                        .map(|p| p.join(name))
                        .find(|p| p.is_file())
                }),
            }
        };
        let where_ = dir.map_or("PATH".to_string(), |d| d.display().to_string());
        let etcd =
            locate("etcd").ok_or_else(|| ScratchError::Etcd(format!("no etcd in {where_}")))?;
        let output = tokio::process::Command::new(&etcd)
            .arg("--version")
            .output()
            .await
            .map_err(|source| ScratchError::Io {
                path: etcd.clone(),
                source,
            })?;
        let text = String::from_utf8_lossy(&output.stdout);
        let version = text
            .lines()
            .find_map(|l| l.strip_prefix("etcd Version: "))
            .map(|v| v.trim().to_string())
            .ok_or_else(|| {
                ScratchError::Etcd(format!("{} --version said: {text}", etcd.display()))
            })?;
        if minor(&version) != minor(recorded) {
            let (major, minor) = minor(recorded);
            return Err(ScratchError::Etcd(format!(
                "the backup was taken from etcd {recorded}; the etcd found ({}) is {version}: \
                 drill with etcd {major}.{minor} (--etcd-bin-dir)",
                etcd.display(),
            )));
        }
        let restore_tool = if minor(&version) == (3, 4) {
            locate("etcdctl")
        } else {
            locate("etcdutl")
        }
        .ok_or_else(|| {
            ScratchError::Etcd(format!(
                "no etcdutl (etcdctl for 3.4) beside etcd in {where_}"
            ))
        })?;
        Ok(Tools {
            etcd,
            restore_tool,
            version,
        })
    }

    pub(crate) async fn restore(
        &self,
        snapshot: &Path,
        data_dir: &Path,
        peer: &str,
    ) -> Result<(), ScratchError> {
        let output = tokio::process::Command::new(&self.restore_tool)
            .env("ETCDCTL_API", "3")
            .args(["snapshot", "restore"])
            .arg(snapshot)
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--name", "drill", "--initial-cluster-token", "etcd-drill"])
            .args(["--initial-cluster", &format!("drill={peer}")])
            .args(["--initial-advertise-peer-urls", peer])
            .output()
            .await
            .map_err(|source| ScratchError::Io {
                path: self.restore_tool.clone(),
                source,
            })?;
        if output.status.success() {
            Ok(())
        } else {
            Err(ScratchError::Etcd(format!(
                "{} snapshot restore failed: {}",
                self.restore_tool.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            )))
        }
    }

    /// A single member on loopback only: client and peer URLs on 127.0.0.1, nothing else.
    pub(crate) fn start(
        &self,
        data_dir: &Path,
        peer: &str,
        client: &str,
        log: &Path,
        extra_flags: &[&str],
    ) -> Result<tokio::process::Child, ScratchError> {
        let io = |source| ScratchError::Io {
            path: log.to_path_buf(),
            source,
        };
        let out = std::fs::File::create(log).map_err(io)?;
        let err = out.try_clone().map_err(io)?;
        tokio::process::Command::new(&self.etcd)
            .args(["--name", "drill"])
            .arg("--data-dir")
            .arg(data_dir)
            .args([
                "--listen-client-urls",
                client,
                "--advertise-client-urls",
                client,
            ])
            .args([
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
            ])
            .args(["--initial-cluster", &format!("drill={peer}")])
            .args(extra_flags)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| ScratchError::Io {
                path: self.etcd.clone(),
                source,
            })
    }
}

/// `(major, minor)` of a version like `3.6.16` or `v3.6.16` (unparsable parts count as 0).
pub(crate) fn minor(version: &str) -> (u32, u32) {
    let mut parts = version
        .trim_start_matches('v')
        .split('.')
        .map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// A free TCP port on loopback (the kernel's choice, released for etcd to take).
pub(crate) fn free_port() -> Result<u16, ScratchError> {
    let io = |source| ScratchError::Io {
        path: PathBuf::from("127.0.0.1:0"),
        source,
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(io)?;
    Ok(listener.local_addr().map_err(io)?.port())
}

/// The last lines of etcd's log, for a member that did not serve.
pub(crate) fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}
