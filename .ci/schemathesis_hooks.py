"""schemathesis hooks for rules that docs/openapi.yaml cannot state, one per
rule; tests/contract.rs and tests/reports.rs test the daemon's behaviour for
each.
"""
import schemathesis


@schemathesis.hook
def filter_failure(context, failure, case, response):
    # Three rules across fields, which the daemon refuses with 400 and 422
    # and OpenAPI cannot state, so that valid-looking data can break them:
    # - every report of a numbered batch names the batch's instance;
    # - a pace ask's timeouts are among its overloads (timedOut <= overloaded);
    # - a policy file's keys follow the policy format's own rules (a
    #   service name is a DNS-1123 label, maxDelay is at least
    #   initialDelay, ...), answered 422 with every error and its place.
    # Only refusals that say so are let through; any other refusal of
    # valid data still fails.
    if type(failure).__name__ == "AcceptedNegativeData":
        return not refused_alone(case, response)
    if type(failure).__name__ != "RejectedPositiveData":
        return True
    text = response.text or ""
    batch_rule = response.status_code == 400 and "is not the batch's instance" in text
    timeouts_rule = response.status_code == 400 and "timeouts are counted among the overloaded" in text
    policy_rules = response.status_code == 422 and case.operation.label == "POST /admin/validate"
    return not (batch_rule or timeouts_rule or policy_rules)


def refused_alone(case, response):
    """In an array or a batch of reports each stands alone: the daemon
    counts the good ones (202) and lists each bad one in `rejected`, so a
    body with a bad report in it is accepted, and that is right only when
    `rejected` names it."""
    if case.operation.label != "POST /v1/reports" or response.status_code != 202:
        return False
    try:
        return bool(response.json().get("rejected"))
    except ValueError:
        return False


@schemathesis.hook
def filter_case(context, case):
    # `If-None-Match: *` with `wait` is refused (400): it matches every
    # version, so such a long-poll could never end. A dependency between a
    # header and a query parameter.
    headers = case.headers or {}
    query = case.query or {}
    return not (headers.get("If-None-Match", "").strip() == "*" and "wait" in query)
