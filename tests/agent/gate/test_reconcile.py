"""One pass of the gate (agent.gate.reconcile) against the real API server, the test playing Kueue's part.

The passes are called directly, so a test can act between the steps of a pass (the hooks), as a stall or a
crash would."""

from __future__ import annotations

import asyncio
import secrets

import pytest

from agent.config import AgentConfig
from agent.constants import EVENT_COMPONENT, REASON_FOREIGN
from agent.domain.decide import Action
from agent.gate.context import Hooks, Pass, WorkloadKey
from agent.gate.reconcile import reconcile
from agent.runtime.kube import Kube
from contract.admission import admission_path, approved_admission
from contract.keys import ANNOTATION_APPROVED_ADMISSION, ANNOTATION_JOBSET_UID, FIELD_MANAGER
from contract.objects import pointer
from harness.principals import json_patch
from tests.agent import kueue_double as kueue

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

SETTINGS = AgentConfig()


def key(wl) -> WorkloadKey:
    return WorkloadKey(wl["metadata"]["namespace"], wl["metadata"]["name"])


@pytest.fixture
def kube(api_client) -> Kube:
    return Kube(api_client, instance="test")


def dispatch_workload(cp, namespace, *, reserved=True):
    check = kueue.create_admission_check(cp)
    tj = kueue.create_dispatch_trainjob(cp, namespace)
    wl = kueue.create_workload(cp, tj, [check])
    if reserved:
        wl = kueue.reserve(cp, wl)
    return check, tj, wl


async def test_a_clear_dispatch_job_is_admitted_and_a_is_left_to_the_write_that_starts_it(
    control_plane, namespace, kube
):
    cp = control_plane
    check, tj, wl = dispatch_workload(cp, namespace)
    outcome = await reconcile(Pass.fresh(kube, SETTINGS), key(wl))
    assert (outcome.action, outcome.ready, outcome.conflict) == (Action.ADMIT, True, None)
    assert outcome.new_a == 1  # the A the next execution starts with: 0 in the new TrainJob, raised to 1
    after = kueue.get_trainjob(cp, tj)
    # Written only with the gate's approval of A 1 on this Workload, before the Ready: never A.
    assert approved_admission(after) == 1
    assert after["metadata"]["annotations"][ANNOTATION_APPROVED_ADMISSION] == f"1/{wl['metadata']['uid']}"
    assert kueue.a_and_floor(after) == (0, None)
    now = kueue.get_workload(cp, wl)
    assert kueue.entry(now, check)["state"] == "Ready"
    message = "the next execution starts with A 1, raised in the write that admits it"
    assert kueue.entry(now, check)["message"] == message
    ready_by = [m for m in now["metadata"]["managedFields"] if m.get("subresource") == "status"]
    assert FIELD_MANAGER in {m["manager"] for m in ready_by}
    # A second pass finds nothing due: the check is Ready.
    again = await reconcile(Pass.fresh(kube, SETTINGS), key(wl))
    assert again.action is None
    assert kueue.get_trainjob(cp, tj)["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]
    # Kueue's unsuspend, with admission's raise in it, starts the execution with the A the gate reported.
    started = kueue.run_execution(cp, tj)
    assert kueue.a_and_floor(started) == (1, 1)
    assert kueue.started(started) == outcome.new_a
    assert kueue.kueue_entry(started) == kueue.kueue_entry(tj)  # Kueue's runtime patch entry untouched


async def test_the_jobset_uid_is_recorded_once_in_a_preconditioned_patch(control_plane, namespace, kube):
    cp = control_plane
    _check, tj, wl = dispatch_workload(cp, namespace)
    js = create_jobset(cp, tj)
    patches: list[list[dict]] = []
    patch_trainjob = kube.patch_trainjob

    async def spy(namespace_, name, ops):
        patches.append(ops)
        return await patch_trainjob(namespace_, name, ops)

    kube.patch_trainjob = spy  # the real write, counted
    outcome = await reconcile(Pass.fresh(kube, SETTINGS), key(wl))
    assert (outcome.action, outcome.ready, outcome.new_a) == (Action.ADMIT, True, 1)
    assert patches == [[
        {"op": "test", "path": "/metadata/uid", "value": tj["metadata"]["uid"]},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": tj["metadata"]["resourceVersion"]},
        {"op": "add", "path": pointer("metadata", "annotations", ANNOTATION_JOBSET_UID), "value": js["metadata"]["uid"]},
        {"op": "add", "path": pointer("metadata", "annotations", ANNOTATION_APPROVED_ADMISSION),
         "value": f"1/{wl['metadata']['uid']}"},
    ]]  # fmt: skip
    after = kueue.get_trainjob(cp, tj)
    assert after["metadata"]["annotations"][ANNOTATION_JOBSET_UID] == js["metadata"]["uid"]
    assert kueue.a_and_floor(after) == (0, None)  # the record leaves A and the floor alone
    assert FIELD_MANAGER in {m["manager"] for m in after["metadata"]["managedFields"]}

    # The next admission: the record is there, so the pass writes only its approval of A 2 to the TrainJob.
    kueue.run_execution(cp, tj)
    kueue.readmit_cycle(cp, wl)
    before = kueue.get_trainjob(cp, tj)
    outcome = await reconcile(Pass.fresh(kube, SETTINGS), key(wl))
    assert (outcome.action, outcome.ready, outcome.new_a) == (Action.ADMIT, True, 2)
    assert len(patches) == 2
    assert [op["path"] for op in patches[1][2:]] == [pointer("metadata", "annotations", ANNOTATION_APPROVED_ADMISSION)]
    assert approved_admission(kueue.get_trainjob(cp, tj)) == 2
    assert kueue.get_trainjob(cp, tj)["metadata"]["annotations"][ANNOTATION_JOBSET_UID] == js["metadata"]["uid"]
    assert before["metadata"]["annotations"][ANNOTATION_JOBSET_UID] == js["metadata"]["uid"]


@pytest.mark.parametrize("owner", ["batch-job", "plain-trainjob"])
async def test_a_workload_that_is_not_dispatchs_is_made_ready_at_once(control_plane, namespace, kube, owner):
    cp = control_plane
    check = kueue.create_admission_check(cp)
    job = kueue.create_batch_job(cp, namespace) if owner == "batch-job" else kueue.create_plain_trainjob(cp, namespace)
    wl = kueue.reserve(cp, kueue.create_workload(cp, job, [check]))
    outcome = await reconcile(Pass.fresh(kube, SETTINGS), key(wl))
    assert outcome.action is Action.APPROVE
    assert outcome.ready
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Ready"
    after = cp.admin.get(job["apiVersion"], job["kind"], job["metadata"]["name"], namespace)
    assert after["metadata"]["resourceVersion"] == job["metadata"]["resourceVersion"]  # never written


async def test_a_check_is_not_touched_before_quota_is_reserved(control_plane, namespace, kube):
    cp = control_plane
    _check, tj, wl = dispatch_workload(cp, namespace, reserved=False)
    outcome = await reconcile(Pass.fresh(kube, SETTINGS), key(wl))
    assert outcome.action is None
    now = kueue.get_workload(cp, wl)
    assert now["metadata"]["resourceVersion"] == wl["metadata"]["resourceVersion"]
    assert kueue.get_trainjob(cp, tj)["metadata"]["resourceVersion"] == tj["metadata"]["resourceVersion"]
    # Reserved: now it acts.
    kueue.reserve(cp, wl)
    assert (await reconcile(Pass.fresh(kube, SETTINGS), key(wl))).action is Action.ADMIT


@pytest.mark.parametrize("stall_at", ["after_read", "after_record"])
async def test_a_stalled_pass_cannot_approve_the_next_admission(control_plane, namespace, kube, stall_at):
    """The spec's stalled leader: the pass reads the check Pending and stalls. Meanwhile the admission is
    approved by another pass, an execution starts (its pod on a node that is then lost), and Kueue evicts the
    Workload (resetting the check, a status write that changes its resourceVersion) and reserves quota again.
    The stale pass wakes: its Ready, preconditioned on its read, fails with a conflict, and the next pass holds
    on the pod that may still run; only once it is gone is the next admission approved."""
    cp = control_plane
    check, tj, wl = dispatch_workload(cp, namespace)
    create_jobset(cp, tj)  # so that the pass records its UID (the after_record stall point)
    node = f"lost-{secrets.token_hex(4)}"
    kueue.create_node(cp, node)  # Ready Unknown: a pod on it may still run
    pods: list[dict] = []

    async def stall(_obj):
        # Another pass approves this cycle (the stale one has read Pending, and is not running).
        assert (await reconcile(Pass.fresh(Kube(kube.api, instance="other"), SETTINGS), key(wl))).ready
        kueue.run_execution(cp, tj)  # Kueue starts it with A 1...
        pods.append(kueue.create_trainer_pod(cp, tj, node, a="1"))  # ...its pod runs, its node is lost
        kueue.readmit_cycle(cp, wl)  # evicted (the check reset to Pending) and quota reserved again

    try:
        outcome = await reconcile(Pass.fresh(kube, SETTINGS, Hooks(**{stall_at: stall})), key(wl))
        assert pods, "the hook ran"
        assert outcome.conflict == "workload"
        assert outcome.requeue
        assert not outcome.ready
        now = kueue.get_workload(cp, wl)
        assert kueue.entry(now, check)["state"] == "Pending"  # nothing admitted while the pod may run
        assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (1, 1)  # the started execution's A, nothing more

        # The next pass reads afresh: it holds on the pod.
        outcome = await reconcile(Pass.fresh(kube, SETTINGS), key(wl))
        assert (outcome.action, outcome.ready) == (Action.HOLD, False)
        assert pods[0]["metadata"]["name"] in kueue.entry(kueue.get_workload(cp, wl), check)["message"]

        # The pod is gone: the next execution is admitted, and will start above the last one.
        cp.admin.request("DELETE", cp.admin.object_path(pods[0]), {"gracePeriodSeconds": 0})
        outcome = await reconcile(Pass.fresh(kube, SETTINGS), key(wl))
        assert (outcome.action, outcome.ready, outcome.new_a) == (Action.ADMIT, True, 2)
        assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Ready"
        assert kueue.a_and_floor(kueue.run_execution(cp, tj)) == (2, 2)
    finally:
        cp.admin.delete("v1", "Node", node)


async def test_a_crash_between_the_jobset_uid_record_and_ready_leaves_the_next_pass_to_approve(
    control_plane, namespace, kube
):
    cp = control_plane
    check, tj, wl = dispatch_workload(cp, namespace)
    js = create_jobset(cp, tj)

    class Crash(Exception):
        pass

    async def crash(_obj):
        raise Crash

    with pytest.raises(Crash):
        await reconcile(Pass.fresh(kube, SETTINGS, Hooks(after_record=crash)), key(wl))
    recorded = kueue.get_trainjob(cp, tj)
    assert recorded["metadata"]["annotations"][ANNOTATION_JOBSET_UID] == js["metadata"]["uid"]  # it landed
    assert kueue.a_and_floor(recorded) == (0, None)
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Pending"

    # The next pass (after the restart) approves, writing only the check: the record is there.
    outcome = await reconcile(Pass.fresh(kube, SETTINGS), key(wl))
    assert (outcome.action, outcome.ready, outcome.new_a) == (Action.ADMIT, True, 1)
    assert kueue.get_trainjob(cp, tj)["metadata"]["resourceVersion"] == recorded["metadata"]["resourceVersion"]
    # Across further admissions each execution starts above the last (R = A + J, J = 0 here, only rises).
    seen = [kueue.started(kueue.run_execution(cp, tj))]
    for _ in range(2):
        kueue.readmit_cycle(cp, wl)
        outcome = await reconcile(Pass.fresh(kube, SETTINGS), key(wl))
        assert outcome.ready
        seen.append(kueue.started(kueue.run_execution(cp, tj)))
        assert seen[-1] == outcome.new_a
    assert seen == [1, 2, 3]


async def test_the_floor_keeps_a_from_falling_when_the_runtime_patch_is_rewritten(control_plane, namespace, kube):
    cp = control_plane
    _check, tj, wl = dispatch_workload(cp, namespace)
    assert (await reconcile(Pass.fresh(kube, SETTINGS), key(wl))).new_a == 1
    kueue.run_execution(cp, tj)
    kueue.readmit_cycle(cp, wl)
    assert (await reconcile(Pass.fresh(kube, SETTINGS), key(wl))).new_a == 2
    kueue.run_execution(cp, tj)
    # Someone rewrites dispatch's runtime patch, lowering A to 0 (there is no webhook on tier A to stop it).
    tj = kueue.get_trainjob(cp, tj)
    json_patch(cp.admin, tj, [{"op": "replace", "path": pointer(*admission_path(tj)), "value": "0"}])
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (0, 2)
    kueue.readmit_cycle(cp, wl)
    outcome = await reconcile(Pass.fresh(kube, SETTINGS), key(wl))
    assert (outcome.action, outcome.ready) == (Action.ADMIT, True)
    assert outcome.new_a == 3  # floor + 1, not 0 + 1
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (0, 2)  # the gate wrote nothing
    assert kueue.a_and_floor(kueue.run_execution(cp, tj)) == (3, 3)  # the start raised it, as reported


@pytest.mark.parametrize("lost", ["both", "a-not-a-count"])
async def test_a_trainjob_whose_next_execution_cannot_be_numbered_is_held(control_plane, namespace, kube, lost):
    """A and the floor both removed, or A not a count: raising from nothing could repeat an R, so the check stays
    Pending, saying why, and nothing is written to the TrainJob."""
    cp = control_plane
    check, tj, wl = dispatch_workload(cp, namespace)
    a_path = pointer(*admission_path(tj))
    tj = json_patch(
        cp.admin,
        tj,
        [{"op": "remove", "path": a_path}] if lost == "both" else [{"op": "replace", "path": a_path, "value": "07"}],
    )
    if lost == "both":
        assert kueue.a_and_floor(tj) == (None, None)  # the new TrainJob has no floor yet
    outcome = await reconcile(Pass.fresh(kube, SETTINGS), key(wl))
    assert (outcome.action, outcome.ready, outcome.new_a) == (Action.HOLD, False, None)
    assert outcome.requeue  # no pod or node event will lift it: looked at again after a backoff
    entry = kueue.entry(kueue.get_workload(cp, wl), check)
    assert entry["state"] == "Pending"
    assert entry["message"].startswith("cannot number the next execution: ")
    assert kueue.get_trainjob(cp, tj)["metadata"]["resourceVersion"] == tj["metadata"]["resourceVersion"]


def create_jobset(cp, tj, owner_uid: str | None = "the TrainJob's"):
    """A JobSet of the TrainJob's name, controlled (as Trainer makes it) by the TrainJob, or by the TrainJob of
    ``owner_uid``, or (None) by nothing: an orphan left by an earlier TrainJob of that name."""
    meta = tj["metadata"]
    uid = meta["uid"] if owner_uid == "the TrainJob's" else owner_uid
    refs = [] if uid is None else [
        {"apiVersion": tj["apiVersion"], "kind": "TrainJob", "name": meta["name"], "uid": uid, "controller": True,
         "blockOwnerDeletion": True}
    ]  # fmt: skip
    return cp.admin.create(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "ownerReferences": refs},
            "spec": {
                "suspend": True,
                "replicatedJobs": [
                    {
                        "name": "node",
                        "replicas": 1,
                        "template": {
                            "spec": {
                                "template": {
                                    "spec": {
                                        "restartPolicy": "Never",
                                        "containers": [{"name": "node", "image": "pytorch/pytorch"}],
                                    }
                                }
                            }
                        },
                    }
                ],
            },
        }
    )


async def test_a_replaced_jobset_is_reported_and_holds_the_gate(control_plane, namespace, kube):
    cp = control_plane
    _check, tj, wl = dispatch_workload(cp, namespace)
    first = create_jobset(cp, tj)
    assert (await reconcile(Pass.fresh(kube, SETTINGS), key(wl))).new_a == 1
    recorded = kueue.get_trainjob(cp, tj)["metadata"]["annotations"][ANNOTATION_JOBSET_UID]
    assert recorded == first["metadata"]["uid"]  # recorded the first time it is seen
    kueue.run_execution(cp, tj)

    # Someone deletes the JobSet; Trainer would build a new one with restarts: 0.
    cp.admin.delete("jobset.x-k8s.io/v1alpha2", "JobSet", first["metadata"]["name"], namespace)
    second = create_jobset(cp, tj)
    kueue.readmit_cycle(cp, wl)
    outcome = await reconcile(Pass.fresh(kube, SETTINGS), key(wl))
    # Reported, and the gate holds: J may have started again at 0, so A + J could repeat an R. The job is not
    # stopped: what to do is a person's call.
    wording = f"JobSet UID {second['metadata']['uid']} is not the recorded {recorded}: J may have been reset."
    assert outcome.action is Action.HOLD
    assert not outcome.ready
    assert outcome.message.startswith(wording)
    assert outcome.foreign_reported == 1
    assert kueue.entry(kueue.get_workload(cp, wl), _check)["state"] == "Pending"
    foreign = [e for e in kueue.events_about(cp, tj) if e["reason"] == REASON_FOREIGN]
    assert [e["message"] for e in foreign] == [wording]
    assert foreign[0]["type"] == "Warning"
    assert foreign[0]["source"]["component"] == EVENT_COMPONENT
    after = kueue.get_trainjob(cp, tj)
    assert after["metadata"].get("deletionTimestamp") is None
    assert after["spec"]["suspend"] is True
    assert after["metadata"]["annotations"][ANNOTATION_JOBSET_UID] == recorded  # the record is not rewritten

    # Reported once per TrainJob by this process, not on every pass; held still.
    outcome = await reconcile(Pass.fresh(kube, SETTINGS), key(wl))
    assert (outcome.action, outcome.ready) in ((Action.HOLD, False), (None, False))
    assert outcome.foreign_reported == 0
    assert len([e for e in kueue.events_about(cp, tj) if e["reason"] == REASON_FOREIGN]) == 1


@pytest.mark.parametrize("orphan_owner", ["an-earlier-trainjob-uid", None])
async def test_an_orphan_jobset_of_the_name_is_never_recorded(control_plane, namespace, kube, orphan_owner):
    """A JobSet of the TrainJob's name left by an earlier TrainJob of that name is not the one J counts for:
    recorded, its UID would never be corrected, and the TrainJob's own JobSet would be reported as a reset."""
    cp = control_plane
    _check, tj, wl = dispatch_workload(cp, namespace)
    orphan = create_jobset(cp, tj, orphan_owner)
    outcome = await reconcile(Pass.fresh(kube, SETTINGS), key(wl))
    assert (outcome.action, outcome.ready, outcome.new_a) == (Action.ADMIT, True, 1)  # the admission goes ahead
    after = kueue.get_trainjob(cp, tj)
    assert ANNOTATION_JOBSET_UID not in after["metadata"]["annotations"]  # only the approval written
    assert approved_admission(after) == 1
    kueue.run_execution(cp, tj)

    # The orphan goes; Trainer builds the TrainJob's own JobSet. Its UID is the one recorded, and no reset is
    # reported.
    cp.admin.delete("jobset.x-k8s.io/v1alpha2", "JobSet", orphan["metadata"]["name"], namespace)
    own = create_jobset(cp, tj)
    kueue.readmit_cycle(cp, wl)
    outcome = await reconcile(Pass.fresh(kube, SETTINGS), key(wl))
    assert (outcome.action, outcome.ready, outcome.new_a, outcome.foreign_reported) == (Action.ADMIT, True, 2, 0)
    assert kueue.get_trainjob(cp, tj)["metadata"]["annotations"][ANNOTATION_JOBSET_UID] == own["metadata"]["uid"]
    assert [e for e in kueue.events_about(cp, tj) if e["reason"] == REASON_FOREIGN] == []


async def test_concurrent_passes_record_the_jobset_uid_once(control_plane, namespace, api_client):
    """Two replicas that both think they lead run a pass over the same Workload at once: both may read
    Pending and both may approve the same admission (one cycle, one execution: Kueue starts it once), but the
    JobSet UID record, preconditioned on the TrainJob as read, lands only once."""
    cp = control_plane
    check, tj, wl = dispatch_workload(cp, namespace)
    js = create_jobset(cp, tj)
    both = await asyncio.gather(
        reconcile(Pass.fresh(Kube(api_client, instance="a"), SETTINGS), key(wl)),
        reconcile(Pass.fresh(Kube(api_client, instance="b"), SETTINGS), key(wl)),
    )
    assert any(o.ready for o in both)
    assert all(o.ready or o.conflict is not None for o in both), both
    assert {o.new_a for o in both if o.ready} == {1}
    after = kueue.get_trainjob(cp, tj)
    assert after["metadata"]["annotations"][ANNOTATION_JOBSET_UID] == js["metadata"]["uid"]
    assert int(after["metadata"]["resourceVersion"]) > int(tj["metadata"]["resourceVersion"])
    assert kueue.a_and_floor(after) == (0, None)
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Ready"


async def test_a_gone_workload_is_nothing_to_do(namespace, kube):
    outcome = await reconcile(Pass.fresh(kube, SETTINGS), WorkloadKey(namespace, f"gone-{secrets.token_hex(3)}"))
    assert outcome.action is None
    assert not outcome.requeue


async def test_two_checks_of_ours_each_get_their_own_look_and_ready(control_plane, namespace, kube):
    """Several AdmissionChecks may share our controllerName: one pass serves one of them, and says so."""
    cp = control_plane
    checks = sorted([kueue.create_admission_check(cp), kueue.create_admission_check(cp)])
    tj = kueue.create_dispatch_trainjob(cp, namespace)
    wl = kueue.reserve(cp, kueue.create_workload(cp, tj, checks))
    first = await reconcile(Pass.fresh(kube, SETTINGS), key(wl))
    assert (first.check, first.ready, first.more) == (checks[0], True, True)
    assert kueue.states(kueue.get_workload(cp, wl)) == {checks[0]: "Ready", checks[1]: "Pending"}
    second = await reconcile(Pass.fresh(kube, SETTINGS), key(wl))
    assert (second.check, second.ready, second.more) == (checks[1], True, False)
    assert (first.new_a, second.new_a) == (1, 1)  # one execution follows, started with A 1
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (0, None)
    assert kueue.states(kueue.get_workload(cp, wl)) == dict.fromkeys(checks, "Ready")
