package breaker

import "math"

// RunByChance is how likely, at most, a run of failures may be by chance
// before the breaker believes it: one in 100,000 runs, at the upper 97.5 %
// bound of the failure rate the window held before the run. A dependency
// failing 30 % of calls at random fails five in a row about once in 600
// calls, and a breaker that opened on those would hold open a dependency
// that serves 70 % of calls. Nothing is excused unless the window holds as
// many calls before the run as in it and a failure among them, and a run of
// twice ConsecutiveFailures always opens the breaker.
const RunByChance = 1e-5

// BoundZ is the z-score of the upper Wilson bound the background rate is
// taken at: a one-sided 97.5 % bound.
const BoundZ = 1.96

// boundZSquared is BoundZ squared, written out as the Rust library writes
// it (a Go constant expression would be computed exactly and round apart).
const boundZSquared = 3.8416

// atMostByChance is RunByChance and a billionth more: 0.1^5 in floating
// point is a hair above 1e-5, and counts as 1e-5.
const atMostByChance = 1.000000001e-5

// run is what a closed breaker knows when a run of failures reaches
// ConsecutiveFailures.
type run struct {
	length    uint32 // failures in a row, the latest call among them
	t         tally  // the window's calls, the run among them
	opensAt   uint32 // ConsecutiveFailures
	threshold float64
}

// byChance says whether chance explains the run, so the breaker stays
// closed: at least as many calls before the run as in it, a failure among
// them at a rate under the threshold, a run shorter than twice opensAt, and
// the run's odds at the rate's upper bound above RunByChance. Only + - × ÷
// and √ are used, each rounded once (explicit conversions stop Go fusing a
// multiply and an add), so every client reaches the same verdict.
func (r run) byChance() bool {
	if uint64(r.length) >= 2*uint64(r.opensAt) || r.t.calls < r.length {
		return false
	}
	before := r.t.calls - r.length
	if before < r.length || r.t.failures <= r.length {
		return false
	}
	failures := r.t.failures - r.length
	if float64(failures)/float64(before) >= r.threshold {
		return false
	}
	return likely(upperBound(failures, before), r.length)
}

// likely says whether n failures in a row at rate are more likely than
// RunByChance, multiplied out one failure at a time.
func likely(rate float64, n uint32) bool {
	chance := 1.0
	for i := uint32(0); i < n; i++ {
		chance *= rate
		if chance <= atMostByChance {
			return false
		}
	}
	return true
}

// upperBound is the upper end of the Wilson score interval for failures of calls.
func upperBound(failures, calls uint32) float64 {
	n := float64(calls)
	p := float64(failures) / n
	z2 := float64(boundZSquared)
	spread := float64(float64(p*float64(1-p))/n) + float64(z2/float64(float64(4*n)*n))
	centre := p + float64(z2/float64(2*n))
	return float64(centre+float64(BoundZ*math.Sqrt(spread))) / float64(1+float64(z2/n))
}
