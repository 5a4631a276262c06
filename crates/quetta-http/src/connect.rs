//! A hyper-util connector that times TCP connect and the TLS handshake separately and
//! attaches that to every response sent over the connection, with a use counter, so each
//! request knows whether its connection was new or reused.
//!
//! The socket under it is a [`quetta_net::StampedTcp`]: it records when the bytes of each
//! read arrived (on Linux the kernel's receive timestamp) and when each run of writes began.
//! The transport stamps an HTTP/1.1 body frame with the arrival of the last read before hyper
//! handed the frame over, so a busy client thread does not delay the stamp, and takes a
//! request's `sent` from the start of its write run (see docs/METRICS.md).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
    /// What the transport has learnt about the server at this connection's origin.
    habits: Arc<Habits>,
    /// The most requests the server announced it takes on this connection
    /// (`Keep-Alive: max`; `u64::MAX`: no limit announced).
    max_requests: AtomicU64,
    /// The last response on this connection was streamed.
    last_streamed: AtomicBool,
}

/// What the transport has learnt about the server at one origin (scheme, host, port).
#[derive(Debug, Default)]
pub(crate) struct Habits {
    /// The server closes a connection right after a streamed response, whatever its
    /// keep-alive headers say (llama.cpp): such a connection is not put back in the pool.
    closes_after_stream: AtomicBool,
    /// A streamed response's connection carried another request: the server keeps them.
    keeps_streams: AtomicBool,
}

impl Habits {
    fn closes_after_stream(&self) -> bool {
        self.closes_after_stream.load(Ordering::Relaxed)
    }

    fn known(&self) -> bool {
        self.closes_after_stream() || self.keeps_streams.load(Ordering::Relaxed)
    }
}

/// Until the server's habit after streamed responses is known, how old a streamed
/// response's last bytes must be before its connection carries another request (once per
/// origin, in practice): long enough for a close that follows them.
const SETTLE: Duration = Duration::from_millis(5);

/// The longest time between a streamed response's last bytes and the server's close that
/// counts as closing right after the response.
const CLOSE_AFTER: Duration = Duration::from_millis(100);

impl MetaInner {
    /// The server closed this connection at `closed`: learn its habit when that came right
    /// after a streamed response (not after an idle timeout).
    fn learn_close(&self, closed: Instant) {
        let soon = self
            .stamps
            .last_arrival()
            .is_some_and(|last| closed.saturating_duration_since(last) <= CLOSE_AFTER);
        if soon
            && self.uses.load(Ordering::Relaxed) > 0
            && self.last_streamed.load(Ordering::Relaxed)
        {
            self.habits.closes_after_stream.store(true, Ordering::Relaxed);
        }
    }
}

impl Drop for MetaInner {
    /// Learn from how the connection ended (its end-of-stream read, if it saw one).
    fn drop(&mut self) {
        if let Some(eof) = self.stamps.eof() {
            self.learn_close(eof);
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
        self.0.stamps.last_arrival()
    }

    /// When the connection's last run of writes began (over HTTP/1.1: the first byte of the
    /// request now in flight left for the kernel).
    pub(crate) fn write_start(&self) -> Option<Instant> {
        self.0.stamps.write_start()
    }

    /// Whether a request was (at least partly) written since the last response's bytes.
    pub(crate) fn written_since_read(&self) -> bool {
        self.0.stamps.written_since_read()
    }

    /// A request on this connection failed before its response (the server closed it):
    /// learn from it when that came right after a streamed response.
    pub(crate) fn note_closed(&self, at: Instant) {
        self.0.learn_close(at);
    }

    /// Note what a response (claimed: its request is counted) said about keeping the
    /// connection (`Keep-Alive: timeout=T, max=N`) and whether it is streamed; returns
    /// whether the connection must not carry another request (the announced maximum is
    /// reached, or the answer is streamed and the server closes after those).
    pub(crate) fn note_response(&self, keep_alive: Option<&str>, streamed: bool) -> bool {
        let uses = self.0.uses.load(Ordering::Relaxed);
        if uses > 1 && self.0.last_streamed.load(Ordering::Relaxed) {
            self.0.habits.keeps_streams.store(true, Ordering::Relaxed);
        }
        self.0.last_streamed.store(streamed, Ordering::Relaxed);
        let unsure = streamed && !self.0.habits.known();
        self.0.stamps.set_settle(if unsure { SETTLE } else { Duration::ZERO });
        if let Some(ka) = keep_alive {
            let (timeout, max) = parse_keep_alive(ka);
            if let Some(t) = timeout {
                // Stop short of the server's own limit, so a request is never written as
                // the server closes: a second early, or half the limit when it is short.
                let margin = Duration::from_secs(1).min(t / 2);
                self.0.stamps.set_idle_limit(t.saturating_sub(margin));
            }
            if let Some(m) = max {
                // `max` counts the requests left after the previous one (Apache counts
                // down; cpp-httplib repeats its total): the total is the smallest sum.
                let total = uses.saturating_sub(1).saturating_add(m);
                self.0.max_requests.fetch_min(total, Ordering::Relaxed);
            }
        }
        uses >= self.0.max_requests.load(Ordering::Relaxed)
            || (streamed && self.0.habits.closes_after_stream())
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

/// The `timeout` (seconds) and `max` parameters of a `Keep-Alive` header; others ignored.
pub(crate) fn parse_keep_alive(v: &str) -> (Option<Duration>, Option<u64>) {
    let (mut timeout, mut max) = (None, None);
    for part in v.split(',') {
        let Some((k, val)) = part.split_once('=') else { continue };
        let val = val.trim().trim_matches('"');
        match k.trim().to_ascii_lowercase().as_str() {
            "timeout" => timeout = val.parse::<u64>().ok().map(Duration::from_secs),
            "max" => max = val.parse::<u64>().ok(),
            _ => {}
        }
    }
    (timeout.filter(|t| !t.is_zero()), max)
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
    /// Every origin is known to keep connections after streamed responses.
    pub(crate) keeps_streams: bool,
    /// What was learnt per origin, shared by every connection to it.
    pub(crate) habits: Arc<Mutex<HashMap<String, Arc<Habits>>>>,
}

impl std::fmt::Debug for TimedConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimedConnector")
            .field("tls", &self.tls.is_some())
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
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
        let origin = format!(
            "{}://{}",
            uri.scheme_str().unwrap_or("http"),
            uri.authority().map_or("", |a| a.as_str())
        );
        let habits = self
            .habits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(origin)
            .or_insert_with(|| {
                let h = Habits::default();
                h.keeps_streams.store(self.keeps_streams, Ordering::Relaxed);
                Arc::new(h)
            })
            .clone();
        Box::pin(async move {
            let fut = connect(uri, tls, habits);
            match timeout {
                Some(t) => tokio::time::timeout(t, fut).await.map_err(|_| ConnectError::Timeout)?,
                None => fut.await,
            }
        })
    }
}

async fn connect(
    uri: Uri,
    tls: Option<TlsConnector>,
    habits: Arc<Habits>,
) -> Result<TimedIo, ConnectError> {
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
    let mut tcp = StampedTcp::new(tcp, stamps.clone());
    tcp.guard_reuse();
    let meta = |tls: Option<Duration>, http2: bool| {
        ConnMeta(Arc::new(MetaInner {
            connect,
            tls,
            http2,
            uses: AtomicU64::new(0),
            stamps,
            habits,
            max_requests: AtomicU64::new(u64::MAX),
            last_streamed: AtomicBool::new(false),
        }))
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

#[cfg(test)]
mod tests {
    use super::parse_keep_alive;
    use std::time::Duration;

    #[test]
    fn keep_alive_parameters() {
        assert_eq!(
            parse_keep_alive("timeout=5, max=100"),
            (Some(Duration::from_secs(5)), Some(100))
        );
        assert_eq!(parse_keep_alive("max=3"), (None, Some(3)));
        assert_eq!(
            parse_keep_alive(" Timeout = \"2\" ,foo=bar"),
            (Some(Duration::from_secs(2)), None)
        );
        assert_eq!(parse_keep_alive("timeout=0, max=x"), (None, None));
    }
}
