// Paced turns as credit that accrues at the rate (the gate's own, or one
// leased from the fleet), and time and float arithmetic rounded as Rust's.

package gate

import (
	"math"
	"math/bits"
)

// lag is how much more than one turn of credit may build up: what accrues
// over this many seconds, so that a turn claimed late by a timer's lag is
// made up, but a lull earns no burst.
const lag = 0.002

// epsilon is how close to a whole turn credit counts as one: a wait
// computed from the missing credit rounds to whole nanoseconds, and must
// not come back to a claim a rounding error short of its turn.
const epsilon = 1e-9

// lease is a rate the fleet granted this process, until it runs out.
type lease struct {
	rate  float64
	until uint64
	since uint64
	// cut says a refusal has cut it already.
	cut bool
}

// pacer is turns at a rate, as credit: credit accrues at the pace and a
// turn spends one. When the pace changes, the credit accrued so far is
// kept, so a faster pace speeds up what is left of the wait rather than
// granting at once every turn the new pace would have earned since the
// last one.
type pacer struct {
	credit float64
	at     uint64
	lease  *lease
}

// overloaded cuts the lease by beta for the first attempt sent under it
// that was refused or timed out, until the next grant, which the fleet
// sets knowing of it, arrives.
func (p *pacer) overloaded(beta float64, sent uint64) {
	if p.lease != nil && !p.lease.cut && sent >= p.lease.since {
		p.lease.rate *= beta
		p.lease.cut = true
	}
}

// pace is the rate at the last accrual: the lease's while it lasts, else own.
func (p *pacer) pace(own float64) float64 {
	if p.lease != nil && p.at < p.lease.until {
		return p.lease.rate
	}
	return own
}

// paceAt is the rate at now: the lease's if it still runs, else own.
func (p *pacer) paceAt(own float64, now uint64) float64 {
	if p.lease != nil && now < p.lease.until {
		return p.lease.rate
	}
	return own
}

// accrue accrues credit up to now: at the lease's rate until it ends,
// then at own.
func (p *pacer) accrue(own float64, now uint64) {
	if now <= p.at {
		return
	}
	if l := p.lease; l != nil {
		if p.at < l.until {
			end := min64(l.until, now)
			p.credit += float64(l.rate * secs(end-p.at))
			p.at = end
		}
		if now >= l.until {
			p.lease = nil
		}
	}
	p.credit += float64(own * secs(now-p.at))
	p.at = now
	p.credit = minFloat(p.credit, 1+float64(p.pace(own)*lag))
}

// take spends a turn if one has accrued (accrue first).
func (p *pacer) take() bool {
	ready := p.credit >= 1-epsilon
	if ready {
		p.credit = maxFloat(p.credit-1, 0)
	}
	return ready
}

// due is when a turn will have accrued at the present pace (accrue
// first); no later than the lease's end, when the pace changes.
func (p *pacer) due(own float64) uint64 {
	missing := 1 - p.credit
	if missing <= epsilon {
		return p.at
	}
	wait := nanosOf(missing / p.pace(own))
	if wait < 1 {
		wait = 1
	}
	due := addSaturating(p.at, wait)
	if p.lease != nil && p.at < p.lease.until {
		due = min64(due, p.lease.until)
	}
	return due
}

// secs is nanoseconds as seconds, whole seconds and the rest converted
// apart and added, as Rust's Duration::as_secs_f64 does: float64(d)/1e9
// rounds differently.
func secs(d uint64) float64 {
	return float64(d/1e9) + float64(d%1e9)/1e9
}

// nanosOf is s seconds in nanoseconds, rounded to the nearest from s's
// exact binary value, ties to even, as Rust's Duration::from_secs_f64
// rounds; 0 for a negative s or NaN, saturated past the uint64 range.
func nanosOf(s float64) uint64 {
	if !(s > 0) {
		return 0
	}
	if math.IsInf(s, 1) {
		return math.MaxUint64
	}
	b := math.Float64bits(s)
	mant := b&(1<<52-1) | 1<<52
	exp := int(b>>52&0x7ff) - 1023
	if exp < -31 {
		return 0 // less than half a nanosecond
	}
	// s = mant × 2^(exp−52): the nanoseconds are mant × 10⁹ shifted by
	// exp−52, in 128 bits.
	hi, lo := bits.Mul64(mant, 1e9)
	shift := uint(52 - exp)
	if exp >= 52 {
		up := uint(exp - 52)
		if up >= 64 || hi != 0 || lo>>(64-up) != 0 {
			return math.MaxUint64
		}
		return lo << up
	}
	var q, remHi, remLo, halfHi, halfLo uint64
	if shift < 64 {
		if hi>>shift != 0 {
			return math.MaxUint64
		}
		q = lo>>shift | hi<<(64-shift)
		remLo = lo & (1<<shift - 1)
		halfLo = 1 << (shift - 1)
	} else {
		q = hi >> (shift - 64)
		remHi, remLo = hi&(1<<(shift-64)-1), lo
		if shift == 64 {
			halfLo = 1 << 63
		} else {
			halfHi = 1 << (shift - 65)
		}
	}
	above := remHi > halfHi || remHi == halfHi && remLo > halfLo
	tie := remHi == halfHi && remLo == halfLo
	if above || tie && q&1 == 1 {
		if q == math.MaxUint64 {
			return q
		}
		q++
	}
	return q
}

func addSaturating(a, b uint64) uint64 {
	if sum := a + b; sum >= a {
		return sum
	}
	return math.MaxUint64
}

func min64(a, b uint64) uint64 {
	if a < b {
		return a
	}
	return b
}

// minFloat and maxFloat are Rust's f64::min and f64::max for the numbers
// the gate compares (never NaN).
func minFloat(a, b float64) float64 {
	if b < a {
		return b
	}
	return a
}

func maxFloat(a, b float64) float64 {
	if b > a {
		return b
	}
	return a
}

// clampFloat is Rust's f64::clamp: x, but at least lo and at most hi.
func clampFloat(x, lo, hi float64) float64 {
	switch {
	case x < lo:
		return lo
	case x > hi:
		return hi
	}
	return x
}
