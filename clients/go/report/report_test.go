// Tests of the reporter's batches: caps on endpoints and services, names
// refused where they enter, numbering.

package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stormguard/stormguard/clients/go/breaker"
	"github.com/stormguard/stormguard/clients/go/budget"
	"github.com/stormguard/stormguard/clients/go/connect"
)

func reporter(t *testing.T, daemon string, maxEndpoints, maxServices int) *Reporter {
	return started(t, Config{Daemon: daemon, Instance: "pod", Interval: time.Hour, MaxEndpoints: maxEndpoints, MaxServices: maxServices})
}

// started is a reporter with config, stopped with the test.
func started(t *testing.T, config Config) *Reporter {
	t.Helper()
	r, err := Start(config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		_ = r.Stop(ctx)
	})
	return r
}

// taken is the batch take builds, as the daemon would read it.
func taken(t *testing.T, r *Reporter) map[string]any {
	b := r.take()
	if b == nil {
		t.Fatal("nothing to report")
	}
	var out map[string]any
	if err := json.Unmarshal(b.body, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func reports(batch map[string]any) []map[string]any {
	var out []map[string]any
	for _, r := range batch["reports"].([]any) {
		out = append(out, r.(map[string]any))
	}
	return out
}

func endpoint(report map[string]any, name string) map[string]any {
	for _, e := range report["endpoints"].([]any) {
		if e := e.(map[string]any); e["endpoint"] == name {
			return e
		}
	}
	return nil
}

func TestEndpointsPastTheCapCountAsOtherAndServicesPastTheirsAreNotKept(t *testing.T) {
	r := reporter(t, "http://127.0.0.1:9", 2, 1)
	for _, e := range []string{"/a", "/b", "/c", "/d", "", strings.Repeat("x", 257)} {
		r.Record("svc", e, 0, Success)
	}
	r.Record("svc", "/a", 2, Error)
	r.Record("another", "/a", 0, Success)
	batch := reports(taken(t, r))
	if len(batch) != 1 {
		t.Fatalf("the second dependency is over the cap: %v", batch)
	}
	other := endpoint(batch[0], "other")
	if other["requests"].(map[string]any)["success"] != 4.0 {
		t.Fatalf("two past the cap, one empty name and one too long: %v", other)
	}
	a := endpoint(batch[0], "/a")
	if a["requests"].(map[string]any)["error"] != 1.0 || a["retries"].(map[string]any)["2"] != 1.0 {
		t.Fatalf("%v", a)
	}
}

func TestANameTheDaemonWouldRefuseIsRefusedWhereItEnters(t *testing.T) {
	for want, config := range map[string]Config{
		`instance "": must be 1 to 253 characters (the pod name), found 0`:                                                                                                 {Daemon: "http://x"},
		`instance "` + strings.Repeat("x", 300) + `": must be 1 to 253 characters (the pod name), found 300`:                                                               {Daemon: "http://x", Instance: strings.Repeat("x", 300)},
		`caller "Checkout": service name "Checkout" may contain only lowercase letters, digits and '-' (service names are DNS-1123 labels, like Kubernetes Service names)`: {Daemon: "http://x", Instance: "pod", Caller: "Checkout"},
		`daemon "stormguard:8080": not an http:// or https:// URL`:                                                                                                         {Daemon: "stormguard:8080", Instance: "pod"},
		`daemon "http://": not an http:// or https:// URL`:                                                                                                                 {Daemon: "http://", Instance: "pod"},
		`interval must be more than zero`:                                                                                                                                  {Daemon: "http://x", Instance: "pod", Interval: -time.Second},
		`maxServices must be more than zero`:                                                                                                                               {Daemon: "http://x", Instance: "pod", MaxServices: -1},
	} {
		if _, err := Start(config); err == nil || err.Error() != want {
			t.Errorf("%v, want %s", err, want)
		}
	}
	r := reporter(t, "http://127.0.0.1:9", 10, 10)
	r.Record("Payment_Service", "/a", 0, Success)
	r.Record("-payments", "/a", 0, Success)
	r.Record("payment-service", "/a", 0, Success)
	batch := reports(taken(t, r))
	if len(batch) != 1 || batch[0]["service"] != "payment-service" {
		t.Fatalf("a bad dependency name does not poison the batch: %v", batch)
	}
}

func TestEachBatchHasTheNextNumberAndTakenMeansGone(t *testing.T) {
	r, err := Start(Config{Daemon: "http://127.0.0.1:9", Instance: "pod", Caller: "checkout", Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer r.stopLoop()
	if r.take() != nil {
		t.Fatal("a batch with no dependency")
	}
	r.Record("svc", "/a", 1, ServerError)
	first, second := taken(t, r), taken(t, r)
	if second["sequence"].(float64) != first["sequence"].(float64)+1 || first["instance"] != "pod" {
		t.Fatalf("%v %v", first, second)
	}
	if r.next>>63 != 0 && first["sequence"].(float64) >= 1<<63 {
		t.Fatal("the top bit is set")
	}
	report := reports(first)[0]
	if report["caller"] != "checkout" || report["instance"] != "pod" || report["service"] != "svc" {
		t.Fatalf("%v", report)
	}
	a := endpoint(report, "/a")
	if a["requests"].(map[string]any)["server_error"] != 1.0 || a["retries"].(map[string]any)["1"] != 1.0 {
		t.Fatalf("%v", a)
	}
	if n := len(reports(second)[0]["endpoints"].([]any)); n != 0 {
		t.Fatalf("%d endpoints after taking", n)
	}
}

func TestInFlightCountsUntilDone(t *testing.T) {
	r := reporter(t, "http://127.0.0.1:9", 10, 10)
	first := r.InFlight("svc")
	_ = r.InFlight("svc")
	first()
	first()
	if n := reports(taken(t, r))[0]["inFlight"]; n != 1.0 {
		t.Fatalf("%v", n)
	}
}

func TestTrackedBreakerAndBudgetAreReported(t *testing.T) {
	r := reporter(t, "http://127.0.0.1:9", 10, 10)
	b, err := breaker.New(breaker.Policy{
		Enabled: true, ConsecutiveFailures: 1, FailureRateThreshold: 1, SlowCallRateThreshold: 1,
		SlowCallDuration: time.Second, MinimumCalls: 1, Window: breaker.SlidingWindow{Calls: 1},
		OpenTimeout: time.Second, HalfOpenMaxCalls: 1, SuccessThreshold: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	bu, _ := budget.New(0, 0, time.Second)
	r.Track("svc", b, time.Time{}, bu, nil, time.Time{})
	permit, _ := b.Acquire(0)
	permit.Record(true, 1)
	bu.TryRetry(0)
	bu.TryRetry(0)
	report := reports(taken(t, r))[0]
	if report["circuitState"] != "open" || report["budget"].(map[string]any)["retriesDenied"] != 2.0 {
		t.Fatalf("%v", report)
	}
	bu.TryRetry(0)
	if denied := reports(taken(t, r))[0]["budget"].(map[string]any)["retriesDenied"]; denied != 1.0 {
		t.Fatalf("denied since the last report: %v", denied)
	}
	bu.TryRetry(0)
	bu.TryRetry(0)
	fresh, _ := budget.New(0, 0, time.Second)
	fresh.TryRetry(0)
	r.Track("svc", b, time.Time{}, fresh, nil, time.Time{})
	if denied := reports(taken(t, r))[0]["budget"].(map[string]any)["retriesDenied"]; denied != 3.0 {
		t.Fatalf("the replaced budget's last 2 denials and the new one's 1: %v", denied)
	}
}

// daemon is a stand-in daemon answering each POST with the next status of
// answers (then 200), keeping every body.
type daemon struct {
	mu      sync.Mutex
	answers []int
	bodies  []string
}

func (d *daemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body bytes.Buffer
	_, _ = body.ReadFrom(r.Body)
	d.mu.Lock()
	d.bodies = append(d.bodies, body.String())
	status := http.StatusOK
	if len(d.answers) > 0 {
		status, d.answers = d.answers[0], d.answers[1:]
	}
	d.mu.Unlock()
	w.WriteHeader(status)
	if status == http.StatusOK {
		_, _ = w.Write([]byte(`{"accepted": 1, "rejected": [{"index": 0, "path": "[0].service", "error": "x"}]}`))
	} else {
		_, _ = w.Write([]byte("too big"))
	}
}

func TestAnUnansweredBatchGoesAgainUnchangedAndARefusedOneIsDropped(t *testing.T) {
	d := &daemon{answers: []int{503, 429, 200, 413}}
	server := httptest.NewServer(d)
	defer server.Close()
	r := reporter(t, server.URL, 10, 10)
	r.Record("svc", "/a", 0, Success)
	var unavailable *UnavailableError
	for i := 0; i < 2; i++ {
		if err := r.Flush(context.Background()); !errors.As(err, &unavailable) {
			t.Fatalf("%v", err)
		}
		r.Record("svc", "/b", 0, Success) // goes to the next batch
	}
	// The first batch is counted; the next, with /b twice, is refused.
	err := r.Flush(context.Background())
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Status != 413 || err.Error() != "the stormguard daemon refused the report (413): too big" {
		t.Fatalf("%v", err)
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.bodies) != 5 || d.bodies[0] != d.bodies[1] || d.bodies[1] != d.bodies[2] || d.bodies[3] == d.bodies[2] {
		t.Fatalf("%q", d.bodies)
	}
	var first, refusedBatch, last wireBatch
	_ = json.Unmarshal([]byte(d.bodies[0]), &first)
	_ = json.Unmarshal([]byte(d.bodies[3]), &refusedBatch)
	_ = json.Unmarshal([]byte(d.bodies[4]), &last)
	if refusedBatch.Sequence != first.Sequence+1 || last.Sequence != first.Sequence+2 || len(refusedBatch.Reports[0].Endpoints) != 1 || len(last.Reports[0].Endpoints) != 0 {
		t.Fatalf("%q", d.bodies)
	}
	want := Stats{BatchesSent: 2, BatchesDropped: 1, ReportsRejected: 2, SendFailures: 2}
	if got := r.Stats(); got != want {
		t.Fatalf("%+v", got)
	}
}

func TestStopKeepsTheBatchThePeriodicSendWasSending(t *testing.T) {
	arrived := make(chan struct{}, 10)
	var mu sync.Mutex
	var bodies []string
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body bytes.Buffer
		_, _ = body.ReadFrom(r.Body)
		mu.Lock()
		bodies = append(bodies, body.String())
		first := len(bodies) == 1
		mu.Unlock()
		arrived <- struct{}{}
		if first { // the periodic send hangs until it is given up
			<-r.Context().Done()
			return
		}
		_, _ = w.Write([]byte(`{"accepted": 1}`))
	}))
	defer server.Close()
	r, err := Start(Config{Daemon: server.URL, Instance: "pod", Interval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.Record("svc", "/a", 0, Success)
	<-arrived
	r.Record("svc", "/b", 0, Success)
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 3 || bodies[0] != bodies[1] || !strings.Contains(bodies[2], `"/b"`) {
		t.Fatalf("%q", bodies)
	}
}

// headers is a stand-in daemon answering each POST with the next status
// of answers (then 200), keeping every body and Authorization header.
type headers struct {
	daemon
	authorizations []string
}

func (h *headers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.authorizations = append(h.authorizations, r.Header.Get("Authorization"))
	h.mu.Unlock()
	h.daemon.ServeHTTP(w, r)
}

func (h *headers) seen() (authorizations, bodies []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.authorizations...), append([]string(nil), h.bodies...)
}

// withToken is a reporter to server.URL sending tokenFile, logging into the returned buffer.
func withToken(t *testing.T, url, tokenFile string) (*Reporter, *bytes.Buffer) {
	var out bytes.Buffer
	r := started(t, Config{Daemon: url, Instance: "pod", Interval: time.Hour, TokenFile: tokenFile, Logger: log.New(&out, "", 0)})
	return r, &out
}

func TestTheTokenFileIsReadAtEachSend(t *testing.T) {
	d := &headers{}
	server := httptest.NewServer(d)
	defer server.Close()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("first-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, _ := withToken(t, server.URL, file)
	for _, token := range []string{"", "rotated-token"} {
		if token != "" {
			// The kubelet replaces the file in place.
			if err := os.WriteFile(file, []byte(token), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		r.Record("svc", "/a", 0, Success)
		if err := r.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := d.seen(); len(got) != 2 || got[0] != "Bearer first-token" || got[1] != "Bearer rotated-token" {
		t.Fatalf("%q", got)
	}
}

func TestWithoutItsTokenFileAReportGoesWithoutATokenAndItIsLoggedOnce(t *testing.T) {
	d := &headers{}
	server := httptest.NewServer(d)
	defer server.Close()
	file := filepath.Join(t.TempDir(), "absent")
	r, logged := withToken(t, server.URL, file)
	for i := 0; i < 3; i++ {
		r.Record("svc", "/a", 0, Success)
		if err := r.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := d.seen(); len(got) != 3 || got[0] != "" || got[1] != "" || got[2] != "" {
		t.Fatalf("%q", got)
	}
	if n := strings.Count(logged.String(), file); n != 1 {
		t.Fatalf("logged %d times: %q", n, logged)
	}
}

func TestARefusedTokenKeepsTheBatch(t *testing.T) {
	d := &headers{daemon: daemon{answers: []int{http.StatusUnauthorized, http.StatusAccepted}}}
	server := httptest.NewServer(d)
	defer server.Close()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("expired"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, logged := withToken(t, server.URL, file)
	r.Record("svc", "/a", 0, Success)
	err := r.Flush(context.Background())
	var unavailable *UnavailableError
	if !errors.As(err, &unavailable) || unavailable.Status != 401 || !strings.Contains(err.Error(), "401") {
		t.Fatalf("%v", err)
	}
	if !strings.Contains(logged.String(), "refused the service-account token") {
		t.Fatalf("logged %q", logged)
	}
	if err := os.WriteFile(file, []byte("valid"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.Record("svc", "/b", 0, Success) // goes to the next batch
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	authorizations, bodies := d.seen()
	if len(bodies) != 3 || bodies[0] != bodies[1] || strings.Contains(bodies[1], `"/b"`) || !strings.Contains(bodies[2], `"/b"`) {
		t.Fatalf("%q", bodies)
	}
	var refused, resent, next wireBatch
	_ = json.Unmarshal([]byte(bodies[0]), &refused)
	_ = json.Unmarshal([]byte(bodies[1]), &resent)
	_ = json.Unmarshal([]byte(bodies[2]), &next)
	if resent.Sequence != refused.Sequence || next.Sequence != refused.Sequence+1 {
		t.Fatalf("%q", bodies)
	}
	if authorizations[0] != "Bearer expired" || authorizations[1] != "Bearer valid" {
		t.Fatalf("%q", authorizations)
	}
	if got, want := r.Stats(), (Stats{BatchesSent: 2, ReportsRejected: 1, SendFailures: 1}); got != want {
		t.Fatalf("%+v", got)
	}
}

func TestATLSFileThatCannotBeUsedIsNamedAtStart(t *testing.T) {
	absent := filepath.Join(t.TempDir(), "ca.crt")
	for files, want := range map[connect.TLS]string{
		{CAFile: absent}: absent + ": cannot be read: no such file or directory",
		{CertFile: "../../credentials/client.crt"}:                                      "../../credentials/client.crt: a client certificate needs both CertFile and KeyFile",
		{CertFile: "../../credentials/client.crt", KeyFile: "../../credentials/ca.crt"}: "../../credentials/client.crt: with its key file ../../credentials/ca.crt: tls: found a certificate rather than a key in the PEM for the private key",
	} {
		_, err := Start(Config{Daemon: "https://localhost:9", Instance: "pod", TLS: files})
		var fileErr *connect.FileError
		if !errors.As(err, &fileErr) || err.Error() != want {
			t.Errorf("%v, want %s", err, want)
		}
	}
}

// TestAFleetScopedBudgetReportsASecondAfterStartAndTakesItsPart: with an
// hour's interval, a reporter tracking a fleet-scoped budget sends its first
// report within about a second, and the budget takes the part the answer
// gives; one tracking only a process-scoped budget waits for its interval.
func TestAFleetScopedBudgetReportsASecondAfterStartAndTakesItsPart(t *testing.T) {
	var mu sync.Mutex
	batches := 0
	daemon := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		batches++
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"accepted": 1, "fleetBudgets": {"ledger": {"minRetriesPerSecond": 2.5, "processes": 4}}}`))
	}))
	defer daemon.Close()
	sent := func() int {
		mu.Lock()
		defer mu.Unlock()
		return batches
	}

	quiet := started(t, Config{Daemon: daemon.URL, Instance: "pod-quiet", Interval: time.Hour})
	own, err := budget.New(0, 12, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	quiet.Track("orders", nil, time.Time{}, own, nil, time.Now())
	time.Sleep(2500 * time.Millisecond)
	if n := sent(); n != 0 {
		t.Fatalf("a process-scoped budget waits for the interval, yet %d batches went", n)
	}

	fleet, err := budget.New(0, 12, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fleet.ScopeToFleet()
	r := started(t, Config{Daemon: daemon.URL, Instance: "pod-1", Interval: time.Hour})
	r.Track("ledger", nil, time.Time{}, fleet, nil, time.Now())
	if f := fleet.Allowed(0) / 10; f != 12 {
		t.Fatalf("before any answer the floor is %v, not the whole 12", f)
	}
	deadline := time.Now().Add(4 * time.Second)
	for fleet.Allowed(0)/10 != 2.5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if f := fleet.Allowed(0) / 10; f != 2.5 {
		t.Fatalf("the floor is %v after %d batches: the first report did not go early or its part was not taken", f, sent())
	}
}

// TestAnAnswersUnreadablePartsAreLeftOutAndAFleetScopedReportSaysItsSpan:
// only well-formed entries of fleetBudgets are applied, and a fleet-scoped
// dependency's report says the time its counts cover.
func TestAnAnswersUnreadablePartsAreLeftOutAndAFleetScopedReportSaysItsSpan(t *testing.T) {
	r := reporter(t, "http://127.0.0.1:9", 10, 10)
	budgets := map[string]*budget.Budget{}
	for _, service := range []string{"ledger", "orders", "search", "stock"} {
		b, err := budget.New(0, 12, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		b.ScopeToFleet()
		budgets[service] = b
		r.Track(service, nil, time.Time{}, b, nil, time.Now())
	}
	var parts map[string]json.RawMessage
	answer := `{"ledger": {"minRetriesPerSecond": 2.5, "processes": 4}, "orders": {"minRetriesPerSecond": null, "processes": 4},
		"search": {"minRetriesPerSecond": 1, "processes": -1}, "stock": {"processes": 4}}`
	if err := json.Unmarshal([]byte(answer), &parts); err != nil {
		t.Fatal(err)
	}
	r.answered(parts)
	for service, want := range map[string]float64{"ledger": 2.5, "orders": 12, "search": 12, "stock": 12} {
		if got := budgets[service].Allowed(0) / 10; got != want {
			t.Errorf("%s: floor %v, want %v", service, got, want)
		}
	}
	time.Sleep(20 * time.Millisecond)
	for _, report := range reports(taken(t, r)) {
		span, ok := report["spanMs"].(float64)
		if !ok || span < 20 {
			t.Errorf("%s: spanMs %v", report["service"], report["spanMs"])
		}
	}
}
