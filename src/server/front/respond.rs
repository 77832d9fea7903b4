//! An answer written as HTTP/1.1, as hyper would write it.

use std::cell::RefCell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::Response;
use bytes::{Buf, Bytes, BytesMut};
use http_body_util::BodyExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::clock::Clocked;

/// Writes `response`; `close` adds `Connection: close`. Returns whether the
/// connection stays open for another request; an error when the client
/// takes none of it for `timeout` (it stopped reading).
pub async fn write<S: AsyncWrite + Unpin>(
    stream: &mut S,
    response: Response,
    close: bool,
    timeout: Duration,
) -> std::io::Result<bool> {
    let (parts, body) = response.into_parts();
    let body = whole(body).await.map_err(std::io::Error::other)?;
    let close = close || closes(&parts.headers);
    let head = head(parts.status, &parts.headers, body.len(), close, SystemTime::now());
    // Head and body in one vectored write, the body not copied.
    let mut answer = head.as_slice().chain(body);
    let mut clocked = Clocked::new(stream, timeout);
    clocked.write_all_buf(&mut answer).await?;
    clocked.flush().await?;
    Ok(!close)
}

/// The body, whole. Every answer of this server is whole when it is
/// returned, nearly always in one piece, so this neither waits nor copies.
async fn whole(body: Body) -> Result<Bytes, axum::Error> {
    let mut body = std::pin::pin!(body);
    let mut first = Bytes::new();
    let mut rest: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else { continue };
        match &mut rest {
            None if first.is_empty() => first = data,
            None => {
                let mut joined = BytesMut::from(std::mem::take(&mut first));
                joined.extend_from_slice(&data);
                rest = Some(joined);
            }
            Some(joined) => joined.extend_from_slice(&data),
        }
    }
    Ok(rest.map_or(first, BytesMut::freeze))
}

/// Whether the answer already says `Connection: close`.
fn closes(headers: &header::HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .any(|value| value.as_bytes().eq_ignore_ascii_case(b"close"))
}

/// The status line and headers, with `Date`, the body's length (where the
/// status allows a body) and `Connection: close` when `close`.
fn head(
    status: StatusCode,
    headers: &header::HeaderMap,
    body_len: usize,
    close: bool,
    now: SystemTime,
) -> Vec<u8> {
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        if [
            header::CONTENT_LENGTH,
            header::TRANSFER_ENCODING,
            header::CONNECTION,
        ]
        .contains(name)
        {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"date: ");
    with_date(now, |date| head.extend_from_slice(date));
    head.extend_from_slice(b"\r\n");
    if has_body(status) {
        head.extend_from_slice(b"content-length: ");
        head.extend_from_slice(itoa::Buffer::new().format(body_len).as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if close {
        head.extend_from_slice(b"connection: close\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// Calls `f` with `now` as an HTTP date, formatted once a second per thread.
fn with_date(now: SystemTime, f: impl FnOnce(&[u8])) {
    thread_local! {
        static DATE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs());
    DATE.with_borrow_mut(|(at, text)| {
        if *at != second {
            *at = second;
            *text = httpdate::fmt_http_date(now);
        }
        f(text.as_bytes());
    });
}

/// Whether an answer with `status` carries a body (RFC 9110 §6.4.1).
fn has_body(status: StatusCode) -> bool {
    !(status.is_informational() || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use std::time::Duration;

    fn text(
        status: StatusCode,
        headers: &[(&'static str, &'static str)],
        body_len: usize,
        close: bool,
    ) -> String {
        let headers = headers
            .iter()
            .map(|(name, value)| {
                (
                    header::HeaderName::from_static(name),
                    HeaderValue::from_static(value),
                )
            })
            .collect();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        String::from_utf8(head(status, &headers, body_len, close, now)).unwrap()
    }

    #[test]
    fn an_answer_with_a_body_says_its_length() {
        let head = text(
            StatusCode::OK,
            &[("etag", "\"e\""), ("content-length", "99")],
            12,
            false,
        );
        assert_eq!(
            head,
            "HTTP/1.1 200 OK\r\netag: \"e\"\r\ndate: Tue, 14 Nov 2023 22:13:20 GMT\r\ncontent-length: 12\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn a_body_in_pieces_is_written_whole_and_one_piece_as_it_is() {
        let pieces =
            ["{\"a\"", ":", "1}"].map(|piece| Ok::<_, std::io::Error>(Bytes::from_static(piece.as_bytes())));
        let body = Body::from_stream(futures_util::stream::iter(pieces));
        assert_eq!(whole(body).await.unwrap(), "{\"a\":1}");
        let one = Bytes::from_static(b"{}");
        let written = whole(Body::from(one.clone())).await.unwrap();
        assert_eq!(written.as_ptr(), one.as_ptr(), "one piece is not copied");
        assert!(whole(Body::empty()).await.unwrap().is_empty());
    }

    #[test]
    fn the_date_follows_the_clock_by_the_second() {
        let date = |at: SystemTime| {
            let mut text = Vec::new();
            with_date(at, |date| text.extend_from_slice(date));
            String::from_utf8(text).unwrap()
        };
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(date(at), "Tue, 14 Nov 2023 22:13:20 GMT");
        assert_eq!(
            date(at + Duration::from_millis(999)),
            "Tue, 14 Nov 2023 22:13:20 GMT"
        );
        assert_eq!(date(at + Duration::from_secs(1)), "Tue, 14 Nov 2023 22:13:21 GMT");
    }

    #[test]
    fn not_modified_has_no_length_and_close_is_said_once() {
        let head = text(StatusCode::NOT_MODIFIED, &[("connection", "close")], 0, true);
        assert_eq!(
            head,
            "HTTP/1.1 304 Not Modified\r\ndate: Tue, 14 Nov 2023 22:13:20 GMT\r\nconnection: close\r\n\r\n"
        );
    }
}
