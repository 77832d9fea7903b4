//! The HTTP/1 front of every connection, plain or TLS: simple requests
//! (HTTP/1.1, a body of stated length if any) are answered here; at the
//! first other request (chunked, upgrades, HTTP/1.0, past a limit), hyper's
//! HTTP/1 server takes the connection over with the bytes read so far, and
//! at an HTTP/2 preface (or TLS that chose `h2`), hyper's HTTP/2 server.
//!
//! Why: a watching client parks a long-poll on the daemon for minutes, and a
//! fleet parks tens of thousands. hyper holds two 8 KiB buffers per
//! connection for its whole life (31 KiB of RSS per parked poll, measured),
//! where this front holds no buffer between requests and only the router's
//! future while one waits: a parked long-poll costs what Go's or nginx's
//! idle connections cost. Routing, handlers and metrics are the router's:
//! the front only reads heads and writes answers.
//!
//! Every wait has a clock: a head within `--header-read-timeout` (idle
//! keep-alive included), a body within `--body-read-timeout`, an answer
//! taken by the client within `--write-timeout`; connections hyper serves
//! get the same (see [`clock`]).

mod clock;
mod head;
mod respond;
mod rewind;

use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::Watcher;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tower::ServiceExt;

use clock::{Clocked, InFlight};
use head::Parsed;
use rewind::Rewind;

use super::error::ApiError;
use super::{Limits, Peer};
use crate::tls::Tls;

/// Bytes read at a time, into a buffer on the stack: a connection's heap
/// holds only what it has read and not yet served.
const READ_CHUNK: usize = 4096;

/// How long an answer may still take once the client has half-closed (or
/// gone): a ready answer is sent, a hung-up long-poll is let go.
const HALF_CLOSED_GRACE: Duration = Duration::from_secs(1);

/// HTTP/2: a PING after this long without a frame from the client...
const HTTP2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// ...unanswered for this long closes the connection (hyper's default).
const HTTP2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// A stream the front can serve: a TCP connection or TLS over one.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for S {}

/// What every connection of one listener shares.
pub struct Front {
    app: Router,
    http1: http1::Builder,
    http2: http2::Builder<TokioExecutor>,
    header_read_timeout: Duration,
    max_header_bytes: usize,
    body_read_timeout: Duration,
    max_body_bytes: u64,
    write_timeout: Duration,
}

impl Front {
    /// A front for `app` with the server's `limits` on heads, bodies and writes.
    pub fn new(app: Router, limits: &Limits) -> Self {
        let max_header_bytes = limits.max_header_bytes.max(super::MIN_HEADER_BYTES);
        let mut http1 = http1::Builder::new();
        http1
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            // A client may half-close once its request is sent, and still wait for the answer.
            .half_close(true)
            // hyper answers 431 when a request head outgrows its buffer.
            .max_buf_size(max_header_bytes);
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .keep_alive_interval(HTTP2_KEEP_ALIVE_INTERVAL)
            .keep_alive_timeout(HTTP2_KEEP_ALIVE_TIMEOUT)
            .max_header_list_size(u32::try_from(max_header_bytes).unwrap_or(u32::MAX));
        Self {
            app,
            http1,
            http2,
            header_read_timeout: limits.header_read_timeout,
            max_header_bytes,
            body_read_timeout: limits.body_read_timeout,
            max_body_bytes: u64::try_from(limits.max_body_bytes).unwrap_or(u64::MAX),
            write_timeout: limits.write_timeout,
        }
    }
}

/// `app`'s answer to `request`, from whichever path read it: a request
/// whose `Host` is wrong gets 400 before any route sees it.
fn route(app: &Router, request: Request<Body>) -> impl Future<Output = Response> + Send + 'static {
    let problem = super::host::problem(request.version(), request.headers());
    let app = app.clone();
    async move {
        match problem {
            Some(problem) => ApiError::new(axum::http::StatusCode::BAD_REQUEST, problem)
                .closing()
                .into_response(),
            None => app.oneshot(request).await.unwrap_or_else(|never| match never {}),
        }
    }
}

/// What to do after reading from a connection.
enum Next {
    Serve {
        request: Box<Request<Body>>,
        close: bool,
    },
    /// Answer, then close.
    Refuse(Box<Response>),
    Http1,
    Http2,
    Close,
}

/// Serves one connection until it closes, `closing` turns true while it is
/// idle, or it is handed to hyper. `watcher` counts it in the server's
/// graceful shutdown for as long as it lives.
pub async fn connection<S: Io>(
    front: Arc<Front>,
    mut stream: S,
    peer: Peer,
    watcher: Watcher,
    closing: watch::Receiver<bool>,
) {
    // Waits for the server to close, registered once for the connection's
    // life rather than once per request.
    let mut watched = closing.clone();
    let shutdown = std::pin::pin!(async move { crate::shutdown::shutting_down(&mut watched).await });
    let mut shutdown = futures_util::FutureExt::fuse(shutdown);
    // Bytes read and not yet served: empty, with nothing allocated, between requests.
    let mut unread = Vec::new();
    loop {
        match read_request(&front, &mut stream, &mut unread, &mut shutdown).await {
            Next::Serve { mut request, close } => {
                request.extensions_mut().insert(peer);
                let Some(response) = answer(&front, *request, &mut stream, &mut unread).await else {
                    return;
                };
                let close = close || *closing.borrow();
                if !matches!(
                    respond::write(&mut stream, response, close, front.write_timeout).await,
                    Ok(true)
                ) {
                    return;
                }
            }
            Next::Refuse(response) => {
                let _ = respond::write(&mut stream, *response, true, front.write_timeout).await;
                return;
            }
            // Boxed: hyper's connections are large, and parked connections never reach them.
            Next::Http1 => {
                return Box::pin(serve_http1(
                    &front,
                    Rewind::new(stream, unread.into()),
                    peer,
                    watcher,
                ))
                .await
            }
            Next::Http2 => {
                return Box::pin(serve_http2(
                    &front,
                    Rewind::new(stream, unread.into()),
                    peer,
                    watcher,
                ))
                .await
            }
            Next::Close => return,
        }
    }
}

/// A head read, its body still coming.
struct Pending {
    request: Box<Request<Body>>,
    close: bool,
    head: usize,
    whole: usize,
}

/// Reads until `unread` starts with a whole request. Gives up at the end of
/// the stream, at the header read timeout, or when closing while idle; a
/// body late past the body read timeout is answered 408.
async fn read_request<S: Io>(
    front: &Front,
    stream: &mut S,
    unread: &mut Vec<u8>,
    shutdown: &mut (impl futures_util::future::FusedFuture<Output = ()> + Unpin),
) -> Next {
    let mut deadline = Instant::now() + front.header_read_timeout;
    let mut pending: Option<Pending> = None;
    loop {
        if pending.is_none() && !unread.is_empty() {
            match read_head(front, unread) {
                Ok(Some(head)) => {
                    // The buffer grows as the body arrives, not to its stated
                    // length: a client that states a large body and sends
                    // nothing holds no more than it sent.
                    if unread.len() < head.whole {
                        deadline = Instant::now() + front.body_read_timeout;
                    }
                    pending = Some(head);
                }
                Ok(None) => {}
                Err(next) => return next,
            }
        }
        if let Some(head) = pending.take_if(|head| unread.len() >= head.whole) {
            let mut request = head.request;
            if head.whole > head.head {
                *request.body_mut() = Body::from(Bytes::copy_from_slice(&unread[head.head..head.whole]));
            }
            consume(unread, head.whole);
            return Next::Serve {
                request,
                close: head.close,
            };
        }
        let idle = unread.is_empty();
        tokio::select! {
            biased;
            more = read_more(stream, unread) => if !more { return Next::Close },
            () = tokio::time::sleep_until(deadline) => {
                return match pending {
                    Some(_) => Next::Refuse(Box::new(ApiError::body_timeout(front.body_read_timeout).into_response())),
                    None => Next::Close,
                };
            }
            () = &mut *shutdown, if idle && !shutdown.is_terminated() => return Next::Close,
        }
    }
}

/// The head at the start of `unread`, once whole; `Err` when hyper is to
/// answer (past a limit, or not a simple request).
fn read_head(front: &Front, unread: &[u8]) -> Result<Option<Pending>, Next> {
    match head::parse(unread) {
        // hyper answers a head past the limit with 431, a body past it with 413.
        Parsed::Simple { len, body, .. } if len > front.max_header_bytes || body > front.max_body_bytes => {
            Err(Next::Http1)
        }
        Parsed::Simple {
            request,
            close,
            len,
            body,
        } => Ok(Some(Pending {
            request,
            close,
            head: len,
            whole: len + usize::try_from(body).expect("bounded by max_body_bytes"),
        })),
        Parsed::Http2 => Err(Next::Http2),
        Parsed::Other => Err(Next::Http1),
        Parsed::Partial if unread.len() > front.max_header_bytes => Err(Next::Http1),
        Parsed::Partial => Ok(None),
    }
}

/// The answer to `request`. Meanwhile the connection is read, so that a
/// client that hangs up ends the wait (`None`), but only until the first
/// bytes of a next request: those are kept, and the rest of it waits in
/// the socket until this answer is written.
async fn answer<S: Io>(
    front: &Front,
    request: Request<Body>,
    stream: &mut S,
    unread: &mut Vec<u8>,
) -> Option<Response> {
    let answer = route(&front.app, request);
    tokio::pin!(answer);
    let mut reading = unread.is_empty();
    loop {
        tokio::select! {
            biased;
            response = &mut answer => return Some(response),
            more = read_more(stream, unread), if reading => {
                if !more {
                    return clock::within(HALF_CLOSED_GRACE, answer).await;
                }
                reading = false;
            }
        }
    }
}

/// Waits for bytes and adds them to `unread`; false at the end of the
/// stream or on an error. The bytes pass through the stack, so a
/// connection waiting here holds no buffer.
async fn read_more<S: AsyncRead + Unpin>(stream: &mut S, unread: &mut Vec<u8>) -> bool {
    poll_fn(|cx| {
        let mut chunk = [MaybeUninit::<u8>::uninit(); READ_CHUNK];
        let mut chunk = ReadBuf::uninit(&mut chunk);
        match Pin::new(&mut *stream).poll_read(cx, &mut chunk) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(())) if !chunk.filled().is_empty() => {
                unread.extend_from_slice(chunk.filled());
                Poll::Ready(true)
            }
            Poll::Ready(_) => Poll::Ready(false),
        }
    })
    .await
}

/// Drops the first `len` bytes, and the allocation when nothing is left.
fn consume(unread: &mut Vec<u8>, len: usize) {
    if len >= unread.len() {
        *unread = Vec::new();
    } else {
        unread.drain(..len);
        unread.shrink_to_fit();
    }
}

/// Serves one TLS connection: the handshake within the header read timeout,
/// then the front (or hyper's HTTP/2 server, if the client chose `h2`).
pub async fn tls_connection(
    front: Arc<Front>,
    stream: TcpStream,
    peer: Peer,
    tls: Arc<Tls>,
    watcher: Watcher,
    closing: watch::Receiver<bool>,
) {
    let handshake = tls.acceptor().accept(stream);
    let stream = match tokio::time::timeout(front.header_read_timeout, handshake).await {
        Ok(Ok(stream)) => stream,
        // A connection closed before its hello: a TCP probe or a load
        // balancer's check, not a failed handshake.
        Ok(Err(error)) if error.kind() == std::io::ErrorKind::UnexpectedEof => return,
        Ok(Err(error)) => {
            tls.handshake_failed();
            tracing::debug!(%error, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tls.handshake_failed();
            tracing::debug!("TLS handshake timed out");
            return;
        }
    };
    if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
        Box::pin(serve_http2(&front, stream, peer, watcher)).await;
    } else {
        connection(front, stream, peer, watcher, closing).await;
    }
}

/// hyper's HTTP/1 server serves the rest of the connection, each write
/// within the write timeout.
async fn serve_http1<S: Io>(front: &Front, stream: S, peer: Peer, watcher: Watcher) {
    let stream = Clocked::new(stream, front.write_timeout);
    let service = hyper_service(front.app.clone(), peer, InFlight::default());
    let connection = front.http1.serve_connection(TokioIo::new(stream), service);
    let _ = watcher.watch(connection).await;
}

/// hyper's HTTP/2 server serves the rest of the connection, each write
/// within the write timeout; with no request in flight, a client silent
/// for the header read timeout is let go (hyper's HTTP/2 server waits for a
/// preface or a frame with no clock of its own).
async fn serve_http2<S: Io>(front: &Front, stream: S, peer: Peer, watcher: Watcher) {
    let in_flight = InFlight::default();
    let stream =
        Clocked::new(stream, front.write_timeout).idle_after(front.header_read_timeout, in_flight.clone());
    let service = hyper_service(front.app.clone(), peer, in_flight);
    let connection = front.http2.serve_connection(TokioIo::new(stream), service);
    let _ = watcher.watch(connection).await;
}

/// The router as hyper calls it, each request counted in `in_flight`
/// until answered.
fn hyper_service(
    app: Router,
    peer: Peer,
    in_flight: InFlight,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response,
    Error = Infallible,
    Future = impl Future<Output = Result<Response, Infallible>> + Send + 'static,
> + Clone
       + Send
       + 'static {
    service_fn(move |mut request: Request<Incoming>| {
        let entered = in_flight.enter();
        request.extensions_mut().insert(peer);
        let answer = route(&app, request.map(Body::new));
        async move {
            let response = answer.await;
            drop(entered);
            Ok(response)
        }
    })
}
