"""The chart's PrometheusRule: its expressions name only metrics the servers really emit, and
`promtool test rules` (the pinned promtool, controlplane/promtool.sh) fires each alert on the series those
servers emit and keeps it quiet otherwise."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.binaries import BUILD_WAIT_SECONDS, await_builds
from tests.charts.helm import ROOT
from tests.charts.sets import rendered
from tests.docs.test_metrics_docs import emitted
from webhook.configurations import TIMEOUT_SECONDS

NS = "dispatch-system"
"""The namespace `helm template` renders into (tests/charts/helm.py)."""
TEAM = {"team": "ml-platform"}
"""The alertLabels of tests/charts/values/observability.yaml."""


def rules() -> list[dict[str, Any]]:
    r = rendered("observability")
    assert r.namespace == NS
    (group,) = r.one("PrometheusRule")["spec"]["groups"]
    return group["rules"]


def promtool() -> Path:
    path = Path(subprocess.run([ROOT / "controlplane" / "promtool.sh", "--print-path"], capture_output=True,
                               text=True, check=True).stdout.strip())  # fmt: skip
    await_builds(built=path.exists)  # scripts/test builds promtool beside the first tests, first of all
    if not path.exists():
        pytest.fail(f"promtool is not built: run controlplane/promtool.sh (scripts/test does) to build {path}")
    return path


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


def _series(name: str, values: str, **labels: str) -> dict[str, str]:
    selector = ",".join(f'{k}="{v}"' for k, v in {"namespace": NS, **labels}.items())
    return {"series": f"{name}{{{selector}}}", "values": values}


def _expected(rule: dict[str, Any], **labels: str) -> dict[str, Any]:
    """The alert as promtool shows it: its labels, and its annotations with $labels filled in."""
    every = {**labels, **rule["labels"]}

    def fill(text: str) -> str:
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: every.get(m[1], ""), text)

    return {"exp_labels": every, "exp_annotations": {k: fill(v) for k, v in rule["annotations"].items()}}


def _case(rule: dict[str, Any], at: str, series: list[dict[str, str]], *fired: dict[str, Any]) -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [{"eval_time": at, "alertname": rule["alert"], "exp_alerts": list(fired)}],
    }


@pytest.mark.timeout(BUILD_WAIT_SECONDS + 300)  # on a fresh machine promtool is still being built beside the tests
def test_promtool_fires_each_alert_on_the_emitted_series_and_only_then(tmp_path: Path):
    by_name = {r["alert"]: r for r in rules()}
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [{"name": "dispatch-k8s", "rules": rules()}]}))
    a, b = {"pod": "dispatch-k8s-a"}, {"pod": "dispatch-k8s-b"}
    leader, cert = by_name["DispatchGateNoLeader"], by_name["DispatchCertificateExpiringSoon"]
    certs, errors = by_name["DispatchCertificatePassesFailing"], by_name["DispatchReconcileErrors"]
    watch, slow, held = (
        by_name["DispatchWatchRestarts"],
        by_name["DispatchWebhookSlow"],
        by_name["DispatchCheckHeldTooLong"],
    )
    expiry_6d = {**a, "container": "webhook"}
    cert_expected = _expected(cert, namespace=NS, **expiry_6d)
    # At 2h, 6 days minus 2 hours remain: humanizeDuration of 511200 s.
    cert_expected["exp_annotations"]["description"] = cert_expected["exp_annotations"]["description"].replace(
        "{{ $value | humanizeDuration }}", "5d 22h 0m 0s"
    )
    bucket = "dispatch_webhook_review_duration_seconds_bucket"
    cases = [
        # No leader among the replicas (another namespace's leader does not count); then one leads.
        _case(
            leader,
            "15m",
            [
                _series("dispatch_agent_leader", "0x20", **a),
                _series("dispatch_agent_leader", "0x20", **b),
                {"series": 'dispatch_agent_leader{namespace="elsewhere",pod="x"}', "values": "1x20"},
            ],
            _expected(leader),
        ),
        _case(
            leader,
            "15m",
            [_series("dispatch_agent_leader", "0x20", **a), _series("dispatch_agent_leader", "1x20", **b)],
        ),
        _case(leader, "15m", [], _expected(leader)),  # no agent scraped at all
        # The served certificate has 6 days left (fires), the CA 30 (quiet).
        _case(
            cert,
            "2h",
            [
                _series("dispatch_webhook_certificate_expiration_timestamp_seconds", f"{6 * 86400}x150", **expiry_6d),
                _series("dispatch_certs_ca_expiration_timestamp_seconds", f"{30 * 86400}x150", **a, container="certs"),
            ],
            cert_expected,
        ),
        _case(
            certs,
            "20m",
            [
                _series("dispatch_certs_pass_failures_total", "0+1x30", **a),
                _series("dispatch_certs_pass_failures_total", "0x30", **b),
            ],
            _expected(certs, namespace=NS, **a),
        ),
        _case(
            errors,
            "20m",
            [_series("dispatch_agent_reconcile_errors_total", "0+1x30", **a, error="KubeError")],
            _expected(errors, namespace=NS, **a, error="KubeError"),
        ),
        # Errors restart the Workloads watch; a resource not served ("absent") restarts nodes' as often: quiet.
        _case(
            watch,
            "30m",
            [
                _series("dispatch_agent_watch_restarts_total", "0+1x40", **a, resource="workloads", why="error"),
                _series("dispatch_agent_watch_restarts_total", "0+5x40", **a, resource="nodes", why="absent"),
            ],
            _expected(watch, namespace=NS, **a, resource="workloads"),
        ),
        # 1 % of reviews under 2.5 s, the rest under 5 s: p99 above half the timeout.
        _case(
            slow,
            "20m",
            [
                _series(bucket, "0+1x30", **a, endpoint="validate", le="0.0005"),
                _series(bucket, "0+1x30", **a, endpoint="validate", le="2.5"),
                _series(bucket, "0+100x30", **a, endpoint="validate", le="5.0"),
                _series(bucket, "0+100x30", **a, endpoint="validate", le="+Inf"),
            ],
            _expected(slow, namespace=NS),
        ),
        _case(
            slow,
            "20m",
            [_series(bucket, "0+100x30", **a, endpoint="validate", le=le) for le in ("0.0005", "2.5", "5.0", "+Inf")],
        ),
        # A hold growing a minute a minute passes 1800 s at 31m; quiet at 30m.
        _case(
            held,
            "33m",
            [_series("dispatch_agent_longest_held_check_seconds", "0+60x40", **a)],
            _expected(held, namespace=NS, **a),
        ),
        _case(held, "30m", [_series("dispatch_agent_longest_held_check_seconds", "0+60x40", **a)]),
    ]
    tests = tmp_path / "tests.yaml"
    tests.write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": cases}))
    tool = promtool()
    check = subprocess.run(
        [tool, "check", "rules", tmp_path / "rules.yaml"], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run([tool, "test", "rules", tests], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
