//! The cloud storage emulators the storage tests run against, on loopback: fake-gcs-server
//! (GCS's JSON API; built by `e2e/cluster/build.sh` from its Go module) and Azurite (Azure
//! Blob; installed from npm by `e2e/install-deps.sh`). Each fixture has its own port and data
//! directory, a bucket or container named `backups`, and can be killed and restarted on the
//! same data, like [`crate::Garage`].

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::free_port;

/// The bucket or container every emulator starts with.
pub const BUCKET: &str = "backups";

/// Azurite's well-known development account and key (published in Azurite's README; they
/// open nothing but a local emulator).
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A running emulator process.
struct Server {
    child: Option<Child>,
    args: Vec<String>,
    program: PathBuf,
    log: PathBuf,
    address: String,
    port: u16,
}

impl Server {
    fn spawn(
        program: PathBuf,
        args: Vec<String>,
        log: PathBuf,
        address: &str,
        port: u16,
    ) -> Result<Server> {
        let mut server = Server {
            child: None,
            args,
            program,
            log,
            address: address.to_string(),
            port,
        };
        server.start()?;
        Ok(server)
    }

    fn start(&mut self) -> Result<()> {
        if !self.program.exists() {
            bail!(
                "{} is missing: run e2e/install-deps.sh and e2e/cluster/build.sh",
                self.program.display()
            );
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {}", self.program.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits until the port accepts connections.
    async fn wait_listening(&self) -> Result<()> {
        for _ in 0..300 {
            if tokio::net::TcpStream::connect((self.address.as_str(), self.port))
                .await
                .is_ok()
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!(
            "{} did not listen on port {} within 30 s; its log: {}",
            self.program.display(),
            self.port,
            std::fs::read_to_string(&self.log).unwrap_or_default()
        )
    }

    /// SIGKILL, as a crash would; returns once the process is reaped.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, as a service restart would: the server closes its connections and saves its
    /// state. Returns once the process is reaped (SIGKILL after 10 s).
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        for _ in 0..100 {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// fake-gcs-server on loopback (plain HTTP), with bucket [`BUCKET`], data kept on disk.
pub struct FakeGcs {
    /// `http://127.0.0.1:PORT`, what `--gcs-endpoint` takes.
    pub endpoint: String,
    pub bucket: String,
    server: Server,
    _dir: tempfile::TempDir,
}

impl FakeGcs {
    pub async fn start() -> Result<FakeGcs> {
        FakeGcs::start_with("127.0.0.1", free_port(), None).await
    }

    /// A server listening on `address`, e.g. the kubelet bed's bridge address
    /// ([`crate::cluster::host_address`]), so pods can reach it.
    pub async fn start_on(address: &str) -> Result<FakeGcs> {
        FakeGcs::start_with(address, free_port(), None).await
    }

    /// A server on `port` whose upload session URLs name `external_url` instead of itself (a
    /// proxy in front of it, so that the chunks of a resumable upload pass through the proxy).
    pub async fn start_at(port: u16, external_url: Option<&str>) -> Result<FakeGcs> {
        FakeGcs::start_with("127.0.0.1", port, external_url).await
    }

    async fn start_with(address: &str, port: u16, external_url: Option<&str>) -> Result<FakeGcs> {
        let dir = tempfile::tempdir()?;
        // Every directory under `-data` is a bucket when the server starts.
        std::fs::create_dir_all(dir.path().join("seed").join(BUCKET))?;
        let endpoint = format!("http://{address}:{port}");
        let external = external_url.unwrap_or(&endpoint).to_string();
        let args = [
            "-scheme",
            "http",
            "-host",
            address,
            "-port",
            &port.to_string(),
            "-public-host",
            &format!("{address}:{port}"),
            "-external-url",
            &external,
            "-backend",
            "filesystem",
            "-filesystem-root",
            &dir.path().join("data").to_string_lossy(),
            "-data",
            &dir.path().join("seed").to_string_lossy(),
            "-log-level",
            "warn",
        ]
        .map(str::to_string)
        .to_vec();
        let program = crate::kube::versions_path("fake_gcs_bin").join("fake-gcs-server");
        let server = Server::spawn(program, args, dir.path().join("server.log"), address, port)?;
        server.wait_listening().await?;
        Ok(FakeGcs {
            endpoint,
            bucket: BUCKET.to_string(),
            server,
            _dir: dir,
        })
    }

    pub fn port(&self) -> u16 {
        self.server.port
    }

    /// The server process's PID (for its CPU time).
    pub fn pid(&self) -> Option<u32> {
        self.server.child.as_ref().map(std::process::Child::id)
    }

    /// SIGKILL, as a crash would. Data stays.
    pub fn kill(&mut self) {
        self.server.kill();
    }

    /// Starts the server again on the same data and port.
    pub async fn restart(&mut self) -> Result<()> {
        self.server.start()?;
        self.server.wait_listening().await
    }

    /// The flags of `etcd-backup` and `mysql-backup` for this server (no credentials: the
    /// emulator checks none), and no environment.
    pub fn cli_args(&self) -> (Vec<String>, Vec<(String, String)>) {
        let flags = ["--gcs-endpoint", &self.endpoint, "--gcs-anonymous"];
        (flags.map(String::from).to_vec(), vec![])
    }

    /// A GET of the JSON API, as an independent client: status and body.
    pub async fn get(&self, path_and_query: &str) -> Result<(u16, String)> {
        curl(&[
            "-s",
            "-w",
            "\n%{http_code}",
            &format!("{}{path_and_query}", self.endpoint),
        ])
        .await
    }
}

/// Azurite's Blob service on loopback (plain HTTP, the development account), with container
/// [`BUCKET`], data kept on disk.
pub struct Azurite {
    /// `http://127.0.0.1:PORT/devstoreaccount1`, what `--azure-endpoint` takes.
    pub endpoint: String,
    pub account: String,
    pub key: String,
    pub container: String,
    server: Server,
    _dir: tempfile::TempDir,
}

impl Azurite {
    pub async fn start() -> Result<Azurite> {
        Azurite::start_on("127.0.0.1").await
    }

    /// A server listening on `address`, e.g. the kubelet bed's bridge address
    /// ([`crate::cluster::host_address`]), so pods can reach it.
    pub async fn start_on(address: &str) -> Result<Azurite> {
        let dir = tempfile::tempdir()?;
        let port = free_port();
        let args = [
            "--blobHost",
            address,
            "--blobPort",
            &port.to_string(),
            "--location",
            &dir.path().join("data").to_string_lossy(),
            "--silent",
        ]
        .map(str::to_string)
        .to_vec();
        let program = azurite_blob();
        let server = Server::spawn(program, args, dir.path().join("server.log"), address, port)?;
        server.wait_listening().await?;
        let azurite = Azurite {
            endpoint: format!("http://{address}:{port}/{AZURITE_ACCOUNT}"),
            account: AZURITE_ACCOUNT.to_string(),
            key: AZURITE_KEY.to_string(),
            container: BUCKET.to_string(),
            server,
            _dir: dir,
        };
        azurite.create_container(BUCKET).await?;
        Ok(azurite)
    }

    pub fn port(&self) -> u16 {
        self.server.port
    }

    /// The server process's PID (for its CPU time).
    pub fn pid(&self) -> Option<u32> {
        self.server.child.as_ref().map(std::process::Child::id)
    }

    /// Stops the server as a service restart would (SIGTERM): its connections are cut. Not
    /// SIGKILL: Azurite keeps its metadata in memory and saves it on the way out, so a killed
    /// Azurite forgets its containers, which no Azure outage does.
    pub fn kill(&mut self) {
        self.server.stop();
    }

    /// Starts the server again on the same data and port.
    pub async fn restart(&mut self) -> Result<()> {
        self.server.start()?;
        self.server.wait_listening().await
    }

    /// The data of a coreos `absSecret` for this server's account (`storage-account`,
    /// `storage-key`).
    pub fn coreos_secret(&self) -> [(&'static str, &str); 2] {
        [
            ("storage-account", &self.account),
            ("storage-key", &self.key),
        ]
    }

    /// The flags of `etcd-backup` and `mysql-backup` for this server: the account, endpoint
    /// and a file with the key (written once, in the fixture's directory).
    pub fn cli_args(&self) -> (Vec<String>, Vec<(String, String)>) {
        let key_file = self._dir.path().join("account-key");
        if !key_file.exists() {
            std::fs::write(&key_file, &self.key).expect("write the account key file");
        }
        let flags = [
            "--azure-account",
            &self.account,
            "--azure-endpoint",
            &self.endpoint,
            "--azure-key-file",
            &key_file.to_string_lossy(),
        ];
        (flags.map(String::from).to_vec(), vec![])
    }

    /// Creates a container (`Create Container`, signed with the account key by this fixture's
    /// own Shared Key signer, independent of the product's).
    pub async fn create_container(&self, name: &str) -> Result<()> {
        let (status, body) = self
            .signed("PUT", &format!("/{name}"), &[("restype", "container")])
            .await?;
        if status != 201 && status != 409 {
            bail!("Azurite refused to create container {name}: HTTP {status}: {body}");
        }
        Ok(())
    }

    /// A signed request with no body, as an independent client: status and body.
    pub async fn signed(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<(u16, String)> {
        let date = httpdate_now();
        let version = "2021-12-02";
        let mut resource = format!("/{}/{}{path}", self.account, self.account);
        let mut sorted = query.to_vec();
        sorted.sort();
        for (k, v) in &sorted {
            resource.push_str(&format!("\n{k}:{v}"));
        }
        let to_sign = format!(
            "{method}\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n{resource}"
        );
        let signature = hmac_sha256_base64(&self.key, &to_sign)?;
        let query: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let url = format!("{}{path}?{}", self.endpoint, query.join("&"));
        curl(&[
            "-s",
            "-X",
            method,
            "-H",
            &format!("x-ms-date: {date}"),
            "-H",
            &format!("x-ms-version: {version}"),
            "-H",
            &format!("Authorization: SharedKey {}:{signature}", self.account),
            "-H",
            "Content-Length: 0",
            "-w",
            "\n%{http_code}",
            &url,
        ])
        .await
    }
}

/// The `azurite-blob` that `e2e/install-deps.sh` installs.
fn azurite_blob() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/root/.cache"));
    cache.join("etcd-backup-suite/azurite-3.35.0/node_modules/.bin/azurite-blob")
}

/// Runs curl; its output ends with a line holding the HTTP status (`-w "\n%{http_code}"`).
async fn curl(args: &[&str]) -> Result<(u16, String)> {
    let out = tokio::process::Command::new("curl")
        .args(args)
        .output()
        .await
        .context("run curl")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    Ok((code.trim().parse().unwrap_or(0), body.to_string()))
}

fn httpdate_now() -> String {
    // RFC 1123, as `date -u` prints it with this format.
    std::process::Command::new("date")
        .args(["-u", "+%a, %d %b %Y %H:%M:%S GMT"])
        .env("LC_ALL", "C")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// HMAC-SHA256 with a base64 key, base64 out, by openssl (an implementation independent of
/// the product's).
fn hmac_sha256_base64(key_base64: &str, text: &str) -> Result<String> {
    use std::io::Write;
    let key = crate::base64_decode(key_base64)?;
    let hex_key: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let mut child = Command::new("bash")
        .args([
            "-c",
            "openssl dgst -sha256 -mac HMAC -macopt \"hexkey:$1\" -binary | base64 -w0",
            "hmac",
            &hex_key,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("run openssl")?;
    child
        .stdin
        .take()
        .context("openssl stdin")?
        .write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("openssl dgst failed");
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
