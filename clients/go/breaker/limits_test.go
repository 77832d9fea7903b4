package breaker

import (
	"strings"
	"testing"

	"github.com/stormguard/stormguard/clients/go/internal/limits"
)

// TestEveryRangeIsTheDaemons: each circuitBreaker range the daemon
// validates, at its ends and just inside and outside them, is allowed or
// refused here as the daemon allows or refuses it.
func TestEveryRangeIsTheDaemons(t *testing.T) {
	checked := 0
	for _, r := range limits.All() {
		if !strings.HasPrefix(r.Key, "circuitBreaker.") {
			continue
		}
		checked++
		name := strings.TrimPrefix(r.Key, "circuitBreaker.")
		for _, edge := range r.Edges() {
			block := map[string]any{}
			switch {
			case name == "slidingWindow" && r.Unit == "count":
				block[name] = map[string]any{"type": "count", "calls": edge.Value}
			case name == "slidingWindow":
				block[name] = map[string]any{"type": "time", "durationMs": edge.Value / 1e6}
			case r.Unit == "duration":
				block[name+"Ms"] = edge.Value / 1e6
			default:
				block[name] = edge.Value
			}
			p, err := valid().FromMap(block)
			if err == nil {
				err = p.Check()
			}
			if (err == nil) != edge.Allowed {
				t.Errorf("%s = %v (%s): allowed %v here, %v by the daemon (%v)", r.Key, edge.Value, r.Unit, err == nil, edge.Allowed, err)
			}
		}
	}
	if checked != 10 {
		t.Fatalf("%d circuitBreaker ranges, want 10", checked)
	}
}
