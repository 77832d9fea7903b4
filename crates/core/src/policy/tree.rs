//! A format-neutral tree of configuration values and the errors found while
//! decoding it, each tied to the key path where it was found.
//!
//! The policy loader turns YAML into a [`Node`]; decoding walks the tree and
//! collects every error instead of stopping at the first, so an operator sees
//! all that is wrong with a file at once.

use std::fmt;

/// One configuration value, as parsed from a file.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// `null`, `~` or an empty value.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A whole number (covers the full `i64` and `u64` ranges).
    Int(i128),
    /// A number with a fraction or exponent.
    Float(f64),
    /// A string.
    Str(String),
    /// A list.
    Seq(Vec<Node>),
    /// A mapping, in file order.
    Map(Vec<(Node, Node)>),
    /// A value the format allows but a policy does not (a YAML tag, say).
    Unsupported(String),
}

impl Node {
    /// What kind of value this is, for error messages ("found a list").
    pub fn kind(&self) -> String {
        match self {
            Node::Null => "null".into(),
            Node::Bool(b) => format!("boolean {b}"),
            Node::Int(i) => format!("number {i}"),
            Node::Float(x) => format!("number {x}"),
            Node::Str(s) => format!("string {s:?}"),
            Node::Seq(_) => "a list".into(),
            Node::Map(_) => "a mapping".into(),
            Node::Unsupported(what) => what.clone(),
        }
    }
}

/// One step in a key path: a mapping key or a list index.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Segment {
    /// A mapping key.
    Key(String),
    /// A position in a list.
    Index(usize),
}

/// Where in a document a value sits, e.g. `services.payment-service.maxRetries`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyPath(pub Vec<Segment>);

impl KeyPath {
    /// The document root.
    pub fn root() -> Self {
        Self::default()
    }

    /// This path extended by a mapping key.
    pub fn key(&self, key: impl Into<String>) -> Self {
        let mut segments = self.0.clone();
        segments.push(Segment::Key(key.into()));
        Self(segments)
    }

    /// This path extended by a list index.
    pub fn index(&self, index: usize) -> Self {
        let mut segments = self.0.clone();
        segments.push(Segment::Index(index));
        Self(segments)
    }

    /// This path extended by a dotted key path such as `budget.ttl`.
    pub fn dotted(&self, dotted: &str) -> Self {
        dotted.split('.').fold(self.clone(), |path, key| path.key(key))
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(document)");
        }
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Key(key) if i == 0 => f.write_str(key)?,
                Segment::Key(key) => write!(f, ".{key}")?,
                Segment::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// Whether an error points at a mapping key itself or at the value under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// The key is wrong (unknown, misspelt, not a string).
    Key,
    /// The value is wrong.
    Value,
}

/// One thing wrong with a policy document, and where.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyError {
    /// The key path of the offending key or value.
    pub path: KeyPath,
    /// Whether the key or its value is at fault.
    pub target: Target,
    /// What is wrong, said for the person who edits the file.
    pub message: String,
}

impl PolicyError {
    /// An error about the value at `path`.
    pub fn value(path: &KeyPath, message: impl fmt::Display) -> Self {
        Self {
            path: path.clone(),
            target: Target::Value,
            message: message.to_string(),
        }
    }

    /// An error about the key at the end of `path`.
    pub fn key(path: &KeyPath, message: impl fmt::Display) -> Self {
        Self {
            path: path.clone(),
            target: Target::Key,
            message: message.to_string(),
        }
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Errors collected while decoding; decoding goes on after each one.
pub type Errors = Vec<PolicyError>;

/// The closest of `candidates` to `word`, if it is close enough to be a likely
/// typo (`maxDelays` → `maxDelay`, `max_retries` → `maxRetries`).
pub fn did_you_mean<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let folded = |s: &str| s.replace(['_', '-'], "").to_ascii_lowercase();
    let word_folded = folded(word);
    if let Some(exact) = candidates.iter().find(|c| folded(c) == word_folded) {
        return Some(exact);
    }
    candidates
        .iter()
        .map(|c| (strsim::jaro_winkler(&word_folded, &folded(c)), *c))
        .filter(|(score, _)| *score >= 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// The error for a key that is not one of `known`, with a suggestion.
pub fn unknown_key(path: &KeyPath, key: &str, known: &[&str]) -> PolicyError {
    let message = match did_you_mean(key, known) {
        Some(suggestion) => format!("unknown key {key:?}; did you mean {suggestion:?}?"),
        None => format!("unknown key {key:?}; expected one of: {}", known.join(", ")),
    };
    PolicyError::key(path, message)
}

/// The string entries of a mapping node; reports non-mappings and non-string
/// keys. A `null` node is an empty mapping (an empty override block).
pub fn entries<'a>(node: &'a Node, path: &KeyPath, errors: &mut Errors) -> Vec<(&'a str, &'a Node)> {
    match node {
        Node::Null => Vec::new(),
        Node::Map(pairs) => pairs
            .iter()
            .filter_map(|(key, value)| match key {
                Node::Str(key) => Some((key.as_str(), value)),
                other => {
                    errors.push(PolicyError::value(
                        path,
                        format!("keys must be strings, found {} as a key", other.kind()),
                    ));
                    None
                }
            })
            .collect(),
        other => {
            errors.push(PolicyError::value(
                path,
                format!("expected a mapping of keys, found {}", other.kind()),
            ));
            Vec::new()
        }
    }
}

/// Trees written by hand, for tests.
#[cfg(test)]
pub(crate) mod build {
    use super::Node;

    /// A string node.
    pub(crate) fn s(text: &str) -> Node {
        Node::Str(text.into())
    }

    /// A mapping node of `pairs`.
    pub(crate) fn map(pairs: Vec<(&str, Node)>) -> Node {
        Node::Map(pairs.into_iter().map(|(k, v)| (s(k), v)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_paths_display_dotted_with_indices() {
        let path = KeyPath::root()
            .key("services")
            .key("payment-service")
            .key("delays")
            .index(2);
        assert_eq!(path.to_string(), "services.payment-service.delays[2]");
        assert_eq!(KeyPath::root().dotted("budget.ttl").to_string(), "budget.ttl");
    }

    #[test]
    fn suggests_close_keys_and_other_spellings() {
        let known = ["maxRetries", "maxDelay", "initialDelay", "multiplier"];
        assert_eq!(did_you_mean("maxDelays", &known), Some("maxDelay"));
        assert_eq!(did_you_mean("max_retries", &known), Some("maxRetries"));
        assert_eq!(did_you_mean("MaxRetries", &known), Some("maxRetries"));
        assert_eq!(did_you_mean("initalDelay", &known), Some("initialDelay"));
        assert_eq!(did_you_mean("colour", &known), None);
    }

    #[test]
    fn entries_of_null_are_empty_and_non_maps_are_errors() {
        let mut errors = Errors::new();
        assert!(entries(&Node::Null, &KeyPath::root(), &mut errors).is_empty());
        assert!(errors.is_empty());
        entries(&Node::Seq(vec![]), &KeyPath::root().key("defaults"), &mut errors);
        assert_eq!(errors[0].message, "expected a mapping of keys, found a list");
        let map = Node::Map(vec![(Node::Int(1), Node::Null)]);
        entries(&map, &KeyPath::root(), &mut errors);
        assert_eq!(errors[1].message, "keys must be strings, found number 1 as a key");
    }
}
