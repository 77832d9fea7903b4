// Tests that every retryOn list core serves is read and covers what core
// covers.

package retryon

import (
	"testing"

	"github.com/stormguard/stormguard/clients/go/internal/vectortest"
)

// TestEveryListCoreServesIsReadAndCoversWhatCoreCovers replays the shared
// retryOn vectors, which stormguard-core generates, through Parse: each
// list is valid, and covers the statuses and failures core says it does.
func TestEveryListCoreServesIsReadAndCoversWhatCoreCovers(t *testing.T) {
	for _, c := range vectortest.RetryOn(t) {
		conditions, err := Parse("retryOn", c.RetryOn)
		if err != nil {
			t.Errorf("%v: %v", c.RetryOn, err)
			continue
		}
		c.Check(t, Failures, conditions.CoversStatus, conditions.CoversFailure)
	}
}

// TestAListIsASetAndItsBadEntriesAreLeftOut: order does not matter; the
// first bad entry is the error, and the valid ones are read all the same;
// Go integers are status codes too.
func TestAListIsASetAndItsBadEntriesAreLeftOut(t *testing.T) {
	overload, err := Parse("gate.overloadOn", []any{503.0, 429, "timeout", "connect-failure"})
	if err != nil || overload != Overload() {
		t.Fatalf("%v %v", overload, err)
	}
	read, err := Parse("retryOn", []any{"reset", true, 599.0, "reset", 600.0, "gateway-error"})
	if err == nil || err.Error() != "retryOn[1]: expected a condition (connect-failure, timeout, reset, 5xx, gateway-error) or a status code, found boolean true" {
		t.Fatal(err)
	}
	if read.String() != "[reset, gateway-error, 599]" {
		t.Fatal(read)
	}
	if !read.CoversStatus(503) || read.CoversStatus(500) || !read.CoversStatus(599) || read.CoversFailure("timeout") || !read.CoversFailure("reset") || read.CoversFailure("5xx") {
		t.Fatal(read)
	}
	if none, err := Parse("retryOn", []any{}); err != nil || none != (Conditions{}) || none.String() != "[]" {
		t.Fatalf("%v %v", none, err)
	}
}
