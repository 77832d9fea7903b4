package policy

// Failures without an HTTP status that a policy may retry.
var Failures = []string{"connect-failure", "timeout", "reset"}

// RetriesStatus says whether the policy retries an answer with HTTP
// status, as the Rust library decides from retryOn: "5xx" is every 5xx but
// 501 (no retry can fix Not Implemented), "gateway-error" is 502 to 504,
// and a number is that status.
func (p Policy) RetriesStatus(status int) bool {
	conditions, _ := p["retryOn"].([]any)
	for _, c := range conditions {
		switch c := c.(type) {
		case string:
			if c == "5xx" && status >= 500 && status < 600 && status != 501 {
				return true
			}
			if c == "gateway-error" && status >= 502 && status <= 504 {
				return true
			}
		case float64:
			if int(c) == status {
				return true
			}
		}
	}
	return false
}

// RetriesFailure says whether the policy retries a failure without a
// status: "connect-failure", "timeout" or "reset".
func (p Policy) RetriesFailure(failure string) bool {
	conditions, _ := p["retryOn"].([]any)
	for _, c := range conditions {
		if c == failure {
			return true
		}
	}
	return false
}
