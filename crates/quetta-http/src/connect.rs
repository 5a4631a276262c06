//! A hyper-util connector that times TCP connect and the TLS handshake separately and
//! attaches that to every response sent over the connection, with a use counter, so each
//! request knows whether its connection was new or reused.
//!
//! The socket under it is a [`quetta_net::StampedTcp`]: it records when the bytes of each
//! read arrived (on Linux the kernel's receive timestamp) and when each run of writes began.
//! The transport stamps an HTTP/1.1 body frame with the arrival of the last read before hyper
//! handed the frame over, so a busy client thread does not delay the stamp, and takes a
//! request's `sent` from the start of its write run (see docs/METRICS.md).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use quetta_engine::ConnectionInfo;
use quetta_net::{StampedTcp, Stamps};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_util::either::Either;

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    #[error("{0}")]
    Tcp(String),
    #[error("{0}")]
    Tls(String),
    #[error("connect timed out")]
    Timeout,
}

#[derive(Debug)]
struct MetaInner {
    connect: Duration,
    tls: Option<Duration>,
    http2: bool,
    uses: AtomicU64,
    stamps: Arc<Stamps>,
}

/// Facts about one pooled connection, attached to each response's extensions.
#[derive(Debug, Clone)]
pub(crate) struct ConnMeta(Arc<MetaInner>);

impl ConnMeta {
    /// Whether the connection has already served a request.
    pub(crate) fn served_before(&self) -> bool {
        self.0.uses.load(Ordering::Relaxed) > 0
    }

    /// When the bytes of the connection's last socket read arrived.
    pub(crate) fn last_arrival(&self) -> Option<Instant> {
        self.0.stamps.last_arrival()
    }

    /// When the connection's last run of writes began (over HTTP/1.1: the first byte of the
    /// request now in flight left for the kernel).
    pub(crate) fn write_start(&self) -> Option<Instant> {
        self.0.stamps.write_start()
    }

    /// Count one more request on this connection and describe it for that request.
    pub(crate) fn claim(&self) -> ConnectionInfo {
        let n = self.0.uses.fetch_add(1, Ordering::Relaxed);
        let mut c = if n == 0 {
            ConnectionInfo::new_connection(Some(self.0.connect), self.0.tls)
        } else {
            ConnectionInfo::reused()
        };
        c.http2 = self.0.http2;
        c
    }
}

/// Plain TCP or TLS over it (tokio-util's `Either` forwards reads and writes, vectored
/// writes included, to whichever it holds).
type Io = Either<StampedTcp, Box<tokio_rustls::client::TlsStream<StampedTcp>>>;

/// The connection type the connector yields.
pub struct TimedIo {
    io: TokioIo<Io>,
    meta: ConnMeta,
}

impl std::fmt::Debug for TimedIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimedIo").field("meta", &self.meta).finish_non_exhaustive()
    }
}

impl hyper::rt::Read for TimedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for TimedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
}

impl Connection for TimedIo {
    fn connected(&self) -> Connected {
        let c = Connected::new().extra(self.meta.clone());
        if self.meta.0.http2 {
            c.negotiated_h2()
        } else {
            c
        }
    }
}

/// See the module documentation.
#[derive(Clone)]
pub struct TimedConnector {
    pub(crate) tls: Option<TlsConnector>,
    pub(crate) connect_timeout: Option<Duration>,
}

impl std::fmt::Debug for TimedConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimedConnector")
            .field("tls", &self.tls.is_some())
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl tower_service::Service<Uri> for TimedConnector {
    type Response = TimedIo;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<TimedIo, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let tls = self.tls.clone();
        let timeout = self.connect_timeout;
        Box::pin(async move {
            let fut = connect(uri, tls);
            match timeout {
                Some(t) => tokio::time::timeout(t, fut).await.map_err(|_| ConnectError::Timeout)?,
                None => fut.await,
            }
        })
    }
}

async fn connect(uri: Uri, tls: Option<TlsConnector>) -> Result<TimedIo, ConnectError> {
    let https = uri.scheme_str() == Some("https");
    let host = uri.host().ok_or_else(|| ConnectError::Tcp(format!("no host in {uri}")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let t0 = Instant::now();
    let tcp = TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| ConnectError::Tcp(format!("{host}:{port}: {e}")))?;
    let connect = t0.elapsed();
    let _ = tcp.set_nodelay(true);
    let stamps = Stamps::new();
    let tcp = StampedTcp::new(tcp, stamps.clone());
    let meta = |tls: Option<Duration>, http2: bool| {
        ConnMeta(Arc::new(MetaInner { connect, tls, http2, uses: AtomicU64::new(0), stamps }))
    };
    if !https {
        return Ok(TimedIo { io: TokioIo::new(Either::Left(tcp)), meta: meta(None, false) });
    }
    let tls = tls.ok_or_else(|| ConnectError::Tls("https is not configured".into()))?;
    let name = ServerName::try_from(host.clone())
        .map_err(|e| ConnectError::Tls(format!("bad server name {host}: {e}")))?;
    let t1 = Instant::now();
    let mut stream = tls.connect(name, tcp).await.map_err(|e| ConnectError::Tls(e.to_string()))?;
    // The handshake ended with the client's own message: the request is a write run of its own.
    stream.get_mut().0.end_write_run();
    let tls_time = t1.elapsed();
    let http2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    Ok(TimedIo {
        io: TokioIo::new(Either::Right(Box::new(stream))),
        meta: meta(Some(tls_time), http2),
    })
}
