package breaker

import "testing"

// chanceRun is a run of length failures in a window of calls of which
// failures failed, under consecutiveFailures 5 and a threshold of a half.
func chanceRun(length, calls, failures uint32) run {
	return run{length: length, t: tally{calls: calls, failures: failures}, opensAt: 5, threshold: 0.5}
}

func TestAChanceThatIsTheLimitButForRoundingReachesIt(t *testing.T) {
	product := 1.0
	for i := 0; i < 5; i++ {
		product *= 0.1
	}
	if product <= RunByChance {
		t.Fatal("the rounding this guards against is gone")
	}
	if likely(0.1, 5) || !likely(0.1, 4) {
		t.Fatal("0.1^5 is one in 100,000: five are not chance, four are")
	}
}

func TestTheBoundLiesAboveTheRateAndNarrowsWithTheSample(t *testing.T) {
	few, many := upperBound(3, 10), upperBound(300, 1000)
	if few <= 0.3 || many <= 0.3 || few <= many {
		t.Fatalf("bounds %v and %v", few, many)
	}
}

func TestWhatChanceExcuses(t *testing.T) {
	for _, c := range []struct {
		name   string
		r      run
		chance bool
	}{
		{"two of six before excuse six", chanceRun(6, 12, 8), true},
		{"two of five before excuse none", chanceRun(6, 11, 8), false},
		{"no failure before the run", chanceRun(5, 1000, 5), false},
		{"49 %: nine are chance", chanceRun(9, 1000, 9+490), true},
		{"ten are the cap", chanceRun(10, 1000, 10+490), false},
		{"a background at the threshold", chanceRun(5, 1000, 5+500), false},
		{"10 %: the bound excuses five", chanceRun(5, 1000, 5+99), true},
		{"10 %: not six", chanceRun(6, 1000, 6+99), false},
	} {
		if got := c.r.byChance(); got != c.chance {
			t.Errorf("%s: by chance %v", c.name, got)
		}
	}
}
