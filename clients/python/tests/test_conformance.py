"""clients/conformance.json's scenarios, each as the file says it, against
the real daemon (through a fault proxy where the scenario has one), each in
both flavours: the blocking one and the asyncio one (see flavours.py). The
Reporter serves both flavours alike, so the report scenarios drive it
as it is in each."""

import json
import signal
import ssl
import time

import pytest

from conftest import ROOT, POLICY, batch, eventually, metric, requests_sample
import flavours
from stormguard_client import DaemonTls, Reporter, ReportNotDelivered, ReportRefused
from stormguard_client.breaker import CallNotPermitted, CircuitState
from stormguard_client.gate import Signal

CREDENTIALS = ROOT / "clients" / "credentials"
SCENARIOS = json.loads((ROOT / "clients" / "conformance.json").read_text())["scenarios"]
IDS = [s["id"] for s in SCENARIOS]
CHARGE = requests_sample("/charge", "payments", "success")
QUICK = {"min_poll_interval": 0.05, "retry_initial": 0.05, "retry_max": 0.2}
# payments with its send gate on, under overloadWhen: any-refusal, so that one
# refused attempt turns it on (as the pacing scenarios say) whatever the
# daemon's default.
GATED = POLICY.format(retries=2) + "    gate:\n      enabled: true\n      overloadWhen: any-refusal\n"
PROCESSES = 'stormguard_fleet_processes{service="payments"}'
# payments's breaker opens at two failures, for a second, and its half-open is the fleet's.
FLEET_BREAKER = POLICY.format(retries=2) + (
    "    circuitBreaker: {enabled: true, consecutiveFailures: 2, openTimeout: 1s, halfOpenMaxCalls: 1,"
    " successThreshold: 1, scope: fleet}\n")
BREAKER_STATE = 'stormguard_fleet_breaker_state{service="payments"}'
FLEET_BUDGET = POLICY.format(retries=2) + (
    "    budget:\n      scope: fleet\n      retryRatio: 0\n      minRetriesPerSecond: 12\n")
S = 1_000_000_000


def holds(check, seconds):
    """Whether ``check()`` stays true for ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not check():
            return False
        time.sleep(0.02)
    return True


def start_with_the_daemon_down(flavour, daemon, tmp_path, fault_proxy, reserved):
    address = reserved()
    watch = flavour.watch(address.url, ["payments"], startup_wait=0.3, **QUICK)
    began = time.monotonic()
    assert watch.start() == "defaults"
    assert time.monotonic() - began < 2, "ready within about its start-up wait"
    assert watch.source == "defaults" and watch.policy("payments")["maxRetries"] == 3
    daemon(on=address, retries=5)
    assert eventually(lambda: watch.source == "daemon" and watch.policy("payments")["maxRetries"] == 5)
    watch.stop()


def start_from_the_cache(flavour, daemon, tmp_path, fault_proxy, reserved):
    address = reserved()
    cache = tmp_path / "cache.json"
    url, _, process = daemon(on=address, retries=5)
    first = flavour.watch(url, ["payments"], cache=cache)
    assert first.start() == "daemon" and first.policy("payments")["maxRetries"] == 5
    first.stop()
    assert cache.exists(), "the cache file was written"
    process.kill()
    process.wait()
    second = flavour.watch(url, ["payments"], cache=cache, startup_wait=0.3, **QUICK)
    assert second.start() == "cache"
    assert second.source == "cache" and second.policy("payments")["maxRetries"] == 5
    daemon(on=address)
    assert eventually(lambda: second.source == "daemon")
    assert second.policy("payments")["maxRetries"] == 5
    second.stop()


def watch_a_change(flavour, daemon, tmp_path, fault_proxy, reserved):
    url, policy, _ = daemon(retries=2)
    # No poll but the long-poll open at the edit can bring it within 10 s.
    watch = flavour.watch(url, ["payments", "search"], watch_wait=8, min_poll_interval=60)
    assert watch.start() == "daemon"
    assert watch.policy("payments")["maxRetries"] == 2
    assert watch.policy("search")["maxRetries"] == 3, "not in the file: the defaults block"
    time.sleep(0.2)  # the long-poll is open
    policy.write_text(POLICY.format(retries=7))
    assert eventually(lambda: watch.policy("payments")["maxRetries"] == 7, within=5)
    watch.stop()


def a_bad_answer(flavour, daemon, tmp_path, fault_proxy, reserved):
    url, policy, _ = daemon(retries=2)
    proxy = fault_proxy(url)
    watch = flavour.watch(proxy.url, ["payments"], watch_wait=5, **QUICK)
    assert watch.start() == "daemon" and watch.policy("payments")["maxRetries"] == 2
    proxy.corrupt_policies = True
    policy.write_text(POLICY.format(retries=7))
    assert holds(lambda: watch.policy("payments")["maxRetries"] == 2 and watch.source == "daemon", 1.0)
    proxy.corrupt_policies = False
    assert proxy.corrupted >= 2, "the client asked, and was answered badly"
    assert eventually(lambda: watch.policy("payments")["maxRetries"] == 7)
    watch.stop()


def a_lost_answer(flavour, daemon, tmp_path, fault_proxy, reserved):
    url, policy, _ = daemon(retries=2)
    proxy = fault_proxy(url)
    watch = flavour.watch(proxy.url, ["payments"], watch_wait=5, **QUICK)
    assert watch.start() == "daemon" and watch.policy("payments")["maxRetries"] == 2
    proxy.lose_policy_answers = 2
    policy.write_text(POLICY.format(retries=7))

    def kept_while_lost():
        # As the Go client's test checks it, with no window to miss: the
        # count first, so that a 7 seen below two losses came through one.
        lost = proxy.lost
        retries = watch.policy("payments")["maxRetries"]
        assert lost >= 2 or retries == 2, f"kept while the answers were lost, not after {lost}"
        return retries == 7

    assert eventually(kept_while_lost), "asked again"
    assert proxy.lost == 2
    watch.stop()


def a_draining_daemon(flavour, daemon, tmp_path, fault_proxy, reserved):
    url, _, process = daemon(retries=4)
    watch = flavour.watch(url, ["payments"], watch_wait=5, **QUICK)
    assert watch.start() == "daemon"
    process.send_signal(signal.SIGTERM)
    assert holds(lambda: watch.policy("payments")["maxRetries"] == 4 and watch.source != "defaults", 1.0)
    watch.stop()


def a_report_answer_lost(flavour, daemon, tmp_path, fault_proxy, reserved):
    url, _, _ = daemon()
    proxy = fault_proxy(url)
    proxy.lose_report_batch = 1
    reporter = Reporter(proxy.url, "pod-1", interval=3600, timeout=5)
    for _ in range(5):
        reporter.record("payments", "/charge", 0, "success")
    with pytest.raises(ReportNotDelivered):
        reporter.flush()
    reporter.record("payments", "/charge", 0, "success")
    reporter.flush()
    sent = proxy.report_batches
    assert len(sent) == 3 and proxy.lost == 1
    assert sent[0] == sent[1], "the same batch, byte for byte"
    assert batch(sent[2])["sequence"] == batch(sent[0])["sequence"] + 1, "then the new counts"
    assert metric(url, CHARGE) == 6
    assert metric(url, 'stormguard_reports_total{result="duplicate"}') == 1
    assert reporter.stats.send_failures == 1 and reporter.stats.batches_sent == 2


def a_refused_report(flavour, daemon, tmp_path, fault_proxy, reserved):
    url, _, _ = daemon(args=("--max-body-bytes", "1024"))
    proxy = fault_proxy(url)
    reporter = Reporter(proxy.url, "pod-1", interval=3600, timeout=5)
    for i in range(40):
        reporter.record("payments", f"/endpoint-{i}", 0, "success")
    with pytest.raises(ReportRefused, match="413") as refused:
        reporter.flush()
    assert refused.value.status == 413 and "1024" in refused.value.body, "names the status and the daemon's body"
    assert reporter.stats.batches_dropped == 1
    reporter.record("payments", "/charge", 0, "success")
    reporter.flush()
    assert len(proxy.report_batches) == 2, "the refused batch was not resent"
    assert [e["endpoint"] for e in batch(proxy.report_batches[1])["reports"][0]["endpoints"]] == ["/charge"]
    assert metric(url, CHARGE) == 1
    assert metric(url, requests_sample("/endpoint-0", "payments", "success")) is None


def reports_while_the_daemon_is_down(flavour, daemon, tmp_path, fault_proxy, reserved):
    address = reserved()
    reporter = Reporter(address.url, "pod-1", interval=3600, timeout=2)
    for _ in range(3):
        reporter.record("payments", "/charge", 0, "success")
    with pytest.raises(ReportNotDelivered):
        reporter.flush()
    url, _, _ = daemon(on=address)
    reporter.flush()
    assert metric(url, CHARGE) == 3
    reporter.flush()
    assert metric(url, CHARGE) == 3, "once"


def shutdown_sends_the_last_counts(flavour, daemon, tmp_path, fault_proxy, reserved):
    url, _, _ = daemon()
    proxy = fault_proxy(url)
    reporter = Reporter(proxy.url, "pod-1", interval=3600, timeout=5).start()
    for _ in range(4):
        reporter.record("payments", "/charge", 0, "success")
    reporter.stop()
    assert metric(url, CHARGE) == 4, "by the time shutdown returns"
    sent = len(proxy.report_batches)
    reporter.record("payments", "/charge", 0, "success")
    time.sleep(0.5)
    assert len(proxy.report_batches) == sent and metric(url, CHARGE) == 4, "nothing is sent after"
    assert not reporter._thread.is_alive()


def a_rotated_token(flavour, daemon, tmp_path, fault_proxy, reserved):
    tokens = json.loads((CREDENTIALS / "tokens.json").read_text())
    url, _, _ = daemon(args=("--tokens", "required", "--token-keys", str(CREDENTIALS / "jwks.json"),
                             "--token-issuer", tokens["issuer"]))
    token_file = tmp_path / "token"
    token_file.write_text(tokens["expired"])
    reporter = Reporter(url, "pod-1", interval=3600, timeout=5, token_file=token_file)
    for _ in range(2):
        reporter.record("payments", "/charge", 0, "success")
    with pytest.raises(ReportNotDelivered, match="401") as refused:
        reporter.flush()
    assert refused.value.status == 401 and reporter._pending is not None, "the batch is kept"
    token_file.write_text(tokens["valid"])
    reporter.flush()
    assert metric(url, CHARGE) == 2, "the kept batch, with the valid token, once"
    assert metric(url, 'stormguard_token_refusals_total{reason="expired"}') == 1
    assert reporter.stats.send_failures == 1 and reporter.stats.batches_dropped == 0


def https_with_a_ca(flavour, daemon, tmp_path, fault_proxy, reserved):
    flags = [("--tls-cert", "daemon.crt"), ("--tls-key", "daemon.key"), ("--tls-client-ca", "ca.crt")]
    url, _, _ = daemon(retries=5, args=[part for flag, name in flags for part in (flag, str(CREDENTIALS / name))])
    assert url.startswith("https://127.0.0.1:"), url
    base = url.replace("127.0.0.1", "localhost")
    tls = DaemonTls(ca_file=CREDENTIALS / "ca.crt", cert_file=CREDENTIALS / "client.crt",
                    key_file=CREDENTIALS / "client.key")
    trusting = flavour.watch(base, ["payments"], tls=tls, **QUICK)
    assert trusting.start() == "daemon" and trusting.policy("payments")["maxRetries"] == 5
    reporter = Reporter(base, "pod-1", interval=3600, timeout=5, tls=tls)
    reporter.record("payments", "/charge", 0, "success")
    reporter.flush()

    distrusting = flavour.watch(base, ["payments"], startup_wait=0.3,
                              tls=DaemonTls(cert_file=tls.cert_file, key_file=tls.key_file), **QUICK)
    began = time.monotonic()
    assert distrusting.start() == "defaults"
    assert time.monotonic() - began < 2, "ready within about its start-up wait"
    assert distrusting.policy("payments")["maxRetries"] == 3

    context = ssl.create_default_context(cafile=tls.ca_file)
    context.load_cert_chain(tls.cert_file, tls.key_file)
    assert metric(base, CHARGE, context=context) == 1
    trusting.stop()
    distrusting.stop()


def pacing_process(flavour, served, daemon_url, token_file=None, instance="pod-1"):
    """A process pacing payments: a gated process (see gated_process) whose
    gate one refused attempt turned on. Returns (gate, reporter, watch)."""
    gate, reporter, watch = gated_process(flavour, served, daemon_url, token_file, instance)
    now = time.monotonic_ns()
    gate.record(Signal.OVERLOADED, now, now)
    assert gate.is_on
    return gate, reporter, watch


def gated_process(flavour, served, daemon_url, token_file=None, instance="pod-1"):
    """A process with payments's gate: its calls under the policy the daemon
    at ``served`` serves, tracked by a started reporter (fleet pacing on,
    instance ``instance``) that asks ``daemon_url``. Returns (gate,
    reporter, watch)."""
    watch = flavour.watch(served, ["payments"], **QUICK)
    assert watch.start() == "daemon"
    reporter = Reporter(daemon_url, instance, interval=3600, timeout=0.5, token_file=token_file).start()
    payments = flavour.dependency(watch, "payments", reporter)
    gate = payments.gate
    assert gate is not None, "the policy has a gate"
    reporter.track("payments", payments.breaker, payments.budget, gate)
    return gate, reporter, watch


def paces(gate):
    """The rate ``gate`` paces at now, and its own (0.0 while off)."""
    return gate.rate_at(time.monotonic_ns()) or 0.0, gate.own_rate or 0.0


def alone(gate):
    """Whether ``gate`` paces at its own rate now."""
    pace, own = paces(gate)
    return pace == own


def gets_a_turn_later(gate):
    """Whether an attempt asking ``gate`` for a turn 3 s from now gets one at once."""
    return gate.turn(time.monotonic_ns() + 3 * S) is None


def two_paced_processes(flavour, url):
    """Two processes paced by the daemon at ``url``, after pod-1's gate saw
    one attempt accepted and pod-2's three: alone each would pace at what
    its own outcomes say, and the daemon, which learns from both, grants
    each its part of the fleet's rate, which is neither, so a gate that
    kept its own rate is told apart from one the daemon paces. Returns two
    (gate, reporter, watch)."""
    processes = [pacing_process(flavour, url, url, instance=f"pod-{i}") for i in (1, 2)]
    for (gate, _, _), accepted in zip(processes, (1, 3)):
        for _ in range(accepted):
            now = time.monotonic_ns()
            gate.record(Signal.ACCEPTED, now, now)
    accepted = 'stormguard_fleet_attempts_total{outcome="accepted",service="payments"}'
    assert eventually(lambda: metric(url, PROCESSES) == 2 and metric(url, accepted) == 4, within=5), \
        "the daemon paces both processes, and heard of their outcomes"
    return processes


def paced_together(url, gates, seconds=1.0):
    """Over ``seconds``, at each moment the daemon paces every gate of
    ``gates`` (each at a grant, not its own rate): the sum of their paces
    and the rate the daemon shares, stormguard_fleet_rate (the higher of a
    reading before and after, as it may move meanwhile)."""
    rate = 'stormguard_fleet_rate{service="payments"}'
    together, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        before = metric(url, rate)
        now = [paces(gate) for gate in gates]
        after = metric(url, rate)
        granted = all(pace > 0 and pace != own for pace, own in now)
        if granted and before is not None and after is not None:
            together.append((sum(pace for pace, _ in now), max(before, after)))
        time.sleep(0.05)
    return together


def stop_all(processes):
    for _, reporter, watch in processes:
        reporter.stop()
        watch.stop()


def paced_by_the_daemon(flavour, daemon, tmp_path, fault_proxy, reserved):
    url, _, _ = daemon(policy=GATED)
    processes = two_paced_processes(flavour, url)
    for (gate, reporter, _), alone_rate in zip(processes, (16.5, 48.5)):
        def granted():
            pace, own = paces(gate)
            return own == alone_rate and pace > 0 and pace != own
        assert eventually(granted, within=5), f"paced at its part of the grant, not {alone_rate}: {paces(gate)}"
        assert reporter.stats.pace_asks >= 1
    together = paced_together(url, [gate for gate, _, _ in processes])
    assert together, "both paced by the daemon for a while"
    assert all(paced <= 1.2 * rate for paced, rate in together), \
        f"together above the rate the daemon shares (paced, rate): {together}"
    stop_all(processes)


def a_lease_expires(flavour, daemon, tmp_path, fault_proxy, reserved):
    url, _, _ = daemon(policy=GATED)
    proxy = fault_proxy(url)
    proxy.grant_once = (7.25, 2000)
    gate, reporter, watch = pacing_process(flavour, url, proxy.url)
    assert eventually(lambda: paces(gate) == (7.25, 0.5), within=5), f"paced at the grant: {paces(gate)}"
    assert eventually(lambda: alone(gate), within=5), f"its own rate once the lease is over: {paces(gate)}"
    assert reporter.stats.pace_failures > 0, "the 503s are counted"
    assert gets_a_turn_later(gate), "turns at its own rate"
    reporter.stop()
    watch.stop()


def the_daemon_goes_while_pacing(flavour, daemon, tmp_path, fault_proxy, reserved):
    url, _, process = daemon(policy=GATED)
    paced_until_the_daemon_is_killed(flavour, url, process)


def the_daemon_hangs_while_pacing(flavour, daemon, tmp_path, fault_proxy, reserved):
    url, _, process = daemon(on=reserved(), policy=GATED)
    paced_until_the_daemon_is_killed(flavour, url, process)


def paced_until_the_daemon_is_killed(flavour, url, process):
    """The pacing scenarios' end: pod-1 is paced at its part of the grant,
    then the daemon is killed; what its address does then is the caller's."""
    processes = two_paced_processes(flavour, url)
    gate, reporter, watch = processes[0]
    assert eventually(lambda: paces(gate)[0] > 0 and not alone(gate), within=5), \
        f"paced at its part of the grant first: {paces(gate)}"
    failures = reporter.stats.pace_failures
    process.kill()
    process.wait()
    assert eventually(lambda: reporter.stats.pace_failures > failures and alone(gate), within=5), \
        f"alone within 5 s: {paces(gate)}, {reporter.stats}"
    assert gets_a_turn_later(gate)
    stop_all(processes)


def a_refused_pace_ask(flavour, daemon, tmp_path, fault_proxy, reserved):
    tokens = json.loads((CREDENTIALS / "tokens.json").read_text())
    url, _, _ = daemon(policy=GATED + "reporters:\n  payments: [shop/cart]\n",
                       args=("--tokens", "required", "--token-keys", str(CREDENTIALS / "jwks.json"),
                             "--token-issuer", tokens["issuer"]))
    token_file = tmp_path / "token"
    token_file.write_text(tokens["valid"])
    gate, reporter, watch = pacing_process(flavour, url, url, token_file)
    assert eventually(lambda: reporter.stats.pace_failures >= 2, within=10), "a refused ask"
    stats = reporter.stats
    assert stats.pace_failures == stats.pace_asks, "no ask got a grant"
    assert alone(gate), f"alone: {paces(gate)}"
    assert metric(url, 'stormguard_http_requests_total{route="/v1/pace",status="403"}') >= 2
    assert metric(url, PROCESSES) is None, "the daemon paces nobody for payments"
    reporter.stop()
    watch.stop()


def failing_at_random_is_not_paced(flavour, daemon, tmp_path, fault_proxy, reserved):
    url, _, _ = daemon(policy=POLICY.format(retries=2) + "    gate:\n      enabled: true\n")
    processes = [gated_process(flavour, url, url, instance=f"pod-{i}") for i in (1, 2)]
    watching = 'stormguard_fleet_process_gates{gate="watching",service="payments"}'
    overloaded = 'stormguard_fleet_judgement{judgement="overloaded",service="payments"}'
    heard, deadline, i = False, time.monotonic() + 10, 0
    # Every 50 ms an attempt each, at least 50, until the daemon has been heard
    # judging no overload of two watching gates (it counts only the gates that
    # asked within its last three asks, so it is read meanwhile).
    while not (i >= 50 and heard) and time.monotonic() < deadline:
        signal_ = Signal.OVERLOADED if i % 3 == 2 else Signal.ACCEPTED
        for gate, _, _ in processes:
            now = time.monotonic_ns()
            assert gate.turn(now) is None, f"attempt {i}: a turn at once"
            gate.record(signal_, now, now)
            assert not gate.is_on, f"attempt {i}: a third refused at random turned the gate on"
        if i >= 10 and not heard:
            heard = metric(url, watching) == 2 and metric(url, overloaded) == 0
        time.sleep(0.05)
        i += 1
    assert heard, f"the daemon hears {metric(url, watching)} watching gates, judges overload {metric(url, overloaded)}"
    third = gated_process(flavour, url, url, instance="pod-3")
    gate = third[0]
    t0 = time.monotonic_ns()
    for refusal in range(1, 6):
        now = t0 + refusal * 1_000_000
        gate.record(Signal.OVERLOADED, now, now)
        assert gate.is_on == (refusal == 5), f"after {refusal} refusals with nothing accepted"
    stop_all([*processes, third])


def budgeted_process(flavour, served, daemon_url, instance):
    """A process calling payments under the policy the daemon at ``served``
    serves, reporting to ``daemon_url`` as ``instance`` when the test flushes
    (an hour's interval, and its first report held as long). Returns
    (payments, reporter, watch)."""
    watch = flavour.watch(served, ["payments"], **QUICK)
    assert watch.start() == "daemon"
    reporter = Reporter(daemon_url, instance, interval=3600, timeout=0.5, first_report=3600).start()
    payments = flavour.dependency(watch, "payments", reporter)
    assert payments.call("/charge", lambda timeout: 200) == 200
    return payments, reporter, watch


def floor(payments):
    """The floor ``payments``'s budget holds now, in retries a second (its
    window is 10 s and its ratio 0, so what it allows is 10 × the floor)."""
    return payments.budget.allowed(time.monotonic_ns()) / 10


def a_fleet_budget_divided(flavour, daemon, tmp_path, fault_proxy, reserved):
    url, _, process = daemon(policy=FLEET_BUDGET)
    first, first_reporter, first_watch = budgeted_process(flavour, url, url, "pod-1")
    second, second_reporter, second_watch = budgeted_process(flavour, url, url, "pod-2")
    first_reporter.flush()
    second_reporter.flush()
    assert floor(first) == pytest.approx(12), "alone when it reported"
    assert 0 < floor(second) < 12, f"its part of 12 between the two: {floor(second)}"
    assert metric(url, 'stormguard_budget_processes{service="payments"}') == 2
    process.kill()
    process.wait()
    with pytest.raises(ReportNotDelivered):
        second_reporter.flush()
    assert floor(second) == pytest.approx(6), "12 over the 2 processes last heard of"
    for reporter, watch in ((first_reporter, first_watch), (second_reporter, second_watch)):
        reporter.stop()
        watch.stop()


def a_fleet_budget_falls_back(flavour, daemon, tmp_path, fault_proxy, reserved):
    url, _, _ = daemon(policy=FLEET_BUDGET)
    proxy = fault_proxy(url)
    proxy.floor_once = ("payments", 2.5, 4)
    payments, reporter, watch = budgeted_process(flavour, url, proxy.url, "pod-1")
    assert floor(payments) == pytest.approx(12), "the whole floor before any answer"
    reporter.flush()
    assert floor(payments) == pytest.approx(2.5), "the daemon's part"
    with pytest.raises(ReportNotDelivered):
        reporter.flush()
    assert floor(payments) == pytest.approx(3), "12 over the 4 processes last heard of"
    reporter.stop()
    watch.stop()


def broken_process(flavour, url):
    """A process calling payments: its breaker under the policy the daemon
    at ``url`` serves, tracked by a started reporter asking it, and opened by
    two failed calls. Returns (breaker, reporter, watch)."""
    watch = flavour.watch(url, ["payments"], **QUICK)
    assert watch.start() == "daemon"
    reporter = Reporter(url, "pod-1", interval=3600, timeout=0.5).start()
    payments = flavour.dependency(watch, "payments", reporter)
    breaker = payments.breaker
    assert breaker is not None and breaker.policy.fleet_scoped, "the policy has a fleet-scoped breaker"
    reporter.track("payments", breaker, payments.budget, payments.gate)
    for _ in range(2):
        now = time.monotonic_ns()
        breaker.acquire(now).record(True, now)
    return breaker, reporter, watch


def first_permit(breaker):
    """The first permit ``breaker`` grants, asked every 10 ms for up to 10 s."""
    permits = []

    def granted():
        try:
            permits.append(breaker.acquire(time.monotonic_ns()))
        except CallNotPermitted:
            return False
        return True

    assert eventually(granted, within=10), "a permit within 10 s"
    return permits[0]


def a_fleet_half_open(flavour, daemon, tmp_path, fault_proxy, reserved):
    url, _, _ = daemon(policy=FLEET_BREAKER)
    breaker, reporter, watch = broken_process(flavour, url)
    assert eventually(lambda: metric(url, BREAKER_STATE) == 2), "the daemon keeps the fleet's breaker open"
    trial = first_permit(breaker)
    assert trial.fleet_trial, "the fleet's trial, not its own"
    trial.record(False, time.monotonic_ns())
    assert eventually(lambda: breaker.state == CircuitState.CLOSED), "the fleet closes its breaker"
    assert eventually(lambda: metric(url, BREAKER_STATE) == 0), "the daemon's breaker closed"
    reporter.stop()
    watch.stop()


def a_fleet_half_open_without_the_daemon(flavour, daemon, tmp_path, fault_proxy, reserved):
    url, _, process = daemon(policy=FLEET_BREAKER)
    breaker, reporter, watch = broken_process(flavour, url)
    assert eventually(lambda: metric(url, BREAKER_STATE) == 2), "the daemon keeps the fleet's breaker open"
    failures = reporter.stats.pace_failures
    process.kill()
    process.wait()
    trial = first_permit(breaker)
    assert trial.trial and not trial.fleet_trial, "its own half-open's trial"
    assert reporter.stats.pace_failures > failures, "the failed asks are counted"
    reporter.stop()
    watch.stop()


IMPLEMENTATIONS = {
    "start-with-the-daemon-down": start_with_the_daemon_down,
    "start-from-the-cache": start_from_the_cache,
    "watch-a-change": watch_a_change,
    "a-bad-answer": a_bad_answer,
    "a-lost-answer": a_lost_answer,
    "a-draining-daemon": a_draining_daemon,
    "a-report-answer-lost": a_report_answer_lost,
    "a-refused-report": a_refused_report,
    "reports-while-the-daemon-is-down": reports_while_the_daemon_is_down,
    "shutdown-sends-the-last-counts": shutdown_sends_the_last_counts,
    "a-rotated-token": a_rotated_token,
    "https-with-a-ca": https_with_a_ca,
    "paced-by-the-daemon": paced_by_the_daemon,
    "a-lease-expires": a_lease_expires,
    "the-daemon-goes-while-pacing": the_daemon_goes_while_pacing,
    "the-daemon-hangs-while-pacing": the_daemon_hangs_while_pacing,
    "a-refused-pace-ask": a_refused_pace_ask,
    "failing-at-random-is-not-paced": failing_at_random_is_not_paced,
    "a-fleet-budget-divided": a_fleet_budget_divided,
    "a-fleet-budget-falls-back": a_fleet_budget_falls_back,
    "a-fleet-half-open": a_fleet_half_open,
    "a-fleet-half-open-without-the-daemon": a_fleet_half_open_without_the_daemon,
}


@pytest.fixture(params=flavours.NAMES)
def flavour(request):
    """Each flavour in turn: the blocking one, then the asyncio one."""
    made = flavours.make(request.param)
    yield made
    made.close()


@pytest.mark.parametrize("scenario", IDS)
def test_scenario(scenario, flavour, daemon, tmp_path, fault_proxy, reserved):
    if scenario not in IMPLEMENTATIONS:
        pytest.fail(f"conformance scenario {scenario!r} has no Python implementation ({flavour.name} flavour)")
    IMPLEMENTATIONS[scenario](flavour, daemon, tmp_path, fault_proxy, reserved)


def test_every_implementation_is_a_scenario_of_the_file():
    assert len(IDS) == len(set(IDS)), "scenario ids are unique"
    assert sorted(set(IMPLEMENTATIONS) - set(IDS)) == [], "implemented, but not in conformance.json"
