"""The chart's PrometheusRule: its expressions name only metrics the servers really emit, at the thresholds
the chart's own configuration implies."""

from __future__ import annotations

import re
from typing import Any

from tests.chart.sets import rendered
from tests.unit.test_metrics_docs import emitted
from webhook.configurations import TIMEOUT_SECONDS

NS = "dispatch-system"
"""The namespace `helm template` renders into (tests/chart/helm.py)."""
TEAM = {"team": "ml-platform"}
"""The alertLabels of tests/chart/values/observability.yaml."""


def rules() -> list[dict[str, Any]]:
    r = rendered("observability")
    assert r.namespace == NS
    (group,) = r.one("PrometheusRule")["spec"]["groups"]
    return group["rules"]


def test_the_rule_names_only_metrics_the_servers_emit():
    names = emitted()
    for rule in rules():
        expr = rule["expr"]
        for regex in re.findall(r'__name__=~"([^"]+)"', expr):
            matched = {n for n in names if re.fullmatch(regex, n)}
            expiries = {n for n in names if n.endswith("_expiration_timestamp_seconds")}
            assert matched == expiries, f"{rule['alert']}: the regex must match every expiry metric and only them"
        for name in re.findall(r"\b(dispatch_[a-z_]+)\b", re.sub(r'"[^"]*"', '""', expr)):
            assert re.sub(r"_bucket$", "", name) in names, f"{rule['alert']}: {name} is emitted by no server"


def test_the_webhook_alert_is_at_half_the_configurations_timeout():
    (slow,) = [r for r in rules() if r["alert"] == "DispatchWebhookSlow"]
    assert slow["expr"].endswith(f"> {TIMEOUT_SECONDS / 2:g}")


def test_every_alert_is_labelled_and_explained():
    for rule in rules():
        assert rule["labels"]["severity"] in {"critical", "warning"}
        assert rule["labels"]["team"] == "ml-platform"
        assert rule["annotations"]["summary"]
        assert rule["annotations"]["description"]
        assert f'namespace="{NS}"' in rule["expr"], "only this release's series"
