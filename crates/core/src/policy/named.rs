//! Values a policy file writes by name (`jitter: full`, `dependency:
//! token-bucket`): one macro gives each such enum its names, its
//! `Display`, and its reading as a leaf, with an error that suggests the
//! closest name.

use super::tree::{did_you_mean, Errors, KeyPath, Node, PolicyError};

/// The names a policy file writes an enum's values by, in one place: the
/// `NAMES` listed in errors, `name()`, `Display`, and reading and writing
/// the value as a leaf (`what` names it in an unknown value's error).
macro_rules! named_values {
    ($ty:ident, $what:literal, { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// Every value as written in a policy file.
            pub const NAMES: &'static [&'static str] = &[$($name),+];

            /// The value a policy file writes as `name`, if any.
            pub fn from_name(name: &str) -> Option<Self> {
                [$($ty::$variant),+]
                    .into_iter()
                    .find(|value| value.name() == name)
            }

            /// The name as written in a policy file.
            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }
        }

        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl $crate::policy::Leaf for $ty {
            fn from_node(
                node: &$crate::policy::Node,
                path: &$crate::policy::KeyPath,
                errors: &mut $crate::policy::Errors,
            ) -> Option<Self> {
                let all = [$($ty::$variant),+];
                $crate::policy::named::named_leaf(node, path, errors, $what, $ty::NAMES).map(|i| all[i])
            }

            fn write(&self) -> String {
                self.name().to_string()
            }
        }
    };
}

/// The index in `names` of the name `node` holds, or an error naming the
/// closest one.
pub(crate) fn named_leaf(
    node: &Node,
    path: &KeyPath,
    errors: &mut Errors,
    what: &str,
    names: &[&str],
) -> Option<usize> {
    let Node::Str(found) = node else {
        errors.push(PolicyError::value(
            path,
            format!("expected one of {}, found {}", names.join(", "), node.kind()),
        ));
        return None;
    };
    let index = names.iter().position(|name| name == found);
    if index.is_none() {
        errors.push(PolicyError::value(path, unknown_name(what, found, names)));
    }
    index
}

pub(super) fn unknown_name(what: &str, found: &str, names: &[&str]) -> String {
    match did_you_mean(found, names) {
        Some(suggestion) => format!("unknown {what} {found:?}; did you mean {suggestion:?}?"),
        None => format!("unknown {what} {found:?}; expected one of: {}", names.join(", ")),
    }
}
