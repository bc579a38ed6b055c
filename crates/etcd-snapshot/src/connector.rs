//! TCP connections to etcd, read through a large buffer.
//!
//! Both layers that read the socket ask for small pieces: rustls a few KiB at a time, the
//! HTTP/2 client about 8 KiB (its frame buffer). For a snapshot stream that was 104,000 (TLS)
//! to 137,000 (plain) `recvfrom` calls per GiB; through a 256 KiB buffer, which takes what the
//! kernel holds in one call, 22,000 and 12,000. TLS, when configured, is layered on top by
//! tonic, so it reads from the buffer. Measured in the README's benchmark section.

use std::io;

use hyper_util::rt::TokioIo;
use tokio::io::BufReader;
use tokio::net::TcpStream;
use tonic::transport::Uri;

const READ_BUFFER: usize = 256 << 10;

type Connection = TokioIo<BufReader<TcpStream>>;

/// A tonic connector (`Endpoint::connect_with_connector`): TCP with `TCP_NODELAY`, buffered reads.
pub(crate) fn buffered_tcp() -> impl tower::Service<
    Uri,
    Response = Connection,
    Error = io::Error,
    Future = impl Future<Output = io::Result<Connection>> + Send,
> + Send
+ 'static {
    tower::service_fn(|uri: Uri| async move {
        let host = uri
            .host()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "endpoint without a host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
            Some("https") => 443,
            _ => 80,
        });
        let stream = TcpStream::connect((host.as_str(), port)).await?;
        stream.set_nodelay(true)?;
        Ok(TokioIo::new(BufReader::with_capacity(READ_BUFFER, stream)))
    })
}
