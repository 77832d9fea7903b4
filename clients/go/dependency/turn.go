// Waiting for an attempt's turn at the send gate, keeping a call's place
// in line across its retries, within the call's wait bound.

package dependency

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/stormguard/stormguard/clients/go/gate"
)

// criticalityKey is the context key of a call's class.
type criticalityKey struct{}

// WithCriticality is ctx for calls of class: the send gate serves more
// critical calls first and sheds less critical ones first, and each class
// waits for a turn no longer than its gate.maxWait after the call began.
// A call under a context that names no class is of the policy's
// gate.criticality (by default gate.Default). Through Transport, put it
// on the request's context.
func WithCriticality(ctx context.Context, class gate.Criticality) context.Context {
	return context.WithValue(ctx, criticalityKey{}, class)
}

// criticalityOf is the class ctx names, if any.
func criticalityOf(ctx context.Context) (gate.Criticality, bool) {
	class, named := ctx.Value(criticalityKey{}).(gate.Criticality)
	return class, named
}

// place is one call's dealings with the send gate. From the first time the
// call waits in the gate's line, its retries wait at that place again,
// ahead of calls of its class that came after it: the line is first come,
// first served by call, not by attempt.
type place struct {
	gate   *gate.Gate // nil when the policy has none
	born   time.Time
	ticket gate.Ticket
	held   bool
	// start is when the call began: its class's maxWait runs from then.
	start time.Time
	// class is the call's class, if it named one (named); else the gate
	// policy's.
	class gate.Criticality
	named bool
}

// asker is who the call asks for a turn as, under the gate's settings now:
// its class, and the time its turn must come by, its class's maxWait after
// it began or ctx's deadline if sooner, as a time and on the gate's clock.
func (p *place) asker(ctx context.Context) (gate.Asker, time.Time) {
	settings := p.gate.Settings()
	class := settings.Criticality
	if p.named {
		class = p.class
	}
	by := p.start.Add(settings.MaxWait.Of(class))
	if deadline, ok := ctx.Deadline(); ok && deadline.Before(by) {
		by = deadline
	}
	// On the gate's clock, where 0 is no bound: a bound at or before the
	// gate's creation is its first nanosecond, long past.
	at := uint64(1)
	if d := by.Sub(p.born); d > 1 {
		at = uint64(d)
	}
	return gate.Asker{Class: class, By: at}, by
}

// turn waits for an attempt's turn: none while the gate is off; else the
// call asks as asker says, and is shed at once (ErrShed) if its turn would
// come after its bound at the gate's pace, or waits in line until the gate
// says go, until its bound passes (context.DeadlineExceeded: the call gives
// up its place, and the gate counts it shed, as one shed at once), or
// until ctx ends (ctx's error): then the call leaves the line. Each time
// the call is to claim its turn, permitted says whether it may still go
// (the breaker may have changed state meanwhile): its error makes the call
// leave the line, no turn spent, and is returned; goNow makes it leave the
// line and go at once (the fleet's trial, which waits for no turn).
func (p *place) turn(ctx context.Context, permitted func() (goNow bool, err error)) error {
	// Off, the gate gives every turn at once: a healthy call does not take
	// its lock to read its settings.
	if p.gate == nil || !p.gate.On() {
		return nil
	}
	asker, by := p.asker(ctx)
	var ticket gate.Ticket
	var verdict gate.Verdict
	if p.held {
		ticket, verdict = p.gate.Rejoin(p.ticket, asker, since(p.born))
	} else {
		ticket, verdict = p.gate.TurnFor(asker, since(p.born))
	}
	switch verdict {
	case gate.Go:
		return nil
	case gate.Shed:
		return ErrShed
	}
	if !p.held {
		p.ticket, p.held = ticket, true
	}
	// It leaves the line when its bound passes, as at its deadline.
	ctx, cancel := context.WithDeadline(ctx, by)
	defer cancel()
	wake := make(chan struct{}, 1)
	for {
		err, goNow := ctx.Err(), false
		if err == nil {
			goNow, err = permitted()
		}
		if err != nil || goNow {
			if errors.Is(err, context.DeadlineExceeded) {
				// It waited as long as it could (NoTurn): demand the
				// pace did not serve, which the fleet hears of.
				p.gate.GiveUp(ticket)
			} else {
				p.gate.Leave(ticket)
			}
			return err
		}
		verdict, at := p.gate.Claim(ticket, since(p.born), wake)
		if verdict == gate.Go {
			return nil
		}
		// First in line, it claims again when its turn is due; behind,
		// when woken. Either way, sooner if woken, or when ctx ends.
		var timer *time.Timer
		var due <-chan time.Time
		if verdict == gate.At && at <= math.MaxInt64 {
			timer = time.NewTimer(time.Until(p.born.Add(time.Duration(at))))
			due = timer.C
		}
		select {
		case <-ctx.Done():
		case <-wake:
		case <-due:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}
