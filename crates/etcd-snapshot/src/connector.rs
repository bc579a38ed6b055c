//! TCP connections to etcd, read through a large buffer.
//!
//! Both layers that read the socket ask for small pieces: rustls a few KiB at a time, the
//! HTTP/2 client about 8 KiB (its frame buffer). For a snapshot stream that was 104,000 (TLS)
//! to 137,000 (plain) `recvfrom` calls per GiB; through a 256 KiB buffer, which takes what the
//! kernel holds in one call, 22,000 and 12,000. TLS, when configured, is layered on top by
//! tonic, so it reads from the buffer. Measured in docs/benchmarks/etcd-backup.md (what was tried).

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::io::BufReader;
use tokio::net::TcpStream;
use tower::ServiceExt;
use tower::util::MapResponse;

const READ_BUFFER: usize = 256 << 10;

type Buffered = TokioIo<BufReader<TcpStream>>;

/// A tonic connector (`Endpoint::connect_with_connector`): the TCP connector tonic uses by
/// default (name resolution, every address tried, `TCP_NODELAY`), its reads buffered.
pub(crate) fn buffered_tcp() -> MapResponse<HttpConnector, fn(TokioIo<TcpStream>) -> Buffered> {
    let mut tcp = HttpConnector::new();
    // `https://` endpoints too: tonic adds TLS on top.
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.map_response(buffered)
}

fn buffered(io: TokioIo<TcpStream>) -> Buffered {
    TokioIo::new(BufReader::with_capacity(READ_BUFFER, io.into_inner()))
}
