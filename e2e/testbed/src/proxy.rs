//! Networks that misbehave, for tests: a slow one (a TCP proxy on loopback that passes a limited
//! rate from the server to the client, so a stream stays in flight long enough to interrupt
//! it), one that falsifies HTTP traffic (a flipped body byte, a faked stored size), one that
//! partitions, and one that holds the server's answers back.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

/// A listener on a free loopback port, and its `127.0.0.1:port`.
async fn listen() -> (TcpListener, String) {
    listen_on("127.0.0.1").await
}

async fn listen_on(host: &str) -> (TcpListener, String) {
    let listener = TcpListener::bind((host, 0)).await.expect("bind the proxy");
    let address = listener.local_addr().expect("proxy address").to_string();
    (listener, address)
}

/// Connects `client` to `target` and relays its requests as they come; returns the two ends of
/// the other direction (the server's answers, the client's side), for the caller to relay.
async fn forward_requests(
    client: TcpStream,
    target: &str,
) -> Option<(OwnedReadHalf, OwnedWriteHalf)> {
    let server = TcpStream::connect(target).await.ok()?;
    let (mut client_read, client_write) = client.into_split();
    let (server_read, mut server_write) = server.into_split();
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
    });
    Some((server_read, client_write))
}

/// Starts a proxy to `target` (`host:port`) that passes at most `bytes_per_second` from the
/// server to each client (the other direction unthrottled); returns its `127.0.0.1:port`. It
/// serves every connection until the test process ends.
pub async fn throttled_proxy(target: String, bytes_per_second: usize) -> String {
    let (listener, address) = listen().await;
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                let Some((mut server_read, mut client_write)) =
                    forward_requests(client, &target).await
                else {
                    return;
                };
                let mut chunk = vec![0u8; 16 * 1024];
                loop {
                    let n = match server_read.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if client_write.write_all(&chunk[..n]).await.is_err() {
                        break;
                    }
                    let pause = n as f64 / bytes_per_second as f64;
                    tokio::time::sleep(Duration::from_secs_f64(pause)).await;
                }
                let _ = client_write.shutdown().await;
            });
        }
    });
    address
}

/// How [`tampering_proxy`] falsifies the HTTP/1.1 traffic it relays: a network or a server that
/// does not keep what it was sent.
#[derive(Debug, Clone, Default)]
pub struct Tampering {
    /// Flip one byte in the middle of the body of the first request whose request line
    /// contains this (e.g. `partNumber=2`).
    pub flip_body_of: Option<String>,
    /// Answer HEAD requests whose request line contains `.0` with `Content-Length: .1`: a
    /// server that claims to have stored another size.
    pub head_size: Option<(String, u64)>,
}

/// What [`tampering_proxy`] did, for the test to check that the fault was injected.
#[derive(Debug, Default)]
pub struct Tampered {
    /// The head (request line and headers) of the request whose body byte was flipped.
    pub flipped_request: std::sync::Mutex<Option<String>>,
    /// The head of every request relayed, in order.
    pub requests: std::sync::Mutex<Vec<String>>,
    pub heads_rewritten: std::sync::atomic::AtomicUsize,
}

/// Starts an HTTP/1.1 proxy to `target` that applies `plan`; returns its `127.0.0.1:port` and
/// its record. Messages are framed by `Content-Length` (what S3 clients and Garage send for
/// the requests a test tampers with); a chunked response ends the tampering on its connection.
pub async fn tampering_proxy(
    target: String,
    plan: Tampering,
) -> (String, std::sync::Arc<Tampered>) {
    use std::sync::Arc;
    let (listener, address) = listen().await;
    let record = Arc::new(Tampered::default());
    let flip_pending = Arc::new(std::sync::atomic::AtomicBool::new(
        plan.flip_body_of.is_some(),
    ));
    let shared = Arc::clone(&record);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&target).await else {
                continue;
            };
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            // Per request, in order: does its answer carry no body, and is its size to be faked?
            let (answers, pending) = tokio::sync::mpsc::unbounded_channel::<(bool, Option<u64>)>();
            let (plan, record, flip_pending) =
                (plan.clone(), Arc::clone(&shared), Arc::clone(&flip_pending));
            tokio::spawn(async move {
                let _ = relay_requests(
                    client_read,
                    server_write,
                    &plan,
                    &record,
                    &flip_pending,
                    answers,
                )
                .await;
            });
            let record = Arc::clone(&shared);
            tokio::spawn(async move {
                let _ = relay_answers(server_read, client_write, pending, &record).await;
            });
        }
    });
    (address, record)
}

type Reader = tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf>;

/// Reads one message head (start line and headers, up to the blank line); `None` at the end.
async fn read_head(reader: &mut Reader) -> std::io::Result<Option<String>> {
    use tokio::io::AsyncBufReadExt;
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        head.push_str(&line);
        if line == "\r\n" {
            return Ok(Some(head));
        }
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

async fn relay_requests(
    from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    plan: &Tampering,
    record: &Tampered,
    flip_pending: &std::sync::atomic::AtomicBool,
    answers: tokio::sync::mpsc::UnboundedSender<(bool, Option<u64>)>,
) -> std::io::Result<()> {
    use std::sync::atomic::Ordering;
    let mut reader = tokio::io::BufReader::new(from);
    while let Some(head) = read_head(&mut reader).await? {
        record.requests.lock().unwrap().push(head.clone());
        let request_line = head.lines().next().unwrap_or_default().to_string();
        let is_head = request_line.starts_with("HEAD ");
        let fake_size = plan
            .head_size
            .as_ref()
            .filter(|(pattern, _)| is_head && request_line.contains(pattern.as_str()))
            .map(|(_, size)| *size);
        let _ = answers.send((is_head, fake_size));
        let length: usize = header(&head, "content-length").map_or(0, |l| l.parse().unwrap_or(0));
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body).await?;
        let flip = plan
            .flip_body_of
            .as_ref()
            .is_some_and(|pattern| request_line.contains(pattern.as_str()));
        if flip && length > 0 && flip_pending.swap(false, Ordering::SeqCst) {
            body[length / 2] ^= 0x01;
            *record.flipped_request.lock().unwrap() = Some(head.clone());
        }
        to.write_all(head.as_bytes()).await?;
        to.write_all(&body).await?;
    }
    to.shutdown().await
}

async fn relay_answers(
    from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut pending: tokio::sync::mpsc::UnboundedReceiver<(bool, Option<u64>)>,
    record: &Tampered,
) -> std::io::Result<()> {
    use std::sync::atomic::Ordering;
    let mut reader = tokio::io::BufReader::new(from);
    while let Some(mut head) = read_head(&mut reader).await? {
        let status_line = head.lines().next().unwrap_or_default().to_string();
        // Interim answers (100 Continue) precede the real one of the same request.
        if status_line.contains(" 100 ") {
            to.write_all(head.as_bytes()).await?;
            continue;
        }
        let (no_body, fake_size) = pending.recv().await.unwrap_or((false, None));
        if header(&head, "transfer-encoding").is_some_and(|t| t.contains("chunked")) {
            // Not framed by length: relay the rest of the connection as it is.
            to.write_all(head.as_bytes()).await?;
            tokio::io::copy(&mut reader, &mut to).await?;
            break;
        }
        let length: usize = header(&head, "content-length").map_or(0, |l| l.parse().unwrap_or(0));
        if let Some(size) = fake_size {
            head = head
                .lines()
                .map(|line| match line.split_once(':') {
                    Some((key, _)) if key.trim().eq_ignore_ascii_case("content-length") => {
                        format!("{key}: {size}")
                    }
                    _ => line.to_string(),
                })
                .collect::<Vec<_>>()
                .join("\r\n")
                + "\r\n";
            record.heads_rewritten.fetch_add(1, Ordering::SeqCst);
        }
        to.write_all(head.as_bytes()).await?;
        if !no_body {
            let mut body = vec![0u8; length];
            reader.read_exact(&mut body).await?;
            to.write_all(&body).await?;
        }
    }
    to.shutdown().await
}

/// A network partition that a test switches on: see [`partitionable_proxy`].
#[derive(Debug, Clone, Default)]
pub struct Partition(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Partition {
    /// From now on, nothing crosses: bytes on open connections are dropped in both directions
    /// and new connections are accepted but never reach the server (packets lost, no reset).
    pub fn cut(&self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn is_cut(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Starts a TCP proxy to `target` on `host` (the address the client already reaches, so that
/// its TLS name still fits) that relays everything until its [`Partition`] is cut; returns
/// its `host:port`.
pub async fn partitionable_proxy(host: &str, target: String) -> (String, Partition) {
    let (listener, address) = listen_on(host).await;
    let partition = Partition::default();
    let cut = partition.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (target, cut) = (target.clone(), cut.clone());
            tokio::spawn(async move {
                if cut.is_cut() {
                    return swallow(client).await;
                }
                let Ok(server) = TcpStream::connect(&target).await else {
                    return;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(relay_until_cut(client_read, server_write, cut.clone()));
                relay_until_cut(server_read, client_write, cut).await;
            });
        }
    });
    (address, partition)
}

/// Reads and drops everything, keeping the connection open.
async fn swallow(mut stream: TcpStream) {
    let mut chunk = vec![0u8; 16 * 1024];
    while matches!(stream.read(&mut chunk).await, Ok(n) if n > 0) {}
}

async fn relay_until_cut(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    cut: Partition,
) {
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !cut.is_cut() && to.write_all(&chunk[..n]).await.is_err() {
            break;
        }
    }
    if cut.is_cut() {
        // A partition closes nothing: keep this side open (until the test process ends).
        std::future::pending::<()>().await;
    }
    let _ = to.shutdown().await;
}

/// A TLS front for `target` (plain TCP, e.g. Garage's S3 port): terminates TLS with `tls`'s
/// server certificate (127.0.0.1 and localhost) and relays the plaintext, as a load balancer
/// in front of an S3 server does. Returns its `127.0.0.1:port`; clients trust `tls.ca_cert`.
pub async fn tls_proxy(target: String, tls: &crate::TlsFiles) -> String {
    use std::sync::Arc;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls::{self, crypto::aws_lc_rs};
    let certs = CertificateDer::pem_file_iter(&tls.server_cert)
        .expect("the server certificate")
        .collect::<Result<Vec<_>, _>>()
        .expect("PEM certificates");
    let key = PrivateKeyDer::from_pem_file(&tls.server_key).expect("the server key");
    let config =
        rustls::ServerConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("a certificate and its key");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let (listener, address) = listen().await;
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (acceptor, target) = (acceptor.clone(), target.clone());
            tokio::spawn(async move {
                let Ok(mut client) = acceptor.accept(client).await else {
                    return;
                };
                let Ok(mut server) = TcpStream::connect(&target).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    address
}

/// Holds back the server's answers in a [`gated_proxy`] while it is shut.
#[derive(Debug, Clone)]
pub struct Gate {
    answered: std::sync::Arc<tokio::sync::Notify>,
    open: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
}

impl Gate {
    /// From now on, the server's answers are held back.
    pub fn shut(&self) {
        self.open.send_replace(false);
    }

    /// Waits until the server has answered while the gate was shut (an answer held back).
    pub async fn answered(&self) {
        self.answered.notified().await;
    }

    /// Passes on what was held back, and everything from now on.
    pub fn open(&self) {
        self.open.send_replace(true);
    }
}

/// Starts a TCP proxy to `target` that relays requests at once and, while its [`Gate`] is
/// shut, holds back the server's answers (a request the server has carried out, whose answer
/// is still on its way); returns its `127.0.0.1:port`. The gate starts open.
pub async fn gated_proxy(target: String) -> (String, Gate) {
    let (listener, address) = listen().await;
    let gate = Gate {
        answered: Default::default(),
        open: std::sync::Arc::new(tokio::sync::watch::Sender::new(true)),
    };
    let shared = gate.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let (target, gate) = (target.clone(), shared.clone());
            tokio::spawn(async move {
                let Some((mut server_read, mut client_write)) =
                    forward_requests(client, &target).await
                else {
                    return;
                };
                let mut open = gate.open.subscribe();
                let mut chunk = vec![0u8; 16 * 1024];
                loop {
                    let n = match server_read.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if !*open.borrow_and_update() {
                        gate.answered.notify_one();
                    }
                    if open.wait_for(|open| *open).await.is_err()
                        || client_write.write_all(&chunk[..n]).await.is_err()
                    {
                        break;
                    }
                }
                let _ = client_write.shutdown().await;
            });
        }
    });
    (address, gate)
}
