"""The Python send gate against stormguard-core's, op by op and bit by bit,
and its behaviour case by case."""

import dataclasses
import json
import math
import pathlib
import random
import re
import threading
from fractions import Fraction

import pytest

from stormguard_client.gate import (DOWN_REFUSALS, Asker, Claim, GatePolicy, SendGate, Shedding, Signal, Tally,
                                    Ticket, _cbrt, _Pacer)
from stormguard_client.policies import DEFAULT_POLICY

VECTORS = pathlib.Path(__file__).resolve().parents[2] / "vectors" / "gate.json"
SCENARIOS = json.loads(VECTORS.read_text())["scenarios"]
S = 1_000_000_000
MS = 1_000_000


def _id(scenario):
    gate = scenario["policy"]["gate"]
    return f"{scenario['seed']}-{gate['minRate']}-{gate['maxRate']}-{gate['beta']}-{gate['overloadWhen']}"


def _state(gate):
    return [gate.is_on, gate.rate, gate.own_rate, gate.waiting, gate.phase, gate.credit, gate.is_watching,
            gate.is_answering]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=_id)
def test_every_verdict_and_state_is_cores(scenario):
    draws = []
    gate = SendGate(GatePolicy.from_json(scenario["policy"]["gate"]), 0, draw=draws.pop)
    for i, (op, state) in enumerate(scenario["ops"]):
        where = f"op {i} {op}"
        at, kind = op["at"], op["op"]
        if kind in ("turn", "rejoin"):
            ticket = gate.turn(at) if kind == "turn" else gate.rejoin(op["place"], Asker(), at)
            assert ("now" if ticket is None else ["queued", ticket.number]) == op["verdict"], where
        elif kind == "claim":
            claim = gate.claim(Ticket(op["ticket"]), at)
            assert (claim.verdict if claim.at_ns is None else ["at", claim.at_ns]) == op["verdict"], where
        elif kind == "leave":
            gate.leave(Ticket(op["ticket"]))
        elif kind == "record":
            if "draw" in op:
                draws.append(op["draw"])
            gate.record(Signal(op["signal"]), op["sent"], at)
            assert not draws, f"{where}: the gate turned on without drawing its first credit"
        elif kind == "lease":
            gate.lease(op["rate"], op["until"], at)
        elif kind == "pace":
            draws.append(op["draw"])
            assert gate.pace_by_fleet_at(at), f"{where}: a watching gate turns on when the fleet says pace"
            assert not draws, f"{where}: the gate turned on without drawing its first credit"
        elif kind == "tally":
            t = op["tally"]
            assert gate.asks_fleet_at(at) == t["asks"], where
            tally = gate.tally()
            # What the vectors tell; every call in them is of the default
            # class with no time to come by: none is shed, and only the
            # default class asks.
            assert dataclasses.replace(tally, shed=(0, 0, 0), demand=(0.0, 0.0, 0.0)) == \
                Tally(t["sent"], t["accepted"], t["overloaded"], t["timedOut"], t["waiting"], t["watching"]), where
            assert tally.shed == (0, 0, 0) and tally.demand[0] == tally.demand[2] == 0.0, where
        else:
            pytest.fail(f"unknown op {kind!r}")
        # Rates and credit compare with ==: the same doubles, bit for bit.
        assert _state(gate) == state, where


def test_the_scenarios_visit_every_op_phase_and_verdict():
    ops = [op for s in SCENARIOS for op, _ in s["ops"]]
    states = [state for s in SCENARIOS for _, state in s["ops"]]
    assert {op["op"] for op in ops} == {"turn", "rejoin", "claim", "leave", "record", "lease", "pace", "tally"}
    assert {state[4] for state in states} == {"off", "probing", "slow_start", "cubic", "regrown"}
    assert {op["signal"] for op in ops if op["op"] == "record"} == {"accepted", "overloaded", "timed_out"}
    claims = {str(op["verdict"][0] if isinstance(op["verdict"], list) else op["verdict"])
              for op in ops if op["op"] == "claim"}
    assert claims == {"go", "at", "behind"}
    assert sum("draw" in op for op in ops) >= 5, "the gates turn on (and off) again"
    assert {s["policy"]["gate"]["overloadWhen"] for s in SCENARIOS} == {"evidence", "any-refusal", "most-refused"}
    assert any(state[6] for state in states), "a gate off but watching after a refusal"
    assert any(state[7] for state in states), "a gate on, judging the dependency to answer"
    tallies = [op["tally"] for op in ops if op["op"] == "tally"]
    assert any(t["watching"] and t["sent"] for t in tallies), "a watching gate tells what it heard"
    assert any(t["asks"] and t["watching"] for t in tallies), "a watching gate asks the fleet"
    paced = [s for s in SCENARIOS for op, _ in s["ops"] if op["op"] == "pace"]
    assert paced and all(s["policy"]["gate"]["overloadWhen"] != "any-refusal" for s in paced), \
        "the fleet tells watching gates to pace, and any-refusal never watches"
    assert not any(state[6] or state[7] for s in SCENARIOS if s["policy"]["gate"]["overloadWhen"] == "any-refusal"
                   for _, state in s["ops"]), "any-refusal neither watches nor judges"


# --- behaviour, case by case -----------------------------------------------


def gate(**settings):
    """A gate whose slow start adds one turn per second per accepted attempt,
    for round figures; it draws no credit when it turns on, so its first turn
    comes a whole interval later. Under ``overloadWhen: any-refusal`` (the
    default, pinned) unless told otherwise, so that one refusal turns it on;
    most-refused has tests of its own below."""
    policy = GatePolicy(**{"enabled": True, "ramp": 1.0, "overload_when": "any-refusal", **settings})
    return SendGate(policy, 0, draw=lambda: 0.0)


def overload(gate, at=0):
    gate.record(Signal.OVERLOADED, at, at)


def down(gate, at=0):
    """Under most-refused, the refusals with nothing accepted that show
    the dependency down (``DOWN_REFUSALS``)."""
    for _ in range(DOWN_REFUSALS):
        overload(gate, at)


def secs(s):
    return round(Fraction(s) * S)


def test_off_it_gives_every_turn_at_once_and_ignores_good_answers():
    g = gate()
    for _ in range(1000):
        assert g.turn(0) is None
        g.record(Signal.ACCEPTED, 0, 0)
    assert not g.is_on and g.rate is None and g.phase == "off"
    assert g.tally() == Tally(), "nothing counts while off"


def test_the_first_overload_turns_it_on_and_the_line_moves_at_the_probe_rate():
    g = gate()
    overload(g)
    assert g.is_on and g.rate == 0.5 and g.phase == "probing"
    first, second = g.turn(0), g.turn(0)
    assert (first.number, second.number) == (0, 1)
    assert g.claim(first, 0) == Claim.at(2 * S)
    assert g.claim(second, 0) == Claim.BEHIND
    assert g.first_in_line() == (0, 2 * S)
    assert g.claim(second, 2 * S) == Claim.BEHIND, "first come, first served"
    assert g.claim(first, 2 * S) == Claim.GO
    assert g.claim(second, 2 * S) == Claim.at(4 * S)
    assert g.claim(second, 4 * S).go
    assert g.waiting == 0
    assert g.turn(6 * S) is None, "due, nobody in line"
    assert g.turn(6 * S) is not None


def test_the_first_in_line_is_woken_when_the_rate_grows_and_the_next_when_it_goes_or_leaves():
    g = gate()
    overload(g)
    woken = {"first": 0, "second": 0}

    def waker(name):
        def wake():
            woken[name] += 1
        return wake

    first, second, third = g.turn(0), g.turn(0), g.turn(0)
    assert g.claim(first, 0, waker("first")) == Claim.at(2 * S)
    assert g.claim(second, 0, waker("second")) == Claim.BEHIND
    g.record(Signal.ACCEPTED, 0, secs(0.5))
    assert woken == {"first": 1, "second": 0}
    g.record(Signal.ACCEPTED, 0, secs(0.5))
    assert woken["first"] == 1, "a waker is called once, then claimed again"
    assert g.claim(first, secs(0.5)) == Claim.at(secs(0.5 + 0.75 / 2.5)), \
        "a quarter turn accrued by 0.5 s; the rest at 2.5 turns a second"
    g.leave(first)
    assert woken["second"] == 1, "the new first in line is woken"
    assert g.claim(second, secs(1.0)).go
    assert g.first_in_line()[0] == third.number


def test_an_overload_cuts_the_rate_once_per_round_of_sends():
    g = gate()
    overload(g)
    for _ in range(100):
        g.record(Signal.ACCEPTED, 0, secs(1.0))
    ends_slow_start = secs(1.05)
    g.record(Signal.OVERLOADED, ends_slow_start, ends_slow_start)
    assert g.rate == 100.0, "slow start ends at the 100 accepted"
    # Two seconds on, the accepted attempts are out of the last second.
    sent = secs(3.0)
    g.record(Signal.OVERLOADED, sent, secs(3.1))
    cut = g.rate
    assert cut == 100.0 * 0.7 and g.phase == "cubic"
    g.record(Signal.OVERLOADED, sent, secs(3.2))
    assert g.rate == cut, "sent before the cut: answered under the old rate"
    g.record(Signal.OVERLOADED, secs(3.15), secs(3.2))
    assert g.rate == cut * 0.7, "sent after it"


def test_a_cut_never_goes_below_what_was_accepted_over_the_last_second():
    g = gate()
    overload(g)
    for i in range(100):
        g.record(Signal.ACCEPTED, 0, secs(0.5 + i * 0.005))
    assert g.rate == 100.5
    for i in range(10):
        t = secs(1.0 + i * 0.01)
        g.record(Signal.OVERLOADED, t, t)
    assert g.rate == 100.0, "100 accepted since 0.5 s: refusals in a row stop there"
    later = secs(1.6)
    g.record(Signal.OVERLOADED, later, later)
    assert g.rate == pytest.approx(70.0, rel=1e-12), "those before 0.6 s no longer count"


def test_the_refusal_that_ends_slow_start_cuts_to_what_was_accepted_not_by_beta():
    g = gate()
    overload(g)
    for _ in range(100):
        g.record(Signal.ACCEPTED, 0, secs(0.2))
    for _ in range(20):
        g.record(Signal.ACCEPTED, 0, secs(1.5))
    assert g.rate == 120.5 and g.phase == "slow_start"
    g.record(Signal.OVERLOADED, secs(1.5), secs(1.5))
    assert g.rate == 20.0, "the last second's 20, not 0.7 x 120.5"


def test_during_an_outage_it_stays_at_the_probe_rate():
    g = gate()
    for i in range(20):
        overload(g, i * S)
    assert g.rate == 0.5 and g.phase == "probing"


def test_cubic_regrows_the_rate_past_the_rate_it_failed_at():
    g = gate(quiet_ns=60 * S)
    overload(g)
    for _ in range(100):
        g.record(Signal.ACCEPTED, 0, S)
    assert g.rate == 100.5
    failed_at = 3 * S
    g.record(Signal.OVERLOADED, failed_at, failed_at)
    cut = g.rate
    # Back to the rate it failed at after k = cbrt(100.5 x 0.3 / 0.4), about 4.22 s.
    k = _cbrt(100.5 * (1.0 - 0.7) / 0.4)
    g.record(Signal.ACCEPTED, failed_at, failed_at + secs(k / 2))
    assert cut < g.rate < 100.5 and g.phase == "cubic"
    g.record(Signal.ACCEPTED, failed_at, failed_at + secs(k))
    assert g.rate == pytest.approx(100.5, abs=1e-6)
    g.record(Signal.ACCEPTED, failed_at, failed_at + secs(k + 2))
    assert g.rate > 100.5 and g.phase == "regrown", "CUBIC probes past the old maximum"


def test_a_quiet_gate_turns_off_but_not_while_someone_waits():
    g = gate()
    overload(g)
    g.record(Signal.ACCEPTED, 0, secs(4.9))
    assert g.is_on
    # Waiting counts as trouble: a gate that still paces is still needed.
    assert g.turn(secs(4.9)) is None
    ticket = g.turn(secs(4.9))
    assert ticket is not None
    g.record(Signal.ACCEPTED, 0, secs(9.8))
    assert g.is_on, "4.9 s since someone waited"
    g.record(Signal.ACCEPTED, 0, secs(10.0))
    assert g.is_on, "quiet, but someone still waits"
    g.leave(ticket)
    g.record(Signal.ACCEPTED, 0, secs(10.0))
    assert not g.is_on and g.phase == "off"
    assert g.turn(secs(10.0)) is None


def test_an_idle_gate_turns_off_when_next_asked_after_the_quiet_time():
    g = gate()
    overload(g)
    assert g.is_on_at(secs(4.9))
    assert g.turn(60 * S) is None
    assert not g.is_on and not g.is_on_at(60 * S)


def test_a_call_that_rejoins_waits_ahead_of_those_that_came_after_it():
    g = gate()
    overload(g)
    first, second = g.turn(0), g.turn(0)
    assert g.claim(first, 2 * S).go
    # The first's attempt is refused; it comes back while the second waits.
    again = g.rejoin(first.number, Asker(), secs(2.1))
    assert again == first and g.first_in_line()[0] == first.number
    assert g.claim(second, 4 * S) == Claim.BEHIND
    assert g.claim(again, 4 * S).go
    assert g.claim(second, 6 * S).go


def test_a_critical_call_that_rejoins_keeps_its_place_ahead_of_default_calls():
    g = gate()
    overload(g)  # on at 0, at 0.5 a second: turns at 2 s, 4 s...
    default = g.turn(0)
    critical = g.turn_for(Asker("critical"), secs(0.5))
    assert critical == Ticket(1, "critical") and g.first_in_line()[0] == 1, "ahead of the default call"
    assert g.claim(critical, 2 * S).go
    # Its attempt is refused; its retry comes back, of its class, while the
    # default call waits: ahead of it again, though it came after it.
    again = g.rejoin(critical.number, Asker("critical"), secs(2.1))
    assert again == critical and g.first_in_line()[0] == critical.number
    assert g.claim(default, 4 * S) == Claim.BEHIND
    assert g.claim(again, 4 * S).go
    assert g.claim(default, 6 * S).go


def test_a_call_that_waited_as_long_as_it_could_is_counted_shed():
    g = gate()
    overload(g)  # the first turn at 2 s
    waiting = g.turn_for(Asker("critical", secs(3)), 0)
    cancelled = g.turn(0)
    assert isinstance(waiting, Ticket) and isinstance(cancelled, Ticket)
    g.give_up(waiting)
    g.leave(cancelled)
    assert g.tally().shed == (1, 0, 0), "the critical call that waited until its bound is shed; a cancelled one is not"
    assert g.waiting == 0, "both left the line"


def test_a_critical_call_waits_ahead_of_default_ones_already_in_line():
    g = gate()
    overload(g)  # on at 0, at 0.5 a second: turns at 2 s, 4 s, 6 s...
    first, second = g.turn(0), g.turn(0)
    critical = g.turn_for(Asker("critical"), secs(0.5))
    sheddable = g.turn_for(Asker("sheddable"), secs(0.5))
    later = g.turn(secs(0.5))
    assert critical == Ticket(2, "critical") and g.first_in_line()[0] == 2, "ahead of the two already in line"
    assert g.claim(first, 2 * S) == Claim.BEHIND
    assert g.claim(critical, 2 * S).go
    assert g.claim(first, 4 * S).go, "then the default ones, first come, first served"
    assert g.claim(sheddable, 6 * S) == Claim.BEHIND, "the sheddable one behind every default one, even a later one"
    assert g.claim(second, 6 * S).go
    assert g.claim(later, 8 * S).go
    assert g.claim(sheddable, 10 * S).go
    # A critical call's retry comes back at its place, in its class.
    again = g.turn_for(Asker("critical"), secs(10.1), place=critical.number)
    assert again == critical and g.turn(secs(10.1)) == Ticket(5)
    assert g.first_in_line()[0] == critical.number


def accepted(g, rate, at):
    """Has ``g`` hear at ``at`` that an attempt was accepted, so that it
    probes no more, and then pace at ``rate`` from no credit: as if what the
    dependency takes were ``rate`` a second."""
    g.record(Signal.ACCEPTED, at, at)
    assert g.is_on and g.phase != "probing", "an accepted attempt ends probing and leaves the gate on"
    with g._lock:
        g._rate.now = rate
        g._pacer = _Pacer(0.0, at)


def test_while_probing_only_the_next_probe_counts_and_once_something_is_accepted_those_ahead_do():
    g = gate()
    overload(g)
    # Probing at 0.5 a second with no credit: the next probe is at 2 s, and
    # the line moves at once when the dependency is back, so only the next
    # probe counts, whoever waits ahead.
    first = g.turn_for(Asker("default", by_ns=secs(2.5)), 0)
    assert first == Ticket(0)
    assert g.turn_for(Asker("default", by_ns=secs(1.5)), 0) is Shedding.SHED, "the next probe comes after its bound"
    second = g.turn_for(Asker("default", by_ns=secs(2.5)), 0)
    assert second == Ticket(1), "behind the first, its turn is still expected at the next probe"
    # Accepted: the rate is what the dependency takes, here one a second,
    # and those ahead count.
    t1 = secs(0.1)
    accepted(g, 1.0, t1)
    assert g.turn_for(Asker("default", by_ns=t1 + secs(2.5)), t1) is Shedding.SHED, \
        "behind two, its turn would come at 3 s"
    assert g.waiting == 2, "the shed calls took no place"
    critical = g.turn_for(Asker("critical", by_ns=t1 + secs(2.5)), t1)
    assert isinstance(critical, Ticket) and g.first_in_line()[0] == critical.number, \
        "with the same bound, a critical call waits: nobody of its class is ahead"
    assert g.turn_for(Asker("sheddable", by_ns=t1 + secs(3.5)), t1) is Shedding.SHED, \
        "a sheddable call waits behind all three: its turn would come at 4 s"
    tally = g.tally()
    assert tally.shed == (0, 2, 1)
    assert tally.demand == (1.0 + 1.0, 4.0 + 2.0, 1.0), "the calls that asked, and those that wait, by class"
    assert g.claim(critical, t1 + secs(1)).go
    assert g.claim(first, t1 + secs(2)).go
    assert g.claim(second, t1 + secs(3)).go


def test_a_call_whose_turn_would_come_after_its_bound_is_shed_taking_no_place():
    g = gate()
    overload(g)
    # Something was accepted: the gate probes no more, and those ahead
    # count. The dependency takes a call every 2 s, the first at 2 s.
    accepted(g, 0.5, 0)
    assert g.turn_for(Asker("default", by_ns=2 * S), 0) == Ticket(0), "its turn at 2 s: in time"
    assert g.turn_for(Asker("default", by_ns=4 * S - 1), 0) is Shedding.SHED, "behind one: at 4 s, past its bound"
    assert g.waiting == 1 and g.tally().shed == (0, 1, 0)
    critical = g.turn_for(Asker("critical", by_ns=2 * S), 0)
    assert critical == Ticket(1, "critical"), "none ahead of it in its class or above: the next number, at 2 s"
    assert g.turn_for(Asker("sheddable", by_ns=6 * S - 1), 0) is Shedding.SHED, "two ahead of it: at 6 s"
    assert g.turn_for(Asker("sheddable", by_ns=6 * S), 0) == Ticket(2, "sheddable")
    assert g.turn_for(Asker("default", by_ns=S), 0, place=0) is Shedding.SHED, "a retry is shed too"
    assert g.waiting == 3 and g.first_in_line()[0] == critical.number
    assert g.tally().shed == (0, 1, 1), "each class's shed counted since the last tally"
    g.lease(10.0, 60 * S, 0)
    assert g.turn_for(Asker("default", by_ns=S), 0, place=0) == Ticket(0), \
        "at the fleet's faster pace it comes in time: due at 0.1 s, then one ahead at 10 a second"


def test_the_tally_tells_the_demand_and_the_calls_shed_by_class():
    g = gate()
    for _ in range(3):
        assert g.turn(0) is None
    assert g.tally() == Tally(), "off: no call asks the gate for a turn"
    overload(g)
    g.turn_for(Asker("critical"), 0)
    g.turn(0)
    assert g.turn_for(Asker("sheddable", by_ns=S), 0) is Shedding.SHED
    assert g.tally() == Tally(overloaded=1, waiting=2, shed=(0, 0, 1), demand=(2.0, 2.0, 1.0)), \
        "by class, the calls that asked and those that wait"
    assert g.tally() == Tally(waiting=2, demand=(1.0, 1.0, 0.0)), "since the last tally: those that still wait"


def test_a_late_claim_keeps_the_pace_but_a_lull_earns_no_burst():
    g = gate()
    overload(g)
    g.lease(1000.0, 60 * S, 0)
    first = g.turn(0)
    assert g.claim(first, 0) == Claim.at(1 * MS)
    assert g.claim(first, secs(0.0015)).go, "half a millisecond late"
    following = g.turn(secs(0.0015))
    assert g.claim(following, secs(0.0015)) == Claim.at(2 * MS), "on the old schedule"
    assert g.claim(following, 2 * MS).go
    assert [g.turn(500 * MS) for _ in range(3)] == [None, None, None]
    assert g.turn(500 * MS) is not None, "what accrues in 2 ms beyond one turn, not the 498 nobody took"


def test_a_refusal_under_a_lease_cuts_it_once_until_the_next_grant():
    g = gate()
    overload(g)
    g.lease(10.0, 2 * S, S)
    g.record(Signal.OVERLOADED, secs(0.9), secs(1.1))
    assert g.rate == 10.0, "sent before the grant"
    g.record(Signal.OVERLOADED, secs(1.2), secs(1.2))
    assert g.rate == 7.0 and g.own_rate == 0.5
    g.record(Signal.OVERLOADED, secs(1.2), secs(1.3))
    assert g.rate == 7.0, "once per grant"
    for bad in (0.0, -1.0, math.nan, math.inf):
        g.lease(bad, 9 * S, secs(1.4))
        assert g.rate == 7.0, bad


def test_the_rate_at_a_time_is_the_lease_while_it_runs_then_the_gates_own():
    g = gate()
    assert g.rate_at(0) is None, "off"
    overload(g)
    g.lease(7.25, 2 * S, S)
    assert [g.rate_at(at) for at in (S, 2 * S - 1, 2 * S, 9 * S)] == [7.25, 7.25, 0.5, 0.5]
    assert g.rate == 7.25, "as of the last accrual, which was under the lease"
    assert g.turn(3 * S) is None and g.rate == 0.5, "a turn after the lease accrues past its end"
    g.lease(g.policy.max_rate * 2, 4 * S, 3 * S)
    assert g.rate_at(3 * S) == g.policy.max_rate, "at most maxRate"


def test_a_timeout_cuts_to_a_share_of_the_most_accepted_in_a_second_of_the_last_three():
    g = gate()
    overload(g)
    for i in range(100):
        g.record(Signal.ACCEPTED, 0, secs(0.5 + i * 0.001))
    g.record(Signal.TIMED_OUT, secs(1.2), secs(1.2))
    assert g.rate == pytest.approx(70.0, rel=1e-12)
    g.record(Signal.TIMED_OUT, 3 * S, 3 * S)
    assert g.rate == pytest.approx(49.0, rel=1e-12), "a cut never raises the rate"
    g.record(Signal.TIMED_OUT, 4 * S, 4 * S)
    assert g.rate == 0.5, "nothing accepted in the last three seconds"


def test_after_a_timeout_the_rate_grows_no_faster_than_the_dependency_delivers():
    slow = SendGate(GatePolicy(enabled=True, overload_when="any-refusal"), 0, draw=lambda: 0.0)
    slow.record(Signal.TIMED_OUT, 0, 0)
    assert slow.rate == 0.5
    for i in range(20):
        at = secs(0.05 * (i + 1))
        slow.record(Signal.ACCEPTED, at, at)
        assert slow.rate <= 1.25 * (i + 1) + 1e-9
    assert slow.rate == 23.75, "1.25 x 19, the most delivered within one second"
    answering = SendGate(GatePolicy(enabled=True, overload_when="any-refusal"), 0, draw=lambda: 0.0)
    answering.record(Signal.TIMED_OUT, 0, 0)
    answering.record(Signal.OVERLOADED, 0, 10 * MS)
    for i in range(20):
        at = secs(0.05 * (i + 1))
        answering.record(Signal.ACCEPTED, at, at)
    assert answering.rate == 0.5 + 16.0 * 20, "a refusal after the timeout: slow start again"


def test_the_tally_counts_what_was_sent_and_answered_since_the_last_one():
    g = gate()
    overload(g)
    first, _second = g.turn(0), g.turn(0)
    assert g.claim(first, 2 * S).go
    g.record(Signal.ACCEPTED, 2 * S, secs(2.1))
    g.record(Signal.OVERLOADED, 2 * S, secs(2.1))
    g.record(Signal.TIMED_OUT, 2 * S, secs(2.1))
    assert g.tally() == Tally(sent=1, accepted=1, overloaded=3, timed_out=1, waiting=1, demand=(0.0, 3.0, 0.0)), \
        "the refusal that turned it on, and the two after; two calls asked, one waits"
    assert g.tally() == Tally(waiting=1, demand=(0.0, 1.0, 0.0)), "the one that waits still wants its turn"


def test_the_rate_never_passes_its_bounds():
    g = SendGate(GatePolicy(enabled=True, max_rate=50.0, overload_when="any-refusal"), 0, draw=lambda: 0.0)
    overload(g)
    for _ in range(1000):
        g.record(Signal.ACCEPTED, 0, 0)
    assert g.rate == 50.0
    for i in range(1000):
        t = 2 * S + i * MS
        g.record(Signal.OVERLOADED, t, t)
    assert g.rate == 0.5


def test_the_first_credit_is_drawn_when_it_turns_on():
    draws = iter([0.75, 0.25])
    g = SendGate(GatePolicy(enabled=True, quiet_ns=S, overload_when="any-refusal"), 0, draw=lambda: next(draws))
    overload(g)
    assert g.credit == 0.75
    assert g.claim(g.turn(0), 0) == Claim.at(S // 2), "a quarter turn missing at 0.5 a second"
    g.leave(Ticket(0))
    assert g.turn(5 * S) is None and not g.is_on, "quiet for a second, nobody waiting"
    overload(g, 10 * S)
    assert g.is_on and g.credit == 0.25, "on again after turning off: a new draw"


def test_cube_roots_are_correctly_rounded():
    for x in (6.0, 7.0, 1.75, 240.37500000000003, 75.375, 0.3, 1e-300, 3e300):
        root = _cbrt(x)
        up, down = math.nextafter(root, math.inf), math.nextafter(root, 0.0)
        assert ((Fraction(down) + Fraction(root)) / 2) ** 3 < Fraction(x) < ((Fraction(root) + Fraction(up)) / 2) ** 3
    assert _cbrt(7.0) == 1.9129311827723892 and _cbrt(27.0) == 3.0 and _cbrt(-8.0) == -2.0


def test_the_policy_block_parses_with_the_defaults_and_refuses_a_bad_setting():
    assert GatePolicy.from_json(DEFAULT_POLICY["gate"]) == GatePolicy()
    assert GatePolicy.from_json({"enabled": True, "quietMs": 250}, defaults=DEFAULT_POLICY["gate"]) == \
        GatePolicy(enabled=True, quiet_ns=250 * MS)
    block = dict(DEFAULT_POLICY["gate"], enabled=True)
    for key, value in [("minRate", 0.0), ("minRate", 1001), ("maxRate", 0.25), ("beta", 1.0), ("scale", 0),
                       ("ramp", 1e9), ("quietMs", 0.5), ("quietMs", 3_600_001)]:
        with pytest.raises(ValueError, match=f"^gate.{key.removesuffix('Ms')} must be"):
            SendGate(GatePolicy.from_json(dict(block, **{key: value})))
    with pytest.raises(ValueError, match="gate.ramp is missing"):
        GatePolicy.from_json({k: v for k, v in block.items() if k != "ramp"})
    with pytest.raises(ValueError, match="gate.beta must be a number"):
        GatePolicy.from_json(dict(block, beta="0.7"))


def test_the_overload_when_setting_parses_and_refuses_any_other_value():
    block = dict(DEFAULT_POLICY["gate"], enabled=True)
    assert GatePolicy.from_json(block).overload_when == "evidence" == GatePolicy().overload_when, "the default"
    assert GatePolicy.from_json(dict(block, overloadWhen="most-refused")).weighs_refusals
    assert GatePolicy.from_json(dict(block, overloadWhen="evidence")).weighs_refusals
    assert not GatePolicy.from_json(dict(block, overloadWhen="any-refusal")).weighs_refusals
    for bad in ("most_refused", "Most-Refused", "", 1, None, ["most-refused"]):
        message = f"gate.overloadWhen must be one of evidence, any-refusal, most-refused, not {bad!r}"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            GatePolicy.from_json(dict(block, overloadWhen=bad))
    with pytest.raises(ValueError, match="gate.overloadWhen is missing"):
        GatePolicy.from_json({k: v for k, v in block.items() if k != "overloadWhen"})
    with pytest.raises(ValueError, match=r"^gate.overloadWhen must be one of evidence, any-refusal, most-refused, found 'x'$"):
        SendGate(GatePolicy(enabled=True, overload_when="x"))


# --- overloadWhen ------------------------------------------------------------


def accept(gate, at):
    gate.record(Signal.ACCEPTED, at, at)


def test_under_any_refusal_a_refusal_after_acceptances_turns_it_on_at_once_as_before():
    g = gate()
    for i in range(10):
        accept(g, secs(0.05 * i))
    overload(g, secs(0.5))
    assert g.is_on and g.phase == "probing" and g.rate == 0.5
    assert not g.is_watching and not g.is_answering
    accept(g, secs(0.6))
    assert g.phase == "slow_start" and not g.is_answering, "only most-refused judges the dependency to answer"
    overload(g, secs(0.7))
    assert g.phase == "cubic", "every refusal cuts"


def test_under_most_refused_a_refusal_after_acceptances_only_watches():
    g = gate(overload_when="most-refused")
    for i in range(10):
        accept(g, secs(0.05 * i))
    assert g.tally() == Tally(), "healthy, it counts nothing"
    overload(g, secs(0.5))
    assert not g.is_on and g.phase == "off" and g.rate is None
    assert g.is_watching and not g.is_answering
    assert g.turn(secs(0.5)) is None, "off: every turn at once"
    assert g.tally() == Tally(watching=True), "the refusal that began watching is left out"
    accept(g, secs(0.5) + g.policy.quiet_ns - 1)
    assert g.is_watching, "not yet quiet"
    assert g.tally() == Tally(sent=1, accepted=1, watching=True), "while it watches, every outcome heard"
    accept(g, secs(0.5) + g.policy.quiet_ns)
    assert not g.is_watching and not g.is_on, "quiet since the refusal: watching ends"
    assert g.tally() == Tally(sent=1, accepted=1), "the acceptance that ended watching was heard"
    accept(g, secs(0.6) + g.policy.quiet_ns)
    assert g.tally() == Tally(), "off and not watching: nothing counts"


def test_under_most_refused_refusals_that_outnumber_acceptances_turn_it_on_at_twice_the_delivered_rate():
    g = gate(overload_when="most-refused")
    accept(g, secs(0.1))
    overload(g, secs(0.5))
    assert g.is_watching, "accepting lately: watching"
    for _ in range(10):
        accept(g, secs(0.6))
    refused = 1
    while not g.is_on:
        overload(g, secs(0.7))
        refused += 1
        assert refused <= 38, "refusals well past the acceptances turn it on"
    # Ten accepted since watching began: 37 refused are within four standard
    # deviations of them (27 < 4 x sqrt(47)), 38 are not (28 > 4 x sqrt(48)).
    assert refused == 38
    assert g.is_answering and not g.is_watching and g.phase == "slow_start"
    assert g.rate == 20.0, "twice the 10 delivered over the last second"
    assert g.tally() == Tally(overloaded=1), "the refusal that turned it on"


def test_under_most_refused_a_refusal_with_nothing_accepted_for_three_seconds_turns_it_on_probing():
    never = gate(overload_when="most-refused")
    overload(never, secs(0.1))
    overload(never, secs(0.1))
    assert not never.is_on and never.is_watching, "two refusals, as half failing at random could give first"
    overload(never, secs(0.1))
    assert never.is_on and never.phase == "probing" and never.rate == 0.5 and not never.is_answering
    g = gate(overload_when="most-refused")
    accept(g, secs(0.05))
    overload(g, secs(2.95))
    assert not g.is_on and g.is_watching, "accepted 2.9 s ago: lately"
    h = gate(overload_when="most-refused")
    accept(h, secs(0.05))
    down(h, secs(3.05))
    assert h.is_on and h.phase == "probing" and not h.is_watching and not h.is_answering, "3 s without an acceptance"
    timed_out = gate(overload_when="most-refused")
    accept(timed_out, secs(0.05))
    timed_out.record(Signal.TIMED_OUT, secs(0.1), secs(0.2))
    assert timed_out.is_on and timed_out.phase == "probing", "a timeout turns it on at once"


def test_under_most_refused_a_tenth_refused_after_the_first_acceptance_does_not_cut_the_rate():
    g = gate(overload_when="most-refused")
    down(g)
    assert g.is_on and not g.is_answering, "probing: nothing accepted yet"
    assert g.tally() == Tally(overloaded=1)
    accept(g, secs(1.0))
    assert g.is_answering and g.phase == "slow_start"
    assert g.rate == 2.0, "0.5 + 1 ramped, but at least twice the one delivered"
    # Within the second: 90 more accepted, and every tenth answer refused.
    for i in range(1, 101):
        at = secs(1.0 + 0.009 * i)
        before = g.rate
        if i % 10 == 0:
            overload(g, at)
            assert g.rate == before, f"refusal {i // 10} of a tenth: no cut"
        else:
            accept(g, at)
            assert g.rate >= before
    assert g.phase == "slow_start" and g.is_answering
    assert g.rate == 2.0 * 91, "twice the 91 delivered over the last second"
    t = g.tally()
    assert (t.accepted, t.overloaded) == (91, 10)
    accept(g, 5 * S)
    assert not g.is_on, "refusals that say no overload are no trouble: quiet since it turned on"


def test_under_most_refused_refusals_that_come_to_outnumber_acceptances_cut_again():
    g = gate(overload_when="most-refused")
    down(g)
    for _ in range(10):
        accept(g, secs(1.0))
    assert g.is_answering and g.rate == 20.0
    refused = 0
    while g.phase == "slow_start":
        overload(g, secs(1.1))
        refused += 1
    assert refused == 38, "10 accepted: 38 refused are beyond chance (28 > 4 x sqrt(48)), 37 are not"
    assert g.phase == "cubic" and g.rate == 10.0, "cut to the 10 delivered"
    assert g.is_answering, "still answering: the rate keeps to twice what it delivers"


def answers(gate, signal, count, start, millis):
    """``count`` outcomes of ``signal`` spread evenly over the ``millis``
    after ``start`` (nanoseconds), each answered as it is sent."""
    for i in range(count):
        at = start + millis * i // count * MS
        gate.record(signal, at, at)


def test_under_most_refused_a_watching_gate_tells_the_fleet_what_it_hears_and_paces_when_told():
    g = gate(overload_when="most-refused")
    answers(g, Signal.ACCEPTED, 30, 0, 900)
    assert g.tally() == Tally(), "healthy, it counts nothing"
    assert not g.asks_fleet_at(secs(0.9)), "off and not watching"
    overload(g, secs(0.95))
    assert g.asks_fleet_at(secs(0.95)), "watching a dependency that accepts"
    answers(g, Signal.ACCEPTED, 5, secs(1.0), 50)
    answers(g, Signal.OVERLOADED, 2, secs(1.05), 50)
    assert not g.is_on and g.is_watching, "five accepted and two refused: no overload of its own"
    assert g.tally() == Tally(sent=7, accepted=5, overloaded=2, watching=True), \
        "what it heard since it began to watch, the refusal that began it left out"
    now = secs(1.1)
    assert g.pace_by_fleet_at(now)
    assert g.is_on and g.is_answering and not g.is_watching and g.phase == "slow_start"
    assert g.own_rate == 10.0, "its own rate, should grants stop: twice the 5 accepted since watching began"
    assert g.tally() == Tally(), "the fleet heard what it counted while watching"
    g.lease(40.0, now + S, now)
    assert g.rate_at(now) == 40.0, "the grant paces it"
    assert not g.pace_by_fleet_at(now), "on already"
    assert g.asks_fleet_at(now), "on: it asks"


def test_under_most_refused_a_gate_that_has_seen_nothing_accepted_waits_to_see_it_down():
    g = gate(overload_when="most-refused")
    overload(g)
    assert g.is_watching
    assert not g.asks_fleet_at(0), "it would tell the fleet of a dependency it has not seen accept"
    assert g.tally() == Tally(watching=True)
    assert g.pace_by_fleet_at(secs(0.1)), "told to pace all the same"
    assert g.rate == 0.5 and g.phase == "probing" and not g.is_answering, "it probes, as for a dependency down"
    assert g.tally() == Tally()


def test_the_fleet_tells_no_gate_to_pace_that_is_not_watching():
    off = gate(overload_when="most-refused")
    assert not off.pace_by_fleet_at(0) and not off.is_on, "off and not watching: nothing to judge"
    on = gate()
    overload(on)
    credit = on.credit
    assert not on.pace_by_fleet_at(secs(0.1)) and on.credit == credit, "on already: no new draw"


def test_the_fleets_breaker_closing_turns_an_off_gate_on_probing_with_nothing_to_tell():
    draws = iter([0.75])
    off = SendGate(GatePolicy(enabled=True, overload_when="most-refused"), 0, draw=lambda: next(draws))
    assert off.resume_by_fleet_at(secs(3))
    assert off.is_on and off.phase == "probing" and off.rate == 0.5 and not off.is_answering, \
        "as for a dependency that accepts nothing: at the lowest rate"
    assert off.credit == 0.75, "its first credit drawn as a refusal that turns it on draws it"
    assert off.tally() == Tally(), "no refusal turned it on: the fleet has nothing to hear"
    assert not off.resume_by_fleet_at(secs(4)) and off.credit == 0.75, "on already: no new draw"


def test_the_fleets_breaker_closing_turns_a_watching_gate_on_as_a_pace_does():
    told, closed = gate(overload_when="most-refused"), gate(overload_when="most-refused")
    for g in (told, closed):
        answers(g, Signal.ACCEPTED, 30, 0, 900)
        overload(g, secs(0.95))
        assert g.is_watching
    assert told.pace_by_fleet_at(secs(1)) and closed.resume_by_fleet_at(secs(1))
    assert _state(closed) == _state(told) and closed.is_answering, "judged to answer, at twice what it delivers"


def test_threads_share_one_line_and_every_waiter_gets_its_turn_once():
    g = SendGate(GatePolicy(enabled=True, min_rate=1000.0, overload_when="any-refusal"), 0, draw=lambda: 0.0)
    overload(g)
    clock = [0]
    lock = threading.Lock()
    turns, errors = [], []

    def tick():
        with lock:
            clock[0] += 100_000
            return clock[0]

    def caller():
        try:
            for _ in range(200):
                ticket = g.turn(tick())
                while ticket is not None:
                    woken = threading.Event()
                    claim = g.claim(ticket, tick(), woken.set)
                    if claim.go:
                        turns.append(ticket.number)
                        break
                    if claim.verdict == "behind":
                        woken.wait(0.01)
                if ticket is None:
                    turns.append(None)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=caller) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and g.waiting == 0 and len(turns) == 1600
    numbered = [n for n in turns if n is not None]
    assert numbered and len(numbered) == len(set(numbered)), "a ticket goes once"


# --- as shipped: overloadWhen: evidence -----------------------------------------


def shipped():
    """A gate under the default policy, whose first credit is 0."""
    return SendGate(GatePolicy(enabled=True), 0, draw=lambda: 0.0)


@pytest.mark.parametrize("share", [0.1, 0.3])
def test_as_shipped_a_dependency_failing_a_share_at_random_is_never_paced(share):
    gate = shipped()
    rng = random.Random(11)
    for i in range(1_800):
        at = i * S // 30
        assert gate.turn(at) is None, f"paced after {i} calls"
        signal = Signal.OVERLOADED if rng.random() < share else Signal.ACCEPTED
        gate.record(signal, at, at + 5 * MS)
    assert not gate.is_on and gate.is_watching


def test_as_shipped_five_refusals_in_a_row_from_a_dependency_accepting_nothing_show_it_down():
    gate = shipped()
    answers(gate, Signal.OVERLOADED, 4, 0, 4)
    assert not gate.is_on and gate.is_watching, "four in a row: a half at random does that once in 16 runs"
    gate.record(Signal.OVERLOADED, 10 * MS, 10 * MS)
    assert gate.is_on and gate.phase == "probing" and not gate.is_answering


def test_as_shipped_three_refusals_over_a_second_show_a_dependency_accepting_nothing_down():
    gate = shipped()
    for at in (0, 300 * MS, 900 * MS):
        gate.record(Signal.OVERLOADED, at, at)
    assert not gate.is_on, "three within a second: a trickle's chance run"
    gate.record(Signal.OVERLOADED, S, S)
    assert gate.is_on


def test_as_shipped_a_dependency_found_down_recovers_as_a_capacity_until_cuts_show_its_refusals_random():
    gate = shipped()
    # A chance run of five refusals from a dependency that fails half its
    # requests at random looks like an outage.
    answers(gate, Signal.OVERLOADED, 5, 0, 5)
    gate.record(Signal.ACCEPTED, S, S)
    assert gate.phase == "slow_start" and not gate.is_answering, "a recovering capacity's refusals say overload"
    # A half refused at any rate: the gate's cuts leave the refusals at their
    # share, and two trials in a row judge them random.
    rng = random.Random(3)
    answering = None
    for i in range(1, 401):
        at = S + i * 10 * MS
        gate.record(Signal.OVERLOADED if rng.random() < 0.5 else Signal.ACCEPTED, at, at)
        if gate.is_answering:
            answering = i
            break
    assert answering is not None and answering <= 200, answering
    assert gate.phase == "slow_start"
