// The closed state's window of recent calls, counting calls, failures and
// slow calls: a ring of the last N calls, or 20 time steps of the last T.
// Each also knows which of its failures belong to a long run (one of
// ConsecutiveFailures or more), so that the background rate a run is
// judged against leaves earlier runs out.

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

// background is the calls of a window outside long runs of failures, and
// how many of them failed: what a run of failures is judged against.
type background struct {
	calls, failures uint32
}

// window is the closed state's window of recent calls.
type window interface {
	// record records a call: a failure continues the current run of
	// failures (a long one, if longRun said so), a success ends it.
	record(now uint64, failed, slow bool)
	// longRun says the run of failures just recorded is a long one: its
	// failures still in the window, and those still to come, are left out
	// of the background.
	longRun()
	tally(now uint64) tally
	// background is the window's calls and failures outside long runs.
	background(now uint64) background
	clear()
	// capacity is the most calls a count window holds; false for a time window.
	capacity() (uint32, bool)
}

const (
	failedBit = 1
	slowBit   = 2
	usedBit   = 4
	inRunBit  = 8
)

// countWindow is a ring of the last N outcomes, with running totals.
type countWindow struct {
	outcomes []uint8
	next     int
	total    tally
	// inRuns counts the slots holding a failure of a long run.
	inRuns uint32
	// long says whether the current run of failures is a long one.
	long bool
}

func newCountWindow(calls uint32) *countWindow {
	return &countWindow{outcomes: make([]uint8, calls)}
}

func (w *countWindow) record(_ uint64, failed, slow bool) {
	if old := w.outcomes[w.next]; old&usedBit != 0 {
		w.total.calls--
		w.total.failures -= uint32(old & failedBit)
		w.total.slow -= uint32(old&slowBit) >> 1
		w.inRuns -= uint32(old&inRunBit) >> 3
	}
	w.long = w.long && failed
	o := uint8(usedBit)
	if failed {
		o |= failedBit
	}
	if slow {
		o |= slowBit
	}
	if w.long {
		o |= inRunBit
		w.inRuns++
	}
	w.outcomes[w.next] = o
	w.total.add(failed, slow)
	w.next = (w.next + 1) % len(w.outcomes)
}

// longRun marks the current run's failures, newest first, back to the
// success (or empty slot) before it.
func (w *countWindow) longRun() {
	if w.long {
		return
	}
	w.long = true
	n := len(w.outcomes)
	for back := 1; back <= n; back++ {
		slot := &w.outcomes[(w.next+n-back)%n]
		if *slot&(usedBit|failedBit|inRunBit) != usedBit|failedBit {
			break
		}
		*slot |= inRunBit
		w.inRuns++
	}
}

func (w *countWindow) tally(uint64) tally { return w.total }

func (w *countWindow) background(uint64) background {
	return outside(w.total, w.inRuns)
}

// outside is the background of a window whose tally is t, inRuns of
// whose failures belong to long runs.
func outside(t tally, inRuns uint32) background {
	b := background{calls: t.calls, failures: t.failures}
	if b.calls > inRuns {
		b.calls -= inRuns
	} else {
		b.calls = 0
	}
	if b.failures > inRuns {
		b.failures -= inRuns
	} else {
		b.failures = 0
	}
	return b
}

func (w *countWindow) clear() {
	for i := range w.outcomes {
		w.outcomes[i] = 0
	}
	w.next, w.total, w.inRuns, w.long = 0, tally{}, 0, false
}

func (w *countWindow) capacity() (uint32, bool) { return uint32(len(w.outcomes)), true }

// timeWindow is the calls of the last duration, kept in 20 steps of
// duration / 20 (in whole nanoseconds, at least 1).
type timeWindow struct {
	step    uint64
	buckets [buckets]bucket
	// long says whether the current run of failures is a long one.
	long bool
	// pending says whether any bucket holds failures of the current run,
	// not yet known to be long.
	pending bool
}

type bucket struct {
	step  uint64
	total tally
	// inRuns counts failures of long runs.
	inRuns uint32
	// pending counts failures of the current run while it is not (yet) long.
	pending uint32
}

func newTimeWindow(duration time.Duration) *timeWindow {
	step := uint64(duration) / buckets
	if step == 0 {
		step = 1
	}
	return &timeWindow{step: step}
}

func (w *timeWindow) record(now uint64, failed, slow bool) {
	step := now / w.step
	if !failed {
		w.long = false
		if w.pending {
			for i := range w.buckets {
				w.buckets[i].pending = 0
			}
			w.pending = false
		}
	}
	b := &w.buckets[step%buckets]
	if b.step != step {
		*b = bucket{step: step}
	}
	b.total.add(failed, slow)
	if failed && w.long {
		b.inRuns = saturating(b.inRuns, 1)
	} else if failed {
		b.pending = saturating(b.pending, 1)
		w.pending = true
	}
}

// longRun counts the current run's failures, in whichever buckets they
// fell, as a long run's.
func (w *timeWindow) longRun() {
	if w.long {
		return
	}
	w.long = true
	for i := range w.buckets {
		b := &w.buckets[i]
		b.inRuns = saturating(b.inRuns, b.pending)
		b.pending = 0
	}
	w.pending = false
}

func (w *timeWindow) tally(now uint64) tally {
	t, _ := w.tallyAndRuns(now)
	return t
}

func (w *timeWindow) background(now uint64) background {
	return outside(w.tallyAndRuns(now))
}

// tallyAndRuns is the window's tally, and how many of its failures belong
// to long runs.
func (w *timeWindow) tallyAndRuns(now uint64) (tally, uint32) {
	step := now / w.step
	var total tally
	var inRuns uint32
	for _, b := range w.buckets {
		if b.step <= step && step-b.step < buckets {
			total.plus(b.total)
			inRuns = saturating(inRuns, b.inRuns)
		}
	}
	return total, inRuns
}

func (w *timeWindow) clear() { *w = timeWindow{step: w.step} }

func (w *timeWindow) capacity() (uint32, bool) { return 0, false }
