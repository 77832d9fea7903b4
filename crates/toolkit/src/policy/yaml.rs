//! The only module that calls the YAML library (`serde_yaml`), so that moving
//! to a maintained fork (`serde_yaml_ng`, `serde_norway`) is a one-file change.
//!
//! It parses bytes into the neutral [`Node`] tree, finds the line and column
//! of a key path, and reads and writes the plain values that `render` and
//! `diff` turn into YAML. The parser keeps no positions in its
//! values, but it does attach the current position to any error a visitor
//! raises; [`locate`] walks to the path and raises one there.

use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_yaml::Value;
use stormguard_core::policy::{KeyPath, Node, Segment, Target};

/// A 1-based line and column in the source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub column: usize,
}

/// Text that is not well-formed YAML (or not one YAML document).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// Where the parser stopped, if it knows.
    pub position: Option<Position>,
    /// The parser's message, without its own position suffix.
    pub message: String,
}

/// The default bound on `[` and `{` in a policy file.
///
/// libyaml's scanner takes time that grows faster than quadratically with the
/// nesting depth of flow collections (20,000 levels take 1.7 s, 100,000 over a
/// minute), and serde_yaml's own recursion limit only applies after the whole
/// file is scanned. A file nests no deeper than it has brackets, so counting
/// them bounds the time, whatever the quoting: 10,000 keeps the worst case
/// near 0.3 s and still allows thousands of services written in flow style.
pub const DEFAULT_MAX_FLOW_COLLECTIONS: usize = 10_000;

/// Parses `text` into a tree, refusing more than `max_flow_collections` brackets.
/// `value` as YAML text.
pub(crate) fn to_text<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_yaml::to_string(value).expect("plain data is YAML")
}

/// `text`, a value as a policy file writes it (`200ms`, `[5xx, 429]`, `3`),
/// as YAML reads it; text that is not YAML stays a string.
pub(crate) fn value_of(text: String) -> serde_json::Value {
    serde_yaml::from_str(&text).unwrap_or(serde_json::Value::String(text))
}

pub fn parse(text: &[u8], max_flow_collections: usize) -> Result<Node, SyntaxError> {
    check_encoding(text)?;
    check_flow_collections(text, max_flow_collections)?;
    let syntax_error = |e: serde_yaml::Error| {
        let position = e.location().map(|l| Position {
            line: l.line(),
            column: l.column(),
        });
        SyntaxError {
            message: explain(&strip_position(&e.to_string()), position, text),
            position,
        }
    };
    let mut value: Value = serde_yaml::from_slice(text).map_err(syntax_error)?;
    // `<<: *anchor` merge keys, as operators write them to share settings.
    value.apply_merge().map_err(syntax_error)?;
    Ok(to_node(value))
}

/// A policy file is UTF-8 (a UTF-8 byte-order mark is fine): say so plainly
/// rather than let the parser report a stray byte.
fn check_encoding(text: &[u8]) -> Result<(), SyntaxError> {
    let wide = [
        (&[0x00, 0x00, 0xFE, 0xFF][..], "UTF-32"),
        (&[0xFF, 0xFE, 0x00, 0x00][..], "UTF-32"),
        (&[0xFE, 0xFF][..], "UTF-16"),
        (&[0xFF, 0xFE][..], "UTF-16"),
    ];
    if let Some((_, encoding)) = wide.iter().find(|(bom, _)| text.starts_with(bom)) {
        return Err(SyntaxError {
            position: Some(Position { line: 1, column: 1 }),
            message: format!("the file is {encoding}; save it as UTF-8"),
        });
    }
    let Err(error) = std::str::from_utf8(text) else {
        return Ok(());
    };
    let at = error.valid_up_to();
    let line_start = text[..at].iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let valid = std::str::from_utf8(&text[line_start..at]).unwrap_or_default();
    Err(SyntaxError {
        position: Some(Position {
            line: text[..at].iter().filter(|b| **b == b'\n').count() + 1,
            column: valid.chars().count() + 1,
        }),
        message: format!(
            "byte 0x{:02X} is not valid UTF-8; save the file as UTF-8",
            text[at]
        ),
    })
}

/// libyaml's and serde_yaml's wording, said in the operator's terms where it is obscure.
fn explain(message: &str, position: Option<Position>, text: &[u8]) -> String {
    if message.contains("repetition limit exceeded") {
        return "aliases (*name) expand to too many values: an alias bomb is refused; write the values out"
            .into();
    }
    // serde_yaml's values stop at 64 bits; it names the number and the key path before it.
    if let Some((path, rest)) = message.split_once("invalid type: integer `") {
        let number = rest.split('`').next().unwrap_or(rest);
        return format!("{path}number {number} is too large for any setting");
    }
    if message.contains("cannot start any token") && position.is_some_and(|p| char_at(text, p) == Some('\t'))
    {
        return format!("{message}: a tab; YAML indents with spaces only");
    }
    message.to_owned()
}

/// The character at a 1-based line and column.
fn char_at(text: &[u8], position: Position) -> Option<char> {
    let text = std::str::from_utf8(text).ok()?;
    text.lines()
        .nth(position.line.checked_sub(1)?)?
        .chars()
        .nth(position.column.checked_sub(1)?)
}

fn check_flow_collections(text: &[u8], max: usize) -> Result<(), SyntaxError> {
    let Some(at) = text
        .iter()
        .enumerate()
        .filter(|(_, b)| matches!(b, b'[' | b'{'))
        .nth(max)
        .map(|(i, _)| i)
    else {
        return Ok(());
    };
    let line_start = text[..at].iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    Err(SyntaxError {
        position: Some(Position {
            line: text[..at].iter().filter(|b| **b == b'\n').count() + 1,
            column: at - line_start + 1,
        }),
        message: format!(
            "more than {max} flow collections ([ or {{); deep nesting makes YAML parsing slow, \
             so their number is capped: raise it with --max-flow-collections"
        ),
    })
}

/// serde_yaml appends " at line L column C"; the caller shows positions itself.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

fn to_node(value: Value) -> Node {
    match value {
        Value::Null => Node::Null,
        Value::Bool(b) => Node::Bool(b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Node::Int(i128::from(i)),
            (None, Some(u)) => Node::Int(i128::from(u)),
            _ => Node::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Node::Str(s),
        Value::Sequence(items) => Node::Seq(items.into_iter().map(to_node).collect()),
        Value::Mapping(map) => Node::Map(map.into_iter().map(|(k, v)| (to_node(k), to_node(v))).collect()),
        Value::Tagged(tagged) => {
            Node::Unsupported(format!("a YAML tag ({}), which policies do not use", tagged.tag))
        }
    }
}

/// The position of the key at the end of `path` (`Target::Key`) or of its value.
pub fn locate(text: &[u8], path: &KeyPath, target: Target) -> Option<Position> {
    let deserializer = serde_yaml::Deserializer::from_slice(text);
    let seed = Locate {
        rest: &path.0,
        target,
    };
    let error = seed.deserialize(deserializer).err()?;
    // The message is prefixed with the parser's own path ("defaults: ...").
    if !error.to_string().contains(FOUND) {
        return None;
    }
    error.location().map(|l| Position {
        line: l.line(),
        column: l.column(),
    })
}

/// The message of the error raised where the path ends.
const FOUND: &str = "stormguard: found";

fn found<E: de::Error>() -> E {
    E::custom(FOUND)
}

/// Walks towards `rest`, skipping everything else; errs at the destination.
struct Locate<'a> {
    rest: &'a [Segment],
    target: Target,
}

impl<'de> DeserializeSeed<'de> for Locate<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Locate<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Some((Segment::Key(wanted), tail)) = self.rest.split_first() else {
            return self.arrive();
        };
        let at_key = tail.is_empty() && self.target == Target::Key;
        while let Some(matched) = map.next_key_seed(KeyMatch { wanted, fail: at_key })? {
            if matched {
                return map.next_value_seed(Locate {
                    rest: tail,
                    target: self.target,
                });
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some((Segment::Index(wanted), tail)) = self.rest.split_first() else {
            return self.arrive();
        };
        for _ in 0..*wanted {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
        }
        seq.next_element_seed(Locate {
            rest: tail,
            target: self.target,
        })
        .map(drop)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.arrive()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.arrive()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.arrive()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.arrive()
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.arrive()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.arrive()
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.arrive()
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        self.arrive()
    }
}

impl Locate<'_> {
    /// Errs (so the parser attaches the position) if the path ends here.
    fn arrive<E: de::Error>(self) -> Result<(), E> {
        if self.rest.is_empty() {
            Err(found())
        } else {
            Ok(())
        }
    }
}

/// Reads a mapping key and says whether it is `wanted`; errs on it if `fail`.
struct KeyMatch<'a> {
    wanted: &'a str,
    fail: bool,
}

impl<'de> DeserializeSeed<'de> for KeyMatch<'_> {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KeyMatch<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a mapping key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        match key == self.wanted {
            true if self.fail => Err(found()),
            matched => Ok(matched),
        }
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(false)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
defaults:
  maxRetries: 3
  delays: [1s, 2s,
    3s]
services:
  payment-service:
    initialDelay: 200ms
  'quoted': {maxDelay: 5s}
";

    fn at(dotted: &str, target: Target) -> Option<(usize, usize)> {
        let path = KeyPath::root().dotted(dotted);
        locate(TEXT.as_bytes(), &path, target).map(|p| (p.line, p.column))
    }

    #[test]
    fn locates_keys_and_values() {
        assert_eq!(at("defaults.maxRetries", Target::Key), Some((2, 3)));
        assert_eq!(at("defaults.maxRetries", Target::Value), Some((2, 15)));
        assert_eq!(
            at("services.payment-service.initialDelay", Target::Value),
            Some((7, 19))
        );
        assert_eq!(at("services.quoted.maxDelay", Target::Value), Some((8, 24)));
        assert_eq!(at("services.quoted", Target::Key), Some((8, 3)));
        assert_eq!(at("services.missing", Target::Key), None);
    }

    #[test]
    fn locates_list_items() {
        let path = KeyPath::root().key("defaults").key("delays").index(2);
        let position = locate(TEXT.as_bytes(), &path, Target::Value).unwrap();
        assert_eq!((position.line, position.column), (4, 5));
    }

    #[test]
    fn syntax_errors_carry_a_position() {
        let error = parse(b"defaults:\n  maxRetries: [1,\n", 10).unwrap_err();
        assert!(error.position.is_some());
        assert!(!error.message.contains(" at line "));
    }

    #[test]
    fn encodings_other_than_utf8_are_named_with_their_position() {
        let latin1 = parse(b"defaults:\n  # caf\xe9\n", 10).unwrap_err();
        assert_eq!(latin1.position, Some(Position { line: 2, column: 8 }));
        assert!(
            latin1.message.contains("0xE9 is not valid UTF-8"),
            "{}",
            latin1.message
        );
        let utf16 = parse(&[0xFF, 0xFE, b'a', 0], 10).unwrap_err();
        assert!(utf16.message.contains("UTF-16"));
        assert!(
            parse(b"\xef\xbb\xbfdefaults: {}\n", 10).is_ok(),
            "a UTF-8 BOM is fine"
        );
    }

    #[test]
    fn obscure_parser_messages_are_explained() {
        let tab = parse(b"defaults:\n\tmaxRetries: 2\n", 10).unwrap_err();
        assert!(
            tab.message.ends_with("a tab; YAML indents with spaces only"),
            "{}",
            tab.message
        );
        let huge = parse(b"defaults:\n  maxRetries: 99999999999999999999999\n", 10).unwrap_err();
        assert!(
            huge.message
                .ends_with("number 99999999999999999999999 is too large for any setting"),
            "{}",
            huge.message
        );
    }

    #[test]
    fn duplicate_keys_are_syntax_errors() {
        let error = parse(b"defaults:\n  maxRetries: 1\n  maxRetries: 2\n", 10).unwrap_err();
        assert!(
            error.message.contains("duplicate entry with key \"maxRetries\""),
            "{}",
            error.message
        );
        assert_eq!(
            error.position.map(|p| p.line),
            Some(2),
            "the mapping holding the duplicate"
        );
    }

    #[test]
    fn flow_collections_are_counted_before_parsing() {
        assert!(parse(b"a: [[{b: 1}]]\n", 3).is_ok());
        let error = parse(b"a: [[{b: 1}]]\nc: ['[']\n", 3).unwrap_err();
        assert_eq!(error.position, Some(Position { line: 2, column: 4 }));
        assert!(error.message.contains("--max-flow-collections"));
        let deep = format!("a: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        let error = parse(deep.as_bytes(), DEFAULT_MAX_FLOW_COLLECTIONS).unwrap_err();
        assert_eq!(
            error.position,
            Some(Position {
                line: 1,
                column: 10_004
            })
        );
    }

    #[test]
    fn numbers_keep_their_kind() {
        let node = parse(b"a: 18446744073709551615\nb: -3\nc: 2.5\n", 10).unwrap();
        let Node::Map(pairs) = node else {
            panic!("not a map")
        };
        assert_eq!(pairs[0].1, Node::Int(18446744073709551615));
        assert_eq!(pairs[1].1, Node::Int(-3));
        assert_eq!(pairs[2].1, Node::Float(2.5));
    }
}
