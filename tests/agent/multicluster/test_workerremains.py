"""What of a job is left on the workers of a MultiKueue manager, decided (agent/multicluster/worker_remains.py): which workers
Stop, Status after Stop and Start read, what on a worker is the job's, when nothing of it may run there, Ceased
across the workers, and Start's refusal naming the worker."""

from __future__ import annotations

from typing import Any

from agent.domain.status import PodStatus, Status
from agent.multicluster.worker_remains import (
    Remains,
    ceased_on_workers,
    ceased_when_gone,
    idle_on_workers,
    left_on_workers,
    plan_remains,
    planned,
    remains,
    start_refusal,
    unread,
)
from contract.multicluster import MULTIKUEUE_ORIGIN_LABEL
from contract.workerlook import WorkerLook
from tests.agent.domain.test_nodeloss import node
from tests.agent.multicluster.test_workers import _job, _pod_of, cluster

NS, NAME = "ml", "dj-x"


def copy(**status: Any) -> dict[str, Any]:
    """MultiKueue's copy of the TrainJob on a worker (the origin label), not suspended."""
    meta: dict[str, Any] = {"name": NAME, "namespace": NS, "labels": {MULTIKUEUE_ORIGIN_LABEL: "manager"}}
    return {"metadata": meta, "spec": {"suspend": False}, "status": status}


def jobset(*conditions: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": NAME, "namespace": NS}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}


def job(name: str = "dj-x-node-0", *, done: bool = False, suspend: bool = False) -> dict[str, Any]:
    found = _job(name, NAME)
    found["spec"] = {"suspend": suspend}
    if done:
        found["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    return found


def find(
    trainjob: dict[str, Any] | None = None,
    js: dict[str, Any] | None = None,
    jobs: tuple[dict[str, Any], ...] = (),
    pods: tuple[dict[str, Any], ...] = (),
) -> WorkerLook:
    named = {j["metadata"]["name"]: j for j in jobs}
    return WorkerLook(list(pods), named, {"n1": node("n1")}, copy=trainjob, jobset=js, all_jobs=list(jobs))


RUNNING = _pod_of("p-0", "dj-x-node-0", node="n1")
ENDED = _pod_of("p-1", "dj-x-node-0", node="n1", phase="Succeeded", containers=("terminated",))


def test_every_worker_with_a_credential_is_read_fenced_or_not_and_one_named_without_a_credential_cannot_be():
    plan = plan_remains(
        {"w-1", "w-2"}, [cluster("w-1"), cluster("w-2", "powered-off"), cluster("w-3"), cluster("w-4", "powered-off")]
    )
    assert plan.read == ("w-1", "w-2")
    assert plan.fenced == ("w-2", "w-4")
    assert plan.uncredentialed == ("w-3",)
    settled = planned(plan)
    assert [(r.cluster, r.read, r.may_still_run, r.fenced) for r in settled] == [
        ("w-4", False, False, True),  # fenced, no credential: the fence's word
        ("w-3", False, True, False),  # no credential: never taken as empty
    ]


def test_a_worker_that_cannot_be_read_may_still_run_the_job_unless_it_is_fenced():
    plan = plan_remains({"w-1", "w-2"}, [cluster("w-2", "powered-off")])
    assert unread("w-1", "cannot be read: HTTP 503", plan) == Remains(
        "w-1", False, (), True, "cannot be read: HTTP 503"
    )
    fenced = unread("w-2", "cannot be read: HTTP 503", plan)
    assert (fenced.may_still_run, fenced.fenced) == (False, True)
    assert "fenced by an administrator" in fenced.reason


def test_the_copy_its_jobset_jobs_and_running_pods_are_named_and_may_still_run():
    left = remains("w-1", NS, NAME, find(copy(), jobset(), (job(),), (RUNNING, ENDED)))
    assert left.orphans == (f"{NS}/trainjob/{NAME}", f"{NS}/jobset/{NAME}", f"{NS}/job/dj-x-node-0", f"{NS}/pod/p-0")
    assert left.read
    assert left.may_still_run
    assert left.reason.startswith("1 pod(s) may still run: p-0 (")
    assert "MultiKueue's copy of the TrainJob is there and has not finished" in left.reason
    assert "1 Job(s) not finished may still create pods: dj-x-node-0" in left.reason


def test_nothing_there_is_nothing_left():
    assert remains("w-1", NS, NAME, find()) == Remains("w-1", True, (), False, "nothing of the job is there")


def test_a_trainjob_of_the_name_without_the_origin_label_is_not_the_job():
    stranger = copy()
    del stranger["metadata"]["labels"]
    assert remains("w-1", NS, NAME, find(stranger)).orphans == ()


def test_a_finished_copy_with_its_pods_ended_is_named_but_runs_nothing():
    done = copy(conditions=[{"type": "Complete", "status": "True"}])
    left = remains("w-1", NS, NAME, find(done, jobset("Completed"), (job(done=True),), (ENDED,)))
    assert left.orphans == (f"{NS}/trainjob/{NAME}", f"{NS}/jobset/{NAME}", f"{NS}/job/dj-x-node-0")
    assert not left.may_still_run
    assert left.reason == "nothing of the job there may run or start"


def test_a_copy_being_deleted_may_run_until_it_is_gone_or_has_finished():
    # A deletion takes effect only once the object is gone: the gate's rule (contract/workerlook.py).
    deleting = copy()
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    busy = remains("w-1", NS, NAME, find(deleting, jobset("Suspended")))
    assert busy.may_still_run
    assert "MultiKueue's copy of the TrainJob is being deleted and has not finished" in busy.reason
    assert "its JobSet has not finished" in busy.reason  # Suspended is undone when the copy resumes
    done = copy(conditions=[{"type": "Failed", "status": "True"}])
    done["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not remains("w-1", NS, NAME, find(done, jobset("Failed"))).may_still_run


def test_a_jobset_may_create_pods_until_it_has_finished_whether_its_copy_is_there_or_not():
    assert remains("w-1", NS, NAME, find(None, jobset())).may_still_run
    assert remains("w-1", NS, NAME, find(None, jobset(deleting=True))).may_still_run
    assert remains("w-1", NS, NAME, find(None, jobset("Suspended"))).may_still_run
    assert not remains("w-1", NS, NAME, find(None, jobset("Failed"))).may_still_run
    # A finished copy does not answer for a JobSet that has not finished.
    done = copy(conditions=[{"type": "Complete", "status": "True"}])
    assert remains("w-1", NS, NAME, find(done, jobset())).may_still_run


def test_a_job_may_create_pods_until_it_has_finished_and_only_the_jobset_s_jobs_count():
    assert remains("w-1", NS, NAME, find(jobs=(job(),))).may_still_run
    assert remains("w-1", NS, NAME, find(jobs=(job(suspend=True),))).may_still_run  # resumed with its JobSet
    assert not remains("w-1", NS, NAME, find(jobs=(job(done=True),))).may_still_run
    someone_else = _job("other-node-0", "other")
    assert remains("w-1", NS, NAME, find(jobs=(someone_else,))) == remains("w-1", NS, NAME, find())


def test_ceased_across_the_workers_needs_every_one_read_and_empty_and_names_those_that_hold():
    empty = remains("w-1", NS, NAME, find())
    held = remains("w-2", NS, NAME, find(copy(), pods=(RUNNING,)))
    down = unread("w-3", "cannot be read: HTTP 503")
    assert ceased_on_workers([empty]) == (True, "nothing of it may run on any worker (read: w-1)")
    ok, why = ceased_on_workers([empty, held, down])
    assert not ok
    assert why.startswith("worker w-2: 1 pod(s) may still run: p-0")
    assert "; worker w-3: cannot be read: HTTP 503" in why
    fenced = planned(plan_remains(set(), [cluster("w-4", "powered-off")]))
    assert ceased_on_workers([empty, *fenced]) == (True, "nothing of it may run on any worker (read: w-1; fenced: w-4)")


def test_ceased_when_gone_also_needs_nothing_left_here_that_runs_pods():
    empty = [remains("w-1", NS, NAME, find())]
    assert ceased_when_gone([f"{NS}/trainingruntime/{NAME}"], empty)[0]
    ok, why = ceased_when_gone([f"{NS}/jobset/{NAME}"], empty)
    assert not ok
    assert why == f"the TrainJob is gone, but it left {NS}/jobset/{NAME} on this cluster"
    ok, why = ceased_when_gone([], [remains("w-1", NS, NAME, find(copy()))])
    assert not ok
    assert why.startswith("the TrainJob is gone, but something of it may still run on a worker: worker w-1: ")


def _status(*pods: PodStatus) -> Status:
    return Status(phase="Running", mode="kueue", gate="open", held_by=(), check_state=None, check_message=None, a=3,
                  floor=3, j=None, r=None, executions=(), pods=pods, ceased=False, foreign=(),
                  ceased_reason="it runs through MultiKueue")  # fmt: skip


def test_a_stopping_trainjob_is_ceased_once_nothing_may_run_on_any_worker_or_here():
    stopping_on_workers = lambda s, ws: idle_on_workers(s, "it is being deleted", ws)  # noqa: E731
    empty = [remains("w-1", NS, NAME, find())]
    s = stopping_on_workers(_status(), empty)
    assert (s.ceased, s.workers) == (True, tuple(empty))
    assert s.ceased_reason == "it is being deleted, and nothing of it may run on any worker (read: w-1)"
    held = stopping_on_workers(_status(), [unread("w-1", "cannot be read: x")])
    assert not held.ceased
    assert held.ceased_reason == (
        "it is being deleted, but something of it may still run on a worker: worker w-1: cannot be read: x"
    )
    here = PodStatus("p", "n1", "Running", "Running", True, "running", 3, 0)
    assert not stopping_on_workers(_status(here), empty).ceased


def test_an_ended_or_held_trainjob_is_ceased_only_once_no_worker_holds_anything_of_it_that_may_run():
    """On a manager, a job that ended (or is held) starts nothing more by itself, but its copies' pods are on the
    workers: Ceased is read over every worker, as after a Stop."""
    done = remains("w-2", NS, NAME, find(copy(conditions=[{"type": "Complete", "status": "True"}])))
    s = idle_on_workers(_status(), "it ended (Complete)", [remains("w-1", NS, NAME, find()), done])
    assert s.ceased
    assert s.ceased_reason == "it ended (Complete), and nothing of it may run on any worker (read: w-1, w-2)"
    running = remains("w-2", NS, NAME, find(copy()))
    s = idle_on_workers(_status(), "its Workload is held (inactive)", [running])
    assert not s.ceased
    assert s.ceased_reason.startswith("its Workload is held (inactive), but something of it may still run on a worker")
    assert not idle_on_workers(_status(), "it ended (Complete)", [unread("w-1", "cannot be read: x")]).ceased


def test_start_refuses_naming_the_worker_that_holds_something_of_an_earlier_trainjob_of_the_name():
    empty = remains("w-1", NS, NAME, find())
    done = remains("w-2", NS, NAME, find(copy(conditions=[{"type": "Failed", "status": "True"}])))
    assert left_on_workers([empty, done]) == [done]
    refusal = start_refusal(NS, NAME, [empty, done])
    assert refusal is not None
    kind, message = refusal
    assert kind == "conflict"
    assert f"(worker w-2: {NS}/trainjob/{NAME})" in message
    assert "nothing was written" in message
    assert start_refusal(NS, NAME, [empty]) is None


def test_start_refuses_as_unavailable_while_a_worker_cannot_be_read_and_not_once_it_is_fenced():
    refusal = start_refusal(NS, NAME, [unread("w-1", "cannot be read: HTTP 503")])
    assert refusal is not None
    assert refusal[0] == "unavailable"
    assert "worker w-1: cannot be read: HTTP 503" in refusal[1]
    fenced = unread("w-1", "cannot be read: HTTP 503", plan_remains({"w-1"}, [cluster("w-1", "powered-off")]))
    assert start_refusal(NS, NAME, [fenced]) is None


def test_a_fence_true_is_no_word_for_a_worker_after_the_trainjob_is_gone():
    # With the TrainJob gone, no record says whether the job ran there: only a worker declared powered off is taken
    # at its word when it cannot be read.
    plan = plan_remains({"w-1"}, [cluster("w-1", "true")])
    assert plan.fenced == ()
    assert plan.read == ("w-1",)
