// The conformance scenarios of a fleet-scoped breaker: a half-open the
// daemon runs, and one without the daemon.

package conformance

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stormguard/stormguard/clients/go/breaker"
	"github.com/stormguard/stormguard/clients/go/policy"
	"github.com/stormguard/stormguard/clients/go/report"
)

// fleetBreakerText is the fleet half-open scenarios' policy file: payments's
// breaker opens at two failures, for a second, and its half-open is the
// fleet's.
const fleetBreakerText = "defaults:\n  maxRetries: 3\nservices:\n  payments:\n    maxRetries: 2\n    circuitBreaker: {enabled: true, consecutiveFailures: 2, openTimeout: 1s, halfOpenMaxCalls: 1, successThreshold: 1, scope: fleet}\n"

const fleetBreakerState = `stormguard_fleet_breaker_state{service="payments"}`

// brokenProcess is a process calling payments whose breaker, under the
// policy daemon serves and tracked by a reporter asking daemon, two failed
// calls opened.
type brokenProcess struct {
	breaker  *breaker.Breaker
	born     time.Time
	reporter *report.Reporter
}

func startBroken(t *testing.T, daemon string) brokenProcess {
	t.Helper()
	w := watch(t, policy.Config{Daemon: daemon, Services: []string{"payments"}, WatchWait: 2 * time.Second, MinPollInterval: 50 * time.Millisecond, RetryMax: 300 * time.Millisecond})
	settings, on := w.Policy("payments").CircuitBreaker()
	if w.Source() != policy.FromDaemon || !on || !settings.FleetScoped {
		t.Fatalf("%s: the breaker is %+v", w.Source(), settings)
	}
	b, err := breaker.New(settings)
	if err != nil {
		t.Fatal(err)
	}
	r := startReporter(t, report.Config{Daemon: daemon, Instance: "pod-1", Interval: time.Hour, Timeout: 500 * time.Millisecond})
	p := brokenProcess{breaker: b, born: time.Now(), reporter: r}
	r.Track("payments", b, p.born, nil, nil, time.Time{})
	for i := 0; i < 2; i++ {
		permit, err := b.Acquire(p.now())
		if err != nil {
			t.Fatal(err)
		}
		permit.Record(true, p.now())
	}
	return p
}

func (p brokenProcess) now() uint64 { return uint64(time.Since(p.born)) }

// call asks the breaker for leave every 20 ms for up to 10 s: the first
// permit.
func (p brokenProcess) call() *breaker.Permit {
	var permit *breaker.Permit
	within(10*time.Second, func() bool {
		got, err := p.breaker.Acquire(p.now())
		var refused *breaker.NotPermitted
		if err != nil && !errors.As(err, &refused) {
			return false
		}
		permit = got
		if permit == nil {
			time.Sleep(20 * time.Millisecond)
		}
		return permit != nil
	})
	return permit
}

func fleetBreakerFile(t *testing.T) string {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(fleetBreakerText), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func aFleetHalfOpen(t *testing.T) {
	at := reserve(t)
	serve(t, at, fleetBreakerFile(t))
	daemon := daemonURL(at)
	p := startBroken(t, daemon)
	if !within(10*time.Second, func() bool { return metric(t, daemon, fleetBreakerState) == 2 }) {
		t.Fatal("the daemon does not keep the fleet's breaker open")
	}
	trial := p.call()
	if trial == nil || !trial.FleetTrial() {
		t.Fatalf("no fleet trial within 10 s: %+v", trial)
	}
	trial.Record(false, p.now())
	if !within(10*time.Second, func() bool { return p.breaker.State() == breaker.Closed }) {
		t.Fatalf("the breaker is %s", p.breaker.State())
	}
	if !within(10*time.Second, func() bool { return metric(t, daemon, fleetBreakerState) == 0 }) {
		t.Fatal("the daemon's breaker did not close")
	}
}

func aFleetHalfOpenWithoutTheDaemon(t *testing.T) {
	at := reserve(t)
	cmd := serve(t, at, fleetBreakerFile(t))
	at.Release() // once it is killed, nothing listens there
	daemon := daemonURL(at)
	p := startBroken(t, daemon)
	if !within(10*time.Second, func() bool { return metric(t, daemon, fleetBreakerState) == 2 }) {
		t.Fatal("the daemon does not keep the fleet's breaker open")
	}
	failures := p.reporter.Stats().PaceFailures
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	trial := p.call()
	if trial == nil || !trial.Trial() || trial.FleetTrial() {
		t.Fatalf("no trial of its own within 10 s: %+v", trial)
	}
	if p.reporter.Stats().PaceFailures <= failures {
		t.Fatalf("the failed asks are not counted: %+v", p.reporter.Stats())
	}
}
