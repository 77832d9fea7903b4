// Tests of what the gate hears from each answer (overloadOn), and of
// Retry-After read as the Rust library reads it.

package dependency

import (
	"testing"
	"time"

	"github.com/stormguard/stormguard/clients/go/gate"
	"github.com/stormguard/stormguard/clients/go/policy"
	"github.com/stormguard/stormguard/clients/go/retryon"
)

// TestTheGateHearsOverloadOnlyFromWhatOverloadOnCovers: a failure the
// policy retries is an overload only if gate.overloadOn covers it or its
// answer asked for a wait (Retry-After); a timeout is a timeout only if
// overloadOn lists timeout; anything else is accepted.
func TestTheGateHearsOverloadOnlyFromWhatOverloadOnCovers(t *testing.T) {
	defaults, _ := policy.Policy{}.Gate()
	only503, _ := policy.Policy{"gate": map[string]any{"overloadOn": []any{503.0}}}.Gate()
	serverErrors, _ := policy.Policy{"gate": map[string]any{"overloadOn": []any{"5xx"}}}.Gate()
	if defaults.OverloadOn != retryon.Overload() || only503.OverloadOn.String() != "[503]" || serverErrors.OverloadOn.String() != "[5xx]" {
		t.Fatalf("%v %v %v", defaults.OverloadOn, only503.OverloadOn, serverErrors.OverloadOn)
	}
	for _, c := range []struct {
		name   string
		policy gate.Policy
		end    ending
		want   gate.Signal
	}{
		{"a retried 500", defaults, ending{retryable: true, status: 500}, gate.Accepted},
		{"a retried 502", defaults, ending{retryable: true, status: 502}, gate.Accepted},
		{"a retried 503", defaults, ending{retryable: true, status: 503}, gate.Overloaded},
		{"a retried 429", defaults, ending{retryable: true, status: 429}, gate.Overloaded},
		{"a retried 500 with Retry-After", defaults, ending{retryable: true, status: 500, retryAfter: true}, gate.Overloaded},
		{"a 500 not retried, with Retry-After", defaults, ending{status: 500, retryAfter: true}, gate.Accepted},
		{"a 503 not retried", defaults, ending{status: 503}, gate.Accepted},
		{"a retried connect failure", defaults, ending{retryable: true, failure: "connect-failure"}, gate.Overloaded},
		{"a connect failure not retried", defaults, ending{failure: "connect-failure"}, gate.Accepted},
		{"a retried reset", defaults, ending{retryable: true, failure: "reset"}, gate.Accepted},
		{"a retried timeout error", defaults, ending{retryable: true, failure: "timeout"}, gate.Overloaded},
		{"a per-try timeout", defaults, ending{timedOut: true, retryable: true, failure: "timeout"}, gate.TimedOut},
		{"a per-try timeout not retried", defaults, ending{timedOut: true, failure: "timeout"}, gate.TimedOut},
		{"an answer", defaults, ending{status: 200}, gate.Accepted},
		{"a per-try timeout, overloadOn [503]", only503, ending{timedOut: true, retryable: true, failure: "timeout"}, gate.Accepted},
		{"a retried connect failure, overloadOn [503]", only503, ending{retryable: true, failure: "connect-failure"}, gate.Accepted},
		{"a retried 503, overloadOn [503]", only503, ending{retryable: true, status: 503}, gate.Overloaded},
		{"a retried 500, overloadOn [5xx]", serverErrors, ending{retryable: true, status: 500}, gate.Overloaded},
		{"a retried 429, overloadOn [5xx]", serverErrors, ending{retryable: true, status: 429}, gate.Accepted},
		{"a retried 429 with Retry-After, overloadOn [5xx]", serverErrors, ending{retryable: true, status: 429, retryAfter: true}, gate.Overloaded},
	} {
		if got := signal(c.policy, c.end); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// TestARetryAfterIsReadAsTheRustLibraryReadsIt: delay-seconds or an HTTP
// date; anything else is no Retry-After.
func TestARetryAfterIsReadAsTheRustLibraryReadsIt(t *testing.T) {
	for value, readable := range map[string]bool{
		"120":                               true,
		" 0 ":                               true,
		"+5":                                true,
		"Wed, 21 Oct 2015 07:28:00 GMT":     true,
		"Wednesday, 21-Oct-15 07:28:00 GMT": true,
		"":                                  false,
		"-1":                                false,
		"1.5":                               false,
		"soon":                              false,
	} {
		if _, ok := parseRetryAfter(value, time.Now()); ok != readable {
			t.Errorf("Retry-After %q readable: %v", value, !readable)
		}
	}
}
