// Tests of the retry budget against core's verdict vectors, and of a bad
// setting named.

package budget

import (
	"encoding/json"
	"os"
	"testing"
	"time"
)

// TestEveryVerdictIsCores replays the shared vectors, which stormguard-core generates.
func TestEveryVerdictIsCores(t *testing.T) {
	text, err := os.ReadFile("../../vectors/budget.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Scenarios []struct {
			RetryRatio          float64             `json:"retryRatio"`
			MinRetriesPerSecond uint32              `json:"minRetriesPerSecond"`
			TTLNanos            int64               `json:"ttlNanos"`
			Scope               string              `json:"scope"`
			Ops                 [][]json.RawMessage `json:"ops"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal(text, &file); err != nil {
		t.Fatal(err)
	}
	refused, answers, fleets := 0, 0, 0
	for i, s := range file.Scenarios {
		b, err := New(s.RetryRatio, s.MinRetriesPerSecond, time.Duration(s.TTLNanos))
		if err != nil {
			t.Fatal(err)
		}
		if s.Scope == "fleet" {
			fleets++
		}
		floor := NewLocalFloor(float64(s.MinRetriesPerSecond))
		for _, op := range s.Ops {
			var kind string
			var at uint64
			json.Unmarshal(op[0], &kind)
			json.Unmarshal(op[1], &at)
			switch kind {
			case "deposit":
				b.Deposit(at)
				continue
			case "answer":
				var part float64
				var processes uint64
				json.Unmarshal(op[2], &part)
				json.Unmarshal(op[3], &processes)
				b.SetMinRetriesPerSecond(floor.Answered(part, processes))
				answers++
				continue
			case "unreachable":
				b.SetMinRetriesPerSecond(floor.Unreachable())
				continue
			}
			var want bool
			json.Unmarshal(op[2], &want)
			if got := b.TryRetry(at); got != want {
				t.Fatalf("scenario %d, retry at %d ns: %v, core says %v", i, at, got, want)
			}
			if !want {
				refused++
			}
		}
	}
	if refused == 0 || answers == 0 || fleets == 0 {
		t.Fatalf("the vectors must refuse retries (%d) and hold fleet scenarios (%d) with answers (%d)", refused, fleets, answers)
	}
}

func TestABadSettingIsNamed(t *testing.T) {
	if _, err := New(-1, 0, time.Second); err == nil || err.Error() != "retryRatio must be 0 or more" {
		t.Fatalf("%v", err)
	}
}
