// Tests that the breaker's settings are held to the daemon's ranges, at each
// end.

package breaker

import (
	"testing"

	"github.com/stormguard/stormguard/clients/go/internal/limits"
	"github.com/stormguard/stormguard/clients/go/internal/vectortest"
)

// TestEveryRangeIsTheDaemons: each circuitBreaker range the daemon
// validates, at its ends and just inside and outside them, is allowed or
// refused here as the daemon allows or refuses it.
func TestEveryRangeIsTheDaemons(t *testing.T) {
	vectortest.EveryRangeOf(t, "circuitBreaker", 10, nil, func(name string, r limits.Range, value float64) error {
		block := map[string]any{}
		switch {
		case name == "slidingWindow" && r.Unit == "count":
			block[name] = map[string]any{"type": "count", "calls": value}
		case name == "slidingWindow":
			block[name] = map[string]any{"type": "time", "durationMs": value / 1e6}
		case r.Unit == "duration":
			block[name+"Ms"] = value / 1e6
		default:
			block[name] = value
		}
		p, err := valid().FromMap(block)
		if err != nil {
			return err
		}
		return p.Check()
	})
}
