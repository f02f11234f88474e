"""One pass of the gate (agent.reconcile) against the real API server, the test playing Kueue's part.

The passes are called directly, so a test can act between the steps of a pass (the hooks), as a stall or a
crash would."""

from __future__ import annotations

import asyncio
import secrets

import pytest

from agent.config import AgentConfig
from agent.constants import EVENT_COMPONENT, REASON_FOREIGN
from agent.gate import Action
from agent.kube import Kube
from agent.reconcile import Hooks, WorkloadKey, reconcile
from contract.admission import admission_path
from contract.keys import ANNOTATION_JOBSET_UID, FIELD_MANAGER
from contract.objects import pointer
from tests.agent import kueue_double as kueue
from tests.cluster.principals import json_patch

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


async def test_raise_then_ready(control_plane, namespace, kube):
    cp = control_plane
    check, tj, wl = dispatch_workload(cp, namespace)
    outcome = await reconcile(kube, key(wl), SETTINGS)
    assert outcome.action is Action.RAISE
    assert outcome.ready
    assert outcome.new_a == 1
    assert outcome.conflict is None
    after = kueue.get_trainjob(cp, tj)
    assert kueue.a_and_floor(after) == (1, 1)
    assert kueue.kueue_entry(after) == kueue.kueue_entry(tj)  # Kueue's runtime patch entry untouched
    assert after["spec"]["suspend"] is True
    now = kueue.get_workload(cp, wl)
    assert kueue.entry(now, check)["state"] == "Ready"
    assert kueue.entry(now, check)["message"] == "admission count A raised to 1"
    managers = {m["manager"] for m in after["metadata"]["managedFields"]}
    assert FIELD_MANAGER in managers
    # A second pass finds nothing due: the check is Ready.
    again = await reconcile(kube, key(wl), SETTINGS)
    assert again.action is None
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (1, 1)


@pytest.mark.parametrize("owner", ["batch-job", "plain-trainjob"])
async def test_a_workload_that_is_not_dispatchs_is_made_ready_at_once(control_plane, namespace, kube, owner):
    cp = control_plane
    check = kueue.create_admission_check(cp)
    job = kueue.create_batch_job(cp, namespace) if owner == "batch-job" else kueue.create_plain_trainjob(cp, namespace)
    wl = kueue.reserve(cp, kueue.create_workload(cp, job, [check]))
    outcome = await reconcile(kube, key(wl), SETTINGS)
    assert outcome.action is Action.APPROVE
    assert outcome.ready
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Ready"
    after = cp.admin.get(job["apiVersion"], job["kind"], job["metadata"]["name"], namespace)
    assert after["metadata"]["resourceVersion"] == job["metadata"]["resourceVersion"]  # never written


async def test_a_check_is_not_touched_before_quota_is_reserved(control_plane, namespace, kube):
    cp = control_plane
    _check, tj, wl = dispatch_workload(cp, namespace, reserved=False)
    outcome = await reconcile(kube, key(wl), SETTINGS)
    assert outcome.action is None
    now = kueue.get_workload(cp, wl)
    assert now["metadata"]["resourceVersion"] == wl["metadata"]["resourceVersion"]
    assert kueue.get_trainjob(cp, tj)["metadata"]["resourceVersion"] == tj["metadata"]["resourceVersion"]
    # Reserved: now it acts.
    kueue.reserve(cp, wl)
    assert (await reconcile(kube, key(wl), SETTINGS)).action is Action.RAISE


@pytest.mark.parametrize("stall_at", ["after_read", "after_raise"])
async def test_a_stalled_pass_cannot_approve_the_next_admission(control_plane, namespace, kube, stall_at):
    """The spec's stalled leader: the pass reads Pending and stalls; meanwhile Kueue evicts the Workload (a
    status write that changes its resourceVersion) and reserves quota again; the stale Ready fails with a
    conflict, and the admission is approved only by a later pass that raises A again."""
    cp = control_plane
    check, tj, wl = dispatch_workload(cp, namespace)
    evicted: list[str] = []

    async def stall(_obj):
        # The stall: Kueue's eviction and re-reservation happen while this pass is not running.
        kueue.readmit_cycle(cp, wl)
        evicted.append(kueue.get_workload(cp, wl)["metadata"]["resourceVersion"])

    outcome = await reconcile(kube, key(wl), SETTINGS, Hooks(**{stall_at: stall}))
    assert evicted, "the hook ran"
    assert outcome.conflict == "workload"
    assert outcome.requeue
    assert not outcome.ready
    first_a = outcome.new_a
    assert first_a == 1  # the stale pass did raise A; its approval is what failed
    now = kueue.get_workload(cp, wl)
    assert kueue.entry(now, check)["state"] == "Pending"  # nothing admitted
    assert now["metadata"]["resourceVersion"] == evicted[0]

    # The next pass decides afresh: it raises again, and only then approves.
    outcome = await reconcile(kube, key(wl), SETTINGS)
    assert outcome.action is Action.RAISE
    assert outcome.ready
    assert outcome.new_a == 2 > first_a
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (2, 2)
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Ready"


async def test_a_crash_between_the_raise_and_ready_raises_again(control_plane, namespace, kube):
    cp = control_plane
    check, tj, wl = dispatch_workload(cp, namespace)

    class Crash(Exception):
        pass

    async def crash(_obj):
        raise Crash

    with pytest.raises(Crash):
        await reconcile(kube, key(wl), SETTINGS, Hooks(after_raise=crash))
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (1, 1)
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Pending"

    seen = [1]
    outcome = await reconcile(kube, key(wl), SETTINGS)
    assert outcome.action is Action.RAISE
    assert outcome.ready
    seen.append(outcome.new_a)
    assert seen == [1, 2]  # A skipped 1: no execution ever ran with it; harmless
    # Across further admissions R = A + J (J = 0: no JobSet restarts here) only increases.
    for _ in range(2):
        kueue.readmit_cycle(cp, wl)
        seen.append((await reconcile(kube, key(wl), SETTINGS)).new_a)
    assert seen == sorted(set(seen)) == [1, 2, 3, 4]


async def test_the_floor_keeps_a_from_falling_when_the_runtime_patch_is_rewritten(control_plane, namespace, kube):
    cp = control_plane
    _check, tj, wl = dispatch_workload(cp, namespace)
    assert (await reconcile(kube, key(wl), SETTINGS)).new_a == 1
    kueue.readmit_cycle(cp, wl)
    assert (await reconcile(kube, key(wl), SETTINGS)).new_a == 2
    # Someone rewrites dispatch's runtime patch, lowering A to 0 (there is no webhook on tier A to stop it).
    tj = kueue.get_trainjob(cp, tj)
    json_patch(cp.admin, tj, [{"op": "replace", "path": pointer(*admission_path(tj)), "value": "0"}])
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (0, 2)
    kueue.readmit_cycle(cp, wl)
    outcome = await reconcile(kube, key(wl), SETTINGS)
    assert outcome.action is Action.RAISE
    assert outcome.ready
    assert outcome.new_a == 3  # floor + 1, not 0 + 1
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (3, 3)


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


async def test_a_replaced_jobset_is_reported_and_the_job_is_not_stopped(control_plane, namespace, kube):
    cp = control_plane
    _check, tj, wl = dispatch_workload(cp, namespace)
    first = create_jobset(cp, tj)
    assert (await reconcile(kube, key(wl), SETTINGS)).new_a == 1
    recorded = kueue.get_trainjob(cp, tj)["metadata"]["annotations"][ANNOTATION_JOBSET_UID]
    assert recorded == first["metadata"]["uid"]  # recorded the first time it is seen, with the raise

    # Someone deletes the JobSet; Trainer would build a new one with restarts: 0.
    cp.admin.delete("jobset.x-k8s.io/v1alpha2", "JobSet", first["metadata"]["name"], namespace)
    second = create_jobset(cp, tj)
    kueue.readmit_cycle(cp, wl)
    outcome = await reconcile(kube, key(wl), SETTINGS)
    # Reported, and the gate goes on: recovery is not the agent's call.
    assert outcome.action is Action.RAISE
    assert outcome.ready
    assert outcome.new_a == 2
    assert outcome.foreign_reported == 1
    wording = f"JobSet UID {second['metadata']['uid']} is not the recorded {recorded}: J may have been reset."
    foreign = [e for e in kueue.events_about(cp, tj) if e["reason"] == REASON_FOREIGN]
    assert [e["message"] for e in foreign] == [wording]
    assert foreign[0]["type"] == "Warning"
    assert foreign[0]["source"]["component"] == EVENT_COMPONENT
    after = kueue.get_trainjob(cp, tj)
    assert after["metadata"].get("deletionTimestamp") is None
    assert after["spec"]["suspend"] is True
    assert after["metadata"]["annotations"][ANNOTATION_JOBSET_UID] == recorded  # the record is not rewritten

    # Reported once per TrainJob by this process, not on every pass.
    kueue.readmit_cycle(cp, wl)
    outcome = await reconcile(kube, key(wl), SETTINGS)
    assert outcome.ready
    assert outcome.foreign_reported == 0
    assert len([e for e in kueue.events_about(cp, tj) if e["reason"] == REASON_FOREIGN]) == 1


@pytest.mark.parametrize("orphan_owner", ["an-earlier-trainjob-uid", None])
async def test_an_orphan_jobset_of_the_name_is_never_recorded(control_plane, namespace, kube, orphan_owner):
    """A JobSet of the TrainJob's name left by an earlier TrainJob of that name is not the one J counts for:
    recorded, its UID would never be corrected, and the TrainJob's own JobSet would be reported as a reset."""
    cp = control_plane
    _check, tj, wl = dispatch_workload(cp, namespace)
    orphan = create_jobset(cp, tj, orphan_owner)
    outcome = await reconcile(kube, key(wl), SETTINGS)
    assert (outcome.action, outcome.ready, outcome.new_a) == (Action.RAISE, True, 1)  # the raise goes ahead
    assert ANNOTATION_JOBSET_UID not in kueue.get_trainjob(cp, tj)["metadata"]["annotations"]

    # The orphan goes; Trainer builds the TrainJob's own JobSet. Its UID is the one recorded, and no reset is
    # reported.
    cp.admin.delete("jobset.x-k8s.io/v1alpha2", "JobSet", orphan["metadata"]["name"], namespace)
    own = create_jobset(cp, tj)
    kueue.readmit_cycle(cp, wl)
    outcome = await reconcile(kube, key(wl), SETTINGS)
    assert (outcome.action, outcome.ready, outcome.new_a, outcome.foreign_reported) == (Action.RAISE, True, 2, 0)
    assert kueue.get_trainjob(cp, tj)["metadata"]["annotations"][ANNOTATION_JOBSET_UID] == own["metadata"]["uid"]
    assert [e for e in kueue.events_about(cp, tj) if e["reason"] == REASON_FOREIGN] == []


async def test_a_concurrent_pass_raises_but_only_one_approval_lands(control_plane, namespace, api_client):
    """Two replicas that both think they lead run a pass over the same Workload at once: both may read
    Pending, but the second TrainJob raise or the second Ready write is refused by its precondition."""
    cp = control_plane
    check, tj, wl = dispatch_workload(cp, namespace)
    both = await asyncio.gather(
        reconcile(Kube(api_client, instance="a"), key(wl), SETTINGS),
        reconcile(Kube(api_client, instance="b"), key(wl), SETTINGS),
    )
    ready = [o for o in both if o.ready]
    assert len(ready) == 1
    # Whichever interleaving: the approval that landed followed a raise in this cycle.
    assert kueue.a_and_floor(kueue.get_trainjob(cp, tj))[0] >= 1
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Ready"


async def test_a_gone_workload_is_nothing_to_do(namespace, kube):
    outcome = await reconcile(kube, WorkloadKey(namespace, f"gone-{secrets.token_hex(3)}"), SETTINGS)
    assert outcome.action is None
    assert not outcome.requeue


async def test_two_checks_of_ours_each_get_their_own_raise_and_ready(control_plane, namespace, kube):
    """Several AdmissionChecks may share our controllerName: one pass serves one of them, and says so."""
    cp = control_plane
    checks = sorted([kueue.create_admission_check(cp), kueue.create_admission_check(cp)])
    tj = kueue.create_dispatch_trainjob(cp, namespace)
    wl = kueue.reserve(cp, kueue.create_workload(cp, tj, checks))
    first = await reconcile(kube, key(wl), SETTINGS)
    assert (first.check, first.ready, first.more) == (checks[0], True, True)
    assert kueue.states(kueue.get_workload(cp, wl)) == {checks[0]: "Ready", checks[1]: "Pending"}
    second = await reconcile(kube, key(wl), SETTINGS)
    assert (second.check, second.ready, second.more) == (checks[1], True, False)
    assert (first.new_a, second.new_a) == (1, 2)
    assert kueue.states(kueue.get_workload(cp, wl)) == dict.fromkeys(checks, "Ready")
