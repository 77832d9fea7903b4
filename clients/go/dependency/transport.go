// Transport, an http.RoundTripper that runs each request as one guarded
// call: its body replayed for retries, Retry-After read from answers.

package dependency

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// drainLimit is how much of a retried attempt's body is read before it is
// closed, so that its connection can carry the next attempt.
const drainLimit = 64 << 10

// Transport guards every request sent through next (http.DefaultTransport
// when nil) with d, so that an *http.Client calls the dependency under its
// policy in one line:
//
//	client := &http.Client{Transport: payments.Transport(nil)}
//
// Each request is one call: attempts, retries, backoff, budget, breaker and
// send gate as Call runs them, reported under the request's URL path as the
// endpoint; a retried answer with a Retry-After tells the send gate the
// dependency is overloaded, whatever its status. The request's context
// bounds it all: its deadline ends retries and a wait in the gate's line
// (NoTurn). The class it names (WithCriticality), else the policy's
// gate.criticality, orders the request in the gate's line and bounds that
// wait by the class's gate.maxWait: a request whose turn would come too
// late is shed at once (Shed). The answer is the last attempt's response,
// whatever its status, as a plain transport gives it: a 503 that was
// retried until the policy stopped is returned as the 503. A call that got
// no response (the breaker refused it, the gate shed it or had no turn, no
// attempt was answered, or the request's context ended first) returns the
// *CallError. A body without GetBody is read into
// memory once so that it can be sent again; a retried attempt's response
// is drained and closed before the next.
func (d *Dependency) Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &transport{dependency: d, next: next}
}

type transport struct {
	dependency *Dependency
	next       http.RoundTripper
}

func (t *transport) RoundTrip(request *http.Request) (*http.Response, error) {
	body, err := replayable(request)
	if err != nil {
		return nil, err
	}
	var last *http.Response
	callErr := t.dependency.call(request.Context(), request.URL.Path, func(attemptCtx context.Context) (answer, error) {
		if last != nil {
			discard(last)
			last = nil
		}
		response, err := t.attempt(request, body, attemptCtx)
		if err != nil {
			return answer{}, err
		}
		last = response
		after, asked := parseRetryAfter(response.Header.Get("Retry-After"), time.Now())
		return answer{status: response.StatusCode, retryAfter: asked, after: after}, nil
	})
	if last != nil && request.Context().Err() == nil {
		return last, nil
	}
	if last != nil {
		// The caller gave up while a retry waited: its body could not be read.
		discard(last)
	}
	return nil, callErr
}

// attempt sends one attempt. The per-try timeout (attemptCtx's deadline)
// bounds the wait for the response's headers only: the body is read after
// RoundTrip returns, under the request's own context.
func (t *transport) attempt(request *http.Request, body func() (io.ReadCloser, error), attemptCtx context.Context) (*http.Response, error) {
	ctx, cancel := context.WithCancel(request.Context())
	attempt := request.Clone(ctx)
	if body != nil {
		b, err := body()
		if err != nil {
			cancel()
			return nil, err
		}
		attempt.Body = b
	}
	var mu sync.Mutex
	answered := false
	stop := make(chan struct{})
	go func() {
		select {
		case <-attemptCtx.Done():
			mu.Lock()
			if !answered {
				cancel()
			}
			mu.Unlock()
		case <-stop:
		}
	}()
	response, err := t.next.RoundTrip(attempt)
	mu.Lock()
	answered = err == nil
	mu.Unlock()
	close(stop)
	if err != nil {
		cancel()
		if errors.Is(attemptCtx.Err(), context.DeadlineExceeded) {
			return nil, context.DeadlineExceeded
		}
		return nil, err
	}
	response.Body = &cancelOnClose{ReadCloser: response.Body, cancel: cancel}
	return response, nil
}

// parseRetryAfter is the wait a Retry-After value asks for at now, and
// whether it can be read, as the Rust library's parse_retry_after reads it:
// delay-seconds, or an HTTP date (one in the past asks for no wait).
func parseRetryAfter(value string, now time.Time) (time.Duration, bool) {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0, false
	}
	// Rust's u64 parsing takes one leading '+'.
	if seconds, err := strconv.ParseUint(strings.TrimPrefix(value, "+"), 10, 64); err == nil {
		if seconds > uint64(math.MaxInt64/int64(time.Second)) {
			return time.Duration(math.MaxInt64), true
		}
		return time.Duration(seconds) * time.Second, true
	}
	at, err := http.ParseTime(value)
	if err != nil {
		return 0, false
	}
	if wait := at.Sub(now); wait > 0 {
		return wait, true
	}
	return 0, true
}

// replayable is how to get the request's body for each attempt: nil when
// it has none, its GetBody when it has one, else the body read into memory.
func replayable(request *http.Request) (func() (io.ReadCloser, error), error) {
	switch {
	case request.Body == nil || request.Body == http.NoBody:
		return nil, nil
	case request.GetBody != nil:
		// Each attempt takes a fresh copy; the body given is closed, as a
		// RoundTripper must.
		request.Body.Close()
		return request.GetBody, nil
	}
	data, err := io.ReadAll(request.Body)
	request.Body.Close()
	if err != nil {
		return nil, err
	}
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, nil
}

// discard drains a little of a retried attempt's body and closes it.
func discard(response *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(response.Body, drainLimit))
	response.Body.Close()
}

// cancelOnClose ends an attempt's context once its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
