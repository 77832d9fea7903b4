// The conformance scenarios of a fleet-scoped retry budget: its floor
// divided by the daemon, and falling back without it.

package conformance

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stormguard/stormguard/clients/go/dependency"
	"github.com/stormguard/stormguard/clients/go/policy"
	"github.com/stormguard/stormguard/clients/go/report"
)

// fleetBudgetText is the fleet-budget scenarios' policy file: payments's
// budget is the fleet's, 12 retries a second, with no ratio.
const fleetBudgetText = "defaults:\n  maxRetries: 3\nservices:\n  payments:\n    maxRetries: 2\n    budget:\n      scope: fleet\n      retryRatio: 0\n      minRetriesPerSecond: 12\n"

// budgetedProcess is a process calling payments under the policy served
// serves, reporting to daemon as instance when the test flushes (an hour's
// interval, and its first report held as long), after one successful call.
func budgetedProcess(t *testing.T, served, daemon, instance string) (*dependency.Dependency, *report.Reporter) {
	t.Helper()
	w := watch(t, policy.Config{Daemon: served, Services: []string{"payments"}, WatchWait: 2 * time.Second, MinPollInterval: 50 * time.Millisecond})
	r := startReporter(t, report.Config{Daemon: daemon, Instance: instance, Interval: time.Hour, FirstReport: time.Hour, Timeout: 500 * time.Millisecond})
	d := dependency.New(w, "payments", r)
	if err := d.Call(context.Background(), "/charge", func(context.Context) (int, error) { return 200, nil }); err != nil {
		t.Fatal(err)
	}
	return d, r
}

// floor is the floor d's budget holds now, in retries a second: its window
// is 10 s and its ratio 0, so what it allows, at any time, is 10 × the floor.
func floor(d *dependency.Dependency) float64 {
	return d.Budget().Allowed(0) / 10
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func fleetBudgetFile(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(fleetBudgetText), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func aFleetBudgetDivided(t *testing.T) {
	at := reserve(t)
	cmd := serve(t, at, fleetBudgetFile(t))
	at.Release() // once it is killed, nothing listens there
	daemon := daemonURL(at)
	first, firstReporter := budgetedProcess(t, daemon, daemon, "pod-1")
	second, secondReporter := budgetedProcess(t, daemon, daemon, "pod-2")
	for _, r := range []*report.Reporter{firstReporter, secondReporter} {
		if err := r.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if f := floor(first); !near(f, 12) {
		t.Fatalf("pod-1's floor is %v, not 12: it was alone when it reported", f)
	}
	if f := floor(second); !(f > 0 && f < 12) {
		t.Fatalf("pod-2's floor is %v, not its part of 12 between the two", f)
	}
	if n := metric(t, daemon, `stormguard_budget_processes{service="payments"}`); n != 2 {
		t.Fatalf("the daemon divides among %v processes", n)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	var unavailable *report.UnavailableError
	if err := secondReporter.Flush(context.Background()); !errors.As(err, &unavailable) {
		t.Fatalf("a flush to a killed daemon: %v", err)
	}
	if f := floor(second); !near(f, 6) {
		t.Fatalf("with the daemon gone pod-2's floor is %v, not 12 over the 2 processes last heard of", f)
	}
}

func aFleetBudgetFallsBack(t *testing.T) {
	at := reserve(t)
	serve(t, at, fleetBudgetFile(t))
	daemon := daemonURL(at)
	p := newProxy(t, daemon)
	p.set(func(p *proxy) {
		p.floorOnce = `{"accepted": 1, "fleetBudgets": {"payments": {"minRetriesPerSecond": 2.5, "processes": 4}}}`
	})
	d, r := budgetedProcess(t, daemon, p.URL, "pod-1")
	if f := floor(d); !near(f, 12) {
		t.Fatalf("before any answer the floor is %v, not the whole 12", f)
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f := floor(d); !near(f, 2.5) {
		t.Fatalf("after the answer the floor is %v, not the part 2.5", f)
	}
	var unavailable *report.UnavailableError
	if err := r.Flush(context.Background()); !errors.As(err, &unavailable) {
		t.Fatalf("the second flush: %v", err)
	}
	if f := floor(d); !near(f, 3) {
		t.Fatalf("with the daemon unreachable the floor is %v, not 12 over the 4 processes last heard of", f)
	}
}
