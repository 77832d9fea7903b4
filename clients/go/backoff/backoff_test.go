// Tests of the delay law against core's vectors, to the nanosecond, and of a
// bad jitter named.

package backoff

import (
	"encoding/json"
	"os"
	"testing"
	"time"
)

type vector struct {
	InitialNanos  uint64   `json:"initialNanos"`
	MaxNanos      uint64   `json:"maxNanos"`
	Multiplier    float64  `json:"multiplier"`
	Jitter        Jitter   `json:"jitter"`
	JitterFactor  float64  `json:"jitterFactor"`
	DelaysNanos   []uint64 `json:"delaysNanos"`
	Attempt       uint32   `json:"attempt"`
	PreviousNanos uint64   `json:"previousNanos"`
	Draw          uint64   `json:"draw"`
	DelayNanos    uint64   `json:"delayNanos"`
}

// TestTheDelayIsCoresToTheNanosecond checks every case of the shared
// vectors, which stormguard-core generates.
func TestTheDelayIsCoresToTheNanosecond(t *testing.T) {
	text, err := os.ReadFile("../../vectors/backoff.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []vector `json:"cases"`
	}
	if err := json.Unmarshal(text, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) < 1000 {
		t.Fatalf("only %d cases", len(file.Cases))
	}
	for i, c := range file.Cases {
		b := Backoff{
			Initial:      time.Duration(c.InitialNanos),
			Max:          time.Duration(c.MaxNanos),
			Multiplier:   c.Multiplier,
			Jitter:       c.Jitter,
			JitterFactor: c.JitterFactor,
		}
		for _, d := range c.DelaysNanos {
			b.Delays = append(b.Delays, time.Duration(d))
		}
		if err := b.Check(); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if got := b.Delay(c.Attempt, c.PreviousNanos, c.Draw); got != c.DelayNanos {
			t.Errorf("case %d (%s, attempt %d, draw %d): %d, core says %d", i, c.Jitter, c.Attempt, c.Draw, got, c.DelayNanos)
		}
	}
}

func TestABadJitterIsNamed(t *testing.T) {
	err := Backoff{Jitter: "gaussian"}.Check()
	if err == nil || err.Error() != `jitter must be none, proportional, full, equal or decorrelated, not "gaussian"` {
		t.Fatalf("%v", err)
	}
}
