// Package vectortest reads the vectors stormguard-core generates for the
// clients to replay (clients/vectors), for the tests of more than one
// package.
package vectortest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// RetryOnCase is one list of retry-on.json: the conditions, and the
// statuses (100 to 599) and failures core says the list covers.
type RetryOnCase struct {
	RetryOn  []any    `json:"retryOn"`
	Statuses []int    `json:"statuses"`
	Failures []string `json:"failures"`
}

// RetryOn is every case of clients/vectors/retry-on.json, read from a test
// two folders below clients/go.
func RetryOn(t *testing.T) []RetryOnCase {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "..", "vectors", "retry-on.json"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []RetryOnCase `json:"cases"`
	}
	if err := json.Unmarshal(text, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) == 0 {
		t.Fatal("no cases")
	}
	return file.Cases
}

// Check fails t unless the statuses from 100 to 599 that coversStatus
// covers, and the failures of `failures` that coversFailure covers, are
// those core says c's list covers.
func (c RetryOnCase) Check(t *testing.T, failures []string, coversStatus func(int) bool, coversFailure func(string) bool) {
	t.Helper()
	statuses := []int{}
	for s := 100; s < 600; s++ {
		if coversStatus(s) {
			statuses = append(statuses, s)
		}
	}
	covered := []string{}
	for _, f := range failures {
		if coversFailure(f) {
			covered = append(covered, f)
		}
	}
	if !reflect.DeepEqual(statuses, c.Statuses) || !reflect.DeepEqual(covered, c.Failures) {
		t.Errorf("%v: %v %v, core says %v %v", c.RetryOn, statuses, covered, c.Statuses, c.Failures)
	}
}
