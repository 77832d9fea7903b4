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

	"github.com/stormguard/stormguard/clients/go/gate"
)

// Fleet pacing, the process's side: while a dependency's send gate is on,
// the reporter asks the daemon about every 100 ms for this process's share
// of the rate the whole fleet may send it, and the gate paces at that
// share for the lease. A gate that only watches (under overloadWhen:
// most-refused, after a refusal from a dependency that accepts) asks too,
// with what it heard: the daemon judges from the whole fleet's answers
// whether they are a capacity's, and if so the grant says pace and the
// gate turns on. A daemon that cannot be reached, or refuses, changes
// nothing: the gate paces by its own rate once the last lease ends.

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
	Watching   bool   `json:"watching,omitempty"`
}

// paceGrant is the daemon's answer; rate, leaseMs and askEveryMs are
// required. Pace, absent from older daemons (false), says the daemon holds
// the fleet back: a watching gate turns on.
type paceGrant struct {
	Rate       *float64 `json:"rate"`
	LeaseMs    *uint64  `json:"leaseMs"`
	AskEveryMs *uint64  `json:"askEveryMs"`
	Pace       bool     `json:"pace"`
}

// paced is a tracked dependency whose gate asks the daemon: on, or watching.
type paced struct {
	service string
	gate    *gate.Gate
	born    time.Time
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

// paced is the tracked dependencies whose gate asks the daemon now (on, or
// watching a dependency that lately accepted something: gate.AsksFleet),
// by name.
func (r *Reporter) paced() []paced {
	r.mu.Lock()
	var gated []paced
	for service, counts := range r.services {
		if counts.gate != nil {
			gated = append(gated, paced{service, counts.gate, counts.gateBorn})
		}
	}
	r.mu.Unlock()
	asking := gated[:0]
	for _, p := range gated {
		if p.gate.AsksFleet(elapsed(p.born)) {
			asking = append(asking, p)
		}
	}
	sort.Slice(asking, func(i, j int) bool { return asking[i].service < asking[j].service })
	return asking
}

// ask asks once for p's share and leases the grant to its gate, turning a
// watching gate on first if the grant says pace: the time to the next
// round the grant sets, and whether there was a grant.
func (r *Reporter) ask(ctx context.Context, p paced) (time.Duration, bool) {
	tally := p.gate.Tally()
	grant, err := r.askFor(ctx, paceAsk{
		Service:    p.service,
		Instance:   r.config.Instance,
		Sent:       tally.Sent,
		Accepted:   tally.Accepted,
		Overloaded: tally.Overloaded,
		TimedOut:   tally.TimedOut,
		Waiting:    tally.Waiting,
		Watching:   tally.Watching,
	})
	if ctx.Err() != nil {
		return 0, false // stopping: not a failure of the daemon's
	}
	if err != nil {
		r.count(func(s *Stats) { s.PaceAsks++; s.PaceFailures++ })
		r.debug.Printf("stormguard reporter: no pace for %s (%v); the gate paces alone", p.service, err)
		return 0, false
	}
	now := elapsed(p.born)
	if grant.Pace {
		p.gate.PaceByFleet(now)
	}
	lease := longestLease
	if ms := *grant.LeaseMs; ms < uint64(longestLease/time.Millisecond) {
		lease = time.Duration(ms) * time.Millisecond
	}
	p.gate.Lease(*grant.Rate, now+uint64(lease), now)
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
