// Tests of a dependency's calls against the real daemon's policy: retries
// reported, the breaker following the policy, failures named.

package dependency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormguard/stormguard/clients/go/breaker"
	"github.com/stormguard/stormguard/clients/go/internal/daemontest"
	"github.com/stormguard/stormguard/clients/go/policy"
	"github.com/stormguard/stormguard/clients/go/report"
)

// serve starts the daemon on an address of its own with policyFile; its
// base URL.
func serve(t *testing.T, policyFile string) string {
	at := daemontest.Reserve(t)
	daemontest.Serve(t, at, policyFile)
	return at.URL()
}

// watchServed writes policyText to a file of the test's, serves it from a
// daemon of the test's own and watches services there, quick to follow an
// edit; the watch stops with the test.
func watchServed(t *testing.T, policyText string, services ...string) *policy.Watch {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(policyText), 0o600); err != nil {
		t.Fatal(err)
	}
	watch, err := policy.Start(context.Background(), policy.Config{Daemon: serve(t, file), Services: services, WatchWait: 5 * time.Second, MinPollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(watch.Stop)
	if watch.Source() != policy.FromDaemon {
		t.Fatalf("the policies came from %v, not the daemon", watch.Source())
	}
	return watch
}

var (
	eventually = daemontest.Eventually
	metric     = daemontest.Metric
)

const policyText = `defaults:
  maxRetries: 3
services:
  payments:
    maxRetries: 3
    initialDelay: 1ms
    maxDelay: 5ms
    jitter: none
    retryOn: [5xx, connect-failure]
    budget: {enabled: true, retryRatio: 0.2, minRetriesPerSecond: 100, ttl: 10s}
    circuitBreaker: {enabled: %v, consecutiveFailures: 4, openTimeout: 60s}
`

// flaky answers 500 to its first failures calls, then 200: an error the
// dependency answered with, no sign of overload, so that failures in a row
// open the breaker (503s would trip it half-open).
type flaky struct {
	failures int64
	calls    atomic.Int64
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if f.calls.Add(1) <= atomic.LoadInt64(&f.failures) {
		w.WriteHeader(http.StatusInternalServerError)
	}
}

func attempt(url string) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		request, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
		answer, err := http.DefaultClient.Do(request)
		if err != nil {
			return 0, err
		}
		answer.Body.Close()
		return answer.StatusCode, nil
	}
}

// TestRetriesAreReportedAndTheBreakerFollowsThePolicy: a dependency that
// fails twice is retried twice, the daemon counts every attempt and retry
// from the reports, four failures in a row open the breaker, which then
// refuses without calling, and a policy without a breaker lets calls
// through again.
func TestRetriesAreReportedAndTheBreakerFollowsThePolicy(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(policyText, true)), 0o600); err != nil {
		t.Fatal(err)
	}
	daemon := serve(t, file)
	watch, err := policy.Start(context.Background(), policy.Config{Daemon: daemon, Services: []string{"payments"}, WatchWait: 5 * time.Second, MinPollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	reporter, err := report.Start(report.Config{Daemon: daemon, Instance: "pod-1", Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer reporter.Stop(context.Background())
	dependency := New(watch, "payments", reporter)

	server := &flaky{failures: 2}
	payments := httptest.NewServer(server)
	defer payments.Close()
	if err := dependency.Call(context.Background(), "/charge", attempt(payments.URL)); err != nil {
		t.Fatal(err)
	}
	if n := server.calls.Load(); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
	if err := reporter.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for sample, want := range map[string]float64{
		`http_client_requests_total{endpoint="/charge",service="payments",status="server_error"}`: 2,
		`http_client_requests_total{endpoint="/charge",service="payments",status="success"}`:      1,
		`http_client_retry_attempts_total{attempt="1",endpoint="/charge",service="payments"}`:     1,
		`http_client_retry_attempts_total{attempt="2",endpoint="/charge",service="payments"}`:     1,
		`http_client_retry_attempts_total{attempt="3",endpoint="/charge",service="payments"}`:     -1,
		`circuit_breaker_state{service="payments"}`:                                               0,
	} {
		if got := metric(t, daemon, sample); got != want {
			t.Errorf("%s is %v, want %v", sample, got, want)
		}
	}

	// Four 500s in a row (the first try and the three retries) open it.
	atomic.StoreInt64(&server.failures, 1000)
	err = dependency.Call(context.Background(), "/charge", attempt(payments.URL))
	var gaveUp *CallError
	if !errors.As(err, &gaveUp) || gaveUp.Reason != Exhausted || gaveUp.Attempts != 4 || gaveUp.Status != 500 {
		t.Fatalf("%v", err)
	}
	if state := dependency.Breaker().State(); state != breaker.Open {
		t.Fatalf("the breaker is %s", state)
	}
	before := server.calls.Load()
	err = dependency.Call(context.Background(), "/charge", attempt(payments.URL))
	var refused *breaker.NotPermitted
	if !errors.As(err, &gaveUp) || gaveUp.Reason != CircuitOpen || gaveUp.Attempts != 0 || !errors.As(err, &refused) || refused.State != breaker.Open {
		t.Fatalf("%v", err)
	}
	if server.calls.Load() != before {
		t.Fatal("an open breaker let a call through")
	}
	if err := reporter.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, daemon, `circuit_breaker_state{service="payments"}`); got != 2 {
		t.Errorf("the daemon sees the breaker as %v", got)
	}
	if got := metric(t, daemon, `http_client_requests_total{endpoint="/charge",service="payments",status="server_error"}`); got != 6 {
		t.Errorf("server errors: %v", got)
	}

	// A policy without a breaker rebuilds the dependency's guard.
	if err := os.WriteFile(file, []byte(fmt.Sprintf(policyText, false)), 0o600); err != nil {
		t.Fatal(err)
	}
	if !eventually(func() bool { return dependency.Breaker() == nil }) {
		t.Fatal("the new policy never took the breaker away")
	}
	atomic.StoreInt64(&server.failures, 0)
	if err := dependency.Call(context.Background(), "/charge", attempt(payments.URL)); err != nil {
		t.Fatal(err)
	}
}

// TestAPolicyUpdateOfTheBreakerBlockRetunesTheBreakerAndAnOpenOneStaysOpen:
// four 500s open the breaker; the daemon then serves an edit of its
// failureRateThreshold and a shorter openTimeout, and the dependency keeps
// the same breaker, still open, refusing calls for what is left of the new
// timeout counted from when it opened, on its own clock; a breaker turned
// off and on again is a new one, closed.
func TestAPolicyUpdateOfTheBreakerBlockRetunesTheBreakerAndAnOpenOneStaysOpen(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	write := func(text string) {
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	opened := fmt.Sprintf(policyText, true)
	write(opened)
	dependency := watchedPayments(t, file)
	server := &flaky{failures: 1000}
	payments := httptest.NewServer(server)
	defer payments.Close()
	_ = dependency.Call(context.Background(), "/charge", attempt(payments.URL))
	b := dependency.Breaker()
	if b == nil || b.State() != breaker.Open {
		t.Fatal("four 500s in a row left the breaker closed")
	}
	// Long enough after the open that a clock restarted by the update
	// would show in the time left.
	time.Sleep(300 * time.Millisecond)

	write(strings.Replace(opened, "openTimeout: 60s}", "failureRateThreshold: 0.9, openTimeout: 30s}", 1))
	if !eventually(func() bool { return dependency.Breaker().Policy().OpenTimeout == 30*time.Second }) {
		t.Fatal("the update never reached the breaker")
	}
	if dependency.Breaker() != b || b.State() != breaker.Open || b.Policy().FailureRateThreshold != 0.9 {
		t.Fatalf("an update of the breaker's block replaced it or closed it: %s", dependency.Breaker().State())
	}
	before := server.calls.Load()
	err := dependency.Call(context.Background(), "/charge", attempt(payments.URL))
	var refused *breaker.NotPermitted
	if !errors.As(err, &refused) || refused.State != breaker.Open || refused.RetryIn > 30*time.Second-300*time.Millisecond {
		t.Fatalf("%v, want refused for what is left of 30 s since it opened", err)
	}
	if server.calls.Load() != before {
		t.Fatal("the retuned breaker let a call through")
	}

	write(fmt.Sprintf(policyText, false))
	if !eventually(func() bool { return dependency.Breaker() == nil }) {
		t.Fatal("the update never took the breaker away")
	}
	write(opened)
	if !eventually(func() bool { return dependency.Breaker() != nil }) {
		t.Fatal("the update never brought a breaker back")
	}
	if dependency.Breaker() == b || dependency.Breaker().State() != breaker.Closed {
		t.Fatal("a breaker turned off and on again should be a new one, closed")
	}
}

// TestFailuresWithoutAStatusAreNamedAsRetryOnNamesThem covers the three
// names and the per-try timeout.
func TestFailuresWithoutAStatusAreNamedAsRetryOnNamesThem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	<-ctx.Done()
	if Failure(ctx.Err()) != "timeout" {
		t.Fatal(ctx.Err())
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	address := l.Addr().String()
	l.Close()
	_, err := http.Get("http://" + address)
	if Failure(err) != "connect-failure" {
		t.Fatalf("%v: %s", err, Failure(err))
	}
	if Failure(errors.New("connection reset by peer")) != "reset" {
		t.Fatal("reset")
	}
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer slow.Close()
	request, _ := http.NewRequest(http.MethodGet, slow.URL, nil)
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = http.DefaultClient.Do(request.WithContext(ctx))
	if Failure(err) != "timeout" {
		t.Fatalf("%v: %s", err, Failure(err))
	}
}

// policyFeed is a daemon of the test's own serving payments the last
// policy the test gave it, each under an ETag of its own, even one the
// real daemon, which checks its policies, would never serve.
type policyFeed struct {
	mu      sync.Mutex
	version int
	body    []byte
}

func (f *policyFeed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	etag, body := fmt.Sprintf(`"v%d"`, f.version), f.body
	f.mu.Unlock()
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("ETag", etag)
	_, _ = w.Write(body)
}

// set makes the built-in default policy with changes set over its keys the
// next version served; its ETag.
func (f *policyFeed) set(t *testing.T, changes map[string]any) string {
	t.Helper()
	p := policy.Default()
	for k, v := range changes {
		p[k] = v
	}
	body, err := json.Marshal(map[string]any{"services": map[string]any{"payments": map[string]any{"policy": p}}})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.version++
	f.body = body
	return fmt.Sprintf(`"v%d"`, f.version)
}

// next serves the next version (see set) and waits until watch holds it;
// its ETag.
func (f *policyFeed) next(t *testing.T, watch *policy.Watch, changes map[string]any) string {
	t.Helper()
	etag := f.set(t, changes)
	if !eventually(func() bool { return watch.ETag() == etag }) {
		t.Fatalf("the watch never took up %s", etag)
	}
	return etag
}

// logBook is a log of the test's own, read while the watch may write it.
type logBook struct {
	mu   sync.Mutex
	text strings.Builder
}

func (l *logBook) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text.Write(p)
}

func (l *logBook) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.text.String()
}

// feedPolicies starts a policyFeed serving first, and a watch of payments
// there, quick to follow a new version, logging to a log of the test's.
func feedPolicies(t *testing.T, first map[string]any) (*policyFeed, *policy.Watch, *logBook) {
	t.Helper()
	feed := &policyFeed{}
	feed.set(t, first)
	daemon := httptest.NewServer(feed)
	t.Cleanup(daemon.Close)
	book := &logBook{}
	watch, err := policy.Start(context.Background(), policy.Config{Daemon: daemon.URL, Services: []string{"payments"}, WatchWait: time.Second, MinPollInterval: 10 * time.Millisecond, Logger: log.New(book, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(watch.Stop)
	if watch.Source() != policy.FromDaemon {
		t.Fatalf("the policies came from %v, not the daemon", watch.Source())
	}
	return feed, watch, book
}

// with is base with changes set over its keys.
func with(base, changes map[string]any) map[string]any {
	merged := map[string]any{}
	for k, v := range base {
		merged[k] = v
	}
	for k, v := range changes {
		merged[k] = v
	}
	return merged
}

// refusal is what a dependency of payments logs when it refuses the
// policy at etag for what says.
func refusal(etag, says string) string {
	return fmt.Sprintf("stormguard: the new policy of payments (version %s) cannot be used (%s); keeping the last\n", etag, says)
}

// TestAPolicyWithABadBreakerBlockKeepsTheLastGoodBreakerOpen: two 500s
// open the breaker; the daemon then serves a breaker block out of range,
// one that is not an object, one with a key of the wrong type: each is
// refused, logged once naming what is wrong, and the same breaker stays,
// open, under its settings, refusing calls without sending them. The next
// good policy retunes it, still open.
func TestAPolicyWithABadBreakerBlockKeepsTheLastGoodBreakerOpen(t *testing.T) {
	breakerBlock := func(openTimeoutMs float64) map[string]any {
		return map[string]any{"enabled": true, "consecutiveFailures": 2.0, "openTimeoutMs": openTimeoutMs}
	}
	good := map[string]any{"maxRetries": 0.0, "circuitBreaker": breakerBlock(60_000)}
	feed, watch, book := feedPolicies(t, good)
	dependency := New(watch, "payments", nil)
	server := &flaky{failures: 1000}
	payments := httptest.NewServer(server)
	defer payments.Close()
	for i := 0; i < 2; i++ {
		_ = dependency.Call(context.Background(), "/charge", attempt(payments.URL))
	}
	b := dependency.Breaker()
	if b == nil || b.State() != breaker.Open {
		t.Fatal("two 500s in a row left the breaker closed")
	}
	settings := b.Policy()

	for _, bad := range []struct {
		block any
		says  string
	}{
		{breakerBlock(7_200_000), "circuitBreaker.openTimeout must be between 1ms and 1h0m0s, found 2h0m0s"},
		{5.0, "circuitBreaker must be an object, found 5"},
		{map[string]any{"enabled": true, "minimumCalls": "many"}, "circuitBreaker.minimumCalls must be a number, found many"},
	} {
		etag := feed.next(t, watch, with(good, map[string]any{"circuitBreaker": bad.block}))
		for i := 0; i < 3; i++ {
			before := server.calls.Load()
			err := dependency.Call(context.Background(), "/charge", attempt(payments.URL))
			var gaveUp *CallError
			if !errors.As(err, &gaveUp) || gaveUp.Reason != CircuitOpen || server.calls.Load() != before {
				t.Fatalf("%v: %v, %d sent: the breaker no longer refuses", bad.block, err, server.calls.Load()-before)
			}
		}
		if dependency.Breaker() != b || b.State() != breaker.Open || b.Policy() != settings {
			t.Fatalf("%v: the breaker was replaced, closed or retuned", bad.block)
		}
		if logged := book.String(); strings.Count(logged, refusal(etag, bad.says)) != 1 {
			t.Fatalf("%v: want the refusal logged once, got %q", bad.block, logged)
		}
	}

	feed.next(t, watch, with(good, map[string]any{"circuitBreaker": breakerBlock(30_000)}))
	if dependency.Breaker() != b || b.State() != breaker.Open || b.Policy().OpenTimeout != 30*time.Second {
		t.Fatalf("the next good policy did not retune the breaker in place: %+v", b.Policy())
	}
	if logged := book.String(); strings.Count(logged, "cannot be used") != 3 {
		t.Fatalf("a good policy was refused: %q", logged)
	}
}

// TestAValidPolicyAfterARefusedOneIsTakenUpInFull: policies with a budget
// that is not an object, or out of range, or a maxRetries or retryOn that
// cannot be used, are refused whole: the budget stays, and so do the
// retries, though each asks for more. The next good policy, compared with
// the last one taken up, is taken up in full: a new budget and its retries.
func TestAValidPolicyAfterARefusedOneIsTakenUpInFull(t *testing.T) {
	budgetBlock := func(perSecond float64, scope string) map[string]any {
		return map[string]any{"enabled": true, "retryRatio": 0.2, "minRetriesPerSecond": perSecond, "ttlMs": 10_000.0, "scope": scope}
	}
	good := map[string]any{"maxRetries": 1.0, "initialDelayMs": 1.0, "maxDelayMs": 5.0, "jitter": "none", "budget": budgetBlock(30, "process")}
	feed, watch, book := feedPolicies(t, good)
	dependency := New(watch, "payments", nil)
	server := &flaky{failures: 1000}
	payments := httptest.NewServer(server)
	defer payments.Close()
	attempts := func() int64 {
		before := server.calls.Load()
		_ = dependency.Call(context.Background(), "/charge", attempt(payments.URL))
		return server.calls.Load() - before
	}
	if n := attempts(); n != 2 {
		t.Fatalf("%d attempts, want 2", n)
	}
	b := dependency.Budget()
	if floor, fleet := b.FleetFloor(); floor != 30 || fleet {
		t.Fatalf("the budget's floor is %v (fleet %v)", floor, fleet)
	}

	for _, bad := range []struct {
		changes map[string]any
		says    string
	}{
		{map[string]any{"maxRetries": 3.0, "budget": "plenty"}, `budget must be an object, found "plenty"`},
		{map[string]any{"maxRetries": 3.0, "budget": map[string]any{"enabled": true, "retryRatio": -1.0}}, "budget.retryRatio must be between 0 and 1000, found -1"},
		{map[string]any{"maxRetries": 101.0}, "maxRetries must be between 0 and 100, found 101"},
		{map[string]any{"maxRetries": 3.0, "retryOn": []any{"5xxx"}}, `retryOn[0]: unknown retry condition "5xxx"; expected one of: connect-failure, timeout, reset, 5xx, gateway-error`},
	} {
		etag := feed.next(t, watch, with(good, bad.changes))
		for i := 0; i < 2; i++ {
			if n := attempts(); n != 2 {
				t.Fatalf("%v: %d attempts, want the last good policy's 2", bad.changes, n)
			}
		}
		if dependency.Budget() != b {
			t.Fatalf("%v: the budget was replaced", bad.changes)
		}
		if logged := book.String(); strings.Count(logged, refusal(etag, bad.says)) != 1 {
			t.Fatalf("%v: want the refusal logged once, got %q", bad.changes, logged)
		}
	}

	feed.next(t, watch, with(good, map[string]any{"maxRetries": 2.0, "budget": budgetBlock(50, "fleet")}))
	if n := attempts(); n != 3 {
		t.Fatalf("%d attempts, want the new policy's 3", n)
	}
	next := dependency.Budget()
	if floor, fleet := next.FleetFloor(); next == b || floor != 50 || !fleet {
		t.Fatalf("the new budget block was not taken up: floor %v, fleet %v", floor, fleet)
	}
	if logged := book.String(); strings.Count(logged, "cannot be used") != 4 {
		t.Fatalf("a good policy was refused: %q", logged)
	}
}

// TestABadGateBlockKeepsTheLastGate: a 503 turns the gate on; gate blocks
// out of range, not an object, or with an overloadWhen that is none, are
// refused and logged once each, and the same gate stays on, its settings
// unchanged.
func TestABadGateBlockKeepsTheLastGate(t *testing.T) {
	gateBlock := map[string]any{"enabled": true, "minRate": 0.001, "maxRate": 10.0, "quietMs": 3_600_000.0, "overloadWhen": "any-refusal"}
	good := map[string]any{"maxRetries": 0.0, "budget": map[string]any{"enabled": false}, "gate": gateBlock}
	feed, watch, book := feedPolicies(t, good)
	dependency := New(watch, "payments", nil)
	payments := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer payments.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_ = dependency.Call(ctx, "/charge", attempt(payments.URL))
	g := dependency.Gate()
	if g == nil || !g.On() {
		t.Fatal("a 503 left the gate off")
	}
	settings := g.Settings()

	for _, bad := range []struct {
		block any
		says  string
	}{
		{with(gateBlock, map[string]any{"minRate": 0.0}), "gate.minRate must be above 0 and at most 1000, found 0"},
		{"on", `gate must be an object, found "on"`},
		{with(gateBlock, map[string]any{"overloadWhen": "sometimes"}), `gate.overloadWhen: unknown overloadWhen value "sometimes"; expected one of: evidence, any-refusal, most-refused`},
	} {
		etag := feed.next(t, watch, with(good, map[string]any{"gate": bad.block}))
		for i := 0; i < 3; i++ {
			if dependency.Gate() != g || !g.On() || g.Settings() != settings {
				t.Fatalf("%v: the gate was dropped, replaced, turned off or retuned", bad.block)
			}
		}
		if logged := book.String(); strings.Count(logged, refusal(etag, bad.says)) != 1 {
			t.Fatalf("%v: want the refusal logged once, got %q", bad.block, logged)
		}
	}
}

// TestAPolicyRefusedFromTheStartLeavesTheBuiltInDefaults: a first policy
// whose budget cannot be used is logged, and the built-in default policy
// serves, with its budget, until a good one comes.
func TestAPolicyRefusedFromTheStartLeavesTheBuiltInDefaults(t *testing.T) {
	feed, watch, book := feedPolicies(t, map[string]any{"budget": map[string]any{"enabled": true, "ttlMs": 0.0}})
	dependency := New(watch, "payments", nil)
	b := dependency.Budget()
	if b == nil {
		t.Fatal("no budget: the refused policy's budget was dropped, not the defaults'")
	}
	if floor, _ := b.FleetFloor(); floor != 10 {
		t.Fatalf("the budget's floor is %v, not the default's", floor)
	}
	want := `stormguard: the policy of payments (version "v1") cannot be used (budget.ttl must be between 1s and 1m0s, found 0s); using the defaults` + "\n"
	_ = dependency.Breaker()
	if logged := book.String(); logged != want {
		t.Fatalf("logged %q, want %q", logged, want)
	}
	feed.next(t, watch, map[string]any{"budget": map[string]any{"enabled": true, "minRetriesPerSecond": 20.0}})
	if floor, _ := dependency.Budget().FleetFloor(); floor != 20 {
		t.Fatalf("the good policy's budget was not taken up: floor %v", floor)
	}
}
