"""The chart's Grafana dashboard (charts/dispatch-k8s/dashboards/dispatch-k8s.json, docs/metrics.md "The dashboard").

Every query in it is parsed by a real PromQL parser (promql-parser, the Rust parser GreptimeDB uses, pinned in
requirements/lock.txt) and walked: each metric it selects is one the servers' registries emit, with the suffix of
its type, each label it names is one that metric carries (or a label Prometheus gives every target), and each
Grafana variable it uses is defined. The same queries then go through `promtool check rules`, Prometheus's own
parser at the version of controlplane/promtool.sh, and a few are evaluated by `promtool test rules` on series
named as the servers emit them. And the ConfigMap that carries the dashboard renders as Grafana's sidecar
expects it.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

from harness.binaries import BUILD_WAIT_SECONDS
from tests.charts.helm import CHART, run_helm, template
from tests.charts.test_prometheusrule import promtool
from tests.docs.test_metrics_docs import registries

DASHBOARD = CHART / "dashboards" / "dispatch-k8s.json"
TARGET_LABELS = frozenset({"namespace", "pod", "container", "service", "endpoint", "job", "instance"})
"""What Prometheus (and the ServiceMonitor, through the Prometheus Operator) puts on every series it scrapes."""
GRAFANA_VARIABLES = {"$__rate_interval": "2m", "$__interval": "30s", "$__range": "6h"}
"""Grafana's own variables the queries may use, with a value of their kind for the parsers."""
EXAMPLES = {"namespace": "dispatch-system", "pod": ".*", "datasource": "prometheus"}
"""A value of each dashboard variable, in place of `$name` before parsing."""
NOT_ON_THE_DASHBOARD = {
    "python_info": "the interpreter, not the service",
    "python_gc_objects_collected_total": "the garbage collector's inner workings",
    "python_gc_objects_uncollectable_total": "the garbage collector's inner workings",
    "python_gc_collections_total": "the garbage collector's inner workings",
    "process_virtual_memory_bytes": "resident memory is what the limit applies to",
    "process_max_fds": "named in the open descriptors panel's description; a fixed limit",
}
"""Metrics the servers emit that no panel shows, each with why; any other metric must be on the dashboard."""


@dataclass(frozen=True)
class Family:
    type: str
    labels: frozenset[str]


def families() -> dict[str, Family]:
    """Every series name a query may select, as the servers' registries (tests/docs) emit it, with its labels."""
    found: dict[str, Family] = {}
    for reg in registries().values():
        # The collectors themselves, for the label names a metric declares: a family with no child yet has no sample.
        for collector in list(reg._collector_to_names):
            declared = set(getattr(collector, "_labelnames", None) or ())
            for family in collector.collect():
                labels = frozenset(declared.union(*(s.labels for s in family.samples)) - {"le"})
                if family.type == "counter":
                    found[family.name + "_total"] = Family("counter", labels)
                elif family.type == "histogram":
                    found[family.name + "_bucket"] = Family("histogram", labels | {"le"})
                    found[family.name + "_sum"] = Family("histogram", labels)
                    found[family.name + "_count"] = Family("histogram", labels)
                else:
                    found[family.name] = Family(family.type, labels)
    return found


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row keeps its panels inside it


@dataclass(frozen=True)
class Query:
    where: str
    expr: str
    legend: str = ""


def queries(board: dict[str, Any]) -> list[Query]:
    """Every PromQL expression of the dashboard: each panel's targets and each query variable's label_values."""
    found = [
        Query(f"panel {p['id']} {p['title']!r} {t['refId']}", t["expr"], t.get("legendFormat", ""))
        for p in panels(board)
        for t in p.get("targets", [])
    ]
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            m = re.fullmatch(r"label_values\((.+), *(\w+)\)", var["query"]["query"])
            assert m, f"variable {var['name']}: only label_values(<selector>, <label>) is used here"
            found.append(Query(f"variable {var['name']}", m[1], "{{" + m[2] + "}}"))
    return found


def concrete(expr: str, defined: set[str]) -> str:
    """The expression with Grafana's variables replaced by values of their kind; an undefined variable fails."""
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    for name in re.findall(r"\$\{?(\w+)\}?", expr):
        assert name in defined, f"${name} is no variable of the dashboard"
    return re.sub(r"\$\{?(\w+)\}?", lambda m: EXAMPLES[m[1]], expr)


def selectors(node: Any) -> list[promql_parser.VectorSelector]:
    found: list[promql_parser.VectorSelector] = []
    promql_parser.walk(node, lambda n: found.append(n) if isinstance(n, promql_parser.VectorSelector) else None)
    return found


def selected(selector: promql_parser.VectorSelector, known: dict[str, Family]) -> set[str]:
    """The series names a selector selects: its name, or those its __name__ matchers match among the known."""
    if selector.name:
        return {selector.name}
    (regex,) = [m.value for m in selector.matchers.matchers if m.name == "__name__"]
    return {n for n in known if re.fullmatch(regex, n)}


def labels_of(node: Any, known: dict[str, Family]) -> set[str]:
    """Every label a series under ``node`` may carry."""
    labels = set(TARGET_LABELS)
    for s in selectors(node):
        for name in selected(s, known) & known.keys():
            labels |= known[name].labels
    return labels


def check(query: Query, known: dict[str, Family]) -> list[str]:
    """What is wrong with one query: an unknown metric, a wrong suffix, an unknown label."""
    problems: list[str] = []
    ast = promql_parser.parse(query.expr)
    for s in selectors(ast):
        names = selected(s, known)
        if not names:
            problems.append(f"{s}: selects no metric the servers emit")
        for name in names:
            if name not in known:
                problems.append(f"{name}: emitted by no server (or not with this suffix: counters end _total, "
                                f"histograms are read by _bucket, _sum and _count)")  # fmt: skip
                continue
            allowed = known[name].labels | TARGET_LABELS | {"__name__"}
            problems += [f"{name} has no label {m.name!r}" for m in s.matchers.matchers if m.name not in allowed]

    def grouping(node: Any) -> None:
        if isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            missing = set(node.modifier.labels) - labels_of(node.expr, known)
            problems.extend(f"{node.op} by/without {label!r}: no series under it carries it" for label in missing)

    promql_parser.walk(ast, grouping)
    legend = set(re.findall(r"\{\{ *(\w+) *\}\}", query.legend))
    problems += [f"legend {{{{{label}}}}}: no series carries it" for label in legend - labels_of(ast, known)]
    return problems


def test_every_query_parses_and_names_only_metrics_and_labels_the_servers_emit():
    board = dashboard()
    defined = {v["name"] for v in board["templating"]["list"]}
    assert defined == set(EXAMPLES), "a new variable needs its example value here"
    known = families()
    found = queries(board)
    assert len(found) > 30
    problems: list[str] = []
    for q in found:
        try:
            problems += [f"{q.where}: {p}" for p in check(Query(q.where, concrete(q.expr, defined), q.legend), known)]
        except ValueError as exc:  # promql-parser's parse error
            problems.append(f"{q.where}: does not parse: {exc}\n    {q.expr}")
        except AssertionError as exc:  # a variable the dashboard does not define
            problems.append(f"{q.where}: {exc}")
    assert not problems, "\n".join(problems)


def test_the_checks_catch_what_they_are_for():
    known = families()
    bad = {
        "rate(dispatch_agent_decision_total[5m])": "emitted by no server",
        "dispatch_agent_decisions": "emitted by no server",  # a counter without its _total
        'dispatch_agent_leader{role="leader"}': "has no label 'role'",
        "sum by (rule) (dispatch_agent_decisions_total)": "no series under it carries it",
        '{__name__=~"dispatch_nothing_.*"}': "selects no metric",
    }
    for expr, problem in bad.items():
        assert any(problem in p for p in check(Query("test", expr), known)), expr
    assert check(Query("test", "sum by (action) (rate(dispatch_agent_decisions_total[5m]))", "{{actoin}}"), known)
    with pytest.raises(ValueError, match="unclosed left parenthesis"):
        promql_parser.parse("rate(dispatch_agent_decisions_total[5m]")
    with pytest.raises(AssertionError, match="no variable"):
        concrete('dispatch_agent_leader{namespace="$namespaces"}', set(EXAMPLES))


def test_every_metric_of_the_servers_is_on_the_dashboard_or_said_why_not():
    known = families()
    board = dashboard()
    defined = {v["name"] for v in board["templating"]["list"]}
    shown = {
        name
        for q in queries(board)
        for s in selectors(promql_parser.parse(concrete(q.expr, defined)))
        for name in selected(s, known)
    }
    # One name per metric, as docs/metrics.md lists them: a histogram by its _bucket.
    metrics = {n for n, f in known.items() if f.type != "histogram" or n.endswith("_bucket")}
    shown_metrics = {
        n for n in metrics if n in shown or (n.endswith("_bucket") and n[: -len("_bucket")] + "_count" in shown)
    }
    assert metrics - shown_metrics - set(NOT_ON_THE_DASHBOARD) == set(), "emitted, but on no panel"
    assert set(NOT_ON_THE_DASHBOARD) <= metrics - shown_metrics, "listed as not shown, but shown (or not emitted)"


def test_the_dashboard_is_well_formed_for_grafana():
    board = dashboard()
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    assert board["uid"] == "dispatch-k8s"
    for p in panels(board):
        x, w = p["gridPos"]["x"], p["gridPos"]["w"]
        assert x >= 0, f"panel {p['id']} leaves the grid"
        assert x + w <= 24, f"panel {p['id']} leaves the grid"
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["description"], f"panel {p['title']!r} says what it shows"
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"], p["title"]
    (source,) = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
    assert source["query"] == "prometheus"


@pytest.mark.timeout(BUILD_WAIT_SECONDS + 120)  # on a fresh machine promtool is still being built beside the tests
def test_prometheus_own_parser_accepts_every_query(tmp_path: Path):
    board = dashboard()
    defined = {v["name"] for v in board["templating"]["list"]}
    rules = [
        {"record": f"dashboard:query_{i}", "expr": concrete(q.expr, defined)} for i, q in enumerate(queries(board))
    ]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    run = subprocess.run(
        [promtool(), "check", "rules", tmp_path / "rules.yaml"], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr


def _expr(board: dict[str, Any], title: str) -> str:
    """The first query of the panel titled ``title``, as Prometheus would be sent it."""
    (panel,) = [p for p in panels(board) if p["title"] == title]
    return concrete(panel["targets"][0]["expr"], {v["name"] for v in board["templating"]["list"]})


def _series(name: str, values: str, **labels: str) -> dict[str, str]:
    selector = ",".join(f'{k}="{v}"' for k, v in {"namespace": EXAMPLES["namespace"], **labels}.items())
    return {"series": f"{name}{{{selector}}}", "values": values}


@pytest.mark.timeout(BUILD_WAIT_SECONDS + 120)
def test_promtool_evaluates_the_joined_and_summed_panels_on_the_emitted_series(tmp_path: Path):
    """Some panels' queries, evaluated on series named and labelled as the servers emit them and the
    ServiceMonitor scrapes them (three processes a pod, each its own instance): the joins find one component per
    process, the sums and the certificate's time left come out as the panel means them."""
    board = dashboard()
    pod = {"pod": "dispatch-k8s-a", "version": "0.1.0", "python_version": "3.11.7"}
    processes = [("webhook", "10.0.0.5:9443", 100), ("agent", "10.0.0.5:8081", 200), ("certs", "10.0.0.5:8082", 50)]
    series = [
        *(_series("dispatch_build_info", "1x15", component=c, instance=i, **pod) for c, i, _ in processes),
        *(_series("process_resident_memory_bytes", f"{rss}x15", pod=pod["pod"], instance=i) for _, i, rss in processes),
        # Another workload of the namespace, which reports no dispatch_build_info: not on the panel.
        _series("process_resident_memory_bytes", "999x15", pod="other", instance="10.0.0.9:8080"),
        _series("dispatch_agent_leader", "1x15", pod="dispatch-k8s-a"),
        _series("dispatch_agent_leader", "0x15", pod="dispatch-k8s-b"),
        # 60 denials a minute by one rule, and allowed reviews that are no denial.
        _series(
            "dispatch_webhook_reviews_total",
            "0+60x15",
            pod="dispatch-k8s-a",
            endpoint="validate",
            resource="trainjobs",
            operation="CREATE",
            verdict="denied",
            rule="identity",
        ),
        _series(
            "dispatch_webhook_reviews_total",
            "0+600x15",
            pod="dispatch-k8s-a",
            endpoint="validate",
            resource="trainjobs",
            operation="CREATE",
            verdict="allowed",
            rule="allow",
        ),
        _series("dispatch_webhook_certificate_expiration_timestamp_seconds", "1000000x15", pod="dispatch-k8s-a"),
        _series("dispatch_certs_ca_expiration_timestamp_seconds", "2000000x15", pod="dispatch-k8s-a"),
    ]
    at = "10m"  # 600 s after the series begin
    cases = [
        (
            "Resident memory, by pod and component",
            [({"pod": pod["pod"], "component": c}, rss) for c, _, rss in processes],
        ),
        ("Gate leader", [({}, 1)]),
        ("Denials, by rule", [({"rule": "identity", "resource": "trainjobs"}, 1)]),
        ("First certificate to expire", [({}, 1000000 - 600)]),
    ]
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": _expr(board, title),
                        "eval_time": at,
                        "exp_samples": [
                            {"labels": "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}", "value": value}
                            for labels, value in samples
                        ],
                    }
                    for title, samples in cases
                ],
            }
        ],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    run = subprocess.run([promtool(), "test", "rules", "tests.yaml"], capture_output=True, text=True, check=False,
                         cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr


# --- the ConfigMap ------------------------------------------------------------------------------------------


def _dashboard_configmaps(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [d for d in template(values).of("ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]


def test_the_configmap_is_opt_in_and_carries_the_dashboard_with_the_sidecars_label():
    assert _dashboard_configmaps() == []
    (cm,) = _dashboard_configmaps({"dashboard": {"enabled": True}})
    assert cm["metadata"]["namespace"] == "dispatch-system"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["labels"]["app.kubernetes.io/name"] == "dispatch-k8s"
    assert "annotations" not in cm["metadata"]
    (text,) = cm["data"].values()
    assert json.loads(text) == dashboard()


def test_the_configmap_goes_where_the_sidecar_looks_with_its_labels_and_folder():
    values = {
        "dashboard": {
            "enabled": True,
            "namespace": "monitoring",
            "labels": {"grafana_dashboard": None, "grafana": "dashboards"},
            "annotations": {"grafana_folder": "dispatch"},
        },
        "commonLabels": {"team": "ml-platform"},
    }
    (cm,) = _dashboard_configmaps(values)
    meta = cm["metadata"]
    assert meta["namespace"] == "monitoring"
    assert "grafana_dashboard" not in meta["labels"]
    assert meta["labels"]["grafana"] == "dashboards"
    assert meta["labels"]["team"] == "ml-platform"
    assert meta["annotations"] == {"grafana_folder": "dispatch"}


def test_helm_lint_is_clean_with_the_dashboard(tmp_path: Path):
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"dashboard": {"enabled": True}}))
    out = run_helm("lint", "--strict", str(CHART), "--namespace", "dispatch-system", "--values", str(values)).stdout
    assert "0 chart(s) failed" in out
    assert "[WARNING]" not in out, out
