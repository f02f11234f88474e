"""On a MultiKueue worker (docs/multicluster.md, guarantee 3): the readmission gate approves MultiKueue's copy of a
Workload at its first admission only, recording it first; and the start of MultiKueue's copy of a TrainJob records
A and never raises it, so a second start of the same copy is refused. Elsewhere, and for what is not a copy,
nothing changes."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agent.domain.decide import (
    WORKER_FIRST_MESSAGE,
    WORKER_OUT_OF_CONTACT_MESSAGE,
    Action,
    decide,
    worker_held_message,
)
from contract.admission import admission_count, admission_started, preconditions, unsuspend_ops
from contract.identity import attempt_token, epoch, r_of
from contract.keys import ANNOTATION_WORKER_ADMITTED, LEASE_MANAGER_CONTACT
from contract.multicluster import MULTIKUEUE_ORIGIN_LABEL, ROLE_MANAGER, ROLE_SINGLE, ROLE_WORKER
from harness.fixtures import gate_approved
from tests.agent.domain.test_gate import CHECK, NOW, opened, workload
from tests.harness.kubelet import apply_json_patch
from tests.webhook.test_multicluster_roles import WORKER, remote
from tests.webhook.test_webhook_rules import DISPATCH, KUEUE, admit, denied_by, opened_kueue, request
from webhook.admission import mutate
from webhook.config import Config

OTHER_OWNER = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "job-uid", "controller": True}


def copy_workload(*, owned: bool = False, recorded: str | None = None, **kw: Any) -> dict[str, Any]:
    """MultiKueue's copy of a Workload on a worker: the origin label; no owner before MultiKueue creates the
    TrainJob here (``owned``: after, adopted by it)."""
    wl = remote(workload(**kw))
    if not owned and "owner" not in kw:
        wl["metadata"].pop("ownerReferences")
    if recorded is not None:
        wl["metadata"].setdefault("annotations", {})[ANNOTATION_WORKER_ADMITTED] = recorded
    return wl


def go(wl: dict[str, Any], *, role: str = ROLE_WORKER, tj: Any = "default", in_contact: bool = True):
    return decide(
        in_contact=in_contact,
        workload=wl,
        check=CHECK,
        trainjob=remote(opened()) if tj == "default" else tj,
        jobset=None,
        pods=[],
        blockers=[],
        now=NOW,
        role=role,
    )


def _entry(d) -> dict[str, Any]:
    return d.check_write["status"]["admissionChecks"][0]


# -- The worker's gate ---------------------------------------------------------------------------------------------


def test_the_first_admission_of_a_copy_is_approved_with_the_record_written_first():
    wl = copy_workload()
    d = go(wl, tj=None)  # MultiKueue creates the TrainJob only once the copy is admitted
    assert (d.action, d.message) == (Action.ADMIT, WORKER_FIRST_MESSAGE)
    # The record: a JSON Patch preconditioned on the Workload as read, adding only the annotation.
    assert d.workload_patch == [
        *preconditions(wl),
        {"op": "add", "path": "/metadata/annotations", "value": {ANNOTATION_WORKER_ADMITTED: NOW}},
    ]
    assert apply_json_patch(wl, d.workload_patch)["metadata"]["annotations"] == {ANNOTATION_WORKER_ADMITTED: NOW}
    assert (_entry(d)["state"], _entry(d)["message"]) == ("Ready", WORKER_FIRST_MESSAGE)
    assert d.check_write["metadata"]["resourceVersion"] == wl["metadata"]["resourceVersion"]
    assert d.trainjob_patch is None  # nothing of the TrainJob is the worker's gate's to write: it never raises A


def test_the_record_goes_beside_other_annotations():
    wl = copy_workload()
    wl["metadata"]["annotations"] = {"other.example/x": "y"}
    d = go(wl, tj=None)
    written = apply_json_patch(wl, d.workload_patch)["metadata"]["annotations"]
    assert written == {"other.example/x": "y", ANNOTATION_WORKER_ADMITTED: NOW}


@pytest.mark.parametrize("owned", [False, True])
def test_a_later_admission_of_a_recorded_copy_is_held(owned):
    # Evicted on this worker and re-admitted here: with or without its TrainJob (MultiKueue may not have made it
    # yet, or it adopted the copy).
    wl = copy_workload(owned=owned, recorded="2026-11-29T09:30:00Z", message="")
    d = go(wl, tj=remote(opened()) if owned else None)
    assert d.action is Action.HOLD
    assert d.message == worker_held_message("2026-11-29T09:30:00Z")
    assert "goes back through the manager" in d.message
    assert (d.workload_patch, d.trainjob_patch) == (None, None)
    assert (_entry(d)["state"], _entry(d)["message"]) == ("Pending", d.message)
    # Held already with that message: nothing is written again.
    again = go(copy_workload(owned=owned, recorded="2026-11-29T09:30:00Z", message=d.message),
               tj=remote(opened()) if owned else None)  # fmt: skip
    assert (again.action, again.check_write, again.workload_patch) == (Action.HOLD, None, None)


def test_out_of_contact_with_the_manager_a_copy_is_not_admitted_and_nothing_is_recorded():
    # A fenced worker, or one the manager's agent does not reach: a copy admitted here could never start, and
    # MultiKueue would keep the job here, so the admission waits (Pending) and the record is not written.
    wl = copy_workload(message="")
    d = go(wl, tj=None, in_contact=False)
    assert (d.action, d.message) == (Action.HOLD, WORKER_OUT_OF_CONTACT_MESSAGE)
    assert LEASE_MANAGER_CONTACT in d.message
    assert "fenced" in d.message
    assert (d.workload_patch, d.trainjob_patch) == (None, None)
    assert (_entry(d)["state"], _entry(d)["message"]) == ("Pending", d.message)
    # Contact back: the same copy's first admission is approved, the record written first.
    back = go(wl, tj=None)
    assert (back.action, back.message) == (Action.ADMIT, WORKER_FIRST_MESSAGE)
    assert back.workload_patch is not None


def test_out_of_contact_a_recorded_copy_still_says_it_goes_back_through_the_manager():
    wl = copy_workload(recorded="2026-11-29T09:30:00Z", message="")
    d = go(wl, tj=None, in_contact=False)
    assert (d.action, d.message) == (Action.HOLD, worker_held_message("2026-11-29T09:30:00Z"))


@pytest.mark.parametrize("role", [ROLE_SINGLE, ROLE_MANAGER])
def test_contact_is_judged_only_for_a_copy_on_a_worker(role):
    # Off a worker, or for what is not a copy on one, the contact changes nothing.
    assert go(workload(), role=role, in_contact=False).action is Action.ADMIT
    assert go(workload(), in_contact=False).action is Action.ADMIT


def test_a_copy_not_due_is_waited_on_as_before():
    for wl in (copy_workload(reserved=False), copy_workload(evicted=True), copy_workload(state="Ready")):
        d = go(wl, tj=None)
        assert (d.action, d.workload_patch, d.check_write) == (Action.WAIT, None, None)


@pytest.mark.parametrize(
    ("wl", "tj"),
    [
        # A copy of another kind's Workload: decided as in one cluster alone.
        (lambda: copy_workload(owner=OTHER_OWNER, recorded="t"), None),
        # A copy owned by a TrainJob that is not dispatch's.
        (lambda: copy_workload(owned=True, recorded="t"), "stranger"),
    ],
)
def test_a_copy_that_is_not_dispatchs_is_decided_as_in_one_cluster(wl, tj):
    stranger = remote(opened())
    stranger["spec"]["runtimePatches"] = []
    stranger["metadata"]["name"] = "someone-elses"
    stranger["metadata"]["labels"] = {}
    stranger["metadata"]["annotations"] = {}
    trainjob = stranger if tj == "stranger" else tj
    worker, single = go(wl(), tj=trainjob), go(wl(), role=ROLE_SINGLE, tj=trainjob)
    assert worker == single
    assert worker.action is Action.APPROVE


def test_what_is_not_a_copy_is_decided_on_a_worker_as_in_one_cluster():
    wl = workload()  # a dispatch job queued to the worker's own ClusterQueue: no origin label
    assert go(wl, tj=opened()) == go(wl, role=ROLE_SINGLE, tj=opened())
    assert go(wl, tj=opened()).action is Action.ADMIT
    assert go(wl, tj=opened()).workload_patch is None


@pytest.mark.parametrize("role", [ROLE_SINGLE, ROLE_MANAGER])
def test_outside_a_worker_a_copy_label_changes_nothing(role):
    wl = copy_workload(owned=True, recorded="t")
    d = go(wl, role=role, tj=opened())
    assert d == decide(workload=wl, check=CHECK, trainjob=opened(), jobset=None, pods=[], blockers=[], now=NOW)
    assert d.workload_patch is None


# -- The worker's unsuspend ----------------------------------------------------------------------------------------


def copy_trainjob() -> dict[str, Any]:
    """MultiKueue's copy of a Kueue-mode dispatch TrainJob, opened, with the A the manager gave it (1 here),
    suspended: what the worker's Kueue unsuspends once the copy's Workload is admitted."""
    tj = remote(opened_kueue())
    tj["spec"].pop("managedBy", None)  # MultiKueue clears it on the copy
    return tj


def _start(tj: dict[str, Any]) -> dict[str, Any]:
    new = copy.deepcopy(tj)
    new["spec"]["suspend"] = False
    return new


def _admit_start(old: dict[str, Any], config=WORKER):
    """Kueue's unsuspend, after the gate's approval, through the mutating webhook and validation; the object as
    stored when allowed."""
    old = gate_approved(old)
    new = _start(old)
    req = request("UPDATE", new, old, user=KUEUE)
    verdict = admit(req, config)
    if not verdict.allowed:
        return verdict, None
    patch = mutate(req, config or Config()).patch
    return verdict, apply_json_patch(new, patch) if patch else new


def _suspended(tj: dict[str, Any]) -> dict[str, Any]:
    again = copy.deepcopy(tj)
    again["spec"]["suspend"] = True  # Kueue's eviction on the worker
    return again


def test_the_first_start_of_a_copy_records_a_and_a_second_start_is_refused():
    tj = copy_trainjob()
    a = admission_count(tj)
    verdict, stored = _admit_start(tj)
    assert verdict.allowed
    assert stored is not None
    assert (admission_count(stored), admission_started(stored)) == (a, a)  # recorded, not raised
    # Evicted on the worker and admitted again there: the same A would run again, J at 0 in a new JobSet.
    verdict, _ = _admit_start(_suspended(stored))
    assert denied_by(verdict) == "update.unsuspend"
    assert f"A {a}, the previous execution started with A {a}" in verdict.message


def test_in_one_cluster_alone_the_same_restart_raises_a():
    tj = copy_trainjob()
    _, stored = _admit_start(tj, config=None)
    assert stored is not None
    verdict, again = _admit_start(_suspended(stored), config=None)
    assert verdict.allowed
    assert again is not None
    assert admission_count(again) == admission_count(stored) + 1


def test_on_a_worker_a_start_that_raises_a_copys_a_is_refused():
    tj = copy_trainjob()
    new = _start(tj)
    a = admission_count(tj)
    raised = unsuspend_ops(new, a, kueue=True)  # what a raise in the unsuspend would write
    bumped = apply_json_patch(new, raised)
    assert admission_count(bumped) == a + 1
    verdict = admit(request("UPDATE", bumped, tj, user=KUEUE), WORKER)
    assert denied_by(verdict) == "update.unsuspend"
    assert "never raises" in verdict.message


def test_a_dispatch_job_that_is_not_a_copy_is_raised_on_a_worker_as_before():
    tj = opened_kueue()
    assert MULTIKUEUE_ORIGIN_LABEL not in tj["metadata"]["labels"]
    _, stored = _admit_start(tj)
    assert stored is not None
    verdict, again = _admit_start(_suspended(stored))
    assert verdict.allowed
    assert again is not None
    assert admission_count(again) == admission_count(stored) + 1


def test_records_only_never_raises_whatever_the_counts():
    tj = _start(copy_trainjob())
    a = admission_count(tj)
    for before in (None, a - 1, a, a + 5):
        ops = unsuspend_ops(tj, before, kueue=True, records_only=True)
        written = apply_json_patch(tj, ops)
        assert admission_count(written) == a
        assert admission_started(written) == a


def test_no_two_starts_of_a_copy_share_an_identity_and_r_only_rises():
    """Starts of one copy on a worker as Kueue would try them (start, eviction, start ...): only the first is
    allowed, so each allowed execution's (A, J = 0) is distinct and R rises; the manager's next dispatch brings a
    copy with A raised by K."""
    identities, tj = [], copy_trainjob()
    for _ in range(3):
        verdict, stored = _admit_start(tj)
        if stored is not None:
            a = admission_count(stored)
            identities.append((attempt_token("01ARZ3NDEKTSV4RRFFQ69G5FAV", 3, 0, a, 0), epoch(0, 3, r_of(a, 0))))
            tj = _suspended(stored)
        else:
            assert denied_by(verdict) == "update.unsuspend"
    assert len(identities) == 1
    assert len({i for i, _ in identities}) == len(identities)
    assert [e for _, e in identities] == sorted({e for _, e in identities})


@pytest.mark.parametrize("kind", ["trainjob", "workload"])
def test_on_a_worker_the_origin_label_of_a_copy_never_changes(kind):
    # Removed, a restart of the copy would be numbered on the worker, and its Workload approved again.
    old = copy_trainjob() if kind == "trainjob" else copy_workload(owned=True, recorded="t")
    new = copy.deepcopy(old)
    new["metadata"]["labels"].pop(MULTIKUEUE_ORIGIN_LABEL)
    extra = {} if kind == "trainjob" else {"resource": "workloads", "kind": "Workload", "group": "kueue.x-k8s.io"}
    for user in (KUEUE, DISPATCH):
        verdict = admit(request("UPDATE", new, old, user=user, **extra), WORKER)
        assert denied_by(verdict) == "update.origin"
    assert admit(request("UPDATE", new, old, user=KUEUE, **extra), Config()).allowed  # elsewhere, no rule of this
