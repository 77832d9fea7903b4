// Tests of the answers the gate counts by the tenth of a second over the
// last three seconds.

package gate

import (
	"math"
	"testing"
)

func TestAnswersAreCountedByTheTenthAndForgottenAfterThreeSeconds(t *testing.T) {
	a := newAnswers(0)
	a.accept(3, 0)
	a.accept(4, at(0.15))
	if a.delivered() != 7 {
		t.Fatal(a.delivered())
	}
	a.roll(at(1.05))
	if a.delivered() != 4 {
		t.Fatalf("the first tenth has left the last second: %v", a.delivered())
	}
	if a.peak() != 7 || !a.anyAccepted() {
		t.Fatalf("but not the last three: %v", a.peak())
	}
	a.roll(at(3.2))
	if a.anyAccepted() || a.delivered() != 0 || a.peak() != 0 {
		t.Fatal("what is older than three seconds is forgotten")
	}
}

func TestAnswersCountFromTheirOriginAndNeverGoBack(t *testing.T) {
	// Tenths are counted from when the counts began, not from 0.
	a := newAnswers(at(0.05))
	a.accept(1, at(0.05))
	a.accept(1, at(0.149))
	a.roll(at(1.049))
	if a.delivered() != 2 {
		t.Fatalf("both in the tenth from 0.05 s, still within the second: %v", a.delivered())
	}
	a.roll(at(1.05))
	if a.delivered() != 0 {
		t.Fatalf("a second after the tenth began: %v", a.delivered())
	}
	// An answer timed before the current tenth counts in the current one.
	a.refuse(2, at(0.5))
	if a.refused.secondEnding(0) != 2 {
		t.Fatal(a.refused.secondEnding(0))
	}
}

func TestCountingOneKindMovesTheOtherOn(t *testing.T) {
	a := newAnswers(0)
	a.refuse(10, 0)
	a.accept(1, at(1.5))
	if a.refused.secondEnding(0) != 0 || a.showOverload() {
		t.Fatal("refusals more than a second old still count")
	}
	a.accept(20, at(1.6))
	a.refuse(1, at(2.5))
	if a.delivered() != 20 {
		t.Fatal("acceptances within the last second are forgotten:", a.delivered())
	}
	a.refuse(1, at(2.6))
	if a.delivered() != 0 || a.peak() != 21 {
		t.Fatal("a refusal a second on leaves the acceptances out of the last second:", a.delivered(), a.peak())
	}
}

func TestATenthRefusedIsNoOverloadMostOfThemIs(t *testing.T) {
	a := newAnswers(0)
	a.accept(90, 0)
	a.refuse(10, 0)
	if a.showOverload() {
		t.Fatal("90 accepted, 10 refused")
	}
	a.refuse(80, 0)
	if a.showOverload() {
		t.Fatal("90 and 90: a dependency failing half at random")
	}
	a.refuse(60, 0)
	if a.showOverload() {
		t.Fatal("90 and 150: within four standard deviations")
	}
	a.refuse(10, 0)
	if !a.showOverload() {
		t.Fatal("90 and 160: beyond four standard deviations")
	}
	down := newAnswers(0)
	down.refuse(16, 0)
	if down.showOverload() {
		t.Fatal("sixteen refusals could be chance")
	}
	down.refuse(1, 0)
	if !down.showOverload() {
		t.Fatal("seventeen and nothing accepted are not")
	}
}

func TestATenthsCountStopsAtTheLargest(t *testing.T) {
	a := newAnswers(0)
	a.accept(math.MaxUint32-1, 0)
	a.accept(5, 0)
	if a.delivered() != math.MaxUint32 {
		t.Fatal(a.delivered())
	}
}
