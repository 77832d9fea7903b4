// Classes of calls (gate.criticality) and how long each may wait for a
// turn (gate.maxWait): who the gate serves first, and sheds first, when it
// cannot serve every call.

package gate

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Criticality is how much a call matters when the send gate cannot serve
// every call: critical calls are served first and shed last, sheddable
// ones the other way round (the classes of gRPC's and Google's load
// shedding, three of their four). Within a class, first come, first
// served. The zero value is Default, the class of a call that names none.
type Criticality uint8

// The classes.
const (
	// Default: a call that names no class.
	Default Criticality = iota
	// Critical: served first, shed last: what the service exists to answer.
	Critical
	// Sheddable: served last, shed first: prefetches, batch work, retries
	// of background jobs.
	Sheddable
)

// Classes is every class, most critical first: the order the gate serves
// them in, and the order of Tally's counts by class (see Rank).
var Classes = [3]Criticality{Critical, Default, Sheddable}

// Rank is the class's place in Classes: 0 is served first. A value that is
// not a class ranks as Default.
func (c Criticality) Rank() int {
	switch c {
	case Critical:
		return 0
	case Sheddable:
		return 2
	}
	return 1
}

// known says whether c is one of the classes.
func (c Criticality) known() bool {
	return c <= Sheddable
}

// String is the class as a policy writes it: "critical", "default" or
// "sheddable".
func (c Criticality) String() string {
	switch c {
	case Critical:
		return "critical"
	case Default:
		return "default"
	case Sheddable:
		return "sheddable"
	}
	return fmt.Sprintf("Criticality(%d)", uint8(c))
}

// classNames is every class as a policy writes it, most critical first.
func classNames() string {
	names := make([]string, len(Classes))
	for i, c := range Classes {
		names[i] = c.String()
	}
	return strings.Join(names, ", ")
}

// parseCriticality reads gate.criticality as a policy serves it: a class's
// name. Anything else is an error naming the key and the classes allowed,
// as the Rust library's policy errors do.
func parseCriticality(v any) (Criticality, error) {
	name, isString := v.(string)
	if !isString {
		// Shown as the policy wrote it: null, not Go's <nil>.
		written, _ := json.Marshal(v)
		return Default, fmt.Errorf("gate.criticality: expected one of %s, found %s", classNames(), written)
	}
	for _, c := range Classes {
		if name == c.String() {
			return c, nil
		}
	}
	return Default, fmt.Errorf("gate.criticality: unknown class %q; expected one of: %s", name, classNames())
}

// MaxWait is how long after it began a call of each class may still wait
// for the send gate's turn (gate.maxWait): a call whose turn, at the pace
// the gate keeps, would come later fails at once (it is shed) instead of
// waiting in a line that grows for as long as an overload lasts, and one
// still in line then gives up. 0 sends a call only if a turn is free at
// once. The call's deadline bounds the wait too.
type MaxWait struct {
	// Critical is the bound of critical calls, served first (by default
	// 5 s: they wait only while critical calls alone outrun the pace).
	Critical time.Duration
	// Default is the bound of calls that name no class (by default 1 s:
	// a line that holds a call longer holds it past the point most
	// callers still want the answer).
	Default time.Duration
	// Sheddable is the bound of sheddable calls, served last and shed
	// first (by default 250 ms: sent on a turn that is free, or dropped).
	Sheddable time.Duration
}

// Of is the bound of class (Default's for a value that is not a class).
func (w MaxWait) Of(class Criticality) time.Duration {
	switch class {
	case Critical:
		return w.Critical
	case Sheddable:
		return w.Sheddable
	}
	return w.Default
}

// check holds each bound to the daemon's range, naming the class's key
// (gate.maxWait.critical, ...).
func (w MaxWait) check(inRange func(key string, d time.Duration) error) error {
	for _, c := range Classes {
		if err := inRange("gate.maxWait."+c.String(), w.Of(c)); err != nil {
			return err
		}
	}
	return nil
}

// set sets the bound of class to d.
func (w *MaxWait) set(class Criticality, d time.Duration) {
	switch class {
	case Critical:
		w.Critical = d
	case Sheddable:
		w.Sheddable = d
	default:
		w.Default = d
	}
}

// Asker is who asks for a turn: the call's class, and when its turn must
// come by.
type Asker struct {
	// Class says which calls go first: those of a more critical class wait
	// ahead of it, those of a less critical one behind.
	Class Criticality
	// By is the latest its turn may come, on the gate's clock: a call whose
	// turn, at the present pace, would come later is shed. 0 is no bound,
	// as a zero deadline is none.
	By uint64
}
