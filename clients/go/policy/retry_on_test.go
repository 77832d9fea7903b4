// Tests that every retryOn list decides each status and failure as core
// does.

package policy

import (
	"testing"

	"github.com/stormguard/stormguard/clients/go/internal/vectortest"
)

// TestEveryStatusAndFailureIsDecidedAsCoreDecides replays the shared
// vectors, which stormguard-core generates.
func TestEveryStatusAndFailureIsDecidedAsCoreDecides(t *testing.T) {
	for _, c := range vectortest.RetryOn(t) {
		p := Policy{"retryOn": c.RetryOn}
		c.Check(t, Failures, p.RetriesStatus, p.RetriesFailure)
	}
}
