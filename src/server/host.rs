//! The `Host` header as RFC 9112 §3.2 requires a server to check it: an
//! HTTP/1.1 request without one, any request with more than one, or one
//! whose value is not a host and optional port, is answered 400.
//!
//! A proxy or a cache in front of the daemon may pick a different `Host`
//! from a request than the daemon would; refusing the ambiguous ones keeps
//! them from meaning two things.

use axum::http::{header, HeaderMap, Version};

/// What is wrong with a request's `Host`, if anything. HTTP/2 and later
/// carry the authority in `:authority` and are not checked here.
pub fn problem(version: Version, headers: &HeaderMap) -> Option<&'static str> {
    if version > Version::HTTP_11 {
        return None;
    }
    let mut hosts = headers.get_all(header::HOST).iter();
    let Some(host) = hosts.next() else {
        return (version == Version::HTTP_11).then_some("an HTTP/1.1 request needs a Host header");
    };
    if hosts.next().is_some() {
        return Some("a request may have one Host header, not several");
    }
    (!is_host(host.as_bytes()))
        .then_some("the Host header is not a host name or address with an optional port")
}

/// `uri-host [ ":" port ]` (RFC 9110 §7.2), or empty.
fn is_host(value: &[u8]) -> bool {
    let (host, port) = match value.iter().rposition(|&b| b == b':') {
        // An IPv6 literal's colons are inside its brackets.
        Some(colon) if !value[colon..].contains(&b']') => (&value[..colon], Some(&value[colon + 1..])),
        _ => (value, None),
    };
    port.is_none_or(|port| port.iter().all(u8::is_ascii_digit)) && (is_ip_literal(host) || is_reg_name(host))
}

fn is_ip_literal(host: &[u8]) -> bool {
    match host {
        [b'[', inner @ .., b']'] => {
            !inner.is_empty() && inner.iter().all(|&b| b.is_ascii_hexdigit() || b":.".contains(&b))
        }
        _ => false,
    }
}

/// Unreserved characters, sub-delims and percent-encodings (RFC 3986 §3.2.2).
fn is_reg_name(host: &[u8]) -> bool {
    host.iter()
        .all(|&b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(hosts: &[&'static str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for host in hosts {
            map.append(header::HOST, HeaderValue::from_static(host));
        }
        map
    }

    #[test]
    fn one_valid_host_passes() {
        for host in [
            "stormguard",
            "stormguard.svc.cluster.local:8080",
            "10.0.0.7:80",
            "[::1]:8080",
            "[fe80::1]",
            "",
        ] {
            assert_eq!(problem(Version::HTTP_11, &headers(&[host])), None, "{host:?}");
        }
    }

    #[test]
    fn missing_repeated_or_malformed_hosts_are_named() {
        assert!(problem(Version::HTTP_11, &headers(&[]))
            .unwrap()
            .contains("needs a Host"));
        assert!(problem(Version::HTTP_11, &headers(&["a", "b"]))
            .unwrap()
            .contains("not several"));
        assert!(problem(Version::HTTP_10, &headers(&["a", "a"])).is_some());
        for host in ["a b", "user@host", "host:80x", "host/path", "[::1", "a:1:2"] {
            assert!(problem(Version::HTTP_11, &headers(&[host])).is_some(), "{host:?}");
        }
    }

    #[test]
    fn http_1_0_may_leave_it_out_and_http_2_is_not_checked() {
        assert_eq!(problem(Version::HTTP_10, &headers(&[])), None);
        assert_eq!(problem(Version::HTTP_2, &headers(&[])), None);
    }
}
