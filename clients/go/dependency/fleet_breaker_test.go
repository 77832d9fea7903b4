// Tests that fleet-scoped breakers send one set of trials through the
// daemon, not one a process.

package dependency

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormguard/stormguard/clients/go/breaker"
	"github.com/stormguard/stormguard/clients/go/policy"
	"github.com/stormguard/stormguard/clients/go/report"
)

// Breakers that three failures open for a second, two trials at once and
// two to close, whose half-open is the fleet's.
const fleetBreakerPolicy = `defaults:
  maxRetries: 0
services:
  ledger:
    circuitBreaker: {enabled: true, consecutiveFailures: 3, openTimeout: 1s, halfOpenMaxCalls: 2, successThreshold: 2, scope: fleet}
`

// TestFleetScopedBreakersSendOneSetOfTrialsThroughTheDaemon: eight
// processes' breakers open on a dependency that is down; over the next
// 2.5 s each alone would send its trials twice (32 in all), the fleet sends
// halfOpenMaxCalls per half-open, as the daemon grants them. Once the
// dependency is back, every breaker closes.
func TestFleetScopedBreakersSendOneSetOfTrialsThroughTheDaemon(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(fleetBreakerPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	daemon := serve(t, file)
	var down atomic.Bool
	var reached atomic.Int64
	down.Store(true)
	ledger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer ledger.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var processes []*Dependency
	for i := 0; i < 8; i++ {
		watch, err := policy.Start(ctx, policy.Config{Daemon: daemon, Services: []string{"ledger"}})
		if err != nil {
			t.Fatal(err)
		}
		defer watch.Stop()
		reporter, err := report.Start(report.Config{Daemon: daemon, Instance: fmt.Sprintf("ledger-caller-%d", i), Interval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = reporter.Stop(context.Background()) }()
		d := New(watch, "ledger", reporter)
		processes = append(processes, d)
		go func() {
			for ctx.Err() == nil {
				_ = d.Call(ctx, "/entries", attempt(ledger.URL))
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	all := func(want func(breaker.State) bool) bool {
		for _, d := range processes {
			if b := d.Breaker(); b == nil || !want(b.State()) {
				return false
			}
		}
		return true
	}
	if !eventually(func() bool { return all(func(s breaker.State) bool { return s != breaker.Closed }) }) {
		t.Fatal("not every breaker opened")
	}
	before := reached.Load()
	time.Sleep(2500 * time.Millisecond)
	if trials := reached.Load() - before; trials < 1 || trials > 6 {
		t.Fatalf("%d trials reached the dependency while it was down", trials)
	}
	if slots := metric(t, daemon, `stormguard_fleet_breaker_trial_slots_total{service="ledger"}`); slots < 1 {
		t.Fatalf("the daemon granted %v slots", slots)
	}
	down.Store(false)
	if !eventually(func() bool { return all(func(s breaker.State) bool { return s == breaker.Closed }) }) {
		t.Fatal("not every breaker closed once the dependency was back")
	}
}
