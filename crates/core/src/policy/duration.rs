//! Go-style duration strings (`250ms`, `1.5s`, `1m30s`), as written in policy
//! files, and their formatting back for people.
//!
//! The grammar is Go's `time.ParseDuration`: one or more `<decimal><unit>`
//! terms, units `ns`, `us` (or `µs`/`μs`), `ms`, `s`, `m`, `h`. A policy can
//! never mean a negative delay, so a leading `-` is an error rather than a value.

use std::fmt;
use std::time::Duration;

/// Why a string is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string is empty.
    #[error("empty duration; write it with a unit, e.g. 100ms")]
    Empty,
    /// A leading minus sign: delays and timeouts cannot be negative.
    #[error("duration must not be negative")]
    Negative,
    /// A number without a unit, like `100`.
    #[error("missing unit in duration {0:?}; valid units are ns, us, ms, s, m, h")]
    MissingUnit(String),
    /// A unit that is not one of Go's.
    #[error("unknown unit {unit:?} in duration {input:?}; valid units are ns, us, ms, s, m, h")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole input.
        input: String,
    },
    /// Anything else that does not follow the grammar.
    #[error("invalid duration {0:?}; expected e.g. 250ms, 1.5s or 1m30s")]
    Invalid(String),
    /// More than `u64::MAX` nanoseconds (about 584 years).
    #[error("duration {0:?} is too large")]
    Overflow(String),
}

const NANOS_PER_UNIT: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses a Go-style duration string.
///
/// ```
/// use std::time::Duration;
/// use stormguard_core::policy::parse_duration;
/// assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
/// assert_eq!(parse_duration("1.5ms"), Ok(Duration::from_micros(1500)));
/// assert!(parse_duration("100").is_err());
/// ```
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let mut rest = match input.as_bytes().first() {
        None => return Err(DurationError::Empty),
        Some(b'-') => return Err(DurationError::Negative),
        Some(b'+') => &input[1..],
        Some(_) => input,
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(DurationError::Invalid(input.to_owned()));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (nanos, tail) = parse_term(rest, input)?;
        total = total
            .checked_add(nanos)
            .filter(|t| *t <= u128::from(u64::MAX))
            .ok_or_else(|| DurationError::Overflow(input.to_owned()))?;
        rest = tail;
    }
    Ok(Duration::from_nanos(total as u64))
}

/// Parses one `<decimal><unit>` term, returning its nanoseconds and the rest.
fn parse_term<'a>(s: &'a str, input: &str) -> Result<(u128, &'a str), DurationError> {
    let number_len = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, tail) = s.split_at(number_len);
    let unit_len = tail
        .find(|c: char| c.is_ascii_digit() || c == '.')
        .unwrap_or(tail.len());
    let (unit, rest) = tail.split_at(unit_len);
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(DurationError::Invalid(input.to_owned()));
    }
    if unit.is_empty() {
        return Err(DurationError::MissingUnit(input.to_owned()));
    }
    let scale = NANOS_PER_UNIT
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, nanos)| *nanos)
        .ok_or_else(|| DurationError::UnknownUnit {
            unit: unit.to_owned(),
            input: input.to_owned(),
        })?;
    let overflow = || DurationError::Overflow(input.to_owned());
    let whole: u128 = if whole.is_empty() {
        0
    } else if whole.len() > 20 {
        return Err(overflow());
    } else {
        whole.parse().map_err(|_| overflow())?
    };
    // At most 20 digits times at most 3.6e12: far inside u128, so the sums below cannot wrap.
    let mut nanos = whole * scale;
    // Fractional digits beyond nanosecond precision are dropped, as in Go.
    let mut unit_fraction = scale;
    for digit in frac.bytes() {
        unit_fraction /= 10;
        if unit_fraction == 0 {
            break;
        }
        nanos += u128::from(digit - b'0') * unit_fraction;
    }
    Ok((nanos, rest))
}

/// A duration that displays the way a policy file writes it (`100ms`, `1m30s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoDuration(pub Duration);

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        if nanos == 0 {
            return f.write_str("0s");
        }
        if nanos < 1_000 {
            return write!(f, "{nanos}ns");
        }
        if nanos < 1_000_000 {
            return write_fraction(f, nanos, 1_000, "us");
        }
        if nanos < 1_000_000_000 {
            return write_fraction(f, nanos, 1_000_000, "ms");
        }
        let hours = nanos / 3_600_000_000_000;
        let minutes = nanos / 60_000_000_000 % 60;
        if hours > 0 {
            write!(f, "{hours}h")?;
        }
        if hours > 0 || minutes > 0 {
            write!(f, "{minutes}m")?;
        }
        write_fraction(f, nanos % 60_000_000_000, 1_000_000_000, "s")
    }
}

fn write_fraction(f: &mut fmt::Formatter<'_>, nanos: u128, per: u128, unit: &str) -> fmt::Result {
    let whole = nanos / per;
    let frac = nanos % per;
    if frac == 0 {
        return write!(f, "{whole}{unit}");
    }
    let width = per.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    write!(f, "{whole}.{}{unit}", digits.trim_end_matches('0'))
}

/// Serde support for durations as JSON numbers of milliseconds (fractional
/// below a millisecond), so that any language can read a served policy.
pub mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Writes `d` as milliseconds.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        let millis = d.as_nanos() as f64 / 1e6;
        if millis.fract() == 0.0 {
            s.serialize_u64(millis as u64)
        } else {
            s.serialize_f64(millis)
        }
    }

    /// Reads milliseconds; negative or non-finite values are errors.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let millis = f64::deserialize(d)?;
        Duration::try_from_secs_f64(millis / 1e3).map_err(serde::de::Error::custom)
    }

    /// The same for optional durations: `null` is none.
    pub mod option {
        use super::*;

        /// Writes `None` as `null`.
        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            match d {
                Some(d) => super::serialize(d, s),
                None => s.serialize_none(),
            }
        }

        /// Reads `null` as `None`, and 0 too, as a policy file means it
        /// (`perTryTimeout: 0s` is no timeout, not one that fires at once).
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            let read = Option::<f64>::deserialize(d)?
                .map(|millis| Duration::try_from_secs_f64(millis / 1e3))
                .transpose()
                .map_err(serde::de::Error::custom)?;
            Ok(read.filter(|d| !d.is_zero()))
        }
    }

    /// The same for lists of durations.
    pub mod list {
        use super::*;
        use serde::ser::SerializeSeq;

        /// Writes each duration as milliseconds.
        pub fn serialize<S: Serializer>(ds: &[Duration], s: S) -> Result<S::Ok, S::Error> {
            let mut seq = s.serialize_seq(Some(ds.len()))?;
            for d in ds {
                seq.serialize_element(&super::Millis(*d))?;
            }
            seq.end()
        }

        /// Reads a list of milliseconds.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Duration>, D::Error> {
            Vec::<f64>::deserialize(d)?
                .into_iter()
                .map(|millis| Duration::try_from_secs_f64(millis / 1e3))
                .collect::<Result<_, _>>()
                .map_err(serde::de::Error::custom)
        }
    }

    struct Millis(Duration);

    impl serde::Serialize for Millis {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            serialize(&self.0, s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_duration("250ms"), Ok(ms(250)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse_duration("2h45m"), Ok(Duration::from_secs(9900)));
        assert_eq!(parse_duration("1ns"), Ok(Duration::from_nanos(1)));
        assert_eq!(parse_duration("3us"), Ok(Duration::from_micros(3)));
        assert_eq!(parse_duration("3µs"), Ok(Duration::from_micros(3)));
        assert_eq!(parse_duration(".5s"), Ok(ms(500)));
        assert_eq!(parse_duration("1.s"), Ok(ms(1000)));
        assert_eq!(parse_duration("+5s"), Ok(ms(5000)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(
            parse_duration("1.0000000009s"),
            Ok(Duration::from_secs(1)),
            "digits below a nanosecond are dropped"
        );
    }

    #[test]
    fn rejects_what_go_rejects_and_negatives() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert_eq!(parse_duration("-1s"), Err(DurationError::Negative));
        assert!(matches!(
            parse_duration("100"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            parse_duration("1s5"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            parse_duration("5sec"),
            Err(DurationError::UnknownUnit { unit, .. }) if unit == "sec"
        ));
        assert!(matches!(parse_duration("."), Err(DurationError::Invalid(_))));
        assert!(matches!(parse_duration("+"), Err(DurationError::Invalid(_))));
        assert!(matches!(parse_duration("1..5s"), Err(DurationError::Invalid(_))));
        assert!(matches!(parse_duration("1.2.3s"), Err(DurationError::Invalid(_))));
        assert!(matches!(parse_duration("ms"), Err(DurationError::Invalid(_))));
        assert!(matches!(parse_duration(" 1s"), Err(DurationError::Invalid(_))));
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        assert!(matches!(
            parse_duration("6000000h"),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            parse_duration("99999999999999999999999999999999999h"),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            parse_duration("94522879700260684295381835.9999h"),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            parse_duration("18446744073709551616ns"),
            Err(DurationError::Overflow(_))
        ));
        assert_eq!(
            parse_duration("18446744073709551615ns"),
            Ok(Duration::from_nanos(u64::MAX))
        );
        assert!(parse_duration("5000000h").is_ok());
    }

    #[test]
    fn formats_like_a_policy_file() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(7), "7ns"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_micros(20), "20us"),
            (ms(100), "100ms"),
            (ms(1500), "1.5s"),
            (ms(90_000), "1m30s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_secs(10), "10s"),
        ];
        for (d, text) in cases {
            assert_eq!(GoDuration(d).to_string(), text);
            assert_eq!(parse_duration(text), Ok(d), "round trip of {text}");
        }
    }

    /// A served optional duration of 0 ms is none, as `0s` is in a policy
    /// file; before, a client reading `perTryTimeoutMs: 0` timed every
    /// attempt out at once.
    #[test]
    fn zero_milliseconds_read_as_none() {
        #[derive(serde::Deserialize)]
        struct Timeout {
            #[serde(with = "millis::option")]
            t: Option<Duration>,
        }
        let read = |text: &str| serde_json::from_str::<Timeout>(text).unwrap().t;
        assert_eq!(read(r#"{"t": 0}"#), None);
        assert_eq!(read(r#"{"t": null}"#), None);
        assert_eq!(read(r#"{"t": 1.5}"#), Some(Duration::from_micros(1500)));
    }
}
