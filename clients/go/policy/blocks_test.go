package policy

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stormguard/stormguard/clients/go/breaker"
	"github.com/stormguard/stormguard/clients/go/gate"
)

func TestMissingBlocksAndKeysTakeTheDefaults(t *testing.T) {
	var p Policy
	if err := json.Unmarshal([]byte(`{"maxRetries": 1, "circuitBreaker": {"enabled": true, "consecutiveFailures": 2, "slidingWindow": {"type": "time", "durationMs": 2000}}}`), &p); err != nil {
		t.Fatal(err)
	}
	cb, enabled := p.CircuitBreaker()
	want := breaker.Policy{
		Enabled: true, ConsecutiveFailures: 2, FailureRateThreshold: 0.5, SlowCallRateThreshold: 1,
		SlowCallDuration: time.Minute, MinimumCalls: 100, Window: breaker.SlidingWindow{Duration: 2 * time.Second},
		OpenTimeout: 30 * time.Second, HalfOpenMaxCalls: 10, SuccessThreshold: 3,
	}
	if !enabled || cb != want {
		t.Fatalf("%+v", cb)
	}
	if _, err := breaker.New(cb); err != nil {
		t.Fatal(err)
	}
	ratio, perSecond, ttl, on := p.Budget()
	if ratio != 0.2 || perSecond != 10 || ttl != 10*time.Second || !on {
		t.Fatal(ratio, perSecond, ttl, on)
	}
	if p.BudgetFleetScoped() || !(Policy{"budget": map[string]any{"scope": "fleet"}}).BudgetFleetScoped() {
		t.Fatal("budget.scope: the default is each process's, fleet when the policy says so")
	}
	if _, enabled := (Policy{"circuitBreaker": map[string]any{"enabled": true, "minimumCalls": "many"}}).CircuitBreaker(); enabled {
		t.Fatal("an unreadable block is enabled")
	}
	if (Policy{"perTryTimeoutMs": 250.0}).PerTryTimeout() != 250*time.Millisecond || p.PerTryTimeout() != 0 {
		t.Fatal("perTryTimeoutMs")
	}
	g, enabled := p.Gate()
	defaults := gate.Policy{MinRate: 0.5, MaxRate: 100_000, Beta: 0.7, Scale: 0.4, Ramp: 16, Quiet: 5 * time.Second}
	if enabled || g != defaults {
		t.Fatalf("%+v", g)
	}
	g, enabled = (Policy{"gate": map[string]any{"enabled": true, "minRate": 2.0, "quietMs": 250.0}}).Gate()
	defaults.Enabled, defaults.MinRate, defaults.Quiet = true, 2, 250*time.Millisecond
	if !enabled || g != defaults {
		t.Fatalf("%+v", g)
	}
	if _, err := gate.New(g, nil); err != nil {
		t.Fatal(err)
	}
	if _, enabled := (Policy{"gate": map[string]any{"enabled": true, "beta": "high"}}).Gate(); enabled {
		t.Fatal("an unreadable gate block is enabled")
	}
}
