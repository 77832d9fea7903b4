// The gate block: its settings, their ranges, overloadOn, overloadWhen,
// criticality and maxWait, and reading them from a policy as the daemon
// serves it.

package gate

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/stormguard/stormguard/clients/go/internal/block"
	"github.com/stormguard/stormguard/clients/go/internal/limits"
	"github.com/stormguard/stormguard/clients/go/retryon"
)

// Policy is a policy's gate block. Check holds each setting to the
// daemon's range for it.
type Policy struct {
	Enabled bool
	// MinRate is the lowest rate, attempts per second: the probe rate
	// during a full outage.
	MinRate float64
	// MaxRate is the highest rate the gate paces at, never below MinRate.
	MaxRate float64
	// Beta is the share of the rate kept after an overload.
	Beta float64
	// Scale is how fast the rate regrows after an overload (CUBIC's C).
	Scale float64
	// Ramp is the attempts per second each accepted attempt adds to the
	// rate in slow start.
	Ramp float64
	// Quiet is how long without an overload and without a caller having
	// to wait turns the gate off.
	Quiet time.Duration
	// OverloadOn is which of the failures the policy retries say the
	// dependency is overloaded or down (gate.overloadOn, written as retryOn
	// is; the policy's default, which policy.Policy.Gate fills in, is
	// retryon.Overload(): connect-failure, timeout, 429 and 503; the zero
	// value lists none): those turn the gate on and cut its rate. Any other (a 500, say) is an error the
	// dependency answered with, which says nothing of its load: the gate
	// counts it as answered. An answer with a Retry-After always says
	// overload. See Overloads.
	OverloadOn retryon.Conditions
	// OverloadWhen is when the refusals OverloadOn names say overload
	// (gate.overloadWhen): by the evidence (Evidence, the default and the
	// zero value), at the first (AnyRefusal), or only once they outnumber
	// acceptances or nothing is accepted (MostRefused). A TimedOut signal
	// turns the gate on at once under every setting.
	OverloadWhen OverloadWhen
	// Criticality is the class of a call that names none
	// (gate.criticality): which calls the gate serves first, and sheds
	// first, when it cannot serve them all. The policy's default, and the
	// zero value, is Default.
	Criticality Criticality
	// MaxWait is how long after it began a call of each class may still
	// wait for a turn (gate.maxWait). The policy's defaults, which
	// policy.Policy.Gate fills in, are 5 s, 1 s and 250 ms; the zero value
	// waits for no turn that is not free at once.
	MaxWait MaxWait
}

// Unlearned names the setting, if any, whose change from p to next voids
// what a gate learned under p: whether it is on, which failures it hears
// as overload (gate.overloadOn), and when refusals say overload
// (gate.overloadWhen); "" if none. Its rates, CUBIC's constants and Quiet
// only shape what comes next, so a change of them keeps the pace.
func (p Policy) Unlearned(next Policy) string {
	switch {
	case p.Enabled != next.Enabled:
		return "gate.enabled"
	case p.OverloadOn != next.OverloadOn:
		return "gate.overloadOn"
	case p.OverloadWhen != next.OverloadWhen:
		return "gate.overloadWhen"
	}
	return ""
}

// OverloadWhen is when the send gate takes the refusals it hears for
// overload.
type OverloadWhen uint8

// The values of gate.overloadWhen.
const (
	// Evidence, the default: a dependency that has accepted nothing lately
	// is down at once (five refusals in a row, or three over a second), and
	// its recovery is paced as under AnyRefusal, except that the gate tries
	// its cuts: refusals that keep their share over two cuts were a chance
	// run from a dependency failing at random, and from then on cut only
	// while most are refused. Refusals from one that has been accepting are
	// weighed as under MostRefused. A herd is paced after an outage, and a
	// dependency that fails a share at random keeps its throughput.
	Evidence OverloadWhen = iota
	// AnyRefusal: at the first. A refusal turns the gate on, and every
	// refusal cuts its rate (never below what was accepted over the last
	// second). For a dependency that refuses only when it is overloaded.
	AnyRefusal
	// MostRefused: only once refusals outnumber acceptances by more than
	// chance would (Google's client-side throttling, K = 2), or three
	// have come with nothing accepted for three seconds (the dependency
	// is down). A dependency that fails a share of requests at random
	// keeps its throughput; an overload that still accepts about half of
	// what it is sent is not paced.
	MostRefused
)

// OverloadWhenNames is every value of gate.overloadWhen as a policy
// writes it, in the order of the constants.
var OverloadWhenNames = []string{"evidence", "any-refusal", "most-refused"}

// weighsRefusals says whether refusals from a dependency that has been
// accepting are weighed before they say overload: under every setting but
// AnyRefusal.
func (w OverloadWhen) weighsRefusals() bool {
	return w != AnyRefusal
}

// String is the value as a policy writes it: "evidence", "any-refusal"
// or "most-refused".
func (w OverloadWhen) String() string {
	if int(w) < len(OverloadWhenNames) {
		return OverloadWhenNames[w]
	}
	return fmt.Sprintf("OverloadWhen(%d)", uint8(w))
}

// parseOverloadWhen reads gate.overloadWhen as a policy serves it: one of
// OverloadWhenNames. Anything else is an error naming the key and the
// values allowed, as the Rust library's policy errors do.
func parseOverloadWhen(v any) (OverloadWhen, error) {
	allowed := strings.Join(OverloadWhenNames, ", ")
	name, isString := v.(string)
	if !isString {
		// Shown as the policy wrote it: null, not Go's <nil>.
		written, _ := json.Marshal(v)
		return Evidence, fmt.Errorf("gate.overloadWhen: expected one of %s, found %s", allowed, written)
	}
	for i, known := range OverloadWhenNames {
		if name == known {
			return OverloadWhen(i), nil
		}
	}
	return Evidence, fmt.Errorf("gate.overloadWhen: unknown overloadWhen value %q; expected one of: %s", name, allowed)
}

// Overloads says whether a failed attempt that the policy retries says the
// dependency is overloaded or down, as the Rust library's GatePolicy::judge
// decides: status is the answer's HTTP status, or 0 when no answer came and
// failure names the failure ("connect-failure", "timeout" or "reset");
// retryAfter says whether the answer carried a Retry-After. An answer that
// asks for a wait always says overload; otherwise OverloadOn must cover the
// status, or the failure.
func (p Policy) Overloads(status int, failure string, retryAfter bool) bool {
	if status != 0 {
		return retryAfter || p.OverloadOn.CoversStatus(status)
	}
	return p.OverloadOn.CoversFailure(failure)
}

// OverloadedByTimeouts says whether an attempt that timed out says the
// dependency is overloaded or down: whether OverloadOn lists timeout.
func (p Policy) OverloadedByTimeouts() bool {
	return p.OverloadOn.CoversFailure("timeout")
}

// Check says what is wrong with p, naming the key, or nil: the ranges are
// the daemon's own.
func (p Policy) Check() error {
	overloadWhen := func() error {
		if int(p.OverloadWhen) >= len(OverloadWhenNames) {
			return fmt.Errorf("gate.overloadWhen must be one of %s, found %s", strings.Join(OverloadWhenNames, ", "), p.OverloadWhen)
		}
		return nil
	}
	criticality := func() error {
		if !p.Criticality.known() {
			return fmt.Errorf("gate.criticality must be one of %s, found %s", classNames(), p.Criticality)
		}
		return nil
	}
	maxRate := limits.Of("gate.maxRate", "number")
	if !math.IsNaN(p.MinRate) && !math.IsInf(p.MinRate, 0) {
		maxRate = maxRate.From(math.Max(p.MinRate, maxRate.Low))
	}
	for _, err := range []error{
		limits.Number("gate.minRate", p.MinRate),
		maxRate.Check(p.MaxRate),
		limits.Number("gate.beta", p.Beta),
		limits.Number("gate.scale", p.Scale),
		limits.Number("gate.ramp", p.Ramp),
		limits.Duration("gate.quiet", p.Quiet),
		overloadWhen(),
		criticality(),
		p.MaxWait.check(limits.Duration),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// FromMap reads a gate block as the daemon serves it (enabled, minRate,
// maxRate, beta, scale, ramp, quietMs, overloadOn, overloadWhen,
// criticality, maxWait; milliseconds may be fractional; overloadOn is a
// list of conditions as retryOn is, see package retryon; overloadWhen is
// one of OverloadWhenNames; criticality is a class's name, "critical",
// "default" or "sheddable"; maxWait is an object of criticalMs, defaultMs
// and sheddableMs). A key that is missing keeps its value in p, as does a
// class maxWait leaves out (a daemon that predates classes serves
// neither); a key of the wrong type, an overloadOn entry that is not a
// condition or is listed twice, an overloadWhen or criticality that is not
// one of its values, is an error naming it.
func (p Policy) FromMap(block map[string]any) (Policy, error) {
	var err error
	number := func(key string) (float64, bool) {
		v, ok := block[key]
		if !ok || err != nil {
			return 0, false
		}
		f, isNumber := v.(float64)
		if !isNumber || math.IsNaN(f) || math.IsInf(f, 0) {
			err = fmt.Errorf("gate.%s must be a number, found %v", key, v)
			return 0, false
		}
		return f, true
	}
	real := func(key string, into *float64) {
		if f, ok := number(key); ok {
			*into = f
		}
	}
	if v, ok := block["enabled"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			err = fmt.Errorf("gate.enabled must be true or false, found %v", v)
		}
		p.Enabled = b
	}
	real("minRate", &p.MinRate)
	real("maxRate", &p.MaxRate)
	real("beta", &p.Beta)
	real("scale", &p.Scale)
	real("ramp", &p.Ramp)
	if f, ok := number("quietMs"); ok {
		if quiet, bad := millis("gate.quietMs", f); bad != nil {
			err = bad
		} else {
			p.Quiet = quiet
		}
	}
	if v, ok := block["overloadOn"]; ok && err == nil {
		conditions, bad := retryon.Parse("gate.overloadOn", v)
		if bad != nil {
			err = bad
		} else {
			p.OverloadOn = conditions
		}
	}
	if v, ok := block["overloadWhen"]; ok && err == nil {
		when, bad := parseOverloadWhen(v)
		if bad != nil {
			err = bad
		} else {
			p.OverloadWhen = when
		}
	}
	if v, ok := block["criticality"]; ok && err == nil {
		class, bad := parseCriticality(v)
		if bad != nil {
			err = bad
		} else {
			p.Criticality = class
		}
	}
	if v, ok := block["maxWait"]; ok && err == nil {
		bounds, bad := readMaxWait(p.MaxWait, v)
		if bad != nil {
			err = bad
		} else {
			p.MaxWait = bounds
		}
	}
	return p, err
}

// millis is f milliseconds, a setting named key, as a duration.
func millis(key string, f float64) (time.Duration, error) {
	if f < 0 || f > float64(math.MaxInt64)/1e6 {
		return 0, fmt.Errorf("%s must be milliseconds from 0, found %v", key, f)
	}
	return time.Duration(math.Round(f * 1e6)), nil
}

// readMaxWait reads gate.maxWait over w: an object of each class's bound
// in milliseconds (criticalMs, defaultMs, sheddableMs); a class it leaves
// out keeps its bound in w.
func readMaxWait(w MaxWait, v any) (MaxWait, error) {
	bounds, isObject := v.(map[string]any)
	if !isObject {
		written, _ := json.Marshal(v)
		return w, fmt.Errorf("gate.maxWait must be an object, found %s", written)
	}
	for _, c := range Classes {
		key := c.String() + "Ms"
		v, ok := bounds[key]
		if !ok {
			continue
		}
		f, isNumber := v.(float64)
		if !isNumber || math.IsNaN(f) || math.IsInf(f, 0) {
			return w, fmt.Errorf("gate.maxWait.%s must be a number, found %v", key, v)
		}
		d, err := millis("gate.maxWait."+key, f)
		if err != nil {
			return w, err
		}
		w.set(c, d)
	}
	return w, nil
}

// UnmarshalJSON reads a gate block (see FromMap) over p.
func (p *Policy) UnmarshalJSON(text []byte) error {
	return block.Unmarshal(text, p)
}
