//! `GET /v1/policies?services=a,b`: several services' policies in one
//! answer, so that a process watching ten dependencies holds one long-poll.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::policy::{check_service_name, InvalidServiceName, ResolvedPolicy};

/// The query parameter that names the services, comma-separated.
pub const SERVICES_PARAM: &str = "services";

/// Most services one request may name.
pub const MAX_SELECTED: usize = 1000;

/// The answer: each service asked for, by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelectedPolicies {
    /// Each service's policy, as `GET /v1/policies/{service}` serves it, with its ETag.
    pub services: BTreeMap<String, SelectedPolicy>,
}

/// One service's entry: its resolved policy and the ETag that
/// `GET /v1/policies/{service}` gives it, so a client can tell which changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelectedPolicy {
    /// The service's own ETag, quoted.
    pub etag: String,
    /// Its resolved policy.
    #[serde(flatten)]
    pub resolved: ResolvedPolicy,
}

/// Why a `services=` value selects nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadSelection {
    /// A name in it is not a service name (an empty list has an empty one).
    #[error("{SERVICES_PARAM}: {0}")]
    Name(#[from] InvalidServiceName),
    /// It names more than [`MAX_SELECTED`] services.
    #[error("{SERVICES_PARAM}: {0} services named; at most {MAX_SELECTED} per request")]
    TooMany(usize),
}

/// The names in a `services=` value, sorted and without repeats; an error
/// names the first one that is not a service name, or says the list is
/// empty or too long.
pub fn parse_selection(value: &str) -> Result<Vec<String>, BadSelection> {
    let mut names: Vec<String> = Vec::new();
    for name in value.split(',') {
        check_service_name(name)?;
        names.push(name.to_string());
    }
    names.sort_unstable();
    names.dedup();
    if names.len() > MAX_SELECTED {
        return Err(BadSelection::TooMany(names.len()));
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selection_is_sorted_and_without_repeats() {
        assert_eq!(parse_selection("b,a,b").unwrap(), ["a", "b"]);
    }

    #[test]
    fn a_bad_name_or_an_empty_list_is_named() {
        let error = parse_selection("a,Bad_Name").unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("services: service name \"Bad_Name\""),
            "{error}"
        );
        let empty = |value| match parse_selection(value) {
            Err(BadSelection::Name(name)) => name.problem == crate::policy::NameProblem::Empty,
            _ => false,
        };
        assert!(empty("") && empty("a,,b"));
    }

    #[test]
    fn too_many_names_are_refused() {
        let many: Vec<String> = (0..=MAX_SELECTED).map(|i| format!("s{i}")).collect();
        let error = parse_selection(&many.join(",")).unwrap_err();
        assert_eq!(error, BadSelection::TooMany(MAX_SELECTED + 1));
        assert!(error.to_string().contains("at most 1000"), "{error}");
    }
}
