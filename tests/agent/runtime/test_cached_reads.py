"""Passes that read the Workload, the TrainJob and the JobSet from the watch caches (agent/runtime/caches.py), against
the real API server, the test playing Kueue's part.

The stores are fed deliberately stale copies (as a watch that is behind would leave them) and marked live:
whatever they say, nothing starts that a fresh read would refuse. The Ready write is preconditioned on the
Workload copy; the JobSet UID record, when the gate makes it, on the TrainJob copy; a TrainJob copy from
before a Hold may approve, and the start that would follow is refused by the unsuspend rule (the choke
point, judged here by the webhook's own rules on the object as stored). A is never written by the gate, so
no copy, however old, can lower it. The live watches themselves, and the reads they spare, are checked at
the end with the controller running."""

from __future__ import annotations

import time
from typing import Any

import pytest

from agent.config import AgentConfig
from agent.domain.decide import Action
from agent.gate.context import Pass, WorkloadKey
from agent.gate.reconcile import reconcile
from agent.runtime.caches import keep_jobset, keep_trainjob
from agent.runtime.kube import Kube
from contract.keys import ANNOTATION_HOLD_INSTANCE, ANNOTATION_HOLD_REASON, ANNOTATION_HOLD_WHO, ANNOTATION_JOBSET_UID
from contract.objects import pointer
from harness.principals import json_patch
from tests.agent import kueue_double as kueue
from tests.agent.gate.test_reconcile import create_jobset
from tests.agent.running import RunningController
from tests.agent.runtime.test_agent_caches import live

pytestmark = pytest.mark.cluster
async_test = pytest.mark.asyncio(loop_scope="function")

SETTINGS = AgentConfig()


def key(wl: dict[str, Any]) -> WorkloadKey:
    return WorkloadKey(wl["metadata"]["namespace"], wl["metadata"]["name"])


def cached(api_client, *, workload=None, trainjob=None) -> Pass:
    """A pass that reads from live stores holding exactly these copies (and no JobSet)."""
    ctx = Pass.fresh(Kube(api_client, instance="test"), SETTINGS)
    live(ctx.reads.workloads, *([workload] if workload else []))
    live(ctx.reads.trainjobs, *([trainjob] if trainjob else []), keep=keep_trainjob)
    live(ctx.reads.jobsets, keep=keep_jobset)
    return ctx


def fresh(api_client, instance: str) -> Pass:
    """A pass of another agent's, whose every read is a GET."""
    return Pass.fresh(Kube(api_client, instance=instance), SETTINGS)


def api_reads(ctx: Pass) -> dict[str, int]:
    return {resource: n for (resource, source), n in ctx.reads.counts.items() if source == "api"}


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
    ctx = cached(api_client, workload=stale, trainjob=kueue.get_trainjob(cp, tj))
    outcome = await reconcile(ctx, key(wl))
    assert outcome.conflict == "workload"  # the Ready write, preconditioned on the stale copy: 409
    assert outcome.requeue
    assert not outcome.ready
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Pending"
    # The Workload, the TrainJob and the JobSet ("none") came from memory: no GET.
    assert api_reads(ctx) == {}


@async_test
async def test_a_trainjob_from_before_a_hold_starts_nothing(control_plane, namespace, api_client):
    """The gate's approval, written before every Ready, is preconditioned on the TrainJob copy, so a copy from
    before Hold's first write (its annotations on the TrainJob) approves nothing: the approval is refused and no
    Ready is written. Were it approved, the start that would follow is refused while the hold is in force."""
    cp = control_plane
    (check,), tj, wl = dispatch_workload(cp, namespace)
    stale = kueue.get_trainjob(cp, tj)
    held = hold(cp, tj)  # the hold annotations were added since the copy
    ctx = cached(api_client, workload=kueue.get_workload(cp, wl), trainjob=stale)
    outcome = await reconcile(ctx, key(wl))
    # decided from the copy without the hold; its approval refused
    assert (outcome.action, outcome.conflict, outcome.ready) == (Action.ADMIT, "trainjob", False)
    assert api_reads(ctx) == {}
    assert kueue.get_trainjob(cp, tj)["metadata"]["resourceVersion"] == held["metadata"]["resourceVersion"]
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Pending"
    # Kueue's unsuspend of the TrainJob as stored, with what admission adds to it: refused, naming the hold.
    verdict = kueue.judge_unsuspend(held)
    assert not verdict.allowed
    assert "a hold of dispatch's is in force" in verdict.message

    # The watch catches up: a pass on the fresh copy holds (the Workload re-reserved after Hold's deactivation
    # and Release is not this test's; here the check is Pending again as after an eviction).
    kueue.readmit_cycle(cp, wl)
    ctx = cached(api_client, workload=kueue.get_workload(cp, wl), trainjob=kueue.get_trainjob(cp, tj))
    outcome = await reconcile(ctx, key(wl))
    assert outcome.action is Action.HOLD
    assert "held by dispatch" in outcome.message
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Pending"


@async_test
async def test_a_trainjob_from_before_a_hold_fails_the_jobset_uid_record(control_plane, namespace, api_client):
    """The first admission with the JobSet there: the record is preconditioned on the copy, so it is refused,
    and without it nothing is approved."""
    cp = control_plane
    (check,), tj, wl = dispatch_workload(cp, namespace)
    stale = kueue.get_trainjob(cp, tj)
    js = create_jobset(cp, tj)
    held = hold(cp, tj)
    ctx = cached(api_client, workload=kueue.get_workload(cp, wl), trainjob=stale)
    live(ctx.reads.jobsets, js, keep=keep_jobset)
    outcome = await reconcile(ctx, key(wl))
    assert (outcome.action, outcome.conflict, outcome.ready) == (Action.ADMIT, "trainjob", False)
    assert "the TrainJob's patch (JobSet UID record, approval) was refused" in outcome.message
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Pending"
    assert kueue.get_trainjob(cp, tj)["metadata"]["resourceVersion"] == held["metadata"]["resourceVersion"]
    assert ANNOTATION_JOBSET_UID not in kueue.get_trainjob(cp, tj)["metadata"]["annotations"]


@async_test
async def test_a_trainjob_from_before_an_execution_cannot_lower_a(control_plane, namespace, api_client):
    """The gate never writes A: the A it reports for the next execution is computed from its copy, and a copy
    from before the last start reports a stale one; but the approval of that A is preconditioned on the copy and
    refused, and a pass on a fresh read approves the A the API server's admission computes, above the last
    start's."""
    cp = control_plane
    (check,), tj, wl = dispatch_workload(cp, namespace)
    stale = kueue.get_trainjob(cp, tj)  # A = 0, nothing started
    outcome = await reconcile(fresh(api_client, "other-pass"), key(wl))
    assert (outcome.ready, outcome.new_a) == (True, 1)  # another pass approved; the execution starts with A 1
    assert kueue.a_and_floor(kueue.run_execution(cp, tj)) == (1, 1)
    kueue.readmit_cycle(cp, wl)
    ctx = cached(api_client, workload=kueue.get_workload(cp, wl), trainjob=stale)
    outcome = await reconcile(ctx, key(wl))
    # The stale copy says the next execution starts with A 1 again: its approval, preconditioned on the copy, is
    # refused, so nothing is approved on it.
    assert (outcome.ready, outcome.conflict) == (False, "trainjob")
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (1, 1)  # nothing written: A cannot fall
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Pending"
    outcome = await reconcile(fresh(api_client, "fresh"), key(wl))  # decided on a fresh read
    assert (outcome.ready, outcome.new_a) == (True, 2)
    assert kueue.a_and_floor(kueue.run_execution(cp, tj)) == (2, 2)  # the start numbers it above the last


@async_test
async def test_a_trainjob_not_yet_in_the_store_is_read_by_get(control_plane, namespace, api_client):
    """The first admission right after Start: the TrainJob watch may not have delivered it yet."""
    cp = control_plane
    (check,), _tj, wl = dispatch_workload(cp, namespace)
    ctx = cached(api_client, workload=kueue.get_workload(cp, wl))
    outcome = await reconcile(ctx, key(wl))
    assert (outcome.action, outcome.ready, outcome.new_a) == (Action.ADMIT, True, 1)
    assert api_reads(ctx) == {"trainjobs": 1}  # the GET
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Ready"


@async_test
async def test_our_own_writes_are_what_the_next_pass_reads(control_plane, namespace, api_client):
    """Two checks of ours: the second pass reads the TrainJob and the Workload as our first pass's writes left
    them (their responses, newer than the copies held), not our own pre-write copies, which would be refused."""
    cp = control_plane
    checks, tj, wl = dispatch_workload(cp, namespace, checks=2)
    js = create_jobset(cp, tj)
    ctx = cached(api_client, workload=kueue.get_workload(cp, wl), trainjob=kueue.get_trainjob(cp, tj))
    live(ctx.reads.jobsets, js, keep=keep_jobset)
    first = await reconcile(ctx, key(wl))  # records the JobSet UID, then Ready
    assert (first.check, first.ready, first.more, first.new_a) == (checks[0], True, True, 1)
    second = await reconcile(ctx, key(wl))  # from the record's response: nothing to record
    assert (second.check, second.ready, second.conflict, second.new_a) == (checks[1], True, None, 1)
    assert kueue.states(kueue.get_workload(cp, wl)) == dict.fromkeys(checks, "Ready")
    assert kueue.get_trainjob(cp, tj)["metadata"]["annotations"][ANNOTATION_JOBSET_UID] == js["metadata"]["uid"]
    assert api_reads(ctx) == {}  # every read from memory


def test_the_watches_spare_the_reads_of_a_readmission(control_plane, namespace):
    """With the controller running: a readmission of a job with no pods reads nothing but from memory (its
    pods' LIST aside), and a change to the TrainJob alone (a Release) wakes the gate."""
    cp = control_plane
    running = RunningController(cp, AgentConfig(leaseNamespace=namespace), f"in-test-{namespace}").start()
    try:

        def wait(what: str, fn) -> None:
            deadline = time.monotonic() + 20
            while not fn():
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                time.sleep(0.05)

        check = kueue.create_admission_check(cp)
        tj = kueue.create_dispatch_trainjob(cp, namespace)
        js = create_jobset(cp, tj)
        # The JobSet in memory first, so that its UID is recorded before the readmission (which then has
        # nothing to write but the Ready).
        wait("the JobSet in memory", lambda: running.call(lambda c: c.reads.jobsets.read(namespace, tj["metadata"]["name"])) is not None)  # fmt: skip
        wl = kueue.reserve(cp, kueue.create_workload(cp, tj, [check]))

        def state() -> str:
            return kueue.entry(kueue.get_workload(cp, wl), check)["state"]

        wait("Ready", lambda: state() == "Ready")
        assert kueue.get_trainjob(cp, tj)["metadata"]["annotations"][ANNOTATION_JOBSET_UID] == js["metadata"]["uid"]
        wait("the JobSet UID record in memory", lambda: running.call(lambda c: c.reads.trainjobs.entry(namespace, tj["metadata"]["name"]).rv) == int(kueue.get_trainjob(cp, tj)["metadata"]["resourceVersion"]))  # fmt: skip
        before = running.call(lambda c: dict(c.reads.counts))
        kueue.run_execution(cp, tj)
        wait("the execution in memory", lambda: running.call(lambda c: c.reads.trainjobs.entry(namespace, tj["metadata"]["name"]).rv) == int(kueue.get_trainjob(cp, tj)["metadata"]["resourceVersion"]))  # fmt: skip
        before = running.call(lambda c: dict(c.reads.counts))
        kueue.readmit_cycle(cp, wl)
        wait("Ready again", lambda: state() == "Ready")
        after = running.call(lambda c: dict(c.reads.counts))
        spent = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
        # One pass decided, from memory alone (a second pass may find nothing due, from memory: our Ready's own
        # event can beat its response).
        assert [k for k in spent if k[1] == "api"] == [], spent
        assert (spent[("trainjobs", "cache")], spent[("jobsets", "cache")]) == (1, 1), spent
        assert spent[("workloads", "cache")] in (1, 2), spent
        assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (1, 1)  # the gate did not write A
        assert kueue.a_and_floor(kueue.run_execution(cp, tj)) == (2, 2)  # the start raised it

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
        assert kueue.a_and_floor(kueue.run_execution(cp, tj)) == (3, 3)
    finally:
        running.stop()
