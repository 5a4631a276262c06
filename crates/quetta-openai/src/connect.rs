//! A hyper-util connector that times TCP connect and the TLS handshake separately and
//! attaches that to every response sent over the connection, with a use counter, so each
//! request knows whether its connection was new or reused.
//!
//! It also records when the bytes of each socket read arrived: on Linux the kernel's receive
//! timestamp of the read (`SO_TIMESTAMPNS`, the arrival of the newest segment it returned),
//! converted to the monotonic clock; elsewhere the time the read returned. The transport
//! stamps an HTTP/1.1 body frame with the arrival of the last read before hyper handed the
//! frame over, so a busy client thread does not delay the stamp (see docs/METRICS.md).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use quetta_engine::ConnectionInfo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

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
    arrival: Arc<Arrival>,
}

/// The process's reference instant for arrival times kept in atomics.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// When the bytes of the last socket read arrived, as nanoseconds after [`epoch`] + 1 (0:
/// no read yet).
#[derive(Debug, Default)]
struct Arrival(AtomicU64);

impl Arrival {
    fn set(&self, at: Instant) {
        let n = at.saturating_duration_since(epoch()).as_nanos();
        self.0.store(u64::try_from(n).unwrap_or(u64::MAX - 1) + 1, Ordering::Release);
    }

    fn get(&self) -> Option<Instant> {
        match self.0.load(Ordering::Acquire) {
            0 => None,
            n => Some(epoch() + Duration::from_nanos(n - 1)),
        }
    }
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
        self.0.arrival.get()
    }

    /// Count one more request on this connection and describe it for that request.
    pub(crate) fn claim(&self) -> ConnectionInfo {
        let n = self.0.uses.fetch_add(1, Ordering::Relaxed);
        if n == 0 {
            ConnectionInfo {
                reused: false,
                connect: Some(self.0.connect),
                tls: self.0.tls,
                http2: self.0.http2,
                retried_stale: false,
            }
        } else {
            ConnectionInfo {
                reused: true,
                connect: None,
                tls: None,
                http2: self.0.http2,
                retried_stale: false,
            }
        }
    }
}

/// A TCP stream that records when the bytes of each read arrived.
struct StampedTcp {
    tcp: TcpStream,
    arrival: Arc<Arrival>,
    /// `SO_TIMESTAMPNS` is on: reads go through `recvmsg` to fetch the kernel's stamp.
    kernel: bool,
    cmsg: Vec<u8>,
}

/// The wall clock as a duration since the Unix epoch (zero before it).
#[cfg(target_os = "linux")]
fn wall_clock() -> Duration {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default()
}

/// The most one `recvmsg` reads (and so zeroes beforehand).
#[cfg(target_os = "linux")]
const MAX_READ: usize = 16 << 10;

/// The longest time bytes are taken to have waited in the socket buffer; a larger gap
/// between the kernel's (wall-clock) stamp and now is treated as a clock step.
const MAX_SOCKET_WAIT: Duration = Duration::from_secs(5);

impl StampedTcp {
    fn new(tcp: TcpStream, arrival: Arc<Arrival>) -> Self {
        #[cfg(target_os = "linux")]
        let kernel = nix::sys::socket::setsockopt(
            &tcp,
            nix::sys::socket::sockopt::ReceiveTimestampns,
            &true,
        )
        .is_ok();
        #[cfg(not(target_os = "linux"))]
        let kernel = false;
        Self { tcp, arrival, kernel, cmsg: vec![0; 64] }
    }

    /// Record a read of `n` bytes that returned at `now` (monotonic) and `wall_now` (wall
    /// clock, read just before `now`), whose newest segment the kernel stamped at `kernel`
    /// (wall clock), if it did. The wall clock is read first, so a preemption between the two
    /// readings can only make the arrival later, never earlier, than the truth.
    fn record(&self, n: usize, now: Instant, wall_now: Duration, kernel: Option<Duration>) {
        if n == 0 {
            return;
        }
        let waited = kernel
            .map(|k| wall_now.saturating_sub(k))
            .filter(|d| *d <= MAX_SOCKET_WAIT)
            .unwrap_or_default();
        let mut at = now.checked_sub(waited).unwrap_or(now);
        if let Some(prev) = self.arrival.get() {
            at = at.max(prev);
        }
        self.arrival.set(at);
    }

    #[cfg(target_os = "linux")]
    fn poll_recvmsg(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, SockaddrStorage};
        use std::os::fd::AsRawFd;
        loop {
            std::task::ready!(self.tcp.poll_read_ready(cx))?;
            let fd = self.tcp.as_raw_fd();
            // `recvmsg` needs initialised memory, and hyper lends a fresh uninitialised buffer
            // (up to its adaptive size, 64 KiB and more) each call: zero at most 16 KiB per
            // read rather than the whole of it. SSE chunks are far smaller.
            let want = buf.remaining().min(MAX_READ);
            let unfilled = buf.initialize_unfilled_to(want);
            let cmsg = &mut self.cmsg;
            let r = self.tcp.try_io(tokio::io::Interest::READABLE, || {
                let mut iov = [io::IoSliceMut::new(unfilled)];
                let m = recvmsg::<SockaddrStorage>(fd, &mut iov, Some(cmsg), MsgFlags::empty())
                    .map_err(io::Error::from)?;
                let (wall_now, now) = (wall_clock(), Instant::now());
                let mut wall = None;
                for c in m.cmsgs().map_err(io::Error::from)? {
                    if let ControlMessageOwned::ScmTimestampns(t) = c {
                        let (s, ns) = (u64::try_from(t.tv_sec()), u32::try_from(t.tv_nsec()));
                        if let (Ok(s), Ok(ns)) = (s, ns) {
                            wall = Some(Duration::new(s, ns));
                        }
                    }
                }
                Ok((m.bytes, wall_now, now, wall))
            });
            match r {
                Ok((n, wall_now, now, kernel)) => {
                    self.record(n, now, wall_now, kernel);
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncRead for StampedTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        #[cfg(target_os = "linux")]
        if this.kernel {
            return this.poll_recvmsg(cx, buf);
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            this.record(buf.filled().len() - before, Instant::now(), Duration::ZERO, None);
        }
        r
    }
}

impl AsyncWrite for StampedTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

enum Io {
    Plain(StampedTcp),
    Tls(Box<tokio_rustls::client::TlsStream<StampedTcp>>),
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

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
    let _ = epoch();
    let arrival = Arc::new(Arrival::default());
    let tcp = StampedTcp::new(tcp, arrival.clone());
    let meta = |tls: Option<Duration>, http2: bool| {
        ConnMeta(Arc::new(MetaInner { connect, tls, http2, uses: AtomicU64::new(0), arrival }))
    };
    if !https {
        return Ok(TimedIo { io: TokioIo::new(Io::Plain(tcp)), meta: meta(None, false) });
    }
    let tls = tls.ok_or_else(|| ConnectError::Tls("https is not configured".into()))?;
    let name = ServerName::try_from(host.clone())
        .map_err(|e| ConnectError::Tls(format!("bad server name {host}: {e}")))?;
    let t1 = Instant::now();
    let stream = tls.connect(name, tcp).await.map_err(|e| ConnectError::Tls(e.to_string()))?;
    let tls_time = t1.elapsed();
    let http2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    Ok(TimedIo { io: TokioIo::new(Io::Tls(Box::new(stream))), meta: meta(Some(tls_time), http2) })
}
