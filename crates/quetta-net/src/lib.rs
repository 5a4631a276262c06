//! TCP streams that record when bytes arrived and when a run of writes began.
//!
//! [`StampedTcp`] wraps a tokio `TcpStream`. For every read it records when the bytes
//! arrived: on Linux the kernel's receive timestamp of the newest segment the read returned
//! (`SO_TIMESTAMPNS`), converted to the monotonic clock by the wall-clock time the bytes
//! waited in the socket; elsewhere the time the read returned. For writes it records the
//! start of each *write run*: the instant just before the first write syscall that followed
//! a read (or the connection's start, or [`StampedTcp::end_write_run`]). On a connection
//! that carries one request and then its response, in turn (HTTP/1.1 without pipelining),
//! a write run is one request, and its start is when the request's first byte left for the
//! kernel.
//!
//! A client's stream can also guard reuse ([`StampedTcp::guard_reuse`]): before the first
//! write of a run that follows a read (the next request on a kept-alive connection) it
//! refuses to write, with a [`PeerClosed`] error and nothing sent, when the peer has already
//! closed its side (a non-blocking peek sees the end of the stream) or the connection has
//! been idle past the keep-alive limit the server announced ([`Stamps::set_idle_limit`]).
//! Such a request provably never reached the server and can be sent again elsewhere.
//!
//! Both are kept in a shared [`Stamps`], so the code that reads the parsed messages (hyper's
//! client or server, a layer above) can ask when the bytes under them moved, however late it
//! got to run. This crate is the one place Quetta reads these clocks; the OpenAI transport
//! (client side) and the simulator (server side) both use it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// The process's reference instant for instants kept in atomics.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// An `Option<Instant>` in an atomic: nanoseconds after [`epoch`] + 1 (0: none).
#[derive(Debug, Default)]
struct AtomicInstant(AtomicU64);

impl AtomicInstant {
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

/// Turn the kernel's receive timestamps on for this process ahead of the first connection,
/// and keep them on. Linux switches them on lazily (a deferred static key, flipped shortly
/// after the first socket asks) and off again when the last such socket closes, so the first
/// segments after that would arrive unstamped and fall back to the time the read returned.
/// A process-wide UDP socket with `SO_TIMESTAMPNS` set holds the switch on. Called by
/// [`StampedTcp::new`]; call it earlier (when building a client) to be ready sooner.
pub fn prepare() {
    #[cfg(target_os = "linux")]
    {
        static KEEPER: OnceLock<Option<std::net::UdpSocket>> = OnceLock::new();
        KEEPER.get_or_init(|| {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").ok()?;
            nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::ReceiveTimestampns, &true)
                .ok()?;
            Some(s)
        });
    }
}

/// What a [`StampedTcp`] has recorded, shared with whoever reads the messages above it.
#[derive(Debug, Default)]
pub struct Stamps {
    arrival: AtomicInstant,
    write_start: AtomicInstant,
    /// When a read first returned the end of the stream.
    eof: AtomicInstant,
    /// The longest idle time (ns) before the next write is refused (0: no limit).
    idle_limit_ns: AtomicU64,
    /// How long (ns) after the last read's arrival the next write run waits before it looks
    /// whether the peer has closed (0: it does not wait).
    settle_ns: AtomicU64,
}

/// A write refused by a [`StampedTcp`] that guards reuse: nothing of it was sent. Carried
/// inside the `io::Error` (kind `ConnectionAborted`) the write returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeerClosed {
    /// The peer had already closed its side of the connection.
    Closed,
    /// The connection had been idle past the peer's announced keep-alive limit.
    IdleLimit,
}

impl std::fmt::Display for PeerClosed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Closed => "the server had closed the kept-alive connection; nothing was sent on it",
            Self::IdleLimit => "the kept-alive connection was idle past the server's keep-alive timeout; nothing was sent on it",
        })
    }
}

impl std::error::Error for PeerClosed {}

impl Stamps {
    /// A fresh record, to share with one [`StampedTcp`].
    pub fn new() -> Arc<Self> {
        let _ = epoch();
        Arc::new(Self::default())
    }

    /// When the bytes of the connection's last read arrived (never earlier than those of
    /// the read before it).
    pub fn last_arrival(&self) -> Option<Instant> {
        self.arrival.get()
    }

    /// When the current (or last) write run began: just before its first write syscall.
    pub fn write_start(&self) -> Option<Instant> {
        self.write_start.get()
    }

    /// Whether a write run began after the last read's bytes arrived: over HTTP/1.1, whether
    /// the request after the last response has been (at least partly) written.
    pub fn written_since_read(&self) -> bool {
        match (self.write_start.get(), self.arrival.get()) {
            (Some(w), Some(a)) => w > a,
            (w, _) => w.is_some(),
        }
    }

    /// When a read first returned the end of the stream (the peer closed its side).
    pub fn eof(&self) -> Option<Instant> {
        self.eof.get()
    }

    /// Refuse the next write run once the connection has been idle (since the last read's
    /// arrival) for `limit` or longer.
    pub fn set_idle_limit(&self, limit: Duration) {
        let ns = u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.idle_limit_ns.store(ns, Ordering::Release);
    }

    /// Let the next write run wait until the last read's bytes are `settle` old before it
    /// checks that the peer is still there: a server that closes right after an answer has
    /// then had the time to (its close follows the answer's last bytes by microseconds).
    /// `Duration::ZERO` turns the wait off.
    pub fn set_settle(&self, settle: Duration) {
        let ns = u64::try_from(settle.as_nanos()).unwrap_or(u64::MAX);
        self.settle_ns.store(ns, Ordering::Release);
    }

    fn idle_limit(&self) -> Option<Duration> {
        match self.idle_limit_ns.load(Ordering::Acquire) {
            0 => None,
            n => Some(Duration::from_nanos(n)),
        }
    }
}

/// A TCP stream that records, in its [`Stamps`], when the bytes of each read arrived and when
/// each run of writes began. See the crate documentation.
#[derive(Debug)]
pub struct StampedTcp {
    tcp: TcpStream,
    stamps: Arc<Stamps>,
    /// `SO_TIMESTAMPNS` is on: reads go through `recvmsg` to fetch the kernel's stamp.
    kernel: bool,
    /// The last I/O was a write (so the next write continues the run).
    writing: bool,
    /// Bytes have been read (a later write run is a reuse of the connection).
    has_read: bool,
    /// Check the peer is still there before a write run that follows a read.
    guard: bool,
    /// The settle wait of a write run about to start (see [`Stamps::set_settle`]).
    settle: Option<Pin<Box<tokio::time::Sleep>>>,
    cmsg: Vec<u8>,
}

/// The wall clock as a duration since the Unix epoch (zero before it).
#[cfg(target_os = "linux")]
fn wall_clock() -> Duration {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default()
}

/// The most one `recvmsg` reads.
#[cfg(target_os = "linux")]
const MAX_READ: usize = 16 << 10;

#[cfg(target_os = "linux")]
thread_local! {
    /// Where `recvmsg` writes before the bytes are copied to the caller (see `poll_recvmsg`).
    static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; MAX_READ]);
}

/// The longest time bytes are taken to have waited in the socket buffer; a larger gap
/// between the kernel's (wall-clock) stamp and now is treated as a clock step.
const MAX_SOCKET_WAIT: Duration = Duration::from_secs(5);

impl StampedTcp {
    /// Wrap `tcp`, recording into `stamps`. On Linux this turns on `SO_TIMESTAMPNS`; when the
    /// kernel refuses, reads are stamped when they return.
    pub fn new(tcp: TcpStream, stamps: Arc<Stamps>) -> Self {
        prepare();
        #[cfg(target_os = "linux")]
        let kernel = nix::sys::socket::setsockopt(
            &tcp,
            nix::sys::socket::sockopt::ReceiveTimestampns,
            &true,
        )
        .is_ok();
        #[cfg(not(target_os = "linux"))]
        let kernel = false;
        Self {
            tcp,
            stamps,
            kernel,
            writing: false,
            has_read: false,
            guard: false,
            settle: None,
            cmsg: vec![0; 64],
        }
    }

    /// Refuse a write run that follows a read when the peer has closed or the idle limit
    /// passed (see the crate documentation). For clients: a server's answer always follows
    /// a read.
    pub fn guard_reuse(&mut self) {
        self.guard = true;
    }

    /// Wait, before a write run, until the last read's bytes are as old as the settle time.
    fn poll_settle(&mut self, cx: &mut Context<'_>, now: Instant) -> Poll<()> {
        if self.settle.is_none() {
            let settle = Duration::from_nanos(self.stamps.settle_ns.load(Ordering::Acquire));
            match self.stamps.last_arrival().map(|a| a + settle) {
                Some(until) if !settle.is_zero() && until > now => {
                    self.settle = Some(Box::pin(tokio::time::sleep_until(until.into())));
                }
                _ => return Poll::Ready(()),
            }
        }
        match self.settle.as_mut() {
            Some(s) => s.as_mut().poll(cx),
            None => Poll::Ready(()),
        }
    }

    /// Why the write run about to start must not (the peer closed, or the idle limit
    /// passed), checked with a non-blocking peek that takes nothing from the socket.
    fn refuse_reuse(&self, now: Instant) -> Option<PeerClosed> {
        let idle = self.stamps.last_arrival().map(|a| now.saturating_duration_since(a));
        if let (Some(limit), Some(idle)) = (self.stamps.idle_limit(), idle) {
            if idle >= limit {
                return Some(PeerClosed::IdleLimit);
            }
        }
        #[cfg(target_os = "linux")]
        {
            use nix::sys::socket::{recv, MsgFlags};
            use std::os::fd::AsRawFd;
            let mut b = [0u8; 1];
            let flags = MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT;
            if let Ok(0) = recv(self.tcp.as_raw_fd(), &mut b, flags) {
                return Some(PeerClosed::Closed);
            }
        }
        None
    }

    /// Whether reads carry the kernel's receive timestamp.
    pub fn kernel_stamps(&self) -> bool {
        self.kernel
    }

    /// The shared record.
    pub fn stamps(&self) -> &Arc<Stamps> {
        &self.stamps
    }

    /// The next write starts a new run (for example after a TLS handshake, whose last
    /// message is written by the client: the request that follows is a run of its own).
    pub fn end_write_run(&mut self) {
        self.writing = false;
    }

    /// The inner stream.
    pub fn get_ref(&self) -> &TcpStream {
        &self.tcp
    }

    /// Record a read of `n` bytes that returned at `now` (monotonic) and `wall_now` (wall
    /// clock, read just before `now`), whose newest segment the kernel stamped at `kernel`
    /// (wall clock), if it did. The wall clock is read first, so a preemption between the two
    /// readings can only make the arrival later, never earlier, than the truth.
    fn record_read(
        &mut self,
        n: usize,
        now: Instant,
        wall_now: Duration,
        kernel: Option<Duration>,
    ) {
        if n == 0 {
            if self.stamps.eof.get().is_none() {
                self.stamps.eof.set(now);
            }
            return;
        }
        self.writing = false;
        self.has_read = true;
        let waited = kernel
            .map(|k| wall_now.saturating_sub(k))
            .filter(|d| *d <= MAX_SOCKET_WAIT)
            .unwrap_or_default();
        let mut at = now.checked_sub(waited).unwrap_or(now);
        if let Some(prev) = self.stamps.arrival.get() {
            at = at.max(prev);
        }
        self.stamps.arrival.set(at);
    }

    /// Run one write syscall through `write`; if it starts a run (the last I/O was a read),
    /// record the instant just before it.
    fn stamped_write(
        &mut self,
        cx: &mut Context<'_>,
        write: impl FnOnce(Pin<&mut TcpStream>, &mut Context<'_>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        let mut at = (!self.writing).then(Instant::now);
        if let (Some(now), true, true) = (at, self.guard, self.has_read) {
            std::task::ready!(self.poll_settle(cx, now));
            // the write starts after any wait
            let now = if self.settle.is_some() { Instant::now() } else { now };
            self.settle = None;
            at = Some(now);
            if let Some(why) = self.refuse_reuse(now) {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionAborted, why)));
            }
        }
        let r = write(Pin::new(&mut self.tcp), cx);
        if let (Poll::Ready(Ok(1..)), Some(at)) = (&r, at) {
            self.writing = true;
            self.stamps.write_start.set(at);
        }
        r
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
            // (up to its adaptive size, 64 KiB and more) each call. Zeroing it on every read
            // cost more than the read of a small SSE chunk, so the kernel writes into this
            // thread's zeroed scratch buffer, and only the bytes read are copied over.
            let want = buf.remaining().min(MAX_READ);
            let cmsg = &mut self.cmsg;
            let r = self.tcp.try_io(tokio::io::Interest::READABLE, || {
                SCRATCH.with_borrow_mut(|scratch| {
                    let mut iov = [io::IoSliceMut::new(&mut scratch[..want])];
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
                    let n = m.bytes;
                    buf.put_slice(&scratch[..n]);
                    Ok((n, wall_now, now, wall))
                })
            });
            match r {
                Ok((n, wall_now, now, kernel)) => {
                    self.record_read(n, now, wall_now, kernel);
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
            let n = buf.filled().len() - before;
            this.record_read(n, Instant::now(), Duration::ZERO, None);
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
        self.get_mut().stamped_write(cx, |tcp, cx| tcp.poll_write(cx, buf))
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().stamped_write(cx, |tcp, cx| tcp.poll_write_vectored(cx, bufs))
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Over a real loopback socket: a read's arrival is when the peer wrote, however late
    /// the reader reads; a write run starts at its first write and a read ends it.
    #[test]
    fn arrival_is_when_bytes_came_not_when_read_and_runs_split_at_reads() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            prepare();
            // the kernel flips its timestamp switch shortly after the first request for it
            tokio::time::sleep(Duration::from_millis(50)).await;
            let (c, s) = tokio::join!(TcpStream::connect(addr), l.accept());
            let (stamps, peer_stamps) = (Stamps::new(), Stamps::new());
            let mut c = StampedTcp::new(c.unwrap(), stamps.clone());
            let mut s = StampedTcp::new(s.unwrap().0, peer_stamps.clone());
            assert!(stamps.last_arrival().is_none() && stamps.write_start().is_none());

            let before = Instant::now();
            c.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
            c.write_all(b"\r\n").await.unwrap();
            let run1 = stamps.write_start().unwrap();
            assert!(run1 >= before && run1 <= Instant::now());
            // the second write continued the run
            let written = Instant::now();
            std::thread::sleep(Duration::from_millis(30));
            let mut buf = [0u8; 64];
            let n = s.read(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"GET / HTTP/1.1\r\n\r\n");
            let arrived = peer_stamps.last_arrival().unwrap();
            if s.kernel_stamps() {
                // the bytes waited 30 ms in the socket: their arrival is before that wait
                assert!(arrived <= written + Duration::from_millis(5), "{arrived:?} {written:?}");
                assert!(arrived >= before);
            } else {
                assert!(arrived >= written + Duration::from_millis(30));
            }

            s.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
            let _ = c.read(&mut buf).await.unwrap();
            assert_eq!(stamps.write_start(), Some(run1), "a read does not start a run");
            let before2 = Instant::now();
            c.write_all(b"next").await.unwrap();
            let run2 = stamps.write_start().unwrap();
            assert!(run2 >= before2, "a write after a read starts a new run");
            c.end_write_run();
            let before3 = Instant::now();
            c.write_all(b"more").await.unwrap();
            assert!(stamps.write_start().unwrap() >= before3);
        });
    }
}
