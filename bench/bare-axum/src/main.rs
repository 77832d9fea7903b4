//! The reference server of `bench/serve.sh`: axum 0.8 with its defaults on a
//! single-threaded tokio runtime (the daemon's `--workers 1`), answering
//! `GET /v1/policies/{service}` with the bytes of one file, as JSON.
//!
//! Usage: bare-axum ADDRESS FILE

use axum::http::header;
use axum::routing::get;
use axum::Router;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(address), Some(file)) = (args.next(), args.next()) else {
        eprintln!("usage: bare-axum ADDRESS FILE");
        std::process::exit(2);
    };
    let body = std::fs::read(&file).unwrap_or_else(|e| {
        eprintln!("{file}: {e}");
        std::process::exit(1);
    });
    let body = axum::body::Bytes::from(body);
    let app = Router::new().route(
        "/v1/policies/{service}",
        get(move || {
            let body = body.clone();
            async move { ([(header::CONTENT_TYPE, "application/json")], body) }
        }),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("a runtime starts");
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&address).await.unwrap_or_else(|e| {
            eprintln!("{address}: {e}");
            std::process::exit(1);
        });
        axum::serve(listener, app).await.expect("serves");
    });
}
