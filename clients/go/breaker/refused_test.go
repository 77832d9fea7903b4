// Tests of calls the dependency refused as overloaded, with no send gate
// pacing it: a breaker they trip goes half-open, and its trials follow what
// the dependency accepts (as core's breaker tests do, under the same names).

package breaker

import (
	"errors"
	"testing"
	"time"
)

// refusing is a breaker under core's test policy: it opens after 3
// failures in a row; rates are judged over the last 10 calls once 10 are
// seen; open for openTimeout (1 s in core's policy, 10 s in its
// open_ten_seconds); 2 trials at once, 2 good ones close it. Its calls
// end as soon as they are made, at now.
type refusing struct {
	t   *testing.T
	b   *Breaker
	now uint64
}

func newRefusing(t *testing.T, fleet bool, openTimeout time.Duration) *refusing {
	t.Helper()
	b, err := New(Policy{
		Enabled: true, ConsecutiveFailures: 3, FailureRateThreshold: 0.5, SlowCallRateThreshold: 1,
		SlowCallDuration: time.Minute, MinimumCalls: 10, Window: SlidingWindow{Calls: 10},
		OpenTimeout: openTimeout, HalfOpenMaxCalls: 2, SuccessThreshold: 2, FleetScoped: fleet,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &refusing{t: t, b: b}
}

// openTenSeconds is core's open_ten_seconds: open for 10 s, its trials are
// counted over ten seconds.
const openTenSeconds = 10 * time.Second

func (r *refusing) advance(d time.Duration) { r.now += uint64(d) }

// call makes a call that ends with o at once.
func (r *refusing) call(o outcome) {
	r.t.Helper()
	permit, err := r.b.Acquire(r.now)
	if err != nil {
		r.t.Fatalf("at %s: %v", time.Duration(r.now), err)
	}
	switch o {
	case outcomeRefused:
		permit.RecordRefused(r.now)
	default:
		permit.Record(o == outcomeFailed, r.now)
	}
}

// refused says whether the breaker refuses a call now, half-open.
func (r *refusing) refused() bool {
	r.t.Helper()
	permit, err := r.b.Acquire(r.now)
	if err == nil {
		permit.Cancel()
		return false
	}
	var no *NotPermitted
	if !errors.As(err, &no) || no.State != HalfOpen || no.RetryIn != 0 {
		r.t.Fatalf("refused by %v, want a half-open breaker's refusal", err)
	}
	return true
}

func (r *refusing) want(s State, why string) {
	r.t.Helper()
	if got := r.b.State(); got != s {
		r.t.Fatalf("at %s: %s, want %s: %s", time.Duration(r.now), got, s, why)
	}
}

// trippedByRefusals: refusals in a row trip a closed breaker half-open.
func (r *refusing) trippedByRefusals() {
	r.t.Helper()
	for i := 0; i < 3; i++ {
		r.call(outcomeRefused)
	}
	r.want(HalfOpen, "three refusals in a row")
}

func TestRefusalsTripAClosedBreakerHalfOpenAndFailuresOpenIt(t *testing.T) {
	r := newRefusing(t, false, openTenSeconds)
	r.call(outcomeRefused)
	r.call(outcomeFailed)
	r.call(outcomeFailed)
	r.want(Open, "the run ended on a failure")

	r = newRefusing(t, false, openTenSeconds)
	r.trippedByRefusals()
	permit, err := r.b.Acquire(r.now)
	if err != nil || !permit.Trial() {
		t.Fatalf("a trial, at once: %v", err)
	}
}

func TestHalfOpenTrialsFollowWhatTheDependencyAccepts(t *testing.T) {
	r := newRefusing(t, false, openTenSeconds)
	r.trippedByRefusals()
	r.call(outcomeRefused)
	if !r.refused() {
		t.Fatal("one refusal spends the first share")
	}
	r.advance(5 * time.Second)
	r.call(outcomeRefused)
	if !r.refused() {
		t.Fatal("two a window, the second after half of it")
	}

	r.advance(5 * time.Second)
	r.call(outcomeSucceeded)
	r.call(outcomeRefused)
	r.call(outcomeRefused)
	if !r.refused() {
		t.Fatal("the window holds 3 refused and 1 accepted: refusals may outnumber acceptances by two")
	}
	r.advance(5 * time.Second)
	r.call(outcomeSucceeded)
	r.call(outcomeRefused)
	r.call(outcomeRefused)
	if !r.refused() {
		t.Fatal("2 accepted, 4 refused in the window")
	}
	r.want(HalfOpen, "trials were accepted")
	if got := r.b.Rejected(); got != 4 {
		t.Fatalf("%d calls refused, want the 4 held back", got)
	}
}

func TestRefusedTrialsOpenTheBreakerOnlyAfterAWindowWithNoneAccepted(t *testing.T) {
	r := newRefusing(t, false, openTenSeconds)
	r.trippedByRefusals()
	r.call(outcomeRefused)
	r.advance(5 * time.Second)
	r.call(outcomeRefused)
	r.advance(5 * time.Second)
	r.call(outcomeRefused)
	r.want(Open, "ten seconds of refusals, nothing accepted")
	_, err := r.b.Acquire(r.now)
	var no *NotPermitted
	if !errors.As(err, &no) || no.State != Open || no.RetryIn != 10*time.Second {
		t.Fatalf("%v, want open for its 10 s openTimeout", err)
	}

	r = newRefusing(t, false, openTenSeconds)
	r.trippedByRefusals()
	r.advance(9 * time.Second)
	r.call(outcomeSucceeded)
	r.advance(2 * time.Second)
	r.call(outcomeRefused)
	r.want(HalfOpen, "a trial accepted 2 s ago: the dependency is up")
	r.advance(9 * time.Second)
	r.call(outcomeRefused)
	r.want(Open, "the accepted trial slid out of the window")
}

func TestAcceptedTrialsInARowCloseItAndAnOverloadThenTripsItHalfOpenAgain(t *testing.T) {
	r := newRefusing(t, false, openTenSeconds)
	r.trippedByRefusals()
	r.advance(5 * time.Second)
	r.call(outcomeSucceeded)
	r.call(outcomeRefused)
	r.call(outcomeSucceeded)
	r.want(HalfOpen, "a refusal broke the run")
	r.call(outcomeSucceeded)
	r.want(Closed, "two accepted in a row")
	r.trippedByRefusals()
}

// closedByTheFleet is a fleet-scoped breaker the daemon's trials closed.
func closedByTheFleet(t *testing.T) *refusing {
	t.Helper()
	r := newRefusing(t, true, openTenSeconds)
	for i := 0; i < 3; i++ {
		r.call(outcomeFailed)
	}
	r.want(Open, "three failures in a row")
	if !r.b.Heard(Verdict{State: Closed}, r.now+uint64(time.Second), r.now) {
		t.Fatal("the daemon's close closes it")
	}
	return r
}

func TestAFleetScopedBreakerFollowsWhatIsAcceptedInTheOverloadAfterAReturnAndLeavesOutagesToTheFleet(t *testing.T) {
	r := newRefusing(t, true, time.Second)
	for i := 0; i < 3; i++ {
		r.call(outcomeRefused)
	}
	r.want(Open, "no return to follow: the fleet's half-open judges")

	r = closedByTheFleet(t)
	r.trippedByRefusals()
	if r.b.AsksFleet() {
		t.Fatal("half-open on the overload: nothing for the daemon")
	}
	if report, _ := r.b.FleetReport(r.now); report.Open {
		t.Fatalf("%+v, want not open: half-open on the overload", report)
	}
	if r.b.Heard(Verdict{State: Closed}, r.now+uint64(time.Second), r.now) {
		t.Fatal("the fleet's word is for open breakers")
	}
	r.want(HalfOpen, "the fleet's word is for open breakers")
	r.call(outcomeRefused)
	r.advance(5 * time.Second)
	r.call(outcomeRefused)
	r.advance(5 * time.Second)
	r.call(outcomeRefused)
	r.want(Open, "ten seconds, none accepted")
	if !r.b.AsksFleet() {
		t.Fatal("open: the daemon hears of it")
	}
	if report, _ := r.b.FleetReport(r.now); !report.Open {
		t.Fatalf("%+v, want open", report)
	}

	r = closedByTheFleet(t)
	r.advance(10 * time.Second)
	for i := 0; i < 3; i++ {
		r.call(outcomeRefused)
	}
	r.want(Open, "ten seconds without a refusal: the return's overload ended")

	r = newRefusing(t, true, time.Second)
	for i := 0; i < 3; i++ {
		r.call(outcomeFailed)
	}
	r.want(Open, "three failures in a row")
	r.b.Heard(Verdict{State: HalfOpen, Trials: 1}, r.now+uint64(time.Second), r.now)
	trial, err := r.b.Acquire(r.now)
	if err != nil || !trial.FleetTrial() {
		t.Fatalf("the daemon's slot: %v", err)
	}
	trial.RecordRefused(r.now)
	if report, _ := r.b.FleetReport(r.now); report.Failed != 1 {
		t.Fatalf("%+v, want 1 failed: the daemon judges its trials", report)
	}
}

// TestASlowRefusedTrialOpensTheBreaker: a refused trial slower than
// slowCallDuration is slow, and a slow trial opens the breaker.
func TestASlowRefusedTrialOpensTheBreaker(t *testing.T) {
	r := newRefusing(t, false, time.Second)
	r.trippedByRefusals()
	permit, err := r.b.Acquire(r.now)
	if err != nil {
		t.Fatal(err)
	}
	r.advance(time.Minute)
	permit.RecordRefused(r.now)
	r.want(Open, "a trial refused after a minute was slow")
}

func TestABreakerOpenForLessThanTenSecondsJudgesItsTrialsAsBriefly(t *testing.T) {
	// openTimeout 1 s: two trials a second, and a second of refusals opens it.
	r := newRefusing(t, false, time.Second)
	r.trippedByRefusals()
	r.call(outcomeRefused)
	if !r.refused() {
		t.Fatal("one refusal spends the first share")
	}
	r.advance(500 * time.Millisecond)
	r.call(outcomeRefused)
	r.want(HalfOpen, "half a second of refusals")
	r.advance(500 * time.Millisecond)
	r.call(outcomeRefused)
	r.want(Open, "a second, none accepted")
}
