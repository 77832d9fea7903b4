// Tests of calls through the send gate: waiting in line, pacing by the
// daemon, what turns it on, and a breaker that opens meanwhile.

package dependency

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormguard/stormguard/clients/go/breaker"
	"github.com/stormguard/stormguard/clients/go/policy"
	"github.com/stormguard/stormguard/clients/go/report"
)

// A probe rate of one attempt in 1000 s: once the gate is on, a turn is
// as good as never due within a test. Under overloadWhen: any-refusal, so
// that one 503 turns the gate on, whatever the daemon's default. Its
// callers wait for a turn however long it takes (an hour), unless their
// deadline says otherwise.
const gatedPolicy = paymentsRetried +
	"    gate: {enabled: true, minRate: 0.001, maxRate: 10, quiet: 1h, overloadWhen: any-refusal, maxWait: {critical: 1h, default: 1h, sheddable: 1h}}\n"

// paymentsRetried is a policy whose payments calls are tried four times,
// a few ms apart, retrying 5xx, with no budget: the tests' policies add
// the block they are about.
const paymentsRetried = `defaults:
  maxRetries: 3
services:
  payments:
    maxRetries: 3
    initialDelay: 1ms
    maxDelay: 5ms
    jitter: none
    retryOn: [5xx]
    budget: {enabled: false}
`

// TestACallWhoseTurnComesAfterItsDeadlineIsShedAndOneCancelledInLineLeavesIt:
// a 503 turns the gate on, and the retry asks for a turn instead of backing
// off; its turn, at the gate's pace, would come long after the call's
// deadline, so the call ends at once with Shed, taking no place, rather
// than wait in line for nothing. A call with no deadline waits in line; cancelled
// while it waits, it ends Cancelled, out of the line, having sent nothing.
func TestACallWhoseTurnComesAfterItsDeadlineIsShedAndOneCancelledInLineLeavesIt(t *testing.T) {
	dependency := New(watchServed(t, gatedPolicy, "payments"), "payments", nil)
	if g := dependency.Gate(); g == nil || g.On() {
		t.Fatalf("the policy's gate is %v", g)
	}

	var calls atomic.Int64
	payments := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer payments.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := dependency.Call(ctx, "/charge", attempt(payments.URL))
	var gaveUp *CallError
	if !errors.As(err, &gaveUp) || gaveUp.Reason != Shed || !errors.Is(err, ErrShed) || gaveUp.Status != 503 {
		t.Fatalf("%v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the call waited until its deadline")
	}
	// The first credit is drawn at random: a draw close enough to a whole
	// turn gives the first retry its turn, and the next waits.
	if sent := calls.Load(); sent < 1 || sent > 2 || int64(gaveUp.Attempts) != sent {
		t.Fatalf("%d attempts sent, %d reported", sent, gaveUp.Attempts)
	}
	g := dependency.Gate()
	if !g.On() || g.Waiting() != 0 {
		t.Fatalf("on %v, %d waiting", g.On(), g.Waiting())
	}

	sent := calls.Load()
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for g.Waiting() == 0 && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	err = dependency.Call(ctx, "/charge", attempt(payments.URL))
	if !errors.As(err, &gaveUp) || gaveUp.Reason != Cancelled || gaveUp.Attempts != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("%v", err)
	}
	if calls.Load() != sent || g.Waiting() != 0 {
		t.Fatalf("%d sent, %d waiting", calls.Load()-sent, g.Waiting())
	}
}

// TestAGateACallTurnedOnIsPacedByTheDaemon: the dependency tracks its gate
// with its reporter, so that once a 503 turns the gate on, the reporter
// asks the daemon for the process's pace and the gate paces at it.
func TestAGateACallTurnedOnIsPacedByTheDaemon(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(gatedPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	daemon := serve(t, file)
	watch, err := policy.Start(context.Background(), policy.Config{Daemon: daemon, Services: []string{"payments"}})
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	reporter, err := report.Start(report.Config{Daemon: daemon, Instance: "pod-1", Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reporter.Stop(context.Background()) }()
	dependency := New(watch, "payments", reporter)
	payments := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer payments.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := dependency.Call(ctx, "/charge", attempt(payments.URL)); err == nil {
		t.Fatal("a 503 succeeded")
	}
	g := dependency.Gate()
	var granted float64
	if !eventually(func() bool {
		if metric(t, daemon, `stormguard_fleet_processes{service="payments"}`) != 1 {
			return false
		}
		granted = metric(t, daemon, `stormguard_fleet_rate{service="payments"}`)
		rate, on := g.RateAt(since(dependency.gateBorn))
		return on && rate == granted
	}) {
		rate, _ := g.RateAt(since(dependency.gateBorn))
		t.Fatalf("paced at %v, granted %v: %+v", rate, granted, reporter.Stats())
	}
	if s := reporter.Stats(); s.PaceAsks == 0 || s.PaceFailures != 0 {
		t.Fatalf("%+v", s)
	}
}

// TestAnErrorTheDependencyAnswersLeavesTheGateOffAndAnOverloadTurnsItOn:
// under the default gate.overloadOn, calls answered 500 (retried, as
// retryOn [5xx] says) leave the gate off: a 500 says nothing of the
// dependency's load. 503s turn it on; so, through the Transport, do 500s
// that carry a Retry-After.
func TestAnErrorTheDependencyAnswersLeavesTheGateOffAndAnOverloadTurnsItOn(t *testing.T) {
	watch := watchServed(t, gatedPolicy, "payments")
	var status atomic.Int64
	status.Store(http.StatusInternalServerError)
	var calls atomic.Int64
	payments := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path == "/wait" {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(int(status.Load()))
	}))
	defer payments.Close()

	dependency := New(watch, "payments", nil)
	g := dependency.Gate()
	if g == nil {
		t.Fatal("the policy's gate is off")
	}
	for i := 0; i < 5; i++ {
		// Bounded, so that a gate turned on fails the test at once: its
		// retries would wait for a turn never due.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := dependency.Call(ctx, "/charge", attempt(payments.URL))
		cancel()
		var gaveUp *CallError
		if !errors.As(err, &gaveUp) || gaveUp.Reason != Exhausted || gaveUp.Attempts != 4 || gaveUp.Status != 500 {
			t.Fatalf("%v", err)
		}
		if g.On() {
			t.Fatalf("call %d: 500s turned the gate on", i+1)
		}
	}
	if sent := calls.Load(); sent != 20 {
		t.Fatalf("%d attempts sent, want 20", sent)
	}

	status.Store(http.StatusServiceUnavailable)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := dependency.Call(ctx, "/charge", attempt(payments.URL)); err == nil {
		t.Fatal("a 503 succeeded")
	}
	if !g.On() {
		t.Fatal("503s left the gate off")
	}

	// A 500 that asks for a wait says overload: the Transport reads the
	// Retry-After, which Call's attempts cannot give.
	status.Store(http.StatusInternalServerError)
	waits := New(watch, "payments", nil)
	client := &http.Client{Transport: waits.Transport(nil)}
	request, _ := http.NewRequest(http.MethodGet, payments.URL+"/charge", nil)
	if answer, err := client.Do(request); err != nil || answer.StatusCode != 500 {
		t.Fatalf("%v %v", answer, err)
	} else {
		answer.Body.Close()
	}
	if waits.Gate().On() {
		t.Fatal("500s without a Retry-After turned the gate on")
	}
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	request, _ = http.NewRequestWithContext(ctx, http.MethodGet, payments.URL+"/wait", nil)
	if answer, err := client.Do(request); err == nil {
		answer.Body.Close()
	}
	if !waits.Gate().On() {
		t.Fatal("500s with a Retry-After left the gate off")
	}
}

// TestThePolicysMaxElapsedEndsACallWithoutAContextDeadline: a call whose
// context has no deadline still ends when the policy's maxElapsed passes:
// with Deadline while it backs off between retries, long before its
// retries run out; and while the gate paces, a retry whose turn would come
// after it, though its class may wait an hour, is shed at once.
func TestThePolicysMaxElapsedEndsACallWithoutAContextDeadline(t *testing.T) {
	const bounded = `services:
  payments:
    maxRetries: 100
    maxElapsed: 300ms
    initialDelay: 20ms
    maxDelay: 20ms
    jitter: none
    retryOn: [5xx]
    budget: {enabled: false}
    circuitBreaker: {enabled: false}
  gated:
    maxRetries: 100
    maxElapsed: 300ms
    initialDelay: 20ms
    retryOn: [5xx]
    budget: {enabled: false}
    circuitBreaker: {enabled: false}
    gate: {enabled: true, minRate: 0.001, maxRate: 10, quiet: 1h, overloadWhen: any-refusal, maxWait: {critical: 1h, default: 1h, sheddable: 1h}}
`
	watch := watchServed(t, bounded, "payments", "gated")
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer down.Close()

	err := New(watch, "payments", nil).Call(context.Background(), "/charge", attempt(down.URL))
	var gaveUp *CallError
	if !errors.As(err, &gaveUp) || gaveUp.Reason != Deadline || gaveUp.Status != 503 {
		t.Fatalf("%v", err)
	}
	// 20 ms apart, 300 ms allow about 15 attempts of the 101 the retries would.
	if gaveUp.Attempts < 2 || gaveUp.Attempts > 50 {
		t.Fatalf("%d attempts", gaveUp.Attempts)
	}

	start := time.Now()
	err = New(watch, "gated", nil).Call(context.Background(), "/charge", attempt(down.URL))
	if !errors.As(err, &gaveUp) || gaveUp.Reason != Shed || !errors.Is(err, ErrShed) || gaveUp.Attempts > 2 {
		t.Fatalf("%v", err)
	}
	if waited := time.Since(start); waited >= 300*time.Millisecond {
		t.Fatalf("shed after %v, at maxElapsed rather than at once", waited)
	}
}

// TestACallWhoseBreakerOpensWhileItWaitsInLineIsNotSent: a call takes the
// breaker's permit before it waits for the gate's turn; when other calls'
// failures open the breaker meanwhile, the call asks it again the
// next time it is woken in line, and leaves the line unsent, ending
// CircuitOpen, without spending a turn.
func TestACallWhoseBreakerOpensWhileItWaitsInLineIsNotSent(t *testing.T) {
	text := strings.Replace(gatedPolicy, "maxRetries: 3\n    initialDelay", "maxRetries: 0\n    circuitBreaker: {enabled: true, consecutiveFailures: 2, openTimeout: 1h}\n    initialDelay", 1)
	dependency := New(watchServed(t, text, "payments"), "payments", nil)
	payments, calls := gatedOnByA503(t, dependency)
	if state := dependency.Breaker().State(); state != breaker.Closed {
		t.Fatalf("the 503 the gate paces opened it: %v", state)
	}

	ended, cancelFirst := twoInLine(t, dependency, payments.URL)
	// Other calls' failures, two in a row (the 503 that turned the gate
	// on was the gate's, not the breaker's).
	for i := 0; i < 2; i++ {
		permit, err := dependency.Breaker().Acquire(0)
		if err != nil {
			t.Fatal(err)
		}
		permit.Record(true, 0)
	}
	cancelFirst()
	var gaveUp *CallError
	if err := <-ended[0]; !errors.As(err, &gaveUp) || gaveUp.Reason != Cancelled {
		t.Fatalf("the first: %v", err)
	}
	select {
	case err := <-ended[1]:
		if !errors.As(err, &gaveUp) || gaveUp.Reason != CircuitOpen {
			t.Fatalf("the second: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second call still waits in line for a turn, its breaker open")
	}
	if calls.Load() != 1 || dependency.Gate().Waiting() != 0 {
		t.Fatalf("%d attempts sent after the first, %d waiting", calls.Load()-1, dependency.Gate().Waiting())
	}
}

// gatedWithABreaker paces at no less than 200 attempts a second once a
// refusal turns its gate on (overloadWhen: any-refusal), so that retries
// wait their turns briefly; its breaker opens after two failures in a row.
const gatedWithABreaker = `services:
  payments:
    maxRetries: 3
    initialDelay: 1ms
    maxDelay: 5ms
    jitter: none
    retryOn: [5xx]
    budget: {enabled: false}
    circuitBreaker: {enabled: true, consecutiveFailures: 2, openTimeout: 1h}
    gate: {enabled: true, minRate: 200, maxRate: 1000, quiet: 1h, overloadWhen: any-refusal}
`

// TestRefusalsTheGatePacesDoNotOpenTheBreakerAndErrorsStillDo: under a
// gate that any refusal turns on and a breaker that opens after two
// failures in a row, calls all refused with 503 turn the gate on and are
// paced by it, every retry sent; the breaker hears none of them (the very
// refusal that turned the gate on is the gate's) and stays closed with no
// failure in a row counted. A dependency answering 500, an error that
// says nothing of its load, leaves the gate off and opens the breaker.
func TestRefusalsTheGatePacesDoNotOpenTheBreakerAndErrorsStillDo(t *testing.T) {
	watch := watchServed(t, gatedWithABreaker, "payments")
	var status atomic.Int64
	status.Store(http.StatusServiceUnavailable)
	var calls atomic.Int64
	payments := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.WriteHeader(int(status.Load()))
	}))
	defer payments.Close()

	overloaded := New(watch, "payments", nil)
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := overloaded.Call(ctx, "/charge", attempt(payments.URL))
		cancel()
		var gaveUp *CallError
		if !errors.As(err, &gaveUp) || gaveUp.Reason != Exhausted || gaveUp.Attempts != 4 || gaveUp.Status != 503 {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	if sent := calls.Load(); sent != 12 {
		t.Fatalf("%d attempts sent, want 12", sent)
	}
	if !overloaded.Gate().On() {
		t.Fatal("503s left the gate off")
	}
	b := overloaded.Breaker()
	if state := b.State(); state != breaker.Closed {
		t.Fatalf("refusals the gate paces opened the breaker: %v", state)
	}
	// No failure in a row counted: one more leaves it closed.
	permit, err := b.Acquire(0)
	if err != nil {
		t.Fatal(err)
	}
	permit.Record(true, 0)
	if state := b.State(); state != breaker.Closed {
		t.Fatalf("one failure opened the breaker, the 503s counted: %v", state)
	}

	status.Store(http.StatusInternalServerError)
	calls.Store(0)
	failing := New(watch, "payments", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = failing.Call(ctx, "/charge", attempt(payments.URL))
	var gaveUp *CallError
	if !errors.As(err, &gaveUp) || gaveUp.Reason != CircuitOpen || gaveUp.Attempts != 2 {
		t.Fatalf("%v", err)
	}
	if sent := calls.Load(); sent != 2 {
		t.Fatalf("%d attempts sent, want 2", sent)
	}
	if state := failing.Breaker().State(); state != breaker.Open {
		t.Fatalf("500s left the breaker %v", state)
	}
	if failing.Gate().On() {
		t.Fatal("500s turned the gate on")
	}
}

// within says whether check holds within d.
func within(d time.Duration, check func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if check() {
			return true
		}
	}
	return check()
}

// TestACallInLineGrantedTheFleetsTrialMeanwhileLeavesTheLineAndGoes: when
// the fleet-scoped breaker opens while a call waits in line and the daemon
// grants the fleet a trial, the call asks again when woken, and goes at
// once on the trial's slot, as one that never waited would.
func TestACallInLineGrantedTheFleetsTrialMeanwhileLeavesTheLineAndGoes(t *testing.T) {
	text := strings.Replace(gatedPolicy, "maxRetries: 3\n    initialDelay", "maxRetries: 0\n    circuitBreaker: {enabled: true, consecutiveFailures: 2, openTimeout: 1h, scope: fleet}\n    initialDelay", 1)
	dependency := New(watchServed(t, text, "payments"), "payments", nil)
	payments, calls := gatedOnByA503(t, dependency)
	ended, cancelFirst := twoInLine(t, dependency, payments.URL)
	b, now := dependency.Breaker(), since(dependency.guard().breakerBorn)
	failTwice(t, b, now)
	b.Heard(breaker.Verdict{State: breaker.HalfOpen, Trials: 1}, now+uint64(time.Minute), now)
	cancelFirst()
	select {
	case err := <-ended[1]:
		var gaveUp *CallError
		if !errors.As(err, &gaveUp) || gaveUp.Reason == CircuitOpen || gaveUp.Attempts != 1 {
			t.Fatalf("the second: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second call still waits in line, the fleet's trial granted")
	}
	if calls.Load() != 2 || dependency.Gate().Waiting() != 0 {
		t.Fatalf("%d sent after the first, %d waiting", calls.Load()-1, dependency.Gate().Waiting())
	}
}

// gatedOnByA503 is a payments server that answers 503 to everything, and
// the count of what it was sent, after a first call through dependency
// has turned its gate on.
func gatedOnByA503(t *testing.T, dependency *Dependency) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	calls := new(atomic.Int64)
	payments := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(payments.Close)
	if err := dependency.Call(context.Background(), "/charge", attempt(payments.URL)); err == nil || !dependency.Gate().On() {
		t.Fatalf("the 503 did not turn the gate on: %v", err)
	}
	return payments, calls
}

// twoInLine starts two calls to url through dependency and waits until
// both wait in its gate's line (a turn up to 1000 s away); cancelling the
// first wakes the second. Each ends on its channel.
func twoInLine(t *testing.T, dependency *Dependency, url string) ([2]chan error, context.CancelFunc) {
	t.Helper()
	first, cancelFirst := context.WithCancel(context.Background())
	t.Cleanup(cancelFirst)
	ended := [2]chan error{make(chan error, 1), make(chan error, 1)}
	for i, ctx := range []context.Context{first, context.Background()} {
		i, ctx := i, ctx
		go func() { ended[i] <- dependency.Call(ctx, "/charge", attempt(url)) }()
		if !within(5*time.Second, func() bool { return dependency.Gate().Waiting() == i+1 }) {
			t.Fatalf("%d calls wait in line, not %d", dependency.Gate().Waiting(), i+1)
		}
	}
	return ended, cancelFirst
}

// TestAPolicyUpdateRetunesTheGateUnlessItChangesWhatSaysOverload: a 503
// turns the gate on; the daemon then serves an update of the gate's quiet
// and rates, and the dependency keeps the same gate, still on, so new
// calls still wait in its line; an update of overloadWhen voids what the
// gate learned, and the dependency starts a new one, off.
func TestAPolicyUpdateRetunesTheGateUnlessItChangesWhatSaysOverload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	write := func(text string) {
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(gatedPolicy)
	dependency := watchedPayments(t, file)
	payments := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer payments.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := dependency.Call(ctx, "/charge", attempt(payments.URL)); err == nil {
		t.Fatal("a 503 succeeded")
	}
	g := dependency.Gate()
	if !g.On() {
		t.Fatal("a 503 left the gate off")
	}

	write(strings.Replace(gatedPolicy, "maxRate: 10, quiet: 1h", "maxRate: 5, quiet: 30m", 1))
	if !eventually(func() bool { return dependency.Gate().Settings().MaxRate == 5 }) {
		t.Fatal("the update never reached the gate")
	}
	if dependency.Gate() != g || !g.On() {
		t.Fatal("an update of the gate's rates and quiet replaced the gate or turned it off")
	}

	write(strings.Replace(gatedPolicy, "overloadWhen: any-refusal", "overloadWhen: most-refused", 1))
	if !eventually(func() bool { return dependency.Gate() != g }) {
		t.Fatal("an update of overloadWhen kept the gate that learned under the old setting")
	}
	if dependency.Gate().On() || !g.On() {
		t.Fatal("the new gate should start off, and the old one, which calls in flight hold, stay on")
	}
}

// watchedPayments is the payments dependency under the policy in file, as
// a test daemon serves it and the watch reads it again when it changes.
func watchedPayments(t *testing.T, file string) *Dependency {
	t.Helper()
	config := policy.Config{Daemon: serve(t, file), Services: []string{"payments"}, WatchWait: 5 * time.Second, MinPollInterval: 50 * time.Millisecond}
	watch, err := policy.Start(context.Background(), config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(watch.Stop)
	return New(watch, "payments", nil)
}

// silentPolicy's gate paces at no less than 200 attempts a second once a
// refusal or a timeout turns it on (overloadWhen: any-refusal), so that
// retries wait their turns briefly; each attempt may take 50 ms, and its
// breaker opens after two failures in a row.
const silentPolicy = `services:
  payments:
    maxRetries: 3
    perTryTimeout: 50ms
    initialDelay: 1ms
    maxDelay: 5ms
    jitter: none
    budget: {enabled: false}
    circuitBreaker: {enabled: true, consecutiveFailures: 2, openTimeout: 1h}
    gate: {enabled: true, minRate: 200, maxRate: 1000, quiet: 1h, overloadWhen: any-refusal}
`

// TestADependencyThatStopsAnsweringOpensTheBreakerThoughTheGateIsOn: a
// dependency that answers nothing times out every attempt; the first
// timeout turns the gate on, but a timeout is not a refusal the gate
// paces (nothing answered it), so the breaker hears each as a failure: the
// second opens it, and the call ends CircuitOpen after two attempts.
func TestADependencyThatStopsAnsweringOpensTheBreakerThoughTheGateIsOn(t *testing.T) {
	dependency := New(watchServed(t, silentPolicy, "payments"), "payments", nil)
	var sent atomic.Int64
	silent := func(ctx context.Context) (int, error) {
		sent.Add(1)
		<-ctx.Done()
		return 0, ctx.Err()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := dependency.Call(ctx, "/charge", silent)
	var gaveUp *CallError
	if !errors.As(err, &gaveUp) || gaveUp.Reason != CircuitOpen || gaveUp.Attempts != 2 {
		t.Fatalf("%v", err)
	}
	if sent.Load() != 2 {
		t.Fatalf("%d attempts sent, want 2", sent.Load())
	}
	if !dependency.Gate().On() {
		t.Fatal("a timeout left the gate off")
	}
	if state := dependency.Breaker().State(); state != breaker.Open {
		t.Fatalf("timeouts left the breaker %v", state)
	}
}

// halfOpenPolicy's breaker, once open, lets one trial through after 50 ms
// and closes after two good ones; its gate paces at no less than 200
// attempts a second once a refusal turns it on.
const halfOpenPolicy = `services:
  payments:
    maxRetries: 0
    retryOn: [5xx]
    budget: {enabled: false}
    circuitBreaker: {enabled: true, consecutiveFailures: 2, openTimeout: 50ms, halfOpenMaxCalls: 1, successThreshold: 2%s}
    gate: {enabled: true, minRate: 200, maxRate: 1000, quiet: 1h, overloadWhen: any-refusal}
`

// openedBehindAnOnGate is dependency with its gate turned on by a 503 and
// its breaker opened by two other calls' failures, and a payments server
// that answers 503 to everything.
func openedBehindAnOnGate(t *testing.T, dependency *Dependency) *httptest.Server {
	t.Helper()
	payments, _ := gatedOnByA503(t, dependency)
	b, now := dependency.Breaker(), since(dependency.guard().breakerBorn)
	failTwice(t, b, now)
	if state := b.State(); state != breaker.Open || !dependency.Gate().On() {
		t.Fatalf("the breaker is %v, the gate on %v", state, dependency.Gate().On())
	}
	return payments
}

// TestAHalfOpenTrialRefusedWhileTheGateIsOnCountsAsASuccess: a trial
// refused with a 503 while the gate paces found the dependency up (it
// answered, asking for less): the breaker counts it a success, not a
// failure, and does not give its slot back unheard. Two such trials close
// it, as successThreshold says.
func TestAHalfOpenTrialRefusedWhileTheGateIsOnCountsAsASuccess(t *testing.T) {
	dependency := New(watchServed(t, fmt.Sprintf(halfOpenPolicy, ""), "payments"), "payments", nil)
	payments := openedBehindAnOnGate(t, dependency)
	b := dependency.Breaker()
	for trial := 1; trial <= 2; trial++ {
		time.Sleep(60 * time.Millisecond) // past the open timeout: the next call is a trial
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := dependency.Call(ctx, "/charge", attempt(payments.URL))
		cancel()
		var gaveUp *CallError
		if !errors.As(err, &gaveUp) || gaveUp.Reason != Exhausted || gaveUp.Attempts != 1 || gaveUp.Status != 503 {
			t.Fatalf("trial %d: %v", trial, err)
		}
		want := breaker.HalfOpen
		if trial == 2 {
			want = breaker.Closed
		}
		if state := b.State(); state != want {
			t.Fatalf("after trial %d the breaker is %v, want %v", trial, state, want)
		}
	}
}

// TestAFleetTrialRefusedWhileTheGateIsOnIsReportedAsSucceeded: the fleet's
// trial, sent at once on the slot the daemon granted, is refused with a 503
// while the gate paces: it found the dependency up, and the breaker tells
// the daemon so at its next ask, as of any trial that succeeded. The slot
// is spent, not given back for an unpaced trial to take.
func TestAFleetTrialRefusedWhileTheGateIsOnIsReportedAsSucceeded(t *testing.T) {
	text := fmt.Sprintf(halfOpenPolicy, ", scope: fleet")
	dependency := New(watchServed(t, text, "payments"), "payments", nil)
	payments := openedBehindAnOnGate(t, dependency)
	b, now := dependency.Breaker(), since(dependency.guard().breakerBorn)
	b.Heard(breaker.Verdict{State: breaker.HalfOpen, Trials: 1}, now+uint64(time.Minute), now)
	err := dependency.Call(context.Background(), "/charge", attempt(payments.URL))
	var gaveUp *CallError
	if !errors.As(err, &gaveUp) || gaveUp.Reason != Exhausted || gaveUp.Attempts != 1 || gaveUp.Status != 503 {
		t.Fatalf("the fleet's trial: %v", err)
	}
	err = dependency.Call(context.Background(), "/charge", attempt(payments.URL))
	if !errors.As(err, &gaveUp) || gaveUp.Reason != CircuitOpen || gaveUp.Attempts != 0 {
		t.Fatalf("a call after the one trial granted: %v", err)
	}
	report, ok := b.FleetReport(since(dependency.guard().breakerBorn))
	if !ok || report.Succeeded != 1 || report.Failed != 0 {
		t.Fatalf("the breaker tells the daemon %+v", report)
	}
}

// failTwice records two failed calls on b at now: enough to open the
// breakers of these tests' policies.
func failTwice(t *testing.T, b *breaker.Breaker, now uint64) {
	t.Helper()
	for i := 0; i < 2; i++ {
		permit, err := b.Acquire(now)
		if err != nil {
			t.Fatal(err)
		}
		permit.Record(true, now)
	}
}
