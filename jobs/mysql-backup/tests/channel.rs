//! The serve/pull/clone stream is sealed and mutually authenticated: a byte changed in transit,
//! a peer without the token and a replayed handshake are refused, and nothing reaches storage
//! or a data dir.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use mysql_backup::protocol;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Everything the peer sends until it closes the connection (bounded in time).
async fn read_to_end(socket: &mut TcpStream) -> Vec<u8> {
    let mut received = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), socket.read_to_end(&mut received))
        .await
        .expect("the peer closed the connection")
        .ok();
    received
}

fn clone_into(from: &str, datadir: &std::path::Path) -> Vec<String> {
    args(&[
        "clone",
        "--from",
        from,
        "--datadir",
        datadir.to_str().unwrap(),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_byte_flipped_in_transit_fails_the_clone_and_leaves_the_data_dir_empty() {
    let source = Mariadb::fresh(1);
    source.write_sample();
    let (_serve, addr) = serve(&source, &[]);
    wait_listening(&addr).await;
    // Well inside the backup's data, past the handshake and the answer.
    let proxy = faulty_proxy(addr, Fault::FlipAt(300_000)).await;
    let dir = tempfile::tempdir().unwrap();
    let datadir = dir.path().join("replica");

    let r = run(&clone_into(&proxy, &datadir), &[]).await;
    assert_ne!(r.code, 0, "{}", r.stderr);
    assert!(
        r.error_line().contains("altered in transit"),
        "{}",
        r.error_line()
    );
    assert_eq!(list_files(&datadir), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_the_token_gets_nothing() {
    let source = Mariadb::fresh(1);
    let (_serve, addr) = serve(&source, &[]);
    wait_listening(&addr).await;
    let mut socket = TcpStream::connect(&addr).await.unwrap();
    let refused = protocol::connect(
        &mut socket,
        b"not-the-token-0123456789",
        &protocol::Request::Full,
    )
    .await;
    assert!(
        matches!(refused, Err(protocol::ChannelError::Handshake)),
        "{:?}",
        refused.err()
    );
    assert_eq!(read_to_end(&mut socket).await, b"", "serve sent something");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clone_refuses_a_source_without_the_token() {
    // A fake source: it answers the handshake with a message of the right shape that it could
    // not seal, then a data directory of its choosing in the old plaintext framing.
    let fake = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = fake.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let (mut socket, _) = fake.accept().await.unwrap();
        let mut first = [0u8; 2 + 48];
        socket.read_exact(&mut first).await.unwrap();
        let mut answer = vec![0, 48];
        answer.extend([7u8; 48]);
        answer.extend(b"OK\nD\0\0\0\x05evil!");
        let _ = socket.write_all(&answer).await;
        let _ = read_to_end(&mut socket).await;
    });
    let dir = tempfile::tempdir().unwrap();
    let datadir = dir.path().join("replica");
    let r = run(&clone_into(&addr, &datadir), &[]).await;
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.error_line().contains("does not hold the same token"),
        "{}",
        r.error_line()
    );
    assert_eq!(list_files(&datadir), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_handshake_starts_no_backup() {
    let source = Mariadb::fresh(1);
    source.write_sample();
    let (_serve, addr) = serve(&source, &[]);
    wait_listening(&addr).await;
    // A legitimate pull, recorded on the way.
    let recorded = Arc::new(Mutex::new(Vec::new()));
    let proxy = faulty_proxy(addr.clone(), Fault::RecordRequests(recorded.clone())).await;
    let store = tempfile::tempdir().unwrap();
    let url = format!("file://{}/pulled.xbstream", store.path().display());
    run(&args(&["pull", "--from", &proxy, "--to", &url]), &[])
        .await
        .ok();
    let recorded = recorded.lock().unwrap().clone();
    // Its handshake message (2 + 48 bytes) and its sealed request (2 + 22).
    assert_eq!(recorded.len(), 2 + 48 + 2 + 22, "{recorded:?}");

    // Replayed by someone without the token: serve answers the handshake (it cannot tell a
    // replay from a client), but the request was sealed for the other session, so it closes
    // without running a backup.
    let mut socket = TcpStream::connect(&addr).await.unwrap();
    socket.write_all(&recorded).await.unwrap();
    let received = read_to_end(&mut socket).await;
    assert_eq!(
        received.len(),
        2 + 48,
        "only the handshake answer: {received:?}"
    );
}
