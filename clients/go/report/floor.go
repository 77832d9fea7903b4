// Fleet-scoped retry budgets: setting each one's floor from the daemon's
// answers to reports, or to a fallback while reports fail.

package report

import (
	"encoding/json"

	"github.com/stormguard/stormguard/clients/go/budget"
)

// A fleet-scoped retry budget's floor in this process: the part of the
// fleet's floor the daemon gave in its last answer to a report, or, while
// reports cannot be delivered, the fallback budget.LocalFloor says. The
// part arrives with the report's answer, off the call path.

// floorPart is one entry of the answer's fleetBudgets; a field missing or
// unreadable is nil, and the entry is left out.
type floorPart struct {
	MinRetriesPerSecond *float64 `json:"minRetriesPerSecond"`
	Processes           *uint64  `json:"processes"`
}

// readPart is the part an answer's entry holds, if it holds one.
func readPart(entry json.RawMessage) (floorPart, bool) {
	var part floorPart
	if err := json.Unmarshal(entry, &part); err != nil || part.MinRetriesPerSecond == nil || part.Processes == nil {
		return floorPart{}, false
	}
	return part, true
}

// fleetFloor is one dependency's floor, while its budget is fleet-scoped.
type fleetFloor struct {
	configured float64
	local      budget.LocalFloor
	applied    float64
	answered   bool
}

// followFloor is the floor for b, following previous (the floor of the
// budget b replaces) while the configured floor is the same: a new policy
// version does not forget the daemon's last word. Nil unless b is
// fleet-scoped.
func followFloor(previous *fleetFloor, b *budget.Budget) *fleetFloor {
	if b == nil {
		return nil
	}
	configured, fleet := b.FleetFloor()
	if !fleet {
		return nil
	}
	floor := previous
	if floor == nil || floor.configured != configured {
		local := budget.NewLocalFloor(configured)
		floor = &fleetFloor{configured: configured, local: local, applied: local.Initial()}
	}
	b.SetMinRetriesPerSecond(floor.applied)
	return floor
}

// answered hands each fleet-scoped budget the part of its floor the daemon gave.
func (r *Reporter) answered(parts map[string]json.RawMessage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for service, entry := range parts {
		counts := r.services[service]
		part, ok := readPart(entry)
		if !ok || counts == nil || counts.floor == nil || counts.budget == nil {
			continue
		}
		floor := counts.floor
		floor.applied = floor.local.Answered(*part.MinRetriesPerSecond, *part.Processes)
		floor.answered = true
		counts.budget.SetMinRetriesPerSecond(floor.applied)
	}
}

// unreachable sets each fleet-scoped budget's fallback floor: a report
// could not be delivered.
func (r *Reporter) unreachable() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, counts := range r.services {
		if counts.floor != nil && counts.budget != nil {
			counts.floor.applied = counts.floor.local.Unreachable()
			counts.budget.SetMinRetriesPerSecond(counts.floor.applied)
		}
	}
}

// awaitsPart says whether a fleet-scoped budget has not yet had its part.
func (r *Reporter) awaitsPart() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, counts := range r.services {
		if counts.floor != nil && !counts.floor.answered {
			return true
		}
	}
	return false
}
