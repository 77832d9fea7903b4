// Tests that a value out of range is told what the daemon tells it, word for
// word.

package limits

import (
	"encoding/json"
	"testing"
	"time"
)

// TestARefusalIsWordedAsTheDaemonWordsIt holds every value just outside a
// range to what core tells it in limits.json, word for word, durations
// included ("found 1h0m0.000000001s").
func TestARefusalIsWordedAsTheDaemonWordsIt(t *testing.T) {
	var decoded struct {
		Limits []struct {
			Key, Unit string
			Refusals  []struct {
				Value   float64
				Message string
			}
		}
	}
	if err := json.Unmarshal(file, &decoded); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, r := range decoded.Limits {
		for _, refusal := range r.Refusals {
			var err error
			switch r.Unit {
			case "count":
				err = Count(r.Key, uint32(refusal.Value))
			case "number":
				err = Number(r.Key, refusal.Value)
			case "duration":
				err = Duration(r.Key, time.Duration(refusal.Value))
			}
			if want := r.Key + " " + refusal.Message; err == nil || err.Error() != want {
				t.Errorf("%s %s %v: %v, not %q", r.Key, r.Unit, refusal.Value, err, want)
			}
			checked++
		}
	}
	if checked < 40 {
		t.Fatalf("only %d refusals in limits.json", checked)
	}
}
