package gate

// How the gate's rate is learned from outcomes: probing at the lowest rate
// until something is accepted, a slow start that a refusal ends at what
// the dependency accepted over the last second, then CUBIC after
// overloads, never cut below the rate the dependency has just been seen to
// accept.

// tenths is how many tenths of a second of acceptances are kept: three
// seconds, the longest a timeout's cut looks back.
const tenths = 30

// gain is how far past what a slow dependency delivers the rate may grow:
// BBR's gain when it probes for more bandwidth.
const gain = 1.25

// tenth is a tenth of a second in nanoseconds.
const tenth = 100_000_000

type phase uint8

const (
	// probing: nothing accepted since the gate turned on; overloads keep
	// the rate low.
	probing phase = iota
	// slowStart: accepted attempts grow the rate by ramp each.
	slowStart
	// cubic: after an overload at rate max at since, the rate follows
	// scale × (t − k)³ + max.
	cubic
)

// rate is the rate a gate paces at, and what it has learned.
type rate struct {
	// now is turns per second now.
	now   float64
	phase phase
	// max, k and since are CUBIC's curve, in the cubic phase.
	max, k float64
	since  uint64
	// lastCut is when the rate was last cut: an overload of an attempt
	// sent before then was answered under the old rate, and does not cut
	// it again.
	lastCut uint64
	// slow says the latest overload was a timeout: the dependency is slow
	// and answers come late, so the rate grows no faster than gain times
	// what it delivers. A refusal clears it: a dependency that refuses at
	// once is answering, not stuck.
	slow      bool
	delivered delivered
}

// delivered is how many attempts were accepted over the last seconds
// (BBR's delivery rate), counted in tenths of a second.
type delivered struct {
	// tenths is accepted per tenth, the current one at current % tenths.
	tenths [tenths]uint32
	// current is the current tenth, counted from origin.
	current uint64
	origin  uint64
}

// roll moves to the tenth holding now, emptying those that have passed.
func (d *delivered) roll(now uint64) {
	var t uint64
	if now > d.origin {
		t = (now - d.origin) / tenth
	}
	var passed uint64
	if t > d.current {
		passed = t - d.current
	}
	if passed > tenths {
		passed = tenths
	}
	for i := uint64(1); i <= passed; i++ {
		d.tenths[(d.current+i)%tenths] = 0
	}
	if t > d.current {
		d.current = t
	}
}

func (d *delivered) count(accepted uint32, now uint64) {
	d.roll(now)
	slot := &d.tenths[d.current%tenths]
	if *slot > ^uint32(0)-accepted {
		*slot = ^uint32(0)
	} else {
		*slot += accepted
	}
}

// perSecond is how many were accepted over the last second.
func (d *delivered) perSecond() float64 {
	return d.secondEnding(0)
}

// secondEnding is how many were accepted over the second that ended back
// tenths ago.
func (d *delivered) secondEnding(back uint64) float64 {
	var sum float64
	for i := back; i < back+10; i++ {
		sum += float64(d.tenths[(d.current+tenths-i)%tenths])
	}
	return sum
}

// peak is the most accepted in any second of the last three (BBR's
// windowed maximum of the delivery rate).
func (d *delivered) peak() float64 {
	var most float64
	for back := uint64(0); back <= tenths-10; back++ {
		most = maxFloat(most, d.secondEnding(back))
	}
	return most
}

// probingRate is the rate of a gate that has just turned on at now.
func probingRate(p Policy, now uint64) rate {
	return rate{now: p.MinRate, phase: probing, lastCut: now, delivered: delivered{origin: now}}
}

// phaseName is where the rate is in its law: probing, slow_start, cubic
// (after a cut, below the rate it was cut at) or regrown (back at or past it).
func (r *rate) phaseName() string {
	switch {
	case r.phase == probing:
		return "probing"
	case r.phase == slowStart:
		return "slow_start"
	case r.now < r.max:
		return "cubic"
	default:
		return "regrown"
	}
}

// overloaded learns that an attempt sent at sent was refused (or, if
// timedOut, got no answer in time) at now.
func (r *rate) overloaded(p Policy, sent, now uint64, timedOut bool) {
	r.delivered.roll(now)
	r.slow = timedOut
	if sent < r.lastCut {
		return
	}
	r.lastCut = now
	var cut float64
	if timedOut {
		// The dependency may still be busy with what timed out: send no
		// more than a share of the most it has lately managed to answer.
		peak := minFloat(r.delivered.peak(), r.now)
		cut = maxFloat(peak*p.Beta, p.MinRate)
	} else {
		// Refusals that follow the last accepted attempt of a burst would
		// otherwise cut again and again; what was just accepted can be sent.
		delivered := minFloat(r.delivered.perSecond(), r.now)
		// Slow start grew the rate ahead of the answers: a share of it is
		// no measure of the dependency, what it accepted is.
		kept := 0.0
		if r.phase != slowStart {
			kept = r.now * p.Beta
		}
		cut = maxFloat(maxFloat(kept, delivered), p.MinRate)
	}
	if r.phase != probing {
		// CUBIC: back to max after k seconds, k = ∛(max (1 − β) / C). After
		// a timeout the rate it was sent at is no target: regrow from the
		// cut, slowly at first.
		max := r.now
		if timedOut {
			max = cut
		}
		k := cbrt(max * (1 - p.Beta) / p.Scale)
		if timedOut {
			k = 0
		}
		r.phase, r.max, r.k, r.since = cubic, max, k, now
	}
	r.now = cut
}

// accepted learns that an attempt was accepted at now.
func (r *rate) accepted(p Policy, now uint64) {
	r.delivered.count(1, now)
	var grown float64
	switch r.phase {
	case probing:
		r.phase = slowStart
		grown = r.now + p.Ramp
	case slowStart:
		grown = r.now + p.Ramp
	case cubic:
		var t float64
		if now > r.since {
			t = secs(now - r.since)
		}
		// Rust's powi(3) is (x·x)·x; the product is rounded before the
		// sum, as Rust's is, rather than fused.
		x := t - r.k
		grown = maxFloat(r.now, float64(p.Scale*(x*x*x))+r.max)
	}
	if r.slow {
		grown = minFloat(grown, maxFloat(gain*r.delivered.peak(), r.now))
	}
	switch {
	case grown < p.MinRate:
		grown = p.MinRate
	case grown > p.MaxRate:
		grown = p.MaxRate
	}
	r.now = grown
}
