// Trials: whether a process's refusals are a capacity's or a share failed at
// random, told by what the gate's cuts do to them, as the Rust library's
// gate::trial decides.

package gate

import "math"

// A trial of a cut counts the answers to attempts sent since it. A
// capacity refuses what is sent past it: cut to what it delivered, its
// refusals vanish. A dependency failing a share at random refuses that
// share at any rate. Refusals that keep their share over trialsInARow cuts
// in a row are taken for failure at random.
const (
	// trialEvidence is the refusals a trial expects, at the share before
	// its cut, before it judges.
	trialEvidence = 10.0
	// trialLeastAnswers is the answers a trial counts at least, however
	// high the share.
	trialLeastAnswers = 20.0
	// fewerThanChance is the standard deviations below the refusals the
	// share before the cut expects, for them to have vanished.
	fewerThanChance = 2.0
	// trialsInARow is the trials in a row whose refusals kept their share
	// that judge failure at random: the first cut after a capacity falls
	// may still be past it.
	trialsInARow = 2
)

// finding is what a trial's answers say, once they say something.
type finding uint8

const (
	// trialGoesOn: too few answers to tell, or none to attempts sent since the cut.
	trialGoesOn finding = iota
	// capacityFound: the refusals went beyond their share, or vanished.
	capacityFound
	// keptShare: the refusals kept their share; the next cut begins the next trial.
	keptShare
	// randomFound: they kept it over trialsInARow trials.
	randomFound
)

// trial is the trial of one cut under way.
type trial struct {
	since             uint64
	shareBefore       float64
	accepted, refused float64
}

// trials are the trials of one gate's cuts.
type trials struct {
	current *trial
	kept    int
}

// cut begins a trial of the cut at now, after shareBefore of the answers
// over the last second were refused, unless one is under way.
func (t *trials) cut(shareBefore float64, now uint64) {
	if t.current == nil && shareBefore > 0 {
		t.current = &trial{since: now, shareBefore: shareBefore}
	}
}

// holds says whether a trial holds the rate: a refusal cuts nothing.
func (t *trials) holds() bool { return t.current != nil }

// reset forgets every trial.
func (t *trials) reset() { *t = trials{} }

// answered counts accepted and refused answers to an attempt sent at sent,
// and says what the trial under way found, once it has found it.
func (t *trials) answered(accepted, refused float64, sent uint64) finding {
	c := t.current
	if c == nil || sent < c.since {
		return trialGoesOn
	}
	c.accepted += accepted
	c.refused += refused
	if beyondRandom(c.accepted, c.refused, c.shareBefore) {
		t.reset()
		return capacityFound
	}
	answered := c.accepted + c.refused
	expected := float64(answered * c.shareBefore)
	if expected < trialEvidence || answered < trialLeastAnswers {
		return trialGoesOn
	}
	t.current = nil
	spread := math.Sqrt(float64(expected * (1 - c.shareBefore)))
	kept := expected-c.refused <= float64(fewerThanChance*spread)
	most := c.refused-c.accepted > float64(2*math.Sqrt(answered))
	if !kept || most {
		t.reset()
		return capacityFound
	}
	t.kept++
	if t.kept < trialsInARow {
		return keptShare
	}
	t.reset()
	return randomFound
}

// beyondRandom says whether refused of accepted + refused answers are more
// than a dependency failing share of its requests at random would refuse,
// by beyondChance standard deviations of the binomial count.
func beyondRandom(accepted, refused, share float64) bool {
	answered := accepted + refused
	expected := float64(share * answered)
	spread := math.Sqrt(float64(float64(answered*share) * (1 - share)))
	return refused-expected > float64(beyondChance*spread)
}
