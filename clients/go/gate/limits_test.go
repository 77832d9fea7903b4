package gate

import (
	"strings"
	"testing"

	"github.com/stormguard/stormguard/clients/go/internal/limits"
)

// TestEveryRangeIsTheDaemons: each gate range the daemon validates, at its
// ends and just inside and outside them, is allowed or refused here as the
// daemon allows or refuses it.
func TestEveryRangeIsTheDaemons(t *testing.T) {
	checked := 0
	for _, r := range limits.All() {
		if !strings.HasPrefix(r.Key, "gate.") {
			continue
		}
		checked++
		name := strings.TrimPrefix(r.Key, "gate.")
		if name == "maxRate" {
			// Never below minRate either, as limits.json says.
			r = r.From(defaults().MinRate)
		}
		for _, edge := range r.Edges() {
			block := map[string]any{name: edge.Value}
			if r.Unit == "duration" {
				block = map[string]any{name + "Ms": edge.Value / 1e6}
			}
			p, err := defaults().FromMap(block)
			if err == nil {
				err = p.Check()
			}
			if (err == nil) != edge.Allowed {
				t.Errorf("%s = %v (%s): allowed %v here, %v by the daemon (%v)", r.Key, edge.Value, r.Unit, err == nil, edge.Allowed, err)
			}
		}
	}
	if checked != 6 {
		t.Fatalf("%d gate ranges, want 6", checked)
	}
}
