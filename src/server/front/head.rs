//! A request head, parsed from the bytes read so far, and whether the front
//! answers it itself.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri, Version};

/// More headers than this and hyper gets the request (it allows 100).
const MAX_HEADERS: usize = 64;

/// Request headers that mean a body, an upgrade or an interim answer: hyper
/// handles those requests.
const NOT_SIMPLE: [&str; 4] = ["content-length", "transfer-encoding", "upgrade", "expect"];

/// What the bytes read so far hold.
#[derive(Debug)]
pub enum Parsed {
    /// Not a whole head yet.
    Partial,
    /// A simple request (a `GET` over HTTP/1.1 with no body), `len` bytes
    /// long, which the front answers; `close` when the client asked to close after it.
    Simple {
        request: Box<Request<Body>>,
        close: bool,
        len: usize,
    },
    /// Anything else, malformed requests included: hyper reads it again and answers.
    Other,
}

/// Parses the head at the start of `bytes`.
pub fn parse(bytes: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut headers);
    match head.parse(bytes) {
        Ok(httparse::Status::Partial) => Parsed::Partial,
        Ok(httparse::Status::Complete(len)) => match simple(&head) {
            Some((request, close)) => Parsed::Simple {
                request: Box::new(request),
                close,
                len,
            },
            None => Parsed::Other,
        },
        Err(_) => Parsed::Other,
    }
}

/// The request, if it is simple, and whether it asks to close afterwards.
fn simple(head: &httparse::Request<'_, '_>) -> Option<(Request<Body>, bool)> {
    if head.method != Some("GET") || head.version != Some(1) {
        return None;
    }
    let uri: Uri = head.path.filter(|path| path.starts_with('/'))?.parse().ok()?;
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
        let value = HeaderValue::from_bytes(header.value).ok()?;
        if name == axum::http::header::CONNECTION {
            close |= asks_to_close(&value)?;
        }
        headers.append(name, value);
    }
    let mut request = Request::new(Body::empty());
    *request.method_mut() = Method::GET;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = headers;
    Some((request, close))
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

    fn simple_request(text: &str) -> (Request<Body>, bool, usize) {
        match parse(text.as_bytes()) {
            Parsed::Simple { request, close, len } => (*request, close, len),
            other => panic!("{text:?} parsed as {other:?}"),
        }
    }

    #[test]
    fn a_get_over_http_1_1_is_simple() {
        let text = "GET /v1/policies/a?wait=60s HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"e\"\r\n\r\nGET /next";
        let (request, close, len) = simple_request(text);
        assert_eq!(request.uri().path(), "/v1/policies/a");
        assert_eq!(request.uri().query(), Some("wait=60s"));
        assert_eq!(request.headers()["if-none-match"], "\"e\"");
        assert!(!close);
        assert_eq!(&text[len..], "GET /next");
    }

    #[test]
    fn connection_close_is_noticed() {
        let (_, close, _) = simple_request("GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n");
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
            "POST /v1/reports HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
            "HEAD /v1/policies HTTP/1.1\r\n\r\n",
            "GET /v1/policies HTTP/1.0\r\n\r\n",
            "GET /v1/policies HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            "GET /v1/policies HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            "GET /v1/policies HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            "GET http://x/v1/policies HTTP/1.1\r\n\r\n",
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            "GET /v1/policies HTTP/1.1\r\nBad Header: x\r\n\r\n",
        ] {
            assert!(matches!(parse(text.as_bytes()), Parsed::Other), "{text:?}");
        }
    }

    #[test]
    fn more_headers_than_the_front_takes_go_to_hyper() {
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        let text = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert!(matches!(parse(text.as_bytes()), Parsed::Other));
    }
}
