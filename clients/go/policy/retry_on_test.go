package policy

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// TestEveryStatusAndFailureIsDecidedAsCoreDecides replays the shared
// vectors, which stormguard-core generates.
func TestEveryStatusAndFailureIsDecidedAsCoreDecides(t *testing.T) {
	text, err := os.ReadFile("../../vectors/retry-on.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []struct {
			RetryOn  []any    `json:"retryOn"`
			Statuses []int    `json:"statuses"`
			Failures []string `json:"failures"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(text, &file); err != nil {
		t.Fatal(err)
	}
	for _, c := range file.Cases {
		p := Policy{"retryOn": c.RetryOn}
		statuses := []int{}
		for s := 100; s < 600; s++ {
			if p.RetriesStatus(s) {
				statuses = append(statuses, s)
			}
		}
		failures := []string{}
		for _, f := range Failures {
			if p.RetriesFailure(f) {
				failures = append(failures, f)
			}
		}
		if !reflect.DeepEqual(statuses, c.Statuses) || !reflect.DeepEqual(failures, c.Failures) {
			t.Errorf("%v: %v %v, core says %v %v", c.RetryOn, statuses, failures, c.Statuses, c.Failures)
		}
	}
}
