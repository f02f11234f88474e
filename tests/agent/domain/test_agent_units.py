"""Pure pieces of the agent's shell: config, the Active condition's patch, the watch index, Event bodies,
which checks are due, and the agent's metrics."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from agent.config import AgentConfig, ConfigError, load_config, qualified_name_problem
from agent.constants import ACTIVE_MESSAGE, EVENT_COMPONENT, EVENT_MESSAGE_MAX
from agent.domain.admission_check import AdmissionCheckCache, active_patch
from agent.domain.workload import check_state_apply, keep_our_entries
from agent.gate.index import WorkloadIndex, hint_of, key_of
from agent.gate.reconcile import WorkloadKey, due_checks
from agent.runtime.events import event_body
from agent.runtime.metrics import AgentMetrics
from harness.fixtures import trainjob
from tests.agent.domain.test_gate import CHECK, workload
from tests.webhook.test_protocol import parse_exposition

NOW = "2026-11-29T10:00:00Z"

# -- config ---------------------------------------------------------------------------------------


def test_config_defaults_are_the_spec_s():
    config = load_config(None)
    assert (config.lease_namespace, config.lease_name) == ("dispatch-system", "dispatch-admission")
    assert config.node_loss_taints == ()
    assert (config.workers, config.health_port) == (16, 8081)


def test_config_file(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text("leaseNamespace: ops\nnodeLossTaints: [example.com/spot-reclaimed, lost]\nworkers: 4\n")
    config = load_config(path)
    assert config.lease_namespace == "ops"
    assert config.node_loss_taints == ("example.com/spot-reclaimed", "lost")
    assert config.workers == 4


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("nodeLossTaints: [Bad Key]\n", "nodeLossTaints: Value error, [0] 'Bad Key' is not a taint key"),
        ("nodeLossTaints: [a/b/c]\n", "has more than one '/'"),
        ("nodeLossTaints: [/x]\n", "the prefix before '/' is empty"),
        ("nodeLossTaints: [Example.com/x]\n", "prefix 'Example.com' is not a DNS subdomain"),
        ("nodeLossTaints: [x, x]\n", "lists a taint key twice"),
        ("leaseNamespace: Not_A_Namespace\n", "leaseNamespace: Value error"),
        ("leaseName: ''\n", "leaseName: Value error"),
        ("workers: 0\n", "workers: Input should be greater than or equal to 1"),
        ("healthPort: 70000\n", "healthPort: Input should be less than or equal to 65535"),
        ("leaseNamespce: x\n", "leaseNamespce: Extra inputs are not permitted"),
    ],
)
def test_config_errors_name_the_key(tmp_path, text, says):
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(says)):
        load_config(path)


@pytest.mark.parametrize(
    ("key", "ok"),
    [("node.kubernetes.io/unreachable", True), ("lost", True), ("a_b.c-d", True), ("x" * 63, True),
     ("x" * 64, False), ("-x", False), ("x-", False), ("example.com/", False), ("a b", False), ("", False)],
)  # fmt: skip
def test_qualified_names(key, ok):
    assert (qualified_name_problem(key) is None) is ok


def test_config_lease_timings(tmp_path):
    assert (load_config(None).lease_duration_seconds, load_config(None).renew_deadline_seconds) == (15, 10.0)
    path = tmp_path / "agent.yaml"
    path.write_text(
        "leaseDurationSeconds: 60\nrenewDeadlineSeconds: 40\nrenewPeriodSeconds: 10\nretryPeriodSeconds: 5\n"
    )
    config = load_config(path)
    assert (config.lease_duration_seconds, config.renew_deadline_seconds) == (60, 40.0)
    assert (config.renew_period_seconds, config.retry_period_seconds) == (10.0, 5.0)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("leaseDurationSeconds: 10\n", "renewDeadlineSeconds (10) must be less than leaseDurationSeconds (10)"),
        ("retryPeriodSeconds: 10\n", "retryPeriodSeconds (10) must be less than renewDeadlineSeconds (10)"),
        ("renewPeriodSeconds: 12\n", "renewPeriodSeconds (12) must be less than renewDeadlineSeconds (10)"),
        ("renewDeadlineSeconds: 0\n", "renewDeadlineSeconds: Input should be greater than 0"),
    ],
)
def test_config_refuses_lease_timings_that_let_two_lead(tmp_path, text, says):
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(says)):
        load_config(path)


def test_config_is_frozen():
    with pytest.raises(ValueError, match="frozen"):
        AgentConfig().workers = 3  # type: ignore[misc]


# -- the Active condition -------------------------------------------------------------------------


def ac(conditions=None, *, generation=2, controller="dispatch.phpboyscout.uk/admission"):
    obj = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "AdmissionCheck",
        "metadata": {"name": "dispatch", "uid": "ac-uid", "generation": generation, "resourceVersion": "7"},
        "spec": {"controllerName": controller},
    }
    if conditions is not None:
        obj["status"] = {"conditions": conditions}
    return obj


def active(status="True", generation=2, since="2026-11-01T00:00:00Z"):
    return {"type": "Active", "status": status, "reason": "Active", "message": ACTIVE_MESSAGE,
            "observedGeneration": generation, "lastTransitionTime": since}  # fmt: skip


def test_active_is_added_with_uid_and_controller_tests_and_no_resource_version():
    ops = active_patch(ac(), NOW)
    assert ops[:2] == [
        {"op": "test", "path": "/metadata/uid", "value": "ac-uid"},
        {"op": "test", "path": "/spec/controllerName", "value": "dispatch.phpboyscout.uk/admission"},
    ]
    assert ops[2] == {"op": "add", "path": "/status", "value": {"conditions": [active(since=NOW)]}}
    assert all("resourceVersion" not in op["path"] for op in ops)


def test_active_is_appended_next_to_others_conditions():
    theirs = {"type": "Other", "status": "False", "reason": "X", "message": "", "lastTransitionTime": NOW}
    assert active_patch(ac([theirs]), NOW)[2] == {
        "op": "add",
        "path": "/status/conditions/-",
        "value": active(since=NOW),
    }


def test_active_false_or_an_old_generation_is_replaced_in_place():
    theirs = {"type": "Other", "status": "False", "reason": "X", "message": "", "lastTransitionTime": NOW}
    ops = active_patch(ac([theirs, active(status="False")]), NOW)
    assert ops[2:] == [
        {"op": "test", "path": "/status/conditions/1/type", "value": "Active"},
        {"op": "replace", "path": "/status/conditions/1", "value": active(since=NOW)},  # the transition moves
    ]
    ops = active_patch(ac([active(generation=1)]), NOW)
    assert ops[-1]["value"] == active(since="2026-11-01T00:00:00Z")  # still True: the transition stays


def test_active_already_true_for_this_generation_needs_no_write():
    assert active_patch(ac([active()]), NOW) is None


def test_the_cache_keeps_only_our_checks():
    cache = AdmissionCheckCache()
    assert not cache.synced
    assert cache.replace([ac(), {**ac(controller="other/x"), "metadata": {"name": "theirs"}}]) == {"dispatch"}
    assert cache.synced
    assert cache.ours() == frozenset({"dispatch"})
    assert cache.event("MODIFIED", ac()) is False  # unchanged
    assert cache.event("MODIFIED", ac(generation=3)) is True
    assert cache.event("DELETED", ac()) is False
    assert cache.ours() == frozenset()


# -- the Workload index ---------------------------------------------------------------------------


def test_hint_says_which_checks_are_due_and_whose_trainjob():
    hint = hint_of(workload())
    assert hint.trainjob == ("team-a", "dj-01arz3ndektsv4rrffq69g5fav-s3")
    assert hint.due == frozenset({CHECK})  # "another-check" is Ready
    assert hint_of(workload(reserved=False)).due == frozenset()
    assert hint_of(workload(evicted=True)).due == frozenset()
    assert hint_of(workload(owner={"kind": "Job", "apiVersion": "batch/v1", "name": "j", "uid": "u",
                                   "controller": True})).trainjob is None  # fmt: skip


def test_index_follows_the_trainjob_and_forgets():
    index = WorkloadIndex()
    wl = workload()
    key = key_of(wl)
    index.put(key, hint_of(wl))
    assert index.by_trainjob[("team-a", "dj-01arz3ndektsv4rrffq69g5fav-s3")] == key
    assert index.due(key, frozenset({CHECK}))
    assert not index.due(key, frozenset({"someone-elses"}))
    assert index.due_keys(frozenset({CHECK})) == [key]
    index.put(key, hint_of(workload(state="Ready")))
    assert not index.due(key, frozenset({CHECK}))
    index.remove(key)
    assert index.hints == {}
    assert index.by_trainjob == {}


def test_due_checks_are_ours_and_actionable_only():
    wl = workload()
    assert due_checks(wl, frozenset({CHECK})) == [CHECK]
    assert due_checks(wl, frozenset({"another-check"})) == []  # Ready
    assert due_checks(workload(active=False), frozenset({CHECK})) == []


# -- Events ---------------------------------------------------------------------------------------


def test_event_body_pins_the_trainjob_and_bounds_the_message():
    tj = trainjob()
    body = event_body(tj, reason="Foreign", message="x" * 5000, warning=True, instance="pod-1",
                      now=dt.datetime(2026, 11, 29, 10, 0, tzinfo=dt.UTC))  # fmt: skip
    assert body["involvedObject"] == {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "name": tj["metadata"]["name"],
        "namespace": "team-a",
        "uid": "tj-uid",
        "resourceVersion": "100",
    }
    assert body["metadata"]["namespace"] == "team-a"
    assert body["metadata"]["name"].startswith(tj["metadata"]["name"] + ".")
    assert body["source"] == {"component": EVENT_COMPONENT}
    assert (body["type"], body["reason"], body["reportingInstance"]) == ("Warning", "Foreign", "pod-1")
    assert len(body["message"]) == EVENT_MESSAGE_MAX
    assert body["message"].endswith("(truncated)")
    assert body["firstTimestamp"] == body["lastTimestamp"] == NOW


def test_our_other_entries_are_reapplied_as_read_and_nobody_elses():
    wl = workload()
    wl["status"]["admissionChecks"].append(
        {"name": "zz-ours-too", "state": "Ready", "message": "m", "lastTransitionTime": NOW, "retryCount": 1}
    )
    body = check_state_apply(wl, CHECK, "Ready", "raised", NOW)
    kept = keep_our_entries(body, wl, frozenset({CHECK, "zz-ours-too"}))
    assert kept["status"]["admissionChecks"] == [
        *body["status"]["admissionChecks"],
        {"name": "zz-ours-too", "state": "Ready", "message": "m", "lastTransitionTime": NOW},  # never retryCount
    ]
    assert kept["metadata"] == body["metadata"]  # the same preconditions
    assert keep_our_entries(body, wl, frozenset({CHECK})) == body  # "another-check" is not ours


def test_workload_key_prints_as_namespace_slash_name():
    assert str(WorkloadKey("ns", "wl")) == "ns/wl"


# -- Prometheus (the primitives: tests/serving/test_prometheus.py) --------------------------------------


def test_agent_metrics_render_every_family_even_when_empty():
    text = AgentMetrics().render()
    for family in ("decisions_total", "reconcile_duration_seconds", "quota_reserved_to_ready_seconds",
                   "write_conflicts_total", "foreign_reports_total", "leader", "watch_restarts_total",
                   "held_checks", "longest_held_check_seconds"):  # fmt: skip
        assert f"# TYPE dispatch_agent_{family} " in text
    assert parse_exposition(text)["dispatch_agent_leader", frozenset()] == 0


def test_the_longest_hold_is_read_at_every_scrape():
    metrics, since = AgentMetrics(), {"a": 100.0, "b": 160.0}
    metrics.follow_holds(lambda: list(since.values()), clock=lambda: 200.0)
    samples = parse_exposition(metrics.render())
    assert samples["dispatch_agent_held_checks", frozenset()] == 2
    assert samples["dispatch_agent_longest_held_check_seconds", frozenset()] == 100
    since.clear()
    samples = parse_exposition(metrics.render())
    assert samples["dispatch_agent_held_checks", frozenset()] == 0
    assert samples["dispatch_agent_longest_held_check_seconds", frozenset()] == 0
