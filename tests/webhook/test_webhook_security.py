"""The rules of issue 10 (docs/security.md), each allowed and denied, per principal: the unsuspend as the
choke point, other runtime-patch entries, the queue, the raise of A, dispatch's check and hold on the
Workload, J on the JobSet, and the webhook's own hardening."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agent.domain.operations import plan_open
from contract.keys import (
    ANNOTATION_ADMISSION,
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_ADMISSION_STARTED,
    ANNOTATION_APPROVED_ADMISSION,
    ANNOTATION_HOLD_INSTANCE,
    ANNOTATION_OPENED,
    HOLD_ANNOTATIONS,
    LABEL_QUEUE_NAME,
)
from contract.patches import UNKNOWN, merged_admission
from harness.fixtures import gate_approved, trainjob
from tests.harness.kubelet import apply_json_patch
from tests.webhook.test_webhook_rules import (
    DISPATCH,
    KUEUE,
    STRANGER,
    admit,
    decide,
    denied_by,
    opened_kueue,
    raised,
    request,
    set_a,
)
from webhook import owners
from webhook.admission import lookups_needed, mutate
from webhook.config import Config
from webhook.review import User

GC = User("system:serviceaccount:kube-system:generic-garbage-collector")


def unsuspend(tj: dict[str, Any]) -> None:
    tj["spec"]["suspend"] = False


def kueue_entry(tj: dict[str, Any]) -> dict[str, Any]:
    return next(e for e in tj["spec"]["runtimePatches"] if e["manager"] == "kueue.x-k8s.io/manager")


def pod_template(entry: dict[str, Any], job: str = "node") -> dict[str, Any]:
    jobs = entry["trainingRuntimeSpec"]["template"]["spec"].setdefault("replicatedJobs", [])
    for j in jobs:
        if j["name"] == job:
            return j["template"]["spec"]["template"]
    jobs.append({"name": job, "template": {"spec": {"template": {}}}})
    return jobs[-1]["template"]["spec"]["template"]


def admitted(old: dict[str, Any], change, user: User = KUEUE):
    new = copy.deepcopy(old)
    change(new)
    return admit(request("UPDATE", new, old, user=user))


def started(old: dict[str, Any], user: User = KUEUE) -> dict[str, Any]:
    """``old`` after the gate's approval and an unsuspend that the webhook admitted, with the mutation applied."""
    old = gate_approved(old)
    new = copy.deepcopy(old)
    unsuspend(new)
    req = request("UPDATE", new, old, user=user)
    verdict = mutate(req, Config())
    after = apply_json_patch(new, verdict.patch or [])
    assert decide(request("UPDATE", after, old, user=user)).allowed
    return after


# -- The unsuspend: the choke point ---------------------------------------------------------------------


def test_kueues_admission_after_a_raise_passes_and_is_recorded():
    after = started(opened_kueue())
    assert after["metadata"]["annotations"][ANNOTATION_ADMISSION_STARTED] == "1"


def test_item_1_every_readmission_is_numbered_in_its_own_write():
    """However Kueue comes to admit again (a forged Ready among the ways), the unsuspend gets A raised in the
    write, and an unsuspend that reached validation with the last execution's A is refused."""
    running = started(opened_kueue())
    evicted = copy.deepcopy(running)
    evicted["spec"]["suspend"] = True
    readmitted = admitted(gate_approved(evicted), unsuspend)  # admission (webhook or policy) raises A in the write
    assert readmitted.allowed
    unnumbered = decide(request("UPDATE", _unsuspended(evicted), evicted, user=KUEUE))  # no mutation
    assert denied_by(unnumbered) == "update.unsuspend"
    assert "the previous execution started with A 1" in unnumbered.message


def test_a_start_the_gate_did_not_approve_is_refused_and_one_approval_starts_one_execution():
    """A queue that admits without dispatch's check (a LocalQueue re-pointed or drained, the ClusterQueue's checks
    edited): Kueue's unsuspend carries no approval of the A it starts with, and is refused, naming what to fix."""
    running = started(opened_kueue())  # approved A 1 and started with it
    evicted = copy.deepcopy(running)
    evicted["spec"]["suspend"] = True
    again = admitted(evicted, unsuspend)  # the approval of A 1 is still on it: A 2 was never approved
    assert denied_by(again) == "update.approval"
    assert "approved-admission" in again.message
    assert "lists dispatch's AdmissionCheck" in again.message
    never = opened_kueue()
    assert denied_by(admitted(never, unsuspend)) == "update.approval"  # no approval at all
    assert admitted(gate_approved(evicted), unsuspend).allowed  # the gate's approval of A 2
    forged = copy.deepcopy(evicted)
    forged["metadata"]["annotations"][ANNOTATION_APPROVED_ADMISSION] = "2/wl-uid"
    assert "reserved-keys" in admitted(evicted, lambda tj: tj.update(forged)).message  # only dispatch writes it
    for bad in ("2", "x/wl-uid", "02/wl-uid"):
        broken = copy.deepcopy(evicted)
        broken["metadata"]["annotations"][ANNOTATION_APPROVED_ADMISSION] = bad
        assert denied_by(admit(request("UPDATE", _unsuspended(broken), broken, user=KUEUE))) == "update.approval"


def _unsuspended(tj):
    new = copy.deepcopy(tj)
    unsuspend(new)
    return new


@pytest.mark.parametrize("user", [KUEUE, DISPATCH, STRANGER])
def test_item_4_never_opened_jobs_are_not_unsuspended_by_anyone(user):
    """Kueue mode with the gate gone but no opened mark: what a plain job gaining the queue label looks like."""
    tj = trainjob()
    tj["metadata"]["annotations"].pop(ANNOTATION_ADMISSION_GATED_BY)
    verdict = admitted(raised(tj), unsuspend, user=user)
    assert denied_by(verdict) == "update.unsuspend"
    assert ANNOTATION_OPENED in verdict.message


def test_plain_hold_in_force_refuses_the_unsuspend():
    tj = trainjob(queue=None)
    tj["metadata"]["annotations"][ANNOTATION_OPENED] = "true"
    tj["metadata"]["annotations"][ANNOTATION_HOLD_INSTANCE] = "h-1"
    verdict = admitted(raised(tj), unsuspend, user=DISPATCH)
    assert denied_by(verdict) == "update.unsuspend"
    assert "a hold of dispatch's is in force" in verdict.message


def test_a_stale_or_forged_record_is_refused():
    running = started(opened_kueue())
    forged = copy.deepcopy(running)
    forged["spec"]["suspend"] = True

    def lie(tj):
        unsuspend(tj)
        tj["metadata"]["annotations"][ANNOTATION_ADMISSION_STARTED] = "7"

    new = copy.deepcopy(raised(forged))
    lie(new)
    verdict = decide(request("UPDATE", new, raised(forged), user=KUEUE))  # no mutation: the record lies
    assert denied_by(verdict) == "update.unsuspend"
    assert "recorded by dispatch's admission policy or mutating webhook" in verdict.message


def test_the_record_changes_only_in_an_unsuspend():
    running = started(opened_kueue())
    for user in (DISPATCH, KUEUE):
        verdict = admitted(
            running, lambda tj: tj["metadata"]["annotations"].update({ANNOTATION_ADMISSION_STARTED: "0"}), user=user
        )
        assert "update.admission-started" in verdict.message


# -- Item 2: other runtime-patch entries ---------------------------------------------------------------


@pytest.mark.parametrize(
    "intrude",
    [
        lambda t: t.setdefault("metadata", {}).setdefault("annotations", {}).update({ANNOTATION_ADMISSION: "1"}),
        lambda t: t.setdefault("metadata", {}).setdefault("labels", {}).update({"dispatch.phpboyscout.uk/x": "1"}),
        lambda t: t.setdefault("metadata", {}).setdefault("labels", {}).update({"jobset.sigs.k8s.io/restart-attempt": "0"}),
        lambda t: t.setdefault("metadata", {}).setdefault("annotations", {}).update({"$patch": "replace"}),
        lambda t: t.setdefault("spec", {}).update(containers=[{"name": "node", "env": [{"name": "DISPATCH_K8S_ADMISSION", "value": "1"}]}]),
        lambda t: t.setdefault("spec", {}).update(initContainers=[{"name": "fetch-publish", "env": [{"name": "DISPATCH_X", "value": "1"}]}]),
        lambda t: t.setdefault("spec", {}).update(containers=[{"name": "node", "command": ["sleep"]}]),
        # Default deny: nothing of the trainer container, its volumes or the pod's identity, whatever the key.
        lambda t: t.setdefault("spec", {}).update(containers=[{"name": "node", "volumeMounts": [{"name": "v", "mountPath": "/bin"}]}]),
        lambda t: t.setdefault("spec", {}).update(volumes=[{"name": "dispatch-credential-0", "hostPath": {"path": "/"}}]),
        lambda t: t.setdefault("spec", {}).update(serviceAccountName="powerful"),
        lambda t: t.setdefault("spec", {}).update(securityContext={"runAsUser": 0}),
        lambda t: t.setdefault("metadata", {}).update(finalizers=["example.com/stuck"]),
    ],
)  # fmt: skip
@pytest.mark.parametrize("user", [KUEUE, STRANGER, DISPATCH])
def test_item_2_other_entries_may_not_set_what_dispatchs_entry_owns(intrude, user):
    def kueue_entry_intrudes(tj):
        intrude(pod_template(kueue_entry(tj)))

    verdict = admitted(opened_kueue(), kueue_entry_intrudes, user=user)
    assert "runtime-patch.foreign" in verdict.message

    def strangers_entry(tj):
        entry = {"manager": "example.com/mine", "trainingRuntimeSpec": {"template": {"spec": {}}}}
        intrude(pod_template(entry))
        tj["spec"]["runtimePatches"].append(entry)

    assert "runtime-patch.foreign" in admitted(opened_kueue(), strangers_entry, user=user).message


def test_kueues_own_admission_write_passes():
    def kueue_fills_its_entry(tj):
        t = pod_template(kueue_entry(tj))
        t["metadata"] = {"labels": {"kueue.x-k8s.io/podset": "node"}, "annotations": {"a.example/b": "c"}}
        t["spec"] = {
            "nodeSelector": {"zone": "a"},
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "schedulingGates": [{"name": "kueue.x-k8s.io/topology"}],
        }

    assert admitted(opened_kueue(), kueue_fills_its_entry).allowed


@pytest.mark.parametrize(
    "where",
    [
        ("trainingRuntimeSpec", "template", "metadata"),
        ("trainingRuntimeSpec", "template", "spec", "replicatedJobs", 0, "template", "metadata"),
    ],
)
def test_a_foreign_entry_touches_neither_the_jobsets_nor_the_jobs_metadata(where):
    def intrude(tj):
        node: Any = kueue_entry(tj)
        for part in where[:-1]:
            node = (
                node[part]
                if isinstance(part, int)
                else node.setdefault(part, [{"name": "node"}] if part == "replicatedJobs" else {})
            )
        node[where[-1]] = {"labels": {"team": "x"}}

    verdict = admitted(opened_kueue(), intrude, user=KUEUE)
    assert "runtime-patch.foreign" in verdict.message
    assert ".".join(str(p) for p in where if not isinstance(p, int)).split(".")[-1] in verdict.message


def test_the_merged_pod_template_decides_a():
    tj = opened_kueue()
    assert merged_admission(tj) == "1"
    pod_template(kueue_entry(tj)).setdefault("metadata", {})["annotations"] = {ANNOTATION_ADMISSION: "0"}
    assert merged_admission(tj) == "0"
    pod_template(kueue_entry(tj))["metadata"]["annotations"] = {"$patch": "replace"}
    assert merged_admission(tj) == UNKNOWN


def test_an_entry_that_overrides_a_is_refused_at_the_unsuspend_even_if_it_got_in():
    """Belt and braces: an entry written before these rules (or while they were off) stops the unsuspend."""
    tj = opened_kueue()
    pod_template(kueue_entry(tj)).setdefault("metadata", {})["annotations"] = {ANNOTATION_ADMISSION: "0"}
    verdict = admitted(tj, unsuspend)
    assert denied_by(verdict) == "update.unsuspend"
    assert "A 0 in the merged pod template" in verdict.message


# -- Items 3 and 4: the queue ----------------------------------------------------------------------------


@pytest.mark.parametrize("user", [DISPATCH, KUEUE, STRANGER])
@pytest.mark.parametrize(
    ("base", "change"),
    [
        (lambda: trainjob(), lambda tj: tj["metadata"]["labels"].update({LABEL_QUEUE_NAME: "no-check-queue"})),
        (lambda: trainjob(), lambda tj: tj["metadata"]["labels"].pop(LABEL_QUEUE_NAME)),
        (lambda: trainjob(queue=None), lambda tj: tj["metadata"]["labels"].update({LABEL_QUEUE_NAME: "q"})),
    ],
)
def test_items_3_and_4_the_queue_never_changes(user, base, change):
    assert "update.queue" in admitted(base(), change, user=user).message


# -- Item 7: A rises only by dispatch, and only by one --------------------------------------------------


def test_item_7_strangers_may_not_raise_a():
    for user in (STRANGER, KUEUE):
        verdict = admitted(trainjob(), lambda tj: set_a("999999")(tj), user=user)
        assert "update.counter" in verdict.message
        assert "only dispatch raises A" in verdict.message


def test_item_7_dispatch_raises_to_max_plus_one_only():
    def jump(tj):
        set_a("5")(tj)
        tj["metadata"]["annotations"][ANNOTATION_ADMISSION_FLOOR] = "5"

    verdict = admitted(trainjob(), jump, user=DISPATCH)
    assert "update.counter" in verdict.message
    assert "max(A, floor) + 1 = 1" in verdict.message
    assert admitted(trainjob(), lambda tj: None, user=DISPATCH).allowed
    assert decide(request("UPDATE", raised(trainjob()), trainjob(), user=DISPATCH)).allowed


# -- Kueue-mode Open writes the opened mark --------------------------------------------------------------


def test_kueue_mode_open_writes_the_opened_mark_with_the_gates_removal():
    tj = trainjob()
    after = apply_json_patch(tj, plan_open(tj).patch)
    assert ANNOTATION_ADMISSION_GATED_BY not in after["metadata"]["annotations"]
    assert after["metadata"]["annotations"][ANNOTATION_OPENED] == "true"
    assert admit(request("UPDATE", after, tj, user=DISPATCH)).allowed


def test_open_marks_a_kueue_job_opened_by_an_older_agent():
    tj = trainjob()
    tj["metadata"]["annotations"].pop(ANNOTATION_ADMISSION_GATED_BY)
    plan = plan_open(tj)
    assert plan.outcome == "opened mark written"
    assert apply_json_patch(tj, plan.patch)["metadata"]["annotations"][ANNOTATION_OPENED] == "true"
    assert plan_open(apply_json_patch(tj, plan.patch)).patch == []


# -- Workloads: items 1, 2 and 6 -------------------------------------------------------------------------

CHECK = "dispatch-admission"


def workload(state: str = "Pending", *, active: bool = True, **notes: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "trainjob-dj-01arz3ndektsv4rrffq69g5fav-s3-1a2b3",
            "namespace": "team-a",
            "annotations": dict(notes),
            "ownerReferences": [
                {
                    "apiVersion": "trainer.kubeflow.org/v1alpha1",
                    "kind": "TrainJob",
                    "name": "dj-01arz3ndektsv4rrffq69g5fav-s3",
                    "uid": "tj-uid",
                    "controller": True,
                }
            ],
        },
        "spec": {"active": active, "queueName": "team-a-queue"},
        "status": {
            "admissionChecks": [
                {"name": CHECK, "state": state, "message": "", "lastTransitionTime": "2026-12-01T10:00:00Z"},
                {"name": "site-check", "state": "Pending", "message": "", "lastTransitionTime": "2026-12-01T10:00:00Z"},
            ]
        },
    }


def status_request(new, old, user: User) -> Any:
    return request(
        "UPDATE",
        new,
        old,
        user=user,
        resource="workloads",
        kind="Workload",
        group="kueue.x-k8s.io",
        sub_resource="status",
    )


def spec_request(new, old, user: User) -> Any:
    return request("UPDATE", new, old, user=user, resource="workloads", kind="Workload", group="kueue.x-k8s.io")


@pytest.mark.parametrize("user", [STRANGER, KUEUE])
def test_item_1_only_dispatch_sets_its_check_ready(user):
    verdict = decide(status_request(workload("Ready"), workload("Pending"), user))
    assert denied_by(verdict) == "workload-status.check"
    assert decide(status_request(workload("Ready"), workload("Pending"), DISPATCH)).allowed


def test_item_1_forged_pod_set_updates_on_a_ready_check():
    ready = workload("Ready")
    forged = copy.deepcopy(ready)
    forged["status"]["admissionChecks"][0]["podSetUpdates"] = [{"name": "node", "labels": {"team": "x"}}]
    assert denied_by(decide(status_request(forged, ready, STRANGER))) == "workload-status.check"


def test_kueue_resets_and_other_checks_pass():
    assert decide(status_request(workload("Pending"), workload("Ready"), KUEUE)).allowed
    other = workload("Pending")
    other["status"]["admissionChecks"][1]["state"] = "Ready"
    assert decide(status_request(other, workload("Pending"), STRANGER)).allowed  # the site's own check
    same = workload("Ready")
    same["status"]["conditions"] = [{"type": "QuotaReserved", "status": "True"}]
    assert decide(status_request(same, workload("Ready"), KUEUE)).allowed  # Kueue re-applies a Ready it read


@pytest.mark.parametrize("key", [ANNOTATION_ADMISSION, "dispatch.phpboyscout.uk/job-id", "$patch"])
def test_item_2_no_check_may_carry_dispatchs_pod_keys(key):
    new = workload()
    new["status"]["admissionChecks"][1]["podSetUpdates"] = [{"name": "node", "annotations": {key: "0"}}]
    for user in (STRANGER, KUEUE, DISPATCH):
        assert "workload-status.pod-set-updates" in decide(status_request(new, workload(), user)).message


def test_status_writes_on_other_workloads_pass():
    other = workload("Ready")
    other["metadata"]["ownerReferences"][0]["name"] = "resnet"
    other["metadata"]["name"] = "trainjob-resnet-1a2b3"
    before = copy.deepcopy(other)
    before["status"]["admissionChecks"][0]["state"] = "Pending"
    assert decide(status_request(other, before, STRANGER)).allowed


@pytest.mark.parametrize("user", [STRANGER, KUEUE, DISPATCH])
def test_item_6_a_held_workload_is_not_reactivated_with_the_hold_kept(user):
    held = workload(active=False, **{key: "x" for key in HOLD_ANNOTATIONS})
    new = copy.deepcopy(held)
    new["spec"]["active"] = True
    assert denied_by(decide(spec_request(new, held, user))) == "workload.hold"


def test_release_reactivates_and_lifts_the_hold_at_once():
    held = workload(active=False, **{key: "x" for key in HOLD_ANNOTATIONS})
    released = workload(active=True)
    assert decide(spec_request(released, held, DISPATCH)).allowed


def test_strangers_may_not_move_a_dispatch_workload_to_another_queue():
    new = workload()
    new["spec"]["queueName"] = "no-check-queue"
    assert denied_by(decide(spec_request(new, workload(), STRANGER))) == "workload.queue"
    assert decide(spec_request(new, workload(), KUEUE)).allowed


# -- JobSets: item 5 --------------------------------------------------------------------------------------


def jobset(restarts: int = 2, name: str = "dj-01arz3ndektsv4rrffq69g5fav-s3") -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": "team-a", "uid": "js-1"},
        "spec": {"suspend": False},
        "status": {"restarts": restarts},
    }


def jobset_request(op: str, new, old, user: User, sub_resource: str = ""):
    return request(
        op, new, old, user=user, resource="jobsets", kind="JobSet", group="jobset.x-k8s.io", sub_resource=sub_resource
    )


@pytest.mark.parametrize("user", [STRANGER, KUEUE])
def test_item_5_strangers_may_not_delete_a_dispatch_jobset(user):
    verdict = decide(jobset_request("DELETE", None, jobset(), user))
    assert denied_by(verdict) == "jobset.delete"
    assert "delete the TrainJob instead" in verdict.message


@pytest.mark.parametrize("user", [DISPATCH, GC])
def test_the_garbage_collector_and_dispatch_delete_jobsets(user):
    assert decide(jobset_request("DELETE", None, jobset(), user)).allowed


def test_other_jobsets_are_deleted_freely():
    assert decide(jobset_request("DELETE", None, jobset(name="resnet"), STRANGER)).allowed


@pytest.mark.parametrize("user", [STRANGER, KUEUE, DISPATCH, GC])
def test_item_5_restarts_never_fall(user):
    verdict = decide(jobset_request("UPDATE", jobset(0), jobset(2), user, "status"))
    assert denied_by(verdict) == "jobset-status.restarts"
    assert decide(jobset_request("UPDATE", jobset(3), jobset(2), user, "status")).allowed


TRAINER = User(owners.DEFAULT_USERNAMES[owners.TRAINER][0])
NO_SUSPEND = object()


def created_jobset(
    suspend: object = True, *, name: str = "dj-01arz3ndektsv4rrffq69g5fav-s3", owner: str | None = None
) -> dict[str, Any]:
    """A JobSet as Trainer creates it: named as its TrainJob ``owner`` (``name`` by default), owned by it, with the
    TrainJob's ``spec.suspend`` (``NO_SUSPEND``: the field left out, as for a TrainJob without one)."""
    ref = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "name": name if owner is None else owner,
        "uid": "tj-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    js: dict[str, Any] = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": "team-a", "ownerReferences": [ref]},
        "spec": {"replicatedJobs": [{"name": "node", "replicas": 1}]},
    }
    if suspend is not NO_SUSPEND:
        js["spec"]["suspend"] = suspend
    return js


@pytest.mark.parametrize("user", [TRAINER, DISPATCH, STRANGER])
def test_a_dispatch_jobset_created_suspended_is_allowed(user):
    """Trainer creates it while its TrainJob is suspended (dispatch creates its TrainJobs closed); who may create
    it at all is the owner policy's."""
    assert decide(jobset_request("CREATE", created_jobset(True), None, user)).allowed


@pytest.mark.parametrize("suspend", [False, NO_SUSPEND], ids=["running", "suspend-absent"])
@pytest.mark.parametrize("user", [TRAINER, DISPATCH, KUEUE, GC, STRANGER])
def test_a_dispatch_jobset_created_running_is_refused_for_everyone(user, suspend):
    """Trainer's recreation of the JobSet of a TrainJob being deleted (Stop deletes in the foreground) comes as such
    a create, from Trainer itself: J would start again at 0 under the A of the execution Stop ended."""
    verdict = decide(jobset_request("CREATE", created_jobset(suspend), None, user))
    assert denied_by(verdict) == "jobset.create-suspended"
    assert "spec.suspend" in verdict.message
    assert "absent" in verdict.message if suspend is NO_SUSPEND else "False" in verdict.message
    assert "whose J starts again at 0" in verdict.message


def test_a_jobset_is_dispatchs_by_its_name_or_by_its_owner():
    by_owner = created_jobset(False, name="renamed", owner="dj-01arz3ndektsv4rrffq69g5fav-s3")
    assert denied_by(decide(jobset_request("CREATE", by_owner, None, TRAINER))) == "jobset.create-suspended"
    by_name = created_jobset(False)
    by_name["metadata"]["ownerReferences"] = []
    assert denied_by(decide(jobset_request("CREATE", by_name, None, STRANGER))) == "jobset.create-suspended"


@pytest.mark.parametrize("suspend", [False, NO_SUSPEND], ids=["running", "suspend-absent"])
def test_other_jobsets_are_created_running_freely(suspend):
    for name in ("resnet", "dj-resnet"):
        assert decide(jobset_request("CREATE", created_jobset(suspend, name=name), None, TRAINER)).allowed
        assert decide(jobset_request("CREATE", created_jobset(suspend, name=name), None, STRANGER)).allowed


def test_a_running_jobset_is_unsuspended_by_an_update_not_a_create():
    """Trainer unsuspends the JobSet it made suspended once the TrainJob's unsuspend raised A: an update, which
    this rule leaves alone (who may make it is the owner policy's)."""
    assert decide(jobset_request("UPDATE", created_jobset(False), created_jobset(True), TRAINER)).allowed


# -- Hardening ------------------------------------------------------------------------------------------------


def test_no_runtime_lookup_for_a_strangers_dispatch_looking_create():
    tj = trainjob()
    assert lookups_needed(request("CREATE", tj, user=STRANGER), Config()) == []
    assert lookups_needed(request("CREATE", tj, user=DISPATCH), Config()) != []


def test_the_denial_names_the_generated_name():
    tj = trainjob()
    req = request("CREATE", tj, user=STRANGER)
    req = type(req)(**{**req.__dict__, "name": ""})
    assert "TrainJob team-a/dj-01arz3ndektsv4rrffq69g5fav-s3:" in decide(req).message
    del tj["metadata"]["name"]
    tj["metadata"]["generateName"] = "dj-"
    tj["spec"]["runtimePatches"][0]["manager"] = "dispatch.phpboyscout.uk/adapter"
    req = type(req)(**{**req.__dict__, "object": tj})
    assert "TrainJob team-a/dj-<generated>:" in decide(req).message
