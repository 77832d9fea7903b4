//! A request head, parsed from the bytes read so far, and whether the front
//! answers it itself.

use std::mem::MaybeUninit;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri, Version};
use bytes::Bytes;

/// More headers than this and hyper gets the request (it allows 100).
const MAX_HEADERS: usize = 64;

/// Request headers that mean a chunked body, an upgrade or an interim
/// answer: hyper handles those requests.
const NOT_SIMPLE: [&str; 3] = ["transfer-encoding", "upgrade", "expect"];

/// What a client that speaks HTTP/2 with prior knowledge sends first (RFC 9113 §3.4).
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What the bytes read so far hold.
#[derive(Debug)]
pub enum Parsed {
    /// Not a whole head (or HTTP/2 preface) yet.
    Partial,
    /// The HTTP/2 preface, whole: hyper's HTTP/2 server takes the connection.
    Http2,
    /// A simple request, which the front answers: HTTP/1.1, not `HEAD` or
    /// `CONNECT`, its body (if any) of a stated `Content-Length`. Its head is
    /// `len` bytes long and its body `body` bytes; `close` when the client
    /// asked to close after it.
    Simple {
        request: Box<Request<Body>>,
        close: bool,
        len: usize,
        body: u64,
    },
    /// Anything else, malformed requests included: hyper reads it again and answers.
    Other,
}

/// Parses the head at the start of `bytes`.
pub fn parse(bytes: &[u8]) -> Parsed {
    // The first byte rules the preface out for nearly every request, cheaply.
    if bytes.first().is_none_or(|&first| first == b'P') {
        let start = bytes.len().min(HTTP2_PREFACE.len());
        if bytes[..start] == HTTP2_PREFACE[..start] {
            return if start == HTTP2_PREFACE.len() {
                Parsed::Http2
            } else {
                Parsed::Partial
            };
        }
    }
    // Left uninitialised: httparse fills only the slots a head uses.
    let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut []);
    match head.parse_with_uninit_headers(bytes, &mut headers) {
        Ok(httparse::Status::Partial) => Parsed::Partial,
        Ok(httparse::Status::Complete(len)) => match simple(&head, &Shared::new(&bytes[..len])) {
            Some((request, close, body)) => Parsed::Simple {
                request: Box::new(request),
                close,
                len,
                body,
            },
            None => Parsed::Other,
        },
        Err(_) => Parsed::Other,
    }
}

/// A head's bytes, copied once: its target and header values are slices of
/// this copy, not copies of their own.
struct Shared<'a> {
    read: &'a [u8],
    copy: Bytes,
}

impl<'a> Shared<'a> {
    fn new(read: &'a [u8]) -> Self {
        Self {
            read,
            copy: Bytes::copy_from_slice(read),
        }
    }

    /// `part` (a slice of the bytes read) as a slice of the copy.
    fn slice(&self, part: &[u8]) -> Bytes {
        let start = part.as_ptr() as usize - self.read.as_ptr() as usize;
        self.copy.slice(start..start + part.len())
    }
}

/// The request (its body still to come), if it is simple; whether it asks
/// to close afterwards; its body's length.
fn simple(head: &httparse::Request<'_, '_>, bytes: &Shared<'_>) -> Option<(Request<Body>, bool, u64)> {
    let method = Method::from_bytes(head.method?.as_bytes()).ok()?;
    if method == Method::HEAD || method == Method::CONNECT || head.version != Some(1) {
        return None;
    }
    let path = head.path.filter(|path| path.starts_with('/'))?;
    let uri = Uri::from_maybe_shared(bytes.slice(path.as_bytes())).ok()?;
    let mut headers = HeaderMap::with_capacity(head.headers.len());
    let mut close = false;
    for header in head.headers.iter() {
        if NOT_SIMPLE
            .iter()
            .any(|name| header.name.eq_ignore_ascii_case(name))
        {
            return None;
        }
        let name = HeaderName::from_bytes(header.name.as_bytes()).ok()?;
        let value = HeaderValue::from_maybe_shared(bytes.slice(header.value)).ok()?;
        if name == axum::http::header::CONNECTION {
            close |= asks_to_close(&value)?;
        }
        headers.append(name, value);
    }
    let body = content_length(&headers)?;
    let mut request = Request::new(Body::empty());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = headers;
    Some((request, close, body))
}

/// The body's length: 0 without `Content-Length`; `None` (hyper answers)
/// when it is repeated or not a number.
fn content_length(headers: &HeaderMap) -> Option<u64> {
    let mut values = headers.get_all(axum::http::header::CONTENT_LENGTH).iter();
    let Some(value) = values.next() else {
        return Some(0);
    };
    if values.next().is_some() {
        return None;
    }
    let digits = value.to_str().ok()?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether a `Connection` header says `close`; `None` when it asks for an upgrade.
fn asks_to_close(value: &HeaderValue) -> Option<bool> {
    let mut close = false;
    for token in value.to_str().ok()?.split(',').map(str::trim) {
        if token.eq_ignore_ascii_case("upgrade") {
            return None;
        }
        close |= token.eq_ignore_ascii_case("close");
    }
    Some(close)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn simple_request(text: &str) -> (Request<Body>, bool, usize, u64) {
        match parse(text.as_bytes()) {
            Parsed::Simple {
                request,
                close,
                len,
                body,
            } => (*request, close, len, body),
            other => panic!("{text:?} parsed as {other:?}"),
        }
    }

    #[test]
    fn a_get_over_http_1_1_is_simple() {
        let text = "GET /v1/policies/a?wait=60s HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"e\"\r\n\r\nGET /next";
        let (request, close, len, body) = simple_request(text);
        assert_eq!(request.uri().path(), "/v1/policies/a");
        assert_eq!(request.uri().query(), Some("wait=60s"));
        assert_eq!(request.headers()["if-none-match"], "\"e\"");
        assert!(!close);
        assert_eq!(body, 0);
        assert_eq!(&text[len..], "GET /next");
    }

    #[test]
    fn a_body_of_stated_length_is_simple() {
        let text = "POST /v1/reports HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
        let (request, _, len, body) = simple_request(text);
        assert_eq!(request.method(), Method::POST);
        assert_eq!((len, body), (text.len() - 2, 2));
    }

    #[test]
    fn connection_close_is_noticed() {
        let (_, close, _, _) = simple_request("GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n");
        assert!(close);
    }

    #[test]
    fn an_unfinished_head_is_partial() {
        assert!(matches!(parse(b""), Parsed::Partial));
        assert!(matches!(
            parse(b"GET /v1/policies HTTP/1.1\r\nHost: x\r\n"),
            Parsed::Partial
        ));
    }

    #[test]
    fn everything_else_goes_to_hyper() {
        for text in [
            "HEAD /v1/policies HTTP/1.1\r\n\r\n",
            "CONNECT x:443 HTTP/1.1\r\n\r\n",
            "GET /v1/policies HTTP/1.0\r\n\r\n",
            "POST /v1/reports HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
            "POST /v1/reports HTTP/1.1\r\nContent-Length: +2\r\n\r\n{}",
            "GET /v1/policies HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            "GET /v1/policies HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            "GET http://x/v1/policies HTTP/1.1\r\n\r\n",
            "GET /v1/policies HTTP/1.1\r\nBad Header: x\r\n\r\n",
        ] {
            assert!(matches!(parse(text.as_bytes()), Parsed::Other), "{text:?}");
        }
    }

    #[test]
    fn the_http2_preface_is_awaited_whole_then_recognised() {
        for cut in 1..HTTP2_PREFACE.len() {
            assert!(matches!(parse(&HTTP2_PREFACE[..cut]), Parsed::Partial), "{cut}");
        }
        let mut frames = HTTP2_PREFACE.to_vec();
        frames.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        assert!(matches!(parse(&frames), Parsed::Http2));
        assert!(matches!(parse(b"POST / HTTP/1.1\r\n\r\n"), Parsed::Simple { .. }));
    }

    #[test]
    fn more_headers_than_the_front_takes_go_to_hyper() {
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        let text = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert!(matches!(parse(text.as_bytes()), Parsed::Other));
    }
}
