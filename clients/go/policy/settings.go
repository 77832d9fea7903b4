// A policy read in full and checked before anything is built from it, as
// the Rust library's ValidPolicy::try_from does.

package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/stormguard/stormguard/clients/go/backoff"
	"github.com/stormguard/stormguard/clients/go/breaker"
	"github.com/stormguard/stormguard/clients/go/gate"
	"github.com/stormguard/stormguard/clients/go/internal/limits"
	"github.com/stormguard/stormguard/clients/go/retryon"
)

// Settings are a policy's blocks, read over the built-in defaults and
// checked: what a dependency builds its circuit breaker, retry budget and
// send gate from.
type Settings struct {
	Breaker breaker.Policy
	Budget  BudgetSettings
	Gate    gate.Policy
}

// BudgetSettings is a policy's budget block: whether it is enabled, what
// budget.New takes, and its scope.
type BudgetSettings struct {
	Enabled             bool
	RetryRatio          float64
	MinRetriesPerSecond uint32
	TTL                 time.Duration
	// FleetScoped is scope: fleet, MinRetriesPerSecond being the whole
	// fleet's (see BudgetFleetScoped).
	FleetScoped bool
}

// Settings reads and checks every setting p's calls act on, each held to
// the daemon's range for it whether its block is enabled or not, as the
// Rust library's ValidPolicy::try_from does: maxRetries, the delay law
// (initialDelayMs, maxDelayMs, multiplier, jitter, jitterFactor, delaysMs),
// perTryTimeoutMs, maxElapsedMs, retryOn, and the circuitBreaker, budget
// and gate blocks. The first setting that cannot be used is the error,
// naming it: a block that is not an object, a key of the wrong type, a
// value out of range. What p lacks keeps the meaning it has for the
// accessors (CircuitBreaker, Budget, Gate, Retries, Backoff, ...): a block
// that is absent, or null, is the built-in default's, and a key of a block
// that is absent is the default's key.
func (p Policy) Settings() (Settings, error) {
	var s Settings
	if err := p.checkRetries(); err != nil {
		return s, err
	}
	cb, err := p.object("circuitBreaker")
	if err == nil {
		s.Breaker, err = breaker.Policy{}.FromMap(cb)
	}
	if err == nil {
		err = s.Breaker.Check()
	}
	if err != nil {
		return s, err
	}
	if s.Budget, err = p.budgetSettings(); err != nil {
		return s, err
	}
	g, err := p.object("gate")
	if err == nil {
		s.Gate, err = gateDefaults().FromMap(g)
	}
	if err == nil {
		err = s.Gate.Check()
	}
	return s, err
}

// object is p's block key over the built-in default's, as block reads it;
// a block p holds that is not an object is an error naming it (a null one
// is absent).
func (p Policy) object(key string) (map[string]any, error) {
	if v, ok := p[key]; ok && v != nil {
		if _, isObject := v.(map[string]any); !isObject {
			return nil, fmt.Errorf("%s must be an object, found %s", key, show(v))
		}
	}
	return p.block(key), nil
}

// show is v as the daemon served it.
func show(v any) string {
	text, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(text)
}

// number is v, a setting named key, if it is a finite number.
func number(key string, v any) (float64, error) {
	f, ok := v.(float64)
	if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%s must be a number, found %s", key, show(v))
	}
	return f, nil
}

// whole is v, a setting named key, if it is a whole number held to the
// daemon's count range for limit.
func whole(key, limit string, v any) (uint32, error) {
	f, err := number(key, v)
	if err != nil {
		return 0, err
	}
	if f != math.Trunc(f) {
		return 0, fmt.Errorf("%s must be a whole number, found %s", key, show(v))
	}
	if err := limits.Of(limit, "count").Check(f); err != nil {
		return 0, err
	}
	return uint32(f), nil
}

// millis is v, a setting named key, in milliseconds (maybe fractional),
// as a duration, rounded as the accessors round it.
func millis(key string, v any) (time.Duration, error) {
	f, err := number(key, v)
	if err != nil {
		return 0, err
	}
	if f < 0 || f > float64(math.MaxInt64)/1e6 {
		return 0, fmt.Errorf("%s must be milliseconds from 0, found %s", key, show(v))
	}
	return time.Duration(f * float64(time.Millisecond)), nil
}

// checkRetries checks the settings of p's retries that p holds.
func (p Policy) checkRetries() error {
	if v, ok := p["maxRetries"]; ok {
		if _, err := whole("maxRetries", "maxRetries", v); err != nil {
			return err
		}
	}
	var initial, max time.Duration
	_, hasInitial := p["initialDelayMs"]
	_, hasMax := p["maxDelayMs"]
	var err error
	if hasInitial {
		if initial, err = millis("initialDelayMs", p["initialDelayMs"]); err != nil {
			return err
		}
	}
	if hasMax {
		if max, err = millis("maxDelayMs", p["maxDelayMs"]); err != nil {
			return err
		}
		if err := limits.Duration("maxDelay", max); err != nil {
			return err
		}
	}
	if hasInitial && hasMax && initial > max {
		return fmt.Errorf("initialDelayMs (%s) is greater than maxDelayMs (%s); maxDelayMs caps every delay", show(p["initialDelayMs"]), show(p["maxDelayMs"]))
	}
	for _, key := range []string{"multiplier", "jitterFactor"} {
		if v, ok := p[key]; ok {
			f, err := number(key, v)
			if err == nil {
				err = limits.Number(key, f)
			}
			if err != nil {
				return err
			}
		}
	}
	if v, ok := p["jitter"]; ok {
		name, isString := v.(string)
		if err := (backoff.Backoff{Jitter: backoff.Jitter(name)}).Check(); !isString || err != nil {
			return fmt.Errorf("jitter must be one of none, proportional, full, equal or decorrelated, found %s", show(v))
		}
	}
	if v := p["delaysMs"]; v != nil {
		delays, ok := v.([]any)
		if !ok {
			return fmt.Errorf("delaysMs must be a list of milliseconds, found %s", show(v))
		}
		if err := limits.Of("delays", "count").Check(float64(len(delays))); err != nil {
			return fmt.Errorf("delaysMs has %d entries; at most %v are allowed", len(delays), limits.Of("delays", "count").High)
		}
		for i, d := range delays {
			key := fmt.Sprintf("delaysMs[%d]", i)
			delay, err := millis(key, d)
			if err != nil {
				return err
			}
			if hasMax && delay > max {
				return fmt.Errorf("%s (%s) is greater than maxDelayMs (%s)", key, show(d), show(p["maxDelayMs"]))
			}
		}
	}
	for _, key := range []string{"perTryTimeout", "maxElapsed"} {
		if v := p[key+"Ms"]; v != nil {
			d, err := millis(key+"Ms", v)
			if err == nil {
				err = limits.Duration(key, d)
			}
			if err != nil {
				return err
			}
		}
	}
	if v, ok := p["retryOn"]; ok {
		if _, err := retryon.Parse("retryOn", v); err != nil {
			return err
		}
	}
	return nil
}

// budgetSettings reads and checks p's budget block.
func (p Policy) budgetSettings() (BudgetSettings, error) {
	var s BudgetSettings
	b, err := p.object("budget")
	if err != nil {
		return s, err
	}
	enabled, ok := b["enabled"].(bool)
	if !ok {
		return s, fmt.Errorf("budget.enabled must be true or false, found %s", show(b["enabled"]))
	}
	ratio, err := number("budget.retryRatio", b["retryRatio"])
	if err == nil {
		err = limits.Number("budget.retryRatio", ratio)
	}
	if err != nil {
		return s, err
	}
	perSecond, err := whole("budget.minRetriesPerSecond", "budget.minRetriesPerSecond", b["minRetriesPerSecond"])
	if err != nil {
		return s, err
	}
	ttl, err := millis("budget.ttlMs", b["ttlMs"])
	if err == nil {
		err = limits.Duration("budget.ttl", ttl)
	}
	if err != nil {
		return s, err
	}
	scope, _ := b["scope"].(string)
	if v, ok := b["scope"]; ok && scope != "process" && scope != "fleet" {
		return s, fmt.Errorf(`budget.scope must be "process" or "fleet", found %s`, show(v))
	}
	return BudgetSettings{Enabled: enabled, RetryRatio: ratio, MinRetriesPerSecond: perSecond, TTL: ttl, FleetScoped: scope == "fleet"}, nil
}
