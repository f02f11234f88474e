"""Node-loss classification: one test row per row of the decision table (docs/nodeloss.md), then properties."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.domain.node_loss import Assessment, Classification, PodRecord, Verdict, assess, classify, classify_record
from contract.keys import TAINT_NOT_READY, TAINT_OUT_OF_SERVICE, TAINT_UNREACHABLE
from contract.objects import dig

SITE_TAINT = "example.com/node-lost"
T0 = "2026-08-18T10:00:00Z"
T1 = "2026-08-18T10:05:00Z"


# -- Objects shaped as the API returns them -------------------------------------------------------

_STATES = {
    "running": {"running": {"startedAt": T0}},
    "terminated": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": T1}},
    "error": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": T1}},
    "waiting": {"waiting": {"reason": "ContainerCreating"}},
}


def pod(
    name: str = "dj-x-s1-node-0-0-abcde",
    *,
    node: str | None = "n1",
    phase: str | None = "Running",
    containers: tuple[str, ...] = ("running",),
    deleting: str | None = None,
    grace: int | None = None,
    dt: str | None = None,
    reason: str | None = None,
    phase_manager: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = deleting
        meta["deletionGracePeriodSeconds"] = 30 if grace is None else grace
    if phase_manager:
        meta["managedFields"] = [
            {"manager": "kubelet", "operation": "Update", "subresource": "status", "fieldsV1": {"f:status": {}}},
            {
                "manager": phase_manager,
                "operation": "Update",
                "subresource": "status",
                "fieldsV1": {"f:status": {"f:phase": {}}},
            },
        ]
    spec: dict[str, Any] = {"containers": [{"name": "node", "image": "pytorch"}]}
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {
        "conditions": [{"type": "Ready", "status": "True" if phase == "Running" else "False"}],
        "containerStatuses": [{"name": f"c{i}", "state": copy.deepcopy(_STATES[s])} for i, s in enumerate(containers)],
    }
    if phase:
        status["phase"] = phase
    if reason:
        status["reason"] = reason
    if dt:
        status["conditions"].append(
            {"type": "DisruptionTarget", "status": "True", "reason": dt, "lastTransitionTime": T1}
        )
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def taint(key: str, effect: str = "NoExecute", added: str | None = T0) -> dict[str, Any]:
    t: dict[str, Any] = {"key": key, "effect": effect}
    if added:
        t["timeAdded"] = added
    return t


def node(name: str = "n1", *, ready: str | None = "True", taints: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    conditions = [{"type": "MemoryPressure", "status": "False"}]
    if ready is not None:
        conditions.append(
            {
                "type": "Ready",
                "status": ready,
                "reason": {"True": "KubeletReady", "False": "KubeletNotReady"}.get(ready, "NodeStatusUnknown"),
                "lastHeartbeatTime": T0,
                "lastTransitionTime": T1,
            }
        )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {"taints": list(taints)},
        "status": {"conditions": conditions},
    }


LOST = node(ready="Unknown", taints=(taint(TAINT_UNREACHABLE, "NoSchedule"), taint(TAINT_UNREACHABLE)))
NOT_READY = node(ready="False", taints=(taint(TAINT_NOT_READY, "NoSchedule"), taint(TAINT_NOT_READY)))
OOS = node(ready="Unknown", taints=(taint(TAINT_UNREACHABLE), taint(TAINT_OUT_OF_SERVICE, added=T1)))
OOS_NO_SCHEDULE = node(ready=None, taints=(taint(TAINT_OUT_OF_SERVICE, "NoSchedule"),))
ABSENT = None
# What kubernetes_asyncio's V1Pod.to_dict() gives: snake_case, and read as JSON it would look unbound.
SNAKE_POD = {
    "metadata": {"name": "p", "creation_timestamp": T0, "deletion_timestamp": T1},
    "spec": {"node_name": "n1", "containers": [{"name": "node"}]},
    "status": {"phase": "Running", "container_statuses": [{"name": "node", "state": {"running": {}}}]},
}

# -- The decision table ---------------------------------------------------------------------------
# id, pod, node, keyword arguments, verdict, evidence the reason must name

# fmt: off
ROWS: list[tuple[str, Any, Any, dict[str, Any], Verdict, tuple[str, ...]]] = [
    # Terminal phase written by the kubelet: gone, whatever the node.
    ("succeeded", pod(phase="Succeeded", containers=("terminated",)), node(), {}, Verdict.ENDED, ("phase Succeeded", "kubelet")),
    ("failed-app-error", pod(phase="Failed", containers=("error",)), node(), {}, Verdict.ENDED, ("phase Failed",)),
    ("failed-never-started", pod(phase="Failed", containers=(), reason="OutOfcpu"), node(), {}, Verdict.ENDED, ("reason OutOfcpu",)),
    ("kubelet-eviction", pod(phase="Failed", containers=("error",), reason="Evicted", dt="TerminationByKubelet"), node(), {}, Verdict.ENDED, ("TerminationByKubelet", "Evicted")),
    ("succeeded-on-lost-node", pod(phase="Succeeded", containers=("terminated",)), LOST, {}, Verdict.ENDED, ("phase Succeeded",)),
    ("gone-after-graceful-delete", pod(phase="Failed", containers=("error",), deleting=T1), node(), {"gone": True, "final": True}, Verdict.ENDED, ("gone from the API (final state)",)),
    ("ended-waiting-containers", pod(phase="Failed", containers=("waiting",), phase_manager="kubelet"), node(), {}, Verdict.ENDED, ()),
    # A terminal phase not written by the kubelet counts for nothing.
    ("failed-by-podgc-orphan", pod(phase="Failed", dt="DeletionByPodGC", deleting=T1, grace=0), ABSENT, {}, Verdict.NODE_LOST, ("DeletionByPodGC", "absent")),
    ("failed-containers-running", pod(phase="Failed", containers=("running",)), node(), {}, Verdict.RUNNING, ("still reported running",)),
    ("failed-by-controller-manager", pod(phase="Failed", containers=("waiting",), phase_manager="kube-controller-manager"), LOST, {}, Verdict.NODE_LOST, ("written by kube-controller-manager",)),
    # Never bound.
    ("pending-unbound", pod(node=None, phase="Pending", containers=()), None, {}, Verdict.RUNNING, ("not bound",)),
    ("unbound-deleting", pod(node=None, phase="Pending", containers=(), deleting=T1), None, {}, Verdict.NOT_SCHEDULED, ("cannot be bound",)),
    ("unbound-gone-final", pod(node=None, phase="Pending", containers=()), None, {"gone": True, "final": True}, Verdict.NOT_SCHEDULED, ("without ever being bound",)),
    ("unbound-gone-old-view", pod(node=None, phase="Pending", containers=()), None, {"gone": True}, Verdict.DELETED, ("may have been bound",)),
    ("unbound-gone-old-view-deleting", pod(node=None, phase="Pending", containers=(), deleting=T1), None, {"gone": True}, Verdict.NOT_SCHEDULED, ()),
    # Healthy node.
    ("running", pod(), node(), {}, Verdict.RUNNING, ("phase Running", "Ready=True")),
    ("deleting-healthy-node", pod(deleting=T1), node(), {}, Verdict.RUNNING, ("deletionTimestamp", "until it is gone or terminal")),
    ("terminated-by-kubelet-not-yet-failed", pod(dt="TerminationByKubelet", deleting=T1), node(), {}, Verdict.RUNNING, ("TerminationByKubelet",)),
    ("preempted", pod(dt="PreemptionByScheduler", deleting=T1), node(), {}, Verdict.PREEMPTED, ("PreemptionByScheduler",)),
    ("evicted-api", pod(dt="EvictionByEvictionAPI", deleting=T1), node(), {}, Verdict.EVICTED, ("EvictionByEvictionAPI",)),
    ("taint-evicted-not-node-loss", pod(dt="DeletionByTaintManager", deleting=T1), node(taints=(taint("dedicated", added=T0),)), {}, Verdict.TAINT_EVICTED, ("dedicated:NoExecute added " + T0,)),
    ("taint-evicted-taint-gone", pod(dt="DeletionByTaintManager", deleting=T1), node(), {}, Verdict.TAINT_EVICTED, ("no NoExecute taint remains",)),
    ("podgc-condition-node-recreated", pod(dt="DeletionByPodGC", deleting=T1, grace=0), node(), {}, Verdict.NODE_LOST, ("PodGC found its Node absent",)),
    ("gone-healthy-node-force-delete", pod(deleting=T1, grace=0), node(), {"gone": True, "final": True}, Verdict.DELETED, ("force delete",)),
    # Node lost: may still run.
    ("node-unknown-not-evicted", pod(), node(ready="Unknown", taints=(taint(TAINT_UNREACHABLE, "NoSchedule"),)), {}, Verdict.NODE_LOST, ("Ready=Unknown", TAINT_UNREACHABLE + ":NoSchedule added " + T0)),
    ("node-unknown-evicted-terminating", pod(dt="DeletionByTaintManager", deleting=T1), LOST, {}, Verdict.NODE_LOST, ("DeletionByTaintManager", TAINT_UNREACHABLE + ":NoExecute", "NodeStatusUnknown")),
    ("node-not-ready-evicted", pod(dt="DeletionByTaintManager", deleting=T1), NOT_READY, {}, Verdict.NODE_LOST, ("Ready=False", TAINT_NOT_READY)),
    ("full-disruption-no-taints", pod(), node(ready="Unknown"), {}, Verdict.NODE_LOST, ("Ready=Unknown",)),
    ("site-taint-ready-node", pod(dt="DeletionByTaintManager", deleting=T1), node(taints=(taint(SITE_TAINT),)), {"node_loss_taints": [SITE_TAINT]}, Verdict.NODE_LOST, (SITE_TAINT,)),
    ("site-taint-not-configured", pod(dt="DeletionByTaintManager", deleting=T1), node(taints=(taint(SITE_TAINT),)), {}, Verdict.TAINT_EVICTED, (SITE_TAINT,)),
    ("node-absent", pod(), ABSENT, {}, Verdict.NODE_LOST, ("absent",)),
    ("gone-node-absent", pod(phase="Failed", dt="DeletionByPodGC", deleting=T1, grace=0), ABSENT, {"gone": True, "final": True}, Verdict.NODE_LOST, ("absent",)),
    ("gone-on-lost-node", pod(dt="DeletionByTaintManager", deleting=T1, grace=0), LOST, {"gone": True, "final": True}, Verdict.NODE_LOST, ("force delete",)),
    # Out of service: the operator's assertion.
    ("oos-terminating", pod(dt="DeletionByTaintManager", deleting=T1), OOS, {}, Verdict.CEASED, (TAINT_OUT_OF_SERVICE + ":NoExecute added " + T1, "Ready=Unknown")),
    ("oos-no-schedule-no-ready-condition", pod(deleting=T1), OOS_NO_SCHEDULE, {}, Verdict.CEASED, ("no Ready condition",)),
    ("oos-gone-by-podgc", pod(phase="Failed", deleting=T1, grace=0, phase_manager="kube-controller-manager"), OOS, {"gone": True, "final": True}, Verdict.CEASED, ("still reported running",)),
    ("oos-gone-by-podgc-waiting", pod(phase="Failed", containers=("waiting",), deleting=T1, grace=0, phase_manager="kube-controller-manager"), OOS, {"gone": True, "final": True}, Verdict.CEASED, ("written by kube-controller-manager",)),
    ("oos-gone-old-view", pod(), OOS, {"gone": True}, Verdict.CEASED, ("last view",)),
    ("oos-not-deleting", pod(), OOS, {}, Verdict.NODE_LOST, ("would start it again",)),
    ("oos-kubelet-posts-not-ready", pod(deleting=T1), node(ready="False", taints=(taint(TAINT_OUT_OF_SERVICE),)), {}, Verdict.NODE_LOST, ("contradicts",)),
    ("oos-node-ready", pod(deleting=T1), node(taints=(taint(TAINT_OUT_OF_SERVICE),)), {}, Verdict.NODE_LOST, ("Ready=True", "contradicts")),
    # What cannot be read.
    ("only-a-name", None, None, {"name": "p-7"}, Verdict.DELETED, ("only its name",)),
    ("only-a-name-oos-node", None, OOS, {"name": "p-7"}, Verdict.DELETED, ()),
    ("pod-not-an-object", ["junk"], node(), {}, Verdict.UNKNOWN, ("not an object",)),
    ("node-name-junk", {"spec": {"nodeName": 7}}, node(), {}, Verdict.UNKNOWN, ("nodeName",)),
    ("wrong-node-passed", pod(node="n2"), OOS, {}, Verdict.UNKNOWN, ("n2",)),
    ("node-taints-junk", pod(deleting=T1), {**OOS, "spec": {"taints": "oops"}}, {}, Verdict.UNKNOWN, ("cannot be read",)),
    ("node-not-an-object", pod(), "n1", {}, Verdict.UNKNOWN, ()),
    ("node-two-ready-conditions", pod(deleting=T1), {**OOS, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}, {"type": "Ready", "status": "True"}]}}, {}, Verdict.UNKNOWN, ()),
    ("unbound-gone-final-no-pod-spec", {"metadata": {"name": "p"}}, None, {"gone": True, "final": True}, Verdict.UNKNOWN, ("no pod spec",)),
    ("unbound-deleting-no-pod-spec", {"metadata": {"name": "p", "deletionTimestamp": T1}}, None, {}, Verdict.UNKNOWN, ("no pod spec",)),
    ("snake-case-pod", SNAKE_POD, None, {"gone": True, "final": True}, Verdict.UNKNOWN, ("snake_case",)),
    ("snake-case-node", pod(deleting=T1), {**OOS, "metadata": {"name": "n1", "creation_timestamp": T0}}, {}, Verdict.UNKNOWN, ("snake_case",)),
]
# fmt: on


@pytest.mark.parametrize(
    ("pod_obj", "node_obj", "kwargs", "verdict", "evidence"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS]
)
def test_decision_table(pod_obj, node_obj, kwargs, verdict, evidence):
    c = classify(pod_obj, node_obj, **kwargs)
    assert c.verdict is verdict, c.reason
    assert c.may_still_run is verdict.may_still_run
    for text in evidence:
        assert text in c.reason, c.reason


def test_only_three_verdicts_say_certainly_gone():
    assert {v for v in Verdict if not v.may_still_run} == {Verdict.ENDED, Verdict.NOT_SCHEDULED, Verdict.CEASED}


def test_reason_names_pod_and_node():
    c = classify(pod("p-1", deleting=T1), OOS)
    assert (c.pod, c.node) == ("p-1", "n1")
    assert classify(None, None, name="p-2").pod == "p-2"


def test_reason_is_stable_while_a_live_kubelet_posts_heartbeats():
    """The gate writes an Event when its message changes: a moving heartbeat must not change it."""
    later = node()
    later["status"]["conditions"][-1]["lastHeartbeatTime"] = T1
    assert classify(pod(deleting=T1), node()).reason == classify(pod(deleting=T1), later).reason
    assert "last heartbeat " + T0 in classify(pod(), LOST).reason


def test_inputs_are_not_modified():
    p, n = pod(dt="DeletionByTaintManager", deleting=T1), copy.deepcopy(OOS)
    before = (copy.deepcopy(p), copy.deepcopy(n))
    classify(p, n, [SITE_TAINT])
    assert (p, n) == before


def test_an_exploding_object_is_unknown():
    class Boom(Mapping):
        def __getitem__(self, key):
            raise RuntimeError("boom")

        def __iter__(self):
            raise RuntimeError("boom")

        def __len__(self):
            return 1

        def __contains__(self, key):
            return True

    c = classify(Boom(), node())
    assert c.verdict is Verdict.UNKNOWN
    assert c.may_still_run


def test_site_taints_given_as_one_string_or_junk():
    p, n = pod(dt="DeletionByTaintManager", deleting=T1), node(taints=(taint(SITE_TAINT),))
    assert classify(p, n, SITE_TAINT).verdict is Verdict.NODE_LOST
    assert classify(p, n, 42).verdict is Verdict.TAINT_EVICTED  # type: ignore[arg-type]
    assert classify(p, n, [1, None, SITE_TAINT]).verdict is Verdict.NODE_LOST  # type: ignore[list-item]


# -- The gate's question over a set of pods -------------------------------------------------------


def test_assess_lists_what_may_still_run_and_why():
    nodes = {"n1": OOS, "n2": node("n2"), "lost": node("lost", ready="Unknown", taints=(taint(TAINT_UNREACHABLE),))}
    records = [
        pod("a", node="n1", deleting=T1),  # live dict, Ceased
        PodRecord(obj=pod("b", node="lost", deleting=T1)),  # node lost
        PodRecord(obj=pod("c", node="n2", phase="Succeeded", containers=("terminated",)), gone=True, final=True),
        PodRecord(name="d", gone=True),  # only a name
        pod("e", node="vanished"),  # Node absent
    ]
    result = assess(records, nodes)
    assert [c.pod for c in result.classifications] == ["a", "b", "c", "d", "e"]
    assert [(n, c.verdict) for n, c in result.may_still_run] == [
        ("b", Verdict.NODE_LOST),
        ("d", Verdict.DELETED),
        ("e", Verdict.NODE_LOST),
    ]
    assert not result.ceased
    message = result.message()
    assert message.startswith("3 pod(s) of the previous execution may still run:")
    assert "b: NodeLost: " in message
    assert TAINT_UNREACHABLE in message
    assert "a:" not in message


def test_assess_ceased_when_nothing_may_run():
    result = assess([pod("a", deleting=T1), PodRecord(obj=pod("b", deleting=T1), gone=True)], {"n1": OOS})
    assert result.ceased
    assert result.may_still_run == []
    assert result.message() == ""
    assert all(c.verdict is Verdict.CEASED for c in result.classifications)


def test_assess_of_nothing_is_ceased_and_says_so_only_for_what_was_passed():
    assert assess([], {}).ceased


def test_assess_uses_site_taints():
    n = node(taints=(taint(SITE_TAINT),))
    p = pod(dt="DeletionByTaintManager", deleting=T1)
    assert assess([p], {"n1": n}).classifications[0].verdict is Verdict.TAINT_EVICTED
    assert assess([p], {"n1": n}, [SITE_TAINT]).classifications[0].verdict is Verdict.NODE_LOST
    assert assess([p], {"n1": n}, iter([SITE_TAINT])).classifications[0].verdict is Verdict.NODE_LOST


def test_classify_record_with_junk_never_raises():
    for record in (None, 7, "x", PodRecord(obj="x"), {"spec": []}):
        c = classify_record(record, {})  # type: ignore[arg-type]
        assert c.may_still_run
    assert classify_record(pod(), None).may_still_run  # type: ignore[arg-type]


@pytest.mark.parametrize("limit", [10, 80, 200, 400, 32768])
def test_message_fits_its_limit_and_counts_what_it_left_out(limit):
    many = [PodRecord(name=f"pod-{i:03}", gone=True) for i in range(50)]
    message = assess(many, {}).message(max_chars=limit)
    assert len(message) <= limit
    if 200 <= limit < 32768:
        assert "more" in message.splitlines()[-1]
    if limit == 32768:
        assert message.count("\n") == 50


def test_classification_is_a_value():
    c = Classification("p", Verdict.CEASED, "why", "n1")
    assert not c.may_still_run
    assert Assessment((c,)).ceased


# -- Properties -----------------------------------------------------------------------------------

TS = st.sampled_from([T0, T1])
PHASES = st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown", None])
NON_TERMINAL = st.sampled_from(["Pending", "Running", "Unknown", None])
DT_REASONS = st.sampled_from(
    [
        None,
        "PreemptionByScheduler",
        "DeletionByTaintManager",
        "EvictionByEvictionAPI",
        "DeletionByPodGC",
        "TerminationByKubelet",
    ]
)
EFFECTS = st.sampled_from(["NoExecute", "NoSchedule", "PreferNoSchedule"])
OTHER_TAINT_KEYS = st.sampled_from(["dedicated", "node.kubernetes.io/memory-pressure", "gpu", SITE_TAINT])
LOSS_KEYS = st.sampled_from([TAINT_UNREACHABLE, TAINT_NOT_READY, SITE_TAINT, "example.com/other-lost"])
READY = st.sampled_from(["True", "False", "Unknown", None])
BOUND = st.just(True)


@st.composite
def pods(draw, phase=PHASES, bound=BOUND):
    return pod(
        "p",
        node="n1" if draw(bound) else None,
        phase=draw(phase),
        containers=tuple(draw(st.lists(st.sampled_from(sorted(_STATES)), max_size=3))),
        deleting=draw(st.one_of(st.none(), TS)),
        grace=draw(st.sampled_from([0, 30])),
        dt=draw(DT_REASONS),
        reason=draw(st.sampled_from([None, "Evicted", "OutOfcpu", "Terminated"])),
        phase_manager=draw(st.sampled_from([None, "kubelet", "kube-controller-manager", "kwok"])),
    )


@st.composite
def taint_lists(draw, keys):
    return tuple(taint(k, draw(EFFECTS), draw(st.one_of(st.none(), TS))) for k in draw(st.lists(keys, max_size=4)))


GONE = st.sampled_from([(False, False), (True, False), (True, True)])


@given(
    pods(),
    taint_lists(st.one_of(OTHER_TAINT_KEYS, LOSS_KEYS)),
    st.sampled_from(["Unknown", None]),
    EFFECTS,
    GONE,
    st.lists(LOSS_KEYS, max_size=2),
)
def test_a_out_of_service_and_a_silent_kubelet_mean_gone_for_a_deleted_pod(p, taints, ready, effect, gone, site):
    """(a) Out-of-service on a node whose kubelet is silent: a pod being deleted, or gone, has ceased.

    A pod on it that is not being deleted may still run (its kubelet would start it again if the node came
    back), unless the kubelet had already ended it.
    """
    n = node(ready=ready, taints=(*taints, taint(TAINT_OUT_OF_SERVICE, effect)))
    c = classify(p, n, site, gone=gone[0], final=gone[1])
    if gone[0] or dig(p, "metadata", "deletionTimestamp"):
        assert not c.may_still_run, c.reason
        assert c.verdict in (Verdict.CEASED, Verdict.ENDED)
    else:
        assert c.verdict in (Verdict.NODE_LOST, Verdict.ENDED), c.reason


@given(pods(phase=NON_TERMINAL), GONE, st.lists(LOSS_KEYS, max_size=2))
def test_b_never_gone_for_a_non_terminal_pod_on_a_ready_untainted_node(p, gone, site):
    """(b) The API cannot prove a non-terminal pod on a healthy node stopped: it may still run."""
    c = classify(p, node(), site, gone=gone[0], final=gone[1])
    assert c.may_still_run, c.reason


@given(
    pods(phase=PHASES, bound=st.booleans()),
    READY,
    taint_lists(OTHER_TAINT_KEYS),
    taint_lists(LOSS_KEYS),
    st.lists(LOSS_KEYS, max_size=2),
    st.lists(LOSS_KEYS, max_size=2),
    GONE,
)
def test_c_node_loss_taints_never_turn_may_run_into_gone(p, ready, base, added, site, more_site, gone):
    """(c) Unreachable, not-ready and the site's taints only add doubt: without out-of-service, never False."""
    before = classify(p, node(ready=ready, taints=base), site, gone=gone[0], final=gone[1])
    after = classify(p, node(ready=ready, taints=base + added), site + more_site, gone=gone[0], final=gone[1])
    if before.may_still_run:
        assert after.may_still_run, (before.reason, after.reason)


JSON_KEYS = st.sampled_from(
    [
        "metadata", "spec", "status", "name", "nodeName", "phase", "deletionTimestamp", "conditions", "type",
        "status", "reason", "taints", "key", "effect", "timeAdded", "containerStatuses", "state", "running",
        "managedFields", "manager", "fieldsV1", "f:status", "f:phase", "Ready", TAINT_OUT_OF_SERVICE,
    ]
)  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.sampled_from(["n1", "True", "Unknown", "Failed", "Succeeded", "DisruptionTarget", T0, TAINT_OUT_OF_SERVICE]),
)
JUNK = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.one_of(JSON_KEYS, st.text(max_size=4)), inner, max_size=5)
    ),
    max_leaves=30,
)


def _justified(c: Classification, p: Any, n: Any, gone: bool, final: bool) -> bool:
    """The evidence a certainly-gone verdict needs, read independently of the module."""
    if c.may_still_run:
        return True
    deleting = dig(p, "metadata", "deletionTimestamp")
    deleting = isinstance(deleting, str) and bool(deleting)
    node_name = dig(p, "spec", "nodeName")
    if c.verdict is Verdict.ENDED:
        return dig(p, "status", "phase") in ("Succeeded", "Failed")
    if c.verdict is Verdict.NOT_SCHEDULED:
        has_spec = isinstance(dig(p, "spec", "containers"), list)
        return has_spec and node_name in (None, "") and (deleting or (gone and final))
    if c.verdict is Verdict.CEASED:
        taints = dig(n, "spec", "taints") or []
        readies = [
            x for x in dig(n, "status", "conditions") or [] if isinstance(x, Mapping) and x.get("type") == "Ready"
        ]
        return (
            len(readies) <= 1
            and isinstance(node_name, str)
            and node_name == dig(n, "metadata", "name")
            and any(isinstance(t, Mapping) and t.get("key") == TAINT_OUT_OF_SERVICE for t in taints)
            and all(r.get("status") == "Unknown" for r in readies)
            and (deleting or gone)
        )
    return False


@settings(max_examples=400)
@given(JUNK, st.one_of(st.none(), JUNK), st.one_of(JUNK, st.lists(LOSS_KEYS)), st.booleans(), st.booleans())
def test_d_junk_never_raises_and_gone_needs_evidence(p, n, site, gone, final):
    """(d) Arbitrary nested junk: no exception, and may_still_run=False only on the evidence that proves it."""
    c = classify(p, n, site, gone=gone, final=final)
    assert isinstance(c.reason, str)
    assert isinstance(c.pod, str)
    assert _justified(c, p, n, gone or p is None, final), c
    if p is not None and not isinstance(p, Mapping):
        assert c.verdict is Verdict.UNKNOWN


@settings(max_examples=200)
@given(pods(phase=PHASES, bound=st.booleans()), JUNK, GONE)
def test_d_junk_node_with_a_real_pod(p, n, gone):
    c = classify(p, n, gone=gone[0], final=gone[1])
    assert _justified(c, p, n, gone[0], gone[1]), c


@st.composite
def mutated_pods(draw):
    """A real pod with one subtree replaced by junk: the shapes a broken client or a schema drift would give."""
    p = draw(pods(phase=PHASES, bound=st.booleans()))
    path = draw(
        st.sampled_from(
            [
                ("metadata",), ("metadata", "deletionTimestamp"), ("metadata", "managedFields"), ("spec",),
                ("spec", "nodeName"), ("status",), ("status", "phase"), ("status", "conditions"),
                ("status", "containerStatuses"),
            ]
        )
    )  # fmt: skip
    target = p
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = draw(JUNK)
    return p


@settings(max_examples=300)
@given(mutated_pods(), st.sampled_from([node(), LOST, OOS, NOT_READY, None]), GONE)
def test_d_partly_broken_pods(p, n, gone):
    c = classify(p, n, gone=gone[0], final=gone[1])
    assert _justified(c, p, n, gone[0], gone[1]), c


@given(
    st.lists(st.one_of(JUNK, pods(), st.builds(PodRecord, obj=st.one_of(st.none(), pods()), gone=st.booleans()))), JUNK
)
def test_assess_never_raises(records, nodes):
    result = assess(records, nodes if isinstance(nodes, Mapping) else {})
    assert len(result.classifications) == len(records)
    assert isinstance(result.message(), str)
