"""A lost worker's quota on a MultiKueue manager, decided (agent/multicluster/lost_quota.py): when Kueue keeps the quota of an
evicted dispatch job for the active Jobs MultiKueue copied from a worker, the patch that releases it, and the
index mark the manager's round looks for."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agent.gate.index import WorkloadIndex, hint_of, key_of
from agent.multicluster.lost_quota import kept_active, kept_message, release_patch, released_message
from contract.multicluster import MULTIKUEUE_MANAGED_BY
from harness.fixtures import trainjob
from tests.agent.domain.test_gate import workload
from tests.harness.kubelet import apply_json_patch


def stuck_trainjob(*active: int | None) -> dict[str, Any]:
    """A dispatch TrainJob MultiKueue manages, suspended by Kueue's eviction, its status as MultiKueue copied it
    from a worker: one entry per replicated job with ``active`` Jobs (None: the field absent)."""
    tj = trainjob()
    tj["spec"]["managedBy"] = MULTIKUEUE_MANAGED_BY
    tj["spec"]["suspend"] = True
    entries = [{"name": f"rj-{i}", "ready": 0, "succeeded": 0, "failed": 0} for i in range(len(active))]
    for entry, count in zip(entries, active, strict=True):
        if count is not None:
            entry["active"] = count
    tj["status"] = {"jobsStatus": entries}
    return tj


def evicted() -> dict[str, Any]:
    return workload(state="Pending", evicted=True)


def test_an_evicted_multikueue_job_whose_copied_status_shows_active_jobs_keeps_its_quota():
    assert kept_active(evicted(), stuck_trainjob(1, None, 2)) == 3


@pytest.mark.parametrize(
    ("why", "change"),
    [
        ("no active Job", lambda wl, tj: tj["status"]["jobsStatus"][0].update(active=0)),
        ("no status at all", lambda wl, tj: tj.pop("status")),
        ("not MultiKueue's: Trainer keeps its status", lambda wl, tj: tj["spec"].pop("managedBy")),
        ("not dispatch's", lambda wl, tj: (tj["spec"].pop("runtimePatches"), tj["metadata"].update(name="theirs"))),
        ("not suspended yet: Kueue's eviction comes first", lambda wl, tj: tj["spec"].update(suspend=False)),
        ("not evicted", lambda wl, tj: wl["status"]["conditions"].pop()),
        ("quota not reserved", lambda wl, tj: wl["status"]["conditions"][0].update(status="False")),
        ("finished", lambda wl, tj: wl["status"]["conditions"].append({"type": "Finished", "status": "True"})),
        ("another TrainJob of the name", lambda wl, tj: tj["metadata"].update(uid="another-uid")),
    ],
)
def test_nothing_is_kept_to_release(why: str, change: Any) -> None:
    wl, tj = evicted(), stuck_trainjob(1)
    change(wl, tj)
    assert kept_active(wl, tj) == 0, why


def test_nothing_to_release_without_a_workload_or_a_trainjob():
    assert kept_active(None, stuck_trainjob(1)) == 0
    assert kept_active(evicted(), None) == 0


def test_the_release_clears_only_the_active_counts_and_is_preconditioned_on_the_trainjob_as_read():
    tj = stuck_trainjob(2, 0, None, 1)
    ops = release_patch(tj)
    assert ops[:2] == [
        {"op": "test", "path": "/metadata/uid", "value": "tj-uid"},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "100"},
    ]
    released = apply_json_patch(copy.deepcopy(tj), ops)
    assert [e.get("active") for e in released["status"]["jobsStatus"]] == [0, 0, None, 0]
    assert kept_active(evicted(), released) == 0
    unchanged = copy.deepcopy(tj)
    for before, after in zip(unchanged["status"]["jobsStatus"], released["status"]["jobsStatus"], strict=True):
        before.pop("active", None)
        after.pop("active", None)
        assert before == after
    assert {k: v for k, v in released.items() if k != "status"} == {k: v for k, v in tj.items() if k != "status"}


def test_the_events_say_why_the_quota_is_kept_and_what_released_it():
    kept = kept_message(2, "waiting to see every worker where the previous execution may still run: worker w-1: x")
    assert "keeps its quota" in kept
    assert "2 active Job(s)" in kept
    assert kept.endswith("worker w-1: x")
    assert "cleared the 3 active Job(s)" in released_message(3)


def test_the_index_marks_the_workloads_evicted_with_their_quota_kept():
    index = WorkloadIndex()
    kept, running, released = evicted(), workload(), workload(evicted=True, reserved=False)
    for i, wl in enumerate((kept, running, released)):
        wl["metadata"]["name"] = f"wl-{i}"
        index.put(key_of(wl), hint_of(wl))
    assert index.kept_keys() == [key_of(kept)]
    index.put(key_of(kept), hint_of(workload() | {"metadata": kept["metadata"]}))
    assert index.kept_keys() == []


def test_the_round_goes_on_past_a_failed_sweep_and_a_failed_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """The leader's round over its workers runs beside its other tasks in one TaskGroup: a failure in it must
    never end them (nor the round), only be logged and left to the next round."""
    import asyncio

    from agent.gate import worker_round

    released: list[str] = []

    async def sweep(reads: object, workers: object) -> int:
        raise RuntimeError("the manager's API refused a GET")

    async def release(kube: object, reads: object, workers: object, namespace: str, name: str, taints: object) -> bool:
        released.append(name)
        if name == "wl-0":
            raise RuntimeError("a worker's API hung up")
        return True

    async def stop(seconds: float) -> None:
        raise asyncio.CancelledError

    monkeypatch.setattr(worker_round, "sweep_replicas", sweep)
    monkeypatch.setattr(worker_round, "release_kept_quota", release)
    monkeypatch.setattr(worker_round.asyncio, "sleep", stop)
    index = WorkloadIndex()
    for i in range(2):
        wl = evicted()
        wl["metadata"]["name"] = f"wl-{i}"
        index.put(key_of(wl), hint_of(wl))
    round_ = worker_round.WorkerRound(None, None, None, index.kept_keys, taints=(), seconds=1)  # type: ignore[arg-type]
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(round_.run())
    assert released == ["wl-0", "wl-1"]
