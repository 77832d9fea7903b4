//! HTTP/1 spoken by hand over a TCP connection, for tests of what the
//! daemon does with bytes a client library would never send.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How a connection's answers ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The daemon closed the connection (or reset it) after its answers.
    Closed,
    /// Nothing more came for the quiet time, and the connection is still open.
    Open,
}

/// The answers read from a connection: each one's status code, and how the
/// connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answers {
    pub statuses: Vec<u16>,
    pub ending: Ending,
}

/// Whole answers (head, and a `content-length` body) at the start of
/// `bytes`: their status lines (lower-cased) and codes.
fn parse_answers(bytes: &[u8]) -> Vec<(String, u16)> {
    let mut statuses = Vec::new();
    let mut start = 0;
    while let Some(end) = find(&bytes[start..], b"\r\n\r\n").map(|at| start + at + 4) {
        let head = String::from_utf8_lossy(&bytes[start..end]).to_lowercase();
        let status: u16 = head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("not an answer: {head:?}"));
        let length: usize = match status {
            100..=199 | 204 | 304 => 0,
            _ => head
                .lines()
                .find_map(|line| line.strip_prefix("content-length: "))
                .map_or(0, |n| n.trim().parse().unwrap()),
        };
        if bytes.len() < end + length {
            break;
        }
        let line = head.lines().next().unwrap_or_default().to_owned();
        statuses.push((line, status));
        start = end + length;
    }
    statuses
}

pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads until `count` whole answers have arrived (each within 5 s); their
/// status lines, lower-cased.
pub async fn answers(stream: &mut TcpStream, count: usize) -> Vec<String> {
    let mut bytes = Vec::new();
    loop {
        let statuses = parse_answers(&bytes);
        if statuses.len() >= count {
            return statuses.into_iter().take(count).map(|(line, _)| line).collect();
        }
        let mut chunk = [0u8; 16384];
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut chunk))
            .await
            .expect("an answer within 5 s")
            .unwrap();
        assert!(n > 0, "closed after {statuses:?}");
        bytes.extend_from_slice(&chunk[..n]);
    }
}

/// Reads answers until the daemon closes the connection, or sends nothing
/// for `quiet`.
pub async fn answers_until_quiet(stream: &mut TcpStream, quiet: Duration) -> Answers {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 16384];
    let ending = loop {
        match tokio::time::timeout(quiet, stream.read(&mut chunk)).await {
            Err(_) => break Ending::Open,
            Ok(Ok(0) | Err(_)) => break Ending::Closed,
            Ok(Ok(n)) => bytes.extend_from_slice(&chunk[..n]),
        }
    };
    Answers {
        statuses: parse_answers(&bytes).into_iter().map(|(_, code)| code).collect(),
        ending,
    }
}

/// Sends `bytes` on a new connection to `address`, half-closes it, and reads
/// what comes back until the daemon closes (or is quiet for `quiet`).
pub async fn send_and_half_close(address: &str, bytes: &[u8], quiet: Duration) -> Answers {
    let mut stream = TcpStream::connect(address).await.unwrap();
    // The daemon may close before taking all of it: that is an answer too.
    let _ = stream.write_all(bytes).await;
    let _ = stream.shutdown().await;
    answers_until_quiet(&mut stream, quiet).await
}

/// A chunked report from `instance`: a connection that sends it is served by
/// hyper from then on, rather than by the daemon's lean front.
pub fn chunked_report(instance: &str) -> String {
    let body = format!(r#"{{"instance":"{instance}","sequence":1,"reports":[]}}"#);
    format!(
        "POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    )
}

/// Moves `stream` from the lean front to hyper, with a chunked report.
pub async fn onto_hyper(stream: &mut TcpStream, instance: &str) {
    stream
        .write_all(chunked_report(instance).as_bytes())
        .await
        .unwrap();
    assert_eq!(answers(stream, 1).await, ["http/1.1 202 accepted"]);
}
