// Fleet pacing: asking the daemon (POST /v1/pace) for this process's
// share of a dependency's rate and for the fleet breaker's word.

package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"time"

	"github.com/stormguard/stormguard/clients/go/breaker"
	"github.com/stormguard/stormguard/clients/go/gate"
)

// Fleet pacing, the process's side: while a dependency's send gate is on,
// the reporter asks the daemon about every 100 ms for this process's share
// of the rate the whole fleet may send it, and the gate paces at that
// share for the lease. A gate that only watches (under overloadWhen:
// most-refused, after a refusal from a dependency that accepts) asks too,
// with what it heard: the daemon judges from the whole fleet's answers
// whether they are a capacity's, and if so the grant says pace and the
// gate turns on. While a fleet-scoped breaker is open, the same ask reports
// it, and the answer carries the fleet breaker's word: a trial slot, or
// close. A daemon that cannot be reached, or refuses, changes nothing: the
// gate paces by its own rate once the last lease ends, and the breaker
// decides its trials alone. An ask tells the calls shed and the demand by
// class only to a daemon whose last grant said it reads them (classes): one
// that predates classes refuses an ask with fields it does not know.

const (
	// askTimeout is the longest an ask may take: a grant later than this is stale.
	askTimeout = 500 * time.Millisecond
	// firstAskEvery is the time between asks until a grant sets it.
	firstAskEvery = 100 * time.Millisecond
	// fastestAsks and slowestAsks bound the time between asks a daemon may set.
	fastestAsks = 20 * time.Millisecond
	slowestAsks = time.Second
	// longestLease bounds how long a grant is kept.
	longestLease = time.Minute
)

// paceAsk is an ask, as POST /v1/pace takes it: the gate's tally.
// Watching is sent only when true, as the Rust client sends it: a daemon
// that hears none takes the gate for on.
type paceAsk struct {
	Service    string `json:"service"`
	Instance   string `json:"instance"`
	Sent       uint64 `json:"sent"`
	Accepted   uint64 `json:"accepted"`
	Overloaded uint64 `json:"overloaded"`
	TimedOut   uint64 `json:"timedOut"`
	Waiting    uint64 `json:"waiting"`
	// Shed is, by class name, the calls the gate shed since the last ask,
	// their turn too far off or their wait in line over: demand it could
	// not serve. Only classes that shed any; none, left out. Sent only to
	// a daemon whose last grant said it reads classes.
	Shed map[string]uint64 `json:"shed,omitempty"`
	// Demand is, by class name, the calls that asked for a turn since the
	// last ask plus those waiting now: the daemon counts the process's want
	// as each class's in proportion, and gives the fleet's rate to more
	// critical classes first. Sent only to a daemon whose last grant said
	// it reads classes, and only while some call is critical or sheddable:
	// a fleet whose calls are all of the default class asks as before.
	Demand   map[string]uint64 `json:"demand,omitempty"`
	Watching bool              `json:"watching,omitempty"`
	// GateOff says the gate does not ask (or there is none): the process
	// asks for its breaker alone, and its counts say nothing.
	GateOff bool        `json:"gateOff,omitempty"`
	Breaker *breakerAsk `json:"breaker,omitempty"`
}

// breakerAsk is a fleet-scoped breaker's part of an ask.
type breakerAsk struct {
	Open            bool   `json:"open"`
	OpenForMs       uint64 `json:"openForMs"`
	Refused         uint64 `json:"refused"`
	TrialsSucceeded uint32 `json:"trialsSucceeded"`
	TrialsFailed    uint32 `json:"trialsFailed"`
}

// breakerWord is the fleet breaker's word in an answer.
type breakerWord struct {
	State     string `json:"state"`
	Trials    uint32 `json:"trials"`
	RetryInMs uint64 `json:"retryInMs"`
}

// paceGrant is the daemon's answer; rate, leaseMs and askEveryMs are
// required. Pace, absent from older daemons (false), says the daemon holds
// the fleet back: a watching gate turns on.
type paceGrant struct {
	Rate       *float64 `json:"rate"`
	LeaseMs    *uint64  `json:"leaseMs"`
	AskEveryMs *uint64  `json:"askEveryMs"`
	Pace       bool     `json:"pace"`
	// Breaker is the fleet breaker's word, if the ask reported a breaker.
	Breaker *breakerWord `json:"breaker"`
	// Classes says the daemon reads an ask's classes (shed and demand);
	// absent from daemons that predate them (false), which refuse an ask
	// that carries them.
	Classes bool `json:"classes"`
}

// paced is a tracked dependency that asks the daemon: its gate is on or
// watching, or its fleet-scoped breaker is open.
type paced struct {
	service     string
	gate        *gate.Gate
	born        time.Time
	breaker     *breaker.Breaker
	breakerBorn time.Time
}

// paceLoop asks for every tracked dependency whose gate is on or
// watching, every askEveryMs from the start of one round of asks to the
// next, or as soon as a round that took longer is done, until ctx ends.
func (r *Reporter) paceLoop(ctx context.Context) {
	defer close(r.paceDone)
	every := firstAskEvery
	round := time.Now()
	for {
		timer := time.NewTimer(time.Until(round.Add(every)))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		round = time.Now()
		for _, p := range r.paced() {
			if next, granted := r.ask(ctx, p); granted {
				every = next
			}
		}
	}
}

// paced is the tracked dependencies that ask the daemon now, by name: their
// gate is on or watching a dependency that lately accepted something
// (gate.AsksFleet), or their fleet-scoped breaker has something to say
// (breaker.AsksFleet).
func (r *Reporter) paced() []paced {
	r.mu.Lock()
	var tracked []paced
	for service, counts := range r.services {
		if counts.gate != nil || counts.breaker != nil {
			tracked = append(tracked, paced{service, counts.gate, counts.gateBorn, counts.breaker, counts.breakerBorn})
		}
	}
	r.mu.Unlock()
	asking := tracked[:0]
	for _, p := range tracked {
		if p.gateAsks() || (p.breaker != nil && p.breaker.AsksFleet()) {
			asking = append(asking, p)
		}
	}
	sort.Slice(asking, func(i, j int) bool { return asking[i].service < asking[j].service })
	return asking
}

// gateAsks says whether p's gate asks for its share now.
func (p paced) gateAsks() bool {
	return p.gate != nil && p.gate.AsksFleet(elapsed(p.born))
}

// paceAsk is what p tells the daemon now: its gate's tally if the gate
// asks, with the calls shed and the demand by class if the daemon reads
// them (classes), its fleet-scoped breaker's report if it has one; false
// if neither has anything to say any more (the gate turned off or the
// breaker closed since the round began).
func (p paced) paceAsk(instance string, classes bool) (paceAsk, bool) {
	ask := paceAsk{Service: p.service, Instance: instance, GateOff: true}
	if p.gateAsks() {
		tally := p.gate.Tally()
		ask.GateOff = false
		ask.Sent, ask.Accepted, ask.Overloaded = tally.Sent, tally.Accepted, tally.Overloaded
		ask.TimedOut, ask.Waiting, ask.Watching = tally.TimedOut, tally.Waiting, tally.Watching
		if classes {
			ask.Shed, ask.Demand = classesOf(tally)
		}
	}
	if p.breaker != nil && p.breaker.AsksFleet() {
		if report, ok := p.breaker.FleetReport(elapsed(p.breakerBorn)); ok {
			ask.Breaker = &breakerAsk{
				Open:            report.Open,
				OpenForMs:       uint64(report.OpenFor / time.Millisecond),
				Refused:         report.Refused,
				TrialsSucceeded: report.Succeeded,
				TrialsFailed:    report.Failed,
			}
		}
	}
	return ask, !ask.GateOff || ask.Breaker != nil
}

// classesOf is the calls shed and the demand of tally by class name, as
// an ask carries them: the shed only for classes that shed any, the
// demand only while some call is of a class other than the default.
func classesOf(tally gate.Tally) (shed, demand map[string]uint64) {
	classed := tally.Demand[gate.Critical.Rank()] > 0 || tally.Demand[gate.Sheddable.Rank()] > 0
	for _, class := range gate.Classes {
		if count := tally.Shed[class.Rank()]; count > 0 {
			if shed == nil {
				shed = map[string]uint64{}
			}
			shed[class.String()] = count
		}
		if classed {
			if demand == nil {
				demand = map[string]uint64{}
			}
			demand[class.String()] = tally.Demand[class.Rank()]
		}
	}
	return shed, demand
}

// heard hands a grant to p: the fleet breaker's word to its breaker, then
// the lease to its gate, turning the gate on first if the grant says pace
// (a breaker the fleet closed hands the dependency to the daemon's pace).
func (p paced) heard(grant *paceGrant, lease time.Duration) {
	closed := false
	if p.breaker != nil && grant.Breaker != nil {
		verdict := breaker.Verdict{
			Trials:  grant.Breaker.Trials,
			RetryIn: time.Duration(grant.Breaker.RetryInMs) * time.Millisecond,
		}
		switch grant.Breaker.State {
		case "closed":
			verdict.State = breaker.Closed
		case "half-open":
			verdict.State = breaker.HalfOpen
		default:
			verdict.State = breaker.Open
		}
		now := elapsed(p.breakerBorn)
		closed = p.breaker.Heard(verdict, now+uint64(lease), now)
	}
	if p.gate == nil {
		return
	}
	now := elapsed(p.born)
	if grant.Pace {
		if closed {
			p.gate.ResumeByFleet(now)
		} else {
			p.gate.PaceByFleet(now)
		}
	}
	p.gate.Lease(*grant.Rate, now+uint64(lease), now)
}

// ask asks once for p's share and its breaker's word, with the calls'
// classes if the daemon's last grant said it reads them, and hands the
// grant to p: the time to the next round the grant sets, and whether there
// was a grant. The grant says whether the next ask may carry classes; an
// ask that got none (refused, say, by a replica that predates classes,
// mid-rollout) says not.
func (r *Reporter) ask(ctx context.Context, p paced) (time.Duration, bool) {
	ask, ok := p.paceAsk(r.config.Instance, r.classes.Load())
	if !ok {
		return 0, false
	}
	grant, err := r.askFor(ctx, ask)
	if ctx.Err() != nil {
		return 0, false // stopping: not a failure of the daemon's
	}
	r.classes.Store(err == nil && grant.Classes)
	if err != nil {
		r.count(func(s *Stats) { s.PaceAsks++; s.PaceFailures++ })
		r.debug.Printf("stormguard reporter: no pace for %s (%v); the gate paces alone", p.service, err)
		return 0, false
	}
	lease := longestLease
	if ms := *grant.LeaseMs; ms < uint64(longestLease/time.Millisecond) {
		lease = time.Duration(ms) * time.Millisecond
	}
	p.heard(grant, lease)
	// Counted once leased, so that whoever reads the count sees the lease.
	r.count(func(s *Stats) { s.PaceAsks++ })
	every := slowestAsks
	if ms := *grant.AskEveryMs; ms < uint64(slowestAsks/time.Millisecond) {
		every = time.Duration(ms) * time.Millisecond
	}
	if every < fastestAsks {
		every = fastestAsks
	}
	return every, true
}

// askFor POSTs ask: the grant, or why there is none (no answer, a status
// other than 2xx, an answer that is not a grant).
func (r *Reporter) askFor(ctx context.Context, ask paceAsk) (*paceGrant, error) {
	body, _ := json.Marshal(ask) // plain data: it always encodes
	request, err := http.NewRequestWithContext(ctx, http.MethodPost, r.config.Daemon+"/v1/pace", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	request.Header.Set("Content-Type", "application/json")
	r.token.Authorize(request)
	response, err := r.asker.Do(request)
	if err != nil {
		return nil, err
	}
	defer response.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(response.Body, 1<<16))
	if response.StatusCode < 200 || response.StatusCode > 299 {
		return nil, fmt.Errorf("the daemon answered %s: %s", response.Status, answer)
	}
	if err != nil {
		return nil, err
	}
	var grant paceGrant
	if err := json.Unmarshal(answer, &grant); err != nil {
		return nil, fmt.Errorf("an answer that is not a grant: %v", err)
	}
	if grant.Rate == nil || grant.LeaseMs == nil || grant.AskEveryMs == nil {
		return nil, errors.New("an answer that is not a grant: rate, leaseMs and askEveryMs are required")
	}
	return &grant, nil
}

// elapsed is the time since born in nanoseconds, on the monotonic clock:
// a gate's time, when born is when its clock started.
func elapsed(born time.Time) uint64 {
	d := time.Since(born)
	if d < 0 {
		return 0
	}
	return uint64(d)
}
