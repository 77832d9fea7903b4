// What the conformance scenarios share: the policy files, the daemon helpers
// and the fault proxy.

package conformance

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stormguard/stormguard/clients/go/internal/daemontest"
)

// address is a loopback address a test holds (see daemontest.Address).
type address = daemontest.Address

// The daemon helpers, shared with the other packages' tests.
var (
	reserve    = daemontest.Reserve
	serve      = daemontest.Serve
	eventually = daemontest.Eventually
	metric     = daemontest.Metric
	metricVia  = daemontest.MetricVia
)

// policyText is the scenarios' policy file: defaults {maxRetries: 3},
// payments at maxRetries %d.
const policyText = "defaults:\n  maxRetries: 3\nservices:\n  payments:\n    maxRetries: %d\n"

// writePolicy writes the scenarios' policy file with payments at retries.
func writePolicy(t *testing.T, file string, retries int) {
	t.Helper()
	if err := os.WriteFile(file, []byte(fmt.Sprintf(policyText, retries)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// policyFile is a new policy file with payments at retries.
func policyFile(t *testing.T, retries int) string {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writePolicy(t, file, retries)
	return file
}

// requests is the sample http_client_requests_total for payments' endpoint
// with status.
func requests(endpoint, status string) string {
	return fmt.Sprintf(`http_client_requests_total{endpoint=%q,service="payments",status=%q}`, endpoint, status)
}

// proxy is the fault proxy: a loopback HTTP proxy in front of the daemon
// that forwards everything but the faults it is set to.
type proxy struct {
	target string
	URL    string

	mu sync.Mutex
	// corrupt answers policy requests with 200 and a body that is not JSON.
	corrupt bool
	// corrupted counts the policy answers corrupted.
	corrupted int
	// losePolicies is the number of policy answers still to lose: the
	// request is forwarded, then its connection closed unanswered.
	losePolicies int
	// lostPolicies counts the policy answers lost.
	lostPolicies int
	// policyQueries are the queries of the policy requests, in order.
	policyQueries []string
	// loseBatch is the number (from 1) of the report batch whose answer is lost.
	loseBatch int
	// batches are the bodies of the report batches, in order.
	batches []string
	// grantOnce, when set, is the grant the proxy answers the first pace
	// ask with itself (200); it answers every later one 503. Nothing
	// reaches the daemon.
	grantOnce string
	// grantsGiven counts the pace asks it answered with grantOnce.
	grantsGiven int
	// floorOnce, when set, is the answer the proxy gives the first report
	// batch itself (202); it answers every later one 503. Nothing reaches
	// the daemon.
	floorOnce string
}

// newProxy starts a fault proxy in front of daemon, closed with the test.
func newProxy(t *testing.T, daemon string) *proxy {
	p := &proxy{target: daemon}
	server := httptest.NewServer(p)
	t.Cleanup(server.Close)
	p.URL = server.URL
	return p
}

func (p *proxy) set(change func(p *proxy)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	change(p)
}

func (p *proxy) read(look func(p *proxy) int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return look(p)
}

func (p *proxy) batchBodies() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.batches...)
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	isPolicy := r.URL.Path == "/v1/policies"
	isBatch := r.Method == http.MethodPost && r.URL.Path == "/v1/reports"
	p.mu.Lock()
	number := 0
	if isPolicy {
		p.policyQueries = append(p.policyQueries, r.URL.RawQuery)
	}
	if isBatch {
		p.batches = append(p.batches, string(body))
		number = len(p.batches)
	}
	p.mu.Unlock()
	if isPolicy && p.corruptOne() {
		_, _ = w.Write([]byte("this is not JSON {"))
		return
	}
	if r.Method == http.MethodPost && r.URL.Path == "/v1/pace" && p.pace(w) {
		return
	}
	if isBatch && p.floor(w, number) {
		return
	}
	forward, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	forward.Header = r.Header.Clone()
	answer, err := http.DefaultTransport.RoundTrip(forward)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer answer.Body.Close()
	answerBody, _ := io.ReadAll(answer.Body)
	if isPolicy && p.corruptOne() { // it went bad while the long-poll waited
		_, _ = w.Write([]byte("this is not JSON {"))
		return
	}
	p.mu.Lock()
	lose := isPolicy && p.losePolicies > 0 || isBatch && number == p.loseBatch
	if isPolicy && lose {
		p.losePolicies--
		p.lostPolicies++
	}
	p.mu.Unlock()
	if lose {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	for key, values := range answer.Header {
		w.Header()[key] = values
	}
	w.WriteHeader(answer.StatusCode)
	_, _ = w.Write(answerBody)
}

// pace answers a pace ask itself if the proxy grants once: whether it did.
func (p *proxy) pace(w http.ResponseWriter) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.grantOnce == "":
		return false
	case p.grantsGiven == 0:
		p.grantsGiven++
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(p.grantOnce))
	default:
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	return true
}

// floor answers report batch number itself if the proxy answers with
// floorOnce: whether it did.
func (p *proxy) floor(w http.ResponseWriter, number int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.floorOnce == "":
		return false
	case number == 1:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(p.floorOnce))
	default:
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	return true
}

func (p *proxy) corruptOne() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.corrupt {
		p.corrupted++
	}
	return p.corrupt
}
