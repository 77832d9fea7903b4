// Package retryon reads lists of failure conditions written as a policy's
// retryOn is (and gate.overloadOn, which is written the same way), and says
// which failures a list covers, as the Rust library's RetryOn does: the
// named conditions connect-failure, timeout and reset are the failures
// without a status; "5xx" is every 5xx but 501 (no retry can fix Not
// Implemented), "gateway-error" is 502 to 504, and a number from 400 to 599
// is that status.
package retryon

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Failures are the failures without an HTTP status, as a list names them.
var Failures = []string{"connect-failure", "timeout", "reset"}

// Names are the named conditions, as a list writes them.
var Names = []string{"connect-failure", "timeout", "reset", "5xx", "gateway-error"}

// The indexes in Names of the named conditions.
const (
	connectFailure = iota
	timeout
	reset
	serverError
	gatewayError
)

// The status codes a list may name.
const (
	lowestStatus  = 400
	highestStatus = 599
)

// Conditions is a list of conditions, as a set: what it covers does not
// depend on its order. The zero value covers nothing. Conditions are
// comparable with ==.
type Conditions struct {
	// named has bit i set when Names[i] is listed.
	named uint8
	// status has bit code-400 set when the status code is listed.
	status [(highestStatus - lowestStatus + 64) / 64]uint64
}

// condition is one entry of a list: a named condition (name, the index in
// Names) or a status code (status, with name -1).
type condition struct {
	name   int
	status int
}

func (c condition) String() string {
	if c.name >= 0 {
		return Names[c.name]
	}
	return strconv.Itoa(c.status)
}

func (s Conditions) has(c condition) bool {
	if c.name >= 0 {
		return s.named&(1<<c.name) != 0
	}
	bit := c.status - lowestStatus
	return s.status[bit/64]&(1<<(bit%64)) != 0
}

func (s *Conditions) add(c condition) {
	if c.name >= 0 {
		s.named |= 1 << c.name
		return
	}
	bit := c.status - lowestStatus
	s.status[bit/64] |= 1 << (bit % 64)
}

// Parse reads a list as a policy serves it (decoded JSON: a []any of names
// and numbers) under the key path key ("retryOn", "gate.overloadOn"), with
// the Rust library's rules: each entry a named condition or a status code
// from 400 to 599, none listed twice. The first entry that breaks them is
// the error, which names the key path and the entry's index, as the Rust
// library's policy errors do; the conditions returned are every valid entry
// all the same.
func Parse(key string, list any) (Conditions, error) {
	var s Conditions
	items, ok := list.([]any)
	if !ok {
		return s, fmt.Errorf("%s: expected a list of conditions (e.g. [5xx, 429]), found %s", key, kind(list))
	}
	var first error
	for i, item := range items {
		c, problem := read(item)
		if problem == "" && s.has(c) {
			problem = c.String() + " is listed twice"
		}
		if problem != "" {
			if first == nil {
				first = fmt.Errorf("%s[%d]: %s", key, i, problem)
			}
			continue
		}
		s.add(c)
	}
	return s, first
}

// Overload is the conditions that say a dependency is overloaded or down,
// gate.overloadOn's default, as the Rust library's RetryOn::overload: a
// refused connection, a timeout, 429 Too Many Requests and 503 Service
// Unavailable. A 500 is an error, not a sign of load.
func Overload() Conditions {
	var s Conditions
	for _, c := range []condition{{name: connectFailure}, {name: timeout}, {name: -1, status: 429}, {name: -1, status: 503}} {
		s.add(c)
	}
	return s
}

// read is the condition an entry names, or what is wrong with it.
func read(item any) (condition, string) {
	switch v := item.(type) {
	case string:
		for i, name := range Names {
			if v == name {
				return condition{name: i}, ""
			}
		}
		return condition{}, fmt.Sprintf("unknown retry condition %q; expected one of: %s", v, strings.Join(Names, ", "))
	case float64:
		if v != math.Trunc(v) || math.IsInf(v, 0) {
			break
		}
		if v < lowestStatus || v > highestStatus {
			return condition{}, fmt.Sprintf("status %s is not an error status; retry only on 400 to 599", strconv.FormatFloat(v, 'f', -1, 64))
		}
		return condition{name: -1, status: int(v)}, ""
	case int:
		return read(float64(v))
	}
	return condition{}, fmt.Sprintf("expected a condition (%s) or a status code, found %s", strings.Join(Names, ", "), kind(item))
}

// kind describes a decoded JSON value, as the Rust library's errors do.
func kind(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return fmt.Sprintf("boolean %v", v)
	case float64:
		return "number " + strconv.FormatFloat(v, 'f', -1, 64)
	case int:
		return "number " + strconv.Itoa(v)
	case string:
		return fmt.Sprintf("string %q", v)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("%T", v)
}

// CoversStatus says whether a listed condition covers an answer with HTTP
// status.
func (s Conditions) CoversStatus(status int) bool {
	switch {
	case status < lowestStatus || status > highestStatus:
		return false
	case s.has(condition{name: serverError}) && status >= 500 && status != 501:
		return true
	case s.has(condition{name: gatewayError}) && status >= 502 && status <= 504:
		return true
	}
	return s.has(condition{name: -1, status: status})
}

// CoversFailure says whether the list names failure, one of Failures (a
// failure without a status).
func (s Conditions) CoversFailure(failure string) bool {
	for i, name := range Failures {
		if failure == name {
			return s.has(condition{name: i})
		}
	}
	return false
}

// String writes the list as a policy does: the named conditions, then the
// status codes, in order ("[connect-failure, timeout, 429, 503]").
func (s Conditions) String() string {
	var listed []string
	for i, name := range Names {
		if s.has(condition{name: i}) {
			listed = append(listed, name)
		}
	}
	for code := lowestStatus; code <= highestStatus; code++ {
		if s.has(condition{name: -1, status: code}) {
			listed = append(listed, strconv.Itoa(code))
		}
	}
	return "[" + strings.Join(listed, ", ") + "]"
}
