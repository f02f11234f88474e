"""Passes that read the Workload, the TrainJob and the JobSet from the watch caches (agent/caches.py), against
the real API server, the test playing Kueue's part.

The stores are fed deliberately stale copies (as a watch that is behind would leave them) and marked live:
whatever they say, no pass approves what a fresh read would refuse, because each approving write is
preconditioned on the resourceVersion of the copy it decided from. The live watches themselves, and the
reads they spare, are checked at the end with the controller running."""

from __future__ import annotations

import time
from typing import Any

import pytest

from agent.caches import keep_jobset, keep_trainjob
from agent.config import AgentConfig
from agent.gate import Action
from agent.kube import Kube
from agent.reconcile import WorkloadKey, reconcile
from contract.keys import ANNOTATION_HOLD_INSTANCE, ANNOTATION_HOLD_REASON, ANNOTATION_HOLD_WHO
from contract.objects import pointer
from tests.agent import kueue_double as kueue
from tests.agent.running import RunningController
from tests.cluster.principals import json_patch
from tests.unit.test_agent_caches import live

pytestmark = pytest.mark.cluster
async_test = pytest.mark.asyncio(loop_scope="function")

SETTINGS = AgentConfig()


def key(wl: dict[str, Any]) -> WorkloadKey:
    return WorkloadKey(wl["metadata"]["namespace"], wl["metadata"]["name"])


def cached(api_client, *, workload=None, trainjob=None) -> Kube:
    """A Kube whose passes read from live stores holding exactly these copies (and no JobSet)."""
    kube = Kube(api_client, instance="test")
    live(kube.reads.workloads, *([workload] if workload else []))
    live(kube.reads.trainjobs, *([trainjob] if trainjob else []), keep=keep_trainjob)
    live(kube.reads.jobsets, keep=keep_jobset)
    return kube


def api_reads(kube: Kube) -> dict[str, int]:
    return {resource: n for (resource, source), n in kube.reads.counts.items() if source == "api"}


def dispatch_workload(cp, namespace, checks: int = 1):
    names = sorted(kueue.create_admission_check(cp) for _ in range(checks))
    tj = kueue.create_dispatch_trainjob(cp, namespace)
    wl = kueue.reserve(cp, kueue.create_workload(cp, tj, names))
    return names, tj, wl


def hold(cp, tj) -> dict[str, Any]:
    """Hold's first write: its annotations on the TrainJob."""
    tj = kueue.get_trainjob(cp, tj)
    ops = [
        {"op": "add", "path": pointer("metadata", "annotations", k), "value": v}
        for k, v in {ANNOTATION_HOLD_INSTANCE: "h1", ANNOTATION_HOLD_WHO: "ops", ANNOTATION_HOLD_REASON: "x"}.items()
    ]
    return json_patch(cp.admin, tj, ops)


@async_test
async def test_a_workload_from_before_an_eviction_is_never_approved(control_plane, namespace, api_client):
    cp = control_plane
    (check,), tj, wl = dispatch_workload(cp, namespace)
    stale = kueue.get_workload(cp, wl)  # Pending, quota reserved
    kueue.readmit_cycle(cp, wl)  # Kueue evicted it (resetting the check) and reserved again since
    kube = cached(api_client, workload=stale, trainjob=kueue.get_trainjob(cp, tj))
    outcome = await reconcile(kube, key(wl), SETTINGS)
    assert outcome.conflict == "workload"  # the Ready write, preconditioned on the stale copy: 409
    assert outcome.requeue
    assert not outcome.ready
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Pending"
    assert api_reads(kube) == {}  # the Workload and the TrainJob came from memory, the JobSet ("none") too


@async_test
async def test_a_trainjob_from_before_a_hold_is_never_approved(control_plane, namespace, api_client):
    cp = control_plane
    (check,), tj, wl = dispatch_workload(cp, namespace)
    stale = kueue.get_trainjob(cp, tj)
    hold(cp, tj)  # the hold annotations were added since the copy
    kube = cached(api_client, workload=kueue.get_workload(cp, wl), trainjob=stale)
    outcome = await reconcile(kube, key(wl), SETTINGS)
    assert outcome.action is Action.RAISE  # decided from the copy without the hold...
    assert outcome.conflict == "trainjob"  # ...but the raise, preconditioned on it, is refused
    assert not outcome.ready
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Pending"
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (0, None)

    # A fresh read (here the next pass's GET: the store no longer holds a current copy) holds.
    kube.reads.trainjobs.on_live(False)
    outcome = await reconcile(kube, key(wl), SETTINGS)
    assert outcome.action is Action.HOLD
    assert "held by dispatch" in outcome.message


@async_test
async def test_a_trainjob_from_before_a_raise_is_refused_and_a_never_falls(control_plane, namespace, api_client):
    cp = control_plane
    (check,), tj, wl = dispatch_workload(cp, namespace)
    stale = kueue.get_trainjob(cp, tj)  # A = 0
    outcome = await reconcile(Kube(api_client, instance="other-pass"), key(wl), SETTINGS)
    assert (outcome.ready, outcome.new_a) == (True, 1)  # another pass raised A and approved
    kueue.readmit_cycle(cp, wl)
    kube = cached(api_client, workload=kueue.get_workload(cp, wl), trainjob=stale)
    outcome = await reconcile(kube, key(wl), SETTINGS)
    assert outcome.conflict == "trainjob"  # the raise from A = 0, preconditioned on the stale copy: 409
    assert not outcome.ready
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (1, 1)
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Pending"

    kube.reads.trainjobs.on_live(False)  # the next pass reads afresh: it raises past the other pass's A
    outcome = await reconcile(kube, key(wl), SETTINGS)
    assert (outcome.ready, outcome.new_a) == (True, 2)


@async_test
async def test_a_trainjob_not_yet_in_the_store_is_read_by_get(control_plane, namespace, api_client):
    """The first admission right after Start: the TrainJob watch may not have delivered it yet."""
    cp = control_plane
    (check,), _tj, wl = dispatch_workload(cp, namespace)
    kube = cached(api_client, workload=kueue.get_workload(cp, wl))
    outcome = await reconcile(kube, key(wl), SETTINGS)
    assert (outcome.action, outcome.ready, outcome.new_a) == (Action.RAISE, True, 1)
    assert api_reads(kube) == {"trainjobs": 1}
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Ready"


@async_test
async def test_our_own_writes_are_what_the_next_pass_reads(control_plane, namespace, api_client):
    """Two checks of ours: the second pass reads the TrainJob and the Workload as our first pass's writes left
    them (their responses, newer than the copies held), not our own pre-write copies, which would be refused."""
    cp = control_plane
    checks, tj, wl = dispatch_workload(cp, namespace, checks=2)
    kube = cached(api_client, workload=kueue.get_workload(cp, wl), trainjob=kueue.get_trainjob(cp, tj))
    first = await reconcile(kube, key(wl), SETTINGS)
    assert (first.check, first.ready, first.more, first.new_a) == (checks[0], True, True, 1)
    second = await reconcile(kube, key(wl), SETTINGS)
    assert (second.check, second.ready, second.conflict, second.new_a) == (checks[1], True, None, 2)
    assert kueue.states(kueue.get_workload(cp, wl)) == dict.fromkeys(checks, "Ready")
    assert api_reads(kube) == {}


def test_the_watches_spare_the_reads_of_a_readmission(control_plane, namespace):
    """With the controller running: a readmission of a job with no pods reads nothing but from memory (its
    pods' LIST aside), and a change to the TrainJob alone (a Release) wakes the gate."""
    cp = control_plane
    running = RunningController(cp, AgentConfig(leaseNamespace=namespace), f"in-test-{namespace}").start()
    try:
        (check,), tj, wl = dispatch_workload(cp, namespace)

        def state() -> str:
            return kueue.entry(kueue.get_workload(cp, wl), check)["state"]

        def wait(what: str, fn) -> None:
            deadline = time.monotonic() + 20
            while not fn():
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                time.sleep(0.05)

        wait("Ready", lambda: state() == "Ready")
        wait("the raise in memory", lambda: running.call(lambda c: c.reads.trainjobs.entry(namespace, tj["metadata"]["name"]).rv) == int(kueue.get_trainjob(cp, tj)["metadata"]["resourceVersion"]))  # fmt: skip
        before = running.call(lambda c: dict(c.reads.counts))
        kueue.readmit_cycle(cp, wl)
        wait("Ready again", lambda: state() == "Ready")
        after = running.call(lambda c: dict(c.reads.counts))
        spent = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
        assert [k for k in spent if k[1] == "api"] == [], spent  # no GET
        # One pass decided (a second may find nothing due, from memory: our raise's own event can beat its
        # response and wake the gate once more).
        assert (spent[("trainjobs", "cache")], spent[("jobsets", "cache")]) == (1, 1), spent
        assert spent[("workloads", "cache")] in (1, 2), spent
        assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (2, 2)

        # Held on the TrainJob alone; the Release removes the annotations: the TrainJob's event wakes the gate.
        hold(cp, tj)
        kueue.readmit_cycle(cp, wl)
        wait(
            "the hold written", lambda: "held by dispatch" in kueue.entry(kueue.get_workload(cp, wl), check)["message"]
        )
        held = kueue.get_trainjob(cp, tj)
        ops = [{"op": "remove", "path": pointer("metadata", "annotations", k)}
               for k in (ANNOTATION_HOLD_INSTANCE, ANNOTATION_HOLD_WHO, ANNOTATION_HOLD_REASON)]  # fmt: skip
        json_patch(cp.admin, held, ops)
        wait("Ready after the Release", lambda: state() == "Ready")
        assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (3, 3)
    finally:
        running.stop()
