// Tests of the send gate: its line, its pace, and what turns it on and off.

package gate

import (
	"math"
	"math/rand"
	"testing"
	"time"
)

// defaults is the built-in gate block, turned on.
func defaults() Policy {
	return Policy{Enabled: true, MinRate: 0.5, MaxRate: 100_000, Beta: 0.7, Scale: 0.4, Ramp: 16, Quiet: 5 * time.Second}
}

// newGate is a gate under overloadWhen: any-refusal (the first refusal
// turns it on), whose slow start adds one turn per second per accepted
// attempt, for round figures, and whose first credit is 0: the first turn
// comes a whole interval after the gate turns on.
func newGate(t *testing.T, change ...func(*Policy)) *Gate {
	t.Helper()
	return gateFrom(t, func(p *Policy) { p.Ramp = 1; p.OverloadWhen = AnyRefusal }, change...)
}

// gateFrom is a gate under the built-in default policy as base and then
// change set it, whose first credit is 0.
func gateFrom(t *testing.T, base func(*Policy), change ...func(*Policy)) *Gate {
	t.Helper()
	p := defaults()
	base(&p)
	for _, c := range change {
		c(&p)
	}
	g, err := New(p, func() float64 { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// at is s seconds after the gate's creation, rounded as the Rust tests'
// Duration::from_secs_f64 rounds.
func at(s float64) uint64 { return nanosOf(s) }

func paceOf(t *testing.T, g *Gate) float64 {
	t.Helper()
	r, on := g.Rate()
	if !on {
		t.Fatal("the gate is off")
	}
	return r
}

// inLine is a check that a turn waits in line, giving its ticket.
func inLine(t *testing.T) func(Ticket, bool) Ticket {
	return func(ticket Ticket, wait bool) Ticket {
		t.Helper()
		if !wait {
			t.Fatal("expected to wait in line")
		}
		return ticket
	}
}

func claim(t *testing.T, g *Gate, ticket Ticket, now uint64, want Verdict, wantAt uint64) {
	t.Helper()
	if verdict, due := g.Claim(ticket, now, nil); verdict != want || due != wantAt {
		t.Fatalf("ticket %d at %d: %s %d, want %s %d", ticket, now, verdict, due, want, wantAt)
	}
}

func TestOffItGivesEveryTurnAtOnceAndIgnoresGoodAnswers(t *testing.T) {
	g := newGate(t)
	for i := 0; i < 1000; i++ {
		if _, wait := g.Turn(0); wait {
			t.Fatal("an off gate made an attempt wait")
		}
		g.Record(Accepted, 0, 0)
	}
	if _, on := g.Rate(); on || g.On() || g.Phase() != "off" {
		t.Fatal("good answers turned the gate on")
	}
}

func TestTheFirstOverloadTurnsItOnAndTheLineMovesAtTheProbeRate(t *testing.T) {
	g := newGate(t)
	queued := inLine(t)
	g.Record(Overloaded, 0, 0)
	if r := paceOf(t, g); r != 0.5 || g.Phase() != "probing" {
		t.Fatalf("%v %s", r, g.Phase())
	}
	first := queued(g.Turn(0))
	second := queued(g.Turn(0))
	claim(t, g, first, 0, At, at(2))
	claim(t, g, second, 0, Behind, 0)
	if ticket, due, ok := g.FirstInLine(); !ok || ticket != first || due != at(2) {
		t.Fatal(ticket, due, ok)
	}
	claim(t, g, second, at(2), Behind, 0) // first come, first served
	claim(t, g, first, at(2), Go, 0)
	claim(t, g, second, at(2), At, at(4))
	claim(t, g, second, at(4), Go, 0)
	if g.Waiting() != 0 {
		t.Fatal(g.Waiting())
	}
	if _, wait := g.Turn(at(6)); wait {
		t.Fatal("due, and nobody in line")
	}
	queued(g.Turn(at(6)))
}

func TestTheFirstInLineIsWokenWhenTheRateGrowsAndTheNextWhenItGoesOrLeaves(t *testing.T) {
	g := newGate(t)
	queued := inLine(t)
	g.Record(Overloaded, 0, 0)
	firstWake, secondWake := make(chan struct{}, 1), make(chan struct{}, 1)
	first := queued(g.Turn(0))
	second := queued(g.Turn(0))
	third := queued(g.Turn(0))
	if verdict, due := g.Claim(first, 0, firstWake); verdict != At || due != at(2) {
		t.Fatal(verdict, due)
	}
	if verdict, _ := g.Claim(second, 0, secondWake); verdict != Behind {
		t.Fatal(verdict)
	}
	g.Record(Accepted, 0, at(0.5))
	if len(firstWake) != 1 || len(secondWake) != 0 {
		t.Fatal("a grown rate wakes the first in line only")
	}
	// A quarter turn accrued by 0.5 s; the rest comes at 1.5 turns a second.
	claim(t, g, first, at(0.5), At, at(0.5+0.75/1.5))
	g.Leave(first)
	if len(secondWake) != 1 {
		t.Fatal("the new first in line is not woken")
	}
	claim(t, g, second, at(1), Go, 0)
	if ticket, _, _ := g.FirstInLine(); ticket != third {
		t.Fatal(ticket)
	}
}

func TestAnOverloadCutsTheRateOnceNotOncePerAttemptSentBeforeTheCut(t *testing.T) {
	g := newGate(t)
	g.Record(Overloaded, 0, 0)
	for i := 0; i < 100; i++ {
		g.Record(Accepted, 0, at(1))
	}
	g.Record(Overloaded, at(1.05), at(1.05))
	if r := paceOf(t, g); r != 100 {
		t.Fatalf("slow start ends at the 100 accepted: %v", r)
	}
	// Two seconds on, the accepted attempts are out of the last second.
	sent := at(3)
	g.Record(Overloaded, sent, at(3.1))
	cut := paceOf(t, g)
	if math.Abs(cut-100*0.7) > 1e-9 || g.Phase() != "cubic" {
		t.Fatal(cut, g.Phase())
	}
	g.Record(Overloaded, sent, at(3.2))
	if paceOf(t, g) != cut {
		t.Fatal("an attempt sent before the cut cut the rate again")
	}
	g.Record(Overloaded, at(3.15), at(3.2))
	if paceOf(t, g) >= cut {
		t.Fatal("an attempt sent after the cut did not cut the rate")
	}
}

func TestCubicRegrowsTheRatePastTheRateItFailedAt(t *testing.T) {
	g := newGate(t, func(p *Policy) { p.Quiet = time.Minute })
	g.Record(Overloaded, 0, 0)
	for i := 0; i < 100; i++ {
		g.Record(Accepted, 0, at(1))
	}
	failedAt := at(3)
	g.Record(Overloaded, failedAt, failedAt)
	cut := paceOf(t, g)
	// Back to the rate it failed at after k = ∛(100.5 × 0.3 / 0.4) ≈ 4.22 s.
	k := cbrt(100.5 * 0.3 / 0.4)
	g.Record(Accepted, failedAt, failedAt+at(k/2))
	if half := paceOf(t, g); !(cut < half && half < 100.5) || g.Phase() != "cubic" {
		t.Fatal(cut, half, g.Phase())
	}
	g.Record(Accepted, failedAt, failedAt+at(k))
	if math.Abs(paceOf(t, g)-100.5) > 1e-6 {
		t.Fatal(paceOf(t, g))
	}
	g.Record(Accepted, failedAt, failedAt+at(k+2))
	if paceOf(t, g) <= 100.5 || g.Phase() != "regrown" {
		t.Fatal("CUBIC probes past the old maximum:", paceOf(t, g), g.Phase())
	}
}

func TestItTurnsOffAfterAQuietTimeWithoutRefusalsOrWaiting(t *testing.T) {
	g := newGate(t)
	queued := inLine(t)
	g.Record(Overloaded, 0, 0)
	g.Record(Accepted, 0, at(4.9))
	if !g.On() {
		t.Fatal("off before the quiet time")
	}
	// Waiting counts as trouble: a gate that still paces is still needed.
	if _, wait := g.Turn(at(4.9)); wait {
		t.Fatal("a turn had accrued")
	}
	ticket := queued(g.Turn(at(4.9)))
	g.Record(Accepted, 0, at(9.8))
	if !g.On() {
		t.Fatal("off 4.9 s after someone waited")
	}
	g.Record(Accepted, 0, at(10))
	if !g.On() {
		t.Fatal("off while someone waits")
	}
	g.Leave(ticket)
	g.Record(Accepted, 0, at(10))
	if g.On() || g.Phase() != "off" {
		t.Fatal("still on after a quiet time with nobody waiting")
	}
	if _, wait := g.Turn(at(10)); wait {
		t.Fatal("an off gate made an attempt wait")
	}
}

func TestAnIdleGateTurnsOffWhenNextAskedAfterTheQuietTime(t *testing.T) {
	g := newGate(t)
	g.Record(Overloaded, 0, 0)
	if _, wait := g.Turn(at(60)); wait || g.On() {
		t.Fatal("an idle gate stayed on")
	}
}

func TestACallThatRejoinsWaitsAheadOfThoseThatCameAfterIt(t *testing.T) {
	g := newGate(t)
	queued := inLine(t)
	g.Record(Overloaded, 0, 0)
	first := queued(g.Turn(0))
	second := queued(g.Turn(0))
	claim(t, g, first, at(2), Go, 0)
	// The first's attempt is refused; it comes back while the second waits.
	again, verdict := g.Rejoin(first, Asker{}, at(2.1))
	if verdict != Queued {
		t.Fatal(verdict)
	}
	if again != first {
		t.Fatal(again)
	}
	if ticket, _, _ := g.FirstInLine(); ticket != first {
		t.Fatal(ticket)
	}
	claim(t, g, second, at(4), Behind, 0)
	claim(t, g, again, at(4), Go, 0)
	claim(t, g, second, at(6), Go, 0)
}

func TestATimeoutCutsToAShareOfTheMostAcceptedAndCapsTheGrowth(t *testing.T) {
	g := newGate(t)
	g.Record(Overloaded, 0, 0)
	for i := 0; i < 100; i++ {
		g.Record(Accepted, 0, at(0.5+float64(i)*0.001))
	}
	g.Record(TimedOut, at(1.2), at(1.2))
	if r := paceOf(t, g); math.Abs(r-70) > 1e-9 {
		t.Fatalf("0.7 × 100 accepted: %v", r)
	}
	g.Record(TimedOut, at(4), at(4))
	if r := paceOf(t, g); r != 0.5 {
		t.Fatalf("nothing accepted in the last three seconds: %v", r)
	}

	slow := gateFrom(t, func(p *Policy) { p.OverloadWhen = AnyRefusal })
	slow.Record(TimedOut, 0, 0)
	for i := 0; i < 20; i++ {
		now := at(0.05 * float64(i+1))
		slow.Record(Accepted, now, now)
	}
	// Slow start would be at 0.5 + 16 × 20; the timeout holds it to 1.25 ×
	// 19, the most delivered within one second (tenths are whole).
	if r := paceOf(t, slow); r != 23.75 {
		t.Fatal(r)
	}
	tally := slow.Tally()
	if tally != (Tally{Accepted: 20, Overloaded: 1, TimedOut: 1}) {
		t.Fatalf("%+v", tally)
	}
}

func TestALeasePacesUntilItEndsAndARefusalUnderItCutsItOnce(t *testing.T) {
	g := newGate(t)
	g.Record(Overloaded, 0, 0)
	g.Lease(10, at(2), at(1))
	g.Record(Overloaded, at(0.9), at(1.1))
	if r := paceOf(t, g); r != 10 {
		t.Fatalf("sent before the grant: the fleet knew of it: %v", r)
	}
	g.Record(Overloaded, at(1.2), at(1.2))
	g.Record(Overloaded, at(1.2), at(1.3))
	if r := paceOf(t, g); r != 7 {
		t.Fatalf("0.7 × the grant, once: %v", r)
	}
	for _, bad := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		g.Lease(bad, at(9), at(1.4))
		if r := paceOf(t, g); r != 7 {
			t.Fatalf("a lease of %v: %v", bad, r)
		}
	}
	g.Record(Accepted, 0, at(2))
	if r, _ := g.OwnRate(); paceOf(t, g) != r {
		t.Fatal("the lease outlived its end")
	}
}

func TestTheRateAtATimeIsTheLeasesUntilItEndsThoughNothingHappens(t *testing.T) {
	g := newGate(t)
	if _, on := g.RateAt(0); on {
		t.Fatal("a rate while off")
	}
	g.Record(Overloaded, 0, 0)
	g.Lease(7.25, at(1.6), at(1))
	for _, c := range []struct {
		now  float64
		want float64
	}{{1, 7.25}, {1.599, 7.25}, {1.6, 0.5}, {3, 0.5}} {
		if r, on := g.RateAt(at(c.now)); !on || r != c.want {
			t.Fatalf("at %v s: %v %v, want %v", c.now, r, on, c.want)
		}
	}
	// Nothing has accrued since the grant: as of then, the lease runs.
	if r := paceOf(t, g); r != 7.25 {
		t.Fatal(r)
	}
	if own, _ := g.OwnRate(); own != 0.5 {
		t.Fatal(own)
	}
}

func TestAskedWhetherItIsOnAtATimeAQuietGateTurnsOff(t *testing.T) {
	g := newGate(t)
	g.Record(Overloaded, 0, 0)
	if !g.OnAt(at(4.9)) || !g.On() {
		t.Fatal("off before the quiet time")
	}
	if _, wait := g.Turn(at(4.9)); wait {
		t.Fatal("a turn had accrued")
	}
	ticket := inLine(t)(g.Turn(at(4.9)))
	if !g.OnAt(at(60)) {
		t.Fatal("off while someone waits")
	}
	g.Leave(ticket)
	if g.OnAt(at(60)) || g.On() || g.Phase() != "off" {
		t.Fatal("still on after a quiet time with nobody waiting")
	}
}

func TestWaitsRoundToTheNearestNanosecondAsRustDoes(t *testing.T) {
	for s, want := range map[float64]uint64{
		0:                       0,
		1e-20:                   0,
		0.999e-9:                1,
		4.2e-7:                  420,
		2.7:                     2_700_000_000,
		0.999_999_999_499:       999_999_999,
		0.999_999_999_501:       1_000_000_000,
		42.999_999_999_499:      42_999_999_999,
		42.999_999_999_501:      43_000_000_000,
		3e9:                     3e18,
		math.Float64frombits(1): 0,
		math.Float64frombits(0x3F50_0000_0000_0000): 976_562,   // exactly 976562.5e-9: to even
		math.Float64frombits(0x3F68_0000_0000_0000): 2_929_688, // exactly 2929687.5e-9
		math.Float64frombits(0x3FF0_0400_0000_0000): 1_000_976_562,
		1e30: math.MaxUint64,
	} {
		if got := nanosOf(s); got != want {
			t.Errorf("%v s: %d ns, want %d", s, got, want)
		}
	}
	if secs(1_500_000_001) != 1.500000001 {
		t.Fatal(secs(1_500_000_001))
	}
}

func TestCubeRootsAreCorrectlyRounded(t *testing.T) {
	// Where math.Cbrt (and the GNU C library's cbrt) round to the other
	// neighbour.
	for x, want := range map[float64]float64{
		1.75:   1.205071132087615,
		83.747: 4.3751178199563,
		25.935: 2.9600252615326443,
		93.559: 4.539714317640472,
		30.103: 3.1107844989703968,
		27:     3,
		-8:     -2,
		0:      0,
	} {
		if got := cbrt(x); got != want {
			t.Errorf("∛%v = %v, want %v", x, got, want)
		}
	}
}

func TestABadSettingIsNamed(t *testing.T) {
	for want, change := range map[string]func(*Policy){
		"gate.minRate must be above 0 and at most 1000, found 0":   func(p *Policy) { p.MinRate = 0 },
		"gate.maxRate must be between 0.5 and 10000000, found 0.1": func(p *Policy) { p.MaxRate = 0.1 },
		"gate.beta must be above 0 and below 1, found 1":           func(p *Policy) { p.Beta = 1 },
		"gate.scale must be above 0 and at most 1000, found NaN":   func(p *Policy) { p.Scale = math.NaN() },
		"gate.ramp must be above 0 and at most 1000, found 1001":   func(p *Policy) { p.Ramp = 1001 },
		"gate.quiet must be between 1ms and 1h0m0s, found 0s":      func(p *Policy) { p.Quiet = 0 },
	} {
		p := defaults()
		change(&p)
		if _, err := New(p, nil); err == nil || err.Error() != want {
			t.Errorf("%v, want %s", err, want)
		}
	}
	var p Policy
	if err := p.UnmarshalJSON([]byte(`{"enabled": true, "minRate": 2, "quietMs": 0.5}`)); err != nil || !p.Enabled || p.MinRate != 2 || p.Quiet != 500*time.Microsecond {
		t.Fatalf("%+v %v", p, err)
	}
	if err := p.UnmarshalJSON([]byte(`{"beta": "high"}`)); err == nil || err.Error() != "gate.beta must be a number, found high" {
		t.Fatal(err)
	}
}

func TestAClaimAtTheTimeGivenGoesThoughTheWaitWasRoundedDown(t *testing.T) {
	g := newGate(t)
	queued := inLine(t)
	g.Record(Overloaded, 0, 0)
	g.Lease(3, at(60), 0)
	first := queued(g.Turn(0))
	// A third of a second rounds down to 333,333,333 ns: the credit then
	// falls a rounding error short of a turn, and still makes one.
	claim(t, g, first, 0, At, 333_333_333)
	claim(t, g, first, 333_333_333, Go, 0)
}

// mostRefused is a gate under overloadWhen: most-refused, otherwise the
// built-in default (as changed), whose first credit is 0.
func mostRefused(t *testing.T, change ...func(*Policy)) *Gate {
	t.Helper()
	return gateFrom(t, func(p *Policy) { p.OverloadWhen = MostRefused }, change...)
}

// answer records count outcomes of signal, spread evenly over the millis
// after from, each answered as it was sent, as the Rust tests do.
func answer(g *Gate, signal Signal, count int, from float64, millis uint64) {
	for i := 0; i < count; i++ {
		now := at(from) + millis*uint64(i)/uint64(count)*1_000_000
		g.Record(signal, now, now)
	}
}

func TestUnderMostRefusedARefusalAmongAcceptancesOnlyStartsWatching(t *testing.T) {
	g := mostRefused(t)
	answer(g, Accepted, 30, 0, 900)
	if g.Watching() {
		t.Fatal("watching before any refusal")
	}
	g.Record(Overloaded, at(0.95), at(0.95))
	if g.On() || !g.Watching() || g.Answering() || g.Phase() != "off" {
		t.Fatal("one refusal in 31 is no overload: the gate watches, off")
	}
	if _, wait := g.Turn(at(0.96)); wait {
		t.Fatal("a watching gate made an attempt wait")
	}
	// A tenth refused for a second, as a bad replica would.
	for i := 0; i < 40; i++ {
		now := at(1 + float64(i)*0.025)
		signal := Accepted
		if i%10 == 0 {
			signal = Overloaded
		}
		g.Record(signal, now, now)
	}
	if g.On() || !g.Watching() {
		t.Fatal("a tenth refused at random turned the gate on")
	}
	if tally := g.Tally(); tally != (Tally{Sent: 40, Accepted: 36, Overloaded: 4, Watching: true}) {
		t.Fatalf("the fleet hears what the gate heard since it began to watch, the refusal that began it left out: %+v", tally)
	}
	// Quiet (5 s) after the last refusal, at 1.75 s: watching ends.
	g.Record(Accepted, at(6.7), at(6.7))
	if !g.Watching() {
		t.Fatal("watching ended before the quiet time")
	}
	g.Record(Accepted, at(6.75), at(6.75))
	if g.Watching() || g.On() {
		t.Fatal("still watching after the quiet time")
	}

	anyRefusal := newGate(t)
	answer(anyRefusal, Accepted, 30, 0, 900)
	anyRefusal.Record(Overloaded, at(0.95), at(0.95))
	if !anyRefusal.On() || anyRefusal.Watching() || anyRefusal.Answering() || anyRefusal.Phase() != "probing" {
		t.Fatal("under any-refusal, the same refusal turns the gate on, probing")
	}
}

func TestUnderMostRefusedRefusalsThatOutnumberAcceptancesTurnItOnAtTwiceWhatIsDelivered(t *testing.T) {
	g := mostRefused(t)
	answer(g, Accepted, 20, 0, 500)
	g.Record(Overloaded, at(0.5), at(0.5))
	if !g.Watching() {
		t.Fatal("not watching")
	}
	// Then far more refused than accepted: 12 accepted, and refusals until
	// they outnumber them by four standard deviations: 42 of 54. The 20
	// accepted before watching began are not counted.
	answer(g, Accepted, 12, 0.55, 400)
	refused := 1
	for !g.On() {
		if refused > 100 {
			t.Fatal("refusals that outnumber acceptances never turned the gate on")
		}
		now := at(0.6 + float64(refused)*0.005)
		g.Record(Overloaded, now, now)
		refused++
	}
	if refused != 42 {
		t.Fatalf("on after %d refusals in all, want 42", refused)
	}
	if !g.Answering() || g.Watching() || g.Phase() != "slow_start" {
		t.Fatal("it accepts some: judged to answer, growing as in slow start", g.Answering(), g.Watching(), g.Phase())
	}
	if own, _ := g.OwnRate(); own != 24 {
		t.Fatalf("twice the 12 accepted since watching began, not the lowest rate: %v", own)
	}
	if tally := g.Tally(); tally != (Tally{Overloaded: 1}) {
		t.Fatalf("the refusal that turned it on is the first the fleet hears of: %+v", tally)
	}
	// The refusals go on outnumbering the acceptances: each cuts, as
	// overload, to what was accepted.
	g.Record(Overloaded, at(0.9), at(0.9))
	if own, _ := g.OwnRate(); own != 12 || g.Phase() != "cubic" || !g.Answering() {
		t.Fatal(own, g.Phase(), g.Answering())
	}
}

func TestUnderMostRefusedADependencyThatAcceptsNothingIsProbedThenJudgedByItsShare(t *testing.T) {
	g := mostRefused(t)
	g.Record(Overloaded, 0, 0)
	g.Record(Overloaded, 0, 0)
	if g.On() || !g.Watching() {
		t.Fatal("two refusals, as a dependency failing half at random could give first: watching")
	}
	g.Record(Overloaded, 0, 0)
	if !g.On() || g.Watching() || g.Answering() {
		t.Fatal("three and nothing ever accepted: down, on")
	}
	if r := paceOf(t, g); r != 0.5 || g.Phase() != "probing" {
		t.Fatalf("probing at the lowest rate: %v %s", r, g.Phase())
	}
	g.Record(Overloaded, at(0.5), at(0.5))
	if r := paceOf(t, g); r != 0.5 || g.Answering() {
		t.Fatal("a refusal while probing is overload:", r)
	}
	// It answers again, and fails a tenth at random.
	g.Record(Accepted, at(1), at(1))
	if !g.Answering() || g.Phase() != "slow_start" {
		t.Fatal("something got through: judged to answer")
	}
	answer(g, Accepted, 50, 1, 500)
	before, _ := g.OwnRate()
	for i := 0; i < 10; i++ {
		now := at(1.5 + float64(i)*0.05)
		g.Record(Overloaded, now, now)
		g.Record(Accepted, now, now)
	}
	if own, _ := g.OwnRate(); own < before || g.Phase() != "slow_start" {
		t.Fatalf("ten refusals among 61 acceptances cut nothing: %v then %v, %s", before, own, g.Phase())
	}
	if tally := g.Tally(); tally.Overloaded != 12 || tally.Accepted != 61 {
		t.Fatalf("a refusal judged random is still told to the fleet: %+v", tally)
	}
	// Then it refuses far more than it accepts: that is overload.
	answer(g, Overloaded, 200, 2, 200)
	if own, _ := g.OwnRate(); own >= before || g.Phase() == "slow_start" {
		t.Fatalf("refusals that outnumber acceptances cut it: %v then %v, %s", before, own, g.Phase())
	}
}

func TestUnderMostRefusedAWatchingGateTellsTheFleetWhatItHearsAndPacesWhenTold(t *testing.T) {
	g := mostRefused(t)
	answer(g, Accepted, 30, 0, 900)
	if tally := g.Tally(); tally != (Tally{}) {
		t.Fatalf("healthy, it counts nothing: %+v", tally)
	}
	g.Record(Overloaded, at(0.95), at(0.95))
	if !g.AsksFleet(at(0.95)) {
		t.Fatal("watching a dependency that accepts, it does not ask the fleet")
	}
	answer(g, Accepted, 5, 1, 50)
	answer(g, Overloaded, 2, 1.05, 50)
	if tally := g.Tally(); tally != (Tally{Sent: 7, Accepted: 5, Overloaded: 2, Watching: true}) {
		t.Fatalf("what it heard since it began to watch, the refusal that began it left out: %+v", tally)
	}
	now := at(1.1)
	if !g.PaceByFleet(now) || !g.On() || !g.Answering() || g.Watching() {
		t.Fatal("told to pace, a watching gate turns on, judging the dependency to answer")
	}
	if tally := g.Tally(); tally != (Tally{}) {
		t.Fatalf("the fleet heard what it counted while watching: %+v", tally)
	}
	g.Lease(40, now+at(1), now)
	if rate, _ := g.RateAt(now); rate != 40 {
		t.Fatalf("the grant paces it: %v", rate)
	}
	if g.PaceByFleet(now) {
		t.Fatal("on already, yet turned on again")
	}
}

func TestUnderMostRefusedAGateThatHasSeenNothingAcceptedWaitsToSeeItDown(t *testing.T) {
	g := mostRefused(t)
	if g.PaceByFleet(0) || g.On() {
		t.Fatal("off and not watching, it turned on")
	}
	g.Record(Overloaded, 0, 0)
	if !g.Watching() {
		t.Fatal("not watching")
	}
	if g.AsksFleet(0) {
		t.Fatal("it would tell the fleet of a dependency it has not seen accept")
	}
	if !g.PaceByFleet(at(0.1)) {
		t.Fatal("told to pace all the same, it did not turn on")
	}
	if r := paceOf(t, g); r != 0.5 || g.Phase() != "probing" || g.Answering() {
		t.Fatalf("it probes, as for a dependency down: %v %s", r, g.Phase())
	}
}

func TestUnderMostRefusedRefusalsThreeSecondsAfterTheLastAcceptanceTurnItOn(t *testing.T) {
	g := mostRefused(t)
	answer(g, Accepted, 10, 0, 1000)
	// The last acceptance at 0.9 s, in the tenth from 0.9 s: 2.9 s later,
	// within three seconds by the tenth, the dependency was lately accepting.
	g.Record(Overloaded, at(3.85), at(3.85))
	if g.On() || !g.Watching() {
		t.Fatal("accepted lately: watching")
	}
	g.Record(Overloaded, at(3.9), at(3.9))
	if g.On() || !g.Watching() {
		t.Fatal("nothing accepted for three seconds, but two refusals: watching")
	}
	g.Record(Overloaded, at(3.95), at(3.95))
	if !g.On() || g.Answering() || g.Phase() != "probing" {
		t.Fatal("the third with nothing accepted for three seconds: down, on, probing")
	}
	if r := paceOf(t, g); r != 0.5 {
		t.Fatal(r)
	}
}

func TestATimeoutTurnsTheGateOnAtOnceUnderMostRefusedToo(t *testing.T) {
	g := mostRefused(t)
	answer(g, Accepted, 30, 0, 900)
	g.Record(TimedOut, 0, at(1))
	if !g.On() || g.Watching() || g.Answering() || g.Phase() != "probing" {
		t.Fatal("a timeout turns the gate on at once")
	}
	if tally := g.Tally(); tally != (Tally{Overloaded: 1, TimedOut: 1}) {
		t.Fatalf("%+v", tally)
	}
}

func TestAnAnsweringGateRisesToTwiceWhatIsDelivered(t *testing.T) {
	g := mostRefused(t, func(p *Policy) { p.Ramp = 1 })
	for i := 0; i < downRefusals; i++ {
		g.Record(Overloaded, 0, 0)
	}
	// The first acceptance ends probing; then the dependency accepts more
	// within a second than slow start adds (one turn a second each).
	for i := 0; i < 100; i++ {
		g.Record(Accepted, at(0.2), at(0.2))
	}
	if own, _ := g.OwnRate(); own != 200 {
		t.Fatalf("twice the 100 accepted, past slow start's 0.5 + 100: %v", own)
	}
	anyRefusal := newGate(t)
	anyRefusal.Record(Overloaded, 0, 0)
	for i := 0; i < 100; i++ {
		anyRefusal.Record(Accepted, at(0.2), at(0.2))
	}
	if own, _ := anyRefusal.OwnRate(); own != 100.5 || anyRefusal.Answering() {
		t.Fatalf("under any-refusal, slow start alone: %v", own)
	}
}

func TestOverloadWhenIsReadByNameAndAnythingElseIsNamed(t *testing.T) {
	var p Policy
	if err := p.UnmarshalJSON([]byte(`{"enabled": true, "overloadWhen": "most-refused"}`)); err != nil || p.OverloadWhen != MostRefused {
		t.Fatalf("%+v %v", p, err)
	}
	if err := p.UnmarshalJSON([]byte(`{"minRate": 2}`)); err != nil || p.OverloadWhen != MostRefused {
		t.Fatal("a missing overloadWhen keeps its value", p.OverloadWhen, err)
	}
	if err := p.UnmarshalJSON([]byte(`{"overloadWhen": "any-refusal"}`)); err != nil || p.OverloadWhen != AnyRefusal {
		t.Fatal(p.OverloadWhen, err)
	}
	if err := p.UnmarshalJSON([]byte(`{"overloadWhen": "evidence"}`)); err != nil || p.OverloadWhen != Evidence {
		t.Fatal(p.OverloadWhen, err)
	}
	if (Policy{}).OverloadWhen != Evidence || Evidence.String() != "evidence" || AnyRefusal.String() != "any-refusal" || MostRefused.String() != "most-refused" {
		t.Fatal("the zero value is evidence, the default")
	}
	for value, want := range map[string]string{
		`"most_refused"`:   `gate.overloadWhen: unknown overloadWhen value "most_refused"; expected one of: evidence, any-refusal, most-refused`,
		`""`:               `gate.overloadWhen: unknown overloadWhen value ""; expected one of: evidence, any-refusal, most-refused`,
		`1`:                `gate.overloadWhen: expected one of evidence, any-refusal, most-refused, found 1`,
		`["most-refused"]`: `gate.overloadWhen: expected one of evidence, any-refusal, most-refused, found ["most-refused"]`,
		`null`:             `gate.overloadWhen: expected one of evidence, any-refusal, most-refused, found null`,
	} {
		p := defaults()
		if err := p.UnmarshalJSON([]byte(`{"overloadWhen": ` + value + `}`)); err == nil || err.Error() != want {
			t.Errorf("overloadWhen %s: %v, want %s", value, err, want)
		}
		if p.OverloadWhen != Evidence {
			t.Errorf("overloadWhen %s: read as %s", value, p.OverloadWhen)
		}
	}
	p = defaults()
	p.OverloadWhen = 3
	if _, err := New(p, nil); err == nil || err.Error() != "gate.overloadWhen must be one of evidence, any-refusal, most-refused, found OverloadWhen(3)" {
		t.Fatal(err)
	}
}

// shipped is a gate under the default policy: overloadWhen: evidence.
func shipped(t *testing.T) *Gate {
	t.Helper()
	return gateFrom(t, func(*Policy) {})
}

func TestAsShippedADependencyFailingAShareAtRandomIsNeverPaced(t *testing.T) {
	for _, share := range []float64{0.1, 0.3} {
		g := shipped(t)
		rng := rand.New(rand.NewSource(11))
		for i := 0; i < 1800; i++ {
			now := at(float64(i) / 30)
			if _, wait := g.Turn(now); wait {
				t.Fatalf("paced at %v after %d calls", share, i)
			}
			signal := Accepted
			if rng.Float64() < share {
				signal = Overloaded
			}
			g.Record(signal, now, now+5_000_000)
		}
		if g.On() || !g.Watching() {
			t.Fatalf("a share of %v at random keeps it watching", share)
		}
	}
}

func TestAsShippedFiveRefusalsInARowFromADependencyAcceptingNothingShowItDown(t *testing.T) {
	g := shipped(t)
	answer(g, Overloaded, 4, 0, 4)
	if g.On() || !g.Watching() {
		t.Fatal("four in a row: a half at random does that once in 16 runs")
	}
	g.Record(Overloaded, at(0.01), at(0.01))
	if !g.On() || g.Phase() != "probing" || g.Answering() {
		t.Fatal("the fifth: down", g.Phase())
	}
}

func TestAsShippedThreeRefusalsOverASecondShowADependencyAcceptingNothingDown(t *testing.T) {
	g := shipped(t)
	for _, s := range []float64{0, 0.3, 0.9} {
		g.Record(Overloaded, at(s), at(s))
	}
	if g.On() {
		t.Fatal("three within a second: a trickle's chance run")
	}
	g.Record(Overloaded, at(1), at(1))
	if !g.On() {
		t.Fatal("the run has lasted a second with nothing accepted")
	}
}

func TestAsShippedADependencyFoundDownRecoversAsACapacityUntilCutsShowItsRefusalsRandom(t *testing.T) {
	g := shipped(t)
	// A chance run of five refusals from a dependency that fails half its
	// requests at random looks like an outage.
	answer(g, Overloaded, 5, 0, 5)
	g.Record(Accepted, at(1), at(1))
	if g.Phase() != "slow_start" || g.Answering() {
		t.Fatal("a recovering capacity's refusals say overload", g.Phase())
	}
	// A half refused at any rate: the gate's cuts leave the refusals at
	// their share, and two trials in a row judge them random.
	rng := rand.New(rand.NewSource(3))
	answering := 0
	for i := 1; i <= 400 && answering == 0; i++ {
		now := at(1 + float64(i)*0.01)
		signal := Accepted
		if rng.Float64() < 0.5 {
			signal = Overloaded
		}
		g.Record(signal, now, now)
		if g.Answering() {
			answering = i
		}
	}
	if answering == 0 || answering > 200 || g.Phase() != "slow_start" {
		t.Fatalf("judged to answer after %d answers, %s", answering, g.Phase())
	}
}
