// Tests of the send gate against core's verdict vectors.

package gate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"
)

// TestEveryVerdictIsCores replays the shared vectors, which stormguard-core
// generates: every turn's and claim's verdict, every tally (and whether
// the gate asks the fleet just before it), every turn-on the fleet's grant
// asks for (pace), and the state after every op (on, both rates, the
// line's length, the phase, the credit, whether it watches and whether it
// judges the dependency to answer) must be the Rust gate's, the floats bit
// for bit. Scenarios run under both values of gate.overloadWhen.
func TestEveryVerdictIsCores(t *testing.T) {
	text, err := os.ReadFile("../../vectors/gate.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Scenarios []struct {
			Policy struct {
				Gate Policy `json:"gate"`
			} `json:"policy"`
			Ops [][2]json.RawMessage `json:"ops"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal(text, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Scenarios) == 0 {
		t.Fatal("no scenarios")
	}
	seen := map[string]int{}
	for i, s := range file.Scenarios {
		seen["overloadWhen "+s.Policy.Gate.OverloadWhen.String()]++
		var draw *float64
		g, err := New(s.Policy.Gate, func() float64 {
			if draw == nil {
				t.Fatalf("scenario %d: the gate drew a first credit where the Rust gate did not", i)
			}
			d := *draw
			draw = nil
			return d
		})
		if err != nil {
			t.Fatalf("scenario %d: %v", i, err)
		}
		wasOn := false
		for j, pair := range s.Ops {
			var op vectorOp
			mustRead(t, pair[0], &op)
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("scenario %d op %d %s: %s", i, j, pair[0], fmt.Sprintf(format, args...))
			}
			switch op.Op {
			case "turn", "rejoin":
				var ticket Ticket
				var wait bool
				if op.Op == "turn" {
					ticket, wait = g.Turn(op.At)
				} else {
					var verdict Verdict
					ticket, verdict = g.Rejoin(op.Place, Asker{}, op.At)
					if verdict == Shed {
						fail("shed a call with no time its turn must come by")
					}
					wait = verdict == Queued
				}
				got := `"now"`
				if wait {
					got = fmt.Sprintf(`["queued",%d]`, ticket)
				}
				if want := compact(t, op.Verdict); got != want {
					fail("%s, core says %s", got, want)
				}
				seen[op.Op+" "+map[bool]string{true: "queued", false: "now"}[wait]]++
			case "claim":
				verdict, at := g.Claim(op.Ticket, op.At, nil)
				got := `"` + verdict.String() + `"`
				if verdict == At {
					got = fmt.Sprintf(`["at",%d]`, at)
				}
				if want := compact(t, op.Verdict); got != want {
					fail("%s, core says %s", got, want)
				}
				seen["claim "+verdict.String()]++
			case "leave":
				g.Leave(op.Ticket)
				seen["leave"]++
			case "record":
				signal := map[string]Signal{"accepted": Accepted, "overloaded": Overloaded, "timed_out": TimedOut}[op.Signal]
				if signal.String() != op.Signal {
					fail("unknown signal")
				}
				draw = op.Draw
				before, wasOn := g.OwnRate()
				g.Record(signal, op.Sent, op.At)
				if draw != nil {
					fail("the Rust gate drew a first credit here; this one did not")
				}
				seen["record "+op.Signal]++
				if after, _ := g.OwnRate(); signal == Overloaded && wasOn && g.Answering() && after >= before {
					seen["refusal not overload"]++
				}
			case "lease":
				g.Lease(op.Rate, op.Until, op.At)
				seen["lease"]++
			case "pace":
				draw = op.Draw
				if !g.PaceByFleet(op.At) {
					fail("the fleet's grant said pace to a gate that was not watching")
				}
				if draw != nil {
					fail("the Rust gate drew a first credit here; this one did not")
				}
				seen["paced by fleet"]++
			case "tally":
				if asks := g.AsksFleet(op.At); asks != op.Tally.Asks {
					fail("asks the fleet %v, core says %v", asks, op.Tally.Asks)
				}
				got := g.Tally()
				want := Tally{
					Sent: op.Tally.Sent, Accepted: op.Tally.Accepted, Overloaded: op.Tally.Overloaded,
					TimedOut: op.Tally.TimedOut, Waiting: op.Tally.Waiting, Watching: op.Tally.Watching,
				}
				// Every call here is of the default class, and none is shed:
				// its demand is at least those that wait.
				if d := got.Demand; d[0] != 0 || d[2] != 0 || d[1] < got.Waiting {
					fail("demand by class %v, %d waiting", d, got.Waiting)
				}
				got.Demand = [3]uint64{}
				if got != want {
					fail("tally %+v, core says %+v", got, want)
				}
				seen["tally"]++
				if want.Watching {
					seen["tally watching"]++
				}
				if op.Tally.Asks {
					seen["asks fleet"]++
				}
			default:
				fail("unknown op %q", op.Op)
			}
			var want vectorState
			mustRead(t, pair[1], &want)
			if got := stateOf(g); !got.same(want) {
				fail("state %s, core says %s", got, pair[1])
			}
			if wasOn && !want.On {
				seen["turned off"]++
			}
			if want.Watching {
				seen["watching"]++
			}
			if want.Answering {
				seen["answering"]++
			}
			wasOn = want.On
			seen["phase "+want.Phase]++
		}
	}
	// Vectors that never queue, cut, regrow or turn off would check little.
	for _, needed := range []string{
		"turn now", "turn queued", "rejoin queued", "claim go", "claim at", "claim behind", "leave", "lease", "tally",
		"record accepted", "record overloaded", "record timed_out", "turned off",
		"phase off", "phase probing", "phase slow_start", "phase cubic", "phase regrown",
		"overloadWhen any-refusal", "overloadWhen most-refused", "watching", "answering",
		"refusal not overload", "paced by fleet", "tally watching", "asks fleet",
	} {
		if seen[needed] == 0 {
			t.Errorf("no op in the vectors gives %q: %v", needed, seen)
		}
	}
}

type vectorOp struct {
	Op      string          `json:"op"`
	At      uint64          `json:"at"`
	Verdict json.RawMessage `json:"verdict"`
	Place   Ticket          `json:"place"`
	Ticket  Ticket          `json:"ticket"`
	Signal  string          `json:"signal"`
	Sent    uint64          `json:"sent"`
	Draw    *float64        `json:"draw"`
	Rate    float64         `json:"rate"`
	Until   uint64          `json:"until"`
	Tally   struct {
		Sent       uint64 `json:"sent"`
		Accepted   uint64 `json:"accepted"`
		Overloaded uint64 `json:"overloaded"`
		TimedOut   uint64 `json:"timedOut"`
		Waiting    uint64 `json:"waiting"`
		Watching   bool   `json:"watching"`
		Asks       bool   `json:"asks"`
	} `json:"tally"`
}

// vectorState is [on, pace rate or null, own rate or null, waiting, phase,
// credit, watching, answering].
type vectorState struct {
	On        bool
	Rate      *float64
	Own       *float64
	Waiting   int
	Phase     string
	Credit    float64
	Watching  bool
	Answering bool
}

func (s *vectorState) UnmarshalJSON(text []byte) error {
	fields := []any{&s.On, &s.Rate, &s.Own, &s.Waiting, &s.Phase, &s.Credit, &s.Watching, &s.Answering}
	read := fields
	if err := json.Unmarshal(text, &read); err != nil {
		return err
	}
	// A state of another length would leave fields unread, or unchecked.
	if len(read) != len(fields) {
		return fmt.Errorf("a state of %d fields, expected %d", len(read), len(fields))
	}
	return nil
}

func (s vectorState) String() string {
	text, _ := json.Marshal([]any{s.On, s.Rate, s.Own, s.Waiting, s.Phase, s.Credit, s.Watching, s.Answering})
	return string(text)
}

// same compares the floats bit for bit.
func (s vectorState) same(o vectorState) bool {
	sameRate := func(a, b *float64) bool {
		return (a == nil) == (b == nil) && (a == nil || math.Float64bits(*a) == math.Float64bits(*b))
	}
	return s.On == o.On && sameRate(s.Rate, o.Rate) && sameRate(s.Own, o.Own) && s.Waiting == o.Waiting &&
		s.Phase == o.Phase && math.Float64bits(s.Credit) == math.Float64bits(o.Credit) &&
		s.Watching == o.Watching && s.Answering == o.Answering
}

func stateOf(g *Gate) vectorState {
	s := vectorState{
		On: g.On(), Waiting: g.Waiting(), Phase: g.Phase(), Credit: g.Credit(),
		Watching: g.Watching(), Answering: g.Answering(),
	}
	if rate, on := g.Rate(); on {
		s.Rate = &rate
	}
	if own, on := g.OwnRate(); on {
		s.Own = &own
	}
	return s
}

func mustRead(t *testing.T, raw json.RawMessage, into any) {
	t.Helper()
	if err := json.Unmarshal(raw, into); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
}

// compact is a verdict's JSON without spaces.
func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var text bytes.Buffer
	if err := json.Compact(&text, raw); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return text.String()
}
