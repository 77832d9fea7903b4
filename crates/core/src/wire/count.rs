//! Counts as JSON numbers: whole and not negative, written with or without a
//! zero fraction (`5` or `5.0`). Many languages hold every JSON number as a
//! double, and some write a whole double with its `.0`; JSON Schema calls
//! both integers.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Error, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// A count: `deserialize_with = "count::whole"`.
pub fn whole<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(WholeVisitor)
}

/// An optional count (`null` or absent: none).
pub fn optional<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Option::<Whole>::deserialize(d).map(|count| count.map(|Whole(n)| n))
}

/// Counts by name, e.g. retries by attempt number.
pub fn by_name<'de, 'a, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<Cow<'a, str>, u64>, D::Error> {
    d.deserialize_map(ByNameVisitor)
}

struct Whole(u64);

impl<'de> Deserialize<'de> for Whole {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        whole(d).map(Whole)
    }
}

struct WholeVisitor;

/// 2^64, the first double past `u64::MAX`.
const PAST_U64: f64 = 18_446_744_073_709_551_616.0;

impl Visitor<'_> for WholeVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a whole number, 0 or more")
    }

    fn visit_u64<E: Error>(self, n: u64) -> Result<u64, E> {
        Ok(n)
    }

    fn visit_i64<E: Error>(self, n: i64) -> Result<u64, E> {
        u64::try_from(n).map_err(|_| E::custom(format!("must not be negative, found {n}")))
    }

    fn visit_f64<E: Error>(self, n: f64) -> Result<u64, E> {
        if n >= 0.0 && n.fract() == 0.0 && n < PAST_U64 {
            Ok(n as u64)
        } else {
            Err(E::custom(format!(
                "expected a whole number, 0 or more, found {n}"
            )))
        }
    }
}

struct ByNameVisitor;

impl<'de> Visitor<'de> for ByNameVisitor {
    type Value = BTreeMap<Cow<'static, str>, u64>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of counts")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = BTreeMap::new();
        while let Some((name, Whole(count))) = map.next_entry::<String, Whole>()? {
            out.insert(Cow::Owned(name), count);
        }
        Ok(out)
    }
}
