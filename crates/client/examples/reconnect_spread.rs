//! When a fleet's clients all lose the daemon at once, do their reconnects
//! arrive spread out, or as a synchronized spike? Starts the daemon, starts
//! N watching clients in this process, kills the daemon, and in its place
//! listens on its port, counting the connections that arrive per 100 ms.
//!
//! ```sh
//! cargo build --release
//! cargo run --release -p stormguard-client --example reconnect_spread -- target/release/stormguard 500
//! ```

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use stormguard_client::{ClientConfig, PolicyClient, PolicySource};

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let binary = args.next().unwrap_or_else(|| "target/release/stormguard".into());
    let clients: usize = args
        .next()
        .map_or(500, |n| n.parse().expect("a number of clients"));
    let watch_for = Duration::from_secs(10);

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut daemon = Command::new(&binary)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--max-long-polls",
            "100000",
        ])
        .stderr(Stdio::null())
        .spawn()
        .expect("the daemon starts");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let base = format!("http://127.0.0.1:{port}");
    let mut fleet = Vec::with_capacity(clients);
    for _ in 0..clients {
        fleet.push(
            PolicyClient::start(ClientConfig::new(&base, "payment-service"))
                .await
                .expect("a valid client configuration"),
        );
    }
    assert!(
        fleet.iter().all(|c| c.source() == PolicySource::Daemon),
        "every client fetched its policy"
    );
    tokio::time::sleep(Duration::from_secs(1)).await; // every watch parked

    daemon.kill().unwrap();
    daemon.wait().unwrap();
    let lost = Instant::now();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("the port is free again");
    let mut arrivals = Vec::new();
    while lost.elapsed() < watch_for {
        if let Ok(Ok((stream, _))) = tokio::time::timeout(Duration::from_millis(50), listener.accept()).await
        {
            arrivals.push(lost.elapsed());
            drop(stream);
        }
    }
    let mut windows = vec![0usize; (watch_for.as_millis() / 100) as usize + 1];
    for at in &arrivals {
        windows[(at.as_millis() / 100) as usize] += 1;
    }
    let peak = windows.iter().max().copied().unwrap_or(0);
    let first_second: usize = windows[..10].iter().sum();
    println!(
        "{clients} clients lost the daemon at once: {} reconnect attempts in {}s; peak {peak} in one 100 ms window \
         ({:.2} of the client count); {first_second} in the first second",
        arrivals.len(),
        watch_for.as_secs(),
        peak as f64 / clients as f64
    );
    let shown: Vec<String> = windows.iter().take(30).map(|n| n.to_string()).collect();
    println!("per 100 ms, first 3 s: {}", shown.join(" "));
    drop(fleet);
}
