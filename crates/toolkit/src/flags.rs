//! Bounds on command-line values: a flag outside its range is refused at
//! start-up with its name and range (clap adds the name), never accepted to
//! panic or exhaust memory later (a zero re-check interval, a wait of years).

use std::fmt::Display;
use std::time::Duration;

use stormguard_core::policy::{parse_duration, GoDuration};

/// A parser for a Go-style duration in `[min, max]`.
pub fn duration_in(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync {
    move |text| {
        let value = parse_duration(text).map_err(|e| e.to_string())?;
        if !(min..=max).contains(&value) {
            return Err(format!(
                "must be between {} and {}",
                GoDuration(min),
                GoDuration(max)
            ));
        }
        Ok(value)
    }
}

/// A parser for a whole number in `[min, max]`.
pub fn count_in<T>(min: T, max: T) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync
where
    T: std::str::FromStr + PartialOrd + Display + Copy + Send + Sync,
    T::Err: Display,
{
    move |text| {
        let value: T = text.trim().parse().map_err(|e: T::Err| e.to_string())?;
        if !(min..=max).contains(&value) {
            return Err(format!("must be between {min} and {max}"));
        }
        Ok(value)
    }
}

/// A parser for a share in `[0, 1]`, such as 0.01 for 1 %.
pub fn share(text: &str) -> Result<f64, String> {
    count_in(0.0, 1.0)(text)
}

/// Shorthand for whole seconds.
pub const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Shorthand for milliseconds.
pub const fn millis(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_outside_the_range_name_the_range() {
        let recheck = duration_in(millis(100), secs(3600));
        assert_eq!(recheck("10s"), Ok(secs(10)));
        assert_eq!(recheck("0s").unwrap_err(), "must be between 100ms and 1h0m0s");
        assert!(recheck("1000000h").is_err());
        assert!(recheck("10").unwrap_err().contains("unit"));
        let workers = count_in(1usize, 1024);
        assert_eq!(workers("4"), Ok(4));
        assert_eq!(workers("0").unwrap_err(), "must be between 1 and 1024");
        assert!(workers("-1").is_err());
        assert!(workers("99999999999999999999999").is_err());
        assert_eq!(share("0.01"), Ok(0.01));
        assert_eq!(share("1.5").unwrap_err(), "must be between 0 and 1");
        assert!(share("NaN").is_err());
    }
}

/// Parses `START:LASTING` (two durations, e.g. `30s:5s`): a window of time.
pub fn window(text: &str) -> Result<(Duration, Duration), String> {
    let (start, lasting) = text
        .split_once(':')
        .ok_or_else(|| format!("expected START:LASTING, e.g. 30s:5s, found {text:?}"))?;
    let day = duration_in(Duration::ZERO, secs(86_400));
    let start = day(start).map_err(|e| format!("START: {e}"))?;
    let lasting = day(lasting).map_err(|e| format!("LASTING: {e}"))?;
    if lasting.is_zero() {
        return Err("LASTING: must be more than 0s".into());
    }
    Ok((start, lasting))
}

/// Parses `START:LASTING:CAPACITY` (e.g. `20s:20s:50`): a brownout.
pub fn brownout(text: &str) -> Result<(Duration, Duration, u32), String> {
    let shape = || format!("expected START:LASTING:CAPACITY, e.g. 20s:20s:50, found {text:?}");
    if text.matches(':').count() != 2 {
        return Err(shape());
    }
    let (window_text, capacity) = text.rsplit_once(':').ok_or_else(shape)?;
    let (start, lasting) = window(window_text)?;
    let capacity = count_in(0u32, 1_000_000_000)(capacity).map_err(|e| format!("CAPACITY: {e}"))?;
    Ok((start, lasting, capacity))
}

#[cfg(test)]
mod window_tests {
    use super::*;

    #[test]
    fn windows_and_brownouts_name_the_part_that_is_wrong() {
        assert_eq!(window("30s:5s"), Ok((secs(30), secs(5))));
        assert_eq!(brownout("20s:20s:50"), Ok((secs(20), secs(20), 50)));
        assert!(window("30s").unwrap_err().contains("START:LASTING"));
        assert!(window("30s:0s").unwrap_err().starts_with("LASTING"));
        assert!(window("soon:5s").unwrap_err().starts_with("START"));
        assert!(brownout("20s:20s:lots").unwrap_err().starts_with("CAPACITY"));
        assert!(brownout("20s:5s").unwrap_err().contains("START:LASTING:CAPACITY"));
    }
}
