"""Every webhook rule, allowed and denied, for each principal: dispatch, Kueue, and a stranger."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from contract.admission import admission_count, admission_floor, raise_admission
from contract.keys import (
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_ADMISSION_STARTED,
    ANNOTATION_HOLD_REASON,
    ANNOTATION_JOBSET_UID,
    ANNOTATION_OPENED,
    GATE,
)
from contract.objects import dig
from contract.prologue import PROLOGUE, SPEC_PROLOGUE, inline_prologue_argv
from contract.trainer import escape_expansion
from contract.trainjob import build_trainjob
from harness.fixtures import gate_approved, runtime, runtime_copy, submission, trainjob
from tests.harness.kubelet import apply_json_patch
from webhook.admission import lookups_needed, mutate, validate
from webhook.config import DEFAULT_DISPATCH_USERNAME, DEFAULT_KUEUE_USERNAME, Config
from webhook.review import Lookups, Request, User

DISPATCH = User(DEFAULT_DISPATCH_USERNAME, ("system:serviceaccounts",))
KUEUE = User(DEFAULT_KUEUE_USERNAME, ("system:serviceaccounts",))
STRANGER = User("alice", ("system:authenticated",))
TRAINER = ("trainer.kubeflow.org", "v1alpha1")


def request(
    operation: str,
    new: dict[str, Any] | None,
    old: dict[str, Any] | None = None,
    *,
    user: User = DISPATCH,
    resource: str = "trainjobs",
    kind: str = "TrainJob",
    group: str = "trainer.kubeflow.org",
    sub_resource: str = "",
) -> Request:
    obj = new or old or {}
    return Request(
        uid="review-1",
        api_version="admission.k8s.io/v1",
        group=group,
        version="v1alpha1" if group == "trainer.kubeflow.org" else "v1beta2",
        kind=kind,
        resource=resource,
        sub_resource=sub_resource,
        operation=operation,
        name=obj.get("metadata", {}).get("name", ""),
        namespace=obj.get("metadata", {}).get("namespace", "team-a"),
        user=user,
        object=new,
        old_object=old,
    )


def created(**overrides: Any) -> dict[str, Any]:
    """A TrainJob as the API server sends it to validation on create: canonical, no uid yet."""
    return build_trainjob(submission(**overrides), runtime()["spec"])


def lookups_for(req: Request, rt: dict[str, Any] | None = "copy") -> Lookups:  # type: ignore[assignment]
    if rt == "copy":
        rt = runtime_copy()
    return Lookups(runtimes={key: rt for key in lookups_needed(req)})


def decide(req: Request, config: Config | None = None, rt: Any = "copy"):
    return validate(req, config or Config(), lookups_for(req, rt))


def admit(req: Request, config: Config | None = None, rt: Any = "copy"):
    """What the API server does: the mutating webhook, then validation of the mutated object."""
    mutation = mutate(req, config or Config())
    if mutation.patch and req.object is not None:
        req = dataclasses.replace(req, object=apply_json_patch(req.object, mutation.patch))
    return decide(req, config, rt)


def denied_by(verdict) -> str:
    assert not verdict.allowed, "expected a denial"
    assert verdict.code == 403
    assert verdict.message.startswith("dispatch-k8s denied this ")
    return verdict.rule


# -- TrainJob creation -------------------------------------------------------------------------------


@pytest.mark.parametrize("queue", ["team-a-queue", None])
def test_dispatch_creates_canonical_trainjob(queue):
    req = request("CREATE", created(queue=queue))
    assert lookups_needed(req) == [("team-a", "dj-01arz3ndektsv4rrffq69g5fav-s3")]
    verdict = decide(req)
    assert verdict.allowed, verdict.message
    assert verdict.warnings == ()


def test_canonical_with_no_workdir_no_credentials_and_g_n_zero():
    verdict = decide(request("CREATE", created(workdir=None, credentials=[], publish=None, g=0, n=0, env={})))
    assert verdict.allowed, verdict.message


def test_stranger_may_not_create_a_dispatch_trainjob():
    verdict = decide(request("CREATE", created(), user=STRANGER))
    assert denied_by(verdict) == "creation.principal"
    assert "reserved-keys" in verdict.message
    assert "alice" in verdict.message


def test_stranger_may_not_create_one_by_manager_alone():
    tj = created()
    tj["metadata"]["name"] = "innocent"
    tj["metadata"]["labels"] = {}
    tj["metadata"]["annotations"] = {}
    assert denied_by(decide(request("CREATE", tj, user=STRANGER))) == "creation.principal"


def unrelated_trainjob() -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "resnet", "namespace": "team-a", "labels": {"team": "a"}},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"command": ["python"]}},
    }


def test_unrelated_trainjobs_are_not_policed():
    assert decide(request("CREATE", unrelated_trainjob(), user=STRANGER)).allowed
    assert lookups_needed(request("CREATE", unrelated_trainjob(), user=STRANGER)) == []
    old = unrelated_trainjob()
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = False
    assert decide(request("UPDATE", new, old, user=STRANGER)).allowed


@pytest.mark.parametrize(
    ("mutate_", "rule"),
    [
        (lambda tj: tj["metadata"]["labels"].update({"dispatch.phpboyscout.uk/job-id": "x"}), "reserved-keys"),
        (lambda tj: tj["metadata"].setdefault("annotations", {}).update({ANNOTATION_ADMISSION_GATED_BY: GATE}),
         "reserved-keys.gate"),
    ],
)  # fmt: skip
def test_stranger_may_not_claim_an_unrelated_trainjob(mutate_, rule):
    tj = unrelated_trainjob()
    mutate_(tj)
    assert denied_by(decide(request("CREATE", tj, user=STRANGER))) == rule


def bad(path: str | tuple[str, ...], value: Any):
    def apply(tj):
        *parents, last = path.split(".") if isinstance(path, str) else path
        node = tj
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if value is DELETE:
            del node[last if not isinstance(node, list) else int(last)]
        else:
            node[int(last) if isinstance(node, list) else last] = value

    return apply


DELETE = object()
PATCH_META = ("spec", "runtimePatches", "0", "trainingRuntimeSpec", "template", "spec", "replicatedJobs", "0",
              "template", "spec", "template", "metadata")  # fmt: skip
PATCH_POD = (*PATCH_META[:-1], "spec")


def pod_spec_of_entry(tj):
    return dig(tj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0],
               "template", "spec", "template", "spec")  # fmt: skip


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        (bad("spec.trainer.command.1", "/tmp/prologue.sh"), "creation.prologue"),
        (bad("spec.trainer.command", ["python", "train.py"]), "creation.prologue"),
        # the text inline, as before it moved to the ConfigMap: refused (it only cost every object its size)
        (bad("spec.trainer.command", inline_prologue_argv([], escape_expansion(PROLOGUE))), "creation.prologue"),
        (bad((*PATCH_POD, "volumes"), DELETE), "creation.prologue-volume"),
        (bad((*PATCH_POD, "volumes", "0", "configMap", "optional"), True), "creation.prologue-volume"),
        (bad((*PATCH_POD, "volumes", "0", "configMap", "name"), "dispatch-k8s-prologue-0000000000"),
         "creation.prologue-volume"),
        (bad((*PATCH_POD, "containers", "0", "volumeMounts", "0", "readOnly"), False), "creation.prologue-volume"),
        (bad((*PATCH_POD, "containers", "0", "volumeMounts", "0", "mountPath"), "/prologue"),
         "creation.prologue-volume"),
        (lambda tj: pod_spec_of_entry(tj)["containers"][0]["volumeMounts"].append(
            {"name": "dispatch-credential-0", "mountPath": "/var/run/dispatch-k8s/prologue/prologue.sh"}),
         "creation.prologue-volume"),
        # the same, written so that only a normalised comparison sees it
        (lambda tj: pod_spec_of_entry(tj)["containers"][0]["volumeMounts"].append(
            {"name": "dispatch-credential-0", "mountPath": "/var/run/dispatch-k8s//prologue/./prologue.sh/"}),
         "creation.prologue-volume"),
        (bad("spec.trainer.args", []), "creation.args"),
        (bad("spec.trainer.env.0", {"name": "DISPATCH_DEBUG", "value": "1"}), "creation.env-reserved"),
        (bad("spec.trainer.env.0", {"name": "ZZZ", "value": "1"}), "creation.env"),
        (bad("spec.trainer.env.3", {"name": "DISPATCH_SUBMISSION", "value": "4"}), "creation.env"),
        (bad("spec.trainer.env.5", {"name": "DISPATCH_K8S_TOKEN_PREFIX", "value": "01ARZ3NDEKTSV4RRFFQ69G5FAV.4.2"}),
         "creation.env"),
        (bad("spec.trainer.env.6", DELETE), "creation.env"),
        (bad("spec.trainer.env.7", {"name": "DISPATCH_K8S_RESTART", "value": "0"}), "creation.env"),
        (bad(("metadata", "labels", "dispatch.phpboyscout.uk/submission"), "4"), "creation.labels"),
        (bad(("metadata", "annotations", "dispatch.phpboyscout.uk/comment"), "dispatch:s=3;a=9"), "creation.comment"),
        (bad(("metadata", "annotations", ANNOTATION_ADMISSION_FLOOR), "5"), "creation.keys"),
        (bad(("metadata", "annotations", ANNOTATION_ADMISSION_GATED_BY), "other.example/hold"), "creation.gate"),
        (bad("spec.runtimeRef", {"kind": "ClusterTrainingRuntime", "name": "torch-distributed"}),
         "creation.runtime-ref"),
        (bad((*PATCH_META, "annotations"), {"dispatch.phpboyscout.uk/admission": "1"}), "creation.admission"),
        (bad((*PATCH_META, "labels"), {}), "creation.runtime-patch"),
        (bad("spec.runtimePatches.0.trainingRuntimeSpec.template.spec.replicatedJobs.0.name", "dataset-initializer"),
         "creation.runtime-patch"),
        (lambda tj: tj["spec"]["runtimePatches"].append(copy.deepcopy(tj["spec"]["runtimePatches"][0])),
         "creation.runtime-patch"),
        (bad("metadata.name", "dj-01ARZ3NDEKTSV4RRFFQ69G5FAV-s3"), "creation.name"),
    ],
)  # fmt: skip
def test_non_canonical_creations_are_denied_naming_the_rule(change, rule):
    tj = created()
    change(tj)
    verdict = decide(request("CREATE", tj))
    assert denied_by(verdict) == rule
    assert rule in verdict.message


def test_plain_mode_must_be_created_suspended():
    tj = created(queue=None)
    tj["spec"]["suspend"] = False
    verdict = decide(request("CREATE", tj))
    assert denied_by(verdict) == "creation.suspend"
    assert "plain mode is created suspended" in verdict.message


def test_the_runtime_copy_must_exist_and_meet_the_requirements():
    assert denied_by(decide(request("CREATE", created()), rt=None)) == "creation.runtime-copy"
    rt = runtime_copy()
    rt["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["restartPolicy"] = (
        "OnFailure"
    )
    verdict = decide(request("CREATE", created()), rt=rt)
    assert denied_by(verdict) == "runtime.restart-policy"
    assert "saw 'OnFailure'; must be Never" in verdict.message


def test_spec_prologue_only_where_the_site_allows_it_and_then_with_a_warning():
    tj = created()
    tj["spec"]["trainer"]["command"] = inline_prologue_argv([], SPEC_PROLOGUE)
    assert denied_by(decide(request("CREATE", tj))) == "creation.prologue"
    verdict = decide(request("CREATE", tj), Config(allowSpecPrologue=True))
    assert verdict.allowed, verdict.message
    assert "spec's original prologue" in verdict.warnings[0]


def test_denial_names_rule_field_seen_and_accepted():
    tj = created()
    tj["metadata"]["labels"]["dispatch.phpboyscout.uk/submission"] = "4"
    message = decide(request("CREATE", tj)).message
    assert "TrainJob team-a/dj-01arz3ndektsv4rrffq69g5fav-s3" in message
    assert "[creation.labels] metadata.labels: saw" in message
    assert "'4'" in message
    assert "dispatch.phpboyscout.uk/submission=3" in message


# -- TrainJob updates ----------------------------------------------------------------------------


def update(change, *, user: User = DISPATCH, base: dict[str, Any] | None = None):
    old = base or trainjob()
    new = copy.deepcopy(old)
    change(new)
    return admit(request("UPDATE", new, old, user=user))


def raised(tj: dict[str, Any]) -> dict[str, Any]:
    return apply_json_patch(tj, raise_admission(tj).patch)


def opened_kueue() -> dict[str, Any]:
    """A Kueue-mode TrainJob that dispatch opened (gate removed, opened mark written) and whose A the
    readmission gate raised: what Kueue then unsuspends."""
    tj = trainjob()
    tj["metadata"]["annotations"].pop(ANNOTATION_ADMISSION_GATED_BY)
    tj["metadata"]["annotations"][ANNOTATION_OPENED] = "true"
    return raised(tj)


def test_the_raise_of_a_passes():
    old = trainjob()
    assert decide(request("UPDATE", raised(old), old)).allowed


def test_open_in_kueue_mode_removes_the_gate():
    assert update(lambda tj: tj["metadata"]["annotations"].pop(ANNOTATION_ADMISSION_GATED_BY)).allowed


def test_kueue_writes_pass():
    def kueue_admits(tj):
        tj["spec"]["runtimePatches"][1]["trainingRuntimeSpec"]["template"]["spec"] = {
            "replicatedJobs": [
                {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {"a": "b"}}}}}}
            ]
        }
        tj["spec"]["suspend"] = False

    base = gate_approved(opened_kueue())
    assert update(kueue_admits, user=KUEUE, base=base).allowed
    assert update(lambda tj: tj["spec"].update(suspend=True), user=KUEUE, base=base).allowed


def test_trainer_status_writes_pass():
    old = trainjob()
    new = copy.deepcopy(old)
    new["status"] = {"conditions": [{"type": "Complete"}]}
    new["metadata"]["annotations"] = {}  # even a nonsensical object: status writes are not policed
    assert decide(request("UPDATE", new, old, user=STRANGER, sub_resource="status")).allowed


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        (lambda tj: tj["metadata"]["labels"].pop("dispatch.phpboyscout.uk/job-id"), "reserved-keys"),
        (lambda tj: tj["metadata"]["annotations"].update({ANNOTATION_HOLD_REASON: "mine"}), "reserved-keys"),
        (lambda tj: tj["metadata"]["annotations"].pop(ANNOTATION_ADMISSION_GATED_BY), "reserved-keys.gate"),
        (lambda tj: tj["metadata"]["annotations"].update({ANNOTATION_ADMISSION_GATED_BY: "x.example/y"}),
         "reserved-keys.gate"),
    ],
)  # fmt: skip
def test_strangers_may_not_touch_reserved_keys_or_the_gate(change, rule):
    assert denied_by(update(change, user=STRANGER)) == rule
    assert update(change, user=DISPATCH).allowed or rule == "reserved-keys"


def test_strangers_may_add_and_remove_gates_of_their_own():
    with_hold = trainjob()
    with_hold["metadata"]["annotations"][ANNOTATION_ADMISSION_GATED_BY] = f"{GATE},admin.example/hold"
    remove_own = update(
        lambda tj: tj["metadata"]["annotations"].update({ANNOTATION_ADMISSION_GATED_BY: GATE}),
        user=STRANGER,
        base=with_hold,
    )
    assert remove_own.allowed


def with_floor(a: int, floor: int | None) -> dict[str, Any]:
    tj = trainjob()
    meta = tj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    meta["template"]["spec"]["template"]["metadata"]["annotations"]["dispatch.phpboyscout.uk/admission"] = str(a)
    if floor is not None:
        tj["metadata"]["annotations"][ANNOTATION_ADMISSION_FLOOR] = str(floor)
    return tj


def set_a(value: str | None):
    def change(tj):
        notes = tj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0][
            "template"
        ]["spec"]["template"]["metadata"]["annotations"]
        if value is None:
            notes.pop("dispatch.phpboyscout.uk/admission")
        else:
            notes["dispatch.phpboyscout.uk/admission"] = value

    return change


@pytest.mark.parametrize("user", [DISPATCH, KUEUE, STRANGER])
@pytest.mark.parametrize(
    ("change", "says"),
    [
        (set_a("2"), "3 -> 2"),
        (set_a(None), "3 -> removed"),
        (set_a("03"), "not a decimal count"),
        (lambda tj: tj["metadata"]["annotations"].update({ANNOTATION_ADMISSION_FLOOR: "2"}), "3 -> 2"),
        (lambda tj: tj["metadata"]["annotations"].pop(ANNOTATION_ADMISSION_FLOOR), "3 -> removed"),
    ],
)
def test_a_and_the_floor_never_fall_for_anyone(user, change, says):
    verdict = update(change, user=user, base=with_floor(3, 3))
    assert not verdict.allowed
    assert "update.counter" in verdict.message
    assert says in verdict.message


def test_a_may_rise_and_the_floor_with_it():
    def up(tj):
        set_a("4")(tj)
        tj["metadata"]["annotations"][ANNOTATION_ADMISSION_FLOOR] = "4"

    assert update(up, base=with_floor(3, 3)).allowed


def test_jobset_uid_is_recorded_once():
    assert update(lambda tj: tj["metadata"]["annotations"].update({ANNOTATION_JOBSET_UID: "js-1"})).allowed
    base = trainjob()
    base["metadata"]["annotations"][ANNOTATION_JOBSET_UID] = "js-1"
    for user in (DISPATCH, STRANGER):
        verdict = update(lambda tj: tj["metadata"]["annotations"].update({ANNOTATION_JOBSET_UID: "js-2"}), user=user,
                         base=base)  # fmt: skip
        assert "update.jobset-uid" in verdict.message
        assert "js-1 -> js-2" in verdict.message


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda tj: tj["spec"]["runtimePatches"].pop(0), "dispatch's entry is never removed"),
        (bad((*PATCH_META, "labels", "dispatch.phpboyscout.uk/submission"), "9"), "only A changes"),
        (
            bad("spec.runtimePatches.0.trainingRuntimeSpec.template.spec.replicatedJobs.0.name", "x"),
            "only A changes",
        ),
    ],
)
def test_dispatchs_entry_is_never_removed_or_replaced(change, says):
    verdict = update(change)
    assert denied_by(verdict) == "update.runtime-patch"
    assert says in verdict.message


def test_trainers_time_stamp_is_not_a_rewrite():
    assert update(lambda tj: tj["spec"]["runtimePatches"][0].update(time="2026-11-29T10:00:00Z")).allowed


def test_dispatchs_entry_cannot_be_added_later():
    old = unrelated_trainjob()
    new = copy.deepcopy(old)
    new["spec"]["runtimePatches"] = [copy.deepcopy(trainjob()["spec"]["runtimePatches"][0])]
    verdict = decide(request("UPDATE", new, old))
    assert denied_by(verdict) == "update.runtime-patch"


def plain(a: int = 0, floor: int | None = None) -> dict[str, Any]:
    tj = trainjob(queue=None)
    if a or floor:
        set_a(str(a))(tj)
    if floor is not None:
        tj["metadata"]["annotations"][ANNOTATION_ADMISSION_FLOOR] = str(floor)
    return tj


def test_plain_open_raises_a_in_the_unsuspending_update():
    old = plain()
    new = raised(old)
    new["spec"]["suspend"] = False
    new["metadata"]["annotations"]["dispatch.phpboyscout.uk/opened"] = "true"
    assert admit(request("UPDATE", new, old)).allowed


@pytest.mark.parametrize("user", [DISPATCH, STRANGER])
def test_plain_unsuspend_without_raise_is_refused(user):
    verdict = update(lambda tj: tj["spec"].update(suspend=False), user=user, base=plain(2, 2))
    assert denied_by(verdict) == "update.unsuspend"
    assert "raises A above 2" in verdict.message


def test_plain_unsuspend_must_raise_the_floor_too():
    def only_a(tj):
        set_a("3")(tj)
        tj["spec"]["suspend"] = False

    assert denied_by(update(only_a, base=plain(2, 2))) == "update.unsuspend"


def test_dropping_the_queue_label_does_not_dodge_the_unsuspend_rule():
    def drop_queue_and_start(tj):
        tj["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")
        tj["spec"]["suspend"] = False

    assert "update.unsuspend" in update(drop_queue_and_start, user=STRANGER).message


def test_suspending_needs_no_raise():
    base = plain(2, 2)
    base["spec"]["suspend"] = False
    assert update(lambda tj: tj["spec"].update(suspend=True), user=STRANGER, base=base).allowed


# -- Runtime copies ----------------------------------------------------------------------------------


def runtime_request(op: str, new, old=None, user: User = DISPATCH) -> Request:
    return request(op, new, old, user=user, resource="trainingruntimes", kind="TrainingRuntime")


def test_dispatch_creates_a_runtime_copy():
    rt = runtime_copy()
    assert decide(runtime_request("CREATE", rt)).allowed


def test_runtime_copy_requirements_are_checked_at_creation():
    rt = runtime_copy()
    job = rt["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]
    job["backoffLimit"] = 3
    job["backoffLimitPerIndex"] = 1
    verdict = decide(runtime_request("CREATE", rt))
    assert denied_by(verdict) == "runtime.backoff-limit"
    assert "runtime.rank-restart" in verdict.message
    assert decide(runtime_request("CREATE", rt), Config(allowRankRestart=True)).rule == "runtime.backoff-limit"


def test_runtime_copy_labels_and_source():
    rt = runtime_copy()
    rt["metadata"]["labels"]["dispatch.phpboyscout.uk/submission"] = "9"
    del rt["metadata"]["annotations"]["dispatch.phpboyscout.uk/runtime-source"]
    verdict = decide(runtime_request("CREATE", rt))
    assert denied_by(verdict) == "runtime-copy.labels"
    assert "runtime-copy.source" in verdict.message


def test_strangers_may_not_make_runtime_copies_but_may_make_runtimes():
    rt = runtime_copy()
    rt["metadata"]["labels"] = {}
    rt["metadata"]["annotations"] = {}
    assert denied_by(decide(runtime_request("CREATE", rt, user=STRANGER))) == "creation.principal"
    own = runtime("TrainingRuntime")
    own["metadata"]["namespace"] = "team-a"
    assert decide(runtime_request("CREATE", own, user=STRANGER)).allowed


@pytest.mark.parametrize("user", [DISPATCH, STRANGER])
def test_runtime_copy_spec_never_changes(user):
    old = runtime_copy()
    new = copy.deepcopy(old)
    new["spec"]["mlPolicy"]["numNodes"] = 8
    verdict = decide(runtime_request("UPDATE", new, old, user=user))
    assert denied_by(verdict) == "runtime-copy.immutable"


def test_runtime_copy_gets_its_owner_reference():
    old = runtime_copy()
    new = copy.deepcopy(old)
    new["metadata"]["ownerReferences"] = [{"kind": "TrainJob", "name": "x", "uid": "u"}]
    assert decide(runtime_request("UPDATE", new, old)).allowed


# -- Workloads -----------------------------------------------------------------------------------


def workload(gates: str | None = GATE, **notes: str) -> dict[str, Any]:
    annotations = dict(notes)
    if gates is not None:
        annotations[ANNOTATION_ADMISSION_GATED_BY] = gates
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "trainjob-dj-x-1a2b3", "namespace": "team-a", "annotations": annotations},
        "spec": {"active": True},
    }


def workload_request(op: str, new, old=None, user: User = KUEUE) -> Request:
    return request(op, new, old, user=user, resource="workloads", kind="Workload", group="kueue.x-k8s.io")


def test_kueue_carries_the_gate_to_the_workload_and_back():
    assert decide(workload_request("CREATE", workload())).allowed
    assert decide(workload_request("UPDATE", workload(None), workload())).allowed


def test_strangers_may_not_carry_the_gate_on_workloads():
    assert denied_by(decide(workload_request("CREATE", workload(), user=STRANGER))) == "reserved-keys.gate"
    assert denied_by(decide(workload_request("UPDATE", workload(None), workload(), user=STRANGER))) == (
        "reserved-keys.gate"
    )


def test_hold_annotations_on_workloads_are_dispatchs():
    held = workload(None, **{ANNOTATION_HOLD_REASON: "maintenance"})
    assert decide(workload_request("UPDATE", held, workload(None), user=DISPATCH)).allowed
    for user in (KUEUE, STRANGER):
        assert denied_by(decide(workload_request("UPDATE", held, workload(None), user=user))) == "reserved-keys"


# -- Deletes, other resources ----------------------------------------------------------------------


def test_deletes_and_unknown_resources_pass():
    assert decide(request("DELETE", None, trainjob(), user=STRANGER)).allowed
    assert decide(request("CREATE", {"metadata": {"name": "dj-x"}}, user=STRANGER, resource="pods", group="")).allowed


# -- Mutation ------------------------------------------------------------------------------------


def test_mutation_closes_a_kueue_trainjob_created_without_the_gate():
    tj = created()
    tj["metadata"]["annotations"][ANNOTATION_ADMISSION_GATED_BY] = "admin.example/hold"
    verdict = mutate(request("CREATE", tj), Config())
    after = apply_json_patch(tj, verdict.patch)
    assert after["metadata"]["annotations"][ANNOTATION_ADMISSION_GATED_BY] == f"admin.example/hold,{GATE}"
    del tj["metadata"]["annotations"]
    after = apply_json_patch(tj, mutate(request("CREATE", tj), Config()).patch)
    assert after["metadata"]["annotations"] == {ANNOTATION_ADMISSION_GATED_BY: GATE}


def test_mutation_suspends_a_plain_trainjob_created_open():
    tj = created(queue=None)
    tj["spec"]["suspend"] = False
    after = apply_json_patch(tj, mutate(request("CREATE", tj), Config()).patch)
    assert after["spec"]["suspend"] is True
    assert decide(request("CREATE", after)).allowed


@pytest.mark.parametrize(
    "req",
    [
        request("CREATE", created()),
        request("CREATE", created(queue=None)),
        request("CREATE", unrelated_trainjob(), user=STRANGER),
        request("CREATE", {**created(queue=None), "spec": {**created(queue=None)["spec"], "suspend": False}},
                user=STRANGER),
        request("UPDATE", trainjob(), trainjob()),
        request("CREATE", workload(None), user=DISPATCH, resource="workloads", group="kueue.x-k8s.io"),
    ],
)  # fmt: skip
def test_nothing_else_is_mutated(req):
    verdict = mutate(req, Config())
    assert verdict.allowed
    assert verdict.patch is None


def other_submissions_prefixes(tj):
    """Prefixes that agree with each other, but name N 4 in a TrainJob named for N 3."""
    env = {e["name"]: e for e in tj["spec"]["trainer"]["env"]}
    env["DISPATCH_K8S_EPOCH_PREFIX"]["value"] = "1000004"
    env["DISPATCH_K8S_TOKEN_PREFIX"]["value"] = "01ARZ3NDEKTSV4RRFFQ69G5FAV.4.2"


@pytest.mark.parametrize(
    ("change", "rule", "says"),
    [
        (bad("spec.trainer.env", "x"), "creation.env", "a list of variables"),
        (other_submissions_prefixes, "creation.env", "prefixes of JobID 01ARZ3NDEKTSV4RRFFQ69G5FAV and N 3"),
        (bad("spec.trainer.env.4", {"name": "DISPATCH_K8S_EPOCH_PREFIX", "value": "abc"}), "creation.env", "DISPATCH_K8S_* prefixes"),
        (bad("spec.trainer.env.4", {"name": "DISPATCH_K8S_EPOCH_PREFIX", "value": "9999999000003"}), "creation.env", "must be from 0 to 9223371, got 9999999"),
        (bad("spec.trainer.env.0", {"name": "BATCH", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}), "creation.env", "plain values"),
        (bad("spec.trainer.env.8", {"name": "DISPATCH_K8S_WORKDIR", "valueFrom": {}}), "creation.env", "DISPATCH_K8S_WORKDIR"),
        (bad((*PATCH_META, "annotations"), {}), "creation.admission", "saw None"),
        (lambda tj: tj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"].append({"name": "x"}),
         "creation.runtime-patch", "exactly one replicated job"),
    ],
)  # fmt: skip
def test_env_and_entry_edge_cases(change, rule, says):
    tj = created()
    change(tj)
    verdict = decide(request("CREATE", tj))
    assert denied_by(verdict) == rule
    assert says in verdict.message


def test_a_runtime_copy_without_trainer_job_is_reported_once():
    rt = runtime_copy()
    rt["spec"]["template"]["spec"]["replicatedJobs"].pop()
    verdict = decide(request("CREATE", created()), rt=rt)
    assert denied_by(verdict) == "runtime.trainer-job"
    assert "creation.runtime-patch" not in verdict.message


def test_in_kueue_mode_only_kueue_and_dispatch_unsuspend():
    def start(tj):
        tj["spec"]["suspend"] = False

    verdict = update(start, user=STRANGER, base=opened_kueue())
    assert denied_by(verdict) == "update.unsuspend"
    assert "in Kueue mode Kueue unsuspends" in verdict.message
    assert update(start, user=KUEUE, base=gate_approved(opened_kueue())).allowed
    assert update(start, user=DISPATCH, base=gate_approved(opened_kueue())).allowed


# -- the raise in the write that starts an execution ---------------------------------------------------------


def started(tj: dict[str, Any]) -> dict[str, Any]:
    """``tj`` as it is once an execution started and Kueue evicted it: A recorded, suspended again."""
    tj = copy.deepcopy(tj)
    a = tj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"][
        "spec"
    ]["template"]["metadata"]["annotations"]["dispatch.phpboyscout.uk/admission"]
    tj["metadata"]["annotations"][ANNOTATION_ADMISSION_STARTED] = a
    return tj


def unsuspend(tj: dict[str, Any]) -> None:
    tj["spec"]["suspend"] = False


def test_kueues_readmission_is_numbered_in_the_write_that_starts_it():
    old = gate_approved(started(opened_kueue()))  # A 1, started with A 1, evicted; the gate approved A 2
    req = request("UPDATE", _changed(old, unsuspend), old, user=KUEUE)
    mutation = mutate(req, Config())
    after = apply_json_patch(req.object, mutation.patch)
    assert (admission_count(after), admission_floor(after)) == (2, 2)
    assert after["metadata"]["annotations"][ANNOTATION_ADMISSION_STARTED] == "2"
    assert admit(req).allowed
    refused = decide(req)  # the same write with no raise in it: the unsuspend rule refuses it
    assert denied_by(refused) == "update.unsuspend"
    assert "the previous execution started with A 1" in refused.message


@pytest.mark.parametrize(
    ("change", "user", "says"),
    [
        (lambda tj: (set_a("2")(tj), tj["metadata"]["annotations"].update({ANNOTATION_ADMISSION_FLOOR: "2"})), KUEUE,
         "only dispatch raises A and the admission floor, or admission in the write that unsuspends"),
        (lambda tj: (set_a("3")(tj), tj["metadata"]["annotations"].update({ANNOTATION_ADMISSION_FLOOR: "3"}),
                     unsuspend(tj)), KUEUE, "a raise writes max(A, floor) + 1 = 2 into both"),
    ],
)  # fmt: skip
def test_outside_its_formula_or_outside_an_unsuspend_only_dispatch_raises(change, user, says):
    verdict = admit(request("UPDATE", _changed(started(opened_kueue()), change), started(opened_kueue()), user=user))
    assert denied_by(verdict) == "update.counter"
    assert says in verdict.message


def test_in_plain_mode_nothing_but_dispatchs_raise_restarts_a_job():
    old = started(plain(2, 2))
    old["metadata"]["annotations"][ANNOTATION_OPENED] = "true"
    for user in (DISPATCH, KUEUE, STRANGER):
        verdict = admit(request("UPDATE", _changed(old, unsuspend), old, user=user))
        assert denied_by(verdict) == "update.unsuspend", user


def _changed(tj: dict[str, Any], change) -> dict[str, Any]:
    new = copy.deepcopy(tj)
    change(new)
    return new
