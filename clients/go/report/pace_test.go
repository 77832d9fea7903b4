// Tests of pace asks: a gate paced at the daemon's grant, asks that get
// none, and a fleet-scoped breaker asking for trials and closing with the
// fleet.

package report

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stormguard/stormguard/clients/go/breaker"
	"github.com/stormguard/stormguard/clients/go/gate"
)

// pacer is a stand-in daemon answering each pace ask with the next of
// answers (the last one again once they run out), keeping every ask, as
// read and as sent, and its Authorization header.
type pacer struct {
	mu      sync.Mutex
	answers []paceAnswer
	asks    []paceAsk
	bodies  []string
	tokens  []string
}

type paceAnswer struct {
	status int
	body   string
}

func (p *pacer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/pace" {
		w.WriteHeader(http.StatusOK) // report batches: counted, not kept
		return
	}
	body, _ := io.ReadAll(r.Body)
	var ask paceAsk
	decoder := json.NewDecoder(bytes.NewReader(body))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&ask); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.asks = append(p.asks, ask)
	p.bodies = append(p.bodies, string(body))
	p.tokens = append(p.tokens, r.Header.Get("Authorization"))
	answer := p.answers[0]
	if len(p.answers) > 1 {
		p.answers = p.answers[1:]
	}
	p.mu.Unlock()
	w.WriteHeader(answer.status)
	_, _ = w.Write([]byte(answer.body))
}

func (p *pacer) seen() ([]paceAsk, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]paceAsk(nil), p.asks...), append([]string(nil), p.tokens...)
}

// sent is every ask's body as the reporter sent it.
func (p *pacer) sent() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.bodies...)
}

// gated is a gate with the built-in settings but quiet and under
// overloadWhen: any-refusal (a refusal turns it on), off, and the time its
// clock started.
func gated(t *testing.T, quiet time.Duration) (*gate.Gate, time.Time) {
	t.Helper()
	return gatedWhen(t, quiet, gate.AnyRefusal)
}

// gatedWhen is a gate with the built-in settings but quiet and when, off,
// and the time its clock started.
func gatedWhen(t *testing.T, quiet time.Duration, when gate.OverloadWhen) (*gate.Gate, time.Time) {
	t.Helper()
	g, err := gate.New(gate.Policy{Enabled: true, MinRate: 0.5, MaxRate: 100_000, Beta: 0.7, Scale: 0.4, Ramp: 16, Quiet: quiet, OverloadWhen: when}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g, time.Now()
}

// turnedOn is a gate with the built-in settings, turned on by a refusal,
// and the time its clock started.
func turnedOn(t *testing.T) (*gate.Gate, time.Time) {
	t.Helper()
	g, born := gated(t, 5*time.Second)
	g.Record(gate.Overloaded, 0, elapsed(born))
	return g, born
}

// within says whether check holds within 5 s.
func within(check func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if check() {
			return true
		}
	}
	return check()
}

func TestWhileItsGateIsOnADependencyIsPacedAtTheDaemonsGrant(t *testing.T) {
	d := &pacer{answers: []paceAnswer{{200, `{"rate": 7.25, "leaseMs": 60000, "askEveryMs": 5000}`}}}
	server := httptest.NewServer(d)
	defer server.Close()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("pod-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := started(t, Config{Daemon: server.URL, Instance: "pod-1", Interval: time.Hour, TokenFile: token})
	g, born := turnedOn(t)
	r.Track("payments", nil, time.Time{}, nil, g, born)
	if !within(func() bool { s := r.Stats(); return s.PaceAsks == 1 }) {
		t.Fatalf("no ask: %+v", r.Stats())
	}
	if rate, _ := g.RateAt(elapsed(born)); rate != 7.25 {
		t.Fatalf("paced at %v", rate)
	}
	if own, _ := g.OwnRate(); own != 0.5 {
		t.Fatalf("its own rate is %v", own)
	}
	// A grant's askEveryMs past a second asks once a second at most.
	time.Sleep(600 * time.Millisecond)
	asks, tokens := d.seen()
	want := paceAsk{Service: "payments", Instance: "pod-1", Overloaded: 1}
	if len(asks) != 1 || !reflect.DeepEqual(asks[0], want) || tokens[0] != "Bearer pod-token" {
		t.Fatalf("%+v %q", asks, tokens)
	}
	if s := r.Stats(); s.PaceAsks != 1 || s.PaceFailures != 0 {
		t.Fatalf("%+v", s)
	}
	if body := d.sent()[0]; strings.Contains(body, "watching") {
		t.Fatalf("an on gate's ask says watching: %s", body)
	}
}

func TestAWatchingGateTellsTheDaemonWhatItHeardAndTurnsOnWhenTheGrantSaysPace(t *testing.T) {
	d := &pacer{answers: []paceAnswer{
		{200, `{"rate": 7.25, "leaseMs": 60000, "askEveryMs": 20}`},
		{200, `{"rate": 7.25, "leaseMs": 60000, "askEveryMs": 5000, "pace": true}`},
	}}
	server := httptest.NewServer(d)
	defer server.Close()
	r := started(t, Config{Daemon: server.URL, Instance: "pod-1", Interval: time.Hour})
	g, born := gatedWhen(t, 5*time.Second, gate.MostRefused)
	g.Record(gate.Accepted, 0, elapsed(born))
	// The refusal that begins watching is left out of what the daemon
	// hears; the answers after it are not.
	g.Record(gate.Overloaded, 0, elapsed(born))
	for _, signal := range []gate.Signal{gate.Accepted, gate.Accepted, gate.Overloaded, gate.Accepted} {
		g.Record(signal, 0, elapsed(born))
	}
	if g.On() || !g.Watching() {
		t.Fatal("a refusal among acceptances only starts watching")
	}
	r.Track("payments", nil, time.Time{}, nil, g, born)
	if !within(func() bool { return r.Stats().PaceAsks == 2 }) {
		t.Fatalf("no second ask: %+v", r.Stats())
	}
	if !g.On() || g.Watching() || !g.Answering() {
		t.Fatal("the grant said pace: the gate is on, judging the dependency to answer")
	}
	if rate, _ := g.RateAt(elapsed(born)); rate != 7.25 {
		t.Fatalf("paced at %v, not the grant", rate)
	}
	if own, _ := g.OwnRate(); own != 6 {
		t.Fatalf("its own rate is %v, not twice the 3 accepted while watching", own)
	}
	asks, _ := d.seen()
	heard := paceAsk{Service: "payments", Instance: "pod-1", Sent: 4, Accepted: 3, Overloaded: 1, Watching: true}
	// The first grant does not say pace: the gate watches on, its lease
	// ignored, and tells the daemon only what it heard since.
	since := paceAsk{Service: "payments", Instance: "pod-1", Watching: true}
	if len(asks) < 2 || !reflect.DeepEqual(asks[0], heard) || !reflect.DeepEqual(asks[1], since) {
		t.Fatalf("%+v", asks)
	}
	if body := d.sent()[0]; !strings.Contains(body, `"watching":true`) {
		t.Fatalf("the ask does not say watching: %s", body)
	}
}

// TestTheAskCarriesTheCallsShedAndTheDemandByClass: to a daemon that reads
// classes, a gate that shed calls tells how many of each class, once;
// while some call is critical or sheddable, it tells the demand of each
// class, those that asked since the last ask and those that wait. A gate
// whose calls are all of the default class tells neither, as it did
// before classes.
func TestTheAskCarriesTheCallsShedAndTheDemandByClass(t *testing.T) {
	d := &pacer{answers: []paceAnswer{
		{200, `{"rate": 0.5, "leaseMs": 60000, "askEveryMs": 20, "classes": true}`},
		{200, `{"rate": 0.5, "leaseMs": 60000, "askEveryMs": 5000, "classes": true}`},
	}}
	server := httptest.NewServer(d)
	defer server.Close()
	r := started(t, Config{Daemon: server.URL, Instance: "pod-1", Interval: time.Hour})
	// As if the daemon's last grant had said it reads classes.
	r.classes.Store(true)
	// At the probe rate, its first credit 0: no turn for 2 s.
	p := gate.Policy{Enabled: true, MinRate: 0.5, MaxRate: 100_000, Beta: 0.7, Scale: 0.4, Ramp: 16, Quiet: 5 * time.Second, OverloadWhen: gate.AnyRefusal}
	g, err := gate.New(p, func() float64 { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	born := time.Now()
	g.Record(gate.Overloaded, 0, elapsed(born))
	now := elapsed(born)
	// A critical call waits; a default and a sheddable one, bound to go
	// within a nanosecond, are shed.
	for _, ask := range []struct {
		asker gate.Asker
		want  gate.Verdict
	}{
		{gate.Asker{Class: gate.Critical}, gate.Queued},
		{gate.Asker{Class: gate.Default, By: now + 1}, gate.Shed},
		{gate.Asker{Class: gate.Sheddable, By: now + 1}, gate.Shed},
	} {
		if _, verdict := g.TurnFor(ask.asker, now); verdict != ask.want {
			t.Fatalf("%+v: %s, want %s", ask.asker, verdict, ask.want)
		}
	}
	r.Track("payments", nil, time.Time{}, nil, g, born)
	if !within(func() bool { return r.Stats().PaceAsks == 2 }) {
		t.Fatalf("no second ask: %+v", r.Stats())
	}
	asks, _ := d.seen()
	first := paceAsk{
		Service: "payments", Instance: "pod-1", Overloaded: 1, Waiting: 1,
		Shed:   map[string]uint64{"default": 1, "sheddable": 1},
		Demand: map[string]uint64{"critical": 2, "default": 1, "sheddable": 1},
	}
	// The shed are told once; the critical call still waits.
	second := paceAsk{Service: "payments", Instance: "pod-1", Waiting: 1, Demand: map[string]uint64{"critical": 1, "default": 0, "sheddable": 0}}
	if len(asks) < 2 || !reflect.DeepEqual(asks[0], first) || !reflect.DeepEqual(asks[1], second) {
		t.Fatalf("%+v", asks)
	}
	if body := d.sent()[0]; !strings.Contains(body, `"shed":{"default":1,"sheddable":1},"demand":{"critical":2,"default":1,"sheddable":1}`) {
		t.Fatalf("sent %s", body)
	}
	if body := d.sent()[1]; strings.Contains(body, `"shed"`) {
		t.Fatalf("the second ask tells the shed again: %s", body)
	}

	// Default calls alone, waiting: no demand, as before classes.
	unclassed, unclassedBorn := turnedOn(t)
	unclassed.Turn(elapsed(unclassedBorn))
	unclassed.Turn(elapsed(unclassedBorn))
	ask, ok := (paced{service: "search", gate: unclassed, born: unclassedBorn}).paceAsk("pod-1", true)
	if !ok || ask.Demand != nil || ask.Shed != nil || ask.Waiting == 0 {
		t.Fatalf("%+v", ask)
	}
}

// TestTheAskCarriesClassesOnlyToADaemonWhoseLastGrantSaidItReadsThem: a
// daemon that predates classes refuses an ask with fields it does not
// know, so the calls shed and the demand by class go only to a daemon
// whose last grant said it reads them ("classes": true): not in the first
// ask, whatever the calls' classes; in the next, once a grant said so; not
// after an ask refused (a replica that predates them, mid-rollout), nor
// after a grant that did not say so.
func TestTheAskCarriesClassesOnlyToADaemonWhoseLastGrantSaidItReadsThem(t *testing.T) {
	reads := paceAnswer{200, `{"rate": 0.5, "leaseMs": 60000, "askEveryMs": 100, "classes": true}`}
	d := &pacer{answers: []paceAnswer{
		reads,
		reads,
		{400, `{"error": "unknown field demand"}`},
		reads,
		{200, `{"rate": 0.5, "leaseMs": 60000, "askEveryMs": 100}`},
		reads,
	}}
	server := httptest.NewServer(d)
	defer server.Close()
	r := started(t, Config{Daemon: server.URL, Instance: "pod-1", Interval: time.Hour, DisableFleetPacing: true})
	p := gate.Policy{Enabled: true, MinRate: 0.5, MaxRate: 100_000, Beta: 0.7, Scale: 0.4, Ramp: 16, Quiet: time.Hour, OverloadWhen: gate.AnyRefusal}
	g, err := gate.New(p, func() float64 { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	born := time.Now()
	g.Record(gate.Overloaded, 0, elapsed(born))
	// A critical call waits in line throughout: every ask's demand is classed.
	if _, verdict := g.TurnFor(gate.Asker{Class: gate.Critical}, elapsed(born)); verdict != gate.Queued {
		t.Fatal(verdict)
	}
	dependency := paced{service: "payments", gate: g, born: born}
	for i, want := range []struct {
		classed bool
		granted bool
	}{{false, true}, {true, true}, {true, false}, {false, true}, {true, true}, {false, true}} {
		// A sheddable call, bound to go within a nanosecond, is shed before each ask.
		now := elapsed(born)
		if _, verdict := g.TurnFor(gate.Asker{Class: gate.Sheddable, By: now + 1}, now); verdict != gate.Shed {
			t.Fatal(verdict)
		}
		if _, granted := r.ask(context.Background(), dependency); granted != want.granted {
			t.Fatalf("ask %d granted %v", i+1, granted)
		}
		body := d.sent()[i]
		classed := strings.Contains(body, `"shed":{"sheddable":1}`) && strings.Contains(body, `"demand":{"critical":`)
		if classed != want.classed || !want.classed && (strings.Contains(body, `"shed"`) || strings.Contains(body, `"demand"`)) {
			t.Fatalf("ask %d sent %s", i+1, body)
		}
	}
}

func TestAnAskThatGetsNoGrantChangesNothingAndIsCounted(t *testing.T) {
	d := &pacer{answers: []paceAnswer{
		{503, `{"error": "full"}`},
		{403, `{"error": "not yours"}`},
		{200, `this is not JSON {`},
		{200, `{"rate": 9, "leaseMs": 600}`},
		{200, `{"rate": 9, "leaseMs": -1, "askEveryMs": 100}`},
		{200, `{"rate": 3.5, "leaseMs": 60000, "askEveryMs": 0}`},
	}}
	server := httptest.NewServer(d)
	defer server.Close()
	var debug bytes.Buffer
	r := started(t, Config{Daemon: server.URL, Instance: "pod-1", Interval: time.Hour, DebugLogger: log.New(&debug, "", 0)})
	g, born := turnedOn(t)
	r.Track("payments", nil, time.Time{}, nil, g, born)
	if !within(func() bool { return r.Stats().PaceFailures >= 5 }) {
		t.Fatalf("%+v", r.Stats())
	}
	if s := r.Stats(); s.PaceFailures != 5 {
		t.Fatalf("%+v", s)
	}
	if !within(func() bool { rate, _ := g.RateAt(elapsed(born)); return rate == 3.5 }) {
		t.Fatal("never paced at the grant")
	}
	// askEveryMs 0 is 20 ms: the asks go on at least that often.
	granted := r.Stats().PaceAsks
	if !within(func() bool { return r.Stats().PaceAsks >= granted+10 }) {
		t.Fatalf("%+v", r.Stats())
	}
	asks, _ := d.seen()
	for _, ask := range asks[1:] {
		if ask.Overloaded != 0 {
			t.Fatalf("the refusal was told twice: %+v", asks)
		}
	}
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"no pace for payments (the daemon answered 503 Service Unavailable", "403 Forbidden", "not a grant"} {
		if !strings.Contains(debug.String(), want) {
			t.Errorf("%q is not logged: %s", want, debug.String())
		}
	}
}

func TestAGateThatIsOffOrAReporterThatDoesNotPaceAsksNothing(t *testing.T) {
	d := &pacer{answers: []paceAnswer{{200, `{"rate": 7.25, "leaseMs": 600, "askEveryMs": 20}`}}}
	server := httptest.NewServer(d)
	defer server.Close()
	alone := started(t, Config{Daemon: server.URL, Instance: "pod-1", Interval: time.Hour, DisableFleetPacing: true})
	on, onBorn := turnedOn(t)
	alone.Track("payments", nil, time.Time{}, nil, on, onBorn)

	paced := started(t, Config{Daemon: server.URL, Instance: "pod-2", Interval: time.Hour})
	off, born := gated(t, time.Millisecond)
	paced.Track("search", nil, time.Time{}, nil, off, born)
	// On, with nobody asking for a turn since: off once quiet for 1 ms,
	// though nothing turned it off.
	quiet, quietBorn := gated(t, time.Millisecond)
	quiet.Record(gate.Overloaded, 0, 0)
	paced.Track("inventory", nil, time.Time{}, nil, quiet, quietBorn)
	// Watching a dependency it has not seen accept anything: it waits to
	// see it down, as it would without a fleet.
	unseen, unseenBorn := gatedWhen(t, 5*time.Second, gate.MostRefused)
	unseen.Record(gate.Overloaded, 0, elapsed(unseenBorn))
	paced.Track("ledger", nil, time.Time{}, nil, unseen, unseenBorn)
	time.Sleep(500 * time.Millisecond)
	if asks, _ := d.seen(); len(asks) > 0 {
		t.Fatalf("%+v", asks)
	}
	if s := alone.Stats(); s.PaceAsks != 0 || !on.On() {
		t.Fatalf("%+v", s)
	}
	if quiet.On() {
		t.Fatal("the quiet gate was not asked whether it is on")
	}
	if !unseen.Watching() {
		t.Fatal("the gate that has seen nothing accepted stopped watching")
	}
}

// closedFleetBreaker is a fleet-scoped breaker that two failures open,
// for a second, closed.
func closedFleetBreaker(t *testing.T) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New(breaker.Policy{
		Enabled: true, ConsecutiveFailures: 2, FailureRateThreshold: 0.5, SlowCallRateThreshold: 1,
		SlowCallDuration: time.Minute, MinimumCalls: 10, Window: breaker.SlidingWindow{Calls: 10},
		OpenTimeout: time.Second, HalfOpenMaxCalls: 2, SuccessThreshold: 2, FleetScoped: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fleetBreaker is closedFleetBreaker opened by two failures, and the time
// its clock started.
func fleetBreaker(t *testing.T) (*breaker.Breaker, time.Time) {
	t.Helper()
	b := closedFleetBreaker(t)
	for i := 0; i < 2; i++ {
		permit, err := b.Acquire(0)
		if err != nil {
			t.Fatal(err)
		}
		permit.Record(true, 0)
	}
	return b, time.Now()
}

func TestAnOpenFleetScopedBreakerAsksForTrialsAndClosesWhenTheFleetDoes(t *testing.T) {
	d := &pacer{answers: []paceAnswer{
		{200, `{"rate": 0, "leaseMs": 1000, "askEveryMs": 100, "breaker": {"state": "half-open", "trials": 1, "retryInMs": 0}}`},
		{200, `{"rate": 0, "leaseMs": 1000, "askEveryMs": 100, "breaker": {"state": "closed", "trials": 0, "retryInMs": 0}}`},
	}}
	server := httptest.NewServer(d)
	defer server.Close()
	r := started(t, Config{Daemon: server.URL, Instance: "pod-1", Interval: time.Hour})
	b, born := fleetBreaker(t)
	if _, err := b.Acquire(elapsed(born)); err == nil {
		t.Fatal("an open breaker let a call through")
	}
	r.Track("ledger", b, born, nil, nil, time.Time{})
	if !within(func() bool { return b.State() == breaker.Closed }) {
		t.Fatalf("the fleet's close did not close it: %v", b.State())
	}
	asks, _ := d.seen()
	first := asks[0]
	if !first.GateOff || first.Breaker == nil || !first.Breaker.Open || first.Breaker.Refused != 1 {
		t.Fatalf("the first ask is not a breaker's: %+v %+v", first, first.Breaker)
	}
	if bodies := d.sent(); strings.Contains(bodies[0], "watching") || !strings.Contains(bodies[0], `"gateOff":true`) {
		t.Fatalf("sent %s", bodies[0])
	}
}

func TestAFleetClosedBreakerHandsAnOffGateToTheDaemonsPace(t *testing.T) {
	d := &pacer{answers: []paceAnswer{
		{200, `{"rate": 3.5, "leaseMs": 60000, "askEveryMs": 100, "pace": true, "breaker": {"state": "closed", "trials": 0, "retryInMs": 0}}`},
	}}
	server := httptest.NewServer(d)
	defer server.Close()
	r := started(t, Config{Daemon: server.URL, Instance: "pod-1", Interval: time.Hour})
	b, breakerBorn := fleetBreaker(t)
	g, gateBorn := gated(t, 5*time.Second)
	r.Track("ledger", b, breakerBorn, nil, g, gateBorn)
	if !within(func() bool { return b.State() == breaker.Closed && g.On() }) {
		t.Fatalf("breaker %v, gate on %v", b.State(), g.On())
	}
	if rate, _ := g.RateAt(elapsed(gateBorn)); rate != 3.5 {
		t.Fatalf("paced at %v, not the fleet's grant", rate)
	}
}

func TestNothingIsAskedOnceTheGateAndTheBreakerHaveNothingToSay(t *testing.T) {
	g, gateBorn := gated(t, 5*time.Second)
	quiet := paced{service: "ledger", gate: g, born: gateBorn, breaker: closedFleetBreaker(t), breakerBorn: time.Now()}
	if ask, ok := quiet.paceAsk("pod-1", false); ok {
		t.Fatalf("an off gate and a closed breaker asked %+v", ask)
	}
	open, born := fleetBreaker(t)
	if ask, ok := (paced{service: "ledger", breaker: open, breakerBorn: born}).paceAsk("pod-1", false); !ok || !ask.GateOff || ask.Breaker == nil {
		t.Fatalf("an open breaker asked %+v (%v)", ask, ok)
	}
}
