//! What every route of the simulator and the provider fakes share: the response body,
//! the accept loop with each connection's receive stamps, a request's record and arrival,
//! whole and refused answers.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use quetta_net::{StampedTcp, Stamps};

use crate::dialect::{Dialect, Refusal};
use crate::stream::SimStream;
use crate::{Shared, SimRecord};

pub(crate) type Body = Either<Either<Full<Bytes>, crate::grpc::GrpcWhole>, SimStream>;

/// Serve HTTP/1.1 and HTTP/2 connections with `handle` until `shutdown` fires (shared by the
/// simulator and the provider fakes).
pub(crate) async fn accept_loop<F, Fut, B>(
    listener: tokio::net::TcpListener,
    mut shutdown: tokio::sync::oneshot::Receiver<()>,
    handle: F,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<B>, std::io::Error>> + Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = &mut shutdown => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let _ = stream.set_nodelay(true);
        let builder = builder.clone();
        let handle = handle.clone();
        // The socket records when each read's bytes arrived (the kernel's stamp on Linux);
        // every request on the connection can ask (see `request_arrival`).
        let stamps = Stamps::new();
        let io = StampedTcp::new(stream, stamps.clone());
        tokio::spawn(async move {
            let service = service_fn(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(ConnStamps(stamps.clone()));
                handle(req)
            });
            let _ = builder.serve_connection(TokioIo::new(io), service).await;
        });
    }
}

/// The receive record of the connection a request came on.
#[derive(Clone)]
pub(crate) struct ConnStamps(Arc<Stamps>);

/// A request's HTTP version and its connection's receive record (for [`request_arrival`]).
pub(crate) fn conn_of(req: &Request<Incoming>) -> (http::Version, Option<ConnStamps>) {
    (req.version(), req.extensions().get::<ConnStamps>().cloned())
}

/// A request's record as it starts: its order, the client's ids, the path.
pub(crate) fn new_record(seq: u64, req: &Request<Incoming>, handled: Instant) -> SimRecord {
    SimRecord {
        seq,
        request_id: header_str(req, "x-quetta-request-id").and_then(|s| s.parse().ok()),
        session_id: header_str(req, "x-session-id"),
        endpoint: req.uri().path().to_owned(),
        stream: false,
        status: 200,
        prompt_tokens: 0,
        cached_tokens: 0,
        completion_tokens: 0,
        arrival: handled,
        headers_sent: handled,
        chunks: Vec::new(),
        chunk_tokens: Vec::new(),
        end: handled,
        text: String::new(),
        error: None,
    }
}

/// When a request's bytes arrived: over HTTP/1.1 (one request at a time on a connection),
/// the arrival of the connection's last read so far, that is of the request's last byte once
/// its body has been read; `fallback` (when the handler started) over HTTP/2 or without a
/// record. Never later than now.
pub(crate) fn request_arrival(
    version: http::Version,
    conn: Option<&ConnStamps>,
    fallback: Instant,
) -> Instant {
    let kernel = conn.filter(|_| version != http::Version::HTTP_2).and_then(|c| c.0.last_arrival());
    kernel.map_or(fallback, |a| a.min(Instant::now()))
}

pub(crate) fn full(
    status: StatusCode,
    content_type: &str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut r = Response::new(Either::Left(Either::Left(Full::new(body.into()))));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(http::header::CONTENT_TYPE, content_type.parse().expect("static header"));
    r
}

pub(crate) fn header_str(req: &Request<Incoming>, name: &str) -> Option<String> {
    req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// A request the simulator cannot take: recorded with its reason, answered in the
/// protocol's own error shape.
pub(crate) fn refuse(sh: &Shared, mut rec: SimRecord, d: Dialect, r: &Refusal) -> Response<Body> {
    rec.status = r.status.as_u16();
    rec.error = Some(r.message.clone());
    rec.end = Instant::now();
    let stream = rec.stream;
    sh.finish(rec);
    if d == Dialect::Grpc {
        return grpc_answer(crate::grpc::refusal_answer(r, stream));
    }
    full(r.status, "application/json", d.error_body(r))
}

/// A gRPC answer: HTTP 200, `application/grpc`, the status in the trailers (or, for a call
/// with no message, in the headers).
pub(crate) fn grpc_answer(mut w: crate::grpc::GrpcWhole) -> Response<Body> {
    let headers = w.headers_only.take();
    let mut r = Response::new(Either::Left(Either::Right(w)));
    r.headers_mut().insert(http::header::CONTENT_TYPE, "application/grpc".parse().expect("static"));
    if let Some(h) = headers {
        r.headers_mut().extend(h);
    }
    r
}
