// Package gate is the send gate, the same as stormguard's Rust library's
// (the shared test vectors check it verdict by verdict): an adaptive
// limiter, per process and dependency, that every attempt (first tries and
// retries) passes while the dependency is unwell, so that a herd returns
// to a recovering dependency at the rate it can take rather than all at
// once.
//
//   - Off while healthy. Asking for a turn is one atomic load; outcomes
//     that say nothing is wrong are ignored. The first outcome that says
//     the dependency is overloaded or down turns the gate on.
//   - On: paced turns, first come first served within a class (see
//     Criticality): critical calls wait ahead of the others, sheddable ones
//     behind. Turns are 1/rate apart. An attempt that cannot go at once
//     takes a Ticket and waits in line; only the first in line waits for a
//     time, the others wait to be woken, so the line moves as soon as the
//     rate grows. The caller bounds the wait (Asker.By: its class's MaxWait
//     after the call began, or its deadline if sooner) and gives up its
//     place when it passes (GiveUp: the call is counted shed); an attempt
//     whose turn, at the present pace, would come after that is shed at
//     once, taking no place. While the gate probes a dependency that has
//     accepted nothing, a turn is expected at the next probe, whoever waits
//     ahead: the line moves at once when the dependency is back.
//   - The rate is learned from outcomes. Until something is accepted, the
//     gate probes at MinRate. Accepted attempts then grow the rate quickly
//     (slow start: each adds Ramp turns per second). A refusal after that
//     cuts it by Beta, never below what the dependency accepted over the
//     last second, and regrows it along CUBIC's curve towards, then past,
//     the rate at which it failed; the refusal that ends slow start cuts to
//     that delivery rate instead. As in TCP, an overload cuts the rate
//     once: attempts sent before the cut do not cut it again. A timeout
//     cuts to a share of the most the dependency accepted in a second of
//     the last three, and until a refusal shows it answering at once, the
//     rate grows no faster than 1.25 times that most.
//   - Off again once nothing has been refused and nobody has had to wait
//     for Quiet.
//   - Unless Policy.OverloadWhen is AnyRefusal, for a dependency that
//     fails a share of requests at random (which the above would pace down
//     by that share, every second), a refusal says overload only once
//     refusals outnumber acceptances over the last second by more than
//     chance would (Google's client-side throttling, K = 2), or when
//     refusals have come with nothing accepted for three seconds (the
//     dependency is down: on, probing, as above; under MostRefused three
//     refusals, under Evidence five in a row or three over a second). Until
//     then the gate watches: off,
//     counting answers; if they come to show overload, it turns on at
//     twice what the dependency delivered. Under MostRefused, once
//     something is accepted, the rate is never below twice what was
//     accepted over the last second, and a refusal cuts it only while
//     refusals outnumber acceptances; under Evidence a dependency found
//     down recovers as under AnyRefusal. A timeout turns the gate on at
//     once under every setting.
//   - The fleet. While on, or watching a dependency that has lately
//     accepted something (AsksFleet), the process tells the fleet's
//     coordinator what the gate heard (Tally) and paces at the share it
//     grants (Lease). A watching gate's tally counts every answer heard
//     since the refusal that began watching; if the coordinator, hearing
//     every process, holds the fleet back, its grant says pace and the
//     gate turns on (PaceByFleet).
//
// Times are nanoseconds since the gate's creation on a clock that does not
// go back; decisions take the time as an argument, so a test drives the
// very code a client runs.
package gate

import (
	"fmt"
	"math"
	"math/rand"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Ticket is a place in a gate's line: a number unique within its gate, in
// the order tickets were taken. The line is in the order of its places:
// every class ahead of the less critical ones, and within a class, first
// come first served. A claim told Go uses it up, as leaving does.
type Ticket uint64

// Verdict is what an attempt asking for a turn is told (Go, Queued or
// Shed), and what the holder of a ticket is told when it claims its turn
// (Go, At or Behind).
type Verdict uint8

// The verdicts of a turn and of a claim.
const (
	// Go: send now; a claim's ticket is used up.
	Go Verdict = iota
	// At: first in line; claim again at the time Claim gives (sooner, if
	// woken: the rate may grow meanwhile).
	At
	// Behind: others are ahead; claim again when woken.
	Behind
	// Queued: wait in line under the ticket given: Claim with it until
	// told Go, or Leave.
	Queued
	// Shed: at the present pace the attempt's turn would come after the
	// time it may wait until (Asker.By): the call fails now instead,
	// taking no place.
	Shed
)

// String is the verdict's name: "go", "at", "behind", "queued" or "shed".
func (v Verdict) String() string {
	switch v {
	case Go:
		return "go"
	case At:
		return "at"
	case Behind:
		return "behind"
	case Queued:
		return "queued"
	case Shed:
		return "shed"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// Signal is what an attempt's outcome says about the dependency.
type Signal uint8

// The signals.
const (
	// Accepted: answered well, or failed in a way that says nothing about
	// load (an error the dependency answered with, such as a 500).
	Accepted Signal = iota
	// Overloaded: overloaded or down: a failure the policy retries that
	// Policy.OverloadOn covers (by default a refused connection, a timeout,
	// 429 or 503), or an answer with a Retry-After (see Policy.Overloads).
	// Unless Policy.OverloadWhen is AnyRefusal, the gate reads a refusal
	// as overload only once refusals outnumber acceptances, or enough
	// have come with nothing accepted for three seconds.
	Overloaded
	// TimedOut: no answer in time. Unlike a refusal, the dependency may
	// still be working on it: the rate is cut to what it has lately been
	// seen to accept, not by a share of what was sent.
	TimedOut
)

// String is the signal's name: "accepted", "overloaded" or "timed_out".
func (s Signal) String() string {
	switch s {
	case Accepted:
		return "accepted"
	case Overloaded:
		return "overloaded"
	case TimedOut:
		return "timed_out"
	}
	return fmt.Sprintf("Signal(%d)", uint8(s))
}

// Tally is what a gate saw since it was last asked: what a process tells
// the fleet's coordinator.
type Tally struct {
	// Sent is the turns given (attempts sent) while on, or, while
	// watching, every outcome heard.
	Sent uint64
	// Accepted is the attempts accepted while on or watching.
	Accepted uint64
	// Overloaded is the attempts refused or timed out while on, the one
	// that turned the gate on included, or refused while watching, the
	// one that began it left out (every process would report one, and
	// none of the acceptances before it).
	Overloaded uint64
	// TimedOut is those of them that timed out.
	TimedOut uint64
	// Waiting is the attempts waiting in line now: the demand not yet served.
	Waiting uint64
	// Watching says the gate is off, watching (unless AnyRefusal): the
	// counts are of what it heard since it began to, every attempt sent
	// unpaced. The fleet's coordinator judges from every process's
	// whether the refusals are a capacity's.
	Watching bool
	// Shed is, by class (in the order of Classes: index by Rank), the
	// calls the gate failed for want of a turn while on: shed at once
	// (their turn too far off), or after waiting in line as long as they
	// could (GiveUp). Demand the pace did not serve.
	Shed [3]uint64
	// Demand is, by class (in the order of Classes), the calls that asked
	// for a turn while on plus those waiting now: what each class wants,
	// in proportion, of what the fleet gives this process.
	Demand [3]uint64
}

// Gate is the send gate of one dependency in one process, shared by every
// call to it; its methods may be called from any goroutine.
type Gate struct {
	// policy is its settings, under mu: Retune replaces them with a new
	// version's that hears overload as they do.
	policy Policy
	// overloadWhen is policy.OverloadWhen, fixed for the gate's life (a
	// change of it voids what the gate learned) and read on every healthy
	// answer without the lock.
	overloadWhen OverloadWhen
	on           atomic.Bool
	// watching says the gate is off but has heard a refusal (unless
	// AnyRefusal): outcomes are counted until they show overload (the gate
	// turns on) or Quiet passes without another refusal.
	watching atomic.Bool
	// lastAccepted is, unless AnyRefusal, the tenth of a second (since the
	// gate's creation, plus one; 0: never) of the last accepted attempt:
	// whether the dependency was lately accepting. It is stored at most
	// once a tenth while healthy, so noting it costs a healthy call a load.
	lastAccepted atomic.Uint64

	mu sync.Mutex
	// rate is the rate learned from this process's own outcomes.
	rate rate
	// pacer is turns as credit, at the lease's rate if the fleet granted
	// one, else at rate's.
	pacer pacer
	// lastTrouble is the last overload, or when someone last had to wait:
	// the gate turns off Quiet after the later of the two.
	lastTrouble uint64
	// line is the tickets waiting, in the order of their turns: by class,
	// most critical first, then by ticket.
	line       []waiter
	nextTicket Ticket
	tally      Tally
	// asked is, by class (in the order of Classes), the calls that asked
	// for a turn since the last tally; a retry rejoining its place is not
	// counted again.
	asked [3]uint64
	// draw draws each turn-on's first credit, so that processes that
	// failed together do not probe together.
	draw func() float64
	// watch is, while watching, what the dependency answered since
	// watching began.
	watch answers
	// refusalRun is, while watching, the refusals since the last
	// acceptance (or since watching began), the first of them at
	// refusalRunSince.
	refusalRun      uint32
	refusalRunSince uint64
	// outageRun is, once on for a dependency found down, the refusals in a
	// row, with nothing accepted, that found it down and met the probes
	// since.
	outageRun uint32
	// downSince is when the gate last turned on for a dependency found down.
	downSince uint64
	// untriedUntil is, after an outage of outageRunLimit refusals or more,
	// until when its recovery is not tried for failure at random (0: no
	// such outage).
	untriedUntil uint64
	// trials are, under Evidence, once on for a dependency found down,
	// what the gate's cuts do to the refusals.
	trials trials
}

// downAfterTenths is how long, in tenths of a second, the dependency must
// have accepted nothing (unless AnyRefusal) for a refusal to turn the gate
// on at once, as for a dependency that is down: as long as the gate's
// counts go back.
const downAfterTenths = 30

// downRefusals is how many refusals, with nothing accepted lately, show a
// dependency down: under MostRefused within three seconds, under Evidence
// in a row over downSpan. One would do for a gate that has heard nothing
// else, but a process's first answers come from a dependency that fails a
// share at random too: at a half, the first is refused in one process of
// two, the first three in one of eight. A herd of callers refused together
// counts three at once.
const downRefusals = 3

// downRun is, under Evidence, the refusals in a row, with nothing accepted
// lately, that show a dependency down at once: a herd's callers, refused
// together, count five at once. A dependency failing a half at random
// refuses a process's first five about once in 32 starts; the gate then
// probes, and the trials of its cuts find the refusals random within a few
// dozen answers.
const downRun = 5

// downSpan is, under Evidence, how long downRefusals in a row, with nothing
// accepted lately, must span to show a dependency down: a process that
// sends a few attempts a second to a dependency failing up to a half at
// random hears one accepted within a second, while a process with one
// caller, whose retries back off, counts five only after seconds.
const downSpan = time.Second

// outageRunLimit is, under Evidence, the refusals in a row, with nothing
// accepted, past which a gate that found its dependency down does not try
// its cuts while it recovers (for as long again as the dependency was
// down): a half failed at random gives twenty in a row once in a million
// runs, so the dependency was down, and the refusals after its return are a
// capacity's. A trial holds the rate at its cut until it has counted twenty
// answers; at a limit that counts what it refuses (a request-rate limit)
// the hold keeps its window full.
const outageRunLimit = 20

// watched is what an outcome heard while off says.
type watched uint8

const (
	// notYet: not overload yet; the gate stays off.
	notYet watched = iota
	// down: nothing accepted lately, or a timeout: the gate turns on
	// probing.
	down
	// outnumbered: refusals have come to outnumber acceptances; the gate
	// turns on judging the dependency to answer.
	outnumbered
)

type waiter struct {
	ticket Ticket
	class  Criticality
	// wake, if set, is told when the answer to the ticket's claim may
	// have changed.
	wake chan<- struct{}
}

// New makes a gate, off, with p's settings (a bad setting is an error
// naming it). draw gives each turn-on's first credit, in [0, 1): a random
// source of its own when nil.
func New(p Policy, draw func() float64) (*Gate, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	if draw == nil {
		draw = rand.New(rand.NewSource(time.Now().UnixNano())).Float64
	}
	return &Gate{policy: p, overloadWhen: p.OverloadWhen, rate: probingRate(p, 0), draw: draw, watch: newAnswers(0)}, nil
}

// Retune takes up p, a new version of the gate's settings, keeping what
// the gate has learned (on or off, its rate, judgement, trials and line):
// its rates, CUBIC's constants and Quiet shape what comes next, and the
// rate stays within the new bounds. It says whether it did: a change that
// voids what the gate learned (see Policy.Unlearned), or a bad setting,
// is refused, and needs a new gate.
func (g *Gate) Retune(p Policy) bool {
	if p.Check() != nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.policy.Unlearned(p) != "" {
		return false
	}
	g.rate.now = math.Min(math.Max(g.rate.now, p.MinRate), p.MaxRate)
	if g.pacer.lease != nil {
		g.pacer.lease.rate = minFloat(g.pacer.lease.rate, p.MaxRate)
	}
	g.policy = p
	// The first in line may be due sooner now.
	g.wakeFirst()
	return true
}

// Settings returns the gate's settings now.
func (g *Gate) Settings() Policy {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.policy
}

// On says whether the gate paces attempts now.
func (g *Gate) On() bool { return g.on.Load() }

// OnAt says whether the gate paces attempts at now: it turns off here if
// it has been quiet long enough and nobody waits, as it would at the next
// turn, so that a gate nobody has asked for a turn since its trouble does
// not look on forever.
func (g *Gate) OnAt(now uint64) bool {
	if !g.On() {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.turnOffIfQuiet(now)
}

// Watching says whether the gate is off but counting what the dependency
// answers since a refusal (unless Policy.OverloadWhen is AnyRefusal): it
// turns on if refusals come to outnumber acceptances.
func (g *Gate) Watching() bool { return g.watching.Load() }

// Answering says whether the gate is on judging the dependency to answer
// rather than to be overloaded (under Policy.OverloadWhen MostRefused,
// once something has been accepted): a refusal then cuts the rate only
// while refusals outnumber acceptances. False while off.
func (g *Gate) Answering() bool {
	if !g.On() {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rate.answering
}

// Rate is the rate the gate paced at as of its last turn or outcome, in
// attempts per second (the fleet's grant while one lasted, else its own),
// and false while it is off. RateAt is the rate at a given time.
func (g *Gate) Rate() (float64, bool) {
	if !g.On() {
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pacer.pace(g.rate.now), true
}

// RateAt is the rate the gate paces at now: the fleet's grant if its lease
// still runs, else its own; false while the gate is off.
func (g *Gate) RateAt(now uint64) (float64, bool) {
	if !g.On() {
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pacer.paceAt(g.rate.now, now), true
}

// OwnRate is the rate learned from this process's own outcomes, and false
// while the gate is off.
func (g *Gate) OwnRate() (float64, bool) {
	if !g.On() {
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rate.now, true
}

// Phase is where the gate's own rate is in its law: "off", or while on
// "probing", "slow_start", "cubic" (after a cut, below the rate it was cut
// at) or "regrown" (back at or past it).
func (g *Gate) Phase() string {
	if !g.On() {
		return "off"
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rate.phaseName()
}

// Credit is the turns' credit as of the gate's last accrual.
func (g *Gate) Credit() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pacer.credit
}

// Tally is what the gate saw since the last tally, who waits now, and
// whether it watches.
func (g *Gate) Tally() Tally {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.tally
	t.Waiting = uint64(len(g.line))
	t.Watching = g.Watching()
	t.Demand = g.asked
	for _, w := range g.line {
		t.Demand[w.class.Rank()]++
	}
	g.asked = [3]uint64{}
	g.tally = Tally{}
	return t
}

// AsksFleet says whether the process asks the fleet's coordinator for its
// share at now: its gate is on (OnAt), or off and watching a dependency
// that has lately accepted something, so that the coordinator hears what
// it counts and may tell it to pace (PaceByFleet). A gate that watches a
// dependency that has not waits to see it down, as it would without a
// fleet.
func (g *Gate) AsksFleet(now uint64) bool {
	return g.OnAt(now) || g.Watching() && g.acceptedLately(now)
}

// PaceByFleet turns a watching gate on at now because the fleet's
// coordinator, hearing every process, holds the fleet back (its grant
// says pace); it says whether it did, and does nothing to a gate that is
// on or not watching. The grant then paces the gate (Lease); its own rate,
// should grants stop, is that of a dependency judged to answer, or, if
// nothing was accepted lately, to be down (probing). The tally starts
// again from nothing: the fleet heard what it counted while watching.
func (g *Gate) PaceByFleet(now uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.On() || !g.Watching() {
		return false
	}
	if g.acceptedLately(now) {
		g.turnOnAnswering(Overloaded, now)
	} else {
		g.turnOn(Overloaded, now, now)
	}
	g.tally = Tally{}
	return true
}

// ResumeByFleet says the fleet's breaker closed at now and the daemon takes
// the fleet back at its pace: the gate turns on if it is off, as for a
// dependency that has accepted nothing yet (it went quiet while the breaker
// refused every call), so that the fleet's grant, not every process at
// once, sets what is sent; a watching gate turns on as PaceByFleet turns
// it. It says whether it turned on.
func (g *Gate) ResumeByFleet(now uint64) bool {
	if g.Watching() {
		return g.PaceByFleet(now)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.On() {
		return false
	}
	g.turnOn(Overloaded, now, now)
	g.tally = Tally{}
	return true
}

// Waiting is the number of attempts waiting in line.
func (g *Gate) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.line)
}

// FirstInLine is the first ticket in line and when its turn is due, and
// false if nobody waits.
func (g *Gate) FirstInLine() (Ticket, uint64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.line) == 0 {
		return 0, 0, false
	}
	return g.line[0].ticket, g.pacer.due(g.rate.now), true
}

// Lease paces at rate until until instead of the gate's own rate: the
// fleet's grant. It is ignored while the gate is off, if rate is not a
// positive number, or if until is not after now; it is at most MaxRate.
func (g *Gate) Lease(rate float64, until, now uint64) {
	if !g.On() || !(rate > 0) || math.IsInf(rate, 1) || until <= now {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pacer.accrue(g.rate.now, now)
	g.pacer.lease = &lease{rate: minFloat(rate, g.policy.MaxRate), until: until, since: now}
	g.wakeFirst()
}

// Turn asks for a turn for an attempt of a call of the Default class, with
// no time its turn must come by, at now: wait is false if it may go at
// once, and true if it is to wait in line under ticket (Claim with it
// until told Go, or Leave). It is TurnFor with the zero Asker.
func (g *Gate) Turn(now uint64) (ticket Ticket, wait bool) {
	ticket, verdict := g.TurnFor(Asker{}, now)
	return ticket, verdict == Queued
}

// TurnFor asks for a turn for an attempt of asker's call at now: it waits
// behind the calls of its class and more critical ones that wait, ahead of
// less critical ones. The verdict is Go (send at once), Queued (wait in
// line under ticket: Claim with it until told Go, or Leave) or, if its
// turn would come after asker.By at the present pace, Shed (fail now: it
// takes no place).
func (g *Gate) TurnFor(asker Asker, now uint64) (ticket Ticket, verdict Verdict) {
	if !g.On() {
		return 0, Go
	}
	return g.pacedTurn(now, nil, asker)
}

// Rejoin is TurnFor for a call that has waited in line before, under
// place: it waits at that place again, ahead of calls of its class that
// came after it. The line is first come, first served by call, not by
// attempt, so a retry does not go to the back of a line it has waited in
// longest.
func (g *Gate) Rejoin(place Ticket, asker Asker, now uint64) (ticket Ticket, verdict Verdict) {
	if !g.On() {
		return 0, Go
	}
	return g.pacedTurn(now, &place, asker)
}

func (g *Gate) pacedTurn(now uint64, place *Ticket, asker Asker) (Ticket, Verdict) {
	g.mu.Lock()
	defer g.mu.Unlock()
	class := asker.Class
	if !class.known() {
		class = Default
	}
	if place == nil {
		g.asked[class.Rank()]++
	}
	// Those it would wait behind: ahead of its place, or of its class's end.
	end := Ticket(math.MaxUint64)
	if place != nil {
		end = *place
	}
	ahead := len(g.line) > 0 && g.line[0].before(class, end)
	if g.turnOffIfQuiet(now) || !ahead && g.giveTurn(now) {
		return 0, Go
	}
	g.lastTrouble = now
	if asker.By != 0 && g.turnExpected(class, end, now) > asker.By {
		g.tally.Shed[class.Rank()]++
		return 0, Shed
	}
	var number Ticket
	if place != nil {
		number = *place
	} else {
		number = g.nextTicket
		g.nextTicket++
	}
	g.join(class, number)
	return number, Queued
}

// turnExpected is when, at the present pace, the turn of a call of class
// would come, waiting behind those whose places are before (class, end):
// the first in line's turn is due when its credit accrues, each after it
// one pace later. While the gate probes a dependency that has accepted
// nothing, its pace is a probe's, not what the dependency will take once
// back (the line then moves at once): the call's turn is expected no
// sooner than the next probe, whoever is ahead. A fleet's grant to a
// process that probes is its part of the fleet's probes, as much a
// probe's: a herd whose calls may wait a minute lost a tenth of them,
// shed, when those ahead counted at it.
func (g *Gate) turnExpected(class Criticality, end Ticket, now uint64) uint64 {
	own := g.rate.now
	g.pacer.accrue(own, now)
	ahead := 0
	if g.rate.phase != probing {
		ahead = g.ahead(class, end)
	}
	afterFirst := nanosOf(float64(ahead) / g.pacer.pace(own))
	return addSaturating(g.pacer.due(own), afterFirst)
}

// Claim is the holder of ticket asking for its turn at now. Told At, it
// claims again at the time given; told Behind, when woken. wake, if not
// nil, is sent to (without blocking: give it room for one) when the answer
// may have changed: the line moved, or the rate grew.
func (g *Gate) Claim(ticket Ticket, now uint64, wake chan<- struct{}) (verdict Verdict, at uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	first := len(g.line) > 0 && g.line[0].ticket == ticket
	if first && g.giveTurn(now) {
		g.line = append(g.line[:0], g.line[1:]...)
		g.lastTrouble = now
		g.wakeFirst()
		return Go, 0
	}
	if i, found := g.find(ticket); found {
		g.line[i].wake = wake
	}
	if first {
		return At, g.pacer.due(g.rate.now)
	}
	return Behind, 0
}

// GiveUp is the holder of ticket, having waited in line until it could
// wait no longer (its class's MaxWait, or its deadline), giving up its
// place: a call shed, counted in the tally by its class as one shed at
// once is (demand the pace did not serve). A ticket no longer in line
// counts for nothing.
func (g *Gate) GiveUp(ticket Ticket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if class, left := g.leave(ticket); left {
		g.tally.Shed[class.Rank()]++
	}
}

// Leave gives up ticket's place in line (the call was cancelled): unlike
// GiveUp, it counts for nothing.
func (g *Gate) Leave(ticket Ticket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.leave(ticket)
}

// leave takes ticket out of the line, if it is there: its class, and
// whether it was.
func (g *Gate) leave(ticket Ticket) (Criticality, bool) {
	i, found := g.find(ticket)
	if !found {
		return Default, false
	}
	class := g.line[i].class
	g.line = append(g.line[:i], g.line[i+1:]...)
	if i == 0 {
		g.wakeFirst()
	}
	return class, true
}

// Record learns from the outcome, at now, of an attempt sent at sent.
func (g *Gate) Record(signal Signal, sent, now uint64) {
	if signal == Accepted {
		if g.overloadWhen.weighsRefusals() {
			g.noteAccepted(now)
		}
		if !g.On() && !g.Watching() {
			return
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.policy
	timedOut := signal == TimedOut
	if !g.On() {
		switch g.watched(signal, now) {
		case down:
			g.turnOn(signal, sent, now)
		case outnumbered:
			g.turnOnAnswering(signal, now)
		}
		return
	}
	if signal != Accepted {
		g.tally.Overloaded++
		if timedOut {
			g.tally.TimedOut++
		} else {
			if g.rate.phase == probing && g.outageRun < ^uint32(0) {
				g.outageRun++
			}
			g.rate.refused(1, now)
			if g.trialHolds(0, 1, sent, now) {
				return
			}
		}
		g.pacer.accrue(g.rate.now, now)
		lastCut := g.rate.lastCut
		// A refusal the rate judges random is no trouble: it cuts nothing
		// and does not keep the gate on.
		if g.rate.overloaded(p, sent, now, timedOut) {
			g.lastTrouble = now
			g.pacer.overloaded(p.Beta, sent)
		}
		if g.triesCuts(now) && !timedOut && g.rate.lastCut > lastCut {
			g.rate.answers.roll(now)
			g.trials.cut(g.rate.answers.refusedShareLastSecond(), now)
		}
		return
	}
	if g.rate.phase == probing && g.outageRun >= outageRunLimit {
		downFor := uint64(0)
		if now > g.downSince {
			downFor = now - g.downSince
		}
		g.untriedUntil = now + downFor
	}
	g.trialHolds(1, 0, sent, now)
	g.tally.Accepted++
	g.pacer.accrue(g.rate.now, now)
	g.rate.accepted(p, now)
	g.turnOffIfQuiet(now)
	// The first in line may be due sooner now.
	g.wakeFirst()
}

// noteAccepted notes that something was accepted at now: a store at most
// once a tenth of a second.
func (g *Gate) noteAccepted(now uint64) {
	t := now/tenth + 1
	if g.lastAccepted.Load() != t {
		g.lastAccepted.Store(t)
	}
}

// acceptedLately says whether anything was accepted within
// downAfterTenths of now.
func (g *Gate) acceptedLately(now uint64) bool {
	last := g.lastAccepted.Load()
	if last == 0 {
		return false
	}
	t := now/tenth + 1
	return t < last || t-last < downAfterTenths
}

// watched counts an outcome heard while off (a refusal, or anything while
// watching), in the answers watched and in the tally the fleet hears, and
// says what it shows. A timeout turns the gate on at once, and so does
// any refusal under AnyRefusal. Otherwise a refusal starts watching, and
// turns the gate on at once only once refusals show the dependency down
// (see showsDown); while watching, outcomes are counted until they show overload,
// and watching ends after Quiet without a refusal.
func (g *Gate) watched(signal Signal, now uint64) watched {
	if !g.policy.OverloadWhen.weighsRefusals() && signal != Accepted {
		return down
	}
	switch signal {
	case Accepted:
		g.refusalRun = 0
		g.watch.accept(1, now)
		g.tally.Sent++
		g.tally.Accepted++
		if now >= g.lastTrouble && now-g.lastTrouble >= uint64(g.policy.Quiet) {
			g.watching.Store(false)
		}
		return notYet
	case TimedOut:
		return down
	}
	g.watchRefusal(now)
	g.watch.refuse(1, now)
	g.lastTrouble = now
	if g.refusalRun == 0 {
		g.refusalRunSince = now
	}
	g.refusalRun++
	switch {
	case !g.acceptedLately(now) && !g.watch.anyAccepted() && g.showsDown(now):
		return down
	case g.watch.showOverload():
		return outnumbered
	}
	return notYet
}

// triesCuts says whether the gate tries its cuts at now: under Evidence, on
// for a dependency it found down that has since accepted something, until a
// trial finds it failing a share at random, or the gate is slow; not while
// it recovers from an outage no chance explains (outageRunLimit).
func (g *Gate) triesCuts(now uint64) bool {
	r := &g.rate
	return g.policy.OverloadWhen == Evidence && now >= g.untriedUntil && r.phase != probing && !r.answering && !r.slow
}

// trialHolds hears, at now, accepted and refused answers to an attempt sent
// at sent in the trial of the gate's last cut, if it tries its cuts, and
// says whether the trial holds the rate (a refusal then cuts nothing). A
// trial whose refusals kept their share over two cuts judges the dependency
// to answer, failing a share at random: refusals from then on cut only
// while most are refused, as under MostRefused.
func (g *Gate) trialHolds(accepted, refused float64, sent, now uint64) bool {
	if !g.triesCuts(now) {
		return false
	}
	if g.trials.answered(accepted, refused, sent) == randomFound {
		g.rate.answeringVerdict(g.policy, now)
		g.trials.reset()
		return false
	}
	return g.trials.holds()
}

// showsDown says whether the refusals heard while watching, with nothing
// accepted lately, show the dependency down: under MostRefused, three
// within three seconds; under Evidence, downRun in a row, or downRefusals
// in a row over downSpan.
func (g *Gate) showsDown(now uint64) bool {
	if g.policy.OverloadWhen == MostRefused {
		return g.watch.refusals() >= downRefusals
	}
	spanned := now >= g.refusalRunSince && now-g.refusalRunSince >= uint64(downSpan)
	return g.refusalRun >= downRun || (g.refusalRun >= downRefusals && spanned)
}

// watchRefusal counts, at now, a refusal heard while watching in the
// tally, or, if it is the first, starts watching: the answers and the
// tally start from nothing, and that refusal is left out of what the
// fleet hears (every process would report one, and none of the
// acceptances before it).
func (g *Gate) watchRefusal(now uint64) {
	if g.Watching() {
		g.tally.Sent++
		g.tally.Overloaded++
		return
	}
	g.watch = newAnswers(now)
	g.refusalRun = 0
	g.tally = Tally{}
	g.watching.Store(true)
}

// turnOnAnswering turns the gate on at now, after signal, for a dependency
// that still accepts some of what it is sent (watch counts it): judging it
// to answer, at twice what it delivered.
func (g *Gate) turnOnAnswering(signal Signal, now uint64) {
	g.rate = answeringRate(g.policy, g.watch, now)
	g.startPacing(signal, now)
}

// turnOn turns the gate on at now for a dependency that accepts nothing:
// it probes at the lowest rate.
func (g *Gate) turnOn(signal Signal, sent, now uint64) {
	g.rate = probingRate(g.policy, now)
	g.trials.reset()
	g.outageRun = g.refusalRun
	if g.outageRun == 0 {
		g.outageRun = 1
	}
	g.refusalRun = 0
	g.downSince = now
	g.untriedUntil = 0
	// The rate is at its lowest already; this only notes whether the
	// dependency is slow.
	g.rate.overloaded(g.policy, sent, now, signal == TimedOut)
	g.startPacing(signal, now)
}

// startPacing starts pacing at now, at the rate set, after signal.
func (g *Gate) startPacing(signal Signal, now uint64) {
	g.pacer = pacer{credit: g.draw(), at: now}
	g.lastTrouble = now
	// The failure that turned it on is the first the fleet hears of.
	g.tally = Tally{Overloaded: 1}
	if signal == TimedOut {
		g.tally.TimedOut = 1
	}
	g.watching.Store(false)
	g.on.Store(true)
}

// turnOffIfQuiet turns the gate off if nothing has been refused and nobody
// has waited for Quiet, and nobody waits now; whether it did.
func (g *Gate) turnOffIfQuiet(now uint64) bool {
	var since uint64
	if now > g.lastTrouble {
		since = now - g.lastTrouble
	}
	off := since >= uint64(g.policy.Quiet) && len(g.line) == 0
	if off {
		g.on.Store(false)
	}
	return off
}

// giveTurn gives a turn if one has accrued by now.
func (g *Gate) giveTurn(now uint64) bool {
	g.pacer.accrue(g.rate.now, now)
	given := g.pacer.take()
	if given {
		g.tally.Sent++
	}
	return given
}

// wakeFirst tells the first in line, once, that its claim may go otherwise.
func (g *Gate) wakeFirst() {
	if len(g.line) == 0 || g.line[0].wake == nil {
		return
	}
	select {
	case g.line[0].wake <- struct{}{}:
	default:
	}
	g.line[0].wake = nil
}

// before says whether w's turn comes before that of ticket of class.
func (w waiter) before(class Criticality, ticket Ticket) bool {
	rank, other := w.class.Rank(), class.Rank()
	return rank < other || rank == other && w.ticket < ticket
}

// ahead is how many wait before ticket of class: where it is in line, or
// would be.
func (g *Gate) ahead(class Criticality, ticket Ticket) int {
	return sort.Search(len(g.line), func(i int) bool { return !g.line[i].before(class, ticket) })
}

// find is where ticket is in line, whatever its class.
func (g *Gate) find(ticket Ticket) (int, bool) {
	for _, class := range Classes {
		if i := g.ahead(class, ticket); i < len(g.line) && g.line[i].ticket == ticket && g.line[i].class == class {
			return i, true
		}
	}
	return 0, false
}

// join puts ticket of class in line at its place, not yet to be woken.
func (g *Gate) join(class Criticality, ticket Ticket) {
	i := g.ahead(class, ticket)
	if i < len(g.line) && g.line[i].ticket == ticket && g.line[i].class == class {
		g.line[i].wake = nil
		return
	}
	g.line = append(g.line, waiter{})
	copy(g.line[i+1:], g.line[i:])
	g.line[i] = waiter{ticket: ticket, class: class}
}
