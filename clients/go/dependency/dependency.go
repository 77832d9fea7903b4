// Package dependency runs calls to one dependency under its current
// policy, as the Rust library's Dependency and Guard do, with every attempt
// reported: each attempt needs the circuit breaker's permit (a refusal ends
// the call at once, sending nothing), then a turn from the send gate (see
// package gate), which paces attempts while the dependency is unwell. A
// call is of the class its context names (WithCriticality), else of the
// policy's gate.criticality: the gate serves critical calls first and
// sheddable ones last, and a call waits for a turn no longer than its
// class's gate.maxWait after it began, nor past its deadline. A call whose
// turn, at the gate's pace, would come after that bound is shed: it gives
// up at once with Shed, sending nothing more, rather than wait in line for
// nothing; one still in line when the bound passes leaves it and gives up
// with NoTurn, and one whose context is cancelled meanwhile, with
// Cancelled. A first try deposits into the retry budget and
// every retry needs its leave; failures the policy's retryOn names are
// retried, up to maxRetries, after the policy's backoff delay; while the
// gate is on, a retry waits for its turn instead, asking neither the
// budget nor the backoff. The gate hears a failed attempt as an overload
// only if the policy retries it and gate.overloadOn covers it (by default
// a refused connection, a timeout, 429 or 503), or its answer carried a
// Retry-After; an error the dependency answered with (a 500, say) says
// nothing of its load. The gate hears each attempt before the breaker
// does, and a refusal it heard as overload while it is on (the one that
// turned it on included) is its to answer, by pacing: the breaker does
// not hear it as a failure, as in the Rust library, so that a breaker
// opening beside the gate does not turn an overload it is easing into an
// outage; a half-open trial so refused found the dependency up, and counts
// as a success. A timeout is no refusal (nothing answered it): the breaker
// hears it, gate on or not. Errors the dependency answered with count for
// the breaker as failures. A refusal while no gate paces (the gate off, or
// none: what overloads is then read from the policy's gate block all the
// same) is heard as refused (breaker.Permit.RecordRefused), as in the Rust
// library: it counts as a failure, but a breaker it trips goes half-open,
// not open, and its trials follow what the dependency accepts, since a
// 503 may say the dependency is up with less room than its callers want;
// only trials refused for a whole trial window (breaker.TrialWindow, or
// openTimeout if shorter) with none accepted open it. A call
// still in line at its bound gives up its place, and the gate counts it
// shed. perTryTimeoutMs bounds each attempt. When the watch delivers a
// new policy, the budget is rebuilt from it if its block changed, and the
// breaker and the gate are retuned in place (see
// breaker.Breaker.Retune and gate.Gate.Retune), keeping their state, unless
// the update turns them off, or on, or changes what the gate hears as
// overload; an unchanged block keeps its state, as Guard::updated does. A
// policy with a setting that cannot be used (policy.Policy.Settings) is
// refused whole, as the Rust library refuses one that is not a
// ValidPolicy: the breaker, the budget, the gate and the policy in force
// stay as they were, and the refusal is logged once, naming the setting,
// to the watch's logger (policy.Config.Logger).
package dependency

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"reflect"
	"sync"
	"syscall"
	"time"

	"github.com/stormguard/stormguard/clients/go/breaker"
	"github.com/stormguard/stormguard/clients/go/budget"
	"github.com/stormguard/stormguard/clients/go/gate"
	"github.com/stormguard/stormguard/clients/go/policy"
	"github.com/stormguard/stormguard/clients/go/report"
)

// Reason says why a call gave up.
type Reason string

// The reasons a call gives up.
const (
	// CircuitOpen: the breaker refused an attempt; it was not sent.
	CircuitOpen Reason = "circuit-open"
	// BudgetExhausted: the retry budget refused a retry.
	BudgetExhausted Reason = "budget-exhausted"
	// NotRetryable: the policy does not retry the last attempt's failure.
	NotRetryable Reason = "not-retryable"
	// Exhausted: every retry the policy allows was made.
	Exhausted Reason = "exhausted"
	// Cancelled: the caller's context ended.
	Cancelled Reason = "cancelled"
	// NoTurn: the send gate had no turn for the attempt, waiting in line,
	// before the call's wait bound: its class's gate.maxWait after the
	// call began, or its deadline (the context's, or the policy's
	// maxElapsed) if sooner.
	NoTurn Reason = "no-turn"
	// Shed: at the pace the send gate keeps, the attempt's turn would have
	// come after the call's wait bound (as for NoTurn): the call failed at
	// once, that attempt not sent, instead of waiting in line for nothing.
	Shed Reason = "shed"
	// Deadline: the policy's maxElapsed passed, or would have before the
	// next retry's backoff ended.
	Deadline Reason = "deadline"
)

// ErrShed is the error of a call the send gate shed (Reason Shed).
var ErrShed = errors.New("at the pace the dependency can take, its turn would come after its wait bound (gate.maxWait) or deadline")

// CallError is a call that did not succeed.
type CallError struct {
	// Service is the dependency called.
	Service string
	// Reason says why the call gave up.
	Reason Reason
	// Attempts is the number of attempts sent.
	Attempts uint32
	// Status is the last attempt's HTTP status (0 if it got none).
	Status int
	// Err is the last attempt's error, the breaker's *breaker.NotPermitted,
	// ErrShed for Shed, or the context's error (context.DeadlineExceeded
	// for NoTurn, whichever bound passed, and, when the policy's maxElapsed
	// cut the last attempt short, for Deadline).
	Err error
}

// Error names the service, the reason, the attempts and the last failure.
func (e *CallError) Error() string {
	last := ""
	switch {
	case e.Err != nil:
		last = ": " + e.Err.Error()
	case e.Status != 0:
		last = fmt.Sprintf(": status %d", e.Status)
	}
	return fmt.Sprintf("%s: gave up (%s) after %d attempts%s", e.Service, e.Reason, e.Attempts, last)
}

// Unwrap is Err.
func (e *CallError) Unwrap() error { return e.Err }

// Dependency is calls to one service; its methods may be called from any
// goroutine.
type Dependency struct {
	watch    *policy.Watch
	service  string
	reporter *report.Reporter

	mu      sync.Mutex
	built   bool
	etag    string
	current policy.Policy
	breaker *breaker.Breaker
	// breakerPolicy and breakerBorn are the breaker's settings and creation
	// (its clock's zero, which a retune keeps).
	breakerPolicy breaker.Policy
	breakerBorn   time.Time
	budget        *budget.Budget
	budgetKey     policy.BudgetSettings
	budgetBorn    time.Time
	gate          *gate.Gate
	gatePolicy    gate.Policy
	gateBorn      time.Time
	// overload is the policy's gate block, enabled or not: what says
	// overload, which tells the breaker a refusal from a failure while no
	// gate paces the dependency.
	overload gate.Policy
	random   *rand.Rand
	// refused is the last policy the watch gave that could not be used
	// (nil once one is taken up), so that it is logged once; never what the
	// next policy is compared with, which stays current.
	refused policy.Policy
}

// guard is the current policy, breaker, budget and gate, with their
// creation times.
type guard struct {
	policy      policy.Policy
	breaker     *breaker.Breaker
	breakerBorn time.Time
	budget      *budget.Budget
	budgetBorn  time.Time
	gate        *gate.Gate
	gatePolicy  gate.Policy
	gateBorn    time.Time
	overload    gate.Policy
}

// New makes calls to service under watch's policy for it, reported
// through reporter (nil for none), which also paces the send gate, while
// it is on, at this process's share of the fleet's rate.
func New(watch *policy.Watch, service string, reporter *report.Reporter) *Dependency {
	return &Dependency{
		watch:    watch,
		service:  service,
		reporter: reporter,
		random:   rand.New(rand.NewSource(time.Now().UnixNano())),
	}
}

// Breaker is the current circuit breaker (nil when the policy has none).
func (d *Dependency) Breaker() *breaker.Breaker { return d.guard().breaker }

// Budget is the current retry budget (nil when the policy has none).
func (d *Dependency) Budget() *budget.Budget { return d.guard().budget }

// Gate is the current send gate (nil when the policy has none).
func (d *Dependency) Gate() *gate.Gate { return d.guard().gate }

// guard follows the watch: a new ETag rebuilds what changed.
func (d *Dependency) guard() guard {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p, etag := d.watch.Version(d.service); !d.built || etag != d.etag {
		d.rebuild(p, etag)
	}
	return guard{d.current, d.breaker, d.breakerBorn, d.budget, d.budgetBorn, d.gate, d.gatePolicy, d.gateBorn, d.overload}
}

// rebuild takes up p, the policy at etag, if every setting it holds can be
// used (policy.Policy.Settings), as the Rust library takes up only a
// ValidPolicy. A policy that cannot be used changes nothing: the breaker,
// the budget, the gate and the policy they were built from, which the
// next policy is compared with, stay as they were, and the refusal is
// logged once, naming the setting, however often the watch hands out the
// same policy again. Refused from the start, the built-in defaults serve.
func (d *Dependency) rebuild(p policy.Policy, etag string) {
	// etag is handled, taken up or refused: the next look at the watch
	// reads it again only once it changes.
	d.etag = etag
	settings, err := p.Settings()
	if err == nil {
		err = d.apply(p, settings)
	}
	if err == nil {
		d.refused = nil
		return
	}
	if d.refused == nil || !reflect.DeepEqual(p, d.refused) {
		version := ""
		if etag != "" {
			version = " (version " + etag + ")"
		}
		if d.built {
			d.watch.Logger().Printf("stormguard: the new policy of %s%s cannot be used (%v); keeping the last", d.service, version, err)
		} else {
			d.watch.Logger().Printf("stormguard: the policy of %s%s cannot be used (%v); using the defaults", d.service, version, err)
		}
	}
	d.refused = p
	if !d.built {
		defaults := policy.Default()
		settings, err := defaults.Settings()
		if err == nil {
			err = d.apply(defaults, settings)
		}
		if err != nil {
			panic("stormguard: the built-in default policy cannot be used: " + err.Error())
		}
	}
}

// apply builds what the checked settings of p change, or says why it
// cannot, having changed nothing: the breaker and the gate retuned in
// place (see breaker.Breaker.Retune and gate.Gate.Retune), keeping their
// state, unless the update turns them off, or on, or changes what the
// gate hears as overload; the budget rebuilt if its block changed; an
// unchanged block keeps its state, as Guard::updated does.
func (d *Dependency) apply(p policy.Policy, s policy.Settings) error {
	now := time.Now()
	// What is new is built first: whatever fails, nothing has changed.
	cb := s.Breaker
	retuneBreaker := cb.Enabled && d.breaker != nil && cb != d.breakerPolicy
	newBreaker := d.breaker
	switch {
	case !cb.Enabled:
		newBreaker = nil
	case d.breaker == nil:
		b, err := breaker.New(cb)
		if err != nil {
			return err
		}
		newBreaker = b
	}
	b := s.Budget
	newBudget := d.budget
	switch {
	case !b.Enabled:
		newBudget = nil
	case d.budget == nil || b != d.budgetKey:
		bu, err := budget.New(b.RetryRatio, b.MinRetriesPerSecond, b.TTL)
		if err != nil {
			return fmt.Errorf("budget: %w", err)
		}
		if b.FleetScoped {
			bu.ScopeToFleet()
		}
		newBudget = bu
	}
	gp := s.Gate
	// What the gate learned holds under the new settings unless they void
	// it: an update mid-incident neither lets new calls past its line nor
	// sends it back to probing.
	retuneGate := gp.Enabled && d.gate != nil && gp != d.gatePolicy && d.gate.Settings().Unlearned(gp) == ""
	newGate := d.gate
	switch {
	case !gp.Enabled:
		newGate = nil
	case d.gate == nil || (gp != d.gatePolicy && !retuneGate):
		g, err := gate.New(gp, nil)
		if err != nil {
			return err
		}
		newGate = g
	}
	// Then retuned in place, the settings checked as Retune checks them,
	// so that it cannot refuse them.
	if retuneBreaker {
		if err := cb.Check(); err != nil {
			return err
		}
	}
	if retuneGate {
		if err := gp.Check(); err != nil {
			return err
		}
	}
	if retuneBreaker && d.breaker.Retune(cb) == nil {
		// The same breaker, on its own clock (breakerBorn stays): an edit
		// mid-outage must not close an open breaker and let every call
		// through to a dependency that is down.
		d.breakerPolicy = cb
	}
	if retuneGate && d.gate.Retune(gp) {
		d.gatePolicy = gp
	}
	if newBreaker != d.breaker {
		d.breaker, d.breakerPolicy, d.breakerBorn = newBreaker, cb, now
	}
	if newBudget != d.budget {
		d.budget, d.budgetKey, d.budgetBorn = newBudget, b, now
	}
	if newGate != d.gate {
		d.gate, d.gatePolicy, d.gateBorn = newGate, gp, now
	}
	d.current, d.overload, d.built = p, gp, true
	if d.reporter != nil {
		d.reporter.Track(d.service, d.breaker, d.breakerBorn, d.budget, d.gate, d.gateBorn)
	}
	return nil
}

func since(born time.Time) uint64 {
	d := time.Since(born) // monotonic
	if d < 0 {
		return 0
	}
	return uint64(d)
}

func (d *Dependency) draw() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.random.Uint64()
}

// Failure names a failure without a status, as retryOn does: a context
// deadline (or any timeout) is "timeout", a refused connection
// "connect-failure", anything else "reset".
func Failure(err error) string {
	var timeout interface{ Timeout() bool }
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &timeout) && timeout.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connect-failure"
	}
	var dial *net.OpError
	if errors.As(err, &dial) && dial.Op == "dial" {
		return "connect-failure"
	}
	return "reset"
}

// settle tells the breaker how an attempt went, as the Rust library does:
// an answer counts as a success, a failure the policy retries counts
// against the dependency, and one it does not retry (a 501, a connect
// failure retryOn leaves out) counts for nothing. A retried failure that
// says overload (overloaded: what a send gate would hear as an overload,
// an answered refusal or a refused connection that the policy's
// gate.overloadOn names, or an answer with a Retry-After, never a
// timeout) is the dependency refusing the call. While no gate paces it,
// the breaker hears it as refused (breaker.Permit.RecordRefused): a
// failure, but one that trips the breaker half-open, not open, for its
// trials to follow what the dependency accepts. A refusal the send gate
// paces (paced: the gate heard it as an overload and is on) is not a
// failure: the gate answers an overload by pacing, and a breaker opening
// beside it would turn the overload into an outage. A half-open trial so
// refused found the dependency up: it counts as a success, so that the
// breaker hears its trial's result (a fleet trial is then reported as
// succeeded at the next ask) and the trial's slot is not handed back for a
// call that skips the gate's pace; a paced attempt that is no trial counts
// for nothing.
func settle(permit *breaker.Permit, answered, retryable, overloaded, paced bool, now uint64) {
	switch {
	case answered, paced && permit.Trial():
		permit.Record(false, now)
	case paced || !retryable:
		permit.Cancel()
	case overloaded:
		permit.RecordRefused(now)
	default:
		permit.Record(true, now)
	}
}

// Call runs a call to endpoint: attempt sends one attempt and answers its
// HTTP status, or an error when no answer came. It returns nil once an
// attempt is answered with a status under 500 that the policy does not
// retry, and a *CallError otherwise. The policy's maxElapsed bounds the
// attempts and the waits in the gate's line together, as ctx's deadline
// does: a call it ends gives up with Deadline, or NoTurn while it waits
// for a turn (Shed, at once, if its turn would come after it). The call
// is of the class ctx names (WithCriticality), else of the policy's
// gate.criticality, and waits for a turn no longer than that class's
// gate.maxWait after it began. Its attempts answer a status only;
// Transport also reads each answer's Retry-After, which lengthens the wait
// before the next attempt.
func (d *Dependency) Call(ctx context.Context, endpoint string, attempt func(ctx context.Context) (status int, err error)) error {
	return d.call(ctx, endpoint, func(ctx context.Context) (answer, error) {
		status, err := attempt(ctx)
		return answer{status: status}, err
	})
}

// answer is what an attempt was answered: its HTTP status (0 if none),
// whether the answer carried a Retry-After the Rust library can read, and
// the wait it asked for.
type answer struct {
	status     int
	retryAfter bool
	after      time.Duration
}

// call is Call, with attempts that say whether their answer carried a
// Retry-After.
func (d *Dependency) call(ctx context.Context, endpoint string, attempt func(ctx context.Context) (answer, error)) error {
	g := d.guard()
	if d.reporter != nil {
		done := d.reporter.InFlight(d.service)
		defer done()
	}
	gaveUp := func(reason Reason, attempts uint32, status int, err error) error {
		return &CallError{Service: d.service, Reason: reason, Attempts: attempts, Status: status, Err: err}
	}
	if g.budget != nil {
		g.budget.Deposit(since(g.budgetBorn))
	}
	retries := g.policy.Retries()
	delays := g.policy.Backoff()
	perTry := g.policy.PerTryTimeout()
	// The policy's maxElapsed bounds the attempts and the waits in line
	// together, as the caller's context does.
	start, maxElapsed := time.Now(), g.policy.MaxElapsed()
	callCtx := ctx
	if maxElapsed > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithDeadline(ctx, start.Add(maxElapsed))
		defer cancel()
	}
	line := &place{gate: g.gate, born: g.gateBorn, start: start}
	line.class, line.named = criticalityOf(ctx)
	var previous uint64
	var lastStatus int
	for retry := uint32(0); ; retry++ {
		if err := ctx.Err(); err != nil {
			return gaveUp(Cancelled, retry, 0, err)
		}
		var permit *breaker.Permit
		if g.breaker != nil {
			var err error
			if permit, err = g.breaker.Acquire(since(g.breakerBorn)); err != nil {
				return gaveUp(CircuitOpen, retry, 0, err)
			}
		}
		// The breaker first, so that a call it refuses does not wait in
		// line for nothing; a call in line asks it again if it changed
		// state meanwhile (it opened), and leaves the line if refused, or
		// to go at once as the fleet's trial.
		// The fleet's trials are few already: one does not wait for a turn.
		if permit == nil || !permit.FleetTrial() {
			renewed := func() (bool, error) {
				if permit == nil || permit.Current() {
					return false, nil
				}
				permit.Cancel()
				var err error
				permit, err = g.breaker.Acquire(since(g.breakerBorn))
				return permit != nil && permit.FleetTrial(), err
			}
			if err := line.turn(callCtx, renewed); err != nil {
				if permit != nil {
					permit.Cancel()
				}
				var refused *breaker.NotPermitted
				reason := Cancelled
				switch {
				case errors.As(err, &refused):
					return gaveUp(CircuitOpen, retry, 0, err)
				case errors.Is(err, ErrShed):
					reason = Shed
				case errors.Is(err, context.DeadlineExceeded):
					reason = NoTurn
				}
				return gaveUp(reason, retry, lastStatus, err)
			}
		}
		sent := since(g.gateBorn)
		attemptCtx, cancel := callCtx, context.CancelFunc(func() {})
		if perTry > 0 {
			attemptCtx, cancel = context.WithTimeout(callCtx, perTry)
		}
		answered, err := attempt(attemptCtx)
		status := answered.status
		timedOut := err != nil && errors.Is(attemptCtx.Err(), context.DeadlineExceeded)
		cancel()
		lastStatus = status
		outcome := report.Success
		switch {
		case err != nil:
			outcome = report.Error
		case status >= 500:
			outcome = report.ServerError
		}
		if d.reporter != nil {
			d.reporter.Record(d.service, endpoint, retry, outcome)
		}
		if err != nil && ctx.Err() != nil {
			// The caller gave up: the attempt says nothing about the dependency.
			if permit != nil {
				permit.Cancel()
			}
			return gaveUp(Cancelled, retry+1, 0, ctx.Err())
		}
		var retryable bool
		var failure string
		if err != nil {
			failure = Failure(err)
			retryable = g.policy.RetriesFailure(failure)
		} else {
			retryable = g.policy.RetriesStatus(status)
		}
		succeeded := err == nil && status < 500 && !retryable
		// The gate hears the attempt first, then the breaker: a refusal
		// the gate paces, the one that turned it on included, is the
		// gate's to answer, not the breaker's.
		end := ending{timedOut: timedOut, retryable: retryable, status: status, failure: failure, retryAfter: answered.retryAfter}
		var heard gate.Signal
		if g.gate != nil {
			heard = signal(g.gatePolicy, end)
			g.gate.Record(heard, sent, since(g.gateBorn))
		} else {
			// No gate: what overloads is read from the policy's gate
			// block all the same, for the breaker.
			heard = signal(g.overload, end)
		}
		if permit != nil {
			// Only a refusal is the gate's to pace, or, with no gate to
			// pace it, the breaker's to hear as refused: a timeout says
			// nothing answered, and the breaker hears it as a failure (a
			// trial that timed out did not find the dependency up).
			overloaded := heard == gate.Overloaded
			paced := overloaded && g.gate != nil && g.gate.On()
			settle(permit, succeeded, retryable, overloaded, paced, since(g.breakerBorn))
		}
		if succeeded {
			return nil
		}
		if callCtx.Err() != nil {
			// The policy's maxElapsed cut the attempt short.
			return gaveUp(Deadline, retry+1, status, err)
		}
		switch {
		case !retryable:
			return gaveUp(NotRetryable, retry+1, status, err)
		case retry >= retries:
			return gaveUp(Exhausted, retry+1, status, err)
		}
		// The backoff's delay, lengthened to what the answer's Retry-After
		// asked, never beyond maxDelay.
		previous = delays.Delay(retry, previous, d.draw())
		if asked := uint64(answered.after); asked > previous {
			previous = min64(asked, uint64(delays.Max))
		}
		if maxElapsed > 0 && time.Since(start)+time.Duration(previous) >= maxElapsed {
			return gaveUp(Deadline, retry+1, status, err)
		}
		// While the gate paces, it bounds what retries add to the load,
		// and more tightly than the budget's fixed share; its pace also
		// spaces the attempts. A retry then waits for its turn instead of
		// asking the budget, and instead of a backoff, unless the
		// dependency asked for a wait (Retry-After).
		paced := g.gate != nil && g.gate.On()
		wait := time.Duration(previous)
		if paced {
			wait = answered.after
		}
		if maxElapsed > 0 && wait > 0 && time.Since(start)+wait >= maxElapsed {
			return gaveUp(Deadline, retry+1, status, err)
		}
		if !paced && g.budget != nil && !g.budget.TryRetry(since(g.budgetBorn)) {
			return gaveUp(BudgetExhausted, retry+1, status, err)
		}
		if wait <= 0 {
			continue
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return gaveUp(Cancelled, retry+1, status, ctx.Err())
		case <-timer.C:
		}
	}
}

// ending is how an attempt ended, as the send gate hears it.
type ending struct {
	// timedOut: no answer within the per-try timeout.
	timedOut bool
	// retryable: the policy retries the failure.
	retryable bool
	// status is the answer's HTTP status, 0 if none came.
	status int
	// failure names the failure without a status (see Failure), "" if an
	// answer came.
	failure string
	// retryAfter: the answer carried a Retry-After.
	retryAfter bool
}

// signal is what an attempt's ending tells the send gate under the gate's
// policy p, as the Rust library judges it: no answer within the per-try
// timeout is a timeout if p's overloadOn lists timeout; a failure the
// policy retries is an overload if overloadOn covers it or its answer
// carried a Retry-After (gate.Policy.Overloads). Anything else (an answer,
// an error the dependency answered with, such as a 500, or a failure the
// policy does not retry) says nothing of its load and is accepted.
func signal(p gate.Policy, end ending) gate.Signal {
	switch {
	case end.timedOut:
		if p.OverloadedByTimeouts() {
			return gate.TimedOut
		}
	case end.retryable && p.Overloads(end.status, end.failure, end.retryAfter):
		return gate.Overloaded
	}
	return gate.Accepted
}

func min64(a, b uint64) uint64 {
	if a < b {
		return a
	}
	return b
}
