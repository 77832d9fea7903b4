//! `reporters`: which service accounts may report about, and ask for the
//! pace of, each dependency, so that one compromised workload cannot speak
//! for another team's dependency. A dependency not listed is open to any
//! caller the daemon's token mode lets through.
//!
//! ```yaml
//! reporters:
//!   inventory: [shop/checkout, "warehouse/*"]
//! ```

use std::collections::BTreeMap;
use std::fmt;

use super::name::check_service_name;
use super::tree::{entries, Errors, KeyPath, Node, PolicyError};

/// The most entries `reporters` may list, over all dependencies.
pub const MAX_REPORTERS: usize = 10_000;

/// One allowed caller: a service account, or every one of a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reporter {
    /// `namespace/name`.
    Account {
        /// The namespace.
        namespace: String,
        /// The service account.
        name: String,
    },
    /// `namespace/*`.
    Namespace(String),
}

impl Reporter {
    fn admits(&self, namespace: &str, name: &str) -> bool {
        match self {
            Self::Account {
                namespace: n,
                name: a,
            } => n == namespace && a == name,
            Self::Namespace(n) => n == namespace,
        }
    }

    fn parse(text: &str) -> Result<Self, BadReporter> {
        let Some((namespace, name)) = text.split_once('/') else {
            return Err(BadReporter::Shape(text.into()));
        };
        if check_service_name(namespace).is_err() {
            return Err(BadReporter::Namespace(text.into()));
        }
        if name == "*" {
            return Ok(Self::Namespace(namespace.into()));
        }
        if !is_subdomain(name) {
            return Err(BadReporter::Account(text.into()));
        }
        Ok(Self::Account {
            namespace: namespace.into(),
            name: name.into(),
        })
    }
}

impl fmt::Display for Reporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Account { namespace, name } => write!(f, "{namespace}/{name}"),
            Self::Namespace(namespace) => write!(f, "{namespace}/*"),
        }
    }
}

/// A reporter entry that is not one, as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadReporter {
    /// Not two parts around a `/`.
    #[error("{0:?} is not NAMESPACE/SERVICE-ACCOUNT or NAMESPACE/*")]
    Shape(String),
    /// The namespace is not a Kubernetes namespace name.
    #[error("{0:?}: the namespace is not a DNS-1123 label (lowercase letters, digits and '-', at most 63)")]
    Namespace(String),
    /// The service account is not a Kubernetes service account name.
    #[error(
        "{0:?}: the service account is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253)"
    )]
    Account(String),
}

/// Whether `name` is a DNS-1123 subdomain, as service account names are.
fn is_subdomain(name: &str) -> bool {
    let labels_ok = name.split('.').all(|label| {
        !label.is_empty()
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    });
    name.len() <= 253 && labels_ok
}

/// The allow-list, by dependency.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reporters(BTreeMap<String, Vec<Reporter>>);

impl Reporters {
    /// Whether nothing is listed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The dependencies listed.
    pub fn dependencies(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// Who may speak for `dependency`; `None` when it is not listed (open).
    pub fn of(&self, dependency: &str) -> Option<&[Reporter]> {
        self.0.get(dependency).map(Vec::as_slice)
    }

    /// Whether the service account `namespace/name` may speak for
    /// `dependency`: listed among its reporters, or the dependency not listed.
    pub fn admits(&self, dependency: &str, namespace: &str, name: &str) -> bool {
        self.of(dependency)
            .is_none_or(|reporters| reporters.iter().any(|r| r.admits(namespace, name)))
    }

    /// Decodes `reporters: {dependency: [NAMESPACE/NAME | NAMESPACE/*, ...]}`.
    pub(crate) fn decode(node: &Node, path: &KeyPath, errors: &mut Errors) -> Self {
        let mut listed = BTreeMap::new();
        for (dependency, value) in entries(node, path, errors) {
            let at = path.key(dependency);
            if let Err(problem) = check_service_name(dependency) {
                errors.push(PolicyError::key(&at, problem));
            }
            let Node::Seq(items) = value else {
                errors.push(PolicyError::value(
                    &at,
                    format!(
                        "expected a list of who may report about {dependency} (NAMESPACE/SERVICE-ACCOUNT or NAMESPACE/*), found {}",
                        value.kind()
                    ),
                ));
                continue;
            };
            let reporters = items
                .iter()
                .enumerate()
                .filter_map(|(i, item)| reporter(item, &at.index(i), errors))
                .collect();
            listed.insert(dependency.to_owned(), reporters);
        }
        let count: usize = listed.values().map(Vec::len).sum();
        if count > MAX_REPORTERS {
            errors.push(PolicyError::value(
                path,
                format!("lists {count} reporters; at most {MAX_REPORTERS} are allowed (use NAMESPACE/* for a whole namespace)"),
            ));
        }
        Self(listed)
    }
}

fn reporter(node: &Node, path: &KeyPath, errors: &mut Errors) -> Option<Reporter> {
    let Node::Str(text) = node else {
        errors.push(PolicyError::value(
            path,
            format!(
                "expected NAMESPACE/SERVICE-ACCOUNT or NAMESPACE/*, found {}",
                node.kind()
            ),
        ));
        return None;
    };
    Reporter::parse(text)
        .map_err(|problem| errors.push(PolicyError::value(path, problem.to_string())))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tree::build::{map, s};

    fn decoded(node: Node) -> (Reporters, Vec<String>) {
        let mut errors = Errors::new();
        let reporters = Reporters::decode(&node, &KeyPath::root().key("reporters"), &mut errors);
        (reporters, errors.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn listed_dependencies_admit_their_reporters_and_others_are_open() {
        let (reporters, errors) = decoded(map(vec![(
            "inventory",
            Node::Seq(vec![s("shop/checkout"), s("warehouse/*")]),
        )]));
        assert!(errors.is_empty(), "{errors:?}");
        assert!(reporters.admits("inventory", "shop", "checkout"));
        assert!(reporters.admits("inventory", "warehouse", "restock"));
        assert!(!reporters.admits("inventory", "shop", "intruder"));
        assert!(!reporters.admits("inventory", "shopping", "checkout"));
        assert!(
            reporters.admits("payments", "shop", "intruder"),
            "not listed: open"
        );
        let (empty, _) = decoded(map(vec![("inventory", Node::Seq(vec![]))]));
        assert!(
            !empty.admits("inventory", "shop", "checkout"),
            "an empty list admits nobody"
        );
    }

    #[test]
    fn each_bad_entry_is_named_with_what_is_wrong() {
        let (_, errors) = decoded(map(vec![
            ("Inventory", Node::Seq(vec![s("shop/checkout")])),
            ("orders", s("shop/checkout")),
            (
                "payments",
                Node::Seq(vec![
                    s("checkout"),
                    s("Shop/checkout"),
                    s("shop/check_out"),
                    Node::Seq(vec![]),
                    s("shop/*"),
                    s("system.x/a"),
                ]),
            ),
        ]));
        let has = |at: &str, what: &str| errors.iter().any(|e| e.starts_with(at) && e.contains(what));
        assert!(has("reporters.Inventory", "DNS-1123"), "{errors:?}");
        assert!(has("reporters.orders", "expected a list"), "{errors:?}");
        assert!(
            has("reporters.payments[0]", "NAMESPACE/SERVICE-ACCOUNT"),
            "{errors:?}"
        );
        assert!(has("reporters.payments[1]", "the namespace"), "{errors:?}");
        assert!(has("reporters.payments[2]", "the service account"), "{errors:?}");
        assert!(has("reporters.payments[3]", "found"), "{errors:?}");
        assert!(has("reporters.payments[5]", "the namespace"), "{errors:?}");
        assert_eq!(errors.len(), 7, "{errors:?}");
    }
}
