// A policy's settings with the built-in defaults filled in: its
// circuitBreaker, gate and budget blocks, maxElapsedMs, perTryTimeoutMs.

package policy

import (
	"encoding/json"
	"time"

	"github.com/stormguard/stormguard/clients/go/breaker"
	"github.com/stormguard/stormguard/clients/go/gate"
)

// block is the policy's block key, over the built-in default's: a key the
// policy does not set keeps its default.
func (p Policy) block(key string) map[string]any {
	var defaults Policy
	_ = json.Unmarshal(defaultPolicy, &defaults)
	merged := map[string]any{}
	if d, ok := defaults[key].(map[string]any); ok {
		for k, v := range d {
			merged[k] = v
		}
	}
	if b, ok := p[key].(map[string]any); ok {
		for k, v := range b {
			merged[k] = v
		}
	}
	return merged
}

// CircuitBreaker is the policy's circuitBreaker block and whether it is
// enabled; keys it does not set take the built-in defaults. A block that
// cannot be read gives the defaults, disabled: Settings says what is wrong
// with it.
func (p Policy) CircuitBreaker() (breaker.Policy, bool) {
	defaults, _ := breaker.Policy{}.FromMap(Policy(nil).block("circuitBreaker"))
	read, err := breaker.Policy{}.FromMap(p.block("circuitBreaker"))
	if err != nil {
		defaults.Enabled = false
		return defaults, false
	}
	return read, read.Enabled
}

// Gate is the policy's gate block (the send gate's settings) and whether
// it is enabled; keys it does not set take the built-in defaults, as do
// classes its maxWait leaves out (a daemon that predates gate.criticality
// and gate.maxWait serves neither: every call is of the default class, and
// each class waits its default bound). A block that cannot be read gives
// the defaults, disabled: Settings says what is wrong with it.
func (p Policy) Gate() (gate.Policy, bool) {
	defaults := gateDefaults()
	read, err := defaults.FromMap(p.block("gate"))
	if err != nil {
		defaults.Enabled = false
		return defaults, false
	}
	return read, read.Enabled
}

// gateDefaults is the built-in default gate block.
func gateDefaults() gate.Policy {
	defaults, _ := gate.Policy{}.FromMap(Policy(nil).block("gate"))
	return defaults
}

// Budget is the policy's budget block (retryRatio, minRetriesPerSecond,
// ttlMs), what budget.New takes, and whether it is enabled; keys it does
// not set take the built-in defaults. It does not check them: Settings
// does.
func (p Policy) Budget() (retryRatio float64, minRetriesPerSecond uint32, ttl time.Duration, enabled bool) {
	b := p.block("budget")
	enabled, _ = b["enabled"].(bool)
	retryRatio, _ = b["retryRatio"].(float64)
	perSecond, _ := b["minRetriesPerSecond"].(float64)
	if perSecond > 0 {
		minRetriesPerSecond = uint32(perSecond)
	}
	ms, _ := b["ttlMs"].(float64)
	ttl = time.Duration(ms * float64(time.Millisecond))
	return retryRatio, minRetriesPerSecond, ttl, enabled
}

// BudgetFleetScoped says whether the budget block's minRetriesPerSecond is
// the whole fleet's (scope: fleet), divided among its processes by the
// daemon, rather than each process's.
func (p Policy) BudgetFleetScoped() bool {
	scope, _ := p.block("budget")["scope"].(string)
	return scope == "fleet"
}

// MaxElapsed is the policy's maxElapsedMs, the bound on a call's attempts
// and waits together; 0 when it sets none.
func (p Policy) MaxElapsed() time.Duration {
	ms, _ := p["maxElapsedMs"].(float64)
	if ms <= 0 {
		return 0
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// PerTryTimeout is the policy's perTryTimeoutMs, 0 when it sets none.
func (p Policy) PerTryTimeout() time.Duration {
	ms, _ := p["perTryTimeoutMs"].(float64)
	if ms <= 0 {
		return 0
	}
	return time.Duration(ms * float64(time.Millisecond))
}
