use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use rand::RngCore;

use crate::{TlsFiles, free_port, tail};

/// Client certificate files of a TLS member, copied into its own directory so the member does
/// not depend on the `TlsFiles` outliving it.
struct ClientTls {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

/// One etcd member (the newest line the bed builds, see [`etcd_tool`]) on loopback ports. `put`
/// and `get_all` go through `etcdctl`, so checks do not share the client library of the code
/// under test.
pub struct Etcd {
    /// `http://127.0.0.1:PORT`, or `https://…` for `start_tls`.
    pub endpoint: String,
    pub name: String,
    pub peer_url: String,
    pub data_dir: PathBuf,
    child: Child,
    tls: Option<ClientTls>,
    log: PathBuf,
    /// The binary and extra flags it was started with, for [`Etcd::restart`].
    program: PathBuf,
    flags: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Etcd {
    /// A fresh single-member cluster over plain HTTP.
    pub async fn start() -> Result<Etcd> {
        let dir = tempfile::tempdir()?;
        let data_dir = dir.path().join("data");
        let peer_url = format!("http://127.0.0.1:{}", free_port());
        Etcd::spawn(
            etcd_tool("etcd"),
            dir,
            data_dir,
            "testbed",
            &peer_url,
            None,
            None,
            &[],
        )
        .await
    }

    /// A fresh single-member cluster over plain HTTP, with more flags (such as
    /// `--auto-compaction-mode=periodic`).
    pub async fn start_with(flags: &[&str]) -> Result<Etcd> {
        let dir = tempfile::tempdir()?;
        let data_dir = dir.path().join("data");
        let peer_url = format!("http://127.0.0.1:{}", free_port());
        Etcd::spawn(
            etcd_tool("etcd"),
            dir,
            data_dir,
            "testbed",
            &peer_url,
            None,
            None,
            flags,
        )
        .await
    }

    /// A fresh peer URL for a member to be added with [`Etcd::join`].
    pub fn new_peer_url() -> String {
        format!("http://127.0.0.1:{}", free_port())
    }

    /// A new member `name` at `peer_url` joining the cluster whose members (itself included)
    /// `initial_cluster` lists (`name=peerURL,...`); it must have been added to etcd first.
    /// Returns once it serves its status (a learner serves no linearizable read).
    pub async fn join(name: &str, peer_url: &str, initial_cluster: &str) -> Result<Etcd> {
        let dir = tempfile::tempdir()?;
        let data_dir = dir.path().join("data");
        Etcd::spawn(
            etcd_tool("etcd"),
            dir,
            data_dir,
            name,
            peer_url,
            None,
            Some(initial_cluster),
            &[],
        )
        .await
    }

    /// A fresh member on https that requires client certificates signed by `tls`'s CA.
    pub async fn start_tls(tls: &TlsFiles) -> Result<Etcd> {
        let dir = tempfile::tempdir()?;
        let data_dir = dir.path().join("data");
        let peer_url = format!("http://127.0.0.1:{}", free_port());
        Etcd::spawn(
            etcd_tool("etcd"),
            dir,
            data_dir,
            "testbed",
            &peer_url,
            Some(tls),
            None,
            &[],
        )
        .await
    }

    /// A member on a data dir made by `snapshot_restore` with the same `name` and `peer_url`
    /// (take the peer port from `free_port`). The data dir stays when the member is dropped.
    pub async fn start_on_data_dir(data_dir: &Path, name: &str, peer_url: &str) -> Result<Etcd> {
        Etcd::spawn(
            etcd_tool("etcd"),
            tempfile::tempdir()?,
            data_dir.to_path_buf(),
            name,
            peer_url,
            None,
            None,
            &[],
        )
        .await
    }

    /// A fresh single-member cluster of the etcd in `bin_dir` (one of [`etcd_releases`]).
    pub async fn start_release(bin_dir: &Path, flags: &[&str]) -> Result<Etcd> {
        let dir = tempfile::tempdir()?;
        let data_dir = dir.path().join("data");
        let peer_url = format!("http://127.0.0.1:{}", free_port());
        let program = bin_dir.join("etcd");
        Etcd::spawn(
            program, dir, data_dir, "testbed", &peer_url, None, None, flags,
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn spawn(
        program: PathBuf,
        dir: tempfile::TempDir,
        data_dir: PathBuf,
        name: &str,
        peer_url: &str,
        tls: Option<&TlsFiles>,
        existing: Option<&str>,
        flags: &[&str],
    ) -> Result<Etcd> {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let endpoint = format!("{scheme}://127.0.0.1:{}", free_port());
        let log = dir.path().join("etcd.log");
        let mut command = Command::new(&program);
        command
            .args(["--name", name, "--logger", "zap"])
            .arg("--data-dir")
            .arg(&data_dir)
            .args([
                "--listen-client-urls",
                &endpoint,
                "--advertise-client-urls",
                &endpoint,
            ])
            .args([
                "--listen-peer-urls",
                peer_url,
                "--initial-advertise-peer-urls",
                peer_url,
            ])
            .args(["--initial-cluster-token", "testbed"])
            // Room for benchmark databases of several GiB (the default quota is 2 GiB).
            .args(["--quota-backend-bytes", &(8u64 << 30).to_string()])
            .args(flags)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?);
        match existing {
            None => command.args(["--initial-cluster", &format!("{name}={peer_url}")]),
            Some(members) => command.args([
                "--initial-cluster",
                members,
                "--initial-cluster-state",
                "existing",
            ]),
        };
        let mut client_tls = None;
        if let Some(tls) = tls {
            let copy = |from: &Path, name: &str| -> Result<PathBuf> {
                let to = dir.path().join(name);
                std::fs::copy(from, &to)?;
                Ok(to)
            };
            command
                .arg("--client-cert-auth")
                .arg("--trusted-ca-file")
                .arg(copy(&tls.ca_cert, "ca.crt")?)
                .arg("--cert-file")
                .arg(copy(&tls.server_cert, "server.crt")?)
                .arg("--key-file")
                .arg(copy(&tls.server_key, "server.key")?);
            client_tls = Some(ClientTls {
                ca: dir.path().join("ca.crt"),
                cert: copy(&tls.client_cert, "client.crt")?,
                key: copy(&tls.client_key, "client.key")?,
            });
        }
        let child = command.spawn().with_context(|| {
            format!(
                "cannot run {:?}: build it with e2e/cluster/build.sh",
                etcd_tool("etcd")
            )
        })?;
        let mut etcd = Etcd {
            endpoint,
            name: name.to_string(),
            peer_url: peer_url.to_string(),
            data_dir,
            child,
            tls: client_tls,
            log,
            program,
            flags: flags.iter().map(|f| f.to_string()).collect(),
            _dir: dir,
        };
        etcd.wait_ready(existing.is_some()).await?;
        Ok(etcd)
    }

    /// Until it is elected and serving (`endpoint health`, a quorum read), or for a joining
    /// member until it answers (`endpoint status`).
    async fn wait_ready(&mut self, joining: bool) -> Result<()> {
        let check = if joining { "status" } else { "health" };
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            if let Some(status) = self.child.try_wait()? {
                bail!("etcd exited with {status}; log:\n{}", tail(&self.log, 20));
            }
            let health = self.etcdctl().args(["endpoint", check]).output().await?;
            if health.status.success() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!(
            "etcd at {} not healthy after 30 s; log:\n{}",
            self.endpoint,
            tail(&self.log, 20)
        )
    }

    /// `etcdctl` (API v3) aimed at this member, with the client certificate when TLS is on.
    pub fn etcdctl(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(etcd_tool("etcdctl"));
        command
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoint))
            .args(["--dial-timeout=2s", "--command-timeout=30s"])
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command.args(self.client_tls_flags());
        command
    }

    /// `--cacert CA --cert CERT --key KEY` when TLS is on (as `etcdctl` and `etcd-backup` take
    /// them), else nothing.
    pub fn client_tls_flags(&self) -> Vec<String> {
        let Some(tls) = &self.tls else {
            return Vec::new();
        };
        [
            ("--cacert", &tls.ca),
            ("--cert", &tls.cert),
            ("--key", &tls.key),
        ]
        .into_iter()
        .flat_map(|(flag, path)| [flag.to_string(), path.display().to_string()])
        .collect()
    }

    /// An etcd-client connection to this member (with the client certificate when TLS is on).
    pub async fn client(&self) -> Result<Client> {
        let mut options = ConnectOptions::new().with_connect_timeout(Duration::from_secs(5));
        if let Some(tls) = &self.tls {
            let identity = Identity::from_pem(std::fs::read(&tls.cert)?, std::fs::read(&tls.key)?);
            options = options.with_tls(
                TlsOptions::new()
                    .ca_certificate(Certificate::from_pem(std::fs::read(&tls.ca)?))
                    .identity(identity),
            );
        }
        Ok(Client::connect([self.endpoint.as_str()], Some(options)).await?)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Path of etcd's log (its stderr).
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// SIGKILL, as a crash would. The data dir stays.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts a member stopped by [`Etcd::kill`] again, on its data dir and at the same client
    /// and peer URLs, as a restarted machine would (plain HTTP members only); returns once it
    /// serves.
    pub async fn restart(&mut self) -> Result<()> {
        if self.tls.is_some() {
            bail!("restart is for plain-HTTP members");
        }
        if self.child.try_wait()?.is_none() {
            bail!("etcd {} still runs: kill it first", self.name);
        }
        let log = std::fs::OpenOptions::new().append(true).open(&self.log)?;
        self.child = Command::new(&self.program)
            .args(["--name", &self.name, "--logger", "zap"])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--listen-client-urls", &self.endpoint])
            .args(["--advertise-client-urls", &self.endpoint])
            .args(["--listen-peer-urls", &self.peer_url])
            .args(["--initial-advertise-peer-urls", &self.peer_url])
            .args(["--quota-backend-bytes", &(8u64 << 30).to_string()])
            .args(&self.flags)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        self.wait_ready(false).await
    }

    pub async fn put(&self, key: &str, value: &str) -> Result<()> {
        // `--` so keys and values starting with '-' are not taken for flags.
        run(self.etcdctl().args(["put", "--", key, value]))
            .await
            .map(|_| ())
    }

    /// Every key and value (as lossy UTF-8). Meant for test-sized data.
    pub async fn get_all(&self) -> Result<BTreeMap<String, String>> {
        let out = run(self.etcdctl().args(["get", "", "--prefix", "-w", "json"])).await?;
        let json: serde_json::Value =
            serde_json::from_slice(&out).context("etcdctl get -w json")?;
        let text = |v: &serde_json::Value| -> Result<String> {
            let b64 = v.as_str().unwrap_or_default(); // an empty value is left out of the JSON
            Ok(String::from_utf8_lossy(&base64_decode(b64)?).into_owned())
        };
        let mut all = BTreeMap::new();
        for kv in json["kvs"].as_array().into_iter().flatten() {
            all.insert(text(&kv["key"])?, text(&kv["value"])?);
        }
        Ok(all)
    }

    /// Writes `total_bytes` (rounded up to whole values) of random, so incompressible, values of
    /// `value_size` bytes (below etcd's 1.5 MiB request limit) under `/fill/`, with many puts in
    /// flight; returns the number of keys written.
    pub async fn fill_random(&self, total_bytes: u64, value_size: usize) -> Result<u64> {
        anyhow::ensure!(value_size > 0, "value_size must be positive");
        let client = self.client().await?;
        let count = total_bytes.div_ceil(value_size as u64);
        let mut puts = tokio::task::JoinSet::new();
        for i in 0..count {
            if puts.len() >= 32 {
                puts.join_next().await.expect("non-empty")??;
            }
            let mut value = vec![0u8; value_size];
            rand::rng().fill_bytes(&mut value);
            let mut kv = client.kv_client();
            puts.spawn(async move { kv.put(format!("/fill/{i:010}"), value, None).await });
        }
        while let Some(put) = puts.join_next().await {
            put??;
        }
        Ok(count)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs a command to completion; its stdout, or an error with its stderr.
async fn run(command: &mut tokio::process::Command) -> Result<Vec<u8>> {
    let output = command
        .output()
        .await
        .with_context(|| format!("cannot run {command:?}"))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(output.stdout)
}

/// Standard base64 (etcdctl's JSON output); small enough not to need a dependency.
pub fn base64_decode(text: &str) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes().filter(|&c| c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => bail!("invalid base64 in etcdctl output: {text:?}"),
        };
        acc = (acc << 6 | u32::from(v)) & 0xffff;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok(out)
}

/// `etcd`, `etcdctl` or `etcdutl` of the etcd that tests run on loopback: the newest line
/// `e2e/cluster/build.sh` builds, or `ETCD_TESTBED_VERSION` (`e2e/cluster/versions.sh`).
pub fn etcd_tool(name: &str) -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| crate::kube::versions_path("testbed_etcd_bin"))
        .join(name)
}

/// Every etcd line the members run (`etcd_releases` in `e2e/cluster/versions.sh`): its
/// version and the directory with its `etcd`, `etcdctl` and `etcdutl`.
pub fn etcd_releases() -> Vec<(String, PathBuf)> {
    let listed = crate::kube::versions_path(
        "(for v in \"${etcd_releases[@]}\"; do echo \"$v=$(etcd_bin $v)\"; done)",
    );
    listed
        .to_string_lossy()
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(version, dir)| (version.to_string(), PathBuf::from(dir)))
        .collect()
}

/// The directory of the etcd the control planes run (`control_plane_etcd` in
/// `e2e/cluster/versions.sh`): what restores a Kubernetes API server's etcd.
pub fn control_plane_etcd_bin() -> PathBuf {
    crate::kube::versions_path("(etcd_bin \"$control_plane_etcd\")")
}

/// Restores `snapshot` into `data_dir` (which must not exist yet) as member `name` at `peer_url`,
/// with the stock tool and its hash check (`etcdutl`).
pub fn snapshot_restore(
    snapshot: &Path,
    data_dir: &Path,
    name: &str,
    peer_url: &str,
) -> Result<()> {
    let mut command = Command::new(etcd_tool("etcdutl"));
    let output = command
        .env("ETCDCTL_API", "3")
        .args(["snapshot", "restore"])
        .arg(snapshot)
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--name", name])
        .args(["--initial-cluster", &format!("{name}={peer_url}")])
        .args(["--initial-advertise-peer-urls", peer_url])
        .args(["--initial-cluster-token", "testbed-restored"])
        .output()
        .context("cannot run etcdutl (e2e/cluster/build.sh)")?;
    if !output.status.success() {
        bail!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_decode() {
        assert_eq!(super::base64_decode("").unwrap(), b"");
        assert_eq!(super::base64_decode("Zg==").unwrap(), b"f");
        assert_eq!(super::base64_decode("Zm9vYg==").unwrap(), b"foob");
        assert_eq!(super::base64_decode("/+8A").unwrap(), [0xff, 0xef, 0x00]);
        assert!(super::base64_decode("a b").is_err());
    }
}
