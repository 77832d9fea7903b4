// The conformance scenarios of pacing: gates paced by the daemon, a lease
// that runs out, the daemon gone or hung, a refused ask.

package conformance

import (
	"bytes"
	"fmt"
	"log"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stormguard/stormguard/clients/go/gate"
	"github.com/stormguard/stormguard/clients/go/policy"
	"github.com/stormguard/stormguard/clients/go/report"
)

// gatedPolicyText is the pacing scenarios' policy file: payments with its
// send gate on, under overloadWhen: any-refusal (so that one refusal
// turns it on, whatever the daemon's default), and %s after it.
const gatedPolicyText = "defaults:\n  maxRetries: 3\nservices:\n  payments:\n    maxRetries: 2\n    gate:\n      enabled: true\n      overloadWhen: any-refusal\n%s"

const (
	fleetProcesses = `stormguard_fleet_processes{service="payments"}`
	fleetAccepted  = `stormguard_fleet_attempts_total{outcome="accepted",service="payments"}`
	fleetRate      = `stormguard_fleet_rate{service="payments"}`
)

// gatedPolicyFile is a new pacing policy file with extra lines after
// payments, in dir.
func gatedPolicyFile(t *testing.T, dir, extra string) string {
	t.Helper()
	file := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(gatedPolicyText, extra)), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// pacingProcess is a process pacing payments.
type pacingProcess struct {
	gate     *gate.Gate
	born     time.Time
	reporter *report.Reporter
	debug    *lockedBuffer
}

// startPacing starts a process pacing payments: a gate under the policy
// served serves, tracked by a reporter (instance pod-1) with fleet pacing
// on that asks daemon (with the token in tokenFile, if any), and turned on
// by one refused attempt.
func startPacing(t *testing.T, served, daemon, tokenFile string) pacingProcess {
	return startPacingAs(t, served, daemon, tokenFile, "pod-1")
}

// startPacingAs is startPacing with the reporter's instance named.
func startPacingAs(t *testing.T, served, daemon, tokenFile, instance string) pacingProcess {
	t.Helper()
	p := startGated(t, served, daemon, tokenFile, instance)
	now := p.now()
	p.gate.Record(gate.Overloaded, now, now)
	if !p.gate.On() {
		t.Fatal("a refusal did not turn the gate on")
	}
	return p
}

// startGated starts a process with payments's gate: under the policy
// served serves, tracked by a reporter (instance) with fleet pacing on that
// asks daemon (with the token in tokenFile, if any).
func startGated(t *testing.T, served, daemon, tokenFile, instance string) pacingProcess {
	t.Helper()
	w := watch(t, policy.Config{Daemon: served, Services: []string{"payments"}, WatchWait: 2 * time.Second, MinPollInterval: 50 * time.Millisecond, RetryMax: 300 * time.Millisecond})
	settings, on := w.Policy("payments").Gate()
	if w.Source() != policy.FromDaemon || !on {
		t.Fatalf("%s: the gate is %+v", w.Source(), settings)
	}
	g, err := gate.New(settings, nil)
	if err != nil {
		t.Fatal(err)
	}
	debug := &lockedBuffer{}
	r := startReporter(t, report.Config{Daemon: daemon, Instance: instance, Interval: time.Hour, Timeout: 500 * time.Millisecond, TokenFile: tokenFile, DebugLogger: log.New(debug, "", 0)})
	p := pacingProcess{gate: g, born: time.Now(), reporter: r, debug: debug}
	r.Track("payments", nil, time.Time{}, nil, g, p.born)
	return p
}

// now is the time on the gate's clock.
func (p pacingProcess) now() uint64 { return uint64(time.Since(p.born)) }

// paces is the rate the gate paces at now and its own (0 while off).
func (p pacingProcess) paces() (pace, own float64) {
	pace, _ = p.gate.RateAt(p.now())
	own, _ = p.gate.OwnRate()
	return pace, own
}

// turnsLater says whether an attempt asking for a turn 3 s from now gets
// one at once: at the gate's own rate of 0.5 a second, one has accrued.
func (p pacingProcess) turnsLater() bool {
	_, wait := p.gate.Turn(p.now() + uint64(3*time.Second))
	return !wait
}

// lockedBuffer is a log's output, written and read from any goroutine.
type lockedBuffer struct {
	mu   sync.Mutex
	text bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.text.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.text.String()
}

// within says whether check holds within d.
func within(d time.Duration, check func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if check() {
			return true
		}
	}
	return check()
}

// twoPacedProcesses starts two processes paced by the daemon, after
// pod-1's gate saw one attempt accepted and pod-2's three: alone each would
// pace at what its own outcomes say (16.5 and 48.5 a second), and the
// daemon, which learns from both, grants each its part of the fleet's
// rate, which is neither, so a gate that kept its own rate is told apart
// from one the daemon paces.
func twoPacedProcesses(t *testing.T, daemon string) [2]pacingProcess {
	t.Helper()
	processes := [2]pacingProcess{startPacingAs(t, daemon, daemon, "", "pod-1"), startPacingAs(t, daemon, daemon, "", "pod-2")}
	for i, accepted := range []int{1, 3} {
		for n := 0; n < accepted; n++ {
			now := processes[i].now()
			processes[i].gate.Record(gate.Accepted, now, now)
		}
	}
	if !within(5*time.Second, func() bool {
		return metric(t, daemon, fleetProcesses) == 2 && metric(t, daemon, fleetAccepted) == 4
	}) {
		t.Fatalf("the daemon does not pace both processes: %v processes, %v accepted", metric(t, daemon, fleetProcesses), metric(t, daemon, fleetAccepted))
	}
	return processes
}

func pacedByTheDaemon(t *testing.T) {
	at := reserve(t)
	serve(t, at, gatedPolicyFile(t, t.TempDir(), ""))
	daemon := daemonURL(at)
	processes := twoPacedProcesses(t, daemon)
	for i, alone := range []float64{16.5, 48.5} {
		p := processes[i]
		if !within(5*time.Second, func() bool { pace, own := p.paces(); return own == alone && pace > 0 && pace != own }) {
			pace, own := p.paces()
			t.Fatalf("pod-%d paces at %v, its own rate %v: not at its part of the grant", i+1, pace, own)
		}
	}
	together := pacedTogether(t, daemon, processes[0], processes[1])
	if len(together) == 0 {
		t.Fatal("not both paced by the daemon for a while")
	}
	for _, moment := range together {
		if moment[0] > 1.2*moment[1] {
			t.Fatalf("together above the rate the daemon shares ([paced, rate]): %v", together)
		}
	}
}

// pacedTogether is, over a second, at each moment the daemon paces every
// one of processes (each at a grant, not its own rate): the sum of their
// paces and the rate the daemon shares, stormguard_fleet_rate (the higher
// of a reading before and after, as it may move meanwhile).
func pacedTogether(t *testing.T, daemon string, processes ...pacingProcess) [][2]float64 {
	var together [][2]float64
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		before := metric(t, daemon, fleetRate)
		paced, granted := 0.0, true
		for _, p := range processes {
			pace, own := p.paces()
			paced, granted = paced+pace, granted && pace > 0 && pace != own
		}
		after := metric(t, daemon, fleetRate)
		if granted && before >= 0 && after >= 0 { // -1: not shown at that moment
			together = append(together, [2]float64{paced, math.Max(before, after)})
		}
	}
	return together
}

func aLeaseExpires(t *testing.T) {
	at := reserve(t)
	serve(t, at, gatedPolicyFile(t, t.TempDir(), ""))
	daemon := daemonURL(at)
	granting := newProxy(t, daemon)
	granting.set(func(p *proxy) { p.grantOnce = `{"rate": 7.25, "leaseMs": 2000, "askEveryMs": 100}` })
	p := startPacing(t, daemon, granting.URL, "")
	if !within(5*time.Second, func() bool { pace, own := p.paces(); return pace == 7.25 && own == 0.5 }) {
		pace, own := p.paces()
		t.Fatalf("paced at %v, its own rate %v, not at the grant", pace, own)
	}
	if !within(5*time.Second, func() bool { pace, own := p.paces(); return pace == own }) {
		pace, own := p.paces()
		t.Fatalf("paced at %v once the lease is over, its own rate %v", pace, own)
	}
	if s := p.reporter.Stats(); s.PaceFailures == 0 {
		t.Fatalf("the 503s are not counted: %+v", s)
	}
	if !p.turnsLater() {
		t.Fatal("no turn at its own rate")
	}
}

func theDaemonGoesWhilePacing(t *testing.T) {
	at := reserve(t)
	cmd := serve(t, at, gatedPolicyFile(t, t.TempDir(), ""))
	at.Release()
	pacedUntilTheDaemonIsKilled(t, cmd, daemonURL(at))
}

func theDaemonHangsWhilePacing(t *testing.T) {
	at := reserve(t)
	cmd := serve(t, at, gatedPolicyFile(t, t.TempDir(), ""))
	pacedUntilTheDaemonIsKilled(t, cmd, daemonURL(at))
}

// pacedUntilTheDaemonIsKilled is the pacing scenarios' end: pod-1 is paced
// at its part of the grant, then the daemon is killed; what its address
// does then is the caller's.
func pacedUntilTheDaemonIsKilled(t *testing.T, cmd *exec.Cmd, daemon string) {
	p := twoPacedProcesses(t, daemon)[0]
	if !within(5*time.Second, func() bool { pace, own := p.paces(); return pace > 0 && pace != own }) {
		pace, own := p.paces()
		t.Fatalf("not paced at its part of the grant first: %v, its own rate %v", pace, own)
	}
	failures := p.reporter.Stats().PaceFailures
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !within(5*time.Second, func() bool {
		pace, own := p.paces()
		return p.reporter.Stats().PaceFailures > failures && pace == own
	}) {
		pace, own := p.paces()
		t.Fatalf("not alone within 5 s: paced at %v, its own rate %v, %+v", pace, own, p.reporter.Stats())
	}
	if !p.turnsLater() {
		t.Fatal("no turn at its own rate")
	}
}

func aRefusedPaceAsk(t *testing.T) {
	tokens := readTokens(t)
	dir := t.TempDir()
	at := reserve(t)
	serve(t, at, gatedPolicyFile(t, dir, "reporters:\n  payments: [shop/cart]\n"), "--tokens", "required", "--token-keys", credential("jwks.json"), "--token-issuer", tokens.Issuer)
	daemon := daemonURL(at)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(tokens.Valid), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startPacing(t, daemon, daemon, tokenFile)
	if !eventually(func() bool { return p.reporter.Stats().PaceFailures >= 2 }) {
		t.Fatalf("no refused asks: %+v", p.reporter.Stats())
	}
	if s := p.reporter.Stats(); s.PaceFailures != s.PaceAsks {
		t.Fatalf("an ask was granted: %+v", s)
	}
	if pace, own := p.paces(); pace != own {
		t.Fatalf("paced at %v, its own rate %v", pace, own)
	}
	if !strings.Contains(p.debug.String(), "403 Forbidden") {
		t.Fatalf("the asks were not refused with 403: %s", p.debug.String())
	}
	if got := metric(t, daemon, fleetProcesses); got != -1 {
		t.Fatalf("the daemon paces %v processes for payments", got)
	}
}

// failingAtRandomIsNotPaced: under the shipped judgement, a third of
// attempts refused at random turns no gate on and the daemon judges no
// overload, while a process that has seen nothing accepted turns its gate
// on at the fifth refusal in a row.
func failingAtRandomIsNotPaced(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	text := "defaults:\n  maxRetries: 3\nservices:\n  payments:\n    maxRetries: 2\n    gate:\n      enabled: true\n"
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	at := reserve(t)
	serve(t, at, file)
	daemon := daemonURL(at)
	processes := []pacingProcess{startGated(t, daemon, daemon, "", "pod-1"), startGated(t, daemon, daemon, "", "pod-2")}
	watching := `stormguard_fleet_process_gates{gate="watching",service="payments"}`
	overloaded := `stormguard_fleet_judgement{judgement="overloaded",service="payments"}`
	heard := false
	deadline := time.Now().Add(10 * time.Second)
	// Every 50 ms an attempt each, at least 50, until the daemon has been
	// heard judging no overload of two watching gates (it counts only the
	// gates that asked within its last three asks, so it is read meanwhile).
	for i := 0; !(i >= 50 && heard) && time.Now().Before(deadline); i++ {
		signal := gate.Accepted
		if i%3 == 2 {
			signal = gate.Overloaded
		}
		for _, p := range processes {
			now := p.now()
			if _, wait := p.gate.Turn(now); wait {
				t.Fatalf("attempt %d waited for its turn", i)
			}
			p.gate.Record(signal, now, now)
			if p.gate.On() {
				t.Fatalf("attempt %d: a third refused at random turned the gate on", i)
			}
		}
		if i >= 10 && !heard {
			heard = metric(t, daemon, watching) == 2 && metric(t, daemon, overloaded) == 0
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !heard {
		t.Fatalf("the daemon hears %v watching gates and judges overload %v", metric(t, daemon, watching), metric(t, daemon, overloaded))
	}
	third := startGated(t, daemon, daemon, "", "pod-3")
	t0 := third.now()
	for refusal := 1; refusal <= 5; refusal++ {
		now := t0 + uint64(refusal)*uint64(time.Millisecond)
		third.gate.Record(gate.Overloaded, now, now)
		if third.gate.On() != (refusal == 5) {
			t.Fatalf("after %d refusals with nothing accepted the gate is on: %v", refusal, third.gate.On())
		}
	}
}
