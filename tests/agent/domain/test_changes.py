"""The change feed's state (agent/domain/changes.py): what a Watch reports after a version, on one replica and
across replicas that read the same streams in another order."""

from __future__ import annotations

import random
from typing import Any

import pytest

from agent.domain.changes import (
    DELETED,
    MAX_TOMBSTONES,
    TOMBSTONE_SECONDS,
    UNKNOWN,
    Feed,
    Position,
    decode,
    encode,
    job_phase,
    trim_trainjob,
    trim_workload,
)
from agent.domain.status import phase
from contract.keys import ANNOTATION_ADMISSION_GATED_BY, ANNOTATION_OPENED, GATE, LABEL_QUEUE_NAME, OPENED_TRUE

NS = "team-a"
CHECK = "dispatch-admission"


def _name(i: int) -> str:
    return f"dj-01j{i:023d}-s1"


def trainjob(i: int, rv: int, *, ns: str = NS, kueue: bool = True, gated: bool = False, suspend: bool = True,
             ended: str | None = None, deleting: bool = False, name: str | None = None) -> dict[str, Any]:  # fmt: skip
    annotations = {ANNOTATION_ADMISSION_GATED_BY: GATE} if gated else {ANNOTATION_OPENED: OPENED_TRUE}
    tj: dict[str, Any] = {
        "metadata": {
            "name": name or _name(i),
            "namespace": ns,
            "uid": f"tj-{i}",
            "resourceVersion": str(rv),
            "labels": {LABEL_QUEUE_NAME: "q"} if kueue else {},
            "annotations": annotations,
            "managedFields": [{"manager": "x"}],
        },
        "spec": {"suspend": suspend, "trainer": {"image": "big"}},
        "status": {"conditions": [{"type": ended, "status": "True"}] if ended else []},
    }
    if deleting:
        tj["metadata"]["deletionTimestamp"] = "2026-12-06T08:00:00Z"
    return tj


def workload(i: int, rv: int, *, reserved: bool = False, pending: bool = False, active: bool = True,
             wl: str = "") -> dict[str, Any]:  # fmt: skip
    return {
        "metadata": {
            "name": f"trainjob-{i}{wl}",
            "namespace": NS,
            "uid": f"wl-{i}{wl}",
            "resourceVersion": str(rv),
            "ownerReferences": [
                {
                    "apiVersion": "trainer.kubeflow.org/v1alpha1",
                    "kind": "TrainJob",
                    "name": _name(i),
                    "uid": f"tj-{i}",
                    "controller": True,
                }
            ],
        },
        "spec": {"active": active},
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True"}] if reserved else [],
            "admissionChecks": [{"name": CHECK, "state": "Pending", "message": "long"}] if pending else [],
        },
    }


def check(rv: int) -> dict[str, Any]:
    return {"metadata": {"name": CHECK, "resourceVersion": str(rv)}}


def phases(feed: Feed, v: Position | None) -> dict[str, str]:
    return {j.trainjob["metadata"]["name"]: j.phase for j in feed.since(NS, v)}


def test_a_snapshot_lists_dispatchs_jobs_of_the_namespace_with_their_phase():
    feed = Feed()
    feed.admission_checks([CHECK], check(1))
    feed.trainjob(trainjob(1, 10, gated=True))
    feed.trainjob(trainjob(2, 11, kueue=False, suspend=False))
    feed.trainjob(trainjob(3, 12, ns="team-b"))
    feed.trainjob(trainjob(4, 13, name="not-dispatchs"))
    assert phases(feed, None) == {_name(1): "Gated", _name(2): "Running"}


def test_a_change_after_a_version_is_reported_once_as_it_is_now():
    feed = Feed()
    feed.admission_checks([CHECK], check(1))
    feed.trainjob(trainjob(1, 10))
    feed.trainjob(trainjob(2, 11))
    v = feed.position
    assert phases(feed, v) == {}
    assert feed.workload(workload(1, 12, reserved=True, pending=True))
    assert feed.trainjob(trainjob(1, 13, suspend=False))
    assert phases(feed, v) == {_name(1): "Running"}
    assert phases(feed, feed.position) == {}


def test_an_event_that_changes_no_phase_reports_nothing():
    feed = Feed()
    feed.trainjob(trainjob(1, 10))
    v = feed.position
    assert not feed.trainjob(trainjob(1, 11))  # e.g. a label added
    assert not feed.workload(workload(1, 12))  # a Workload that leaves it Queued
    assert phases(feed, v) == {}


def test_a_deletion_timestamp_is_a_change_and_a_deleted_job_is_reported_gone_but_not_in_a_snapshot():
    feed = Feed()
    feed.trainjob(trainjob(1, 10, suspend=False, kueue=False))
    v = feed.position
    feed.trainjob(trainjob(1, 11, suspend=False, kueue=False, deleting=True))
    assert [(j.phase, j.deletion_timestamp) for j in feed.since(NS, v)] == [("Running", "2026-12-06T08:00:00Z")]
    feed.trainjob_gone(trainjob(1, 12), now=0)
    assert phases(feed, v) == {_name(1): DELETED}
    assert phases(feed, None) == {}


def test_a_workload_seen_before_its_trainjob_counts_once_the_trainjob_comes():
    feed = Feed()
    feed.admission_checks([CHECK], check(1))
    assert not feed.workload(workload(1, 9, reserved=True, pending=True))
    feed.trainjob(trainjob(1, 10))
    assert phases(feed, None) == {_name(1): "Admitting"}


def test_two_workloads_claiming_a_job_make_it_unknown_and_a_gone_one_restores_it():
    feed = Feed()
    feed.trainjob(trainjob(1, 10))
    feed.workload(workload(1, 11))
    feed.workload(workload(1, 12, wl="b"))
    assert phases(feed, None) == {_name(1): UNKNOWN}
    feed.workload_gone(workload(1, 13, wl="b"))
    assert phases(feed, None) == {_name(1): "Queued"}


def test_a_new_list_takes_away_what_it_did_not_list():
    feed = Feed()
    feed.trainjob(trainjob(1, 10))
    feed.trainjob(trainjob(2, 11))
    v = feed.position
    feed.trainjob(trainjob(1, 20))
    assert feed.relisted(0, {"tj-1"}, now=0)
    assert phases(feed, v) == {_name(2): DELETED}


def test_an_older_copy_never_replaces_a_newer():
    feed = Feed()
    feed.trainjob(trainjob(1, 20, suspend=False, kueue=False))
    assert not feed.trainjob(trainjob(1, 10, kueue=False))
    assert phases(feed, None) == {_name(1): "Running"}


def test_a_checks_change_recomputes_kueue_jobs_at_its_own_position():
    feed = Feed()
    feed.trainjob(trainjob(1, 10))
    feed.workload(workload(1, 11, reserved=True, pending=True))
    assert phases(feed, None) == {_name(1): "Queued"}  # the check is not known as ours yet
    v = feed.position
    assert feed.admission_checks([CHECK], check(30))
    assert phases(feed, v) == {_name(1): "Admitting"}
    assert feed.position[2] == 30


def test_a_version_from_before_a_list_is_expired_and_one_after_it_is_not():
    """A replica that listed at version 40 (after a restart, or a relist) knows no deletion before it."""
    feed = Feed()
    feed.trainjob(trainjob(1, 10))
    feed.listed(0, "40")
    assert feed.position[0] == 40
    assert feed.expired((39, 0, 0))
    assert not feed.expired((40, 0, 0))
    feed.listed(1, "55")  # a Workload list moves its own position only
    assert (feed.position[1], feed.horizon) == (55, 40)


def test_forgotten_tombstones_expire_older_versions():
    feed = Feed()
    feed.trainjob(trainjob(1, 10))
    v = feed.position
    feed.trainjob_gone(trainjob(1, 11), now=100)
    feed.forget(now=100 + TOMBSTONE_SECONDS - 1)
    assert not feed.expired(v)
    feed.forget(now=100 + TOMBSTONE_SECONDS + 1)
    assert feed.expired(v)
    assert not feed.expired(feed.position)


def test_at_most_max_tombstones_are_kept():
    feed = Feed()
    for i in range(MAX_TOMBSTONES + 2):
        feed.trainjob(trainjob(i, 10 + 2 * i))
        feed.trainjob_gone(trainjob(i, 11 + 2 * i), now=i / 1000)
    feed.forget(now=MAX_TOMBSTONES / 1000 + 1)
    assert len(feed.jobs) == MAX_TOMBSTONES
    assert feed.horizon == 13  # the second deletion's position


@pytest.mark.parametrize("token", ["", "1.2", "a.b.c", "1.2.3.4", "-1.2.3", "9" * 21 + ".1.1"])
def test_a_token_that_is_not_ours_is_refused(token):
    assert decode(token) is None


def test_a_token_names_its_position():
    assert decode(encode((12, 0, 345))) == (12, 0, 345)


def test_the_trimmed_objects_give_the_phase_the_whole_ones_give():
    cases = [
        (trainjob(1, 1, gated=True), None),
        (trainjob(1, 1, ended="Complete"), None),
        (trainjob(1, 1, kueue=False, suspend=False), None),
        (trainjob(1, 1), workload(1, 1, reserved=True, pending=True)),
        (trainjob(1, 1), workload(1, 1, active=False)),
        (trainjob(1, 1, suspend=False), workload(1, 1)),
    ]
    for tj, wl in cases:
        whole = phase(tj, wl, [CHECK])
        assert phase(trim_trainjob(tj), trim_workload(wl) if wl else None, [CHECK]) == whole


# -- across replicas -----------------------------------------------------------------------------------------


def _stream(rng: random.Random, jobs: int, length: int) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """A TrainJob stream and a Workload stream: each event a random state of a random job, with rising rvs."""
    tjs: list[tuple[str, Any]] = []
    wls: list[tuple[str, Any]] = []
    deleted: set[int] = set()
    for rv in range(1, length + 1):
        i = rng.randrange(jobs)
        if rng.random() < 0.5:
            if i in deleted:
                continue  # a uid never comes back
            if rng.random() < 0.05:
                deleted.add(i)
                tjs.append(("DELETED", trainjob(i, rv)))
            else:
                tjs.append(("MODIFIED", trainjob(i, rv, suspend=rng.random() < 0.5, gated=rng.random() < 0.2)))
        else:
            state = {"reserved": rng.random() < 0.5, "pending": rng.random() < 0.5, "active": rng.random() < 0.8}
            wls.append(("MODIFIED", workload(i, rv, **state)))
    return tjs, wls


def _apply(feed: Feed, which: str, event: tuple[str, Any]) -> None:
    kind, obj = event
    if which == "tj":
        feed.trainjob_gone(obj, now=0) if kind == "DELETED" else feed.trainjob(obj)
    else:
        feed.workload(obj)


class Replica:
    """A feed reading both streams at its own pace and in its own interleaving."""

    def __init__(self, rng: random.Random, tjs: list[Any], wls: list[Any]) -> None:
        self.rng, self.tjs, self.wls = rng, tjs, wls
        self.feed, self.read = Feed(), {"tj": 0, "wl": 0}
        self.feed.admission_checks([CHECK], check(0))

    def step(self, n: int) -> None:
        for _ in range(n):
            left = [w for w, s in (("tj", self.tjs), ("wl", self.wls)) if self.read[w] < len(s)]
            if not left:
                return
            which = self.rng.choice(left)
            _apply(self.feed, which, (self.tjs if which == "tj" else self.wls)[self.read[which]])
            self.read[which] += 1


@pytest.mark.parametrize("seed", range(40))
def test_a_caller_moving_between_replicas_ends_with_every_jobs_last_phase(seed):
    """Whatever replica answers each call, a caller that applies each answer's items ends, once the replicas have
    read everything, with each job's phase as it is: no change is lost between replicas (items may repeat)."""
    rng = random.Random(seed)
    tjs, wls = _stream(rng, jobs=4, length=120)
    replicas = [Replica(random.Random(seed * 7 + k), tjs, wls) for k in range(3)]
    seen: dict[str, str] = {}
    version: Position | None = None
    for _ in range(60):
        for r in replicas:
            r.step(rng.randrange(0, 5))
        answering = rng.choice(replicas).feed
        for job in answering.since(NS, version):
            seen[job.trainjob["metadata"]["name"]] = job.phase
        version = answering.position
    for r in replicas:
        r.step(10_000)
    truths = [{j.trainjob["metadata"]["name"]: j.phase for j in r.feed.jobs.values()} for r in replicas]
    assert truths[1] == truths[0] == truths[2], "replicas that read the same streams agree"
    final = rng.choice(replicas).feed
    for job in final.since(NS, version):
        seen[job.trainjob["metadata"]["name"]] = job.phase
    truth = {j.trainjob["metadata"]["name"]: job_phase(j, final.checks) for j in final.jobs.values()}
    assert {name: seen.get(name, DELETED) for name in truth} == truth
