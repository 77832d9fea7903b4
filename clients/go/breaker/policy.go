// The circuitBreaker block: its settings, their ranges, and reading
// them from a policy as the daemon serves it.

package breaker

import (
	"fmt"
	"math"
	"time"

	"github.com/stormguard/stormguard/clients/go/internal/block"
	"github.com/stormguard/stormguard/clients/go/internal/limits"
)

// Policy is a policy's circuitBreaker block. Check holds each setting to
// the daemon's range for it.
type Policy struct {
	Enabled bool
	// ConsecutiveFailures in a row open the breaker; 0 turns this trigger off.
	ConsecutiveFailures uint32
	// FailureRateThreshold over the window opens the breaker.
	FailureRateThreshold float64
	// SlowCallRateThreshold over the window opens the breaker.
	SlowCallRateThreshold float64
	// SlowCallDuration is the duration from which a call counts as slow.
	SlowCallDuration time.Duration
	// MinimumCalls the window must hold before rates are judged.
	MinimumCalls uint32
	// Window is the window rates are judged over.
	Window SlidingWindow
	// OpenTimeout is how long the breaker stays open before trial calls.
	OpenTimeout time.Duration
	// HalfOpenMaxCalls is the number of trial calls admitted at once.
	HalfOpenMaxCalls uint32
	// SuccessThreshold is the number of good trial calls that close the breaker.
	SuccessThreshold uint32
	// FleetScoped is scope: fleet: an open breaker sends trials only on
	// slots the daemon grants the whole fleet, and closes when the daemon
	// says the fleet's trials succeeded (see Breaker.Heard). False is scope:
	// process, each breaker deciding alone.
	FleetScoped bool
}

// SlidingWindow is the last Calls calls or, when Duration is set, the calls
// of the last Duration.
type SlidingWindow struct {
	Calls    uint32
	Duration time.Duration
}

// Check says what is wrong with p, naming the key, or nil: the ranges are
// the daemon's own.
func (p Policy) Check() error {
	window := func() error {
		if p.Window.Duration != 0 {
			return limits.Duration("circuitBreaker.slidingWindow", p.Window.Duration)
		}
		return limits.Count("circuitBreaker.slidingWindow", p.Window.Calls)
	}
	for _, err := range []error{
		limits.Count("circuitBreaker.consecutiveFailures", p.ConsecutiveFailures),
		limits.Number("circuitBreaker.failureRateThreshold", p.FailureRateThreshold),
		limits.Number("circuitBreaker.slowCallRateThreshold", p.SlowCallRateThreshold),
		limits.Duration("circuitBreaker.slowCallDuration", p.SlowCallDuration),
		limits.Count("circuitBreaker.minimumCalls", p.MinimumCalls),
		window(),
		limits.Duration("circuitBreaker.openTimeout", p.OpenTimeout),
		limits.Count("circuitBreaker.halfOpenMaxCalls", p.HalfOpenMaxCalls),
		limits.Count("circuitBreaker.successThreshold", p.SuccessThreshold),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// FromMap reads a circuitBreaker block as the daemon serves it (enabled,
// consecutiveFailures, failureRateThreshold, slowCallRateThreshold,
// slowCallDurationMs, minimumCalls, slidingWindow {type: "count", calls}
// or {type: "time", durationMs}, openTimeoutMs, halfOpenMaxCalls,
// successThreshold, scope; milliseconds may be fractional). A key that is
// missing keeps its value in p; a key of the wrong type is an error naming it.
func (p Policy) FromMap(block map[string]any) (Policy, error) {
	var err error
	flag := func(key string, into *bool) {
		if v, ok := block[key]; ok && err == nil {
			b, ok := v.(bool)
			if !ok {
				err = fmt.Errorf("circuitBreaker.%s must be true or false, found %v", key, v)
			}
			*into = b
		}
	}
	number := func(m map[string]any, key string) (float64, bool) {
		v, ok := m[key]
		if !ok || err != nil {
			return 0, false
		}
		f, isNumber := v.(float64)
		if !isNumber || math.IsNaN(f) || math.IsInf(f, 0) {
			err = fmt.Errorf("circuitBreaker.%s must be a number, found %v", key, v)
			return 0, false
		}
		return f, true
	}
	whole := func(m map[string]any, key string, into *uint32) {
		if f, ok := number(m, key); ok {
			if f < 0 || f > math.MaxUint32 || f != math.Trunc(f) {
				err = fmt.Errorf("circuitBreaker.%s must be a whole number from 0, found %v", key, f)
				return
			}
			*into = uint32(f)
		}
	}
	real := func(key string, into *float64) {
		if f, ok := number(block, key); ok {
			*into = f
		}
	}
	millis := func(m map[string]any, key string, into *time.Duration) {
		if f, ok := number(m, key); ok {
			if f < 0 || f > float64(math.MaxInt64)/1e6 {
				err = fmt.Errorf("circuitBreaker.%s must be milliseconds from 0, found %v", key, f)
				return
			}
			*into = time.Duration(math.Round(f * 1e6))
		}
	}
	flag("enabled", &p.Enabled)
	whole(block, "consecutiveFailures", &p.ConsecutiveFailures)
	real("failureRateThreshold", &p.FailureRateThreshold)
	real("slowCallRateThreshold", &p.SlowCallRateThreshold)
	millis(block, "slowCallDurationMs", &p.SlowCallDuration)
	whole(block, "minimumCalls", &p.MinimumCalls)
	if v, ok := block["slidingWindow"]; ok && err == nil {
		w, _ := v.(map[string]any)
		switch w["type"] {
		case "count":
			p.Window = SlidingWindow{}
			whole(w, "calls", &p.Window.Calls)
			if _, ok := w["calls"]; !ok && err == nil {
				err = fmt.Errorf("circuitBreaker.slidingWindow: a count window needs calls")
			}
		case "time":
			p.Window = SlidingWindow{}
			millis(w, "durationMs", &p.Window.Duration)
			if _, ok := w["durationMs"]; !ok && err == nil {
				err = fmt.Errorf("circuitBreaker.slidingWindow: a time window needs durationMs")
			}
		default:
			err = fmt.Errorf(`circuitBreaker.slidingWindow must be {"type": "count", "calls": N} or {"type": "time", "durationMs": T}, found %v`, v)
		}
	}
	millis(block, "openTimeoutMs", &p.OpenTimeout)
	whole(block, "halfOpenMaxCalls", &p.HalfOpenMaxCalls)
	whole(block, "successThreshold", &p.SuccessThreshold)
	if v, ok := block["scope"]; ok && err == nil {
		switch v {
		case "process":
			p.FleetScoped = false
		case "fleet":
			p.FleetScoped = true
		default:
			err = fmt.Errorf(`circuitBreaker.scope must be "process" or "fleet", found %v`, v)
		}
	}
	return p, err
}

// UnmarshalJSON reads a circuitBreaker block (see FromMap) over p.
func (p *Policy) UnmarshalJSON(text []byte) error {
	return block.Unmarshal(text, p)
}
