// Tests of the circuit breaker against core's verdict vectors (reports,
// fleet verdicts heard), and of its settings read and refused.

package breaker

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestEveryVerdictIsCores replays the shared vectors, which stormguard-core
// generates: every acquire's verdict (permit and trial flag, or refusing
// state and time until trials) and the state after every op must match.
func TestEveryVerdictIsCores(t *testing.T) {
	text, err := os.ReadFile("../../vectors/breaker.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Scenarios []struct {
			Policy Policy              `json:"policy"`
			Ops    [][]json.RawMessage `json:"ops"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal(text, &file); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for i, s := range file.Scenarios {
		b, err := New(s.Policy)
		if err != nil {
			t.Fatalf("scenario %d: %v", i, err)
		}
		permits := map[uint64]*Permit{}
		for j, op := range s.Ops {
			var kind, want string
			var at uint64
			mustRead(t, op[0], &kind)
			mustRead(t, op[1], &at)
			mustRead(t, op[len(op)-1], &want)
			where := func() string { return string(mustJSON(op)) }
			switch kind {
			case "acquire":
				var verdict []json.RawMessage
				mustRead(t, op[2], &verdict)
				var head string
				mustRead(t, verdict[0], &head)
				permit, err := b.Acquire(at)
				if head == "permit" {
					var id uint64
					var trial bool
					mustRead(t, verdict[1], &id)
					mustRead(t, verdict[2], &trial)
					if err != nil {
						t.Fatalf("scenario %d op %d %s: refused: %v", i, j, where(), err)
					}
					if permit.Trial() != trial {
						t.Fatalf("scenario %d op %d %s: trial %v", i, j, where(), permit.Trial())
					}
					permits[id] = permit
					seen["permit"]++
					if trial {
						seen["trial"]++
					}
				} else {
					var retryIn uint64
					mustRead(t, verdict[1], &retryIn)
					var refused *NotPermitted
					if !errors.As(err, &refused) {
						t.Fatalf("scenario %d op %d %s: %v %v, core refuses", i, j, where(), permit, err)
					}
					if refused.State.String() != head || uint64(refused.RetryIn) != retryIn {
						t.Fatalf("scenario %d op %d %s: refused by %s for %d ns", i, j, where(), refused.State, refused.RetryIn)
					}
					seen["refused "+head]++
				}
			case "record", "cancel":
				var id uint64
				mustRead(t, op[2], &id)
				permit := permits[id]
				if permit == nil {
					t.Fatalf("scenario %d op %d %s: no permit %d", i, j, where(), id)
				}
				if kind == "cancel" {
					permit.Cancel()
					seen["cancel"]++
				} else {
					var outcome string
					mustRead(t, op[3], &outcome)
					switch outcome {
					case "success", "failure":
						permit.Record(outcome == "failure", at)
					case "refused":
						permit.RecordRefused(at)
					default:
						t.Fatalf("scenario %d op %d %s: unknown outcome %q", i, j, where(), outcome)
					}
					seen["record "+outcome]++
				}
			case "heard":
				replayHeard(t, b, op, at, func() string { return fmt.Sprintf("scenario %d op %d %s", i, j, where()) })
				seen["heard"]++
			case "report":
				replayReport(t, b, op, at, func() string { return fmt.Sprintf("scenario %d op %d %s", i, j, where()) })
				seen["report"]++
			default:
				t.Fatalf("scenario %d op %d: unknown op %q", i, j, kind)
			}
			if got := b.State().String(); got != want {
				t.Fatalf("scenario %d op %d %s: state %s, core says %s", i, j, where(), got, want)
			}
			seen["state "+want]++
		}
	}
	// A file that never refuses, never half-opens or never closes again
	// would check little.
	for _, needed := range []string{"permit", "trial", "refused open", "refused half-open", "cancel", "record success", "record failure", "record refused", "state open", "state half-open", "state closed", "heard", "report"} {
		if seen[needed] == 0 {
			t.Errorf("no op in the vectors gives %q: %v", needed, seen)
		}
	}
}

// replayHeard gives a fleet-scoped breaker the daemon's word as the op
// says ([state, trials, retry in, lease], then whether it closed).
func replayHeard(t *testing.T, b *Breaker, op []json.RawMessage, at uint64, where func() string) {
	t.Helper()
	var word []json.RawMessage
	mustRead(t, op[2], &word)
	var state string
	var trials uint32
	var retryIn, lease uint64
	mustRead(t, word[0], &state)
	mustRead(t, word[1], &trials)
	mustRead(t, word[2], &retryIn)
	mustRead(t, word[3], &lease)
	var closed bool
	mustRead(t, op[3], &closed)
	v := Verdict{Trials: trials, RetryIn: time.Duration(retryIn)}
	for _, s := range []State{Closed, HalfOpen, Open} {
		if s.String() == state {
			v.State = s
		}
	}
	if got := b.Heard(v, at+lease, at); got != closed {
		t.Fatalf("%s: closed %v", where(), got)
	}
}

// replayReport checks what a fleet-scoped breaker tells the daemon
// ([open, open for, refused, succeeded, failed]).
func replayReport(t *testing.T, b *Breaker, op []json.RawMessage, at uint64, where func() string) {
	t.Helper()
	var fields []json.RawMessage
	mustRead(t, op[2], &fields)
	var want Report
	var openFor uint64
	mustRead(t, fields[0], &want.Open)
	mustRead(t, fields[1], &openFor)
	mustRead(t, fields[2], &want.Refused)
	mustRead(t, fields[3], &want.Succeeded)
	mustRead(t, fields[4], &want.Failed)
	want.OpenFor = time.Duration(openFor)
	got, ok := b.FleetReport(at)
	if !ok || got != want {
		t.Fatalf("%s: reported %+v (%v)", where(), got, ok)
	}
}

func mustRead(t *testing.T, raw json.RawMessage, into any) {
	t.Helper()
	if err := json.Unmarshal(raw, into); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
}

func mustJSON(v any) []byte {
	text, _ := json.Marshal(v)
	return text
}

func valid() Policy {
	return Policy{
		Enabled: true, ConsecutiveFailures: 2, FailureRateThreshold: 0.5, SlowCallRateThreshold: 1,
		SlowCallDuration: time.Second, MinimumCalls: 10, Window: SlidingWindow{Calls: 10},
		OpenTimeout: time.Second, HalfOpenMaxCalls: 1, SuccessThreshold: 1,
	}
}

func TestABadSettingIsNamed(t *testing.T) {
	for key, change := range map[string]func(*Policy){
		"circuitBreaker.failureRateThreshold must be above 0 and at most 1, found 0": func(p *Policy) { p.FailureRateThreshold = 0 },
		"circuitBreaker.minimumCalls must be between 1 and 10000, found 0":           func(p *Policy) { p.MinimumCalls = 0 },
		"circuitBreaker.slidingWindow must be between 1s and 1h0m0s, found 10ms":     func(p *Policy) { p.Window = SlidingWindow{Duration: 10 * time.Millisecond} },
		"circuitBreaker.halfOpenMaxCalls must be between 1 and 1000, found 1001":     func(p *Policy) { p.HalfOpenMaxCalls = 1001 },
		"circuitBreaker.openTimeout must be between 1ms and 1h0m0s, found 0s":        func(p *Policy) { p.OpenTimeout = 0 },
	} {
		p := valid()
		change(&p)
		if _, err := New(p); err == nil || err.Error() != key {
			t.Errorf("%v, want %s", err, key)
		}
	}
	if _, err := New(valid()); err != nil {
		t.Fatal(err)
	}
	var p Policy
	err := json.Unmarshal([]byte(`{"slidingWindow": {"type": "hours"}}`), &p)
	if err == nil || !strings.HasPrefix(err.Error(), "circuitBreaker.slidingWindow must be") {
		t.Fatalf("%v", err)
	}
	err = json.Unmarshal([]byte(`{"minimumCalls": 1.5}`), &p)
	if err == nil || !strings.HasPrefix(err.Error(), "circuitBreaker.minimumCalls") {
		t.Fatalf("%v", err)
	}
}

func TestFractionalMillisecondsAreKept(t *testing.T) {
	var p Policy
	if err := json.Unmarshal([]byte(`{"openTimeoutMs": 0.5, "slidingWindow": {"type": "time", "durationMs": 1500.25}}`), &p); err != nil {
		t.Fatal(err)
	}
	if p.OpenTimeout != 500*time.Microsecond || p.Window.Duration != 1500250*time.Microsecond {
		t.Fatalf("%+v", p)
	}
}

func TestACallFromBeforeTheBreakerOpenedCannotCloseIt(t *testing.T) {
	p := valid()
	b, _ := New(p)
	early, _ := b.Acquire(0)
	for i := 0; i < 2; i++ {
		permit, _ := b.Acquire(1)
		permit.Record(true, 2)
	}
	if b.State() != Open {
		t.Fatal(b.State())
	}
	_, err := b.Acquire(3)
	var refused *NotPermitted
	if !errors.As(err, &refused) || refused.State != Open || refused.RetryIn != time.Second-1 || refused.State.Metric() != 2 {
		t.Fatalf("%v", err)
	}
	early.Record(false, 4)
	trial, err := b.Acquire(2 + uint64(time.Second))
	if err != nil || !trial.Trial() || b.State() != HalfOpen {
		t.Fatalf("%v %v", err, b.State())
	}
	if _, err := b.Acquire(3 + uint64(time.Second)); !errors.As(err, &refused) || refused.State != HalfOpen || refused.RetryIn != 0 {
		t.Fatalf("%v", err)
	}
	trial.Cancel()
	again, err := b.Acquire(4 + uint64(time.Second))
	if err != nil {
		t.Fatal("a cancelled trial keeps its slot")
	}
	again.Record(false, 5+uint64(time.Second))
	if b.State() != Closed {
		t.Fatal(b.State())
	}
}

func TestScopeIsReadAndABadOneIsNamed(t *testing.T) {
	p, err := valid().FromMap(map[string]any{"scope": "fleet"})
	if err != nil || !p.FleetScoped {
		t.Fatalf("%+v %v", p, err)
	}
	if p, _ := p.FromMap(map[string]any{"scope": "process"}); p.FleetScoped {
		t.Fatal("scope: process is fleet-scoped")
	}
	if p, _ := valid().FromMap(map[string]any{}); p.FleetScoped {
		t.Fatal("a block without scope is fleet-scoped")
	}
	_, err = valid().FromMap(map[string]any{"scope": "region"})
	if err == nil || err.Error() != `circuitBreaker.scope must be "process" or "fleet", found region` {
		t.Fatalf("%v", err)
	}
}

// openAt opens b with two failures in a row at at (ConsecutiveFailures: 2).
func openAt(t *testing.T, b *Breaker, at uint64) {
	t.Helper()
	for i := 0; i < 2; i++ {
		permit, err := b.Acquire(at)
		if err != nil {
			t.Fatal(err)
		}
		permit.Record(true, at)
	}
	if b.State() != Open {
		t.Fatalf("two failures left the breaker %s", b.State())
	}
}

// TestARetunedOpenBreakerStaysOpenAndItsNewTimeoutCountsFromTheOpen: an
// open breaker retuned to another failure rate and a shorter openTimeout
// stays open, goes half-open once the new timeout has passed since it
// opened (not since the retune), and keeps its refusals and transitions;
// a longer openTimeout extends the open.
func TestARetunedOpenBreakerStaysOpenAndItsNewTimeoutCountsFromTheOpen(t *testing.T) {
	second := uint64(time.Second)
	p := valid()
	p.OpenTimeout = 30 * time.Second
	b, _ := New(p)
	openAt(t, b, second)
	if _, err := b.Acquire(2 * second); err == nil {
		t.Fatal("an open breaker let a call through")
	}
	shorter := p
	shorter.FailureRateThreshold, shorter.OpenTimeout = 0.9, 10*time.Second
	if err := b.Retune(shorter); err != nil {
		t.Fatal(err)
	}
	if b.State() != Open || b.Policy() != shorter {
		t.Fatalf("retuned: %s under %+v", b.State(), b.Policy())
	}
	var refused *NotPermitted
	if _, err := b.Acquire(10 * second); !errors.As(err, &refused) || refused.State != Open || refused.RetryIn != time.Second {
		t.Fatalf("9 s after it opened: %v, want open for 1 s more", err)
	}
	trial, err := b.Acquire(11 * second)
	if err != nil || !trial.Trial() || b.State() != HalfOpen {
		t.Fatalf("10 s after it opened: %v, %s", err, b.State())
	}
	if b.Rejected() != 2 || b.Transitions() != 2 {
		t.Fatalf("%d refused, %d transitions: the retune lost its counts", b.Rejected(), b.Transitions())
	}
	trial.Record(true, 12*second)
	longer := shorter
	longer.OpenTimeout = time.Minute
	if err := b.Retune(longer); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(42 * second); !errors.As(err, &refused) || refused.RetryIn != 30*time.Second {
		t.Fatalf("30 s after it opened again: %v, want open for 30 s more", err)
	}
	bad := longer
	bad.OpenTimeout = 0
	if err := b.Retune(bad); err == nil || b.Policy() != longer {
		t.Fatalf("a bad setting was taken up: %v", err)
	}
}

// TestARetuneKeepsTheWindowsOutcomesUnlessTheWindowChangesShape: with the
// same window, the outcomes it holds are judged under the new minimumCalls
// at the next call; a window of another size or type starts afresh.
func TestARetuneKeepsTheWindowsOutcomesUnlessTheWindowChangesShape(t *testing.T) {
	p := valid()
	p.ConsecutiveFailures = 0
	halfFailed := func() *Breaker {
		b, _ := New(p)
		for i := uint64(0); i < 8; i++ {
			permit, _ := b.Acquire(i)
			permit.Record(i%2 == 1, i)
		}
		return b
	}
	call := func(b *Breaker, failed bool) {
		permit, err := b.Acquire(9)
		if err != nil {
			t.Fatal(err)
		}
		permit.Record(failed, 9)
	}

	b := halfFailed()
	sooner := p
	sooner.MinimumCalls = 9
	if err := b.Retune(sooner); err != nil {
		t.Fatal(err)
	}
	if got := b.window.tally(9); got.calls != 8 || got.failures != 4 {
		t.Fatalf("the same window holds %+v, want its 8 calls", got)
	}
	call(b, true)
	if b.State() != Open {
		t.Fatalf("5 failures of 9 under minimumCalls 9 left it %s", b.State())
	}

	for _, shape := range []SlidingWindow{{Calls: 20}, {Duration: 10 * time.Second}} {
		b := halfFailed()
		reshaped := sooner
		reshaped.Window = shape
		if err := b.Retune(reshaped); err != nil {
			t.Fatal(err)
		}
		if got := b.window.tally(9); got.calls != 0 {
			t.Fatalf("a window retuned to %+v holds %+v, want none", shape, got)
		}
		call(b, true)
		if b.State() != Closed {
			t.Fatalf("a window retuned to %+v judged old outcomes: %s", shape, b.State())
		}
	}
}

// TestABreakerRetunedFromFleetToProcessScopeDecidesAloneAtOnce: the
// daemon's word held an open breaker open past its own openTimeout; once
// retuned to scope: process, the breaker no longer waits for it, nor asks;
// retuned back to scope: fleet, it asks again, but the word it dropped
// does not come back.
func TestABreakerRetunedFromFleetToProcessScopeDecidesAloneAtOnce(t *testing.T) {
	second := uint64(time.Second)
	p := valid()
	p.FleetScoped = true
	b, _ := New(p)
	openAt(t, b, 0)
	b.Heard(Verdict{State: Open, RetryIn: 30 * time.Second}, 60*second, 0)
	if _, err := b.Acquire(2 * second); err == nil {
		t.Fatal("the daemon's word should hold the breaker open")
	}
	local := p
	local.FleetScoped = false
	if err := b.Retune(local); err != nil {
		t.Fatal(err)
	}
	if b.AsksFleet() {
		t.Fatal("a breaker of scope process asks the daemon")
	}
	trial, err := b.Acquire(2 * second)
	if err != nil || !trial.Trial() {
		t.Fatalf("its own 1 s openTimeout has passed: %v", err)
	}
	trial.Record(true, 2*second)
	if err := b.Retune(p); err != nil || !b.AsksFleet() {
		t.Fatalf("retuned back to scope fleet, the open breaker should ask the daemon: %v", err)
	}
	if trial, err := b.Acquire(3*second + 1); err != nil || !trial.Trial() {
		t.Fatalf("the word dropped stays dropped until the daemon speaks again: %v", err)
	}
}

// TestCallsMayRunWhileTheBreakerIsRetuned: retunes from another goroutine,
// under the race detector, while calls acquire, record and report.
func TestCallsMayRunWhileTheBreakerIsRetuned(t *testing.T) {
	p := valid()
	p.FleetScoped = true
	b, _ := New(p)
	var calls sync.WaitGroup
	for g := 0; g < 4; g++ {
		calls.Add(1)
		go func(g int) {
			defer calls.Done()
			for i := uint64(0); i < 2000; i++ {
				now := i * uint64(time.Millisecond)
				if permit, err := b.Acquire(now); err == nil {
					permit.Record((i+uint64(g))%3 == 0, now)
				}
				b.FleetReport(now)
			}
		}(g)
	}
	for i := 0; i < 200; i++ {
		next := p
		next.FleetScoped = i%2 == 0
		next.Window = SlidingWindow{Calls: uint32(10 + i%3)}
		next.OpenTimeout = time.Duration(1+i%5) * time.Millisecond
		if err := b.Retune(next); err != nil {
			t.Fatal(err)
		}
		_ = b.Policy()
	}
	calls.Wait()
}
