// Tests of calls' classes at the send gate: shed at once when their turn
// would come after their class's maxWait, ended when it passes in line,
// and served in class order.

package dependency

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormguard/stormguard/clients/go/gate"
)

// classedPolicy paces at 10 attempts a second once a refusal turns its
// gate on (overloadWhen: any-refusal). Payments's critical calls wait for
// a turn up to an hour, its default ones half a second, its sheddable ones
// not at all; bulk's calls are sheddable unless they say otherwise.
const classedPolicy = `services:
  payments:
    maxRetries: 0
    budget: {enabled: false}
    gate: {enabled: true, minRate: 10, maxRate: 10, quiet: 1h, overloadWhen: any-refusal, maxWait: {critical: 1h, default: 500ms, sheddable: 0s}}
  bulk:
    maxRetries: 0
    budget: {enabled: false}
    gate: {enabled: true, minRate: 10, maxRate: 10, quiet: 1h, overloadWhen: any-refusal, criticality: sheddable, maxWait: {default: 1h, sheddable: 0s}}
`

// countingServer answers every request 200, counting them.
func countingServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	calls := new(atomic.Int64)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(server.Close)
	return server, calls
}

// heldBehind turns dependency's gate on and puts n default callers in its
// line that never claim their turn, as calls that wait ahead and hold it;
// then an attempt is accepted, so that the gate probes no more and those
// ahead count (while it probes, a call's turn is expected at the next
// probe, whoever is ahead). The line does not move, and at the gate's
// pace of 10 a second, the turn of a default call that joins it would come
// within n+1 tenths of a second.
func heldBehind(t *testing.T, dependency *Dependency, n int) *gate.Gate {
	t.Helper()
	g := dependency.Gate()
	now := since(dependency.gateBorn)
	g.Record(gate.Overloaded, now, now)
	for g.Waiting() < n {
		g.Turn(since(dependency.gateBorn))
	}
	now = since(dependency.gateBorn)
	g.Record(gate.Accepted, now, now)
	if rate, on := g.Rate(); !on || rate != 10 || g.Phase() == "probing" || g.Waiting() != n {
		t.Fatalf("the gate paces at %v (on %v, %s, %d waiting)", rate, on, g.Phase(), g.Waiting())
	}
	return g
}

// TestACallWhoseTurnWouldComeAfterItsClassMaxWaitIsShedAtOnce: behind ten
// callers, at ten turns a second, a default call's turn would come after
// a second, past its class's maxWait of half a second: it is shed at once,
// sending nothing and taking no place. A critical call, which waits ahead
// of default ones and up to an hour, is served; a sheddable one, which
// waits for no turn that is not free, is shed.
func TestACallWhoseTurnWouldComeAfterItsClassMaxWaitIsShedAtOnce(t *testing.T) {
	dependency := New(watchServed(t, classedPolicy, "payments"), "payments", nil)
	payments, calls := countingServer(t)
	g := heldBehind(t, dependency, 10)

	start := time.Now()
	err := dependency.Call(context.Background(), "/charge", attempt(payments.URL))
	var gaveUp *CallError
	if !errors.As(err, &gaveUp) || gaveUp.Reason != Shed || gaveUp.Attempts != 0 || !errors.Is(err, ErrShed) {
		t.Fatalf("%v", err)
	}
	if waited := time.Since(start); waited >= 500*time.Millisecond {
		t.Fatalf("shed after %v, not at once", waited)
	}
	if calls.Load() != 0 || g.Waiting() != 10 {
		t.Fatalf("%d sent, %d waiting", calls.Load(), g.Waiting())
	}

	critical := WithCriticality(context.Background(), gate.Critical)
	if err := dependency.Call(critical, "/charge", attempt(payments.URL)); err != nil {
		t.Fatalf("the critical call, first in line: %v", err)
	}
	if calls.Load() != 1 || g.Waiting() != 10 {
		t.Fatalf("%d sent, %d waiting", calls.Load(), g.Waiting())
	}

	sheddable := WithCriticality(context.Background(), gate.Sheddable)
	err = dependency.Call(sheddable, "/charge", attempt(payments.URL))
	if !errors.As(err, &gaveUp) || gaveUp.Reason != Shed || gaveUp.Attempts != 0 {
		t.Fatalf("the sheddable call: %v", err)
	}
	if calls.Load() != 1 {
		t.Fatal("a shed call was sent")
	}
	if tally := g.Tally(); tally.Shed != [3]uint64{0, 1, 1} {
		t.Fatalf("shed by class %v", tally.Shed)
	}
}

// TestACallStillInLineAtItsClassMaxWaitOrDeadlineEndsWithNoTurn: behind
// two callers that hold the line, a default call's turn would come within
// 0.3 s, within its class's maxWait, so it waits; the line does not move,
// and at half a second from its start, its maxWait, it leaves the line and
// ends with NoTurn, having sent nothing, though its context has no
// deadline. One whose context's deadline comes first ends at that.
func TestACallStillInLineAtItsClassMaxWaitOrDeadlineEndsWithNoTurn(t *testing.T) {
	dependency := New(watchServed(t, classedPolicy, "payments"), "payments", nil)
	payments, calls := countingServer(t)
	g := heldBehind(t, dependency, 2)

	start := time.Now()
	err := dependency.Call(context.Background(), "/charge", attempt(payments.URL))
	waited := time.Since(start)
	var gaveUp *CallError
	if !errors.As(err, &gaveUp) || gaveUp.Reason != NoTurn || gaveUp.Attempts != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v", err)
	}
	if waited < 500*time.Millisecond || waited > 5*time.Second {
		t.Fatalf("ended after %v, not at its maxWait of 500ms", waited)
	}
	if calls.Load() != 0 || g.Waiting() != 2 {
		t.Fatalf("%d sent, %d waiting", calls.Load(), g.Waiting())
	}

	start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	err = dependency.Call(ctx, "/charge", attempt(payments.URL))
	waited = time.Since(start)
	if !errors.As(err, &gaveUp) || gaveUp.Reason != NoTurn || gaveUp.Attempts != 0 {
		t.Fatalf("%v", err)
	}
	if waited < 400*time.Millisecond {
		t.Fatalf("ended after %v, before its deadline", waited)
	}
	if calls.Load() != 0 || g.Waiting() != 2 {
		t.Fatalf("%d sent, %d waiting", calls.Load(), g.Waiting())
	}
}

// TestAPolicysCriticalityIsTheClassOfACallThatNamesNone: bulk's calls are
// sheddable unless they say otherwise: behind one caller, one that names
// no class is shed at once, where one of the default class, through the
// Transport with the class on its request's context, waits in line (an
// hour, its class's maxWait) until its deadline.
func TestAPolicysCriticalityIsTheClassOfACallThatNamesNone(t *testing.T) {
	dependency := New(watchServed(t, classedPolicy, "bulk"), "bulk", nil)
	bulk, calls := countingServer(t)
	g := heldBehind(t, dependency, 1)

	err := dependency.Call(context.Background(), "/export", attempt(bulk.URL))
	var gaveUp *CallError
	if !errors.As(err, &gaveUp) || gaveUp.Reason != Shed {
		t.Fatalf("a call that names no class: %v", err)
	}

	start := time.Now()
	ctx, cancel := context.WithTimeout(WithCriticality(context.Background(), gate.Default), 300*time.Millisecond)
	defer cancel()
	request, _ := http.NewRequestWithContext(ctx, http.MethodGet, bulk.URL+"/export", nil)
	answer, err := (&http.Client{Transport: dependency.Transport(nil)}).Do(request)
	if err == nil {
		answer.Body.Close()
	}
	if !errors.As(err, &gaveUp) || gaveUp.Reason != NoTurn {
		t.Fatalf("a request of the default class: %v", err)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("ended after %v, before its deadline", waited)
	}
	if calls.Load() != 0 || g.Waiting() != 1 {
		t.Fatalf("%d sent, %d waiting", calls.Load(), g.Waiting())
	}
	// The sheddable call shed at once, and the default one that waited
	// in line until its deadline.
	if tally := g.Tally(); tally.Shed != [3]uint64{0, 1, 1} {
		t.Fatalf("shed by class %v", tally.Shed)
	}
}

// TestACallThatWaitedInLineUntilItsBoundIsCountedShed: a call still in
// line when its bound passes ends with NoTurn, and the gate counts it
// shed, in its class, as one shed at once: demand the pace did not serve,
// for the fleet to hear. A call cancelled while it waits is not counted.
func TestACallThatWaitedInLineUntilItsBoundIsCountedShed(t *testing.T) {
	dependency := New(watchServed(t, classedPolicy, "payments"), "payments", nil)
	payments, calls := countingServer(t)
	g := heldBehind(t, dependency, 2)
	g.Tally()

	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	err := dependency.Call(ctx, "/charge", attempt(payments.URL))
	var gaveUp *CallError
	if !errors.As(err, &gaveUp) || gaveUp.Reason != NoTurn {
		t.Fatalf("%v", err)
	}

	cancelled, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for g.Waiting() < 3 && cancelled.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	err = dependency.Call(cancelled, "/charge", attempt(payments.URL))
	if !errors.As(err, &gaveUp) || gaveUp.Reason != Cancelled {
		t.Fatalf("%v", err)
	}
	if calls.Load() != 0 || g.Waiting() != 2 {
		t.Fatalf("%d sent, %d waiting", calls.Load(), g.Waiting())
	}
	if tally := g.Tally(); tally.Shed != [3]uint64{0, 1, 0} {
		t.Fatalf("shed by class %v: the default call that waited until its deadline, not the cancelled one", tally.Shed)
	}
}
