// Package budget is the retry budget (Finagle's, as in Linkerd and tower),
// the same as stormguard's Rust library's: over a sliding window of TTL in
// ten steps, retries may be at most RetryRatio of the requests plus
// MinRetriesPerSecond × TTL. Times are nanoseconds since the budget's
// creation on a clock that does not go back.
package budget

import (
	"errors"
	"sync"
	"time"
)

const (
	slots  = 10
	minTTL = 10 * time.Millisecond
)

// Budget is shared by every call to one dependency.
type Budget struct {
	mu        sync.Mutex
	ratio     float64
	reserve   float64
	slotNanos uint64
	requests  [slots]count
	retries   [slots]count
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
		ratio:     retryRatio,
		reserve:   float64(minRetriesPerSecond) * ttl.Seconds(),
		slotNanos: slotNanos,
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
