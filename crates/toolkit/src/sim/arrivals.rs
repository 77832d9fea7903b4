//! Open-loop arrivals: new calls at random times, as a Poisson process, the
//! way independent callers arrive (the collapse and errors scenarios).

use rand::Rng;

/// The arrival times, in nanoseconds, of calls arriving at `rate(t)` a
/// second (t in seconds) until `until` seconds.
pub(super) fn poisson(rng: &mut impl Rng, rate: impl Fn(f64) -> f64, until: f64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut t = 0.0;
    loop {
        t += exponential(rng, 1.0 / rate(t));
        if t >= until {
            return out;
        }
        out.push((t * 1e9) as u64);
    }
}

/// An exponentially distributed draw with mean `mean`.
pub(super) fn exponential(rng: &mut impl Rng, mean: f64) -> f64 {
    let u: f64 = rng.random();
    -mean * (1.0 - u).ln()
}
