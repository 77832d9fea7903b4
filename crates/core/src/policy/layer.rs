//! Layered settings: a resolved policy is the built-in defaults, overlaid by
//! the file's `defaults`, overlaid by one service's override, key by key and
//! block by block.
//!
//! Every part of a policy implements [`Layered`]: a leaf value's layer is an
//! `Option` (set or not), a block's layer is a struct of its fields' layers,
//! so nested blocks merge key by key with no code per key.

use std::time::Duration;

use super::duration::{parse_duration, GoDuration};
use super::tree::{Errors, KeyPath, Node, PolicyError};

/// A part of a retry policy that is set in layers.
pub trait Layered: Sized {
    /// The same settings as written in one layer: every key optional.
    type Spec: Default + Clone + std::fmt::Debug + PartialEq;

    /// Overwrites what `spec` sets, leaving the rest as it is.
    fn apply(&mut self, spec: &Self::Spec);

    /// Appends the dotted key paths that `spec` sets, under `prefix`.
    fn set_keys(spec: &Self::Spec, prefix: &str, out: &mut Vec<String>);

    /// Decodes one layer from `node`, pushing every error found.
    fn decode(node: &Node, path: &KeyPath, errors: &mut Errors) -> Self::Spec;

    /// Appends every dotted key path this part has, under `prefix`.
    fn all_keys(prefix: &str, out: &mut Vec<String>);

    /// Appends every dotted key path under `prefix` with its value as a
    /// policy file writes it (`initialDelay`, `200ms`).
    fn written(&self, prefix: &str, out: &mut Vec<(String, String)>);
}

/// A single value in a policy: decoded from one node, replaced whole by a layer.
pub trait Leaf: Sized + Clone + std::fmt::Debug + PartialEq {
    /// Decodes a non-null node; `None` after pushing an error if it is wrong.
    fn from_node(node: &Node, path: &KeyPath, errors: &mut Errors) -> Option<Self>;

    /// The value as a policy file writes it.
    fn write(&self) -> String;
}

/// Implements [`Layered`] for leaf types: a layer either sets the value or not.
macro_rules! layered_leaves {
    ($($ty:ty),* $(,)?) => {$(
        impl $crate::policy::layer::Layered for $ty {
            type Spec = Option<$ty>;

            fn apply(&mut self, spec: &Option<$ty>) {
                if let Some(value) = spec {
                    *self = value.clone();
                }
            }

            fn set_keys(spec: &Option<$ty>, prefix: &str, out: &mut Vec<String>) {
                if spec.is_some() {
                    out.push(prefix.to_owned());
                }
            }

            fn all_keys(prefix: &str, out: &mut Vec<String>) {
                out.push(prefix.to_owned());
            }

            fn written(&self, prefix: &str, out: &mut Vec<(String, String)>) {
                out.push((prefix.to_owned(), <$ty as $crate::policy::layer::Leaf>::write(self)));
            }

            fn decode(
                node: &$crate::policy::tree::Node,
                path: &$crate::policy::tree::KeyPath,
                errors: &mut $crate::policy::tree::Errors,
            ) -> Option<$ty> {
                match node {
                    $crate::policy::tree::Node::Null => None,
                    node => <$ty as $crate::policy::layer::Leaf>::from_node(node, path, errors),
                }
            }
        }
    )*};
}
pub(crate) use layered_leaves;

/// Declares a block of policy settings once; derives its layer struct, its
/// merge, which keys a layer set, and its decoder with unknown-key errors.
macro_rules! policy_block {
    (
        $(#[$meta:meta])*
        pub struct $name:ident, layer $spec:ident {
            $( $(#[$field_meta:meta])* $field:ident : $ty:ty = $key:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            $( $(#[$field_meta])* pub $field: $ty, )*
        }

        #[doc = concat!("One layer of [`", stringify!($name), "`]: only the keys that layer sets.")]
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct $spec {
            $( #[doc = concat!("`", $key, "`, if set.")] pub $field: <$ty as $crate::policy::layer::Layered>::Spec, )*
        }

        impl $name {
            /// The keys of this block as written in a policy file.
            pub const KEYS: &'static [&'static str] = &[$($key),*];
        }

        impl $crate::policy::layer::Layered for $name {
            type Spec = $spec;

            fn apply(&mut self, spec: &$spec) {
                $( $crate::policy::layer::Layered::apply(&mut self.$field, &spec.$field); )*
            }

            fn set_keys(spec: &$spec, prefix: &str, out: &mut Vec<String>) {
                $(
                    <$ty as $crate::policy::layer::Layered>::set_keys(
                        &spec.$field,
                        &$crate::policy::layer::join_key(prefix, $key),
                        out,
                    );
                )*
            }

fn all_keys(prefix: &str, out: &mut Vec<String>) {
                $(
                    <$ty as $crate::policy::layer::Layered>::all_keys(
                        &$crate::policy::layer::join_key(prefix, $key),
                        out,
                    );
                )*
            }

            fn written(&self, prefix: &str, out: &mut Vec<(String, String)>) {
                $(
                    $crate::policy::layer::Layered::written(
                        &self.$field,
                        &$crate::policy::layer::join_key(prefix, $key),
                        out,
                    );
                )*
            }

            fn decode(
                node: &$crate::policy::tree::Node,
                path: &$crate::policy::tree::KeyPath,
                errors: &mut $crate::policy::tree::Errors,
            ) -> $spec {
                let mut spec = $spec::default();
                for (key, value) in $crate::policy::tree::entries(node, path, errors) {
                    let at = path.key(key);
                    match key {
                        $( $key => spec.$field = <$ty as $crate::policy::layer::Layered>::decode(value, &at, errors), )*
                        other => errors.push($crate::policy::tree::unknown_key(&at, other, Self::KEYS)),
                    }
                }
                spec
            }
        }
    };
}
pub(crate) use policy_block;

/// `prefix.key`, or `key` at the top level.
pub fn join_key(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

fn wrong_type(path: &KeyPath, expected: &str, node: &Node, errors: &mut Errors) {
    errors.push(PolicyError::value(
        path,
        format!("expected {expected}, found {}", node.kind()),
    ));
}

impl Leaf for u32 {
    fn from_node(node: &Node, path: &KeyPath, errors: &mut Errors) -> Option<Self> {
        match node {
            Node::Int(i) if *i < 0 => {
                errors.push(PolicyError::value(
                    path,
                    format!("must not be negative, found {i}"),
                ));
                None
            }
            Node::Int(i) => match u32::try_from(*i) {
                Ok(value) => Some(value),
                Err(_) => {
                    errors.push(PolicyError::value(path, format!("{i} is too large")));
                    None
                }
            },
            other => {
                wrong_type(path, "a whole number", other, errors);
                None
            }
        }
    }

    fn write(&self) -> String {
        self.to_string()
    }
}

impl Leaf for f64 {
    fn from_node(node: &Node, path: &KeyPath, errors: &mut Errors) -> Option<Self> {
        match node {
            Node::Int(i) => Some(*i as f64),
            Node::Float(x) if x.is_finite() => Some(*x),
            Node::Float(x) => {
                errors.push(PolicyError::value(
                    path,
                    format!("must be a finite number, found {x}"),
                ));
                None
            }
            other => {
                wrong_type(path, "a number", other, errors);
                None
            }
        }
    }

    fn write(&self) -> String {
        self.to_string()
    }
}

impl Leaf for bool {
    fn from_node(node: &Node, path: &KeyPath, errors: &mut Errors) -> Option<Self> {
        match node {
            Node::Bool(b) => Some(*b),
            other => {
                wrong_type(path, "true or false", other, errors);
                None
            }
        }
    }

    fn write(&self) -> String {
        self.to_string()
    }
}

impl Leaf for Duration {
    fn from_node(node: &Node, path: &KeyPath, errors: &mut Errors) -> Option<Self> {
        match node {
            Node::Str(s) => match parse_duration(s) {
                Ok(d) => Some(d),
                Err(e) => {
                    errors.push(PolicyError::value(path, e.to_string()));
                    None
                }
            },
            Node::Int(_) | Node::Float(_) => {
                errors.push(PolicyError::value(
                    path,
                    format!(
                        "a bare number is not a duration; write {} with a unit, e.g. 100ms or 2s",
                        node.kind().trim_start_matches("number ")
                    ),
                ));
                None
            }
            other => {
                wrong_type(path, "a duration such as 250ms, 1.5s or 1m30s", other, errors);
                None
            }
        }
    }

    fn write(&self) -> String {
        GoDuration(*self).to_string()
    }
}

/// An optional limit, such as a timeout: `0s` means no limit.
impl Leaf for Option<Duration> {
    fn from_node(node: &Node, path: &KeyPath, errors: &mut Errors) -> Option<Self> {
        Duration::from_node(node, path, errors).map(|d| (!d.is_zero()).then_some(d))
    }

    fn write(&self) -> String {
        self.unwrap_or_default().write()
    }
}

impl Leaf for Vec<Duration> {
    fn from_node(node: &Node, path: &KeyPath, errors: &mut Errors) -> Option<Self> {
        let Node::Seq(items) = node else {
            wrong_type(path, "a list of durations", node, errors);
            return None;
        };
        let before = errors.len();
        let delays: Vec<Duration> = items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| Duration::from_node(item, &path.index(i), errors))
            .collect();
        (errors.len() == before).then_some(delays)
    }

    fn write(&self) -> String {
        let delays: Vec<String> = self.iter().map(Leaf::write).collect();
        format!("[{}]", delays.join(", "))
    }
}

layered_leaves!(u32, f64, bool, Duration, Option<Duration>, Vec<Duration>);

/// Shows a duration the way a file writes it; used in validation messages.
pub(crate) fn show(d: Duration) -> GoDuration {
    GoDuration(d)
}
