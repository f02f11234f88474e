"""The controller, watch-driven, against the real API server: the test plays Kueue (and the kubelet's part
for pods and nodes) and the controller must react to the changes alone — nothing here calls reconcile."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

import pytest

from agent.constants import ACTIVE_MESSAGE, EVENT_COMPONENT, REASON_HELD
from contract.keys import POD_FINALIZER
from tests.agent import kueue_double as kueue

pytestmark = pytest.mark.cluster

UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}
OUT_OF_SERVICE = {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}


def eventually(fn: Callable[[], Any], timeout: float = 20, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def check_state(cp, wl, check) -> str:
    return kueue.entry(kueue.get_workload(cp, wl), check)["state"]


def test_reserved_quota_is_acted_on_by_the_watch(control_plane, namespace, agent):
    cp = control_plane
    check = kueue.create_admission_check(cp)
    tj = kueue.create_dispatch_trainjob(cp, namespace)
    wl = kueue.create_workload(cp, tj, [check])
    time.sleep(2)  # the watch has seen the Pending check without a reservation
    assert check_state(cp, wl, check) == "Pending"
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (0, None)

    kueue.reserve(cp, wl)
    eventually(lambda: check_state(cp, wl, check) == "Ready", what="the check to turn Ready")
    assert ready_message(cp, wl, check) == "the next execution starts with A 1, raised in the write that admits it"
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (0, None)  # the gate leaves A to the start
    assert kueue.a_and_floor(kueue.run_execution(cp, tj)) == (1, 1)

    # Preempted and readmitted: approved again, for an execution numbered above the last one.
    kueue.readmit_cycle(cp, wl)
    eventually(lambda: check_state(cp, wl, check) == "Ready", what="the check to turn Ready again")
    assert ready_message(cp, wl, check) == "the next execution starts with A 2, raised in the write that admits it"
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (1, 1)
    assert kueue.a_and_floor(kueue.run_execution(cp, tj)) == (2, 2)
    metrics = agent.call(lambda c: c.metrics.render())
    assert 'dispatch_agent_decisions_total{action="admit"} 2.0' in metrics
    assert 'action="raise"' not in metrics


def ready_message(cp, wl, check) -> str:
    return kueue.entry(kueue.get_workload(cp, wl), check)["message"]


def test_the_active_condition_is_set_true(control_plane, agent):
    cp = control_plane
    check = kueue.create_admission_check(cp)  # created while the controller already serves

    def active():
        ac = cp.admin.get(kueue.KUEUE_V, "AdmissionCheck", check)
        return next((c for c in ac.get("status", {}).get("conditions", []) if c["type"] == "Active"), None)

    condition = eventually(active, what="the Active condition")
    assert condition["status"] == "True"
    assert condition["reason"] == "Active"
    assert condition["message"] == ACTIVE_MESSAGE
    assert (
        condition["observedGeneration"]
        == cp.admin.get(kueue.KUEUE_V, "AdmissionCheck", check)["metadata"]["generation"]
    )
    # Stopping the controller does not set it False (Kueue would stop the queue; the wait is at the check).
    agent.stop()
    assert active()["status"] == "True"


@pytest.fixture
def lost_node(control_plane) -> str:
    name = f"node-{secrets.token_hex(4)}"
    kueue.create_node(control_plane, name, ready="Unknown", taints=[UNREACHABLE])
    try:
        yield name
    finally:
        control_plane.admin.delete("v1", "Node", name)


@pytest.mark.parametrize("lift", ["out-of-service", "force-delete"])
def test_a_pod_that_may_still_run_holds_the_check(control_plane, namespace, agent, lost_node, lift):
    cp = control_plane
    check = kueue.create_admission_check(cp)
    tj = kueue.create_dispatch_trainjob(cp, namespace)
    pod = kueue.create_trainer_pod(cp, tj, lost_node)
    wl = kueue.reserve(cp, kueue.create_workload(cp, tj, [check]))

    def held_message():
        e = kueue.entry(kueue.get_workload(cp, wl), check)
        return e["message"] if e["state"] == "Pending" and pod["metadata"]["name"] in e["message"] else None

    message = eventually(held_message, what="the check held with a message naming the pod")
    assert "NodeLost" in message
    assert lost_node in message
    held = eventually(
        lambda: [e for e in kueue.events_about(cp, tj) if e["reason"] == REASON_HELD], what="an Event on the TrainJob"
    )
    assert pod["metadata"]["name"] in held[0]["message"]
    assert held[0]["source"]["component"] == EVENT_COMPONENT
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (0, None)
    time.sleep(1)
    assert check_state(cp, wl, check) == "Pending"

    path = cp.admin.object_path(pod)
    if lift == "out-of-service":
        # The pod is deleted (no kubelet confirms it: it stays, terminating) and the operator asserts the node
        # is shut down: only then are its processes certainly gone. The Node change must wake the held check.
        cp.admin.request("DELETE", path)
        eventually(lambda: "deletionTimestamp" in (held_message() or ""), what="the message to note the deletion")
        assert check_state(cp, wl, check) == "Pending"
        kueue.taint_node(cp, lost_node, [UNREACHABLE, OUT_OF_SERVICE])
    else:
        # Gone from the API at once: the pod watch's DELETED event wakes the held check.
        cp.admin.request("DELETE", path, {"gracePeriodSeconds": 0})
    eventually(lambda: check_state(cp, wl, check) == "Ready", what="the check to turn Ready")
    assert ready_message(cp, wl, check).startswith("the next execution starts with A 1")
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (0, None)  # the gate leaves A to the start


# -- dispatch's pod finalizer: a deleted pod leaves evidence (issue 10, item 11) ----------------------


def _pod(cp, pod):
    return cp.admin.get_or_none("v1", "Pod", pod["metadata"]["name"], pod["metadata"]["namespace"])


def test_a_force_deleted_pod_on_a_lost_node_holds_the_check_until_the_node_is_out_of_service(
    control_plane, namespace, agent, lost_node
):
    """A force delete (or the pod GC after a lost Node object is deleted) no longer makes the pod vanish:
    dispatch's finalizer keeps it listed, so the stateless gate still sees it, until the operator's
    out-of-service assertion proves its processes gone. Then the agent removes the finalizer, and only then
    does the check turn Ready."""
    cp = control_plane
    check = kueue.create_admission_check(cp)
    tj = kueue.create_dispatch_trainjob(cp, namespace)
    pod = kueue.create_trainer_pod(cp, tj, lost_node, finalizer=True)
    wl = kueue.reserve(cp, kueue.create_workload(cp, tj, [check]))
    name = pod["metadata"]["name"]

    cp.admin.request("DELETE", cp.admin.object_path(pod), {"gracePeriodSeconds": 0})
    held = eventually(
        lambda: (
            (e := kueue.entry(kueue.get_workload(cp, wl), check))["state"] == "Pending"
            and name in e["message"]
            and "deletionTimestamp" in e["message"]
            and e["message"]
        ),
        what="the check held on the force-deleted pod",
    )
    assert "NodeLost" in held
    time.sleep(2)
    assert _pod(cp, pod) is not None  # still there: the finalizer is the evidence
    assert check_state(cp, wl, check) == "Pending"
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (0, None)

    kueue.taint_node(cp, lost_node, [UNREACHABLE, OUT_OF_SERVICE])
    eventually(lambda: _pod(cp, pod) is None, what="the agent to remove its finalizer, and the pod to go")
    eventually(lambda: check_state(cp, wl, check) == "Ready", what="the check to turn Ready")
    assert ready_message(cp, wl, check).startswith("the next execution starts with A 1")
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (0, None)  # the gate leaves A to the start


def test_the_finalizer_goes_as_soon_as_the_kubelet_ends_the_pod(control_plane, namespace, agent):
    """On a healthy node a deleted pod keeps the finalizer only until its kubelet writes a terminal phase."""
    cp = control_plane
    node = f"node-{secrets.token_hex(4)}"
    kueue.create_node(cp, node, ready="True")
    try:
        tj = kueue.create_dispatch_trainjob(cp, namespace)
        pod = kueue.create_trainer_pod(cp, tj, node, finalizer=True)
        cp.admin.request("DELETE", cp.admin.object_path(pod))
        time.sleep(2)
        assert _pod(cp, pod)["metadata"]["finalizers"] == [POD_FINALIZER]  # Running: it may still run
        # The kubelet stops the container and writes the terminal phase.
        cp.admin.request(
            "PATCH",
            cp.admin.object_path(pod) + "/status",
            {"status": {"phase": "Failed", "containerStatuses": [
                {"name": "node", "image": "pytorch/pytorch", "imageID": "", "ready": False, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 137, "reason": "Error", "startedAt": kueue.now(),
                                          "finishedAt": kueue.now()}}}]}},
            content_type="application/merge-patch+json",
        )  # fmt: skip
        # (tier A has no kubelet to confirm the deletion afterwards: the pod stays, without the finalizer)
        eventually(lambda: not _pod(cp, pod)["metadata"].get("finalizers"), what="the finalizer removed")
        assert agent.call(lambda c: c.releaser.released) >= 1
    finally:
        cp.admin.delete("v1", "Node", node)
