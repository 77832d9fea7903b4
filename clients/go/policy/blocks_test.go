package policy

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stormguard/stormguard/clients/go/breaker"
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
	if _, enabled := (Policy{"circuitBreaker": map[string]any{"enabled": true, "minimumCalls": "many"}}).CircuitBreaker(); enabled {
		t.Fatal("an unreadable block is enabled")
	}
	if (Policy{"perTryTimeoutMs": 250.0}).PerTryTimeout() != 250*time.Millisecond || p.PerTryTimeout() != 0 {
		t.Fatal("perTryTimeoutMs")
	}
}
