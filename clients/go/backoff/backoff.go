// Package backoff is stormguard's delay law for Go services: the delay
// before each retry as a pure function of the policy, the attempt number,
// the previous delay and 64 random bits, the same to the nanosecond as the
// Rust library's (clients/vectors checks it). The caller owns the attempt
// counter and the previous delay, and draws the random bits
// (rand.Uint64()).
package backoff

import (
	"fmt"
	"math/bits"
	"time"
)

// Jitter is how each delay is randomised.
type Jitter string

// The jitters a policy names.
const (
	None         Jitter = "none"
	Proportional Jitter = "proportional"
	Full         Jitter = "full"
	Equal        Jitter = "equal"
	Decorrelated Jitter = "decorrelated"
)

// Backoff is a policy's backoff settings.
type Backoff struct {
	Initial      time.Duration
	Max          time.Duration
	Multiplier   float64
	Jitter       Jitter
	JitterFactor float64
	// Delays, when not empty, replaces the exponential schedule; retries
	// past its end reuse its last entry.
	Delays []time.Duration
}

// Check says what is wrong with b, naming the setting, or nil.
func (b Backoff) Check() error {
	switch b.Jitter {
	case None, Proportional, Full, Equal, Decorrelated:
	default:
		return fmt.Errorf("jitter must be none, proportional, full, equal or decorrelated, not %q", b.Jitter)
	}
	if b.Initial < 0 || b.Max < 0 {
		return fmt.Errorf("initial and max delays must not be negative")
	}
	return nil
}

// Base is the delay before retry attempt (0 = the first), before jitter.
func (b Backoff) Base(attempt uint32) uint64 {
	max := nanos(b.Max)
	var base uint64
	if len(b.Delays) > 0 {
		i := int(attempt)
		if i >= len(b.Delays) {
			i = len(b.Delays) - 1
		}
		base = nanos(b.Delays[i])
	} else {
		base = exponential(nanos(b.Initial), b.Multiplier, attempt, max)
	}
	if base > max {
		return max
	}
	return base
}

// Delay is the delay before retry attempt, in nanoseconds, given the
// previous delay (0 before the first retry) and 64 random bits.
func (b Backoff) Delay(attempt uint32, previous uint64, draw uint64) uint64 {
	var drawn uint64
	switch b.Jitter {
	case Full:
		drawn = uniform(draw, 0, b.Base(attempt))
	case Equal:
		base := b.Base(attempt)
		half := base / 2
		drawn = half + uniform(draw, 0, base-half)
	case Proportional:
		base := b.Base(attempt)
		s := spread(base, b.JitterFactor)
		if s > base {
			s = base
		}
		drawn = uniform(draw, base-s, saturatingAdd(base, spread(base, b.JitterFactor)))
	case Decorrelated:
		initial := nanos(b.Initial)
		prev := previous
		if prev < initial {
			prev = initial
		}
		high := saturatingMul(prev, 3)
		if high <= initial {
			drawn = initial
		} else {
			drawn = uniform(draw, initial, high-1)
		}
	default:
		drawn = b.Base(attempt)
	}
	if max := nanos(b.Max); drawn > max {
		return max
	}
	return drawn
}

func nanos(d time.Duration) uint64 {
	if d < 0 {
		return 0
	}
	return uint64(d)
}

// uniform draws from [low, high] by one 64x64-bit multiply, as the Rust
// library does.
func uniform(draw, low, high uint64) uint64 {
	span := high - low + 1
	if span == 0 { // [0, 2^64-1]: every draw is in range
		return draw
	}
	hi, _ := bits.Mul64(draw, span)
	return low + hi
}

// power is base^exponent by repeated squaring, in the order the Rust
// library multiplies, so the floating-point result is the same bit for bit.
func power(base float64, exponent uint32) float64 {
	result := 1.0
	for exponent > 0 {
		if exponent&1 == 1 {
			result *= base
		}
		base *= base
		exponent >>= 1
	}
	return result
}

func exponential(initial uint64, multiplier float64, attempt uint32, max uint64) uint64 {
	if initial == 0 {
		return 0
	}
	grown := float64(initial) * power(multiplier, attempt)
	if grown < float64(max) {
		return uint64(grown)
	}
	return max
}

func spread(base uint64, factor float64) uint64 {
	if factor < 0 {
		factor = 0
	}
	if factor > 1 {
		factor = 1
	}
	fixed := uint64(factor * 4294967296.0)
	hi, lo := bits.Mul64(base, fixed)
	return hi<<32 | lo>>32
}

func saturatingAdd(a, b uint64) uint64 {
	if sum := a + b; sum >= a {
		return sum
	}
	return ^uint64(0)
}

func saturatingMul(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return ^uint64(0)
	}
	return lo
}
