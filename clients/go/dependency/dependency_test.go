// Tests of a dependency's calls against the real daemon's policy: retries
// reported, the breaker following the policy, failures named.

package dependency

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
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

// flaky answers 503 to its first failures calls, then 200.
type flaky struct {
	failures int64
	calls    atomic.Int64
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if f.calls.Add(1) <= atomic.LoadInt64(&f.failures) {
		w.WriteHeader(http.StatusServiceUnavailable)
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

	// Four 503s in a row (the first try and the three retries) open it.
	atomic.StoreInt64(&server.failures, 1000)
	err = dependency.Call(context.Background(), "/charge", attempt(payments.URL))
	var gaveUp *CallError
	if !errors.As(err, &gaveUp) || gaveUp.Reason != Exhausted || gaveUp.Attempts != 4 || gaveUp.Status != 503 {
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
// four 503s open the breaker; the daemon then serves an edit of its
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
	watch, err := policy.Start(context.Background(), policy.Config{Daemon: serve(t, file), Services: []string{"payments"}, WatchWait: 5 * time.Second, MinPollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	dependency := New(watch, "payments", nil)
	server := &flaky{failures: 1000}
	payments := httptest.NewServer(server)
	defer payments.Close()
	_ = dependency.Call(context.Background(), "/charge", attempt(payments.URL))
	b := dependency.Breaker()
	if b == nil || b.State() != breaker.Open {
		t.Fatal("four 503s in a row left the breaker closed")
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
	err = dependency.Call(context.Background(), "/charge", attempt(payments.URL))
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
