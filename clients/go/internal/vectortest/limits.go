// A walk over a block's ranges at their ends, for the breaker's and the
// gate's tests.

package vectortest

import (
	"strings"
	"testing"

	"github.com/stormguard/stormguard/clients/go/internal/limits"
)

// EveryRangeOf tries each of the daemon's ranges for the settings of the
// policy block named block ("gate", "circuitBreaker"): its ends and the
// values just inside and outside them. shape, if given, adjusts a range
// first (a bound that depends on another setting). read reads one value
// of the setting name as a served block would hold it, and says what is
// wrong with it or nil. The test fails wherever the client allows or
// refuses other than the daemon, and unless the block has want ranges.
func EveryRangeOf(t *testing.T, block string, want int, shape func(limits.Range) limits.Range, read func(name string, r limits.Range, value float64) error) {
	t.Helper()
	checked := 0
	for _, r := range limits.All() {
		if !strings.HasPrefix(r.Key, block+".") {
			continue
		}
		name := strings.TrimPrefix(r.Key, block+".")
		checked++
		if shape != nil {
			r = shape(r)
		}
		for _, edge := range r.Edges() {
			err := read(name, r, edge.Value)
			if (err == nil) != edge.Allowed {
				t.Errorf("%s = %v (%s): allowed %v here, %v by the daemon (%v)", r.Key, edge.Value, r.Unit, err == nil, edge.Allowed, err)
			}
		}
	}
	if checked != want {
		t.Fatalf("%d %s ranges, want %d", checked, block, want)
	}
}
