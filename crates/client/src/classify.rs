//! How a client stack's outcome reads in a policy's terms. A policy's
//! `retryOn` names failures (`connect-failure`, `timeout`, `reset`, `5xx`,
//! `429`); an HTTP client gives responses and errors. A [`Classify`] says
//! which response or error is which [`Failure`]; the policy then decides
//! whether it is retried, and the reports count it.

use std::error::Error;
use std::io::ErrorKind;
use std::time::SystemTime;

use http::header::RETRY_AFTER;
use http::HeaderMap;
use stormguard_core::retry::{parse_retry_after, Failure};

/// Which responses and errors of a client stack are failures, and which
/// [`Failure`] each stands for.
pub trait Classify<R, E> {
    /// The failure `response` stands for, or `None` when it is an answer
    /// the caller wanted.
    fn response(&self, response: &R) -> Option<Failure>;

    /// The failure a stack's error stands for.
    fn error(&self, error: &E) -> Failure;
}

/// HTTP's reading: a status of 400 or more is a failure (with its
/// `Retry-After`); an error is a failure to connect, a timeout or a reset,
/// as the first I/O error among its causes says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpStatus;

impl<B, E: Error + 'static> Classify<http::Response<B>, E> for HttpStatus {
    fn response(&self, response: &http::Response<B>) -> Option<Failure> {
        status_failure(response.status().as_u16(), response.headers())
    }

    fn error(&self, error: &E) -> Failure {
        failure_of(error)
    }
}

/// gRPC's reading, for responses whose status is in their headers (a
/// "trailers-only" answer, as servers and proxies give an error at once):
/// `grpc-status` read as the HTTP status its code stands for, an
/// HTTP status of 400 or more (a proxy's) as [`HttpStatus`] reads it. A
/// status that comes only in trailers, after the response began, is the
/// caller's to judge: the response was already returned.
///
/// | gRPC code | reads as |
/// | --- | --- |
/// | `UNAVAILABLE` | 503 |
/// | `RESOURCE_EXHAUSTED` | 429 |
/// | `INTERNAL`, `UNKNOWN`, `DATA_LOSS` | 500 |
/// | `DEADLINE_EXCEEDED` | a timeout |
/// | `UNIMPLEMENTED` | 501 |
/// | `INVALID_ARGUMENT`, `FAILED_PRECONDITION`, `OUT_OF_RANGE` | 400 |
/// | `UNAUTHENTICATED` | 401 |
/// | `PERMISSION_DENIED` | 403 |
/// | `NOT_FOUND` | 404 |
/// | `ALREADY_EXISTS`, `ABORTED` | 409 |
/// | `CANCELLED` | 499 |
///
/// So the policy's `5xx` retries `UNAVAILABLE`, `INTERNAL`, `UNKNOWN` and
/// `DATA_LOSS`; `gateway-error` retries `UNAVAILABLE`; `429` retries
/// `RESOURCE_EXHAUSTED`; `timeout` retries `DEADLINE_EXCEEDED`. This is
/// the mapping of `google.rpc.Code` to HTTP that gRPC gateways use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GrpcStatus;

impl<B, E: Error + 'static> Classify<http::Response<B>, E> for GrpcStatus {
    fn response(&self, response: &http::Response<B>) -> Option<Failure> {
        if let Some(failure) = status_failure(response.status().as_u16(), response.headers()) {
            return Some(failure);
        }
        let code = response
            .headers()
            .get("grpc-status")?
            .to_str()
            .ok()?
            .parse::<u16>()
            .ok()?;
        let status = match code {
            0 => return None,
            4 => return Some(Failure::Timeout),
            1 => 499,
            3 | 9 | 11 => 400,
            5 => 404,
            6 | 10 => 409,
            7 => 403,
            8 => 429,
            12 => 501,
            14 => 503,
            16 => 401,
            _ => 500,
        };
        Some(Failure::Status {
            code: status,
            retry_after: None,
        })
    }

    fn error(&self, error: &E) -> Failure {
        failure_of(error)
    }
}

/// The failure a status of 400 or more stands for, with its `Retry-After`.
pub(crate) fn status_failure(status: u16, headers: &HeaderMap) -> Option<Failure> {
    (status >= 400).then(|| Failure::Status {
        code: status,
        retry_after: headers
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| parse_retry_after(value, SystemTime::now())),
    })
}

/// The failure an error stands for, as the first I/O error among its
/// causes says: refused or unreachable is [`Failure::Connect`], timed out
/// (or a tokio timeout) [`Failure::Timeout`], anything else, and an error
/// with no I/O cause (a connection closed mid-answer), [`Failure::Reset`].
pub fn failure_of(error: &(dyn Error + 'static)) -> Failure {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if error.is::<tokio::time::error::Elapsed>() {
            return Failure::Timeout;
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                ErrorKind::ConnectionRefused
                | ErrorKind::AddrNotAvailable
                | ErrorKind::HostUnreachable
                | ErrorKind::NetworkUnreachable => Failure::Connect,
                ErrorKind::TimedOut => Failure::Timeout,
                _ => Failure::Reset,
            };
        }
        cause = error.source();
    }
    Failure::Reset
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, headers: &[(&str, &str)]) -> http::Response<()> {
        let mut builder = http::Response::builder().status(status);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap()
    }

    fn http(response: &http::Response<()>) -> Option<Failure> {
        Classify::<_, std::io::Error>::response(&HttpStatus, response)
    }

    fn grpc(response: &http::Response<()>) -> Option<Failure> {
        Classify::<_, std::io::Error>::response(&GrpcStatus, response)
    }

    #[test]
    fn a_status_of_400_or_more_is_a_failure_with_its_retry_after() {
        assert_eq!(http(&response(200, &[])), None);
        assert_eq!(http(&response(304, &[])), None);
        assert_eq!(
            http(&response(503, &[("retry-after", "3")])),
            Some(Failure::Status {
                code: 503,
                retry_after: Some(std::time::Duration::from_secs(3))
            })
        );
        assert_eq!(
            http(&response(404, &[("retry-after", "soon")])),
            Some(Failure::Status {
                code: 404,
                retry_after: None
            })
        );
    }

    #[test]
    fn a_grpc_status_reads_as_the_http_status_it_stands_for() {
        let code = |c: &str| grpc(&response(200, &[("grpc-status", c)]));
        let status = |code| {
            Some(Failure::Status {
                code,
                retry_after: None,
            })
        };
        assert_eq!(code("0"), None);
        assert_eq!(
            grpc(&response(200, &[])),
            None,
            "a status in trailers is the caller's"
        );
        assert_eq!(code("14"), status(503));
        assert_eq!(code("8"), status(429));
        assert_eq!(code("13"), status(500));
        assert_eq!(code("4"), Some(Failure::Timeout));
        assert_eq!(code("12"), status(501));
        assert_eq!(code("3"), status(400));
        assert_eq!(code("5"), status(404));
        assert_eq!(code("x"), None, "not a code: not a failure this can name");
        assert_eq!(grpc(&response(502, &[])), status(502), "a proxy's status");
    }

    #[derive(Debug)]
    struct Wrapped(Box<dyn Error + 'static>);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("client error")
        }
    }

    impl Error for Wrapped {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&*self.0)
        }
    }

    #[test]
    fn an_error_reads_as_its_first_io_cause() {
        let io = |kind| Wrapped(Box::new(std::io::Error::from(kind)));
        assert_eq!(failure_of(&io(ErrorKind::ConnectionRefused)), Failure::Connect);
        assert_eq!(failure_of(&io(ErrorKind::TimedOut)), Failure::Timeout);
        assert_eq!(failure_of(&io(ErrorKind::ConnectionReset)), Failure::Reset);
        assert_eq!(failure_of(&Wrapped(Box::new(std::fmt::Error))), Failure::Reset);
    }

    #[tokio::test]
    async fn a_tokio_timeout_is_a_timeout() {
        let elapsed = tokio::time::timeout(std::time::Duration::ZERO, std::future::pending::<()>())
            .await
            .unwrap_err();
        assert_eq!(failure_of(&Wrapped(Box::new(elapsed))), Failure::Timeout);
    }
}
