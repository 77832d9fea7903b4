//! Bounds on command-line values: a flag outside its range is refused at
//! start-up with its name and range (clap adds the name), never accepted to
//! panic or exhaust memory later (a zero re-check interval, a wait of years).

use std::fmt::Display;
use std::time::Duration;

use stormguard_core::policy::{parse_duration, DurationError, GoDuration};

/// A flag's value that cannot be used, and why; clap prefixes the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    /// Not a duration.
    #[error(transparent)]
    Duration(#[from] DurationError),
    /// Not a number of the flag's kind.
    #[error("{why}")]
    Number {
        /// The text given.
        found: String,
        /// What reading it as a number said.
        why: String,
    },
    /// Outside the flag's range, written as the flag takes it.
    #[error("must be between {min} and {max}")]
    OutOfRange {
        /// The least value.
        min: String,
        /// The greatest.
        max: String,
    },
    /// Not the parts the flag takes.
    #[error("expected {expected}, e.g. {example}, found {found:?}")]
    Shape {
        /// The parts, in order.
        expected: &'static str,
        /// A value that works.
        example: &'static str,
        /// The text given.
        found: String,
    },
    /// One of the parts is wrong.
    #[error("{part}: {source}")]
    Part {
        /// Which part.
        part: &'static str,
        /// What is wrong with it.
        source: Box<FlagError>,
    },
    /// A length of time that must be more than zero is zero.
    #[error("must be more than 0s")]
    Zero,
    /// Not one of the names the flag takes.
    #[error("expected one of {}", .0.join(", "))]
    OneOf(&'static [&'static str]),
}

impl FlagError {
    fn in_part(part: &'static str) -> impl Fn(FlagError) -> FlagError {
        move |source| FlagError::Part {
            part,
            source: Box::new(source),
        }
    }
}

/// A parser for a Go-style duration in `[min, max]`.
pub fn duration_in(
    min: Duration,
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, FlagError> + Clone + Send + Sync {
    move |text| {
        let value = parse_duration(text)?;
        if !(min..=max).contains(&value) {
            return Err(FlagError::OutOfRange {
                min: GoDuration(min).to_string(),
                max: GoDuration(max).to_string(),
            });
        }
        Ok(value)
    }
}

/// A parser for a whole number in `[min, max]`.
pub fn count_in<T>(min: T, max: T) -> impl Fn(&str) -> Result<T, FlagError> + Clone + Send + Sync
where
    T: std::str::FromStr + PartialOrd + Display + Copy + Send + Sync,
    T::Err: Display,
{
    move |text| {
        let value: T = text.trim().parse().map_err(|e: T::Err| FlagError::Number {
            found: text.to_string(),
            why: e.to_string(),
        })?;
        if !(min..=max).contains(&value) {
            return Err(FlagError::OutOfRange {
                min: min.to_string(),
                max: max.to_string(),
            });
        }
        Ok(value)
    }
}

/// A parser for a share in `[0, 1]`, such as 0.01 for 1 %.
pub fn share(text: &str) -> Result<f64, FlagError> {
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
        assert_eq!(
            recheck("0s").unwrap_err().to_string(),
            "must be between 100ms and 1h0m0s"
        );
        assert!(recheck("1000000h").is_err());
        assert!(recheck("10").unwrap_err().to_string().contains("unit"));
        let workers = count_in(1usize, 1024);
        assert_eq!(workers("4"), Ok(4));
        assert_eq!(
            workers("0").unwrap_err(),
            FlagError::OutOfRange {
                min: "1".into(),
                max: "1024".into()
            }
        );
        assert!(matches!(workers("-1"), Err(FlagError::Number { .. })));
        assert!(workers("99999999999999999999999").is_err());
        assert_eq!(share("0.01"), Ok(0.01));
        assert_eq!(share("1.5").unwrap_err().to_string(), "must be between 0 and 1");
        assert!(share("NaN").is_err());
    }
}

/// Parses `START:LASTING` (two durations, e.g. `30s:5s`): a window of time.
pub fn window(text: &str) -> Result<(Duration, Duration), FlagError> {
    let (start, lasting) = text.split_once(':').ok_or_else(|| FlagError::Shape {
        expected: "START:LASTING",
        example: "30s:5s",
        found: text.to_string(),
    })?;
    let day = duration_in(Duration::ZERO, secs(86_400));
    let start = day(start).map_err(FlagError::in_part("START"))?;
    let lasting = day(lasting).map_err(FlagError::in_part("LASTING"))?;
    if lasting.is_zero() {
        return Err(FlagError::in_part("LASTING")(FlagError::Zero));
    }
    Ok((start, lasting))
}

/// Parses `START:LASTING:CAPACITY` (e.g. `20s:20s:50`): a brownout.
pub fn brownout(text: &str) -> Result<(Duration, Duration, u32), FlagError> {
    let shape = || FlagError::Shape {
        expected: "START:LASTING:CAPACITY",
        example: "20s:20s:50",
        found: text.to_string(),
    };
    if text.matches(':').count() != 2 {
        return Err(shape());
    }
    let (window_text, capacity) = text.rsplit_once(':').ok_or_else(shape)?;
    let (start, lasting) = window(window_text)?;
    let capacity = count_in(0u32, 1_000_000_000)(capacity).map_err(FlagError::in_part("CAPACITY"))?;
    Ok((start, lasting, capacity))
}

#[cfg(test)]
mod window_tests {
    use super::*;

    #[test]
    fn windows_and_brownouts_name_the_part_that_is_wrong() {
        assert_eq!(window("30s:5s"), Ok((secs(30), secs(5))));
        assert_eq!(brownout("20s:20s:50"), Ok((secs(20), secs(20), 50)));
        let text = |error: FlagError| error.to_string();
        assert!(text(window("30s").unwrap_err()).contains("START:LASTING"));
        assert_eq!(
            text(window("30s:0s").unwrap_err()),
            "LASTING: must be more than 0s"
        );
        assert!(text(window("soon:5s").unwrap_err()).starts_with("START"));
        assert!(text(brownout("20s:20s:lots").unwrap_err()).starts_with("CAPACITY"));
        assert!(text(brownout("20s:5s").unwrap_err()).contains("START:LASTING:CAPACITY"));
    }
}
