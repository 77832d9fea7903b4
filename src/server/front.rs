//! The HTTP/1 front of every connection: simple requests (HTTP/1.1, a body
//! of stated length if any) are answered here; at the first other request
//! (chunked, upgrades, HTTP/1.0 or 2, past a limit), hyper takes the
//! connection over with the bytes read so far.
//!
//! Why: a watching client parks a long-poll on the daemon for minutes, and a
//! fleet parks tens of thousands. hyper holds two 8 KiB buffers per
//! connection for its whole life (31 KiB of RSS per parked poll, measured),
//! where this front holds no buffer between requests and only the router's
//! future while one waits: a parked long-poll costs what Go's or nginx's
//! idle connections cost. Routing, handlers and metrics are the router's:
//! the front only reads heads and writes answers.

mod head;
mod respond;
mod rewind;

use std::io::ErrorKind;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::Watcher;
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tower::ServiceExt;

use head::Parsed;
use rewind::Rewind;

use super::Peer;
use crate::tls::Tls;

/// Bytes read at a time while a head comes in.
const READ_CHUNK: usize = 1024;

/// What every connection of one listener shares.
pub struct Front {
    app: Router,
    hyper: auto::Builder<TokioExecutor>,
    header_read_timeout: Duration,
    max_header_bytes: usize,
    body_read_timeout: Duration,
    max_body_bytes: u64,
}

impl Front {
    /// A front for `app`, handing other requests to `hyper`, with the
    /// server's `limits` on heads and bodies.
    pub fn new(app: Router, hyper: auto::Builder<TokioExecutor>, limits: &super::Limits) -> Self {
        Self {
            app,
            hyper,
            header_read_timeout: limits.header_read_timeout,
            max_header_bytes: limits.max_header_bytes.max(super::MIN_HEADER_BYTES),
            body_read_timeout: limits.body_read_timeout,
            max_body_bytes: u64::try_from(limits.max_body_bytes).unwrap_or(u64::MAX),
        }
    }
}

/// What to do after reading from a connection.
enum Next {
    Serve {
        request: Box<Request<Body>>,
        close: bool,
    },
    HandOff,
    Close,
}

/// Serves one connection until it closes, `closing` turns true while it is
/// idle, or it is handed to hyper. `watcher` counts it in the server's
/// graceful shutdown for as long as it lives.
pub async fn connection(
    front: Arc<Front>,
    mut stream: TcpStream,
    peer: Peer,
    watcher: Watcher,
    mut closing: watch::Receiver<bool>,
) {
    // Bytes read and not yet served: empty, with nothing allocated, between requests.
    let mut unread = Vec::new();
    loop {
        match read_request(&front, &mut stream, &mut unread, &mut closing).await {
            Next::Serve { mut request, close } => {
                request.extensions_mut().insert(peer);
                let Some(response) = call(&front, request, &mut stream, &mut unread).await else {
                    return;
                };
                let close = close || *closing.borrow();
                if !matches!(respond::write(&mut stream, response, close).await, Ok(true)) {
                    return;
                }
            }
            // Boxed: hyper's connection is large, and parked connections never reach it.
            Next::HandOff => return Box::pin(hand_off(&front, stream, peer, unread, watcher)).await,
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
/// body late past the body read timeout goes to hyper, whose own timer then
/// answers 408.
async fn read_request(
    front: &Front,
    stream: &mut TcpStream,
    unread: &mut Vec<u8>,
    closing: &mut watch::Receiver<bool>,
) -> Next {
    let mut deadline = Instant::now() + front.header_read_timeout;
    let mut pending: Option<Pending> = None;
    loop {
        if pending.is_none() {
            match read_head(front, unread) {
                Ok(Some(head)) => {
                    // The buffer grows as the body arrives, not to its stated
                    // length: a client that states a large body and sends
                    // nothing holds no more than it sent.
                    deadline = Instant::now() + front.body_read_timeout;
                    pending = Some(head);
                }
                Ok(None) => {}
                Err(next) => return next,
            }
        }
        if let Some(head) = pending.take_if(|head| unread.len() >= head.whole) {
            let mut request = head.request;
            *request.body_mut() = Body::from(Bytes::copy_from_slice(&unread[head.head..head.whole]));
            consume(unread, head.whole);
            return Next::Serve {
                request,
                close: head.close,
            };
        }
        let idle = unread.is_empty();
        tokio::select! {
            ready = stream.readable() => if ready.is_err() { return Next::Close },
            () = tokio::time::sleep_until(deadline) => {
                return if pending.is_some() { Next::HandOff } else { Next::Close };
            }
            () = crate::shutdown::shutting_down(closing), if idle => return Next::Close,
        }
        if !read_some(stream, unread) {
            return Next::Close;
        }
    }
}

/// The head at the start of `unread`, once whole; `Err` when hyper is to
/// answer (past a limit, or not a simple request).
fn read_head(front: &Front, unread: &[u8]) -> Result<Option<Pending>, Next> {
    match head::parse(unread) {
        // hyper answers a head past the limit with 431, a body past it with 413.
        Parsed::Simple { len, body, .. } if len > front.max_header_bytes || body > front.max_body_bytes => {
            Err(Next::HandOff)
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
        Parsed::Other => Err(Next::HandOff),
        Parsed::Partial if unread.len() > front.max_header_bytes => Err(Next::HandOff),
        Parsed::Partial => Ok(None),
    }
}

/// The router's answer to `request`. Meanwhile the connection is read, so a
/// client that hangs up ends the wait (`None`); bytes it sends are kept.
async fn call(
    front: &Front,
    request: Box<Request<Body>>,
    stream: &mut TcpStream,
    unread: &mut Vec<u8>,
) -> Option<Response> {
    let answer = front.app.clone().oneshot(*request);
    tokio::pin!(answer);
    loop {
        tokio::select! {
            answer = &mut answer => return Some(answer.unwrap_or_else(|never| match never {})),
            ready = stream.readable() => {
                ready.ok()?;
                if !read_some(stream, unread) || unread.len() > front.max_header_bytes {
                    return None;
                }
            }
        }
    }
}

/// Reads what is there into `unread`; false at the end of the stream or on an error.
fn read_some(stream: &TcpStream, unread: &mut Vec<u8>) -> bool {
    unread.reserve(READ_CHUNK);
    match stream.try_read_buf(unread) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => e.kind() == ErrorKind::WouldBlock,
    }
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

/// hyper serves the rest of the connection, starting with the bytes read.
async fn hand_off(front: &Front, stream: TcpStream, peer: Peer, unread: Vec<u8>, watcher: Watcher) {
    serve_with_hyper(front, Rewind::new(stream, Bytes::from(unread)), peer, watcher).await;
}

/// Serves one TLS connection: hyper, once the handshake is done and the
/// first bytes of a request are in, both within the header read timeout
/// (hyper times a head only from its first byte, so a connection silent
/// after its handshake would be held for good). rustls holds its own
/// buffers for the life of a connection, so the front's saving (no buffer
/// between requests) does not apply to TLS connections.
pub async fn tls_connection(
    front: Arc<Front>,
    stream: TcpStream,
    peer: Peer,
    tls: Arc<Tls>,
    watcher: Watcher,
) {
    let deadline = Instant::now() + front.header_read_timeout;
    let handshake = tls.acceptor().accept(stream);
    let mut stream = match tokio::time::timeout_at(deadline, handshake).await {
        Ok(Ok(stream)) => stream,
        // A connection closed before its hello: a TCP probe or a load
        // balancer's check, not a failed handshake.
        Ok(Err(error)) if error.kind() == ErrorKind::UnexpectedEof => return,
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
    let mut first = vec![0; READ_CHUNK];
    match tokio::time::timeout_at(deadline, stream.read(&mut first)).await {
        Ok(Ok(read)) if read > 0 => {
            first.truncate(read);
            let stream = Rewind::new(stream, Bytes::from(first));
            Box::pin(serve_with_hyper(&front, stream, peer, watcher)).await;
        }
        _ => {}
    }
}

async fn serve_with_hyper<S>(front: &Front, stream: S, peer: Peer, watcher: Watcher)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let app = front
        .app
        .clone()
        .map_request(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(peer);
            request
        });
    let service = TowerToHyperService::new(app);
    let connection = front
        .hyper
        .serve_connection(TokioIo::new(stream), service)
        .into_owned();
    let _ = watcher.watch(connection).await;
}
