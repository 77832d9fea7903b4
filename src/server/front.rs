//! The HTTP/1 front of every connection: simple requests (a `GET` with no
//! body) are answered here; at the first other request, hyper takes the
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
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::Watcher;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tower::ServiceExt;

use head::Parsed;
use rewind::Rewind;

/// Bytes read at a time while a head comes in.
const READ_CHUNK: usize = 1024;

/// What every connection of one listener shares.
pub struct Front {
    app: Router,
    hyper: auto::Builder<TokioExecutor>,
    header_read_timeout: Duration,
    max_header_bytes: usize,
}

impl Front {
    /// A front for `app`, handing other requests to `hyper`; a head must
    /// arrive within `header_read_timeout` and fit in `max_header_bytes`
    /// (past it, hyper answers 431).
    pub fn new(
        app: Router,
        hyper: auto::Builder<TokioExecutor>,
        header_read_timeout: Duration,
        max_header_bytes: usize,
    ) -> Self {
        Self {
            app,
            hyper,
            header_read_timeout,
            max_header_bytes,
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
    watcher: Watcher,
    mut closing: watch::Receiver<bool>,
) {
    // Bytes read and not yet served: empty, with nothing allocated, between requests.
    let mut unread = Vec::new();
    loop {
        match read_head(&front, &mut stream, &mut unread, &mut closing).await {
            Next::Serve { request, close } => {
                let Some(response) = call(&front, request, &mut stream, &mut unread).await else {
                    return;
                };
                let close = close || *closing.borrow();
                if !matches!(respond::write(&mut stream, response, close).await, Ok(true)) {
                    return;
                }
            }
            // Boxed: hyper's connection is large, and parked connections never reach it.
            Next::HandOff => return Box::pin(hand_off(&front, stream, unread, watcher)).await,
            Next::Close => return,
        }
    }
}

/// Reads until `unread` starts with a whole head; gives up at the header
/// read timeout, at the end of the stream, or when closing while idle.
async fn read_head(
    front: &Front,
    stream: &mut TcpStream,
    unread: &mut Vec<u8>,
    closing: &mut watch::Receiver<bool>,
) -> Next {
    let deadline = Instant::now() + front.header_read_timeout;
    loop {
        match head::parse(unread) {
            // hyper answers a head past the limit with 431.
            Parsed::Simple { len, .. } if len > front.max_header_bytes => return Next::HandOff,
            Parsed::Simple { request, close, len } => {
                consume(unread, len);
                return Next::Serve { request, close };
            }
            Parsed::Other => return Next::HandOff,
            Parsed::Partial if unread.len() > front.max_header_bytes => return Next::HandOff,
            Parsed::Partial => {}
        }
        let idle = unread.is_empty();
        tokio::select! {
            ready = stream.readable() => if ready.is_err() { return Next::Close },
            () = tokio::time::sleep_until(deadline) => return Next::Close,
            () = crate::shutdown::shutting_down(closing), if idle => return Next::Close,
        }
        if !read_some(stream, unread) {
            return Next::Close;
        }
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
async fn hand_off(front: &Front, stream: TcpStream, unread: Vec<u8>, watcher: Watcher) {
    let io = TokioIo::new(Rewind::new(stream, Bytes::from(unread)));
    let service = TowerToHyperService::new(front.app.clone());
    let connection = front.hyper.serve_connection(io, service).into_owned();
    let _ = watcher.watch(connection).await;
}
