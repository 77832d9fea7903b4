"""The Python reporter without the daemon: what it counts, how it numbers
batches, what it does with each kind of answer, and how it asks for a
paced dependency's share (from stand-ins)."""

import http.server
import json
import logging
import socket
import threading
import time

import pytest

from conftest import eventually
from stormguard_client import (BreakerPolicy, CircuitBreaker, GatePolicy, Reporter, ReportNotDelivered,
                               ReportRefused, RetryBudget, SendGate)
from stormguard_client.gate import Signal
from stormguard_client.pace import PaceGrant


def reporter(**settings):
    return Reporter("http://127.0.0.1:9", "pod-1", **{"interval": 3600, **settings})


def taken(r):
    """The next batch, as the daemon would read it."""
    return json.loads(r._take()[1])


def test_a_bad_setting_is_refused_naming_it():
    for settings, name in [({"daemon": "stormguard:8080"}, "daemon"), ({"daemon": "http://"}, "daemon"),
                           ({"instance": ""}, "instance"), ({"instance": "x" * 254}, "instance"),
                           ({"caller": "Checkout"}, "caller"), ({"interval": 0}, "interval"),
                           ({"timeout": -1}, "timeout"), ({"max_endpoints": 0}, "max_endpoints"),
                           ({"max_services": 1.5}, "max_services")]:
        with pytest.raises(ValueError, match=name):
            Reporter(**{"daemon": "http://127.0.0.1:9", "instance": "pod-1", **settings})
    Reporter("https://stormguard.example/", "é" * 253, caller="checkout")
    r = reporter()
    with pytest.raises(ValueError, match="outcome"):
        r.record("payments", "/charge", 0, "timeout")
    with pytest.raises(ValueError, match="retry"):
        r.record("payments", "/charge", -1, "success")


def test_endpoints_past_the_cap_count_as_other_and_services_past_theirs_are_not_kept(caplog):
    r = reporter(max_endpoints=2, max_services=1)
    for endpoint in ["/a", "/b", "/c", "/d", "", "x" * 257]:
        r.record("svc", endpoint, 0, "success")
    r.record("svc", "/a", 2, "error")
    r.record("svc", "/b", 1, "server_error")
    with caplog.at_level(logging.WARNING, logger="stormguard_client.reports"):
        r.record("another", "/a", 0, "success")
        r.record("Bad_Name", "/a", 0, "success")
    reports = taken(r)["reports"]
    assert [report["service"] for report in reports] == ["svc"], "the second dependency is over the cap"
    endpoints = {e["endpoint"]: e for e in reports[0]["endpoints"]}
    assert endpoints["other"]["requests"] == {"success": 4, "error": 0, "server_error": 0}, \
        "two past the cap, one empty name, one too long"
    assert endpoints["/a"]["requests"] == {"success": 1, "error": 1, "server_error": 0}
    assert endpoints["/a"]["retries"] == {"2": 1} and endpoints["/b"]["retries"] == {"1": 1}
    assert "another" in caplog.text and "too many dependencies" in caplog.text
    assert "Bad_Name" in caplog.text and "DNS-1123" in caplog.text


def test_each_batch_has_the_next_number_and_taken_means_gone():
    r = reporter(caller="checkout")
    assert r._take() is None, "nothing counted, nothing to send"
    r.record("svc", "/a", 1, "server_error")
    first, second = taken(r), taken(r)
    assert 0 <= first["sequence"] < 2**63
    assert second["sequence"] == first["sequence"] + 1
    assert first["instance"] == "pod-1" and first["reports"][0]["instance"] == "pod-1"
    assert first["reports"][0]["caller"] == "checkout"
    assert first["reports"][0]["endpoints"][0]["requests"]["server_error"] == 1
    assert second["reports"][0]["endpoints"] == []
    assert reporter()._next_sequence != reporter()._next_sequence, "a random start per run"


def test_in_flight_counts_within_the_block():
    r = reporter()
    with r.in_flight("svc"):
        with r.in_flight("svc"):
            pass
        assert taken(r)["reports"][0]["inFlight"] == 1
    assert taken(r)["reports"][0]["inFlight"] == 0
    with r.in_flight("Not-Valid"):
        pass


def test_track_reports_the_breaker_state_and_the_retries_denied_since_the_last_report():
    r = reporter()
    breaker = CircuitBreaker(BreakerPolicy(enabled=True, consecutive_failures=1))
    budget = RetryBudget(0.0, 0, 10**9)
    r.track("svc", breaker, budget)
    budget.try_retry(0)
    budget.try_retry(0)
    report = taken(r)["reports"][0]
    assert report["circuitState"] == "closed" and report["budget"] == {"retriesDenied": 2}
    breaker.acquire(0).record(True, 1)
    budget.try_retry(0)
    report = taken(r)["reports"][0]
    assert report["circuitState"] == "open" and report["budget"] == {"retriesDenied": 1}
    budget.try_retry(0)
    budget.try_retry(0)
    fresh = RetryBudget(0.0, 0, 10**9)
    fresh.try_retry(0)
    r.track("svc", breaker, fresh)
    assert taken(r)["reports"][0]["budget"] == {"retriesDenied": 3}, \
        "the replaced budget's last 2 denials, and the new one's from its own 0"
    r.track("svc", breaker, fresh)
    assert taken(r)["reports"][0]["budget"] == {"retriesDenied": 0}


class Serving:
    """A stand-in daemon on loopback: each POST goes to ``answer(request)``,
    which returns (status, body), or None to close unanswered."""

    def __init__(self):
        serving = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                answered = serving.answer(self)
                if answered is None:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                status, body = answered
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def next_of(steps):
    """The next of ``steps``, the last repeating."""
    return steps.pop(0) if len(steps) > 1 else steps[0]


def serving(kind):
    """A fixture's maker of ``kind`` stand-ins, each closed at the test's end."""
    made = []

    def make(*args):
        made.append(kind(*args))
        return made[-1]

    yield make
    for s in made:
        s.close()


class StandIn(Serving):
    """A stand-in daemon that answers report batches as ``plan`` says: a
    status, "drop" (close unanswered), or (seconds, status) to answer
    late; the last step repeats. ``bodies`` holds each batch and
    ``authorizations`` its Authorization header (None without)."""

    def __init__(self, plan):
        self.plan = list(plan)
        self.bodies = []
        self.authorizations = []
        super().__init__()

    def answer(self, request):
        self.authorizations.append(request.headers.get("Authorization"))
        self.bodies.append(request.rfile.read(int(request.headers["Content-Length"])))
        step = next_of(self.plan)
        if isinstance(step, tuple):
            time.sleep(step[0])
            step = step[1]
        if step == "drop":
            return None
        body = (b'{"accepted":1,"rejected":[]}' if step < 300
                else b'{"error":"the token has expired","reason":"expired"}' if step == 401
                else b"no such thing")
        return step, body


@pytest.fixture
def stand_in():
    yield from serving(StandIn)


@pytest.mark.parametrize("failure", [503, 429, "drop"])
def test_an_unanswered_batch_is_sent_again_unchanged_then_the_new_counts(stand_in, failure):
    server = stand_in([failure, 200])
    r = Reporter(server.url, "pod-1", interval=3600, timeout=2)
    r.record("svc", "/a", 0, "success")
    with pytest.raises(ReportNotDelivered):
        r.flush()
    r.record("svc", "/a", 0, "error")
    r.flush()
    first, again, new = server.bodies
    assert first == again
    assert json.loads(new)["sequence"] == json.loads(first)["sequence"] + 1
    assert json.loads(new)["reports"][0]["endpoints"][0]["requests"]["error"] == 1
    assert (r.stats.send_failures, r.stats.batches_sent, r.stats.batches_dropped) == (1, 2, 0)


def test_a_refused_batch_is_dropped_named_and_never_resent(stand_in):
    server = stand_in([400, 200])
    r = Reporter(server.url, "pod-1", interval=3600, timeout=2)
    r.record("svc", "/a", 0, "success")
    with pytest.raises(ReportRefused, match="400.*no such thing") as refused:
        r.flush()
    assert (refused.value.status, refused.value.body) == (400, "no such thing")
    r.flush()
    assert len(server.bodies) == 2 and server.bodies[0] != server.bodies[1]
    assert json.loads(server.bodies[1])["reports"][0]["endpoints"] == []
    assert (r.stats.batches_dropped, r.stats.batches_sent) == (1, 1)


def test_with_nothing_listening_the_batch_is_kept(reserved):
    nobody = reserved()
    r = Reporter(nobody.url, "pod-1", interval=3600, timeout=1)
    r.record("svc", "/a", 0, "success")
    for _ in range(2):
        with pytest.raises(ReportNotDelivered):
            r.flush()
    assert r.stats.send_failures == 2 and r._pending is not None


def test_the_thread_sends_every_interval_and_stop_sends_what_it_could_not(stand_in):
    server = stand_in([503, 503, 200])
    r = Reporter(server.url, "pod-1", interval=0.05, timeout=2).start()
    r.record("svc", "/a", 0, "success")
    assert eventually(lambda: len(server.bodies) >= 2), "sent by the thread"
    r.stop()
    assert not r._thread.is_alive() and r._pending is None
    sequences = [json.loads(b)["sequence"] for b in server.bodies]
    assert sequences[0] == sequences[1], "sent again under its number"
    total = sum(e["requests"]["success"] for b in server.bodies[2:] for rep in json.loads(b)["reports"]
                for e in rep["endpoints"])
    assert total == 1, "the count went, once it was answered"
    with pytest.raises(RuntimeError):
        r.start()


def test_a_send_under_way_at_stop_is_not_lost(stand_in):
    server = stand_in([(0.5, 503), 200])
    r = Reporter(server.url, "pod-1", interval=0.05, timeout=2).start()
    r.record("svc", "/a", 0, "success")
    assert eventually(lambda: len(server.bodies) == 1), "the thread's send is under way"
    r.stop()
    assert server.bodies[1] == server.bodies[0], "stop sent it again, unchanged"
    assert r._pending is None and r.stats.batches_sent >= 1 and r.stats.send_failures == 1


def test_a_401_keeps_the_batch_and_it_goes_again_unchanged(stand_in):
    server = stand_in([401, 202])
    r = Reporter(server.url, "pod-1", interval=3600, timeout=2)
    r.record("svc", "/a", 0, "success")
    with pytest.raises(ReportNotDelivered, match="401.*expired") as refused:
        r.flush()
    assert refused.value.status == 401 and r._pending is not None
    r.flush()
    first, again, new = server.bodies
    assert first == again, "the same bytes, under the same number"
    assert json.loads(new)["sequence"] == json.loads(first)["sequence"] + 1
    assert (r.stats.send_failures, r.stats.batches_dropped, r.stats.batches_sent) == (1, 0, 2)


def test_the_token_file_is_read_at_each_send(stand_in, tmp_path):
    server = stand_in([200])
    token = tmp_path / "token"
    token.write_text("first-token\n")
    r = Reporter(server.url, "pod-1", interval=3600, timeout=2, token_file=token)
    r.record("svc", "/a", 0, "success")
    r.flush()
    token.write_text("  rotated-token  ")  # as the kubelet does, in place
    r.record("svc", "/a", 0, "success")
    r.flush()
    assert server.authorizations == ["Bearer first-token", "Bearer rotated-token"]
    r = Reporter(server.url, "pod-1", interval=3600, timeout=2)
    r.record("svc", "/a", 0, "success")
    r.flush()
    assert server.authorizations[-1] is None, "no token file, no token"


def test_a_missing_token_file_sends_without_a_token_and_is_logged_once(stand_in, tmp_path, caplog):
    server = stand_in([401, 401, 202])
    token = tmp_path / "token"
    r = Reporter(server.url, "pod-1", interval=3600, timeout=2, token_file=token)
    r.record("svc", "/a", 0, "success")
    with caplog.at_level(logging.ERROR, logger="stormguard_client.connect"):
        for _ in range(2):
            with pytest.raises(ReportNotDelivered, match="401"):
                r.flush()
    assert server.authorizations == [None, None]
    assert [rec.name for rec in caplog.records].count("stormguard_client.connect") == 1
    assert str(token) in caplog.text and "reports go without it" in caplog.text
    token.write_text("mounted-at-last")
    r.flush()
    assert server.authorizations[2] == "Bearer mounted-at-last"
    assert server.bodies[0] == server.bodies[1] == server.bodies[2], "the kept batch, with the token"


# --- fleet pacing ------------------------------------------------------------


class PaceStandIn(Serving):
    """A stand-in daemon for pace asks: each POST /v1/pace is answered with
    the next of ``answers`` (status, body), the last repeating, and
    ``asks`` holds (when it came, its body read, its Authorization
    header); report batches are answered 200 and kept in ``batches``."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.asks = []
        self.batches = []
        super().__init__()

    def answer(self, request):
        body = json.loads(request.rfile.read(int(request.headers["Content-Length"])))
        if request.path == "/v1/reports":
            self.batches.append(body)
            return 200, b'{"accepted":1,"rejected":[]}'
        assert request.path == "/v1/pace"
        self.asks.append((time.monotonic(), body, request.headers.get("Authorization")))
        return next_of(self.answers)


@pytest.fixture
def pace_stand_in():
    yield from serving(PaceStandIn)


def grant(rate, lease_ms=1000, ask_every_ms=100, pace=None, classes=None):
    """A 200 with a grant; ``pace`` and ``classes`` left out unless given, as
    an older daemon does."""
    body = {"rate": rate, "leaseMs": lease_ms, "askEveryMs": ask_every_ms}
    if pace is not None:
        body["pace"] = pace
    if classes is not None:
        body["classes"] = classes
    return 200, json.dumps(body).encode()


def on_gate():
    """A gate turned on, now, by one refused attempt (under any-refusal)."""
    g = SendGate(GatePolicy(enabled=True, overload_when="any-refusal"), time.monotonic_ns(), draw=lambda: 0.0)
    now = time.monotonic_ns()
    g.record(Signal.OVERLOADED, now, now)
    return g


def test_while_the_gate_is_on_it_asks_with_the_tally_and_paces_at_the_grant(pace_stand_in, tmp_path):
    server = pace_stand_in([grant(7.25, lease_ms=600_000, ask_every_ms=50)])
    token = tmp_path / "token"
    token.write_text("pod-token")
    r = Reporter(server.url, "pod-1", interval=3600, timeout=2, token_file=token)
    g = on_gate()
    r.track("svc", gate=g)
    r.start()
    assert eventually(lambda: len(server.asks) >= 3)
    r.stop()
    first = server.asks[0][1]
    assert first == {"service": "svc", "instance": "pod-1", "sent": 0, "accepted": 0, "overloaded": 1,
                     "timedOut": 0, "waiting": 0}, "the refusal that turned it on"
    assert server.asks[1][1]["overloaded"] == 0, "each ask tells what came since the last"
    assert {ask[2] for ask in server.asks} == {"Bearer pod-token"}
    now = time.monotonic_ns()
    assert g.rate_at(now) == 7.25 and g.own_rate == 0.5
    assert g.rate_at(now + 61 * 10**9) == 0.5, "a lease of at most a minute, whatever the daemon says"
    stats = r.stats
    assert stats.pace_asks == len(server.asks) and stats.pace_failures == 0
    asked = len(server.asks)
    time.sleep(0.3)
    assert len(server.asks) == asked, "no ask once stopped"
    assert not r._pacer.is_alive()


def test_the_ask_carries_the_calls_shed_and_the_demand_by_class():
    from stormguard_client.gate import Tally
    from stormguard_client.pace import ask_body
    counts = {"service": "ledger", "instance": "pod-1", "sent": 3, "accepted": 2, "overloaded": 1, "timedOut": 0,
              "waiting": 2}
    plain = Tally(sent=3, accepted=2, overloaded=1, waiting=2, demand=(0.0, 5.0, 0.0))
    assert json.loads(ask_body("ledger", "pod-1", plain, classes=True)) == counts, \
        "every call of the default class, none shed: the ask an older daemon reads"
    shed = Tally(sent=3, accepted=2, overloaded=1, waiting=2, shed=(0, 4, 0), demand=(0.0, 5.0, 0.0))
    assert json.loads(ask_body("ledger", "pod-1", shed, classes=True)) == {**counts, "shed": {"default": 4}}, \
        "only the classes that shed any"
    classed = Tally(sent=3, accepted=2, overloaded=1, waiting=2, watching=True, shed=(0, 0, 7),
                    demand=(1.0, 5.0, 9.0))
    body = ask_body("ledger", "pod-1", classed, classes=True)
    assert json.loads(body) == {**counts, "shed": {"sheddable": 7},
                                "demand": {"critical": 1.0, "default": 5.0, "sheddable": 9.0}, "watching": True}
    assert body.index(b'"waiting"') < body.index(b'"shed"') < body.index(b'"demand"') < body.index(b'"watching"')
    assert json.loads(ask_body("ledger", "pod-1", classed)) == {**counts, "watching": True}, \
        "to a daemon not known to read classes: neither, as it would refuse them"
    sheddable_only = Tally(demand=(0.0, 0.0, 0.5))
    assert json.loads(ask_body("ledger", "pod-1", sheddable_only, classes=True))["demand"] == \
        {"critical": 0.0, "default": 0.0, "sheddable": 0.5}


def test_while_the_gate_sheds_the_ask_tells_the_calls_shed_and_the_demand_of_each_class(pace_stand_in):
    from stormguard_client.gate import Asker, Shedding
    server = pace_stand_in([grant(0.5, lease_ms=600_000, ask_every_ms=1000, classes=True)])
    virtual = [10**15]
    g = SendGate(GatePolicy(enabled=True, overload_when="any-refusal"), virtual[0], draw=lambda: 0.0)
    g.record(Signal.OVERLOADED, virtual[0], virtual[0])
    # Its first turn is 2 s away: a critical call waits.
    assert g.turn_for(Asker("critical"), virtual[0]) is not None
    r = Reporter(server.url, "pod-1", interval=3600, timeout=2)
    r.track("svc", gate=g, clock=lambda: virtual[0])
    r.start()
    # The first ask tells no classes: the daemon has not said it reads them.
    assert eventually(lambda: len(server.asks) >= 1, within=5)
    # Its grant said so, and the next ask is a second away: two sheddable calls are shed meanwhile.
    for _ in range(2):
        assert g.turn_for(Asker("sheddable", by_ns=virtual[0] + 10**9), virtual[0]) is Shedding.SHED
    assert eventually(lambda: len(server.asks) >= 3, within=5)
    r.stop()
    first, second, third = (ask[1] for ask in server.asks[:3])
    assert first == {"service": "svc", "instance": "pod-1", "sent": 0, "accepted": 0, "overloaded": 1,
                     "timedOut": 0, "waiting": 1}, "to a daemon not known to read classes, neither shed nor demand"
    assert second == {"service": "svc", "instance": "pod-1", "sent": 0, "accepted": 0, "overloaded": 0,
                      "timedOut": 0, "waiting": 1, "shed": {"sheddable": 2},
                      "demand": {"critical": 1.0, "default": 0.0, "sheddable": 2.0}}, \
        "the calls shed, and by class those that asked and the one that waits"
    assert "shed" not in third and third["demand"] == {"critical": 1.0, "default": 0.0, "sheddable": 0.0}, \
        "since the last ask: none shed, the critical call still waits"


def test_the_ask_carries_classes_only_to_a_daemon_whose_last_grant_said_it_reads_them(pace_stand_in):
    # A daemon that predates classes refuses an ask with fields it does not
    # know: the calls shed and the demand by class go only to one whose last
    # grant said it reads them; not in the first ask, nor after an ask
    # refused (a replica that predates them, mid-rollout), nor after a grant
    # that did not say so.
    from stormguard_client.gate import Asker, Shedding
    reads = grant(0.5, lease_ms=600_000, classes=True)
    server = pace_stand_in([reads, reads, (400, b'{"error":"unknown field demand"}'), reads,
                            grant(0.5, lease_ms=600_000), reads])
    virtual = [10**15]
    g = SendGate(GatePolicy(enabled=True, overload_when="any-refusal"), virtual[0], draw=lambda: 0.0)
    g.record(Signal.OVERLOADED, virtual[0], virtual[0])
    # A critical call waits in line throughout: every ask's demand is classed.
    assert g.turn_for(Asker("critical"), virtual[0]) is not None
    r = Reporter(server.url, "pod-1", interval=3600, timeout=2)
    for i, (classed, granted) in enumerate([(False, True), (True, True), (True, False), (False, True),
                                            (True, True), (False, True)]):
        # A sheddable call, bound to go within a nanosecond, is shed before each ask.
        assert g.turn_for(Asker("sheddable", by_ns=virtual[0] + 1), virtual[0]) is Shedding.SHED
        assert (r._ask("svc", g, None, lambda: virtual[0]) is not None) == granted, f"ask {i + 1}"
        ask = server.asks[i][1]
        if classed:
            assert ask["shed"] == {"sheddable": 1} and ask["demand"]["critical"] == 1.0, f"ask {i + 1}: {ask}"
        else:
            assert "shed" not in ask and "demand" not in ask, f"ask {i + 1}: {ask}"


def test_a_grant_says_whether_the_daemon_reads_classes_and_its_absence_is_no():
    assert not PaceGrant.from_json(b'{"rate": 1.5, "leaseMs": 1000, "askEveryMs": 100}').classes
    assert PaceGrant.from_json(b'{"rate": 1.5, "leaseMs": 1000, "askEveryMs": 100, "classes": true}').classes
    with pytest.raises(ValueError, match="classes must be true or false"):
        PaceGrant.from_json(b'{"rate": 1.5, "leaseMs": 1000, "askEveryMs": 100, "classes": 1}')


def test_the_grant_sets_the_interval_within_its_bounds(pace_stand_in):
    server = pace_stand_in([grant(1.0, ask_every_ms=400)])
    r = Reporter(server.url, "pod-1", interval=3600, timeout=2)
    r.track("svc", gate=on_gate())
    r.start()
    assert eventually(lambda: len(server.asks) >= 3, within=5)
    r.stop()
    gaps = [b[0] - a[0] for a, b in zip(server.asks, server.asks[1:])]
    assert gaps[0] > 0.3, f"asked every 400 ms once told to: {gaps}"
    for every, seconds in [(0, 0.02), (5, 0.02), (250, 0.25), (999_999, 1.0)]:
        assert PaceGrant(1.0, 1000, every).ask_every == seconds


@pytest.mark.parametrize("answer", [(401, b'{"error":"expired"}'), (403, b"{}"), (409, b"{}"), (503, b"{}"),
                                    (200, b"not JSON"), (200, b'{"rate": 3.0}'), (200, b'{"rate": "3",'
                                                                                        b'"leaseMs": 1,'
                                                                                        b'"askEveryMs": 1}'),
                                    (200, b'{"rate": 3.0, "leaseMs": 1, "askEveryMs": 1, "pace": "yes"}')])
def test_no_grant_changes_nothing_and_is_counted(pace_stand_in, caplog, answer):
    server = pace_stand_in([answer])
    r = Reporter(server.url, "pod-1", interval=3600, timeout=2)
    g = on_gate()
    r.track("svc", gate=g)
    with caplog.at_level(logging.DEBUG, logger="stormguard_client.reports"):
        r.start()
        assert eventually(lambda: r.stats.pace_failures >= 2)
        r.stop()
    assert r.stats.pace_asks == r.stats.pace_failures
    assert g.rate_at(time.monotonic_ns()) == g.own_rate == 0.5, "the gate paces alone"
    assert "the gate paces alone" in caplog.text and "svc" in caplog.text
    assert all(rec.levelno == logging.DEBUG for rec in caplog.records if "pace" in rec.getMessage())


def test_an_unreachable_daemon_is_counted_and_the_gate_paces_alone(reserved):
    nobody = reserved()
    r = Reporter(nobody.url, "pod-1", interval=3600, timeout=2)
    g = on_gate()
    g.lease(9.0, time.monotonic_ns() + 10**9, time.monotonic_ns())
    r.track("svc", gate=g)
    r.start()
    assert eventually(lambda: r.stats.pace_failures >= 3)
    r.stop()
    assert eventually(lambda: g.rate_at(time.monotonic_ns()) == 0.5, within=3), "once the last lease ends"


def test_no_ask_while_the_gate_is_off_or_fleet_pacing_is(pace_stand_in):
    server = pace_stand_in([grant(5.0)])
    off = SendGate(GatePolicy(enabled=True, overload_when="most-refused"), time.monotonic_ns())
    r = Reporter(server.url, "pod-1", interval=3600, timeout=2)
    r.track("svc", gate=off)
    r.track("other", gate=None)
    r.start()
    unpaced = Reporter(server.url, "pod-2", interval=3600, timeout=2, fleet_pacing=False)
    unpaced.track("svc", gate=on_gate())
    unpaced.start()
    time.sleep(0.5)
    assert server.asks == [] and r.stats.pace_asks == unpaced.stats.pace_asks == 0
    assert unpaced._pacer is None
    refused = time.monotonic_ns()
    off.record(Signal.OVERLOADED, refused, refused)
    assert off.is_watching and not off.is_on
    time.sleep(0.3)
    assert server.asks == [], "watching a dependency it has not seen accept: it waits to see it down"
    for _ in range(2):
        on = time.monotonic_ns()
        off.record(Signal.OVERLOADED, on, on)
    assert off.is_on, "three refusals with nothing accepted: down"
    assert eventually(lambda: len(server.asks) >= 1), "asked once it turned on"
    assert {ask[1]["instance"] for ask in server.asks} == {"pod-1"}
    r.stop()
    unpaced.stop()
    with pytest.raises(ValueError, match="fleet_pacing"):
        Reporter(server.url, "pod-1", fleet_pacing="no")


def test_a_watching_gate_asks_with_what_it_heard_and_turns_on_when_the_grant_says_pace(pace_stand_in):
    server = pace_stand_in([grant(5.0, ask_every_ms=20), grant(5.0, ask_every_ms=20, pace=False),
                            grant(7.25, lease_ms=600_000, ask_every_ms=20, pace=True)])
    # The calls' clock stands still: what was accepted stays lately accepted.
    virtual = [10**15]
    now = virtual[0]
    g = SendGate(GatePolicy(enabled=True, overload_when="most-refused"), now, draw=lambda: 0.0)
    for signal in [Signal.ACCEPTED] * 10 + [Signal.OVERLOADED, Signal.ACCEPTED, Signal.OVERLOADED]:
        g.record(signal, now, now)
    assert g.is_watching and not g.is_on
    r = Reporter(server.url, "pod-1", interval=3600, timeout=2)
    r.track("svc", gate=g, clock=lambda: virtual[0])
    r.start()
    assert eventually(lambda: len(server.asks) >= 4)
    r.stop()
    first, second, third, fourth = (ask[1] for ask in server.asks[:4])
    assert first == {"service": "svc", "instance": "pod-1", "sent": 2, "accepted": 1, "overloaded": 1,
                     "timedOut": 0, "waiting": 0, "watching": True}, \
        "what it heard since it began to watch, the refusal that began it left out"
    assert second["watching"] and third["watching"], "a grant that does not say pace leaves it watching"
    assert "watching" not in fourth and fourth["overloaded"] == 0, \
        "on, told to pace: the fleet heard what it counted while watching"
    assert g.is_on and g.is_answering and not g.is_watching
    assert g.rate_at(now) == 7.25, "the lease applies once the gate is on"
    assert g.own_rate == 2.0, "its own rate: twice the one accepted since watching began"
    assert r.stats.pace_asks == len(server.asks) and r.stats.pace_failures == 0


def test_a_grant_says_pace_or_not_and_its_absence_is_no():
    assert not PaceGrant.from_json(b'{"rate": 1.5, "leaseMs": 1000, "askEveryMs": 100}').pace
    assert PaceGrant.from_json(b'{"rate": 1.5, "leaseMs": 1000, "askEveryMs": 100, "pace": true}') == \
        PaceGrant(1.5, 1000, 100, pace=True)
    for bad in (b'"yes"', b"1", b"null"):
        with pytest.raises(ValueError, match="pace must be true or false"):
            PaceGrant.from_json(b'{"rate": 1.5, "leaseMs": 1000, "askEveryMs": 100, "pace": ' + bad + b"}")


def test_the_gate_keeps_the_calls_clock(pace_stand_in):
    server = pace_stand_in([grant(3.0, lease_ms=2000)])
    virtual = [10**15]
    g = SendGate(GatePolicy(enabled=True, overload_when="any-refusal"), virtual[0], draw=lambda: 0.0)
    g.record(Signal.OVERLOADED, virtual[0], virtual[0])
    r = Reporter(server.url, "pod-1", interval=3600, timeout=2)
    r.track("svc", gate=g, clock=lambda: virtual[0])
    r.start()
    assert eventually(lambda: len(server.asks) >= 1)
    r.stop()
    assert g.rate_at(virtual[0] + 2 * 10**9 - 1) == 3.0 and g.rate_at(virtual[0] + 2 * 10**9) == 0.5, \
        "leased until two seconds past the clock's now"


def test_reports_say_whether_the_gate_is_on():
    r = reporter()
    g = SendGate(GatePolicy(enabled=True, quiet_ns=10**9, overload_when="any-refusal"), 0)
    clock = [0]
    r.track("svc", gate=g, clock=lambda: clock[0])
    r.track("plain")
    assert taken(r)["reports"][0]["gateOn"] is False
    g.record(Signal.OVERLOADED, 0, 0)
    reports = {report["service"]: report for report in taken(r)["reports"]}
    assert reports["svc"]["gateOn"] is True and "gateOn" not in reports["plain"], "no gate, no gateOn"
    clock[0] = 2 * 10**9
    assert taken(r)["reports"][0]["gateOn"] is False, "quiet for quietMs: off"


class FloorStandIn(Serving):
    """A stand-in daemon that answers every report batch with a part of
    ledger's fleet-scoped floor, and counts the batches."""

    def __init__(self):
        self.batches = 0
        super().__init__()

    def answer(self, request):
        request.rfile.read(int(request.headers["Content-Length"]))
        self.batches += 1
        part = {"minRetriesPerSecond": 2.5, "processes": 4}
        return 202, json.dumps({"accepted": 1, "fleetBudgets": {"ledger": part}}).encode()


@pytest.fixture
def floor_stand_in():
    yield from serving(FloorStandIn)


def test_a_fleet_scoped_budget_reports_a_second_after_start_and_takes_its_part(floor_stand_in):
    server = floor_stand_in()
    quiet = Reporter(server.url, "pod-quiet", interval=3600).start()
    quiet.track("orders", budget=RetryBudget(0, 12, 10 * 10**9))
    time.sleep(2.5)
    assert server.batches == 0, "a process-scoped budget waits for the interval"

    fleet = RetryBudget(0, 12, 10 * 10**9, scope="fleet")
    r = Reporter(server.url, "pod-1", interval=3600).start()
    r.track("ledger", budget=fleet)
    assert fleet.allowed(0) / 10 == 12, "the whole floor before any answer"
    assert eventually(lambda: fleet.allowed(0) / 10 == 2.5, within=4), \
        f"the first report went early and its part was taken: {fleet.allowed(0) / 10} after {server.batches} batches"
    quiet.stop()
    r.stop()


def test_an_answers_unreadable_parts_are_left_out_and_a_fleet_scoped_report_says_its_span():
    r = reporter()
    budgets = {}
    for service in ("ledger", "orders", "search", "stock", "cart"):
        budgets[service] = RetryBudget(0, 12, 10 * 10**9, scope="fleet")
        r.track(service, budget=budgets[service])
    r._answered({"ledger": {"minRetriesPerSecond": 2.5, "processes": 4},
                 "orders": {"minRetriesPerSecond": None, "processes": 4},
                 "search": {"minRetriesPerSecond": 1, "processes": -1},
                 "stock": {"processes": 4},
                 "cart": {"minRetriesPerSecond": 1e400, "processes": 4.0}})
    floors = {service: budget.allowed(0) / 10 for service, budget in budgets.items()}
    assert floors == {"ledger": 2.5, "orders": 12, "search": 12, "stock": 12, "cart": 12}
    time.sleep(0.02)
    assert all(report["spanMs"] >= 20 for report in taken(r)["reports"])


def test_a_fleet_scoped_breakers_ask_and_the_fleets_word_in_a_grant():
    from stormguard_client.breaker import CircuitState, Report, Verdict
    from stormguard_client.pace import ask_body
    report = Report(open=True, open_for_ns=1_500_400_000, refused=4, succeeded=1, failed=0)
    assert json.loads(ask_body("ledger", "pod-1", None, report)) == {
        "service": "ledger", "instance": "pod-1", "sent": 0, "accepted": 0, "overloaded": 0, "timedOut": 0,
        "waiting": 0, "gateOff": True,
        "breaker": {"open": True, "openForMs": 1500, "refused": 4, "trialsSucceeded": 1, "trialsFailed": 0}}
    word = b'"breaker": {"state": "half-open", "trials": 1, "retryInMs": 250}'
    grant = PaceGrant.from_json(b'{"rate": 0, "leaseMs": 1000, "askEveryMs": 100, ' + word + b"}")
    assert grant.breaker == Verdict(CircuitState.HALF_OPEN, 1, 250_000_000)
    for bad in (b'{"state": "shut", "trials": 0, "retryInMs": 0}', b'{"state": "open", "trials": -1, "retryInMs": 0}',
                b'{"state": "open", "trials": 0}', b'"closed"'):
        with pytest.raises(ValueError, match="breaker|retryInMs"):
            PaceGrant.from_json(b'{"rate": 0, "leaseMs": 1000, "askEveryMs": 100, "breaker": ' + bad + b"}")


def test_a_fleet_close_closes_the_breaker_and_hands_an_off_gate_to_the_pace():
    from stormguard_client.breaker import CircuitState, Verdict
    from stormguard_client.reports import _heard
    now = 10**12
    breaker = CircuitBreaker(BreakerPolicy(enabled=True, consecutive_failures=2, fleet_scoped=True), now)
    for _ in range(2):
        breaker.acquire(now).record(True, now)
    gate = SendGate(GatePolicy(enabled=True), now)
    closes = PaceGrant(3.5, 60_000, 100, pace=True, breaker=Verdict(CircuitState.CLOSED, 0, 0))
    _heard(closes, gate, breaker, now)
    assert breaker.state == CircuitState.CLOSED
    assert gate.is_on and gate.rate_at(now) == 3.5, "the gate paces the return at the fleet's grant"


def opened_by_the_fleets_rules(now, scope=True):
    """A breaker under ``scope: fleet`` (or, if not ``scope``, process)
    opened at ``now`` by two failed calls."""
    breaker = CircuitBreaker(BreakerPolicy(enabled=True, consecutive_failures=2, fleet_scoped=scope), now)
    for _ in range(2):
        breaker.acquire(now).record(True, now)
    return breaker


def breaker_grant(state, trials=0, ask_every_ms=20):
    """A 200 with a grant of no rate for a minute and the fleet breaker's word."""
    body = {"rate": 0, "leaseMs": 60_000, "askEveryMs": ask_every_ms,
            "breaker": {"state": state, "trials": trials, "retryInMs": 0}}
    return 200, json.dumps(body).encode()


def test_a_fleet_scoped_breaker_without_a_gate_asks_tries_the_fleets_slot_and_closes_at_its_word(pace_stand_in):
    from stormguard_client.breaker import CallNotPermitted, CircuitState
    server = pace_stand_in([breaker_grant("half-open", trials=1, ask_every_ms=1000), breaker_grant("closed")])
    # The calls' clock stands still, 1.5 s after the breaker opened.
    virtual = [10**12]
    breaker = opened_by_the_fleets_rules(virtual[0] - 1_500_000_000)
    r = Reporter(server.url, "pod-1", interval=3600, timeout=2)
    r.track("svc", breaker=breaker, clock=lambda: virtual[0])
    r.start()
    assert eventually(lambda: len(server.asks) >= 1), "an open fleet-scoped breaker asks, gate or none"
    permits, refusals = [], [0]

    def granted():
        try:
            permits.append(breaker.acquire(virtual[0]))
        except CallNotPermitted:
            refusals[0] += 1
            return False
        return True

    assert eventually(granted), "the slot the daemon granted"
    assert permits[0].fleet_trial and permits[0].trial
    permits[0].record(False, virtual[0])
    assert eventually(lambda: breaker.state == CircuitState.CLOSED), "the fleet's word closes it"
    time.sleep(0.3)
    r.stop()
    assert [ask[1] for ask in server.asks] == [
        {"service": "svc", "instance": "pod-1", "sent": 0, "accepted": 0, "overloaded": 0, "timedOut": 0,
         "waiting": 0, "gateOff": True,
         "breaker": {"open": True, "openForMs": 1500, "refused": 0, "trialsSucceeded": 0, "trialsFailed": 0}},
        {"service": "svc", "instance": "pod-1", "sent": 0, "accepted": 0, "overloaded": 0, "timedOut": 0,
         "waiting": 0, "gateOff": True,
         "breaker": {"open": True, "openForMs": 1500, "refused": refusals[0], "trialsSucceeded": 1,
                     "trialsFailed": 0}},
    ], "closed with its trial reported, it has nothing more to ask"
    assert r.stats.pace_asks == 2 and r.stats.pace_failures == 0
    off = SendGate(GatePolicy(enabled=True), virtual[0])
    assert r._ask("svc", off, breaker, lambda: virtual[0]) is None, "nothing to say since the round began"
    assert len(server.asks) == 2 and r.stats.pace_asks == 2, "no ask"


def test_the_gate_turns_on_at_a_fleet_close_only_if_the_grant_says_pace_and_the_word_closed_the_breaker():
    from stormguard_client.breaker import CircuitState, Verdict
    from stormguard_client.reports import _heard
    now = 10**12
    closes = Verdict(CircuitState.CLOSED, 0, 0)
    breaker, gate = opened_by_the_fleets_rules(now), SendGate(GatePolicy(enabled=True), now)
    _heard(PaceGrant(3.5, 60_000, 100, pace=False, breaker=closes), gate, breaker, now)
    assert breaker.state == CircuitState.CLOSED and not gate.is_on, "without pace the gate is left off"
    _heard(PaceGrant(3.5, 60_000, 100, pace=True, breaker=closes), gate, breaker, now)
    assert not gate.is_on, "a breaker closed already: the word closed nothing, and an off gate does not watch"
    own = opened_by_the_fleets_rules(now, scope=False)
    _heard(PaceGrant(3.5, 60_000, 100, pace=True, breaker=closes), gate, own, now)
    assert own.state == CircuitState.OPEN and not gate.is_on, "a breaker under scope: process decides alone"
