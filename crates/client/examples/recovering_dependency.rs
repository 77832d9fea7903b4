//! A dependency coming back from an outage, on loopback, for the fleet
//! recovery benchmark (`bench/real_fleet.py`): from `--start-at` it answers
//! every request 503 for `--outage`, then accepts `--capacity` requests in
//! each calendar second counted from the start and answers 503 beyond that,
//! the server of `stormguard simulate`'s default herd.
//!
//! ```sh
//! cargo run --release -p stormguard-client --example recovering_dependency -- \
//!     --listen 127.0.0.1:0 --start-at "$(date +%s%3N)" --outage 10 --capacity 200
//! ```
//!
//! It prints the address it listens on, then serves `GET /call` (the
//! dependency) and `GET /stats` (what it received and accepted, in total and
//! per second since the start).
//!
//! With `--error-rate E` it also fails a share E of the requests it
//! receives after the outage, at random, answering `--error-status` (503
//! unless given): with `--outage 0` and a capacity it never reaches, the
//! dependency of `stormguard simulate --scenario errors`
//! (`bench/fleet_budget.py`, `bench/real_fleet.py --errors`).
//!
//! With `--brownout START,LASTING,CAPACITY` (whole seconds from the start,
//! and requests a second) it takes only CAPACITY a second from START for
//! LASTING: `simulate --brownout START:LASTING:CAPACITY`
//! (`bench/real_fleet.py --brownout`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Json;

/// Seconds of per-second counts kept; later requests count in the totals only.
const SECONDS_KEPT: usize = 600;

struct Dependency {
    start: Duration,
    outage: Duration,
    capacity: u64,
    /// A brownout: from this second since the start, for this many, at
    /// this capacity.
    brownout: Option<(u64, u64, u64)>,
    /// The share of requests failed at random, in [0, 1].
    error_rate: f64,
    /// What those are answered.
    error_status: StatusCode,
    /// The calendar second being served and what it has accepted so far.
    second: Mutex<(u64, u64)>,
    received: Vec<AtomicU64>,
    accepted: Vec<AtomicU64>,
}

impl Dependency {
    /// What a request arriving at `now` (since the Unix epoch) is answered:
    /// 200, 503 during the outage or past the second's capacity, or the
    /// error status for the share failed at random.
    fn answer(&self, now: Duration) -> StatusCode {
        let Some(since) = now.checked_sub(self.start) else {
            return StatusCode::SERVICE_UNAVAILABLE;
        };
        let second = since.as_secs();
        let slot = (second as usize).min(SECONDS_KEPT);
        self.received[slot].fetch_add(1, Relaxed);
        if since < self.outage {
            return StatusCode::SERVICE_UNAVAILABLE;
        }
        if self.error_rate > 0.0 && rand::random::<f64>() < self.error_rate {
            return self.error_status;
        }
        let mut current = self.second.lock().unwrap_or_else(|e| e.into_inner());
        if current.0 != second {
            *current = (second, 0);
        }
        if current.1 >= self.capacity_in(second) {
            return StatusCode::SERVICE_UNAVAILABLE;
        }
        current.1 += 1;
        self.accepted[slot].fetch_add(1, Relaxed);
        StatusCode::OK
    }
}

impl Dependency {
    /// What it takes in second `second` since the start.
    fn capacity_in(&self, second: u64) -> u64 {
        match self.brownout {
            Some((start, lasting, capacity)) if (start..start + lasting).contains(&second) => capacity,
            _ => self.capacity,
        }
    }
}

async fn call(State(dependency): State<Arc<Dependency>>) -> StatusCode {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    dependency.answer(now)
}

async fn stats(State(dependency): State<Arc<Dependency>>) -> Json<serde_json::Value> {
    let load = |counts: &[AtomicU64]| counts.iter().map(|n| n.load(Relaxed)).collect::<Vec<_>>();
    let (received, accepted) = (load(&dependency.received), load(&dependency.accepted));
    let last = received.iter().rposition(|n| *n > 0).map_or(0, |i| i + 1);
    Json(serde_json::json!({
        "received": received.iter().sum::<u64>(),
        "accepted": accepted.iter().sum::<u64>(),
        "requests_per_second": &received[..last.min(SECONDS_KEPT)],
        "accepted_per_second": &accepted[..last.min(SECONDS_KEPT)],
    }))
}

#[path = "common/args.rs"]
mod args;
use args::flag;

fn number(args: &[String], name: &str, default: u64) -> u64 {
    flag(args, name).map_or(default, |v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} takes a whole number, not {v:?}"))
    })
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let listen = flag(&args, "--listen").unwrap_or_else(|| "127.0.0.1:0".into());
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    let dependency = Arc::new(Dependency {
        start: Duration::from_millis(number(&args, "--start-at", now_ms)),
        outage: Duration::from_secs(number(&args, "--outage", 10)),
        capacity: number(&args, "--capacity", 200),
        brownout: flag(&args, "--brownout").map(|v| {
            let numbers: Vec<u64> = v.split(',').filter_map(|n| n.parse().ok()).collect();
            match numbers[..] {
                [start, lasting, capacity] => (start, lasting, capacity),
                _ => panic!("--brownout takes START,LASTING,CAPACITY in whole numbers, not {v:?}"),
            }
        }),
        error_rate: flag(&args, "--error-rate").map_or(0.0, |v| {
            v.parse::<f64>()
                .ok()
                .filter(|e| (0.0..=1.0).contains(e))
                .unwrap_or_else(|| panic!("--error-rate takes a share from 0 to 1, not {v:?}"))
        }),
        error_status: flag(&args, "--error-status").map_or(StatusCode::SERVICE_UNAVAILABLE, |v| {
            v.parse::<u16>()
                .ok()
                .filter(|code| (400..=599).contains(code))
                .and_then(|code| StatusCode::from_u16(code).ok())
                .unwrap_or_else(|| panic!("--error-status takes an error status from 400 to 599, not {v:?}"))
        }),
        second: Mutex::new((0, 0)),
        received: (0..=SECONDS_KEPT).map(|_| AtomicU64::new(0)).collect(),
        accepted: (0..=SECONDS_KEPT).map(|_| AtomicU64::new(0)).collect(),
    });
    let app = axum::Router::new()
        .route("/call", get(call))
        .route("/stats", get(stats))
        .with_state(dependency);
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .unwrap_or_else(|e| panic!("cannot listen on {listen}: {e}"));
    println!("http://{}", listener.local_addr().expect("a bound address"));
    axum::serve(listener, app).await.expect("the dependency serves");
}
