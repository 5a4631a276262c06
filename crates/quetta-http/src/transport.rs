//! The HTTP transport every HTTP adapter shares: a pooled hyper client over the timed
//! connector (TCP and TLS timings, connection reuse), and one response state machine that
//! stamps each body frame with [`Instant::now`] the moment hyper hands it over, before any
//! parsing, resends once a request a pooled connection provably never delivered, ends the stream at the end marker
//! and, when polled on after it, drains the rest of the body so the connection can be
//! reused. Per-phase timeouts are not the transport's: the runner applies them around any
//! engine (`quetta_loadgen::WithTimeouts`); the connect limit is [`TransportConfig`]'s.
//!
//! What differs between backends is only how the body is framed and decoded: a
//! [`BodyDecoder`] turns body bytes into events (OpenAI SSE, Gemini SSE, the AWS event
//! stream, JSON lines). An adapter builds its request, signs it, and hands both to
//! [`Transport::stream`].
//!
//! Over 800 lines on purpose: the response state machine (stamp, decode, end, drain,
//! resend) is one piece whose states must be read together.

use std::collections::VecDeque;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_core::Stream;
use http::header::{HeaderMap, RETRY_AFTER};
use http::Request;
use http_body::Body as _;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::{capture_connection, CaptureConnection};
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use quetta_engine::{EngineError, EventKind, EventStream, TimedEvent, TimeoutPhase};
use tokio::time::Sleep;

use crate::connect::{ConnMeta, ConnectError, TimedConnector};
use crate::excerpt;
use crate::sse::SseParser;
use crate::BuildError;

pub(crate) type HttpClient = Client<TimedConnector, Full<Bytes>>;

/// How the transport connects.
#[derive(Debug, Clone, Default)]
pub struct TransportConfig {
    /// Accept any TLS certificate (the binaries print a warning).
    pub insecure: bool,
    /// An extra CA certificate (PEM) to trust.
    pub ca_cert: Option<PathBuf>,
    /// HTTP/2 over cleartext with prior knowledge (https negotiates it by ALPN anyway).
    pub http2: bool,
    /// Limit on establishing a connection (TCP and TLS).
    pub connect_timeout: Option<Duration>,
    /// The server is known to keep a connection after a streamed response (Quetta's own
    /// simulator), so no connection's first reuse waits to learn it.
    pub keeps_streams: bool,
}

/// A pooled HTTP/1.1 and HTTP/2 client with verified TLS. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Transport {
    client: HttpClient,
}

/// A non-success answer, for an adapter to name its error.
#[derive(Debug)]
pub struct ErrorAnswer<'a> {
    pub status: u16,
    pub headers: &'a HeaderMap,
    /// The start of the body (at most 4 KiB).
    pub body: &'a [u8],
    pub retry_after: Option<String>,
}

impl ErrorAnswer<'_> {
    /// The generic error: the status and an excerpt of the body.
    pub fn http_status(&self) -> EngineError {
        EngineError::HttpStatus {
            status: self.status,
            body_excerpt: self.excerpt(),
            retry_after: self.retry_after.clone(),
        }
    }

    /// The body's first 512 bytes as text.
    pub fn excerpt(&self) -> String {
        excerpt(String::from_utf8_lossy(self.body).trim(), 512)
    }
}

/// Maps a provider's error answers to typed errors (SageMaker's `x-amzn-ErrorType`,
/// Google's error objects).
pub type StatusErrorFn = Arc<dyn Fn(&ErrorAnswer<'_>) -> EngineError + Send + Sync>;

/// Per-request settings of [`Transport::stream`].
#[derive(Clone, Default)]
pub struct StreamOptions {
    /// Whether the response is a stream of events (else one body decoded at its end).
    pub streaming: bool,
    /// Response headers to copy into the `Headers` event (lower-case names, or prefixes
    /// ending in `*`); shared by every request of an engine.
    pub record_headers: Arc<[String]>,
    /// Names the error of a non-success answer (default: [`ErrorAnswer::http_status`]).
    pub status_error: Option<StatusErrorFn>,
}

impl std::fmt::Debug for StreamOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamOptions")
            .field("streaming", &self.streaming)
            .field("record_headers", &self.record_headers)
            .field("status_error", &self.status_error.as_ref().map(|_| "custom"))
            .finish()
    }
}

/// A small, whole response (for token endpoints, metadata servers, model lists).
#[derive(Debug, Clone)]
pub struct Fetched {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The trailers, where the body had them (gRPC's status).
    pub trailers: Option<HeaderMap>,
}

impl Transport {
    /// Build a client. Fails on an unreadable CA file.
    pub fn new(cfg: &TransportConfig) -> Result<Self, BuildError> {
        quetta_net::prepare();
        let tls = crate::tls::client_config(cfg.insecure, cfg.ca_cert.as_deref(), true)?;
        let connector = TimedConnector {
            tls: Some(tokio_rustls::TlsConnector::from(Arc::new(tls))),
            connect_timeout: cfg.connect_timeout,
            keeps_streams: cfg.keeps_streams,
            habits: Arc::default(),
        };
        let mut b = Client::builder(TokioExecutor::new());
        b.pool_max_idle_per_host(usize::MAX)
            .pool_idle_timeout(Duration::from_secs(90))
            .timer(TokioTimer::new());
        b.pool_timer(TokioTimer::new());
        // hyper-util would resend some requests on a closed pooled connection silently; the
        // transport does it itself so every resend is marked in the request's record.
        b.retry_canceled_requests(false);
        if cfg.http2 {
            b.http2_only(true);
        }
        Ok(Self { client: b.build(connector) })
    }

    /// Send `request` and decode its body with `body`; the events carry arrival times. A
    /// request that could not be built is passed as its error and fails at once.
    pub fn stream(
        &self,
        request: Result<Request<Full<Bytes>>, EngineError>,
        body: Box<dyn BodyDecoder>,
        opts: &StreamOptions,
    ) -> EventStream {
        // A copy for one resend if a pooled connection turns out to be closed (cheap: the
        // body is reference-counted).
        let spare = request.as_ref().ok().map(clone_request);
        Box::pin(ResponseStream {
            client: self.client.clone(),
            spare,
            retried_stale: false,
            capture: None,
            state: match request {
                Ok(r) => State::Start(r),
                Err(e) => State::Failed(Some(e)),
            },
            sleep: None,
            sent: Instant::now(),
            arrivals: None,
            last_stamp: Instant::now(),
            frame: 0,
            body,
            pending: VecDeque::with_capacity(4),
            streaming: opts.streaming,
            body_buf: Vec::new(),
            status: 200,
            retry_after: None,
            finished: false,
            record_headers: opts.record_headers.clone(),
            status_error: opts.status_error.clone(),
            error_headers: HeaderMap::new(),
        })
    }

    /// Send a small request and read its whole answer (at most `max_bytes`), whatever its
    /// status; fails after `timeout`.
    pub async fn fetch(
        &self,
        request: Request<Full<Bytes>>,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<Fetched, EngineError> {
        let fut = async {
            // A pooled connection the server closed as it was reused (after a redirect, say)
            // took nothing: send once more on a new one, as `stream` does.
            let spare = clone_request(&request);
            let resp = match self.client.request(request).await {
                Ok(r) => r,
                Err(e) if never_received(&e, failed_conn(&e).as_ref()) => {
                    self.client.request(spare).await.map_err(|e| connect_error(&e))?
                }
                Err(e) => return Err(connect_error(&e)),
            };
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let collected = Limited::new(resp.into_body(), max_bytes)
                .collect()
                .await
                .map_err(|e| EngineError::ConnectionClosed(format!("reading the body: {e}")))?;
            let trailers = collected.trailers().cloned();
            Ok(Fetched { status, headers, body: collected.to_bytes(), trailers })
        };
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| EngineError::Timeout(TimeoutPhase::Total))?
    }
}

/// Turns a response body into events. One per request; `Send` so streams can move between
/// worker threads. Every method is called with the arrival time already taken.
pub trait BodyDecoder: Send {
    /// The headers of a success answer, streamed or not, before any body byte: an `Err`
    /// fails the request at once (a body this decoder cannot read, told by its content
    /// type).
    fn on_headers(&mut self, _headers: &http::HeaderMap) -> Result<(), EngineError> {
        Ok(())
    }
    /// A body frame of a streamed response: push the events it completes, in order. An
    /// `Err` fails the request.
    fn on_data(&mut self, data: &[u8], out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError>;
    /// The body's trailers (gRPC's status): an `Err` fails the request. Called in order
    /// with the body's frames, streamed or not.
    fn on_trailers(&mut self, _trailers: &http::HeaderMap) -> Result<(), EngineError> {
        Ok(())
    }
    /// The streamed body ended: flush what is buffered.
    fn on_end(&mut self, out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError>;
    /// The whole body of a non-streamed response.
    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError>;
    /// The stream's end marker was seen (`[DONE]`): the rest of the body is only drained.
    fn is_done(&self) -> bool;
    /// At the end of the body: whether the answer is complete (else `Incomplete`).
    fn is_complete(&self) -> bool {
        self.is_done() || self.finish_reason().is_some()
    }
    /// The finish reason, once known.
    fn finish_reason(&self) -> Option<String>;
}

/// Decodes the events of a server-sent-event stream (OpenAI chunks, Gemini responses).
pub trait EventDecoder: Send {
    /// One SSE event. An `Err` is terminal.
    fn on_event(
        &mut self,
        event_type: &[u8],
        data: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError>;
    /// A whole non-streamed JSON body.
    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError>;
    /// The end marker was seen.
    fn is_done(&self) -> bool;
    fn finish_reason(&self) -> Option<String>;
    /// Whether a body that ends cleanly completes the answer without an end marker (a
    /// protocol that has none, such as Triton's `generate_stream`: its stream just ends).
    fn complete_at_body_end(&self) -> bool {
        false
    }
}

/// An SSE body: the incremental parser feeding an [`EventDecoder`]; events after the end
/// marker are ignored.
#[derive(Debug)]
pub struct SseBody<D> {
    parser: SseParser,
    decoder: D,
}

impl<D: EventDecoder> SseBody<D> {
    /// `max_event_bytes` bounds one event (a larger one is a protocol error).
    pub fn new(max_event_bytes: usize, decoder: D) -> Self {
        Self { parser: SseParser::new(max_event_bytes), decoder }
    }

    /// The inner decoder.
    pub fn decoder(&self) -> &D {
        &self.decoder
    }
}

impl<D: EventDecoder> BodyDecoder for SseBody<D> {
    fn on_data(&mut self, data: &[u8], out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        let Self { parser, decoder } = self;
        let mut err = None;
        parser
            .feed(data, |et, d| {
                if err.is_none() && !decoder.is_done() {
                    err = decoder.on_event(et, d, out).err();
                }
            })
            .map_err(|e| EngineError::Protocol(e.to_string()))?;
        err.map_or(Ok(()), Err)
    }

    fn on_end(&mut self, out: &mut dyn FnMut(EventKind)) -> Result<(), EngineError> {
        let Self { parser, decoder } = self;
        let mut err = None;
        parser
            .finish(|et, d| {
                if err.is_none() && !decoder.is_done() {
                    err = decoder.on_event(et, d, out).err();
                }
            })
            .map_err(|e| EngineError::Protocol(e.to_string()))?;
        err.map_or(Ok(()), Err)
    }

    fn decode_full(
        &mut self,
        body: &[u8],
        out: &mut dyn FnMut(EventKind),
    ) -> Result<(), EngineError> {
        self.decoder.decode_full(body, out)
    }

    fn is_done(&self) -> bool {
        self.decoder.is_done()
    }

    fn finish_reason(&self) -> Option<String> {
        self.decoder.finish_reason()
    }

    fn is_complete(&self) -> bool {
        self.is_done() || self.finish_reason().is_some() || self.decoder.complete_at_body_end()
    }
}

enum State {
    Start(Request<Full<Bytes>>),
    Failed(Option<EngineError>),
    Waiting(ResponseFuture),
    Body(Incoming),
    /// Reading the body of an error response.
    ErrorBody(Incoming),
    /// `[DONE]` seen; reading the rest of the body so the connection can be reused.
    Draining(Incoming),
    Done,
}

const MAX_FULL_BODY: usize = 64 << 20;
const MAX_ERROR_BODY: usize = 4096;
/// How long a consumer polling on after the `End` event waits for the rest of the body
/// (so the connection can be reused) before the connection is given up.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

struct ResponseStream {
    client: HttpClient,
    /// A copy of the request for one resend when a pooled connection never delivered it.
    spare: Option<Request<Full<Bytes>>>,
    retried_stale: bool,
    /// The connection the request went over, to keep it out of the pool when the server
    /// will not take another request on it.
    capture: Option<CaptureConnection>,
    state: State,
    /// The drain's limit (after `End`).
    sleep: Option<Pin<Box<Sleep>>>,
    sent: Instant,
    /// The connection's read arrivals (HTTP/1.1), to stamp frames by when their bytes
    /// arrived rather than when this task got to them.
    arrivals: Option<ConnMeta>,
    /// The last frame's stamp (stamps never go backwards).
    last_stamp: Instant,
    frame: u64,
    body: Box<dyn BodyDecoder>,
    pending: VecDeque<TimedEvent>,
    streaming: bool,
    body_buf: Vec<u8>,
    status: u16,
    retry_after: Option<String>,
    finished: bool,
    record_headers: Arc<[String]>,
    status_error: Option<StatusErrorFn>,
    /// The headers of a non-success answer.
    error_headers: HeaderMap,
}

/// The connection a failed request went over, if one was made.
fn failed_conn(e: &hyper_util::client::legacy::Error) -> Option<ConnMeta> {
    e.connect_info().and_then(|c| {
        let mut x = http::Extensions::new();
        c.get_extras(&mut x);
        x.get::<ConnMeta>().cloned()
    })
}

/// Whether a request that failed before any response byte provably never reached the
/// server, so sending it again cannot run it twice: on a pooled connection that had served
/// a request before, the socket refused to write it because the server had closed (or its
/// keep-alive timeout had passed), or the connection ended before a byte of it was written
/// (hyper found the close as it took the connection), or the write failed on a closed
/// socket, or the server's
/// socket answered it with a reset (a socket resets only when closed with bytes unread, or
/// when bytes reach it after it closed). A connection that simply ended after the request
/// was written is not proof: the server may have taken it.
fn never_received(e: &hyper_util::client::legacy::Error, conn: Option<&ConnMeta>) -> bool {
    let Some(conn) = conn.filter(|c| c.served_before()) else { return false };
    // A write the guard refused (`quetta_net::PeerClosed`) left nothing written either.
    if !conn.written_since_read() {
        return true;
    }
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::{BrokenPipe, ConnectionReset};
            if matches!(io.kind(), BrokenPipe | ConnectionReset) {
                return true;
            }
        }
        src = s.source();
    }
    false
}

pub(crate) fn connect_error(e: &hyper_util::client::legacy::Error) -> EngineError {
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(ce) = s.downcast_ref::<ConnectError>() {
            return match ce {
                ConnectError::Tcp(m) => EngineError::Connect(m.clone()),
                ConnectError::Tls(m) => EngineError::Tls(m.clone()),
                ConnectError::Timeout => EngineError::Timeout(TimeoutPhase::Connect),
            };
        }
        if let Some(he) = s.downcast_ref::<hyper::Error>() {
            return body_error(he, "before the response headers");
        }
        src = s.source();
    }
    if e.is_connect() {
        EngineError::Connect(e.to_string())
    } else {
        EngineError::ConnectionClosed(format!("{e}"))
    }
}

fn body_error(e: &hyper::Error, when: &str) -> EngineError {
    if e.is_parse() {
        EngineError::Protocol(format!("{e} ({when})"))
    } else {
        let mut msg = e.to_string();
        if let Some(s) = std::error::Error::source(e) {
            msg = format!("{msg}: {s}");
        }
        EngineError::ConnectionClosed(format!("{msg} ({when})"))
    }
}

fn clone_request(r: &Request<Full<Bytes>>) -> Request<Full<Bytes>> {
    let mut c = Request::new(r.body().clone());
    *c.method_mut() = r.method().clone();
    *c.uri_mut() = r.uri().clone();
    *c.headers_mut() = r.headers().clone();
    *c.version_mut() = r.version();
    c
}

fn header_matches(name: &str, wanted: &[String]) -> bool {
    wanted.iter().any(|w| match w.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == w,
    })
}

impl ResponseStream {
    /// The response head arrived: stamp it, claim the connection, keep the headers asked
    /// for, and go on to the body (or to the error body).
    fn on_response(&mut self, resp: http::Response<Incoming>) {
        let this = self;
        let now = Instant::now();
        let status = resp.status().as_u16();
        // HTTP/2 multiplexes streams over one connection, whose reader runs
        // ahead of any one stream: there a frame is stamped when it is handed
        // over. HTTP/1.1 reads only when this response needs more bytes.
        if resp.version() != http::Version::HTTP_2 {
            this.arrivals = resp.extensions().get::<ConnMeta>().cloned();
        }
        // HTTP/1.1 carries one request at a time, so the connection's last
        // write run is this request: its first byte left for the kernel then
        // (after connect, TLS and the client's own I/O task). A resent request
        // counts from its resend's write: the first attempt never left.
        let written = this
            .arrivals
            .as_ref()
            .and_then(ConnMeta::write_start)
            .filter(|w| *w >= this.sent && *w <= now);
        this.last_stamp = written.unwrap_or(this.sent);
        // The headers arrived with the last read too; every later event is
        // stamped no earlier than they are.
        let at = this.arrival_stamp(now);
        let meta = resp.extensions().get::<ConnMeta>();
        let mut connection = meta.map(ConnMeta::claim).unwrap_or_default();
        connection.retried_stale = this.retried_stale;
        if let Some(m) = meta {
            // Keep the connection out of the pool when the server said (Connection: close
            // is hyper's) or showed it takes no further request on it.
            let streamed = this.streaming && (200..300).contains(&status);
            let ka = resp.headers().get("keep-alive").and_then(|v| v.to_str().ok());
            if m.note_response(ka, streamed) {
                if let Some(c) = this.capture.as_ref() {
                    if let Some(conn) = c.connection_metadata().as_ref() {
                        conn.poison();
                    }
                }
            }
        }
        this.spare = None;
        let headers: Vec<(String, String)> = if this.record_headers.is_empty() {
            Vec::new()
        } else {
            resp.headers()
                .iter()
                .filter(|(n, _)| header_matches(n.as_str(), &this.record_headers))
                .map(|(n, v)| (n.to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
                .collect()
        };
        this.status = status;
        this.retry_after =
            resp.headers().get(RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_owned);
        if !(200..300).contains(&status) {
            this.error_headers = resp.headers().clone();
        }
        if let Some(w) = written {
            this.emit(w, EventKind::RequestWritten);
        }
        this.emit(at, EventKind::Headers { status, connection, headers });
        let refused = if (200..300).contains(&status) {
            this.body.on_headers(resp.headers()).err()
        } else {
            None
        };
        if let Some(e) = refused {
            this.fail(at, e);
            return;
        }
        let body = resp.into_body();
        this.state =
            if (200..300).contains(&status) { State::Body(body) } else { State::ErrorBody(body) };
    }

    /// The request failed before a response: resend it once on a new connection when the
    /// server provably never received it, else fail (with the connection it went over).
    fn on_request_error(&mut self, e: &hyper_util::client::legacy::Error) {
        let this = self;
        let now = Instant::now();
        let mut err = connect_error(e);
        let conn = failed_conn(e);
        if let Some(c) = conn.as_ref() {
            c.note_closed(now);
        }
        // A pooled connection the server had closed (llama.cpp closes after every
        // streamed response while advertising keep-alive): the socket refused to
        // write on it, so the request never left. Send it once more, on a new
        // connection, as Go's net/http does. This future resolves at the response
        // headers, so any failure here came before a response byte.
        match (never_received(e, conn.as_ref()), this.spare.take()) {
            (true, Some(mut req)) => {
                this.retried_stale = true;
                this.capture = Some(capture_connection(&mut req));
                this.state = State::Waiting(this.client.request(req));
                return;
            }
            (false, _) if conn.as_ref().is_some_and(ConnMeta::served_before) => {
                if let EngineError::ConnectionClosed(m) = &mut err {
                    m.push_str(
                        "; the server closed its kept-alive connection after the request was \
                         written and may have received it, so it was not sent again",
                    );
                }
            }
            _ => {}
        }
        if let Some(c) = conn {
            let mut info = c.claim();
            info.retried_stale = this.retried_stale;
            this.emit(now, EventKind::Connection(info));
        }
        this.fail(now, err);
    }

    fn emit(&mut self, at: Instant, kind: EventKind) {
        self.pending.push_back(TimedEvent { at, frame: self.frame, kind });
    }

    fn fail(&mut self, at: Instant, e: EngineError) {
        self.emit(at, EventKind::Error(e));
        self.state = State::Done;
        self.finished = true;
    }

    /// The drain's limit ran out: give the connection up (the answer was complete).
    fn drain_expired(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(s) = self.sleep.as_mut() else { return false };
        if s.as_mut().poll(cx).is_ready() {
            self.state = State::Done;
            self.finished = true;
            return true;
        }
        false
    }

    /// The stamp of a body frame handed over at `now`: the arrival of the connection's last
    /// socket read (which completed the frame: hyper's HTTP/1.1 dispatcher reads only when
    /// this body needs more bytes and holds at most one decoded frame ahead), kept between
    /// the previous stamp and `now`; `now` when arrivals are not known.
    fn arrival_stamp(&mut self, now: Instant) -> Instant {
        let at = self
            .arrivals
            .as_ref()
            .and_then(ConnMeta::last_arrival)
            .map_or(now, |a| a.clamp(self.last_stamp.min(now), now));
        self.last_stamp = at;
        at
    }

    fn on_data(&mut self, at: Instant, data: &[u8]) {
        if self.frame == 0 {
            self.emit(at, EventKind::FirstByte);
        }
        if !self.streaming {
            if self.body_buf.len() + data.len() > MAX_FULL_BODY {
                self.fail(
                    at,
                    EngineError::Protocol(format!("response body over {MAX_FULL_BODY} bytes")),
                );
            } else {
                self.body_buf.extend_from_slice(data);
            }
            return;
        }
        let frame = self.frame;
        let Self { body, pending, .. } = self;
        let r = body.on_data(data, &mut |kind: EventKind| {
            pending.push_back(TimedEvent { at, frame, kind });
        });
        if let Err(e) = r {
            self.fail(at, e);
        } else if self.body.is_done() {
            // The answer is complete: `End` now, with the end marker's stamp. The rest of
            // the body is drained only if the consumer polls on (so the connection can be
            // reused), within the drain grace.
            let fr = self.body.finish_reason();
            self.pending.push_back(TimedEvent {
                at,
                frame,
                kind: EventKind::End { finish_reason: fr, streamed: true },
            });
            let State::Body(body) = std::mem::replace(&mut self.state, State::Done) else {
                unreachable!("on_data is only called while reading the body")
            };
            self.state = State::Draining(body);
            self.sleep = Some(Box::pin(tokio::time::sleep(DRAIN_GRACE)));
        }
    }

    fn on_body_end(&mut self, at: Instant) {
        let frame = self.frame;
        let Self { body, pending, body_buf, streaming, .. } = self;
        let mut push = |kind: EventKind| pending.push_back(TimedEvent { at, frame, kind });
        let r =
            if *streaming { body.on_end(&mut push) } else { body.decode_full(body_buf, &mut push) };
        match r {
            Err(e) => self.fail(at, e),
            Ok(()) if !self.streaming || self.body.is_complete() => {
                let fr = self.body.finish_reason();
                self.emit(at, EventKind::End { finish_reason: fr, streamed: self.streaming });
                self.state = State::Done;
                self.finished = true;
            }
            Ok(()) => self.fail(at, EngineError::Incomplete),
        }
    }
}

impl Stream for ResponseStream {
    type Item = TimedEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<TimedEvent>> {
        let this = self.get_mut();
        loop {
            if let Some(ev) = this.pending.pop_front() {
                return Poll::Ready(Some(ev));
            }
            if this.finished {
                return Poll::Ready(None);
            }
            match &mut this.state {
                State::Start(_) => {
                    let State::Start(req) = std::mem::replace(&mut this.state, State::Done) else {
                        unreachable!()
                    };
                    let mut req = req;
                    this.capture = Some(capture_connection(&mut req));
                    this.sent = Instant::now();
                    this.state = State::Waiting(this.client.request(req));
                }
                State::Failed(e) => {
                    let e = e.take().unwrap_or(EngineError::Cancelled);
                    this.fail(Instant::now(), e);
                }
                State::Waiting(fut) => match Pin::new(fut).poll(cx) {
                    Poll::Ready(Ok(resp)) => this.on_response(resp),
                    Poll::Ready(Err(e)) => this.on_request_error(&e),
                    Poll::Pending => return Poll::Pending,
                },
                State::Body(body) => match Pin::new(body).poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => {
                        let now = Instant::now(); // before any parsing
                        let at = this.arrival_stamp(now);
                        match frame.into_data() {
                            Ok(data) => {
                                this.on_data(at, &data);
                                this.frame += 1;
                            }
                            Err(frame) => {
                                if let Some(Err(e)) =
                                    frame.trailers_ref().map(|t| this.body.on_trailers(t))
                                {
                                    this.fail(at, e);
                                }
                            }
                        }
                    }
                    Poll::Ready(Some(Err(e))) => {
                        let err = body_error(&e, "while streaming the body");
                        this.fail(Instant::now(), err);
                    }
                    Poll::Ready(None) => this.on_body_end(Instant::now()),
                    Poll::Pending => return Poll::Pending,
                },
                State::ErrorBody(body) => {
                    let done = match Pin::new(body).poll_frame(cx) {
                        Poll::Ready(Some(Ok(frame))) => {
                            if let Ok(d) = frame.into_data() {
                                let room = MAX_ERROR_BODY.saturating_sub(this.body_buf.len());
                                this.body_buf.extend_from_slice(&d[..d.len().min(room)]);
                            }
                            this.body_buf.len() >= MAX_ERROR_BODY
                        }
                        Poll::Ready(Some(Err(_)) | None) => true,
                        Poll::Pending => return Poll::Pending,
                    };
                    if done {
                        let answer = ErrorAnswer {
                            status: this.status,
                            headers: &this.error_headers,
                            body: &this.body_buf,
                            retry_after: this.retry_after.take(),
                        };
                        let e = match &this.status_error {
                            Some(f) => f(&answer),
                            None => answer.http_status(),
                        };
                        this.fail(Instant::now(), e);
                    }
                }
                State::Draining(body) => {
                    let done = match Pin::new(body).poll_frame(cx) {
                        Poll::Ready(Some(Ok(_))) => false,
                        Poll::Ready(Some(Err(_)) | None) => true,
                        Poll::Pending => {
                            if this.drain_expired(cx) {
                                continue;
                            }
                            return Poll::Pending;
                        }
                    };
                    if done {
                        this.state = State::Done;
                        this.finished = true;
                    }
                }
                State::Done => {
                    this.finished = true;
                }
            }
        }
    }
}
