// The closed state's window of recent calls, counting calls, failures and
// slow calls: a ring of the last N calls, or 20 time steps of the last T;
// and, the same time window, the half-open state's trials of its trial
// window (TrialWindow, or OpenTimeout if shorter).

package breaker

import "time"

// buckets is the number of steps a time window slides in: duration / 20.
const buckets = 20

// tally is the calls, failed calls and slow calls in a window.
type tally struct {
	calls, failures, slow uint32
}

func (t *tally) add(failed, slow bool) {
	t.calls = saturating(t.calls, 1)
	t.failures = saturating(t.failures, flag(failed))
	t.slow = saturating(t.slow, flag(slow))
}

func (t *tally) plus(o tally) {
	t.calls = saturating(t.calls, o.calls)
	t.failures = saturating(t.failures, o.failures)
	t.slow = saturating(t.slow, o.slow)
}

// saturatingTimes is a * b, at most the largest uint32.
func saturatingTimes(a, b uint32) uint32 {
	if p := uint64(a) * uint64(b); p <= uint64(^uint32(0)) {
		return uint32(p)
	}
	return ^uint32(0)
}

func flag(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

func saturating(a, b uint32) uint32 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint32(0)
}

// window is the closed state's window of recent calls.
type window interface {
	record(now uint64, failed, slow bool)
	tally(now uint64) tally
	clear()
	// capacity is the most calls a count window holds; false for a time window.
	capacity() (uint32, bool)
}

const (
	failedBit = 1
	slowBit   = 2
	usedBit   = 4
)

// countWindow is a ring of the last N outcomes, with running totals.
type countWindow struct {
	outcomes []uint8
	next     int
	total    tally
}

func newCountWindow(calls uint32) *countWindow {
	return &countWindow{outcomes: make([]uint8, calls)}
}

func (w *countWindow) record(_ uint64, failed, slow bool) {
	if old := w.outcomes[w.next]; old&usedBit != 0 {
		w.total.calls--
		w.total.failures -= uint32(old & failedBit)
		w.total.slow -= uint32(old&slowBit) >> 1
	}
	o := uint8(usedBit)
	if failed {
		o |= failedBit
	}
	if slow {
		o |= slowBit
	}
	w.outcomes[w.next] = o
	w.total.add(failed, slow)
	w.next = (w.next + 1) % len(w.outcomes)
}

func (w *countWindow) tally(uint64) tally { return w.total }

func (w *countWindow) clear() {
	for i := range w.outcomes {
		w.outcomes[i] = 0
	}
	w.next, w.total = 0, tally{}
}

func (w *countWindow) capacity() (uint32, bool) { return uint32(len(w.outcomes)), true }

// timeWindow is the calls of the last duration, kept in 20 steps of
// duration / 20 (in whole nanoseconds, at least 1) counted from its start.
type timeWindow struct {
	start   uint64
	step    uint64
	buckets [buckets]bucket
}

type bucket struct {
	step  uint64
	total tally
}

// newTimeWindow is an empty window of the last duration, its steps counted
// from start.
func newTimeWindow(duration time.Duration, start uint64) *timeWindow {
	step := uint64(duration) / buckets
	if step == 0 {
		step = 1
	}
	return &timeWindow{start: start, step: step}
}

// stepAt is the step now falls in: 0 before the window's start.
func (w *timeWindow) stepAt(now uint64) uint64 {
	if now < w.start {
		return 0
	}
	return (now - w.start) / w.step
}

func (w *timeWindow) record(now uint64, failed, slow bool) {
	step := w.stepAt(now)
	b := &w.buckets[step%buckets]
	if b.step != step {
		*b = bucket{step: step}
	}
	b.total.add(failed, slow)
}

func (w *timeWindow) tally(now uint64) tally {
	step := w.stepAt(now)
	var total tally
	for _, b := range w.buckets {
		if b.step <= step && step-b.step < buckets {
			total.plus(b.total)
		}
	}
	return total
}

func (w *timeWindow) clear() { w.buckets = [buckets]bucket{} }

func (w *timeWindow) capacity() (uint32, bool) { return 0, false }
