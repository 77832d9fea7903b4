package retryon

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// TestEveryListCoreServesIsReadAndCoversWhatCoreCovers replays the shared
// retryOn vectors, which stormguard-core generates, through Parse: each
// list is valid, and covers the statuses and failures core says it does.
func TestEveryListCoreServesIsReadAndCoversWhatCoreCovers(t *testing.T) {
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
	if len(file.Cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range file.Cases {
		conditions, err := Parse("retryOn", c.RetryOn)
		if err != nil {
			t.Errorf("%v: %v", c.RetryOn, err)
			continue
		}
		statuses := []int{}
		for s := 100; s < 600; s++ {
			if conditions.CoversStatus(s) {
				statuses = append(statuses, s)
			}
		}
		failures := []string{}
		for _, f := range Failures {
			if conditions.CoversFailure(f) {
				failures = append(failures, f)
			}
		}
		if !reflect.DeepEqual(statuses, c.Statuses) || !reflect.DeepEqual(failures, c.Failures) {
			t.Errorf("%v: %v %v, core says %v %v", c.RetryOn, statuses, failures, c.Statuses, c.Failures)
		}
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
