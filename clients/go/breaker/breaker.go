// Package breaker is stormguard's circuit breaker for Go services, the same
// as the Rust library's (clients/vectors checks it verdict by verdict): it
// stops calls to a dependency that keeps failing, so it gets room to
// recover, then lets a few trial calls through to see whether it has.
//
//   - Closed (0): calls pass. The breaker opens after ConsecutiveFailures
//     failures in a row that chance does not explain at the failure rate
//     the window held before them (see RunByChance; a run of twice that many
//     always opens it; 0 turns this trigger off), or once the window (the
//     last N calls, or the calls of the last T) holds MinimumCalls calls and
//     the share that failed reaches FailureRateThreshold, or the share
//     slower than SlowCallDuration reaches SlowCallRateThreshold.
//   - Open (2): calls are refused at once, for OpenTimeout.
//   - Half-open (1): at most HalfOpenMaxCalls trial calls at a time;
//     SuccessThreshold good trials in a row close the breaker, a failed or
//     slow one opens it again.
//
// A call ends a success, a failure (Record), or refused (RecordRefused):
// the dependency refused it as overloaded or down (a failure the policy's
// gate.overloadOn names: a 429 or 503, or a connect failure, by default)
// while no send gate paces it. A refusal says the dependency may be up
// with less room than its callers want, or down; only trials tell which,
// so the breaker follows what the dependency accepts instead of shutting
// it out:
//
//   - Closed, a refusal counts as a failure, in the window and in the run
//     of failures, but a breaker that a refusal trips goes half-open, not
//     open.
//   - Half-open, a trial is also admitted only while the trials refused in
//     its trial window (the last TrialWindow, or OpenTimeout if shorter,
//     at least ShortestTrialWindow) outnumber those accepted by less than
//     what the breaker may risk unearned: it then sends about
//     TrialsPerAccepted trials for each one accepted, and HalfOpenMaxCalls
//     a window when none is, the first window's coming one per window /
//     HalfOpenMaxCalls. A call refused so is refused as by a full
//     half-open breaker.
//   - Half-open, a refused trial ends the run of good trials, and opens
//     the breaker only once it has been half-open a whole trial window and
//     the window holds HalfOpenMaxCalls refused trials and none accepted:
//     a dependency that is down, or answers nothing but 503s, is left
//     alone; one that takes a share keeps its trials. A refused trial that
//     was slow is slow, and opens it.
//
// Under scope: fleet that holds in the overload that follows a return (the
// daemon's trials found the dependency up and closed the breaker, until a
// trial window passes with no refusal), and the daemon hears of the breaker
// only once it opens; otherwise a refusal opens the breaker as a failure
// does, for the daemon's one half-open for the fleet. A trial on one of the
// daemon's slots that is refused is a failed trial to the daemon.
//
// The move from open to half-open happens when a call asks for a permit
// after OpenTimeout, so a breaker nobody calls stays open. A call's outcome
// counts only in the state it started in. Times are nanoseconds since the
// breaker's creation on a clock that does not go back.
//
// Under scope: fleet (Policy.FleetScoped), an open breaker leaves its trials
// to the daemon, which runs one half-open for the whole fleet: it sends a
// trial only on a slot the daemon granted (Heard), reports the trial's
// outcome at its next ask (FleetReport), and closes when the daemon says
// the fleet's trials succeeded. Without a word from the daemon for a lease
// it decides alone, as under scope: process.
//
// A new version of the settings is taken up by Retune, which keeps the
// breaker's state: an open breaker stays open.
package breaker

import (
	"fmt"
	"sync"
	"time"
)

// State is the breaker's state, numbered as the circuit_breaker_state
// metric is.
type State uint8

// The states.
const (
	Closed   State = 0
	HalfOpen State = 1
	Open     State = 2
)

// TrialsPerAccepted is how many trials a half-open breaker may send for
// each one the dependency accepted in the last TrialWindow, beyond its
// first HalfOpenMaxCalls: two, the multiplier of client-side adaptive
// throttling in Google's SRE book (chapter 21). The breaker then sends
// about twice what the dependency takes, so it sees the room grow, and no
// more, so that an overload lasting minutes costs the dependency one
// refusal per call it serves, not one per call its callers make.
const TrialsPerAccepted = 2

// TrialWindow is how far back a half-open breaker counts its trials and
// their answers, at most: ten seconds, long enough to hold a few answers at
// a process's share of a small room, short enough that a room that grows or
// shrinks is followed within seconds. A breaker whose OpenTimeout is
// shorter counts over that (at least ShortestTrialWindow): it was told to
// leave the dependency alone for less, and judges it as briefly (with
// openTimeout: 3s, ten seconds of trials were most of each cycle, and
// breakers saw HAProxy back 4 s late, not 1.7 s).
const TrialWindow = 10 * time.Second

// ShortestTrialWindow is the shortest window a half-open breaker counts its
// trials over: a second.
const ShortestTrialWindow = time.Second

// String is the state's name as logs and reports spell it: "closed",
// "half-open" or "open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Metric is the state's number for metrics: 0 closed, 1 half-open, 2 open.
func (s State) Metric() uint8 { return uint8(s) }

// NotPermitted is a call the breaker refused.
type NotPermitted struct {
	// State refused the call: open, or half-open with every trial slot
	// taken or no trial earned (see TrialsPerAccepted).
	State State
	// RetryIn is how long until the breaker admits trial calls (0 when
	// half-open).
	RetryIn time.Duration
}

// Error says which state refused the call and for how long.
func (e *NotPermitted) Error() string {
	return fmt.Sprintf("circuit breaker is %s; calls are refused for %s", e.State, e.RetryIn)
}

// Breaker is shared by every call to one dependency.
type Breaker struct {
	policy              Policy
	mu                  sync.Mutex
	state               State
	generation          uint64
	consecutiveFailures uint32
	window              window
	openedAt            uint64
	trialsInFlight      uint32
	// trialSuccesses are the trials accepted in a row, none refused between.
	trialSuccesses uint32
	// trials are, half-open, the trials of the last trialSpan, a refused
	// one counted as failed.
	trials *timeWindow
	// halfOpenSince is when it last went half-open.
	halfOpenSince uint64
	// trialSpan is the window its trials are counted over since:
	// TrialWindow, or OpenTimeout if shorter.
	trialSpan time.Duration
	// refusing is half-open because refusals tripped it from closed: the
	// dependency answers, and the trials are this process's own. Under
	// scope: fleet the daemon hears of the breaker only once it opens.
	refusing bool
	// afterReturnUntil is, under scope: fleet, until when refusals are the
	// overload that follows the dependency's return (0: not since the
	// breaker last opened): a trial window past the daemon's close, and past
	// each refusal since. Until then they trip the breaker half-open;
	// after, they open it, for the fleet's one half-open.
	afterReturnUntil uint64
	rejected         uint64
	transitions      uint64
	// openedFromClosed is when it last opened from closed.
	openedFromClosed uint64
	fleet            fleetWord
}

// fleetWord is, under scope: fleet, what the daemon last said and what to
// tell it.
type fleetWord struct {
	// until is when its word stops holding (0: no word); meanwhile the
	// daemon, not OpenTimeout, decides when the open breaker sends trials.
	until uint64
	// slots are trial slots it granted, unused, good until slotsUntil: the
	// lease of the answer that granted them (the daemon takes an unsettled
	// slot back after two leases, and the process must not hold it then).
	slots      uint32
	slotsUntil uint64
	// retryAt is when the daemon said the fleet's breaker goes half-open,
	// or this process's turn to close comes.
	retryAt    uint64
	hasRetryAt bool
	// succeeded and failed count trials on its slots since the last report.
	succeeded, failed uint32
	// refusedReported is the breaker's refusals as of the last report.
	refusedReported uint64
}

func (w *fleetWord) holds(now uint64) bool { return now < w.until }

func (w *fleetWord) slotsAt(now uint64) uint32 {
	if now < w.slotsUntil {
		return w.slots
	}
	return 0
}

// Verdict is the daemon's word on the fleet's breaker, from a pace answer.
type Verdict struct {
	// State is Closed (close the breaker), HalfOpen (send the trials
	// granted, if any) or Open (stay open).
	State State
	// Trials are the slots this answer grants (0 or 1).
	Trials uint32
	// RetryIn is, while open, how long until the fleet's breaker goes
	// half-open, or until this process's turn to close.
	RetryIn time.Duration
}

// Report is what a fleet-scoped breaker tells the daemon in an ask.
type Report struct {
	// Open says whether the breaker is open (or half-open alone, not on
	// refusals).
	Open bool
	// OpenFor is how long since it last opened from closed.
	OpenFor time.Duration
	// Refused counts the calls it refused since the last report.
	Refused uint64
	// Succeeded and Failed count the trials on the daemon's slots since
	// the last report (a slow one failed).
	Succeeded, Failed uint32
}

// Permit is leave to make one call: Record how it went, or Cancel it if
// the call was cancelled (it then counts for nothing and frees its slot).
type Permit struct {
	breaker    *Breaker
	generation uint64
	trial      bool
	// fleetTrial is a trial on a slot the daemon granted: its outcome is
	// the fleet's.
	fleetTrial bool
	started    uint64
	done       bool
}

// New makes a closed breaker at time 0 from p, refusing a setting out of
// the range the daemon's validation allows with an error naming it.
func New(p Policy) (*Breaker, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	span := trialSpan(p)
	return &Breaker{policy: p, window: newWindow(p.Window), trials: newTimeWindow(span, 0), trialSpan: span}, nil
}

// trialSpan is the window a breaker under p counts its half-open trials
// over: OpenTimeout, between ShortestTrialWindow and TrialWindow.
func trialSpan(p Policy) time.Duration {
	switch {
	case p.OpenTimeout < ShortestTrialWindow:
		return ShortestTrialWindow
	case p.OpenTimeout > TrialWindow:
		return TrialWindow
	}
	return p.OpenTimeout
}

// newWindow is an empty window of shape w.
func newWindow(w SlidingWindow) window {
	if w.Duration > 0 {
		return newTimeWindow(w.Duration, 0)
	}
	calls := w.Calls
	if calls == 0 {
		calls = 1
	}
	return newCountWindow(calls)
}

// Policy is the policy the breaker applies now (Retune changes it).
func (b *Breaker) Policy() Policy {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.policy
}

// Retune takes up p, a new version of the breaker's settings, keeping its
// state, so that an operator's edit mid-outage does not close an open
// breaker and let every call through to a dependency that is down. It
// keeps the state, when it opened, its refusals, transitions and failures
// in a row, and, while p stays fleet-scoped, the daemon's word and what is
// still to be reported. A new OpenTimeout counts from when the breaker last
// opened; new HalfOpenMaxCalls and SuccessThreshold apply from now on
// (trials in flight stay counted); new thresholds and MinimumCalls apply
// to the next judgement. A Window of another type or size starts the
// closed state's window afresh, since outcomes kept in one shape cannot be
// read in another; the same Window keeps them. Turned from fleet to
// process scope, it drops the daemon's word and decides alone from now;
// turned to fleet scope, it asks the daemon from its next ask. Enabled is
// the caller's to act on (no breaker, or a new one). A bad setting is
// refused, as New refuses it, leaving the breaker as it was.
func (b *Breaker) Retune(p Policy) error {
	if err := p.Check(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.Window != b.policy.Window {
		b.window = newWindow(p.Window)
	}
	if !p.FleetScoped {
		b.fleet = fleetWord{}
	}
	b.policy = p
	return nil
}

// State is the state now (the move from open to half-open waits for the
// next call).
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// Rejected is the number of calls refused since the breaker was created.
func (b *Breaker) Rejected() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rejected
}

// Transitions is the number of state changes since the breaker was created.
func (b *Breaker) Transitions() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.transitions
}

// Acquire asks leave to make a call at now; a refusal is a *NotPermitted.
func (b *Breaker) Acquire(now uint64) (*Permit, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == Open && b.policy.FleetScoped && b.fleet.holds(now) {
		return b.fleetTrial(now)
	}
	if b.state == Open {
		reopens := b.openedAt + uint64(b.policy.OpenTimeout)
		if now < reopens {
			b.rejected++
			return nil, &NotPermitted{State: Open, RetryIn: time.Duration(reopens - now)}
		}
		b.transition(HalfOpen, now)
	}
	trial := b.state == HalfOpen
	if trial {
		max := b.mostTrials()
		if b.trialsInFlight >= max || !b.trialCreditAt(max, now) {
			b.rejected++
			return nil, &NotPermitted{State: HalfOpen}
		}
		b.trialsInFlight++
	}
	return &Permit{breaker: b, generation: b.generation, trial: trial, started: now}, nil
}

// fleetTrial is an open breaker the daemon speaks for: a trial on one of
// its slots, if any is left.
func (b *Breaker) fleetTrial(now uint64) (*Permit, error) {
	if b.fleet.slotsAt(now) == 0 {
		var retryIn time.Duration
		if b.fleet.hasRetryAt && b.fleet.retryAt > now {
			retryIn = time.Duration(b.fleet.retryAt - now)
		}
		b.rejected++
		return nil, &NotPermitted{State: Open, RetryIn: retryIn}
	}
	b.fleet.slots--
	return &Permit{breaker: b, generation: b.generation, trial: true, fleetTrial: true, started: now}, nil
}

// AsksFleet says whether the breaker has something to tell the daemon: it
// is fleet-scoped and open (or half-open alone, not on refusals), or its
// trials' outcomes are still to be reported.
func (b *Breaker) AsksFleet() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.policy.FleetScoped && (b.isOpenForTheFleet() || b.fleet.succeeded > 0 || b.fleet.failed > 0)
}

// FleetReport is what to tell the daemon at now, if fleet-scoped: whether
// the breaker is open, since when, the calls it refused and its trials'
// outcomes since the last report (which this takes: they are reported once).
func (b *Breaker) FleetReport(now uint64) (Report, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.policy.FleetScoped {
		return Report{}, false
	}
	var openFor uint64
	if now > b.openedFromClosed {
		openFor = now - b.openedFromClosed
	}
	refused := b.rejected - b.fleet.refusedReported
	b.fleet.refusedReported = b.rejected
	r := Report{
		Open:      b.isOpenForTheFleet(),
		OpenFor:   time.Duration(openFor),
		Refused:   refused,
		Succeeded: b.fleet.succeeded,
		Failed:    b.fleet.failed,
	}
	b.fleet.succeeded, b.fleet.failed = 0, 0
	return r, true
}

// Heard takes the daemon's verdict on the fleet's breaker, heard at now
// and holding until until (the answer's lease): closed closes this
// breaker; open or half-open leaves its trials to the daemon's slots until
// then. A breaker that refusals tripped half-open ignores it: its trials
// follow what the dependency accepts. It says whether it closed the
// breaker, for the caller to hand the dependency to its pace.
func (b *Breaker) Heard(v Verdict, until, now uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.policy.FleetScoped {
		return false
	}
	if b.refusing {
		// Its trials follow what the dependency accepts; the fleet's word is for open breakers.
		return false
	}
	if v.State == Closed {
		b.fleet.until, b.fleet.slotsUntil = 0, 0
		if b.state != Closed {
			b.transition(Closed, now)
			b.afterReturnUntil = now + uint64(trialSpan(b.policy))
			return true
		}
		return false
	}
	if b.state == HalfOpen {
		// It had gone half-open alone, without the daemon: the daemon's
		// trials govern again.
		b.transition(Open, now)
	}
	b.fleet.until = until
	if v.Trials > 0 {
		b.fleet.slots, b.fleet.slotsUntil = v.Trials, until
	} else if v.State == Open {
		b.fleet.slotsUntil = 0
	}
	b.fleet.retryAt, b.fleet.hasRetryAt = now+uint64(v.RetryIn), true
	return false
}

// Trial says whether this is a half-open trial call.
func (p *Permit) Trial() bool { return p.trial }

// Current says whether the breaker is still in the state it granted this
// permit in: once it changed (it opened while the call waited in a send
// gate's line), the call's outcome would be ignored, and the breaker must
// be asked again before anything is sent. The fleet's trial is always
// current: its outcome is the daemon's to judge.
func (p *Permit) Current() bool {
	if p.fleetTrial {
		return true
	}
	b := p.breaker
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.generation == p.generation
}

// FleetTrial says whether this is a trial on a slot the daemon granted the
// fleet: the fleet's trials are few already, so it does not wait for a send
// gate's turn.
func (p *Permit) FleetTrial() bool { return p.fleetTrial }

// outcome is how a call ended: a success, a failure, or refused as
// overloaded.
type outcome uint8

const (
	outcomeSucceeded outcome = iota
	outcomeFailed
	outcomeRefused
)

// Record tells the breaker how the call went, ending at now: a success, or
// a failure that counts against the dependency; its duration since the
// permit decides whether it was slow. Only the first Record, RecordRefused
// or Cancel of a permit counts.
func (p *Permit) Record(failed bool, now uint64) {
	o := outcomeSucceeded
	if failed {
		o = outcomeFailed
	}
	p.record(o, now)
}

// RecordRefused tells the breaker that the dependency refused the call as
// overloaded or down, ending at now, while no send gate paces it: a
// failure the policy's gate.overloadOn names (a 429 or 503, or a connect
// failure, by default), never a timeout. Closed, it counts as a failure,
// but trips the breaker half-open, not open; half-open, the trials follow
// what the dependency accepts (see the package's doc). Under scope: fleet
// that holds in the overload that follows a return (the daemon's trials
// found the dependency up and closed the breaker, until a trial window
// passes with no refusal); otherwise a refusal opens the breaker as a failure
// does, for the daemon's one half-open for the fleet. A trial on one of
// the daemon's slots that is refused is a failed trial to the daemon. Only
// the first Record, RecordRefused or Cancel of a permit counts.
func (p *Permit) RecordRefused(now uint64) { p.record(outcomeRefused, now) }

func (p *Permit) record(o outcome, now uint64) {
	b := p.breaker
	b.mu.Lock()
	defer b.mu.Unlock()
	if !p.settle() {
		return
	}
	var elapsed uint64
	if now > p.started {
		elapsed = now - p.started
	}
	slow := elapsed >= uint64(b.policy.SlowCallDuration)
	failed := o != outcomeSucceeded
	if p.fleetTrial {
		b.recordFleetTrial(failed || slow, now)
		return
	}
	if b.generation != p.generation {
		return
	}
	refused := o == outcomeRefused
	if refused && now < b.afterReturnUntil {
		b.afterReturnUntil = now + uint64(trialSpan(b.policy))
	}
	// Under scope: fleet, refusals outside the overload that follows a
	// return are the fleet's to judge, as failures are.
	refused = refused && (!b.policy.FleetScoped || now < b.afterReturnUntil)
	switch {
	case b.state == Closed:
		b.recordClosed(failed, slow, refused, now)
	case b.state == HalfOpen && refused && !slow:
		b.recordRefusedTrial(now)
	case b.state == HalfOpen:
		b.recordTrial(failed || slow, now)
	}
}

// settle marks the permit used, under the breaker's lock; false if it was
// already: only the first Record or Cancel counts.
func (p *Permit) settle() bool {
	if p.done {
		return false
	}
	p.done = true
	return true
}

// Cancel says the call was cancelled, unrecorded: it counts for nothing,
// and a trial frees its slot if the breaker is still in the state that
// granted it.
func (p *Permit) Cancel() {
	b := p.breaker
	b.mu.Lock()
	defer b.mu.Unlock()
	if !p.settle() {
		return
	}
	if p.fleetTrial {
		// Unused: the slot is this process's until its lease ends.
		b.fleet.slots++
		return
	}
	if p.trial && b.generation == p.generation && b.trialsInFlight > 0 {
		b.trialsInFlight--
	}
}

// recordFleetTrial counts the outcome of the fleet's trial for the daemon
// to judge, whatever this breaker did since; a failure restarts its own
// open timeout.
func (b *Breaker) recordFleetTrial(bad bool, now uint64) {
	if !bad {
		b.fleet.succeeded++
		return
	}
	b.fleet.failed++
	if b.state == Open {
		b.openedAt = now
	}
}

// recordClosed counts a call that ended closed: refused if the dependency
// refused it as overloaded, which trips the breaker half-open, not open.
func (b *Breaker) recordClosed(failed, slow, refused bool, now uint64) {
	if failed {
		if b.consecutiveFailures < ^uint32(0) {
			b.consecutiveFailures++
		}
	} else {
		b.consecutiveFailures = 0
	}
	b.window.record(now, failed, slow)
	inARow := b.policy.ConsecutiveFailures > 0 && b.consecutiveFailures >= b.policy.ConsecutiveFailures &&
		!run{
			length:    b.consecutiveFailures,
			t:         b.window.tally(now),
			opensAt:   b.policy.ConsecutiveFailures,
			threshold: b.policy.FailureRateThreshold,
		}.byChance()
	if inARow || b.ratesExceeded(now) {
		to := Open
		if refused {
			to = HalfOpen
		}
		b.transition(to, now)
		b.refusing = refused
	}
}

// ratesExceeded says whether the window holds enough calls and too many
// failed or were slow. A count window smaller than MinimumCalls is judged
// once full.
func (b *Breaker) ratesExceeded(now uint64) bool {
	t := b.window.tally(now)
	if t.calls == 0 || t.calls < b.minimumCalls() {
		return false
	}
	share := func(n uint32) float64 { return float64(n) / float64(t.calls) }
	return share(t.failures) >= b.policy.FailureRateThreshold || share(t.slow) >= b.policy.SlowCallRateThreshold
}

// minimumCalls is how many calls the window must hold before its rates are
// judged: MinimumCalls, or a smaller count window once full.
func (b *Breaker) minimumCalls() uint32 {
	if c, ok := b.window.capacity(); ok && c < b.policy.MinimumCalls {
		return c
	}
	return b.policy.MinimumCalls
}

// recordTrial counts a trial that ended: a failed or slow one opens the
// breaker again; SuccessThreshold accepted in a row close it.
func (b *Breaker) recordTrial(bad bool, now uint64) {
	if b.trialsInFlight > 0 {
		b.trialsInFlight--
	}
	if bad {
		b.transition(Open, now)
		return
	}
	b.trials.record(now, false, false)
	b.trialSuccesses++
	if b.trialSuccesses >= b.policy.SuccessThreshold {
		b.transition(Closed, now)
	}
}

// recordRefusedTrial counts a trial the dependency refused as overloaded:
// it opens the breaker again only once the breaker has been half-open a
// whole trial window and the window holds HalfOpenMaxCalls refused trials
// and none accepted, so that a dependency that is down (or answers nothing
// but 503s) is left alone, and one that takes a share is not. A refusal
// alone says little: a dependency with a per-second quota refuses every
// call late in a second, retries included.
func (b *Breaker) recordRefusedTrial(now uint64) {
	if b.trialsInFlight > 0 {
		b.trialsInFlight--
	}
	b.trialSuccesses = 0
	b.trials.record(now, true, false)
	t := b.trials.tally(now)
	judged := now >= b.halfOpenSince && now-b.halfOpenSince >= uint64(b.trialSpan)
	if judged && t.failures == t.calls && t.failures >= b.mostTrials() {
		b.transition(Open, now)
	}
}

// isOpenForTheFleet says whether the daemon is to hear that this breaker is
// open: open, or half-open alone after OpenTimeout; not half-open on
// refusals.
func (b *Breaker) isOpenForTheFleet() bool {
	switch b.state {
	case Open:
		return true
	case HalfOpen:
		return !b.refusing
	}
	return false
}

// mostTrials is HalfOpenMaxCalls, at least 1.
func (b *Breaker) mostTrials() uint32 {
	if b.policy.HalfOpenMaxCalls < 1 {
		return 1
	}
	return b.policy.HalfOpenMaxCalls
}

// trialCreditAt says whether a half-open breaker may send one more trial
// at now: while the trials the dependency refused in its trial window
// outnumber those it accepted by fewer than the unearned trials, so that
// it sends about TrialsPerAccepted for each accepted, and most a window
// when none is. Trials nobody refused are limited only by most at a time.
func (b *Breaker) trialCreditAt(most uint32, now uint64) bool {
	t := b.trials.tally(now)
	accepted := t.calls - t.failures
	return t.failures < saturating(saturatingTimes(accepted, TrialsPerAccepted-1), b.unearnedTrialsAt(most, now))
}

// unearnedTrialsAt is the refusals a half-open breaker risks whatever the
// answers: most a window, the first window's coming one per trialSpan /
// most, so that processes that went half-open together (opened by the
// same outage) do not spend them in one burst that a recovering
// dependency refuses almost whole.
func (b *Breaker) unearnedTrialsAt(most uint32, now uint64) uint32 {
	if most < 1 {
		most = 1
	}
	spacing := uint64(b.trialSpan) / uint64(most)
	var steps uint64
	if now > b.halfOpenSince {
		steps = (now - b.halfOpenSince) / spacing
	}
	if steps >= uint64(most) {
		return most
	}
	return uint32(steps) + 1
}

func (b *Breaker) transition(to State, now uint64) {
	if b.state == Closed && to == Open {
		b.openedFromClosed = now
	}
	b.state = to
	b.refusing = false
	b.generation++
	b.transitions++
	b.trialsInFlight = 0
	b.trialSuccesses = 0
	switch to {
	case Open:
		b.openedAt = now
		b.afterReturnUntil = 0
	case Closed:
		b.consecutiveFailures = 0
		b.window.clear()
	case HalfOpen:
		// A fresh window of trials: what the dependency answered before
		// says nothing of the trials to come.
		b.trialSpan = trialSpan(b.policy)
		b.trials = newTimeWindow(b.trialSpan, now)
		b.halfOpenSince = now
	}
}
