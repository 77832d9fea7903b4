// Package conformance runs the scenarios of clients/conformance.json, which
// every stormguard client runs, against the real daemon.
package conformance

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stormguard/stormguard/clients/go/connect"
	"github.com/stormguard/stormguard/clients/go/policy"
	"github.com/stormguard/stormguard/clients/go/report"
)

// scenarios are the implementations, by id.
var scenarios = map[string]func(t *testing.T){
	"start-with-the-daemon-down":           startWithTheDaemonDown,
	"start-from-the-cache":                 startFromTheCache,
	"watch-a-change":                       watchAChange,
	"a-bad-answer":                         aBadAnswer,
	"a-lost-answer":                        aLostAnswer,
	"a-draining-daemon":                    aDrainingDaemon,
	"a-report-answer-lost":                 aReportAnswerLost,
	"a-refused-report":                     aRefusedReport,
	"reports-while-the-daemon-is-down":     reportsWhileTheDaemonIsDown,
	"shutdown-sends-the-last-counts":       shutdownSendsTheLastCounts,
	"a-rotated-token":                      aRotatedToken,
	"https-with-a-ca":                      httpsWithACA,
	"paced-by-the-daemon":                  pacedByTheDaemon,
	"a-lease-expires":                      aLeaseExpires,
	"the-daemon-goes-while-pacing":         theDaemonGoesWhilePacing,
	"the-daemon-hangs-while-pacing":        theDaemonHangsWhilePacing,
	"a-refused-pace-ask":                   aRefusedPaceAsk,
	"failing-at-random-is-not-paced":       failingAtRandomIsNotPaced,
	"a-fleet-budget-divided":               aFleetBudgetDivided,
	"a-fleet-budget-falls-back":            aFleetBudgetFallsBack,
	"a-fleet-half-open":                    aFleetHalfOpen,
	"a-fleet-half-open-without-the-daemon": aFleetHalfOpenWithoutTheDaemon,
}

// TestConformance runs every scenario of the file by its id; an id without
// an implementation, or an implementation without an id, is an error.
func TestConformance(t *testing.T) {
	text, err := os.ReadFile("../../conformance.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Scenarios []struct {
			ID    string `json:"id"`
			Given string `json:"given"`
			When  string `json:"when"`
			Then  string `json:"then"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal(text, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Scenarios) == 0 {
		t.Fatal("no scenarios")
	}
	listed := map[string]bool{}
	for _, s := range file.Scenarios {
		s := s
		listed[s.ID] = true
		run, ok := scenarios[s.ID]
		if !ok {
			t.Errorf("scenario %q has no Go implementation", s.ID)
			continue
		}
		t.Run(s.ID, func(t *testing.T) {
			t.Logf("given %s; when %s; then %s", s.Given, s.When, s.Then)
			run(t)
		})
	}
	for id := range scenarios {
		if !listed[id] {
			t.Errorf("scenario %q is implemented but not in conformance.json", id)
		}
	}
}

func daemonURL(at *address) string { return at.URL() }

func watch(t *testing.T, config policy.Config) *policy.Watch {
	t.Helper()
	w, err := policy.Start(context.Background(), config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

func startWithTheDaemonDown(t *testing.T) {
	at := reserve(t)
	started := time.Now()
	w := watch(t, policy.Config{Daemon: daemonURL(at), Services: []string{"payments"}, StartupWait: 300 * time.Millisecond, MinPollInterval: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	if took := time.Since(started); took > 2*time.Second {
		t.Fatalf("ready after %s, with a start-up wait of 300ms", took)
	}
	if w.Source() != policy.FromDefaults || w.Policy("payments").Retries() != 3 {
		t.Fatalf("%s %v", w.Source(), w.Policy("payments"))
	}
	serve(t, at, policyFile(t, 5))
	if !eventually(func() bool { return w.Policy("payments").Retries() == 5 && w.Source() == policy.FromDaemon }) {
		t.Fatalf("never caught up: %s %v", w.Source(), w.Policy("payments"))
	}
}

func startFromTheCache(t *testing.T) {
	file := policyFile(t, 5)
	cache := filepath.Join(t.TempDir(), "cache.json")
	at := reserve(t)
	first := serve(t, at, file)
	fetched := watch(t, policy.Config{Daemon: daemonURL(at), Services: []string{"payments"}, Cache: cache})
	if fetched.Source() != policy.FromDaemon || fetched.Policy("payments").Retries() != 5 {
		t.Fatalf("%s %v", fetched.Source(), fetched.Policy("payments"))
	}
	fetched.Stop()
	if _, err := os.Stat(cache); err != nil {
		t.Fatalf("no cache file: %v", err)
	}
	_ = first.Process.Kill()
	_ = first.Wait()

	w := watch(t, policy.Config{Daemon: daemonURL(at), Services: []string{"payments"}, Cache: cache, StartupWait: 300 * time.Millisecond, MinPollInterval: 100 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	if w.Source() != policy.FromCache || w.Policy("payments").Retries() != 5 {
		t.Fatalf("%s %v", w.Source(), w.Policy("payments"))
	}
	serve(t, at, file)
	if !eventually(func() bool { return w.Source() == policy.FromDaemon }) {
		t.Fatal("it never caught up with the daemon")
	}
	if w.Policy("payments").Retries() != 5 {
		t.Fatalf("%v", w.Policy("payments"))
	}
}

func watchAChange(t *testing.T) {
	file := policyFile(t, 2)
	at := reserve(t)
	serve(t, at, file)
	p := newProxy(t, daemonURL(at))
	w := watch(t, policy.Config{Daemon: p.URL, Services: []string{"payments", "search"}, WatchWait: 5 * time.Second})
	if w.Source() != policy.FromDaemon || w.Policy("payments").Retries() != 2 || w.Policy("search").Retries() != 3 {
		t.Fatalf("%s %v %v", w.Source(), w.Policy("payments"), w.Policy("search"))
	}
	// Let the long-poll begin, then edit.
	if !eventually(func() bool { return p.read(func(p *proxy) int { return len(p.policyQueries) }) >= 2 }) {
		t.Fatal("the client never long-polled")
	}
	writePolicy(t, file, 7)
	if !eventually(func() bool { return w.Policy("payments").Retries() == 7 }) {
		t.Fatal("the edit never arrived")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// One request at start-up, then long-polls only: the one that was
	// waiting delivered the edit (a client polling without waiting would
	// have asked about every second).
	if len(p.policyQueries) > 3 {
		t.Fatalf("%d policy requests: %q", len(p.policyQueries), p.policyQueries)
	}
	for _, q := range p.policyQueries[1:] {
		if !strings.Contains(q, "wait=") {
			t.Fatalf("a request after the first was not a long-poll: %q", q)
		}
	}
}

func aBadAnswer(t *testing.T) {
	file := policyFile(t, 2)
	at := reserve(t)
	serve(t, at, file)
	p := newProxy(t, daemonURL(at))
	w := watch(t, policy.Config{Daemon: p.URL, Services: []string{"payments"}, WatchWait: 5 * time.Second, MinPollInterval: 50 * time.Millisecond, RetryInitial: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond})
	if w.Source() != policy.FromDaemon || w.Policy("payments").Retries() != 2 {
		t.Fatalf("%s %v", w.Source(), w.Policy("payments"))
	}
	p.set(func(p *proxy) { p.corrupt = true })
	writePolicy(t, file, 7)
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if w.Policy("payments").Retries() != 2 || w.Source() != policy.FromDaemon {
			t.Fatalf("a bad answer changed the policies: %s %v", w.Source(), w.Policy("payments"))
		}
	}
	p.set(func(p *proxy) { p.corrupt = false })
	if n := p.read(func(p *proxy) int { return p.corrupted }); n < 2 {
		t.Fatalf("only %d bad answers were served", n)
	}
	if !eventually(func() bool { return w.Policy("payments").Retries() == 7 }) {
		t.Fatal("the good answer never arrived")
	}
}

func aLostAnswer(t *testing.T) {
	file := policyFile(t, 2)
	at := reserve(t)
	serve(t, at, file)
	p := newProxy(t, daemonURL(at))
	w := watch(t, policy.Config{Daemon: p.URL, Services: []string{"payments"}, WatchWait: 5 * time.Second, MinPollInterval: 50 * time.Millisecond, RetryInitial: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond})
	if w.Policy("payments").Retries() != 2 {
		t.Fatalf("%v", w.Policy("payments"))
	}
	p.set(func(p *proxy) { p.losePolicies = 2 })
	writePolicy(t, file, 7)
	if !eventually(func() bool {
		lost := p.read(func(p *proxy) int { return p.lostPolicies })
		retries := w.Policy("payments").Retries()
		if lost < 2 && retries != 2 {
			t.Fatalf("the policy changed with %d answers lost", lost)
		}
		return retries == 7
	}) {
		t.Fatal("never asked again after the lost answers")
	}
	if lost := p.read(func(p *proxy) int { return p.lostPolicies }); lost != 2 {
		t.Fatalf("%d answers lost", lost)
	}
}

func aDrainingDaemon(t *testing.T) {
	at := reserve(t)
	cmd := serve(t, at, policyFile(t, 4), "--shutdown-delay", "2s")
	w := watch(t, policy.Config{Daemon: daemonURL(at), Services: []string{"payments"}, WatchWait: 5 * time.Second, MinPollInterval: 50 * time.Millisecond})
	if w.Policy("payments").Retries() != 4 {
		t.Fatalf("%v", w.Policy("payments"))
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if w.Policy("payments").Retries() != 4 || w.Source() == policy.FromDefaults {
			t.Fatalf("%s %v", w.Source(), w.Policy("payments"))
		}
	}
}

func reporter(t *testing.T, daemon string) *report.Reporter {
	t.Helper()
	return startReporter(t, report.Config{Daemon: daemon, Instance: "pod-1", Interval: time.Hour, Timeout: 2 * time.Second})
}

// startReporter starts a reporter with config, stopped with the test.
func startReporter(t *testing.T, config report.Config) *report.Reporter {
	t.Helper()
	r, err := report.Start(config)
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

func sequence(t *testing.T, body string) uint64 {
	var b struct {
		Sequence uint64 `json:"sequence"`
	}
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		t.Fatal(err)
	}
	return b.Sequence
}

func aReportAnswerLost(t *testing.T) {
	at := reserve(t)
	serve(t, at, policyFile(t, 2))
	daemon := daemonURL(at)
	p := newProxy(t, daemon)
	p.set(func(p *proxy) { p.loseBatch = 1 })
	r := reporter(t, p.URL)
	for i := 0; i < 5; i++ {
		r.Record("payments", "/charge", 0, report.Success)
	}
	var unavailable *report.UnavailableError
	if err := r.Flush(context.Background()); !errors.As(err, &unavailable) {
		t.Fatalf("the first flush: %v", err)
	}
	r.Record("payments", "/charge", 0, report.Success)
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	batches := p.batchBodies()
	if len(batches) != 3 || batches[0] != batches[1] || sequence(t, batches[2]) != sequence(t, batches[0])+1 {
		t.Fatalf("%q", batches)
	}
	if got := metric(t, daemon, requests("/charge", "success")); got != 6 {
		t.Errorf("/charge success is %v", got)
	}
	if got := metric(t, daemon, `stormguard_reports_total{result="duplicate"}`); got != 1 {
		t.Errorf("duplicates: %v", got)
	}
	if s := r.Stats(); s.SendFailures != 1 || s.BatchesSent != 2 {
		t.Errorf("%+v", s)
	}
}

func aRefusedReport(t *testing.T) {
	at := reserve(t)
	serve(t, at, policyFile(t, 2), "--max-body-bytes", "1024")
	daemon := daemonURL(at)
	p := newProxy(t, daemon)
	r := reporter(t, p.URL)
	for i := 0; i < 40; i++ {
		r.Record("payments", fmt.Sprintf("/endpoint-%d", i), 0, report.Success)
	}
	err := r.Flush(context.Background())
	var refused *report.RefusedError
	if !errors.As(err, &refused) || refused.Status != 413 || !strings.Contains(err.Error(), "413") {
		t.Fatalf("the first flush: %v", err)
	}
	r.Record("payments", "/charge", 0, report.Success)
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, daemon, requests("/charge", "success")); got != 1 {
		t.Errorf("/charge success is %v", got)
	}
	if got := metric(t, daemon, requests("/endpoint-0", "success")); got != -1 {
		t.Errorf("/endpoint-0 is %v", got)
	}
	batches := p.batchBodies()
	if len(batches) != 2 || strings.Contains(batches[1], "/endpoint-0") {
		t.Fatalf("the refused batch was sent again: %q", batches)
	}
	if s := r.Stats(); s.BatchesDropped != 1 || s.BatchesSent != 1 {
		t.Errorf("%+v", s)
	}
}

func reportsWhileTheDaemonIsDown(t *testing.T) {
	at := reserve(t)
	daemon := daemonURL(at)
	r := reporter(t, daemon)
	for i := 0; i < 3; i++ {
		r.Record("payments", "/charge", 0, report.Success)
	}
	var unavailable *report.UnavailableError
	if err := r.Flush(context.Background()); !errors.As(err, &unavailable) {
		t.Fatalf("the flush with the daemon down: %v", err)
	}
	serve(t, at, policyFile(t, 2))
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, daemon, requests("/charge", "success")); got != 3 {
		t.Errorf("/charge success is %v", got)
	}
}

func shutdownSendsTheLastCounts(t *testing.T) {
	at := reserve(t)
	serve(t, at, policyFile(t, 2))
	daemon := daemonURL(at)
	p := newProxy(t, daemon)
	r, err := report.Start(report.Config{Daemon: p.URL, Instance: "pod-1", Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		r.Record("payments", "/charge", 0, report.Success)
	}
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, daemon, requests("/charge", "success")); got != 4 {
		t.Errorf("/charge success is %v", got)
	}
	sent := len(p.batchBodies())
	r.Record("payments", "/charge", 0, report.Success)
	time.Sleep(300 * time.Millisecond)
	if after := len(p.batchBodies()); sent != 1 || after != sent {
		t.Fatalf("%d batches at shutdown, %d after", sent, after)
	}
}

// credential is a file of clients/credentials.
func credential(name string) string {
	return filepath.Join("..", "..", "credentials", name)
}

// tokens is clients/credentials/tokens.json.
type tokens struct {
	Issuer  string `json:"issuer"`
	Valid   string `json:"valid"`
	Expired string `json:"expired"`
}

func readTokens(t *testing.T) tokens {
	t.Helper()
	text, err := os.ReadFile(credential("tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out tokens
	if err := json.Unmarshal(text, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func aRotatedToken(t *testing.T) {
	tokens := readTokens(t)
	at := reserve(t)
	serve(t, at, policyFile(t, 2), "--tokens", "required", "--token-keys", credential("jwks.json"), "--token-issuer", tokens.Issuer)
	daemon := daemonURL(at)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(tokens.Expired), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startReporter(t, report.Config{Daemon: daemon, Instance: "pod-1", Interval: time.Hour, Timeout: 2 * time.Second, TokenFile: tokenFile})
	for i := 0; i < 2; i++ {
		r.Record("payments", "/charge", 0, report.Success)
	}
	err := r.Flush(context.Background())
	var unavailable *report.UnavailableError
	if !errors.As(err, &unavailable) || unavailable.Status != 401 || !strings.Contains(err.Error(), "401") {
		t.Fatalf("the flush with the expired token: %v", err)
	}
	if got := metric(t, daemon, requests("/charge", "success")); got != -1 {
		t.Fatalf("the refused batch was counted: %v", got)
	}
	if err := os.WriteFile(tokenFile, []byte(tokens.Valid), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatalf("the kept batch, with the valid token: %v", err)
	}
	if got := metric(t, daemon, requests("/charge", "success")); got != 2 {
		t.Errorf("/charge success is %v", got)
	}
	if got := metric(t, daemon, `stormguard_token_refusals_total{reason="expired"}`); got != 1 {
		t.Errorf("expired refusals: %v", got)
	}
	// The kept batch, then one of the (empty) counts aggregated since.
	if s := r.Stats(); s.SendFailures != 1 || s.BatchesSent != 2 || s.BatchesDropped != 0 {
		t.Errorf("%+v", s)
	}
}

func httpsWithACA(t *testing.T) {
	at := reserve(t)
	serve(t, at, policyFile(t, 5), "--tls-cert", credential("daemon.crt"), "--tls-key", credential("daemon.key"), "--tls-client-ca", credential("ca.crt"))
	daemon := fmt.Sprintf("https://localhost:%d", at.Port) // the certificate names localhost
	files := connect.TLS{CAFile: credential("ca.crt"), CertFile: credential("client.crt"), KeyFile: credential("client.key")}
	trusting := watch(t, policy.Config{Daemon: daemon, Services: []string{"payments"}, TLS: files})
	if trusting.Source() != policy.FromDaemon || trusting.Policy("payments").Retries() != 5 {
		t.Fatalf("%s %v", trusting.Source(), trusting.Policy("payments"))
	}
	r := startReporter(t, report.Config{Daemon: daemon, Instance: "pod-1", Interval: time.Hour, Timeout: 2 * time.Second, TLS: files})
	r.Record("payments", "/charge", 0, report.Success)
	if err := r.Flush(context.Background()); err != nil {
		t.Fatalf("sent over HTTPS: %v", err)
	}

	withoutCA := files
	withoutCA.CAFile = ""
	started := time.Now()
	distrusting := watch(t, policy.Config{Daemon: daemon, Services: []string{"payments"}, TLS: withoutCA, StartupWait: 300 * time.Millisecond, MinPollInterval: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	if took := time.Since(started); took > 2*time.Second {
		t.Fatalf("ready after %s, with a start-up wait of 300ms", took)
	}
	if distrusting.Source() != policy.FromDefaults || distrusting.Policy("payments").Retries() != 3 {
		t.Fatalf("%s %v", distrusting.Source(), distrusting.Policy("payments"))
	}

	if got := metricVia(t, trustingClient(t, files), daemon, requests("/charge", "success")); got != 1 {
		t.Errorf("/charge success is %v", got)
	}
}

// trustingClient reads the daemon over HTTPS with files' CA and client
// certificate, set up here rather than by package connect.
func trustingClient(t *testing.T, files connect.TLS) *http.Client {
	t.Helper()
	ca, err := os.ReadFile(files.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		t.Fatal("no CA certificate")
	}
	pair, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}}
	t.Cleanup(transport.CloseIdleConnections)
	return &http.Client{Transport: transport, Timeout: 5 * time.Second}
}
