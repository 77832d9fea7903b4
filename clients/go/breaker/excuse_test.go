// Tests of the rule that excuses a run of failures chance explains: its
// bound and verdicts against core's vectors, and the runs that open the
// breaker after a background, as the Rust library's tests have them.

package breaker

import (
	"encoding/json"
	"os"
	"testing"
	"time"
)

// TestEveryExcuseIsCores: for every background and breaker in the shared
// vectors, the bound of the background's failure rate is core's to the
// last bit, and the shortest run that opens the breaker is core's.
func TestEveryExcuseIsCores(t *testing.T) {
	text, err := os.ReadFile("../../vectors/breaker.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Excuses [][6]json.Number `json:"excuses"`
	}
	if err := json.Unmarshal(text, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Excuses) == 0 {
		t.Fatal("no excuses in the vectors")
	}
	for _, c := range file.Excuses {
		consecutive, threshold, calls, failures := whole(t, c[0]), number(t, c[1]), whole(t, c[2]), whole(t, c[3])
		floor, opensAt := number(t, c[4]), whole(t, c[5])
		if got := backgroundFloor(failures, calls); got != floor {
			t.Errorf("%v: floor %v, core %v", c, got, floor)
		}
		run := consecutive
		for chanceExplains(run, consecutive, background{calls, failures}, threshold) {
			run++
		}
		if run != opensAt {
			t.Errorf("%v: opens at %d, core at %d", c, run, opensAt)
		}
	}
}

func whole(t *testing.T, n json.Number) uint32 {
	t.Helper()
	v, err := n.Int64()
	if err != nil {
		t.Fatal(err)
	}
	return uint32(v)
}

func number(t *testing.T, n json.Number) float64 {
	t.Helper()
	v, err := n.Float64()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// runsPolicy opens after 5 failures in a row, rates over the last 100
// calls: the defaults' triggers.
func runsPolicy() Policy {
	return Policy{
		Enabled: true, ConsecutiveFailures: 5, FailureRateThreshold: 0.5, SlowCallRateThreshold: 1,
		SlowCallDuration: time.Minute, MinimumCalls: 100, Window: SlidingWindow{Calls: 100},
		OpenTimeout: 30 * time.Second, HalfOpenMaxCalls: 10, SuccessThreshold: 3,
	}
}

// feed makes one call that fails or succeeds on a closed breaker.
func feed(t *testing.T, b *Breaker, failed bool) {
	t.Helper()
	p, err := b.Acquire(0)
	if err != nil {
		t.Fatal(err)
	}
	p.Record(failed, 0)
}

// pattern makes calls of which failing (at most 7) of every ten fail, from
// the fourth: a background with no run longer than failing.
func pattern(t *testing.T, b *Breaker, calls, failing int) {
	t.Helper()
	for i := 0; i < calls; i++ {
		feed(t, b, i%10 >= 3 && i%10 < 3+failing)
	}
}

// runThatOpens fails calls until the breaker opens, and says how many
// failures in a row it opened at.
func runThatOpens(t *testing.T, b *Breaker) uint32 {
	t.Helper()
	for i := 0; i < 100; i++ {
		feed(t, b, true)
		if b.State() == Open {
			return b.consecutiveFailures
		}
	}
	t.Fatal("100 failures in a row did not open it")
	return 0
}

func mustNew(t *testing.T, p Policy) *Breaker {
	t.Helper()
	b, err := New(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestATenPercentBackgroundOpensItAtConsecutiveFailures(t *testing.T) {
	b := mustNew(t, runsPolicy())
	pattern(t, b, 90, 1)
	if run := runThatOpens(t, b); run != 5 {
		t.Fatalf("opened at %d", run)
	}
	if !rare(0.1, 5) || rare(0.1, 4) || rare(0.10000001, 5) {
		t.Fatal("0.1⁵ is one in 100,000; 0.1⁴ and 0.10000001⁵ are more")
	}
}

func TestAWindowOfFewCallsDoesNotExcuseARun(t *testing.T) {
	lenient := runsPolicy()
	lenient.FailureRateThreshold = 0.95
	fresh := mustNew(t, lenient)
	for i := 0; i < 20; i++ {
		feed(t, fresh, i%5 == 0 || i%5 == 2)
	}
	if run := runThatOpens(t, fresh); run != 5 {
		t.Fatalf("twenty calls, eight failed: opened at %d", run)
	}
	small := lenient
	small.MinimumCalls, small.Window = 40, SlidingWindow{Calls: 40}
	b := mustNew(t, small)
	pattern(t, b, 400, 3)
	if run := runThatOpens(t, b); run != 5 {
		t.Fatalf("a window of forty: opened at %d", run)
	}
}

func TestARunOfTwiceConsecutiveFailuresOpensItWhateverTheBackground(t *testing.T) {
	lenient := runsPolicy()
	lenient.FailureRateThreshold = 0.95
	b := mustNew(t, lenient)
	pattern(t, b, 100, 4)
	if run := runThatOpens(t, b); run != 10 {
		t.Fatalf("40 %% background: opened at %d", run)
	}
}

func TestAFlappingDependencyDoesNotExcuseItsNextRealRun(t *testing.T) {
	steady := mustNew(t, runsPolicy())
	pattern(t, steady, 80, 3)
	alone := runThatOpens(t, steady)
	flapping := mustNew(t, runsPolicy())
	pattern(t, flapping, 60, 3)
	for flap := 0; flap < 2; flap++ {
		for i := 0; i < 7; i++ {
			feed(t, flapping, true)
		}
		if flapping.State() != Closed {
			t.Fatal("a flap of seven is excused")
		}
		pattern(t, flapping, 10, 3)
	}
	if run := runThatOpens(t, flapping); run != alone || alone >= 10 {
		t.Fatalf("after the flaps it opened at %d, without them at %d", run, alone)
	}
}

// TestALongRunsFailuresStayOutOfTheBackground in either window, until
// they slide out.
func TestALongRunsFailuresStayOutOfTheBackground(t *testing.T) {
	const ms = uint64(time.Millisecond)
	for _, w := range []window{newCountWindow(8), newTimeWindow(10 * time.Second)} {
		for i, failed := range []bool{false, true, false, true, true, true, false, true} {
			w.record(uint64(i)*900*ms, failed, false)
			if i == 4 {
				w.longRun()
			}
		}
		now := 7 * 900 * ms
		if got := w.background(now); got != (background{calls: 5, failures: 2}) || w.tally(now).failures != 5 {
			t.Fatalf("%T: %+v", w, got)
		}
		later := now + 7500*ms
		if _, ok := w.capacity(); ok {
			later = now
			for i := 0; i < 5; i++ {
				w.record(now, false, false)
			}
		}
		if w.background(later).failures != 1 || w.tally(later).failures != 2 {
			t.Fatalf("%T: %+v %+v", w, w.background(later), w.tally(later))
		}
		w.clear()
		w.record(later, true, false)
		if got := w.background(later); got != (background{calls: 1, failures: 1}) {
			t.Fatalf("%T after clear: %+v", w, got)
		}
	}
}
