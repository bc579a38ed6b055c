//! TCP connections to etcd, read through a large buffer.
//!
//! Both layers that read the socket read small pieces: rustls 4 KiB at a time, the HTTP/2
//! client about 8 KiB (its frame buffer). For a snapshot stream that is 130,000 to 260,000
//! `recvfrom` calls per GiB. Reading through a 256 KiB buffer takes what the kernel holds in
//! one call. TLS, when configured, is layered on top by tonic, so it reads from the buffer.

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
