// Package budget is the retry budget (Finagle's, as in Linkerd and tower),
// the same as stormguard's Rust library's: over a sliding window of TTL in
// ten steps, retries may be at most RetryRatio of the requests plus
// MinRetriesPerSecond × TTL. Times are nanoseconds since the budget's
// creation on a clock that does not go back.
//
// A fleet-scoped budget's MinRetriesPerSecond is the whole fleet's: the
// daemon divides it among the processes, and LocalFloor says which floor a
// process applies, from the daemon's answers, with SetMinRetriesPerSecond.
package budget

import (
	"errors"
	"math"
	"sync"
	"time"
)

const (
	slots  = 10
	minTTL = 10 * time.Millisecond
)

// Budget is shared by every call to one dependency.
type Budget struct {
	mu      sync.Mutex
	ratio   float64
	reserve float64
	ttl     time.Duration
	// configured is MinRetriesPerSecond as set; fleet, whether it is the fleet's.
	configured float64
	fleet      bool
	slotNanos  uint64
	requests   [slots]count
	retries    [slots]count
	// Denied counts the retries refused.
	Denied uint64
}

type count struct {
	step, n uint64
}

// New makes a budget; a negative setting is an error naming it.
func New(retryRatio float64, minRetriesPerSecond uint32, ttl time.Duration) (*Budget, error) {
	if retryRatio < 0 {
		return nil, errors.New("retryRatio must be 0 or more")
	}
	if ttl <= 0 {
		return nil, errors.New("ttl must be above 0")
	}
	if ttl < minTTL {
		ttl = minTTL
	}
	slotNanos := uint64(ttl) / slots
	if slotNanos == 0 {
		slotNanos = 1
	}
	return &Budget{
		ratio:      retryRatio,
		reserve:    float64(minRetriesPerSecond) * ttl.Seconds(),
		ttl:        ttl,
		configured: float64(minRetriesPerSecond),
		slotNanos:  slotNanos,
	}, nil
}

// Deposit counts a first attempt at now.
func (b *Budget) Deposit(now uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	step := now / b.slotNanos
	b.requests[step%slots].add(step)
}

// TryRetry takes one retry from the budget at now if it allows one, and
// counts a refusal otherwise.
func (b *Budget) TryRetry(now uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	step := now / b.slotNanos
	var requests, retries uint64
	for i := range b.requests {
		requests += b.requests[i].live(step)
		retries += b.retries[i].live(step)
	}
	if float64(retries) < b.reserve+b.ratio*float64(requests) {
		b.retries[step%slots].add(step)
		return true
	}
	b.Denied++
	return false
}

// ScopeToFleet marks b's MinRetriesPerSecond as the fleet's floor, which
// the daemon divides among the processes (the policy's budget.scope:
// fleet): a reporter tracking b then sets b's floor from the daemon's
// answers. Call it before b is shared.
func (b *Budget) ScopeToFleet() {
	b.fleet = true
}

// FleetFloor is b's configured MinRetriesPerSecond and whether it is the
// fleet's (ScopeToFleet).
func (b *Budget) FleetFloor() (configured float64, fleet bool) {
	return b.configured, b.fleet
}

// SetMinRetriesPerSecond sets the retries always allowed per second: a
// fleet-scoped budget's part of the fleet's floor. Below 0 or not a number
// counts as 0.
func (b *Budget) SetMinRetriesPerSecond(perSecond float64) {
	if !(perSecond > 0) {
		perSecond = 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reserve = perSecond * b.ttl.Seconds()
}

// Allowed is how many retries the window allows in all at now: the floor's
// share plus RetryRatio of the requests in the window.
func (b *Budget) Allowed(now uint64) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	step := now / b.slotNanos
	var requests uint64
	for i := range b.requests {
		requests += b.requests[i].live(step)
	}
	return b.reserve + b.ratio*float64(requests)
}

// Refused is the number of retries refused so far (Denied, read under the
// budget's lock, so it may be called while other calls use the budget).
func (b *Budget) Refused() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Denied
}

// add counts one at step; a count for an older step than the one held goes
// to the step held, as the Rust library's does.
func (c *count) add(step uint64) {
	if step > c.step {
		c.step, c.n = step, 1
	} else {
		c.n++
	}
}

func (c *count) live(step uint64) uint64 {
	if step-c.step < slots {
		return c.n
	}
	return 0
}

// LocalFloor is a process's floor under a fleet-scoped budget: the part the
// daemon last gave it, or, while the daemon cannot be reached, the
// configured floor divided by the fleet size it last heard (the whole floor
// if it never heard one). Never more than the configured floor.
type LocalFloor struct {
	configured float64
	processes  uint64
}

// NewLocalFloor is the floor of a budget whose MinRetriesPerSecond is configured.
func NewLocalFloor(configured float64) LocalFloor {
	return LocalFloor{configured: math.Max(configured, 0)}
}

// Initial is the floor before the daemon has answered: the whole configured one.
func (f *LocalFloor) Initial() float64 {
	return f.configured
}

// Answered takes the daemon's answer (this process's part, the processes
// sharing the floor) and says the floor to apply.
func (f *LocalFloor) Answered(perSecond float64, processes uint64) float64 {
	f.processes = processes
	if math.IsNaN(perSecond) {
		return f.Unreachable()
	}
	return math.Min(math.Max(perSecond, 0), f.configured)
}

// Unreachable is the floor to apply while reports cannot be delivered.
func (f *LocalFloor) Unreachable() float64 {
	if f.processes == 0 {
		return f.configured
	}
	return f.configured / float64(f.processes)
}
