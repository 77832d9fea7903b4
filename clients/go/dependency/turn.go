// Waiting for an attempt's turn at the send gate, keeping a call's place
// in line across its retries.

package dependency

import (
	"context"
	"math"
	"time"

	"github.com/stormguard/stormguard/clients/go/gate"
)

// place is one call's dealings with the send gate. From the first time the
// call waits in the gate's line, its retries wait at that place again,
// ahead of calls that came after it: the line is first come, first served
// by call, not by attempt.
type place struct {
	gate   *gate.Gate // nil when the policy has none
	born   time.Time
	ticket gate.Ticket
	held   bool
}

// turn waits for an attempt's turn: none while the gate is off; else in
// line until the gate says go, or until ctx ends: then the call leaves the
// line, and turn returns ctx's error. Each time the call is to claim its
// turn, permitted says whether it may still go (the breaker may have
// changed state meanwhile): its error makes the call leave the line, no
// turn spent, and is returned; goNow makes it leave the line and go at
// once (the fleet's trial, which waits for no turn).
func (p *place) turn(ctx context.Context, permitted func() (goNow bool, err error)) error {
	if p.gate == nil {
		return nil
	}
	var ticket gate.Ticket
	var wait bool
	if p.held {
		ticket, wait = p.gate.Rejoin(p.ticket, since(p.born))
	} else {
		ticket, wait = p.gate.Turn(since(p.born))
	}
	if !wait {
		return nil
	}
	if !p.held {
		p.ticket, p.held = ticket, true
	}
	wake := make(chan struct{}, 1)
	for {
		err, goNow := ctx.Err(), false
		if err == nil {
			goNow, err = permitted()
		}
		if err != nil || goNow {
			p.gate.Leave(ticket)
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
