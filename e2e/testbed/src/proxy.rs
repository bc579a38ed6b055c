//! A slow network for tests: a TCP proxy on loopback that passes a limited rate from the server
//! to the client, so a stream stays in flight long enough to interrupt it.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Starts a proxy to `target` (`host:port`) that passes at most `bytes_per_second` from the
/// server to each client (the other direction unthrottled); returns its `127.0.0.1:port`. It
/// serves every connection until the test process ends.
pub async fn throttled_proxy(target: String, bytes_per_second: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the proxy");
    let address = listener.local_addr().expect("proxy address").to_string();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(&target).await else {
                    return;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
                    let _ = server_write.shutdown().await;
                });
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
