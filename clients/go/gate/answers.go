// The attempts a dependency accepted and refused over the last three
// seconds: what it delivers, and whether its refusals show overload.

package gate

import "math"

// What a dependency answered over the last three seconds, counted by the
// tenth of a second: the attempts it accepted and those it refused. From
// these the rate's law reads what the dependency delivers (BBR's delivery
// rate), and, under overloadWhen: most-refused, whether its refusals say
// overload: only once they outnumber acceptances by more than chance
// would, as Google's client-side throttling (SRE book, "Handling
// Overload") holds nothing back until requests exceed K = 2 times the
// accepts. A dependency that fails a share at random (a bad replica behind
// a balancer, a flaky disk) up to a half is then never taken for
// overloaded.

// tenths is how many tenths of a second are kept: three seconds, the
// longest a timeout's cut looks back.
const tenths = 30

// tenth is a tenth of a second in nanoseconds.
const tenth = 100_000_000

// beyondChance is how many standard deviations refusals must go beyond a
// random share by, over a second, for the gate (the K = 2 test, its
// refusals while judged to answer, its trials): it tests again at every
// answer, scores of times a second, and at three a dependency failing half
// at random seemed overloaded to one of ten processes of 100 calls a second
// every few seconds, each time pacing its calls into a backlog.
const beyondChance = 4.0

// counts is a count per tenth of a second over the last three seconds.
type counts struct {
	// tenths is the count per tenth, the current one at current % tenths.
	tenths [tenths]uint32
	// current is the current tenth, counted from origin.
	current uint64
	origin  uint64
}

// roll moves to the tenth holding now, emptying those that have passed.
func (c *counts) roll(now uint64) {
	var t uint64
	if now > c.origin {
		t = (now - c.origin) / tenth
	}
	var passed uint64
	if t > c.current {
		passed = t - c.current
	}
	if passed > tenths {
		passed = tenths
	}
	for i := uint64(1); i <= passed; i++ {
		c.tenths[(c.current+i)%tenths] = 0
	}
	if t > c.current {
		c.current = t
	}
}

// add counts n at now; a tenth's count stops at the largest uint32, as
// Rust's saturating_add does.
func (c *counts) add(n uint32, now uint64) {
	c.roll(now)
	slot := &c.tenths[c.current%tenths]
	if *slot > math.MaxUint32-n {
		*slot = math.MaxUint32
	} else {
		*slot += n
	}
}

// secondEnding is the count over the second that ended back tenths ago.
func (c *counts) secondEnding(back uint64) float64 {
	var sum float64
	for i := back; i < back+10; i++ {
		sum += float64(c.tenths[(c.current+tenths-i)%tenths])
	}
	return sum
}

// peak is the most counted in any second of the last three.
func (c *counts) peak() float64 {
	var most float64
	for back := uint64(0); back <= tenths-10; back++ {
		most = maxFloat(most, c.secondEnding(back))
	}
	return most
}

// empty says whether nothing was counted in the last three seconds.
func (c *counts) empty() bool {
	for _, n := range c.tenths {
		if n != 0 {
			return false
		}
	}
	return true
}

// answers is the attempts accepted and refused over the last three seconds.
type answers struct {
	accepted, refused counts
}

// newAnswers is nothing counted yet, at now.
func newAnswers(now uint64) answers {
	return answers{accepted: counts{origin: now}, refused: counts{origin: now}}
}

// roll moves to now, forgetting what is older than three seconds.
func (a *answers) roll(now uint64) {
	a.accepted.roll(now)
	a.refused.roll(now)
}

// accept counts n attempts accepted at now.
func (a *answers) accept(n uint32, now uint64) {
	a.accepted.add(n, now)
	a.refused.roll(now)
}

// refuse counts n attempts refused at now.
func (a *answers) refuse(n uint32, now uint64) {
	a.refused.add(n, now)
	a.accepted.roll(now)
}

// delivered is how many were accepted over the last second, per second:
// what the dependency delivers.
func (a *answers) delivered() float64 {
	return a.accepted.secondEnding(0)
}

// peak is the most accepted in any second of the last three (BBR's
// windowed maximum of the delivery rate).
func (a *answers) peak() float64 {
	return a.accepted.peak()
}

// refusals is how many were refused over the last three seconds.
func (a *answers) refusals() float64 {
	var sum float64
	for _, n := range a.refused.tenths {
		sum += float64(n)
	}
	return sum
}

// anyAccepted says whether anything was accepted in the last three seconds.
func (a *answers) anyAccepted() bool {
	return !a.accepted.empty()
}

// refusedShareLastSecond is, of the answers over the last second, the share
// refused; 0 with none.
func (a *answers) refusedShareLastSecond() float64 {
	accepted, refused := a.accepted.secondEnding(0), a.refused.secondEnding(0)
	if accepted+refused == 0 {
		return 0
	}
	return refused / (accepted + refused)
}

// showOverload says whether, over the last second, refusals outnumbered
// acceptances by more than chance would: fewer than half accepted, as
// Google's K = 2.
func (a *answers) showOverload() bool {
	accepted, refused := a.accepted.secondEnding(0), a.refused.secondEnding(0)
	return refused-accepted > beyondChance*math.Sqrt(refused+accepted)
}
