// Tests of classes of calls in the send gate's line: served in class
// order, shed when their turn would come too late, counted by class.

package gate

import (
	"testing"
	"time"
)

// turnFor is a check that asker's turn at now gets verdict, giving its
// ticket.
func turnFor(t *testing.T, g *Gate, asker Asker, now uint64, want Verdict) Ticket {
	t.Helper()
	ticket, verdict := g.TurnFor(asker, now)
	if verdict != want {
		t.Fatalf("%+v at %d: %s, want %s", asker, now, verdict, want)
	}
	return ticket
}

func TestACriticalCallWaitsAheadOfDefaultOnesAlreadyInLineAndASheddableOneBehind(t *testing.T) {
	g := newGate(t)
	queued := inLine(t)
	g.Record(Overloaded, 0, 0) // a turn every 2 s, the first at 2 s
	first := queued(g.Turn(0))
	second := queued(g.Turn(0))
	critical := turnFor(t, g, Asker{Class: Critical}, at(1), Queued)
	if ticket, _, _ := g.FirstInLine(); ticket != critical {
		t.Fatalf("first in line %d, not the critical call's %d", ticket, critical)
	}
	claim(t, g, first, at(2), Behind, 0)
	claim(t, g, critical, at(2), Go, 0)
	claim(t, g, first, at(2), At, at(4))
	// A sheddable call waits behind the default ones, those that come
	// after it too.
	sheddable := turnFor(t, g, Asker{Class: Sheddable}, at(2), Queued)
	later := queued(g.Turn(at(3)))
	claim(t, g, first, at(4), Go, 0)
	claim(t, g, second, at(6), Go, 0)
	claim(t, g, sheddable, at(8), Behind, 0)
	claim(t, g, later, at(8), Go, 0)
	claim(t, g, sheddable, at(8), At, at(10))
	// A default call is not behind sheddable ones: with a turn due, it goes.
	if _, wait := g.Turn(at(10)); wait {
		t.Fatal("a default call waited behind a sheddable one")
	}
	claim(t, g, sheddable, at(10), At, at(12))
	claim(t, g, sheddable, at(12), Go, 0)
	if g.Waiting() != 0 {
		t.Fatal(g.Waiting())
	}
}

// accepted has g hear at now that an attempt was accepted, so that it
// probes no more, and then pace at rate from no credit: as if what the
// dependency takes were rate a second.
func accepted(t *testing.T, g *Gate, rate float64, now uint64) {
	t.Helper()
	g.Record(Accepted, now, now)
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.On() || g.rate.phase == probing {
		t.Fatal("an accepted attempt ends probing and leaves the gate on")
	}
	g.rate.now = rate
	g.pacer = pacer{at: now}
}

func TestWhileProbingOnlyTheNextProbeCountsAndOnceSomethingIsAcceptedThoseAheadDo(t *testing.T) {
	g := newGate(t)
	g.Record(Overloaded, 0, 0)
	// Probing at 0.5 a second with no credit: the next probe is at 2 s,
	// and the line moves at once when the dependency is back, so only the
	// next probe counts, whoever waits ahead.
	first := turnFor(t, g, Asker{By: at(2.5)}, 0, Queued)
	turnFor(t, g, Asker{By: at(1.5)}, 0, Shed) // the next probe comes after its bound
	second := turnFor(t, g, Asker{By: at(2.5)}, 0, Queued)
	// Accepted: the rate is what the dependency takes, here one a second,
	// and those ahead count.
	t1 := at(0.1)
	accepted(t, g, 1, t1)
	turnFor(t, g, Asker{By: t1 + at(2.5)}, t1, Shed) // behind two, its turn would come at 3 s
	if g.Waiting() != 2 {
		t.Fatalf("%d waiting: the shed calls took no place", g.Waiting())
	}
	// With the same bound, a critical call waits: nobody of its class is ahead.
	critical := turnFor(t, g, Asker{Class: Critical, By: t1 + at(2.5)}, t1, Queued)
	if ticket, _, _ := g.FirstInLine(); ticket != critical {
		t.Fatalf("first in line %d, not the critical call's %d", ticket, critical)
	}
	// A sheddable call waits behind all three: its turn would come at 4 s.
	turnFor(t, g, Asker{Class: Sheddable, By: t1 + at(3.5)}, t1, Shed)
	tally := g.Tally()
	if tally.Shed != [3]uint64{0, 2, 1} {
		t.Fatalf("shed by class %v, want [0 2 1]", tally.Shed)
	}
	if tally.Demand != [3]uint64{1 + 1, 4 + 2, 1} {
		t.Fatalf("the calls that asked, and those that wait, by class: %v", tally.Demand)
	}
	claim(t, g, critical, t1+at(1), Go, 0)
	claim(t, g, first, t1+at(2), Go, 0)
	claim(t, g, second, t1+at(3), Go, 0)
}

func TestACallWhoseTurnWouldComeAfterItsBoundIsShedTakingNoPlace(t *testing.T) {
	g := newGate(t)
	g.Record(Overloaded, 0, 0)
	// Something was accepted: the gate probes no more, and those ahead
	// count. The dependency takes a call every 2 s, the first at 2 s.
	accepted(t, g, 0.5, 0)
	turnFor(t, g, Asker{By: at(1.9)}, 0, Shed)
	if g.Waiting() != 0 {
		t.Fatal("a shed call took a place")
	}
	first := turnFor(t, g, Asker{By: at(2)}, 0, Queued)
	// Behind the first, its turn comes at 4 s.
	turnFor(t, g, Asker{By: at(3.9)}, at(1), Shed)
	second := turnFor(t, g, Asker{By: at(4)}, at(1), Queued)
	// A critical call waits ahead of both: its turn comes at 2 s.
	critical := turnFor(t, g, Asker{Class: Critical, By: at(2)}, at(1), Queued)
	// A sheddable one would wait behind all three, until 8 s.
	turnFor(t, g, Asker{Class: Sheddable, By: at(7.9)}, at(1), Shed)
	if g.Waiting() != 3 {
		t.Fatalf("%d waiting, not the three that were not shed", g.Waiting())
	}
	// No bound, no shedding, however long the line.
	if _, wait := g.Turn(at(1)); !wait {
		t.Fatal("no turn was due")
	}
	tally := g.Tally()
	if tally.Shed != [3]uint64{0, 2, 1} {
		t.Fatalf("shed by class %v, want [0 2 1]", tally.Shed)
	}
	if g.Tally().Shed != [3]uint64{} {
		t.Fatal("the shed were told twice")
	}
	// A retry that rejoins its place is shed as a first ask would be.
	claim(t, g, critical, at(2), Go, 0)
	if _, verdict := g.Rejoin(critical, Asker{Class: Critical, By: at(3.9)}, at(2.1)); verdict != Shed {
		t.Fatalf("a rejoin whose turn comes at 4 s, bound at 3.9 s: %s", verdict)
	}
	if ticket, verdict := g.Rejoin(critical, Asker{Class: Critical, By: at(4.1)}, at(2.1)); verdict != Queued || ticket != critical {
		t.Fatal(ticket, verdict)
	}
	if ticket, _, _ := g.FirstInLine(); ticket != critical {
		t.Fatalf("first in line %d: the critical call is back ahead of %d and %d", ticket, first, second)
	}
}

// TestACallThatWaitedAsLongAsItCouldIsCountedShed: a call that waited in
// line until its bound and gives up its place (GiveUp) is demand the pace
// did not serve, counted shed in its class as one shed at once is; a call
// that leaves the line because it was cancelled (Leave) is not.
func TestACallThatWaitedAsLongAsItCouldIsCountedShed(t *testing.T) {
	g := newGate(t)
	g.Record(Overloaded, 0, 0) // the first turn at 2 s
	waiting := turnFor(t, g, Asker{Class: Critical, By: at(3)}, 0, Queued)
	cancelled := inLine(t)(g.Turn(0))
	g.GiveUp(waiting)
	g.Leave(cancelled)
	if tally := g.Tally(); tally.Shed != [3]uint64{1, 0, 0} {
		t.Fatalf("shed by class %v: the critical call that gave up, not the cancelled one", tally.Shed)
	}
	if g.Waiting() != 0 {
		t.Fatalf("%d waiting: both left the line", g.Waiting())
	}
}

func TestTheTallyCountsDemandByClass(t *testing.T) {
	g := newGate(t)
	g.Turn(0)
	g.Record(Accepted, 0, 0)
	if tally := g.Tally(); tally != (Tally{}) {
		t.Fatalf("nothing counts while off: %+v", tally)
	}
	g.Record(Overloaded, 0, 0)
	inLine(t)(g.Turn(0))
	turnFor(t, g, Asker{Class: Sheddable}, 0, Queued)
	critical := turnFor(t, g, Asker{Class: Critical}, 0, Queued)
	claim(t, g, critical, at(2), Go, 0)
	g.Record(Accepted, at(2), at(2.1))
	g.Record(Overloaded, at(2), at(2.1))
	g.Record(TimedOut, at(2), at(2.1))
	// The critical call's retry takes its place again: no new ask.
	if _, verdict := g.Rejoin(critical, Asker{Class: Critical}, at(2.1)); verdict != Queued {
		t.Fatal(verdict)
	}
	want := Tally{Sent: 1, Accepted: 1, Overloaded: 3, TimedOut: 1, Waiting: 3, Demand: [3]uint64{2, 2, 2}}
	if tally := g.Tally(); tally != want {
		t.Fatalf("one call of each class asked, and each waits: %+v", tally)
	}
	want = Tally{Waiting: 3, Demand: [3]uint64{1, 1, 1}}
	if tally := g.Tally(); tally != want {
		t.Fatalf("those that wait still want their turn: %+v", tally)
	}
}

func TestCriticalityAndMaxWaitAreReadAndAnythingElseIsNamed(t *testing.T) {
	var p Policy
	if p.Criticality != Default || Default.String() != "default" || Critical.String() != "critical" || Sheddable.String() != "sheddable" {
		t.Fatal("the zero value is default, the class of a call that names none")
	}
	if Classes != [3]Criticality{Critical, Default, Sheddable} || Critical.Rank() != 0 || Default.Rank() != 1 || Sheddable.Rank() != 2 {
		t.Fatal("most critical first")
	}
	text := `{"criticality": "sheddable", "maxWait": {"criticalMs": 5000, "defaultMs": 1000, "sheddableMs": 0.5}}`
	if err := p.UnmarshalJSON([]byte(text)); err != nil {
		t.Fatal(err)
	}
	want := MaxWait{Critical: 5 * time.Second, Default: time.Second, Sheddable: 500 * time.Microsecond}
	if p.Criticality != Sheddable || p.MaxWait != want || p.MaxWait.Of(Critical) != 5*time.Second || p.MaxWait.Of(Sheddable) != 500*time.Microsecond {
		t.Fatalf("%+v", p)
	}
	if err := p.UnmarshalJSON([]byte(`{"minRate": 2, "maxWait": {"defaultMs": 30}}`)); err != nil || p.Criticality != Sheddable ||
		p.MaxWait != (MaxWait{Critical: 5 * time.Second, Default: 30 * time.Millisecond, Sheddable: 500 * time.Microsecond}) {
		t.Fatal("what a block leaves out keeps its value", p, err)
	}
	for value, want := range map[string]string{
		`{"criticality": "urgent"}`:                   `gate.criticality: unknown class "urgent"; expected one of: critical, default, sheddable`,
		`{"criticality": "Critical"}`:                 `gate.criticality: unknown class "Critical"; expected one of: critical, default, sheddable`,
		`{"criticality": 0}`:                          `gate.criticality: expected one of critical, default, sheddable, found 0`,
		`{"criticality": null}`:                       `gate.criticality: expected one of critical, default, sheddable, found null`,
		`{"maxWait": 1000}`:                           `gate.maxWait must be an object, found 1000`,
		`{"maxWait": {"sheddableMs": "soon"}}`:        `gate.maxWait.sheddableMs must be a number, found soon`,
		`{"maxWait": {"criticalMs": -1}}`:             `gate.maxWait.criticalMs must be milliseconds from 0, found -1`,
		`{"maxWait": {"defaultMs": 86400000.001}}`:    `gate.maxWait.default must be between 0s and 24h0m0s, found 24h0m0.000001s`,
		`{"maxWait": {"sheddableMs": 86400001}}`:      `gate.maxWait.sheddable must be between 0s and 24h0m0s, found 24h0m0.001s`,
		`{"maxWait": {"criticalMs": 172800000}}`:      `gate.maxWait.critical must be between 0s and 24h0m0s, found 48h0m0s`,
		`{"maxWait": {"criticalMs": 86400000}}`:       ``,
		`{"maxWait": {"criticalMs": 0, "xMs": 1e99}}`: ``,
	} {
		p := defaults()
		err := p.UnmarshalJSON([]byte(value))
		if err == nil {
			err = p.Check()
		}
		if (err == nil) != (want == "") || err != nil && err.Error() != want {
			t.Errorf("%s: %v, want %q", value, err, want)
		}
	}
	p = defaults()
	p.Criticality = 3
	if _, err := New(p, nil); err == nil || err.Error() != "gate.criticality must be one of critical, default, sheddable, found Criticality(3)" {
		t.Fatal(err)
	}
}
