//! Service names: the one rule every key naming a service follows.

/// The longest service name: a DNS-1123 label's 63 characters.
pub const MAX_SERVICE_NAME_LEN: usize = 63;

/// A name that is not a service name, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("service name {name:?} {problem} (service names are DNS-1123 labels, like Kubernetes Service names)")]
pub struct InvalidServiceName {
    /// The name as given.
    pub name: String,
    /// What is wrong with it.
    pub problem: NameProblem,
}

/// What makes a name not a DNS-1123 label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NameProblem {
    /// No characters.
    #[error("is empty")]
    Empty,
    /// More than [`MAX_SERVICE_NAME_LEN`] characters.
    #[error("is longer than {MAX_SERVICE_NAME_LEN} characters")]
    TooLong,
    /// A character other than a lowercase letter, a digit or `-`.
    #[error("may contain only lowercase letters, digits and '-'")]
    Character,
    /// It starts or ends with `-`.
    #[error("must start and end with a letter or digit")]
    Edge,
}

/// Checks that `name` is a DNS-1123 label, as Kubernetes Service names are:
/// 1 to 63 lowercase letters, digits and `-`, starting and ending alphanumeric.
pub fn check_service_name(name: &str) -> Result<(), InvalidServiceName> {
    let valid_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    let problem = if name.is_empty() {
        NameProblem::Empty
    } else if name.len() > MAX_SERVICE_NAME_LEN {
        NameProblem::TooLong
    } else if !name.chars().all(valid_char) {
        NameProblem::Character
    } else if name.starts_with('-') || name.ends_with('-') {
        NameProblem::Edge
    } else {
        return Ok(());
    };
    Err(InvalidServiceName {
        name: name.to_string(),
        problem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_names_are_dns_labels() {
        assert!(check_service_name("payment-service").is_ok());
        assert!(check_service_name("a1").is_ok());
        assert!(check_service_name(&"a".repeat(63)).is_ok());
        let long = "a".repeat(64);
        let cases = [
            ("", NameProblem::Empty),
            ("-a", NameProblem::Edge),
            ("a-", NameProblem::Edge),
            ("A", NameProblem::Character),
            ("a_b", NameProblem::Character),
            ("a.b", NameProblem::Character),
            (long.as_str(), NameProblem::TooLong),
        ];
        for (bad, problem) in cases {
            let error = check_service_name(bad).unwrap_err();
            assert_eq!((error.name.as_str(), error.problem), (bad, problem));
        }
        assert_eq!(
            check_service_name("A").unwrap_err().to_string(),
            "service name \"A\" may contain only lowercase letters, digits and '-' \
             (service names are DNS-1123 labels, like Kubernetes Service names)"
        );
    }
}
