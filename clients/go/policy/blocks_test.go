// Tests of a served policy's blocks read with their defaults.

package policy

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stormguard/stormguard/clients/go/breaker"
	"github.com/stormguard/stormguard/clients/go/gate"
	"github.com/stormguard/stormguard/clients/go/retryon"
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
	if (Policy{"maxElapsedMs": 1500.0}).MaxElapsed() != 1500*time.Millisecond || (Policy{"maxElapsedMs": nil}).MaxElapsed() != 0 {
		t.Fatal("maxElapsedMs")
	}
	if (Policy{"perTryTimeoutMs": 250.0}).PerTryTimeout() != 250*time.Millisecond || p.PerTryTimeout() != 0 {
		t.Fatal("perTryTimeoutMs")
	}
	g, enabled := p.Gate()
	defaults := gate.Policy{
		MinRate: 0.5, MaxRate: 100_000, Beta: 0.7, Scale: 0.4, Ramp: 16, Quiet: 5 * time.Second, OverloadOn: retryon.Overload(),
		Criticality: gate.Default, MaxWait: gate.MaxWait{Critical: 5 * time.Second, Default: time.Second, Sheddable: 250 * time.Millisecond},
	}
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

// TestGateOverloadOnIsReadAsRetryOnIs: gate.overloadOn defaults to
// [connect-failure, timeout, 429, 503]; a list the policy serves replaces
// it; a condition that is not one, or one listed twice, makes the block
// unreadable, with an error naming gate.overloadOn.
func TestGateOverloadOnIsReadAsRetryOnIs(t *testing.T) {
	g, _ := Policy{"gate": map[string]any{"enabled": true}}.Gate()
	if g.OverloadOn != retryon.Overload() || g.OverloadOn.String() != "[connect-failure, timeout, 429, 503]" {
		t.Fatalf("the default overloadOn is %v", g.OverloadOn)
	}
	for status, overloads := range map[int]bool{429: true, 503: true, 500: false, 502: false, 504: false} {
		if g.Overloads(status, "", false) != overloads {
			t.Errorf("by default, a retried %d overloads: %v", status, !overloads)
		}
	}
	if !g.Overloads(0, "connect-failure", false) || !g.Overloads(0, "timeout", false) || g.Overloads(0, "reset", false) || !g.OverloadedByTimeouts() {
		t.Error("by default, connect failures and timeouts overload, resets do not")
	}

	var read Policy
	if err := json.Unmarshal([]byte(`{"gate": {"enabled": true, "overloadOn": ["5xx", "reset", 429]}}`), &read); err != nil {
		t.Fatal(err)
	}
	g, enabled := read.Gate()
	if !enabled || g.OverloadOn.String() != "[reset, 5xx, 429]" {
		t.Fatalf("%v %v", enabled, g.OverloadOn)
	}
	if !g.Overloads(500, "", false) || g.Overloads(501, "", false) || !g.Overloads(0, "reset", false) || g.Overloads(0, "timeout", false) || g.OverloadedByTimeouts() {
		t.Errorf("overloadOn %v", g.OverloadOn)
	}
	if g, _ := (Policy{"gate": map[string]any{"overloadOn": []any{}}}).Gate(); g.OverloadOn != (retryon.Conditions{}) || g.Overloads(503, "", false) || !g.Overloads(500, "", true) {
		t.Error("an empty overloadOn: only a Retry-After says overload")
	}

	for list, want := range map[string]string{
		`["connect-failure", "5xxx"]`: `gate.overloadOn[1]: unknown retry condition "5xxx"; expected one of: connect-failure, timeout, reset, 5xx, gateway-error`,
		`[503, "timeout", 503]`:       `gate.overloadOn[2]: 503 is listed twice`,
		`["5xx", "5xx"]`:              `gate.overloadOn[1]: 5xx is listed twice`,
		`[200]`:                       `gate.overloadOn[0]: status 200 is not an error status; retry only on 400 to 599`,
		`[503.5]`:                     `gate.overloadOn[0]: expected a condition (connect-failure, timeout, reset, 5xx, gateway-error) or a status code, found number 503.5`,
		`"5xx"`:                       `gate.overloadOn: expected a list of conditions (e.g. [5xx, 429]), found string "5xx"`,
		`null`:                        `gate.overloadOn: expected a list of conditions (e.g. [5xx, 429]), found null`,
	} {
		var g gate.Policy
		err := json.Unmarshal([]byte(`{"overloadOn": `+list+`}`), &g)
		if err == nil || err.Error() != want {
			t.Errorf("overloadOn: %s: %v, want %s", list, err, want)
		}
		var block map[string]any
		_ = json.Unmarshal([]byte(`{"enabled": true, "overloadOn": `+list+`}`), &block)
		if g, enabled := (Policy{"gate": block}).Gate(); enabled || g.OverloadOn != retryon.Overload() {
			t.Errorf("overloadOn: %s: an unreadable gate block is enabled, overloadOn %v", list, g.OverloadOn)
		}
	}
}

// TestGateOverloadWhenDefaultsToEvidence: gate.overloadWhen defaults to
// evidence (the built-in default says so); most-refused is read; any
// other value makes the block unreadable, with an error naming the key and
// the values allowed.
func TestGateOverloadWhenDefaultsToEvidence(t *testing.T) {
	if g, _ := (Policy{"gate": map[string]any{"enabled": true}}).Gate(); g.OverloadWhen != gate.Evidence {
		t.Fatalf("the default overloadWhen is %v", g.OverloadWhen)
	}
	var read Policy
	if err := json.Unmarshal([]byte(`{"gate": {"enabled": true, "overloadWhen": "most-refused"}}`), &read); err != nil {
		t.Fatal(err)
	}
	g, enabled := read.Gate()
	if !enabled || g.OverloadWhen != gate.MostRefused {
		t.Fatalf("%v %v", enabled, g.OverloadWhen)
	}
	if _, err := gate.New(g, nil); err != nil {
		t.Fatal(err)
	}
	bad := Policy{"gate": map[string]any{"enabled": true, "overloadWhen": "sometimes"}}
	if g, enabled := bad.Gate(); enabled || g.OverloadWhen != gate.Evidence {
		t.Fatalf("an unreadable gate block is enabled, overloadWhen %v", g.OverloadWhen)
	}
	_, err := gate.Policy{}.FromMap(bad["gate"].(map[string]any))
	if want := `gate.overloadWhen: unknown overloadWhen value "sometimes"; expected one of: evidence, any-refusal, most-refused`; err == nil || err.Error() != want {
		t.Fatalf("%v, want %s", err, want)
	}
}
