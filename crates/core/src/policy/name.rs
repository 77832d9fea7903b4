//! Service names: the one rule every key naming a service follows.

/// Checks that `name` is a DNS-1123 label, as Kubernetes Service names are:
/// 1 to 63 lowercase letters, digits and `-`, starting and ending alphanumeric.
pub fn check_service_name(name: &str) -> Result<(), String> {
    let valid_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    let problem = if name.is_empty() {
        "is empty"
    } else if name.len() > 63 {
        "is longer than 63 characters"
    } else if !name.chars().all(valid_char) {
        "may contain only lowercase letters, digits and '-'"
    } else if name.starts_with('-') || name.ends_with('-') {
        "must start and end with a letter or digit"
    } else {
        return Ok(());
    };
    Err(format!(
        "service name {name:?} {problem} (service names are DNS-1123 labels, like Kubernetes Service names)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_names_are_dns_labels() {
        assert!(check_service_name("payment-service").is_ok());
        assert!(check_service_name("a1").is_ok());
        assert!(check_service_name(&"a".repeat(63)).is_ok());
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", &"a".repeat(64)] {
            assert!(check_service_name(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
