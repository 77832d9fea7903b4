// Package limits holds the range of every policy setting as the daemon
// validates it, read from the limits.json stormguard-core writes, so that
// the settings this client checks (the gate and circuitBreaker blocks) are
// held to exactly the daemon's ranges.
package limits

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

//go:embed limits.json
var file []byte

// Range is the range one setting must lie in.
type Range struct {
	// Key names the setting as the daemon's messages do.
	Key string `json:"key"`
	// Unit is what Low and High count: "count", "number" or "duration"
	// (nanoseconds).
	Unit string  `json:"unit"`
	Low  float64 `json:"low"`
	// LowAllowed says whether Low itself is allowed, or only values above it.
	LowAllowed bool    `json:"lowAllowed"`
	High       float64 `json:"high"`
	// HighAllowed says whether High itself is allowed, or only values below it.
	HighAllowed bool `json:"highAllowed"`
}

var ranges = read()

func read() []Range {
	var decoded struct{ Limits []Range }
	if err := json.Unmarshal(file, &decoded); err != nil {
		panic("stormguard: the embedded limits.json does not read: " + err.Error())
	}
	return decoded.Limits
}

// Of is the range of the setting key whose values count unit. Asking for
// one the file lacks is a bug in this client, caught by its tests.
func Of(key, unit string) Range {
	for _, r := range ranges {
		if r.Key == key && r.Unit == unit {
			return r
		}
	}
	panic(fmt.Sprintf("stormguard: no %s limit for %s in limits.json", unit, key))
}

// All is every range, as stormguard-core lists them.
func All() []Range {
	return append([]Range(nil), ranges...)
}

// From is r with its lower end at low, allowed.
func (r Range) From(low float64) Range {
	r.Low, r.LowAllowed = low, true
	return r
}

// Admits says whether v lies in r (a NaN never does).
func (r Range) Admits(v float64) bool {
	aboveLow := v > r.Low || (r.LowAllowed && v == r.Low)
	belowHigh := v < r.High || (r.HighAllowed && v == r.High)
	return aboveLow && belowHigh
}

// Count checks a whole number against the count range of key.
func Count(key string, v uint32) error {
	return Of(key, "count").check(float64(v), func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) })
}

// Number checks a real number against the number range of key.
func Number(key string, v float64) error {
	return Of(key, "number").Check(v)
}

// Duration checks a duration against the duration range of key, showing
// durations as a policy file writes them, as the daemon does: Go's way,
// with "us" for microseconds.
func Duration(key string, v time.Duration) error {
	return Of(key, "duration").check(float64(v), func(f float64) string {
		return strings.Replace(time.Duration(f).String(), "µs", "us", 1)
	})
}

// Check says what is wrong with the number v, naming r's key, or nil.
func (r Range) Check(v float64) error {
	return r.check(v, func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) })
}

// check words a refusal as the daemon does: "must be between 0 and 100,
// found 101", "must be above 0 and at most 1", "must be above 0 and below 1".
func (r Range) check(v float64, show func(float64) string) error {
	if r.Admits(v) {
		return nil
	}
	low, high := "between", "and"
	switch {
	case r.LowAllowed && !r.HighAllowed:
		low, high = "at least", "and below"
	case !r.LowAllowed && r.HighAllowed:
		low, high = "above", "and at most"
	case !r.LowAllowed:
		low, high = "above", "and below"
	}
	return fmt.Errorf("%s must be %s %s %s %s, found %s", r.Key, low, show(r.Low), high, show(r.High), show(v))
}

// Edge is a value at or next to one end of a range, and whether the range
// admits it.
type Edge struct {
	Value   float64
	Allowed bool
}

// Edges are r's ends, the values just inside them and just outside them,
// the step being a whole number for a count, a nanosecond for a duration
// and the next float for a number: what a client's tests try, so that a
// client whose check differs from the daemon's at any end fails them.
func (r Range) Edges() []Edge {
	step := func(v, toward float64) float64 {
		if r.Unit == "number" {
			return math.Nextafter(v, toward)
		}
		if toward > v {
			return v + 1
		}
		return v - 1
	}
	return []Edge{
		{r.Low, r.LowAllowed},
		{step(r.Low, math.Inf(-1)), false},
		{step(r.Low, math.Inf(1)), true},
		{r.High, r.HighAllowed},
		{step(r.High, math.Inf(1)), false},
		{step(r.High, math.Inf(-1)), true},
	}
}
