#!/usr/bin/env python3
"""Round-trips every dashboard through Grafana Labs' own Python models
(grafana-foundation-sdk), as provisioning pipelines built on them do, and
fails if anything is lost or changed on the way.

The SDK also writes some keys a dashboard leaves out. Each one it may add is
listed below with why it changes nothing: its value is Grafana's own default
for the key, or the key means nothing for that object. Any other addition
fails, as a lost or changed key does: the SDK writing `legend.showLegend:
false` where Grafana's UI defaults to true is how a dashboard loses every
legend on the way through such a pipeline.

Usage: .ci/dashboards-roundtrip.py dashboards/*.json
"""
import json
import re
import sys

from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

# (path pattern, value): additions that change nothing.
SAME_AS_GRAFANA = [
    (r"\.style", "dark"),  # ignored since Grafana 7: the theme is the user's
    (r"\.panels\[\d+\]\.transparent", False),  # Grafana's default
    (r"\.panels\[\d+\]\.transformations", []),  # none, as when absent
    (r"\.panels\[\d+\]\.repeatDirection", "h"),  # Grafana's default; no panel repeats
    (r"\.panels\[\d+\]\.options\.orientation", "auto"),  # stat panels' default
    (r"\.panels\[\d+\]\.options\.justifyMode", "auto"),  # stat panels' default
    (r"\.panels\[\d+\]\.options\.alignValue", "left"),  # state timelines' default
    (r"\.panels\[\d+\]\.fieldConfig\.defaults\.custom", {"lineWidth": 0, "fillOpacity": 70}),  # state timelines' defaults
    (r"\.templating\.list\[\d+\]\.skipUrlSync", False),  # Grafana's default
    (r"\.templating\.list\[\d+\]\.multi", False),  # Grafana's default
    (r"\.templating\.list\[\d+\]\.includeAll", False),  # Grafana's default
    (r"\.templating\.list\[\d+\]\.auto", False),  # interval variables only
    (r"\.templating\.list\[\d+\]\.auto_count", 30),  # interval variables only
    (r"\.templating\.list\[\d+\]\.auto_min", "10s"),  # interval variables only
    (r"\.templating\.list\[\d+\]\.id", "00000000-0000-0000-0000-000000000000"),  # the SDK's own, unused by Grafana
]


def differences(before, after, path=""):
    if isinstance(before, dict) and isinstance(after, dict):
        for k in sorted(set(before) | set(after)):
            here = f"{path}.{k}"
            if k not in after:
                yield f"{here}: lost ({json.dumps(before[k])[:80]})"
            elif k not in before:
                if not any(re.fullmatch(p, here) and after[k] == v for p, v in SAME_AS_GRAFANA):
                    yield f"{here}: added ({json.dumps(after[k])[:80]})"
            else:
                yield from differences(before[k], after[k], here)
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for i, (b, a) in enumerate(zip(before, after)):
            yield from differences(b, a, f"{path}[{i}]")
    elif before != after:
        yield f"{path}: changed from {json.dumps(before)[:60]} to {json.dumps(after)[:60]}"


def main(paths):
    register_default_plugins()
    failed = False
    for path in paths:
        with open(path) as f:
            before = json.load(f)
        after = json.loads(json.dumps(Dashboard.from_json(before), default=lambda o: o.to_json()))
        found = list(differences(before, after))
        print(f"{path}: {'nothing lost or changed' if not found else f'{len(found)} differences'}")
        for line in found:
            print("  " + line)
        failed |= bool(found)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
