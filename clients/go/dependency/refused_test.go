// Tests of what the breaker hears when no send gate paces the dependency:
// a refusal as overloaded trips it half-open, an error the dependency
// answered with opens it.

package dependency

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stormguard/stormguard/clients/go/breaker"
)

// refusedPolicy has no gate (the default block, off), and a breaker that
// trips after two failures in a row, one trial at a time.
const refusedPolicy = paymentsRetried +
	"    circuitBreaker: {enabled: true, consecutiveFailures: 2, openTimeout: 60s, halfOpenMaxCalls: 1}\n"

// answering is a payments server that answers status to every call, with
// a Retry-After of a second if retryAfter; the count of calls it saw.
func answering(t *testing.T, status int, retryAfter bool) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		if retryAfter {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(server.Close)
	return server, &calls
}

// TestWithoutAGateRefusalsTripTheBreakerHalfOpenAndErrorsOpenIt: with no
// gate to pace them, two 503s in a row trip the breaker half-open, not
// open: the third attempt is its first trial, refused too, and the fourth
// is held back until the trials earn it (a 503 says overloaded, or down;
// the trials tell which). So does a 500 whose answer asks for a wait
// (Retry-After). Two 500s in a row, errors the dependency answered with,
// open it as ever.
func TestWithoutAGateRefusalsTripTheBreakerHalfOpenAndErrorsOpenIt(t *testing.T) {
	watch := watchServed(t, refusedPolicy, "payments")

	refusing := New(watch, "payments", nil)
	if refusing.Gate() != nil || refusing.Breaker() == nil {
		t.Fatalf("the policy's gate is %v, its breaker %v", refusing.Gate(), refusing.Breaker())
	}
	payments, calls := answering(t, http.StatusServiceUnavailable, false)
	err := refusing.Call(context.Background(), "/charge", attempt(payments.URL))
	var gaveUp *CallError
	var held *breaker.NotPermitted
	if !errors.As(err, &gaveUp) || gaveUp.Reason != CircuitOpen || gaveUp.Attempts != 3 || !errors.As(err, &held) || held.State != breaker.HalfOpen {
		t.Fatalf("%v: want the fourth attempt held back by the half-open breaker", err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d attempts sent: two refusals trip it, the third is its first trial", n)
	}
	if state := refusing.Breaker().State(); state != breaker.HalfOpen {
		t.Fatalf("503s left the breaker %s, want half-open", state)
	}

	asking := New(watch, "payments", nil)
	payments, calls = answering(t, http.StatusInternalServerError, true)
	client := &http.Client{Transport: asking.Transport(nil)}
	response, err := client.Get(payments.URL + "/charge")
	if err == nil {
		response.Body.Close()
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d attempts sent, want 3: %v", n, err)
	}
	if state := asking.Breaker().State(); state != breaker.HalfOpen {
		t.Fatalf("500s with a Retry-After left the breaker %s, want half-open", state)
	}

	failing := New(watch, "payments", nil)
	payments, calls = answering(t, http.StatusInternalServerError, false)
	err = failing.Call(context.Background(), "/charge", attempt(payments.URL))
	if !errors.As(err, &gaveUp) || gaveUp.Reason != CircuitOpen || gaveUp.Attempts != 2 || !errors.As(err, &held) || held.State != breaker.Open {
		t.Fatalf("%v: want the third attempt refused by the open breaker", err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d attempts sent, want the two that opened it", n)
	}
	if state := failing.Breaker().State(); state != breaker.Open {
		t.Fatalf("500s left the breaker %s, want open", state)
	}
}
