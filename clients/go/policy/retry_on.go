// The policy's retryOn list: which statuses and failures it retries.

package policy

import "github.com/stormguard/stormguard/clients/go/retryon"

// Failures without an HTTP status that a policy may retry.
var Failures = retryon.Failures

// RetryOn is the policy's retryOn list (package retryon). The daemon serves
// only valid lists; an entry that is not a condition is left out.
func (p Policy) RetryOn() retryon.Conditions {
	conditions, _ := retryon.Parse("retryOn", p["retryOn"])
	return conditions
}

// RetriesStatus says whether the policy retries an answer with HTTP
// status, as the Rust library decides from retryOn: "5xx" is every 5xx but
// 501 (no retry can fix Not Implemented), "gateway-error" is 502 to 504,
// and a number is that status.
func (p Policy) RetriesStatus(status int) bool {
	return p.RetryOn().CoversStatus(status)
}

// RetriesFailure says whether the policy retries a failure without a
// status: "connect-failure", "timeout" or "reset".
func (p Policy) RetriesFailure(failure string) bool {
	return p.RetryOn().CoversFailure(failure)
}
