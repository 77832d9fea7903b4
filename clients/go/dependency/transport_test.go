// Tests of the guarded http.RoundTripper: bodies sent again, per-try
// timeouts, deadlines, Retry-After.

package dependency

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormguard/stormguard/clients/go/internal/daemontest"
	"github.com/stormguard/stormguard/clients/go/policy"
)

const transportPolicy = `defaults:
  maxRetries: 3
services:
  payments:
    maxRetries: 2
    initialDelay: 1ms
    maxDelay: 5ms
    jitter: none
    perTryTimeout: 100ms
    retryOn: [5xx, timeout, connect-failure]
`

// guarded is a client guarded by a dependency under transportPolicy, served
// by the real daemon.
func guarded(t *testing.T) *http.Client {
	t.Helper()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(transportPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	at := daemontest.Reserve(t)
	daemontest.Serve(t, at, file)
	watch, err := policy.Start(context.Background(), policy.Config{Daemon: at.URL(), Services: []string{"payments"}})
	if err != nil || watch.Source() != policy.FromDaemon {
		t.Fatalf("%v %v", err, watch.Source())
	}
	t.Cleanup(watch.Stop)
	return &http.Client{Transport: New(watch, "payments", nil).Transport(nil)}
}

func TestABodyIsSentAgainWithEveryRetryAndTheLastAnswerIsReturnedWhole(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(body))
		n := len(bodies)
		mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "still down (%d)", n)
	}))
	defer server.Close()
	client := guarded(t)
	// A reader without GetBody: read once, sent three times.
	request, _ := http.NewRequest(http.MethodPost, server.URL+"/charge", io.NopCloser(strings.NewReader("order 7")))
	response, err := client.Do(request)
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	body, _ := io.ReadAll(response.Body)
	if response.StatusCode != http.StatusServiceUnavailable || string(body) != "still down (3)" {
		t.Fatalf("%d %q: the last attempt's answer, whole", response.StatusCode, body)
	}
	if strings.Join(bodies, "|") != "order 7|order 7|order 7" {
		t.Fatalf("bodies sent: %q", bodies)
	}
}

func TestThePerTryTimeoutBoundsTheWaitForHeadersNotTheBody(t *testing.T) {
	var calls atomic.Int64
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if calls.Add(1) == 1 {
			time.Sleep(300 * time.Millisecond) // past the 100 ms per-try timeout
		}
		w.(http.Flusher).Flush()
		time.Sleep(200 * time.Millisecond) // the body comes after the per-try timeout
		fmt.Fprint(w, "late but whole")
	}))
	defer server.Close()
	response, err := guarded(t).Get(server.URL + "/slow")
	if err != nil {
		t.Fatal(err)
	}
	defer response.Body.Close()
	body, err := io.ReadAll(response.Body)
	if err != nil || string(body) != "late but whole" || calls.Load() != 2 {
		t.Fatalf("%q %v after %d attempts", body, err, calls.Load())
	}
}

func TestTheRequestsDeadlineEndsTheCallAndACallWithoutAnAnswerIsItsError(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(time.Second)
	}))
	defer server.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	request, _ := http.NewRequestWithContext(ctx, http.MethodGet, server.URL+"/hang", nil)
	_, err := guarded(t).Do(request)
	var call *CallError
	if !errors.As(err, &call) || call.Reason != Cancelled {
		t.Fatalf("%v: want the call's error, cancelled by the request's deadline", err)
	}
	if call.Attempts < 2 {
		t.Fatalf("%d attempts: the per-try timeout should have retried within the deadline", call.Attempts)
	}
}

// closeCounter counts the closes of a request body.
type closeCounter struct {
	io.Reader
	closed atomic.Int64
}

func (c *closeCounter) Close() error {
	c.closed.Add(1)
	return nil
}

func TestTheRequestsOwnBodyIsClosedAsARoundTripperMust(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer server.Close()
	client := guarded(t)
	for _, replayable := range []bool{true, false} {
		body := &closeCounter{Reader: strings.NewReader("order 7")}
		request, _ := http.NewRequest(http.MethodPost, server.URL+"/charge", body)
		if replayable {
			request.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("order 7")), nil }
		}
		response, err := client.Do(request)
		if err != nil {
			t.Fatal(err)
		}
		response.Body.Close()
		if body.closed.Load() == 0 {
			t.Fatalf("with GetBody %v: the body given was never closed", replayable)
		}
	}
}

// TestARetryWaitsWhatRetryAfterAskedUpToTheMaxDelay: as the Rust library
// waits, the backoff's 1 ms is lengthened to the answer's Retry-After, and
// a Retry-After past maxDelay waits maxDelay.
func TestARetryWaitsWhatRetryAfterAskedUpToTheMaxDelay(t *testing.T) {
	const asked = `services:
  payments:
    maxRetries: 1
    initialDelay: 1ms
    maxDelay: 1500ms
    jitter: none
    retryOn: [5xx]
    budget: {enabled: false}
    circuitBreaker: {enabled: false}
`
	client := &http.Client{Transport: New(watchServed(t, asked, "payments"), "payments", nil).Transport(nil)}
	for _, c := range []struct {
		retryAfter    string
		least, atMost time.Duration
	}{
		{"1", 900 * time.Millisecond, 30 * time.Second},
		{"3600", 1400 * time.Millisecond, 30 * time.Second},
	} {
		var mu sync.Mutex
		var arrived []time.Time
		server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			mu.Lock()
			arrived = append(arrived, time.Now())
			first := len(arrived) == 1
			mu.Unlock()
			if first {
				w.Header().Set("Retry-After", c.retryAfter)
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}))
		response, err := client.Get(server.URL + "/charge")
		server.Close()
		if err != nil || response.StatusCode != http.StatusOK {
			t.Fatalf("Retry-After %s: %v %v", c.retryAfter, response, err)
		}
		response.Body.Close()
		if gap := arrived[1].Sub(arrived[0]); gap < c.least || gap > c.atMost {
			t.Fatalf("Retry-After %s: the retry came %v after the first try", c.retryAfter, gap)
		}
	}
}
