// A correctly rounded cube root, as Rust's f64::cbrt gives, for CUBIC.

package gate

import (
	"math"
	"math/big"
)

// cbrt is the cube root correctly rounded (to the nearest float64), as the
// Rust library's f64::cbrt computes it (CORE-MATH's cube root): math.Cbrt
// is within 0.667 of a unit in the last place and rounds some results to
// the other neighbour, and CUBIC's k from one would set the rate a bit off
// the Rust gate's. math.Cbrt's result is moved to the neighbour whose
// rounding interval holds the exact root, checked by cubing the
// interval's ends exactly; no float64 root lies on such an end.
func cbrt(x float64) float64 {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return x + x
	}
	if x < 0 {
		return -cbrt(-x)
	}
	exact := func(v float64) *big.Float { return new(big.Float).SetPrec(256).SetFloat64(v) }
	// cube is the cube of the midpoint of a and b: 54 bits cubed fit in 256.
	cube := func(a, b float64) *big.Float {
		m := exact(a)
		m.Add(m, exact(b)).Quo(m, exact(2))
		return new(big.Float).SetPrec(256).Mul(m, new(big.Float).SetPrec(256).Mul(m, m))
	}
	y, want := math.Cbrt(x), exact(x)
	for {
		below, above := math.Nextafter(y, 0), math.Nextafter(y, math.Inf(1))
		switch {
		case want.Cmp(cube(below, y)) < 0:
			y = below
		case want.Cmp(cube(y, above)) > 0:
			y = above
		default:
			return y
		}
	}
}
