// Tests of a policy read in full and checked: what it lacks takes the
// defaults, what it holds and cannot be used is an error naming it.

package policy

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stormguard/stormguard/clients/go/gate"
)

func TestTheBuiltInDefaultPolicyCanBeUsedAndReadsAsTheAccessorsReadIt(t *testing.T) {
	p := Default()
	s, err := p.Settings()
	if err != nil {
		t.Fatal(err)
	}
	cb, cbOn := p.CircuitBreaker()
	g, gateOn := p.Gate()
	ratio, perSecond, ttl, budgetOn := p.Budget()
	want := BudgetSettings{Enabled: budgetOn, RetryRatio: ratio, MinRetriesPerSecond: perSecond, TTL: ttl, FleetScoped: p.BudgetFleetScoped()}
	if s.Breaker != cb || s.Breaker.Enabled != cbOn || s.Gate != g || s.Gate.Enabled != gateOn || s.Budget != want {
		t.Fatalf("%+v", s)
	}
	p["circuitBreaker"] = "off"
	if _, err := Default().Settings(); err != nil {
		t.Fatal("Default gave a policy shared with another caller")
	}
}

// TestABlockThatIsAbsentOrNullIsTheDefaults: an absent or null block, or
// an empty one, reads as the built-in default's, as the accessors read it.
func TestABlockThatIsAbsentOrNullIsTheDefaults(t *testing.T) {
	defaults, err := Default().Settings()
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{
		`{"maxRetries": 3}`,
		`{"maxRetries": 3, "circuitBreaker": null, "budget": null, "gate": null}`,
		`{"maxRetries": 3, "circuitBreaker": {}, "budget": {}, "gate": {}}`,
	} {
		var p Policy
		if err := json.Unmarshal([]byte(text), &p); err != nil {
			t.Fatal(err)
		}
		if s, err := p.Settings(); err != nil || s != defaults {
			t.Errorf("%s: %+v, %v", text, s, err)
		}
	}
}

// TestASettingThatCannotBeUsedIsAnErrorNamingIt: a block that is not an
// object, a key of the wrong type, a value out of the daemon's range, each
// names the setting, whether its block is enabled or not.
func TestASettingThatCannotBeUsedIsAnErrorNamingIt(t *testing.T) {
	for text, want := range map[string]string{
		`{"circuitBreaker": 5}`:                                      `circuitBreaker must be an object, found 5`,
		`{"budget": "plenty"}`:                                       `budget must be an object, found "plenty"`,
		`{"gate": [true]}`:                                           `gate must be an object, found [true]`,
		`{"circuitBreaker": {"enabled": "yes"}}`:                     `circuitBreaker.enabled must be true or false, found yes`,
		`{"circuitBreaker": {"enabled": true, "openTimeoutMs": 0}}`:  `circuitBreaker.openTimeout must be between 1ms and 1h0m0s, found 0s`,
		`{"circuitBreaker": {"halfOpenMaxCalls": 0}}`:                `circuitBreaker.halfOpenMaxCalls must be between 1 and 1000, found 0`,
		`{"budget": {"enabled": 1}}`:                                 `budget.enabled must be true or false, found 1`,
		`{"budget": {"retryRatio": "high"}}`:                         `budget.retryRatio must be a number, found "high"`,
		`{"budget": {"retryRatio": 1001}}`:                           `budget.retryRatio must be between 0 and 1000, found 1001`,
		`{"budget": {"enabled": false, "minRetriesPerSecond": 1.5}}`: `budget.minRetriesPerSecond must be a whole number, found 1.5`,
		`{"budget": {"ttlMs": -1}}`:                                  `budget.ttlMs must be milliseconds from 0, found -1`,
		`{"budget": {"ttlMs": 60001}}`:                               `budget.ttl must be between 1s and 1m0s, found 1m0.001s`,
		`{"budget": {"scope": "region"}}`:                            `budget.scope must be "process" or "fleet", found "region"`,
		`{"gate": {"enabled": true, "beta": 1}}`:                     `gate.beta must be above 0 and below 1, found 1`,
		`{"gate": {"minRate": 5, "maxRate": 4}}`:                     `gate.maxRate must be between 5 and 10000000, found 4`,
		`{"gate": {"criticality": "urgent"}}`:                        `gate.criticality: unknown class "urgent"; expected one of: critical, default, sheddable`,
		`{"gate": {"enabled": true, "criticality": ["critical"]}}`:   `gate.criticality: expected one of critical, default, sheddable, found ["critical"]`,
		`{"gate": {"maxWait": {"sheddableMs": 86400001}}}`:           `gate.maxWait.sheddable must be between 0s and 24h0m0s, found 24h0m0.001s`,
		`{"gate": {"enabled": true, "maxWait": {"criticalMs": -5}}}`: `gate.maxWait.criticalMs must be milliseconds from 0, found -5`,
		`{"gate": {"maxWait": "1s"}}`:                                `gate.maxWait must be an object, found "1s"`,
		`{"maxRetries": "3"}`:                                        `maxRetries must be a number, found "3"`,
		`{"maxRetries": 101}`:                                        `maxRetries must be between 0 and 100, found 101`,
		`{"maxDelayMs": 3600001}`:                                    `maxDelay must be between 0s and 1h0m0s, found 1h0m0.001s`,
		`{"initialDelayMs": 20, "maxDelayMs": 10}`:                   `initialDelayMs (20) is greater than maxDelayMs (10); maxDelayMs caps every delay`,
		`{"multiplier": 0.5}`:                                        `multiplier must be between 1 and 100, found 0.5`,
		`{"jitter": "lots"}`:                                         `jitter must be one of none, proportional, full, equal or decorrelated, found "lots"`,
		`{"jitterFactor": 2}`:                                        `jitterFactor must be between 0 and 1, found 2`,
		`{"delaysMs": 5}`:                                            `delaysMs must be a list of milliseconds, found 5`,
		`{"delaysMs": [1, -2]}`:                                      `delaysMs[1] must be milliseconds from 0, found -2`,
		`{"delaysMs": [1, 20], "maxDelayMs": 10}`:                    `delaysMs[1] (20) is greater than maxDelayMs (10)`,
		`{"perTryTimeoutMs": 86400001}`:                              `perTryTimeout must be between 0s and 24h0m0s, found 24h0m0.001s`,
		`{"maxElapsedMs": "soon"}`:                                   `maxElapsedMs must be a number, found "soon"`,
		`{"retryOn": "5xx"}`:                                         `retryOn: expected a list of conditions (e.g. [5xx, 429]), found string "5xx"`,
	} {
		var p Policy
		if err := json.Unmarshal([]byte(text), &p); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Settings(); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", text, err, want)
		}
	}
}

// TestAnOlderDaemonsGateBlockTakesTheDefaultClassAndWaits: a gate block
// without criticality and maxWait, as a daemon that predates them serves
// it, reads as every call of the default class, each class waiting its
// default bound; a maxWait that leaves a class out leaves it its default;
// one that names them is read.
func TestAnOlderDaemonsGateBlockTakesTheDefaultClassAndWaits(t *testing.T) {
	defaults := gate.MaxWait{Critical: 5 * time.Second, Default: time.Second, Sheddable: 250 * time.Millisecond}
	for text, want := range map[string]gate.Policy{
		`{"gate": {"enabled": true, "minRate": 0.5, "maxRate": 100000, "beta": 0.7, "scale": 0.4, "ramp": 16, "quietMs": 5000, "overloadOn": ["connect-failure", "timeout", 429, 503], "overloadWhen": "evidence"}}`: {
			Criticality: gate.Default, MaxWait: defaults,
		},
		`{"gate": {"enabled": true, "maxWait": {"sheddableMs": 0}}}`: {
			Criticality: gate.Default, MaxWait: gate.MaxWait{Critical: 5 * time.Second, Default: time.Second},
		},
		`{"gate": {"enabled": true, "criticality": "critical", "maxWait": {"criticalMs": 60000, "defaultMs": 2500, "sheddableMs": 100}}}`: {
			Criticality: gate.Critical, MaxWait: gate.MaxWait{Critical: time.Minute, Default: 2500 * time.Millisecond, Sheddable: 100 * time.Millisecond},
		},
	} {
		var p Policy
		if err := json.Unmarshal([]byte(text), &p); err != nil {
			t.Fatal(err)
		}
		s, err := p.Settings()
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if s.Gate.Criticality != want.Criticality || s.Gate.MaxWait != want.MaxWait {
			t.Errorf("%s: %s, %+v; want %s, %+v", text, s.Gate.Criticality, s.Gate.MaxWait, want.Criticality, want.MaxWait)
		}
		if g, _ := p.Gate(); g != s.Gate {
			t.Errorf("%s: Gate reads %+v, Settings %+v", text, g, s.Gate)
		}
	}
}
