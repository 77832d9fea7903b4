// The rate the gate paces at, and how each outcome moves it.

package gate

// How the gate's rate is learned from outcomes: probing at the lowest rate
// until something is accepted, a slow start that a refusal ends at what
// the dependency accepted over the last second, then CUBIC after
// overloads, never cut below the rate the dependency has just been seen to
// accept. Under overloadWhen: most-refused, once the dependency is seen to
// answer, a refusal cuts only while refusals outnumber acceptances, and the
// rate never falls below twice what it delivers.

// answeringGain is how far past what it delivers the rate always
// reaches while the dependency is judged to answer: Google's K.
const answeringGain = 2.0

// gain is how far past what a slow dependency delivers the rate may grow:
// BBR's gain when it probes for more bandwidth.
const gain = 1.25

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
	slow bool
	// answers is what the dependency answered over the last three
	// seconds: what it delivers, and whether its refusals show overload.
	answers answers
	// answering, under overloadWhen: most-refused, says the dependency has
	// accepted something since the gate turned on (or was accepting when
	// it did): a refusal then cuts only while refusals outnumber
	// acceptances, and the rate is never below answeringGain times what it
	// delivers, as Google's client-side throttling admits K = 2 times the
	// accepts. A dependency failing a share up to a half at random is never
	// paced below what it answers.
	answering bool
}

// answeringVerdict judges, at now, the dependency to answer, failing up to
// a half at random (as under most-refused): the gate's trials found its
// refusals keep their share. The rate grows as in slow start from
// answeringGain times what it delivers.
func (r *rate) answeringVerdict(p Policy, now uint64) {
	r.answers.roll(now)
	r.answering = true
	r.slow = false
	r.phase = slowStart
	answered := r.answers.delivered() / (1 - 0.5)
	r.now = clampFloat(maxFloat(r.now, answered), p.MinRate, p.MaxRate)
}

// probingRate is the rate of a gate that has just turned on at now.
func probingRate(p Policy, now uint64) rate {
	return rate{now: p.MinRate, phase: probing, lastCut: now, answers: newAnswers(now)}
}

// answeringRate is the rate of a gate that turns on at now, under
// overloadWhen: most-refused, because refusals came to outnumber
// acceptances while the dependency still accepted some (seen counts
// them): judging it to answer, at answeringGain times what it delivers,
// growing as in slow start. The lowest rate would starve a dependency
// that still answers most of what it is sent.
func answeringRate(p Policy, seen answers, now uint64) rate {
	r := probingRate(p, now)
	r.phase, r.answers, r.answering = slowStart, seen, true
	r.now = clampFloat(answeringGain*seen.delivered(), p.MinRate, p.MaxRate)
	return r
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

// refused counts n attempts refused at now; overloaded judges what they
// say.
func (r *rate) refused(n uint32, now uint64) {
	r.answers.refuse(n, now)
}

// overloaded learns that an attempt sent at sent was refused (or, if
// timedOut, got no answer in time) at now, and says whether that shows the
// dependency overloaded: if not, nothing is cut (see rate.answering).
// refused has counted a refusal already.
func (r *rate) overloaded(p Policy, sent, now uint64, timedOut bool) bool {
	r.answers.roll(now)
	if !timedOut && r.refusalIsRandom() {
		return false
	}
	r.slow = timedOut
	if sent < r.lastCut {
		return true
	}
	r.lastCut = now
	var cut float64
	if timedOut {
		// The dependency may still be busy with what timed out: send no
		// more than a share of the most it has lately managed to answer.
		peak := minFloat(r.answers.peak(), r.now)
		cut = maxFloat(peak*p.Beta, p.MinRate)
	} else {
		// Refusals that follow the last accepted attempt of a burst would
		// otherwise cut again and again; what was just accepted can be sent.
		delivered := minFloat(r.answers.delivered(), r.now)
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
	return true
}

// refusalIsRandom says whether a refusal says nothing of overload: while
// the dependency is judged to answer, until refusals outnumber
// acceptances.
func (r *rate) refusalIsRandom() bool {
	return r.answering && !r.answers.showOverload()
}

// accepted learns that an attempt was accepted at now.
func (r *rate) accepted(p Policy, now uint64) {
	r.answers.accept(1, now)
	var grown float64
	switch r.phase {
	case probing:
		r.phase = slowStart
		// Something got through: under most-refused, refusals count as
		// overload from now on only while they outnumber acceptances
		// (under evidence, once the gate's trials find them random).
		r.answering = p.OverloadWhen == MostRefused
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
		grown = minFloat(grown, maxFloat(gain*r.answers.peak(), r.now))
	}
	if r.answering {
		grown = maxFloat(grown, answeringGain*r.answers.delivered())
	}
	r.now = clampFloat(grown, p.MinRate, p.MaxRate)
}
