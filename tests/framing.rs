//! Ambiguous HTTP/1 framings, each sent to the real daemon on both paths a
//! connection can take (the lean front, and hyper after a chunked request),
//! with a second request behind it: the answers must be the same on both.
//! A front that framed a request differently from hyper would answer the
//! request behind it differently; that is how requests are smuggled past a
//! proxy that frames them one way to a server that frames them the other.

mod common;

use std::time::Duration;

use common::raw::{answers_until_quiet, onto_hyper, send_and_half_close, Answers};
use common::{Daemon, SEED_POLICY};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The request sent behind each case.
const NEXT: &str = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";

/// (name, bytes): a request line, headers and a body that parsers may frame differently.
fn cases() -> Vec<(&'static str, String)> {
    let post =
        |headers: &str, body: &str| format!("POST /healthz HTTP/1.1\r\nHost: x\r\n{headers}\r\n{body}");
    let get = |line: &str| format!("{line}\r\nHost: x\r\n\r\n");
    vec![
        ("CL then TE", post("Content-Length: 6\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\nX")),
        ("TE then CL", post("Transfer-Encoding: chunked\r\nContent-Length: 6\r\n", "0\r\n\r\nX")),
        ("CL twice, same", post("Content-Length: 2\r\nContent-Length: 2\r\n", "{}")),
        ("CL twice, different", post("Content-Length: 2\r\nContent-Length: 3\r\n", "{}x")),
        ("CL as a list", post("Content-Length: 2, 2\r\n", "{}")),
        ("CL with a plus", post("Content-Length: +2\r\n", "{}")),
        ("CL negative", post("Content-Length: -1\r\n", "{}")),
        ("CL in hex", post("Content-Length: 0x2\r\n", "{}")),
        ("CL with leading space", post("Content-Length:   2\r\n", "{}")),
        ("CL with trailing space", post("Content-Length: 2  \r\n", "{}")),
        ("CL with a tab", post("Content-Length:\t2\r\n", "{}")),
        ("CL empty", post("Content-Length: \r\n", "{}")),
        ("CL overflowing", post("Content-Length: 99999999999999999999999\r\n", "{}")),
        ("CL with an underscore", post("Content-Length: 1_0\r\n", "{}")),
        ("CL with space before the colon", post("Content-Length : 2\r\n", "{}")),
        ("CL folded", post("Content-Length: 2\r\n 3\r\n", "{}x")),
        ("CL zero, then a body", post("Content-Length: 0\r\n", "{}")),
        ("TE twice", post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "2\r\n{}\r\n0\r\n\r\n")),
        ("TE chunked, chunked", post("Transfer-Encoding: chunked, chunked\r\n", "2\r\n{}\r\n0\r\n\r\n")),
        ("TE identity", post("Transfer-Encoding: identity\r\n", "{}")),
        ("TE gzip, chunked", post("Transfer-Encoding: gzip, chunked\r\n", "2\r\n{}\r\n0\r\n\r\n")),
        ("TE chunked, gzip", post("Transfer-Encoding: chunked, gzip\r\n", "2\r\n{}\r\n0\r\n\r\n")),
        ("TE capitalised", post("Transfer-Encoding: Chunked\r\n", "2\r\n{}\r\n0\r\n\r\n")),
        ("TE with a vertical tab", post("Transfer-Encoding:\x0bchunked\r\n", "2\r\n{}\r\n0\r\n\r\n")),
        ("TE with an underscore name", post("Transfer_Encoding: chunked\r\n", "2\r\n{}\r\n0\r\n\r\n")),
        ("TE with space before the colon", post("Transfer-Encoding : chunked\r\n", "2\r\n{}\r\n0\r\n\r\n")),
        ("TE folded", post("Transfer-Encoding:\r\n chunked\r\n", "2\r\n{}\r\n0\r\n\r\n")),
        ("chunk extension", post("Transfer-Encoding: chunked\r\n", "2;x=1\r\n{}\r\n0\r\n\r\n")),
        ("chunk size not hex", post("Transfer-Encoding: chunked\r\n", "zz\r\n{}\r\n0\r\n\r\n")),
        ("chunk size overflowing", post("Transfer-Encoding: chunked\r\n", "fffffffffffffffffff\r\n{}\r\n0\r\n\r\n")),
        ("chunk without its CRLF", post("Transfer-Encoding: chunked\r\n", "2\r\n{}0\r\n\r\n")),
        ("chunked with trailers", post("Transfer-Encoding: chunked\r\n", "2\r\n{}\r\n0\r\nX-T: 1\r\n\r\n")),
        ("chunk size with a bare LF", post("Transfer-Encoding: chunked\r\n", "2\n{}\r\n0\r\n\r\n")),
        ("obs-fold", post("X-A: a\r\n b\r\nContent-Length: 2\r\n", "{}")),
        ("bare CR in a value", post("X-A: a\rb\r\nContent-Length: 2\r\n", "{}")),
        ("bare LF line ends", "POST /healthz HTTP/1.1\nHost: x\nContent-Length: 2\n\n{}".into()),
        ("mixed line ends", "POST /healthz HTTP/1.1\r\nHost: x\nContent-Length: 2\r\n\r\n{}".into()),
        ("NUL in a value", post("X-A: a\0b\r\nContent-Length: 2\r\n", "{}")),
        ("NUL in a name", post("X-\0A: a\r\nContent-Length: 2\r\n", "{}")),
        ("NUL in the path", get("GET /heal\0thz HTTP/1.1")),
        ("empty header name", post(": a\r\nContent-Length: 2\r\n", "{}")),
        ("header without a colon", post("X-A\r\nContent-Length: 2\r\n", "{}")),
        ("double space in the request line", get("GET  /healthz HTTP/1.1")),
        ("no version", get("GET /healthz")),
        ("HTTP/1.2", get("GET /healthz HTTP/1.2")),
        ("HTTP/2.0 request line", get("GET /healthz HTTP/2.0")),
        ("lower-case method", get("get /healthz HTTP/1.1")),
        ("unknown method", get("FROB /healthz HTTP/1.1")),
        ("absolute form", get("GET http://x/healthz HTTP/1.1")),
        ("asterisk form", get("OPTIONS * HTTP/1.1")),
        ("tabs in the request line", get("GET\t/healthz\tHTTP/1.1")),
        ("space in the path", get("GET /heal thz HTTP/1.1")),
        ("fragment in the path", get("GET /healthz#top HTTP/1.1")),
        ("long method", get(&format!("{} /healthz HTTP/1.1", "M".repeat(100)))),
        ("empty lines before the request", format!("\r\n\r\n{}", get("GET /healthz HTTP/1.1"))),
        ("HTTP/1.0 keep-alive", "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n".into()),
        ("a body on a GET", "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}".into()),
        ("Expect 100-continue", post("Expect: 100-continue\r\nContent-Length: 2\r\n", "{}")),
        ("Connection close, keep-alive", post("Connection: close, keep-alive\r\nContent-Length: 2\r\n", "{}")),
        ("Upgrade h2c", get("GET /healthz HTTP/1.1\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA")),
        ("request behind a zero CL", post("Content-Length: 0\r\n", NEXT)),
        ("request inside a CL body", post(&format!("Content-Length: {}\r\n", NEXT.len()), NEXT)),
    ]
}

/// The answers to `bytes` (plus [`NEXT`]) on a new connection, through the front.
async fn through_front(address: &str, bytes: &[u8]) -> Answers {
    send_and_half_close(address, bytes, Duration::from_secs(5)).await
}

/// The same, on a connection that hyper serves.
async fn through_hyper(address: &str, bytes: &[u8]) -> Answers {
    let mut stream = TcpStream::connect(address).await.unwrap();
    onto_hyper(&mut stream, "framing").await;
    let _ = stream.write_all(bytes).await;
    let _ = stream.shutdown().await;
    answers_until_quiet(&mut stream, Duration::from_secs(5)).await
}

#[tokio::test]
async fn every_ambiguous_framing_is_answered_alike_by_the_front_and_by_hyper() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, SEED_POLICY).unwrap();
    let daemon = Daemon::start(&policy, &["--header-read-timeout", "2s"]);
    let address = daemon.base.trim_start_matches("http://").to_string();
    let cases = cases();
    assert!(cases.len() >= 54, "{} cases", cases.len());
    let mut differences = Vec::new();
    let mut answered_both = 0;
    for (name, case) in &cases {
        let bytes = format!("{case}{NEXT}").into_bytes();
        let front = through_front(&address, &bytes).await;
        let hyper = through_hyper(&address, &bytes).await;
        if front != hyper {
            differences.push(format!("{name}: front {front:?}, hyper {hyper:?}"));
        }
        answered_both += usize::from(front.statuses.len() == 2);
    }
    assert!(
        differences.is_empty(),
        "framed differently:\n{}",
        differences.join("\n")
    );
    // The table holds both kinds: framings each path serves, and ones each refuses.
    assert!(
        answered_both >= 10 && answered_both < cases.len(),
        "{answered_both} answered twice"
    );
}
