//! An answer written as HTTP/1.1, as hyper would write it.

use std::io::Write;
use std::time::{Duration, SystemTime};

use axum::http::{header, StatusCode};
use axum::response::Response;
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
    // Every answer of this server is a whole body, so this does not wait.
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .map_err(std::io::Error::other)?;
    let close = close || closes(&parts.headers);
    let mut bytes = head(parts.status, &parts.headers, body.len(), close, SystemTime::now());
    bytes.extend_from_slice(&body);
    let mut clocked = Clocked::new(stream, timeout);
    clocked.write_all(&bytes).await?;
    clocked.flush().await?;
    Ok(!close)
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
    let reason = status.canonical_reason().unwrap_or("");
    let _ = write!(head, "HTTP/1.1 {} {reason}\r\n", status.as_str());
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
    let _ = write!(head, "date: {}\r\n", httpdate::fmt_http_date(now));
    if has_body(status) {
        let _ = write!(head, "content-length: {body_len}\r\n");
    }
    if close {
        head.extend_from_slice(b"connection: close\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
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

    #[test]
    fn not_modified_has_no_length_and_close_is_said_once() {
        let head = text(StatusCode::NOT_MODIFIED, &[("connection", "close")], 0, true);
        assert_eq!(
            head,
            "HTTP/1.1 304 Not Modified\r\ndate: Tue, 14 Nov 2023 22:13:20 GMT\r\nconnection: close\r\n\r\n"
        );
    }
}
