"""dispatch's pod finalizer (agent/domain/pod_finalizer.py): removed only when the pod's processes are proven gone
(issue 10, item 11)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.domain.node_loss import classify
from agent.domain.pod_finalizer import carries, release_ops
from agent.gate.releaser import could_release
from contract.keys import POD_FINALIZER, TAINT_OUT_OF_SERVICE, TAINT_UNREACHABLE
from tests.agent.domain.test_nodeloss import node, pod, taint
from tests.harness.kubelet import apply_json_patch

T = "2026-11-29T10:00:00Z"


def ours(p: dict[str, Any], *, first: str | None = "batch.kubernetes.io/job-tracking") -> dict[str, Any]:
    p = copy.deepcopy(p)
    p["metadata"]["finalizers"] = [f for f in (first, POD_FINALIZER) if f]
    p["metadata"]["resourceVersion"] = "7"
    return p


@pytest.mark.parametrize(
    ("why", "p", "n"),
    [
        ("the kubelet wrote Succeeded", pod(phase="Succeeded", containers=("terminated",)), node()),
        (
            "the kubelet wrote Failed, the pod deleting",
            pod(phase="Failed", containers=("terminated",), deleting=T),
            None,
        ),
        ("never bound, being deleted", pod(node=None, phase="Pending", containers=(), deleting=T), None),
        (
            "out-of-service, kubelet silent, deleting",
            pod(deleting=T),
            node(ready="Unknown", taints=(taint(TAINT_OUT_OF_SERVICE),)),
        ),
    ],
)
def test_removed_once_the_processes_are_proven_gone(why, p, n):
    p = ours(p)
    ops = release_ops(p, n)
    assert ops is not None, why
    after = apply_json_patch(p, ops)
    assert after["metadata"]["finalizers"] == ["batch.kubernetes.io/job-tracking"]
    assert ops[:2] == [
        {"op": "test", "path": "/metadata/uid", "value": p["metadata"]["uid"]},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "7"},
    ]
    assert ops[2] == {"op": "test", "path": "/metadata/finalizers/1", "value": POD_FINALIZER}


@pytest.mark.parametrize(
    ("why", "p", "n"),
    [
        ("running", pod(), node()),
        ("force-deleted on a healthy node, not yet terminal", pod(deleting=T, grace=0), node()),
        ("its Node was deleted (the pod GC's force delete)", pod(deleting=T, grace=0, dt="DeletionByPodGC"), None),
        ("unreachable node", pod(deleting=T), node(ready="Unknown", taints=(taint(TAINT_UNREACHABLE),))),
        ("out-of-service but the kubelet posts Ready", pod(deleting=T), node(taints=(taint(TAINT_OUT_OF_SERVICE),))),
        (
            "Failed written by the pod GC",
            pod(phase="Failed", deleting=T, phase_manager="kube-controller-manager"),
            None,
        ),
    ],
)
def test_kept_while_the_pod_may_still_run(why, p, n):
    assert release_ops(ours(p), n) is None, why


def test_nothing_to_remove_without_our_finalizer():
    p = pod(phase="Succeeded", containers=("terminated",))
    assert not carries(p)
    assert release_ops(p, node()) is None


def test_site_node_loss_taints_count():
    p = ours(pod(deleting=T))
    assert release_ops(p, node(taints=(taint("example.com/lost"),))) is None
    assert release_ops(p, node(ready="Unknown", taints=(taint(TAINT_OUT_OF_SERVICE),)), ["example.com/lost"])


@given(
    phase=st.sampled_from(["Running", "Pending", "Succeeded", "Failed", None]),
    deleting=st.booleans(),
    ready=st.sampled_from(["True", "False", "Unknown", None]),
    oos=st.booleans(),
    bound=st.booleans(),
    absent=st.booleans(),
)
def test_removed_only_when_the_classification_says_it_may_not_run(phase, deleting, ready, oos, bound, absent):
    p = ours(pod(phase=phase, deleting=T if deleting else None, node="n1" if bound else None))
    n = None if absent else node(ready=ready, taints=(taint(TAINT_OUT_OF_SERVICE),) if oos else ())
    ops = release_ops(p, n)
    assert (ops is not None) == (not classify(p, n).may_still_run)


@given(
    phase=st.sampled_from(["Running", "Pending", "Succeeded", "Failed", None]),
    deleting=st.booleans(),
    ready=st.sampled_from(["True", "False", "Unknown", None]),
    oos=st.booleans(),
)
def test_the_releaser_skips_only_pods_that_could_not_be_released_anyway(phase, deleting, ready, oos):
    """agent/gate/releaser.py reads no Node for a pod neither terminal nor deleting: no such pod is ever released."""
    p = ours(pod(phase=phase, deleting=T if deleting else None))
    n = node(ready=ready, taints=(taint(TAINT_OUT_OF_SERVICE),) if oos else ())
    if not could_release(p):
        assert release_ops(p, n) is None
        assert release_ops(p, None) is None
