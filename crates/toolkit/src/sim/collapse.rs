//! A metastable failure, after Marc Brooker's `simple_collapse_sim`
//! (github.com/mbrooker/simulator_example): new calls keep arriving whatever
//! happens (Poisson, 40 a second, 80 for 5 s from t = 20 s), the server's
//! time per request grows with the requests it is working on (1 s + 10 ms
//! each), it finishes work whose caller has stopped waiting, and callers
//! time out after 3 s. A spike pushes the service time past the timeout;
//! retries then add load faster than the server sheds it, and it stays
//! collapsed after the spike ends. Without retries, it recovers.

use std::time::Duration;

use rand::Rng;
use serde::Serialize;

use super::arrivals::{exponential, poisson};
use super::time::{nanos, seconds};

/// The collapse scenario's settings; [`Collapse::brooker`] holds his. In
/// JSON, each duration is in seconds, its key ending `_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Collapse {
    /// New calls per second, outside the spike.
    #[serde(rename = "calls_per_second")]
    pub rate: f64,
    /// New calls per second during the spike.
    #[serde(rename = "spike_calls_per_second")]
    pub spike_rate: f64,
    /// When the spike starts.
    #[serde(rename = "spike_at_seconds", serialize_with = "seconds")]
    pub spike_at: Duration,
    /// How long it lasts.
    #[serde(rename = "spike_seconds", serialize_with = "seconds")]
    pub spike_for: Duration,
    /// When calls stop arriving.
    #[serde(rename = "until_seconds", serialize_with = "seconds")]
    pub until: Duration,
    /// The server's time for a request when it is alone.
    #[serde(rename = "service_seconds", serialize_with = "seconds")]
    pub service: Duration,
    /// What each request in progress adds to a new request's time.
    #[serde(rename = "per_request_seconds", serialize_with = "seconds")]
    pub per_request: Duration,
    /// The mean one-way network delay (exponentially distributed).
    #[serde(rename = "network_seconds", serialize_with = "seconds")]
    pub network: Duration,
}

impl Collapse {
    /// Brooker's numbers.
    pub fn brooker() -> Self {
        Self {
            rate: 40.0,
            spike_rate: 80.0,
            spike_at: Duration::from_secs(20),
            spike_for: Duration::from_secs(5),
            until: Duration::from_secs(80),
            service: Duration::from_secs(1),
            per_request: Duration::from_millis(10),
            network: Duration::from_millis(100),
        }
    }

    /// The arrival times of new calls, in nanoseconds.
    pub(super) fn arrivals(&self, rng: &mut impl Rng) -> Vec<u64> {
        let spike = self.spike_at.as_secs_f64()..(self.spike_at + self.spike_for).as_secs_f64();
        let rate = |t: f64| {
            if spike.contains(&t) {
                self.spike_rate
            } else {
                self.rate
            }
        };
        poisson(rng, rate, self.until.as_secs_f64())
    }

    fn delay(&self, rng: &mut impl Rng) -> u64 {
        (exponential(rng, self.network.as_secs_f64()) * 1e9) as u64
    }
}

/// The server and the requests on their way: each request is on its way
/// there, being served, or on its way back.
pub(super) struct Busy {
    model: Collapse,
    /// Requests being served now.
    concurrency: u64,
    requests: Vec<Request>,
}

struct Request {
    client: u32,
    stage: Stage,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    ToServer,
    Serving,
    ToClient,
}

/// What a request's event leads to.
pub(super) enum Next {
    /// Its next event is then.
    At(u64),
    /// Its answer reaches `client`.
    Answer { client: u32 },
}

impl Busy {
    pub(super) fn new(model: Collapse) -> Self {
        Self {
            model,
            concurrency: 0,
            requests: Vec::new(),
        }
    }

    /// `client` sends a request at `t`: its number, and when it reaches the server.
    pub(super) fn send(&mut self, client: u32, t: u64, rng: &mut impl Rng) -> (u32, u64) {
        let id = self.requests.len() as u32;
        self.requests.push(Request {
            client,
            stage: Stage::ToServer,
        });
        (id, t + self.model.delay(rng))
    }

    /// Request `id`'s event at `t`: it reaches the server, is served, or is answered.
    pub(super) fn step(&mut self, id: u32, t: u64, rng: &mut impl Rng) -> Next {
        let request = &mut self.requests[id as usize];
        match request.stage {
            Stage::ToServer => {
                request.stage = Stage::Serving;
                self.concurrency += 1;
                let time = nanos(self.model.service) + self.concurrency * nanos(self.model.per_request);
                Next::At(t + time)
            }
            Stage::Serving => {
                request.stage = Stage::ToClient;
                self.concurrency -= 1;
                Next::At(t + self.model.delay(rng))
            }
            Stage::ToClient => Next::Answer {
                client: request.client,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn arrivals_follow_the_rate_and_double_during_the_spike() {
        let arrivals = Collapse::brooker().arrivals(&mut SmallRng::seed_from_u64(1));
        let in_window = |from: u64, to: u64| {
            arrivals
                .iter()
                .filter(|t| (from * 1_000_000_000..to * 1_000_000_000).contains(*t))
                .count() as f64
        };
        let before = in_window(0, 20) / 20.0;
        let spike = in_window(20, 25) / 5.0;
        assert!((35.0..45.0).contains(&before), "{before}");
        assert!((65.0..95.0).contains(&spike), "{spike}");
        assert!(arrivals.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn each_request_in_progress_slows_the_next() {
        let mut busy = Busy::new(Collapse::brooker());
        let rng = &mut SmallRng::seed_from_u64(1);
        let (first, _) = busy.send(0, 0, rng);
        let (second, _) = busy.send(1, 0, rng);
        let Next::At(one) = busy.step(first, 0, rng) else {
            panic!()
        };
        let Next::At(two) = busy.step(second, 0, rng) else {
            panic!()
        };
        assert_eq!((one, two), (1_010_000_000, 1_020_000_000));
        let Next::At(back) = busy.step(first, one, rng) else {
            panic!()
        };
        assert!(matches!(busy.step(first, back, rng), Next::Answer { client: 0 }));
        assert_eq!(busy.concurrency, 1);
    }
}
