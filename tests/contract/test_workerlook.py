"""What of a job may still run on a MultiKueue worker, decided once (contract/workerlook.py ``on_worker``) for the
manager's gate (agent/multicluster/workers.py ``worker_blockers``) and for Stop and Status (agent/multicluster/worker_remains.py ``remains``):
only an end or the object's absence counts as nothing more to come, and both callers agree on every look."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from agent.multicluster.worker_remains import remains
from agent.multicluster.workers import worker_blockers
from contract.multicluster import MULTIKUEUE_ORIGIN_LABEL
from contract.workerlook import WorkerLook, job_of_jobset, on_worker
from tests.agent.domain.test_nodeloss import node
from tests.agent.multicluster.test_workers import _job, _pod_of

NAME = "dj-x"
NOW = dt.datetime(2026, 12, 5, 12, 0, tzinfo=dt.UTC)
ENDED = {"conditions": [{"type": "Complete", "status": "True"}]}


def copy(*, origin: bool = True, deleting: bool = False, **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": NAME, "labels": {MULTIKUEUE_ORIGIN_LABEL: "multikueue"} if origin else {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-05T11:00:00Z"
    return {"metadata": meta, "status": status}


def jobset(*, deleting: bool = False, **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": NAME}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-05T11:00:00Z"
    return {"metadata": meta, "status": status}


def job(name: str = "dj-x-node-0", owner: str = NAME, *, suspend: bool = False, **status: Any) -> dict[str, Any]:
    found = _job(name, owner)
    return {**found, "spec": {"suspend": suspend}, "status": status}


def claim(renewed: str) -> dict[str, Any]:
    return {"metadata": {"name": "dispatch-claim-u"}, "spec": {"renewTime": renewed, "leaseDurationSeconds": 60}}


RUNNING = _pod_of("p-0", "dj-x-node-0", node="n1")

LOOKS: dict[str, tuple[WorkerLook, bool]] = {
    # (the look, whether something of the job may still run or start there)
    "nothing": (WorkerLook([], {}, {}), False),
    "a running pod": (WorkerLook([RUNNING], {"dj-x-node-0": job()}, {"n1": node("n1")}), True),
    "a copy not finished": (WorkerLook([], {}, {}, copy=copy()), True),
    "a copy being deleted": (WorkerLook([], {}, {}, copy=copy(deleting=True)), True),
    "a copy finished": (WorkerLook([], {}, {}, copy=copy(**ENDED)), False),
    "a TrainJob of the name, not MultiKueue's": (WorkerLook([], {}, {}, copy=copy(origin=False)), False),
    "a JobSet suspended": (WorkerLook([], {}, {}, jobset=jobset(conditions=[{"type": "Suspended", "status": "True"}])), True),
    "a JobSet being deleted": (WorkerLook([], {}, {}, jobset=jobset(deleting=True)), True),
    "a JobSet in its terminal state": (WorkerLook([], {}, {}, jobset=jobset(terminalState="Failed")), False),
    "a Job suspended": (WorkerLook([], {}, {}, all_jobs=[job(suspend=True)]), True),
    "a Job finished": (WorkerLook([], {}, {}, all_jobs=[job(**ENDED)]), False),
    "a Job of another JobSet": (WorkerLook([], {}, {}, all_jobs=[job("other-node-0", "other")]), False),
    "a claim still fresh": (WorkerLook([], {}, {}, claim=claim("2026-12-05T11:59:30.000000Z")), True),
    "a claim lapsed": (WorkerLook([], {}, {}, claim=claim("2026-12-05T11:58:00.000000Z")), False),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(LOOKS))
def test_the_gate_and_stop_agree_on_what_may_still_run(case: str):
    look, may_run = LOOKS[case]
    assert on_worker(NAME, look, [("p-0", "Running")] if look.pods else [], NOW).may_run is may_run
    assert bool(worker_blockers("w-1", NAME, look, (), now=NOW)) is may_run
    assert remains("w-1", "ml", NAME, look, (), now=NOW).may_still_run is may_run


def test_what_is_the_job_s_is_named_and_only_what_has_not_ended_may_run():
    look = WorkerLook(
        [],
        {},
        {},
        copy=copy(**ENDED),
        jobset=jobset(),
        all_jobs=[job("dj-x-node-1", **ENDED), job("dj-x-node-0"), job("other-node-0", "other")],
    )
    found = on_worker(NAME, look, [], NOW)
    assert found.copy is look.copy
    assert found.jobs == ("dj-x-node-0", "dj-x-node-1")
    assert (found.copy_runs, found.jobset_runs, found.jobs_running) == (False, True, ("dj-x-node-0",))
    assert found.claim is None
    blockers = worker_blockers("w-1", NAME, look, (), now=NOW)
    assert [b.why for b in blockers] == [
        f"JobSet {NAME} there is not finished",
        "Job(s) dj-x-node-0 there are not finished: they may still make pods",
    ]


def test_only_a_job_whose_controller_is_a_jobset_of_the_name_is_the_job_s():
    assert job_of_jobset(job(), NAME)
    assert not job_of_jobset(job("other-node-0", "other"), NAME)
    assert not job_of_jobset({"metadata": {"name": "orphan"}}, NAME)
    foreign = job()
    foreign["metadata"]["ownerReferences"][0]["apiVersion"] = "example.com/v1"
    assert not job_of_jobset(foreign, NAME)
