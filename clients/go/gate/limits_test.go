// Tests that the gate's settings are held to the daemon's ranges, at each
// end.

package gate

import (
	"strings"
	"testing"

	"github.com/stormguard/stormguard/clients/go/internal/limits"
	"github.com/stormguard/stormguard/clients/go/internal/vectortest"
)

// TestEveryRangeIsTheDaemons: each gate range the daemon validates, at its
// ends and just inside and outside them, is allowed or refused here as the
// daemon allows or refuses it.
func TestEveryRangeIsTheDaemons(t *testing.T) {
	neverBelowMinRate := func(r limits.Range) limits.Range {
		if r.Key == "gate.maxRate" {
			return r.From(defaults().MinRate) // as limits.json says
		}
		return r
	}
	vectortest.EveryRangeOf(t, "gate", 9, neverBelowMinRate, func(name string, r limits.Range, value float64) error {
		block := map[string]any{name: value}
		if r.Unit == "duration" {
			block = map[string]any{name + "Ms": value / 1e6}
		}
		// gate.maxWait.critical is the criticalMs of the maxWait object.
		if class := strings.TrimPrefix(name, "maxWait."); class != name {
			block = map[string]any{"maxWait": map[string]any{class + "Ms": value / 1e6}}
		}
		p, err := defaults().FromMap(block)
		if err != nil {
			return err
		}
		return p.Check()
	})
}
