"""Defence in depth: the rules that CEL can state over one object and its old version, as
ValidatingAdmissionPolicies that the API server enforces itself, so they hold while the webhook is down.

* ``dispatch-k8s-reserved-keys``: strangers may not add, change or remove keys under
  dispatch.phpboyscout.uk/ on TrainJobs, TrainingRuntimes and Workloads, nor move dispatch's gate on a
  TrainJob (the record of A at an unsuspend is left to the next two).
* ``dispatch-k8s-identity``: on TrainJobs, for everyone, A in dispatch's runtime patch and the admission
  floor never fall and are never removed, only dispatch (or admission, in the write that unsuspends) raises
  them and only to max(A, floor) + 1, dispatch's
  entry changes in nothing but A, the recorded JobSet UID never changes, the queue never changes, the record
  of A changes only in an unsuspend, and no other runtime-patch entry sets a pod key that decides identity.
* ``dispatch-k8s-unsuspend``: the choke point, every unsuspend of a dispatch TrainJob: opened, no gate, no
  hold, A above the A recorded at the previous unsuspend, and recorded in this write (the policy
  ``dispatch-k8s-record-start`` raises A in the write when due and records it, or the mutating webhook where
  the API server has no MutatingAdmissionPolicy; with neither the unsuspend fails closed).
* ``dispatch-k8s-workloads``: on dispatch's Workloads, only dispatch sets its check Ready, no check's
  podSetUpdates carries a pod key that decides identity, and a held Workload is not reactivated.
* ``dispatch-k8s-jobsets``: J (``jobsets/status`` restarts) never falls, and a dispatch JobSet is created
  suspended, by everyone (Trainer would otherwise recreate the running JobSet of a TrainJob being deleted, J at 0).
* ``dispatch-k8s-job-resume``: a dispatch trainer Job is resumed only with A raised in its pod template, or at
  its first start, by everyone (Kueue suspends the Job of a TrainJob whose Workload is gone, and JobSet resumes
  it: its rank would run again under the A and J of the execution that just ended).
* ``dispatch-k8s-runtime-copies``: a runtime copy never restarts in place (``InPlaceRestart``) nor restarts
  the trainer Job alone (``RestartJob``): both rerun ranks under the same A and J; its trainer mounts nothing
  over the prologue's directory; and its spec never changes.
* the pod rules, carried by the owner policy of pods ``dispatch-k8s-owners-pods`` (so one policy matches a pod
  write, not two): on a pod carrying dispatch's finalizer, only dispatch removes it, and nobody else changes its
  ownerReferences nor its dispatch, JobSet and Job labels and annotations.

* ``dispatch-k8s-manager-runs-nothing`` (role manager only): the create of a dispatch job's JobSet, Job or pod, by
  everyone (docs/multicluster.md, "Nothing runs on the manager").

The principals and dispatch's AdmissionCheck names are rendered into the policies from the webhook's config. In
role worker, the manager's MultiKueue owns some writes of its own copies (webhook/owners.py ``MULTIKUEUE``), and
``reserved-keys`` lets it create them with dispatch's keys. Also in role worker (docs/multicluster.md, guarantee 3):
the start of MultiKueue's copy of a TrainJob (its origin label) records A and never raises it (``record-start``
records only; ``unsuspend`` refuses a raise, and with its rule "A above the record" a second start of the copy), and
the origin label of a dispatch TrainJob (``identity``) or Workload (``workloads``) never changes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from contract.identity import R_BOUND
from contract.keys import (
    ANCESTOR_TRAINER,
    ANNOTATION_ADMISSION,
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_ADMISSION_STARTED,
    ANNOTATION_APPROVED_ADMISSION,
    ANNOTATION_JOBSET_UID,
    ANNOTATION_OPENED,
    ANNOTATION_UNVERIFIED,
    CLAIM_PREFIX,
    GATE,
    HOLD_ANNOTATIONS,
    KIND_TRAINJOB,
    LABEL_ANCESTOR_STEP,
    LABEL_QUEUE_NAME,
    LABEL_REPLICA_OF,
    LABEL_RESTART_ATTEMPT,
    LEASE_MANAGER_CONTACT,
    OPENED_TRUE,
    POD_FINALIZER,
    PREFIX,
    PROLOGUE_CONFIGMAP_PREFIX,
    PROLOGUE_KEY,
    PROLOGUE_MOUNT_DIR,
    PROLOGUE_VOLUME,
    RUNTIME_PATCH_MANAGER,
    TRAINER_CONTAINER,
    UNVERIFIED_TRUE,
)
from contract.multicluster import (
    MULTIKUEUE_MANAGED_BY,
    MULTIKUEUE_ORIGIN_LABEL,
    ROLE_MANAGER,
    ROLE_SINGLE,
    ROLE_WORKER,
    Role,
)
from contract.patches import FOREIGN_POD_SPEC
from contract.prologue import PROLOGUE, PROLOGUE_CONFIGMAP
from contract.upstream import COORDINATION_GROUP, TRAINER_GROUP
from webhook import owners
from webhook.cel import annotation, is_principal, lists_gate, q, validating_policy
from webhook.config import Config, Principals
from webhook.configurations import JOBSETS, NAME, RESOURCES, UNSUSPENDS, claims, namespace_selector
from webhook.dependents import dependents_policy
from webhook.rules.updates import APPROVAL_ACCEPTED

RESERVED_KEYS: Final = f"{NAME}-reserved-keys"
IDENTITY: Final = f"{NAME}-identity"
UNSUSPEND: Final = f"{NAME}-unsuspend"
WORKLOADS: Final = f"{NAME}-workloads"
JOBSET_POLICY: Final = f"{NAME}-jobsets"
RUNTIME_COPIES: Final = f"{NAME}-runtime-copies"
PODS: Final = f"{NAME}-pods"
JOB_RESUME: Final = f"{NAME}-job-resume"


# A failure rule restarting one Job (not the JobSet) that can hit the trainer job: no targets means every
# replicated job; otherwise a target named like the replicated job labelled as the trainer's ancestor step.
_NO_TRAINER_JOB_RESTART: Final = (
    "!object.spec.?template.?spec.?failurePolicy.?rules.orValue([]).exists(r, "
    "r.?action.orValue('') in ['RestartJob', 'RestartJobAndIgnoreMaxRestarts'] && "
    "(r.?targetReplicatedJobs.orValue([]).size() == 0 || r.targetReplicatedJobs.exists(t, "
    "object.spec.?template.?spec.?replicatedJobs.orValue([]).exists(j, j.?name.orValue('') == t && "
    f"j.?template.?metadata.?labels[?'{LABEL_ANCESTOR_STEP}'].orValue('') == '{ANCESTOR_TRAINER}'))))"
)

# runtime.prologue-mount (contract.runtime_requirements.prologue_mount_problems): in the trainer job, no volume under
# the prologue volume's name, and the trainer container's mount and device paths canonical and clear of the
# prologue's directory. CEL cannot normalise a path, so, as the webhook's rule, it reads only canonical ones.
_CANONICAL: Final = (
    "p.startsWith('/') && !p.contains('//') && !p.contains('/./') && !p.contains('/../') && !p.endsWith('/.') && "
    "!p.endsWith('/..') && (p == '/' || !p.endsWith('/'))"
)
_CLEAR_OF_PROLOGUE: Final = (
    f"!p.startsWith('{PROLOGUE_MOUNT_DIR}/') && !'{PROLOGUE_MOUNT_DIR}/'.startsWith(p == '/' ? p : p + '/')"
)
_NO_MOUNT_OVER_PROLOGUE: Final = (
    "object.spec.?template.?spec.?replicatedJobs.orValue([]).all(j, "
    f"j.?template.?metadata.?labels[?'{LABEL_ANCESTOR_STEP}'].orValue('') != '{ANCESTOR_TRAINER}' || "
    f"(j.?template.?spec.?template.?spec.?volumes.orValue([]).all(v, v.?name.orValue('') != '{PROLOGUE_VOLUME}') && "
    "j.?template.?spec.?template.?spec.?containers.orValue([]).all(c, "
    f"c.?name.orValue('') != '{TRAINER_CONTAINER}' || "
    "(c.?volumeMounts.orValue([]).map(m, m.?mountPath.orValue('')) + "
    "c.?volumeDevices.orValue([]).map(d, d.?devicePath.orValue(''))).all(p, "
    f"{_CANONICAL} && {_CLEAR_OF_PROLOGUE}))))"
)


def _map(obj: str, field: str) -> str:
    return f"({obj} == null ? {{}} : {obj}.metadata.?{field}.orValue({{}}))"


def _a(obj: str) -> str:
    """A in dispatch's runtime patch entry of ``obj``, or '' when there is none."""
    entry = f"{obj}.spec.runtimePatches.filter(p, p.?manager.orValue('') == {q(RUNTIME_PATCH_MANAGER)})"
    path = ".?trainingRuntimeSpec.?template.?spec.?replicatedJobs[?0].?template.?spec.?template.?metadata"
    return (
        f"({obj} == null || !{obj}.?spec.?runtimePatches.hasValue() || size({entry}) != 1 ? '' : "
        f"{entry}[0]{path}.?annotations[?{q(ANNOTATION_ADMISSION)}].orValue(''))"
    )


def _opened_by_dispatch(obj: str) -> str:
    """contract.gates.is_opened_by_dispatch in CEL: the opened mark, and no gate of dispatch's. The readmission
    gate approves only such a job, so Kueue never admits one whose unsuspend this refuses."""
    return f"{annotation(obj, ANNOTATION_OPENED)} == {q(OPENED_TRUE)} && !({lists_gate(obj)})"


def _never_falls(old: str, new: str) -> str:
    return f"{old} == '' || ({new} != '' && int({new}) >= int({old}))"


def _unchanged_reserved(old: str, new: str, skip: str = "false") -> str:
    """``skip``: CEL over ``k``, keys another policy checks."""
    p = q(PREFIX)
    return (
        f"{new}.all(k, !k.startsWith({p}) || ({skip}) || (k in {old} && {old}[k] == {new}[k])) && "
        f"{old}.all(k, !k.startsWith({p}) || ({skip}) || k in {new})"
    )


def _reserved_pod_key(k: str) -> str:
    return f"({k}.startsWith({q(PREFIX)}) || {k} == {q(LABEL_RESTART_ATTEMPT)} || {k}.startsWith('$'))"


# The fields the TrainJob CRD's runtime-patch schema (Trainer v2.2.1) offers beyond what another manager's entry
# may set (contract.patches.FOREIGN_ENTRY_SHAPE): CEL cannot list an object's fields, so the policy names them.
_FOREIGN_FORBIDDEN_POD_SPEC: Final = (
    "affinity",
    "containers",
    "imagePullSecrets",
    "initContainers",
    "securityContext",
    "serviceAccountName",
    "terminationGracePeriodSeconds",
    "volumes",
)
_FOREIGN_FORBIDDEN_METADATA: Final = ("finalizers", "name", "namespace")


def _clean_entry(p: str) -> str:
    """CEL: runtime-patch entry ``p`` carries only what Kueue's may (contract.patches.FOREIGN_ENTRY_SHAPE), and no
    pod key of dispatch's or J's."""
    pod = "j.?template.?spec.?template"
    absent = ["!j.?template.?metadata.hasValue()"]
    absent += [f"!{pod}.?metadata.?{f}.hasValue()" for f in _FOREIGN_FORBIDDEN_METADATA]
    absent += [f"!{pod}.?spec.?{f}.hasValue()" for f in _FOREIGN_FORBIDDEN_POD_SPEC]
    return (
        f"!{p}.?trainingRuntimeSpec.?template.?metadata.hasValue() && "
        f"{p}.?trainingRuntimeSpec.?template.?spec.?replicatedJobs.orValue([]).all(j, "
        + " && ".join(absent)
        + f" && {pod}.?metadata.?labels.orValue({{}}).all(k, !{_reserved_pod_key('k')}) && "
        f"{pod}.?metadata.?annotations.orValue({{}}).all(k, !{_reserved_pod_key('k')}))"
    )


def _dispatch_entries(obj: str) -> str:
    return f"{obj}.spec.?runtimePatches.orValue([]).filter(p, p.?manager.orValue('') == {q(RUNTIME_PATCH_MANAGER)})"


def _same_but_a(old: str, new: str) -> str:
    """CEL: runtime-patch entries ``old`` and ``new`` are equal but for A on the pods and the ``time`` Trainer stamps
    (``update.runtime-patch``). Field by field, as the TrainJob CRD's runtime-patch schema (Trainer v2.2.1) has them:
    the JobSet's metadata; each replicated job, by name, its Job metadata, its pod spec and pod metadata, the pod
    annotations but A."""
    jobs = ".?trainingRuntimeSpec.?template.?spec.?replicatedJobs.orValue([])"
    pod = "?template.?spec.?template"
    same_pod_metadata = " && ".join(
        f"o.{pod}.?metadata.?{f} == j.{pod}.?metadata.?{f}" for f in ("labels", "finalizers", "name", "namespace")
    )
    a = q(ANNOTATION_ADMISSION)
    oa, ja = (f"{x}.{pod}.?metadata.?annotations.orValue({{}})" for x in ("o", "j"))
    return (
        f"{old}.?trainingRuntimeSpec.?template.?metadata == {new}.?trainingRuntimeSpec.?template.?metadata && "
        f"size({new}{jobs}) == size({old}{jobs}) && {new}{jobs}.all(j, "
        f"{new}{jobs}.exists_one(k, k.?name.orValue('') == j.?name.orValue('')) && {old}{jobs}.exists(o, "
        f"o.?name.orValue('') == j.?name.orValue('') && o.?template.?metadata == j.?template.?metadata && "
        f"o.{pod}.?spec == j.{pod}.?spec && {same_pod_metadata} && "
        f"{ja}.all(k, k == {a} || (k in {oa} && {oa}[k] == {ja}[k])) && {oa}.all(k, k == {a} || k in {ja})))"
    )


def _int(count: str) -> str:
    return f"({count} == '' ? 0 : int({count}))"


def _dispatch_checks(config: Config) -> str:
    return json.dumps(list(config.admission_checks))


def _is_dispatch(config: Config) -> str:
    return is_principal(config.dispatch)


def _binding(policy: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {
            "name": policy,
            "labels": {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "policy"},
        },
        "spec": {
            "policyName": policy,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": namespace_selector(namespace)},
        },
    }


def admission_policies(config: Config, *, namespace: str, owners_too: bool = True) -> list[dict[str, Any]]:
    """The policies and their bindings, for dispatch installed in ``namespace``: the owner policies (default
    deny by principal) and the field rules that police what each owner writes, some carried by an owner policy
    (``carried_field_rules``); ``owners_too=False``, the field rules alone, each in a policy of its own (their
    tests, where one ServiceAccount plays an owner)."""
    reserved = validating_policy(
        RESERVED_KEYS,
        list(RESOURCES),
        ["CREATE", "UPDATE"],
        {
            "variables": [
                {
                    "name": "dispatch",
                    "expression": f"{_is_dispatch(config)} || {multikueue_copy_created(config)} || "
                    f"{replica_created(config)}",
                },
                {"name": "oldLabels", "expression": _map("oldObject", "labels")},
                {"name": "newLabels", "expression": _map("object", "labels")},
                {"name": "oldAnnotations", "expression": _map("oldObject", "annotations")},
                {"name": "newAnnotations", "expression": _map("object", "annotations")},
                *(
                    [{"name": "copyCreated", "expression": multikueue_copy_created(config)}]
                    if config.multicluster_role == ROLE_WORKER
                    else []
                ),
            ],
            "validations": [
                {
                    "expression": "variables.dispatch || ("
                    + _unchanged_reserved("variables.oldLabels", "variables.newLabels")
                    + ")",
                    "message": f"only dispatch adds, changes or removes labels under {PREFIX}",
                    "reason": "Forbidden",
                },
                {
                    "expression": "variables.dispatch || ("
                    + _unchanged_reserved(
                        "variables.oldAnnotations",
                        "variables.newAnnotations",
                        f"request.resource.resource == 'trainjobs' && (k == {q(ANNOTATION_ADMISSION_STARTED)} || "
                        f"(k == {q(ANNOTATION_ADMISSION_FLOOR)} && request.operation == 'UPDATE' && ({UNSUSPENDS})))",
                    )
                    + ")",
                    "message": f"only dispatch adds, changes or removes annotations under {PREFIX}",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"variables.dispatch || request.resource.resource != 'trainjobs' || "
                    f"({lists_gate('oldObject')}) == ({lists_gate('object')})",
                    "message": f"only dispatch adds or removes its gate {GATE} in {ANNOTATION_ADMISSION_GATED_BY}",
                    "reason": "Forbidden",
                },
                *([_copy_created_marked()] if config.multicluster_role == ROLE_WORKER else []),
            ],
        },
    )
    identity = validating_policy(
        IDENTITY,
        [RESOURCES[0]],
        ["UPDATE"],
        {
            "matchConditions": [{"name": "dispatch-objects", "expression": claims("trainjobs")}],
            "variables": [
                {"name": "dispatch", "expression": _is_dispatch(config)},
                {"name": "oldA", "expression": _a("oldObject")},
                {"name": "newA", "expression": _a("object")},
                {"name": "oldFloor", "expression": annotation("oldObject", ANNOTATION_ADMISSION_FLOOR)},
                {"name": "newFloor", "expression": annotation("object", ANNOTATION_ADMISSION_FLOOR)},
                {"name": "oldJobSet", "expression": annotation("oldObject", ANNOTATION_JOBSET_UID)},
                {"name": "newJobSet", "expression": annotation("object", ANNOTATION_JOBSET_UID)},
                {"name": "oldStarted", "expression": annotation("oldObject", ANNOTATION_ADMISSION_STARTED)},
                {"name": "newStarted", "expression": annotation("object", ANNOTATION_ADMISSION_STARTED)},
                {"name": "unsuspends", "expression": UNSUSPENDS},
                {"name": "oldEntries", "expression": _dispatch_entries("oldObject")},
                {"name": "newEntries", "expression": _dispatch_entries("object")},
            ],
            "validations": [
                {
                    "expression": _never_falls("variables.oldA", "variables.newA"),
                    "messageExpression": "'A in dispatch\\'s runtime patch never falls and is never removed: saw ' "
                    "+ variables.oldA + ' -> ' + variables.newA",
                    "reason": "Forbidden",
                },
                {
                    "expression": _never_falls("variables.oldFloor", "variables.newFloor"),
                    "messageExpression": f"'{ANNOTATION_ADMISSION_FLOOR} never falls and is never removed: saw ' "
                    "+ variables.oldFloor + ' -> ' + variables.newFloor",
                    "reason": "Forbidden",
                },
                {
                    "expression": "variables.oldJobSet == '' || variables.newJobSet == variables.oldJobSet",
                    "message": f"{ANNOTATION_JOBSET_UID} is recorded once and never changed",
                    "reason": "Forbidden",
                },
                {
                    # Falls are the two rules above; a change that is not a fall is a raise.
                    "expression": "(variables.oldA == variables.newA && variables.oldFloor == variables.newFloor) || "
                    "variables.newA == '' || (variables.oldFloor != '' && variables.newFloor == '') || "
                    "((variables.dispatch || variables.unsuspends) && variables.newA == variables.newFloor && "
                    # In a MultiKueue queue dispatch's gate raises by K = maxRestarts + 1 (contract/multicluster.py).
                    f"(variables.dispatch && object.spec.?managedBy.orValue('') == {q(MULTIKUEUE_MANAGED_BY)} ? "
                    "int(variables.newA) > "
                    "(int(variables.oldA == '' ? '0' : variables.oldA) > "
                    "int(variables.oldFloor == '' ? '0' : variables.oldFloor) ? "
                    "int(variables.oldA == '' ? '0' : variables.oldA) : "
                    "int(variables.oldFloor == '' ? '0' : variables.oldFloor)) : "
                    "int(variables.newA) == "
                    "(int(variables.oldA == '' ? '0' : variables.oldA) > "
                    "int(variables.oldFloor == '' ? '0' : variables.oldFloor) ? "
                    "int(variables.oldA == '' ? '0' : variables.oldA) : "
                    "int(variables.oldFloor == '' ? '0' : variables.oldFloor)) + 1))",
                    "messageExpression": "'only dispatch, or admission in the write that unsuspends, raises A and the "
                    "admission floor, together, to max(A, floor) + 1 (dispatch, in a MultiKueue queue, above it): "
                    "saw A ' + variables.oldA + ' -> ' + "
                    "variables.newA + ', floor ' + variables.oldFloor"
                    " + ' -> ' + variables.newFloor",
                    "reason": "Forbidden",
                },
                {
                    "expression": "size(variables.newEntries) == size(variables.oldEntries) && "
                    "(size(variables.newEntries) != 1 || "
                    + _same_but_a("variables.oldEntries[0]", "variables.newEntries[0]")
                    + ")",
                    "message": "dispatch's runtime-patch entry is written at creation, never added, removed or "
                    "rewritten after: only A changes in it",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"oldObject.metadata.?labels[?{q(LABEL_QUEUE_NAME)}].orValue('') == "
                    f"object.metadata.?labels[?{q(LABEL_QUEUE_NAME)}].orValue('')",
                    "message": f"{LABEL_QUEUE_NAME} of a dispatch TrainJob is chosen at Start and never changes",
                    "reason": "Forbidden",
                },
                {
                    "expression": "variables.oldStarted == variables.newStarted || "
                    "(variables.unsuspends && variables.newStarted == variables.newA)",
                    "message": f"{ANNOTATION_ADMISSION_STARTED} is A, recorded in the write that unsuspends, and "
                    "changes nowhere else",
                    "reason": "Forbidden",
                },
                {
                    "expression": "object.spec.?runtimePatches.orValue([]).all(p, "
                    f"p.manager == {q(RUNTIME_PATCH_MANAGER)} || "
                    "oldObject.spec.?runtimePatches.orValue([]).exists(o, o.manager == p.manager && "
                    "o.?trainingRuntimeSpec == p.?trainingRuntimeSpec) || "
                    f"{_clean_entry('p')})",
                    "message": "another manager's runtime-patch entry sets only pod labels and annotations (none "
                    f"under {PREFIX} nor {LABEL_RESTART_ATTEMPT}) and the pods' "
                    + ", ".join(FOREIGN_POD_SPEC)
                    + ", as Kueue's does: not the trainer container, its volumes or dispatch's keys",
                    "reason": "Forbidden",
                },
                *([_origin_kept()] if config.multicluster_role == ROLE_WORKER else []),
            ],
        },
    )
    unsuspend = validating_policy(
        UNSUSPEND,
        [RESOURCES[0]],
        ["UPDATE"],
        {
            "matchConditions": [
                {"name": "dispatch-objects", "expression": claims("trainjobs")},
                {"name": "unsuspends", "expression": UNSUSPENDS},
            ],
            "variables": [
                {"name": "a", "expression": _a("object")},
                {"name": "oldStarted", "expression": annotation("oldObject", ANNOTATION_ADMISSION_STARTED)},
                {"name": "started", "expression": annotation("object", ANNOTATION_ADMISSION_STARTED)},
            ],
            "validations": [
                {
                    "expression": _opened_by_dispatch("object"),
                    "message": f"dispatch opens the job before any execution: {ANNOTATION_OPENED} and no {GATE}",
                    "reason": "Forbidden",
                },
                {
                    "expression": "!object.metadata.?annotations.orValue({}).exists(k, k in "
                    f"{json.dumps(list(HOLD_ANNOTATIONS))})",
                    "message": "a hold of dispatch's is in force: Release lifts it",
                    "reason": "Forbidden",
                },
                {
                    "expression": "variables.a != '' && int(variables.a) >= 1 && "
                    f"{_int('variables.oldStarted')} < int(variables.a)",
                    "messageExpression": "'A ' + variables.a + ' is not above ' + variables.oldStarted + ', the A "
                    "the previous execution started with: A is raised in the write that starts every execution'",
                    "reason": "Forbidden",
                },
                {
                    "expression": "variables.started == variables.a",
                    "messageExpression": f"'{ANNOTATION_ADMISSION_STARTED} must record A ' + variables.a + "
                    "' in the write that unsuspends (dispatch\\'s admission policy or mutating webhook writes it)'",
                    "reason": "Forbidden",
                },
                *([_copy_records_only(), _copy_verified()] if config.multicluster_role == ROLE_WORKER else []),
                _approved(config),
                {
                    "expression": "object.spec.?runtimePatches.orValue([]).all(p, "
                    f"p.manager == {q(RUNTIME_PATCH_MANAGER)} || "
                    "p.?trainingRuntimeSpec.?template.?spec.?replicatedJobs.orValue([]).all(j, "
                    "j.?template.?spec.?template.?metadata.?annotations.orValue({}).all(k, "
                    f"k != {q(ANNOTATION_ADMISSION)} && !k.startsWith('$'))))",
                    "message": f"another runtime-patch entry sets {ANNOTATION_ADMISSION}: the merged pod template "
                    "would not carry dispatch's A",
                    "reason": "Forbidden",
                },
            ],
        },
    )
    checks = _dispatch_checks(config)
    reserved_pod_keys = (
        "u.?labels.orValue({}).all(k, !"
        + _reserved_pod_key("k")
        + ") && "
        + ("u.?annotations.orValue({}).all(k, !" + _reserved_pod_key("k") + ")")
    )
    workloads = validating_policy(
        WORKLOADS,
        [RESOURCES[2], (RESOURCES[2][0], RESOURCES[2][1], "workloads/status")],
        ["UPDATE"],
        {
            "matchConditions": [{"name": "dispatch-objects", "expression": claims("workloads")}],
            "variables": [
                {"name": "dispatch", "expression": _is_dispatch(config)},
                {"name": "checks", "expression": "object.?status.?admissionChecks.orValue([])"},
                {"name": "oldChecks", "expression": "oldObject.?status.?admissionChecks.orValue([])"},
            ],
            "validations": [
                {
                    "expression": "variables.dispatch || variables.checks.all(c, !(c.name in "
                    f"{checks}) || c.state != 'Ready' || variables.oldChecks.exists(o, o.name == c.name && "
                    "o.state == 'Ready' && o.?podSetUpdates.orValue([]) == c.?podSetUpdates.orValue([])))",
                    "message": "only dispatch's admission controller sets its check Ready, after raising A",
                    "reason": "Forbidden",
                },
                {
                    "expression": "variables.checks.all(c, variables.oldChecks.exists(o, o == c) || "
                    f"c.?podSetUpdates.orValue([]).all(u, {reserved_pod_keys}))",
                    "message": f"no check's podSetUpdates may carry pod keys under {PREFIX} or "
                    f"{LABEL_RESTART_ATTEMPT}: Kueue copies them into the pods, over A",
                    "reason": "Forbidden",
                },
                {
                    "expression": "!object.metadata.?annotations.orValue({}).exists(k, k in "
                    f"{json.dumps(list(HOLD_ANNOTATIONS))}) || oldObject.spec.?active.orValue(true) != false || "
                    "object.spec.?active.orValue(true) == false",
                    "message": "dispatch holds this Workload: only Release reactivates it, removing the hold",
                    "reason": "Forbidden",
                },
                *([_origin_kept()] if config.multicluster_role == ROLE_WORKER else []),
            ],
        },
    )
    copies = validating_policy(
        RUNTIME_COPIES,
        [RESOURCES[1]],
        ["CREATE", "UPDATE"],
        {
            "matchConditions": [{"name": "dispatch-objects", "expression": claims("trainingruntimes")}],
            "validations": [
                {
                    "expression": "object.spec.?template.?spec.?failurePolicy.?restartStrategy.orValue('') != "
                    "'InPlaceRestart'",
                    "message": "a dispatch runtime never restarts in place (InPlaceRestart keeps A and J), even "
                    "with allowRankRestart",
                    "reason": "Forbidden",
                },
                {
                    # runtime-copy.immutable: the rules read the copy's spec at the TrainJob's create, and Trainer
                    # reads it at every reconcile.
                    "expression": f"request.operation != 'UPDATE' || "
                    f"!oldObject.metadata.name.matches({q(owners.NAME_PATTERN)}) || object.spec == oldObject.spec",
                    "message": "a runtime copy's spec never changes after creation",
                    "reason": "Forbidden",
                },
                {
                    "expression": _NO_TRAINER_JOB_RESTART,
                    "message": "a dispatch runtime's failure rules never RestartJob the trainer job (it reruns every "
                    "rank under the same A and J), even with allowRankRestart; RestartJobSet raises J",
                    "reason": "Forbidden",
                },
                {
                    "expression": _NO_MOUNT_OVER_PROLOGUE,
                    "message": f"a dispatch runtime's trainer job has no volume named {PROLOGUE_VOLUME}, and its "
                    f"{TRAINER_CONTAINER} container mounts nothing at, above or below {PROLOGUE_MOUNT_DIR}, where "
                    "dispatch mounts the prologue; its mount paths are written canonically (no //, . or .. segment, "
                    "no trailing /)",
                    "reason": "Forbidden",
                },
            ],
        },
    )
    docs = []
    policies = [
        reserved,
        identity,
        unsuspend,
        workloads,
        jobset_policy(),
        job_resume_policy(),
        copies,
    ]
    # Without the owner policies, the field rules they carry are policies of their own.
    alone = [] if owners_too else [field_policy(rules) for rules in carried_field_rules(config).values()]
    for policy in [*(principal_policies(config) if owners_too else []), *policies, *alone]:
        docs += [policy, _binding(policy["metadata"]["name"], namespace)]
    if config.multicluster_role == ROLE_MANAGER:
        docs += manager_policies(namespace)
    docs += worker_policies(config, namespace)
    marks = mark_copy_policy(namespace) if config.multicluster_role == ROLE_WORKER else []
    return docs + record_start_policy(namespace, config.multicluster_role) + marks


def _queued(obj: str) -> str:
    return f"{obj}.metadata.?labels[?{q(LABEL_QUEUE_NAME)}].orValue('') != ''"


def _approved(config: Config) -> dict[str, Any]:
    """In the unsuspend policy: in Kueue mode the start carries the readmission gate's approval of exactly the A it
    starts with (webhook/rules/updates.py ``approval_problems``); on a worker, MultiKueue's copy is exempt (the
    manager's gate approved its dispatch; the worker's agent verifies it)."""
    copy = f" || {_copy('oldObject')} || {_copy('object')}" if config.multicluster_role == ROLE_WORKER else ""
    approved = annotation("object", ANNOTATION_APPROVED_ADMISSION)
    return {
        "expression": f"!({_queued('oldObject')} && {_queued('object')}){copy} || "
        f"{approved}.startsWith(variables.a + '/')",
        "messageExpression": f"'the start with A ' + variables.a + ' carries {ANNOTATION_APPROVED_ADMISSION} ' + "
        f"({approved} == '' ? 'none' : {approved}) + '; it needs ' + {q(APPROVAL_ACCEPTED)}",
        "reason": "Forbidden",
    }


START_APPROVAL: Final = f"{NAME}-start-approval"


def start_approval_policy(config: Config) -> dict[str, Any]:
    """The unsuspend policy's rule of the gate's approval (``_approved``) as a policy of its own: the harness's tier B
    installs it over every namespace beside the owner policies and ``record-start``, so that its clusters hold every
    Kueue-mode start to the approval as the chart does. The chart carries the rule in ``unsuspend``."""
    return validating_policy(
        START_APPROVAL,
        [RESOURCES[0]],
        ["UPDATE"],
        {
            "matchConditions": [
                {"name": "dispatch-objects", "expression": claims("trainjobs")},
                {"name": "unsuspends", "expression": UNSUSPENDS},
            ],
            "variables": [{"name": "a", "expression": _a("object")}],
            "validations": [_approved(config)],
        },
    )


def _copy(obj: str) -> str:
    """CEL: ``obj`` is MultiKueue's copy on a worker (its origin label; contract/multicluster.py ``is_copy``)."""
    return f"{obj}.metadata.?labels[?{q(MULTIKUEUE_ORIGIN_LABEL)}].orValue('') != ''"


def _origin_kept() -> dict[str, Any]:
    """Role worker, in the identity and workloads policies: MultiKueue's origin label on a dispatch TrainJob or
    Workload never changes (webhook/rules/updates.py ``origin_problems``)."""
    label = f"metadata.?labels[?{q(MULTIKUEUE_ORIGIN_LABEL)}].orValue('')"
    return {
        "expression": f"oldObject.{label} == object.{label}",
        "message": f"on a MultiKueue worker MultiKueue's origin label {MULTIKUEUE_ORIGIN_LABEL} is set at create and "
        "never changes: it says the manager numbered this copy",
        "reason": "Forbidden",
    }


def _copy_records_only() -> dict[str, Any]:
    """Role worker, in the unsuspend policy: the start of MultiKueue's copy (its origin label on the old object or
    the new) records A and raises neither A nor the floor (webhook/rules/updates.py ``copy_unsuspend_problems``).
    With the rule above (A above the A recorded at the previous start) a second start of the same copy is
    refused: it goes back through the manager, which numbers a new dispatch (docs/multicluster.md, guarantee 3)."""
    return {
        "expression": f"!({_copy('oldObject')} || {_copy('object')}) || "
        f"({_a('oldObject')} == variables.a && {annotation('oldObject', ANNOTATION_ADMISSION_FLOOR)} == "
        f"{annotation('object', ANNOTATION_ADMISSION_FLOOR)})",
        "message": "on a MultiKueue worker the start of MultiKueue's copy records A and never raises it: the manager "
        "numbers each dispatch, and a copy started here before goes back through the manager",
        "reason": "Forbidden",
    }


def _unverified(obj: str) -> str:
    return f"{obj}.metadata.?annotations[?{q(ANNOTATION_UNVERIFIED)}].hasValue()"


def _copy_created_marked() -> dict[str, Any]:
    """Role worker, in the reserved-keys policy: MultiKueue's copy of a dispatch TrainJob is created marked
    unverified and suspended (dispatch's mutating webhook adds both; webhook/rules/creation.py
    ``multikueue_copy_problems``), so it starts only once dispatch's agent matched its A to its dispatch's stamp."""
    return {
        "expression": "!(variables.copyCreated && request.resource.resource == 'trainjobs') || "
        f"({_unverified('object')} && object.?spec.?suspend.orValue(false) == true)",
        "message": f"on a MultiKueue worker MultiKueue's copy is created suspended and marked {ANNOTATION_UNVERIFIED} "
        "(dispatch's mutating webhook adds both): it starts once dispatch's agent verified its A",
        "reason": "Forbidden",
    }


def _copy_verified() -> dict[str, Any]:
    """Role worker, in the unsuspend policy: MultiKueue's copy does not start while dispatch's mark ``unverified`` is
    on it (webhook/rules/updates.py ``copy_unsuspend_problems``; docs/multicluster.md, "The stale copy")."""
    return {
        "expression": f"!({_copy('oldObject')} || {_copy('object')}) || !{_unverified('object')}",
        "message": f"MultiKueue's copy starts once dispatch's agent on this worker has matched its A to the stamp of "
        f"its dispatch on the remote Workload and removed {ANNOTATION_UNVERIFIED}",
        "reason": "Forbidden",
    }


def multikueue_copy_created(config: Config) -> str:
    """CEL: on a worker, the manager's MultiKueue creating its copy of a dispatch TrainJob or Workload (its origin
    label on it). The copy carries the manager's object's keys as dispatch and the manager's policies left
    them, A, the floor and admission-started included; any later change of them is refused as to a stranger."""
    principal = is_principal(config.principals(owners.MULTIKUEUE))
    return (
        f"(request.operation == 'CREATE' && request.resource.resource in ['trainjobs', 'workloads'] && "
        f"({principal}) && object.metadata.?labels[?{q(MULTIKUEUE_ORIGIN_LABEL)}].orValue('') != '')"
    )


def replica_created(config: Config) -> str:
    """CEL: on a worker, the manager's dispatch agent creating the replica of a runtime copy (its
    ``LABEL_REPLICA_OF`` on it). The replica carries the copy's keys as dispatch made them on the manager."""
    principal = is_principal(config.principals(owners.MANAGER_AGENT))
    return (
        f"(request.operation == 'CREATE' && request.resource.resource == 'trainingruntimes' && ({principal}) && "
        f"object.metadata.?labels[?{q(LABEL_REPLICA_OF)}].orValue('') != '')"
    )


MANAGER_AGENT_POLICY: Final = f"{NAME}-manager-agent"
MANAGER_AGENT_MESSAGE: Final = (
    "the manager's dispatch agent (multicluster.managerAgent) creates and deletes here only the replicas of "
    f"dispatch's runtime copies (TrainingRuntimes named dj-<JobID>-s<N>, labelled {LABEL_REPLICA_OF}), creates "
    f"only the prologue's ConfigMap {PROLOGUE_CONFIGMAP}, creates and renews only its contact Lease "
    f"{LEASE_MANAGER_CONTACT}, and creates, renews and deletes only its claims ({CLAIM_PREFIX}<Workload uid>); it "
    "updates nothing else"
)


def manager_agent_policy(config: Config) -> dict[str, Any]:
    """Role worker: every write of the manager's dispatch agent here is a create or delete of a replica, or the
    create of the prologue's ConfigMap. Default deny: its RBAC cannot restrict a create by name, so the policy
    does. The owner policies then bind what it writes, as any owner's."""
    target = "(request.operation == 'DELETE' ? oldObject : object)"
    replica = (
        f"request.resource.resource == 'trainingruntimes' && request.operation in ['CREATE', 'DELETE'] && "
        f"{target}.metadata.?name.orValue('').matches({q(owners.NAME_PATTERN)}) && "
        f"{target}.metadata.?labels[?{q(LABEL_REPLICA_OF)}].orValue('') != ''"
    )
    prologue = (
        "request.resource.resource == 'configmaps' && request.operation == 'CREATE' && "
        f"object.metadata.?name.orValue('') == {q(PROLOGUE_CONFIGMAP)}"
    )
    contact = (
        "request.resource.resource == 'leases' && (request.operation in ['CREATE', 'UPDATE'] && "
        f"object.metadata.?name.orValue('') == {q(LEASE_MANAGER_CONTACT)} || "
        f"{target}.metadata.?name.orValue('').startsWith({q(CLAIM_PREFIX)}))"
    )
    return validating_policy(
        MANAGER_AGENT_POLICY,
        [(TRAINER_GROUP, "*", "trainingruntimes"), ("", "*", "configmaps"), (COORDINATION_GROUP, "*", "leases")],
        ["CREATE", "UPDATE", "DELETE"],
        {
            "matchConditions": [
                {"name": "manager-agent", "expression": is_principal(config.principals(owners.MANAGER_AGENT))}
            ],
            "validations": [
                {
                    "expression": f"variables.subresource == '' && (({replica}) || ({prologue}) || ({contact}))",
                    "message": MANAGER_AGENT_MESSAGE,
                    "reason": "Forbidden",
                }
            ],
            "variables": [{"name": "subresource", "expression": "request.?subResource.orValue('')"}],
        },
    )


MANAGER_CONTACT_POLICY: Final = f"{NAME}-manager-contact"
MANAGER_CONTACT_MESSAGE: Final = (
    f"the Lease {LEASE_MANAGER_CONTACT} and the claims {CLAIM_PREFIX}<Workload uid> are created and renewed only by "
    "the manager's dispatch agent (multicluster.managerAgent): while they are renewed, this worker's dispatch agent "
    "lets the copies they name start and keeps them running, so a renewal by anyone else could keep a copy running "
    "after the manager stopped wanting it here (deleting them is anyone's whom RBAC lets: the copies then stop)"
)


def manager_contact_policy(config: Config) -> dict[str, Any]:
    """Role worker: the contact Lease is created and updated by the manager's agent alone. A delete is not
    refused: it only stops the copies here (the worker's agent then sees no contact), and the namespace's deletion
    must not hang on it."""
    return validating_policy(
        MANAGER_CONTACT_POLICY,
        [(COORDINATION_GROUP, "*", "leases")],
        ["CREATE", "UPDATE"],
        {
            "matchConditions": [
                {
                    "name": "contact-lease-or-claim",
                    "expression": f"request.name == {q(LEASE_MANAGER_CONTACT)} || "
                    f"request.name.startsWith({q(CLAIM_PREFIX)}) || "
                    f"object.?metadata.?name.orValue('').startsWith({q(CLAIM_PREFIX)})",
                }
            ],
            "validations": [
                {"expression": "variables.managerAgent", "message": MANAGER_CONTACT_MESSAGE, "reason": "Forbidden"}
            ],
            "variables": [
                {"name": "managerAgent", "expression": is_principal(config.principals(owners.MANAGER_AGENT))}
            ],
        },
    )


def worker_policies(config: Config, namespace: str) -> list[dict[str, Any]]:
    """Role worker's own policies and their bindings, where the manager's agent has a principal here."""
    if config.principals(owners.MANAGER_AGENT) == Principals():
        return []
    out = []
    for policy in (manager_agent_policy(config), manager_contact_policy(config)):
        binding = _binding(policy["metadata"]["name"], namespace)
        # Every namespace: the manager's agent writes in the job namespaces, and is confined everywhere; the
        # contact Lease lives in the agent's Lease namespace, which may not be the release's.
        del binding["spec"]["matchResources"]
        out += [policy, binding]
    return out


MANAGER_RUNS_NOTHING: Final = f"{NAME}-manager-runs-nothing"
MANAGER_RUNS_NOTHING_MESSAGE: Final = (
    "this cluster is a MultiKueue manager (multicluster.role manager): it queues and numbers dispatch jobs and runs "
    "none. MultiKueue runs each on a worker; Trainer v2.2.1 ignores spec.managedBy, so a JobSet, Job or pod of a "
    "dispatch job here would be a second copy of it"
)


def manager_runs_nothing_policy() -> dict[str, Any]:
    """Role manager: the CREATE of a dispatch job's JobSet, Job or pod is refused, to everyone (break-glass too),
    the objects known as the owner policies know them (webhook/owners.py ``belongs``)."""
    kinds = (owners.JOBSETS, owners.JOBS, owners.PODS)
    belongs = " || ".join(
        f"(request.resource.group == {q(k.group)} && request.resource.resource == {q(k.resource)} && "
        f"({k.belongs('object')}))"
        for k in kinds
    )
    return validating_policy(
        MANAGER_RUNS_NOTHING,
        [(k.group, "*", k.resource) for k in kinds],
        ["CREATE"],
        {
            "matchConditions": [{"name": "dispatch-job-objects", "expression": belongs}],
            "validations": [
                {
                    "expression": "false",
                    "messageExpression": "request.kind.kind + ' ' + object.metadata.?name.orValue("
                    f"object.metadata.?generateName.orValue('')) + ' {owners.BELONGS}: ' + "
                    f"{q(MANAGER_RUNS_NOTHING_MESSAGE)}",
                    "reason": "Forbidden",
                }
            ],
        },
    )


def manager_policies(namespace: str) -> list[dict[str, Any]]:
    """Role manager's own policy and its binding (the chart renders them only in that role)."""
    policy = manager_runs_nothing_policy()
    return [policy, _binding(policy["metadata"]["name"], namespace)]


def _dispatch_jobset(obj: str) -> str:
    """CEL: ``obj`` is a dispatch job's JobSet: named as its TrainJob (``dj-<ULID>-s<N>``, Trainer names it so),
    or with an owner reference to such a TrainJob. The owner policies' test (webhook/owners.py), not the
    ``dj-`` prefix ``claims`` matches on: a stranger's JobSet called ``dj-resnet`` is created as its owner likes."""
    pattern = q(owners.NAME_PATTERN)
    return (
        f"{obj}.metadata.?name.orValue('').matches({pattern}) || "
        f"{obj}.metadata.?ownerReferences.orValue([]).exists(r, r.?kind.orValue('') == {q(KIND_TRAINJOB)} && "
        f"r.?name.orValue('').matches({pattern}))"
    )


JOBSET_CREATED_SUSPENDED: Final = (
    "a dispatch JobSet is created suspended (spec.suspend: true): Trainer makes it while its TrainJob is suspended; "
    "a JobSet created running would start an execution whose J starts again at 0 under an A already used (as "
    "Trainer's recreation of the JobSet of a TrainJob being deleted would). Create it suspended; a TrainJob that "
    "Trainer first saw unsuspended gets its JobSet once suspended again: Hold and Release it, and it is readmitted "
    "with A raised"
)


def jobset_policy() -> dict[str, Any]:
    """On a dispatch job's JobSet, for everyone: J (``jobsets/status`` restarts) never falls, and the JobSet is
    created suspended. Trainer v2.2.1 copies the TrainJob's ``spec.suspend`` into the JobSet it creates, and
    creates one whenever the TrainJob is not finished and has none, ``deletionTimestamp`` or not; so a TrainJob
    kept by a finalizer after the garbage collector deleted its JobSet (a foreground delete: Stop) would get a
    new, running JobSet, with J at 0 and the pods' A unchanged. Every legitimate create is suspended: dispatch
    creates its TrainJobs closed, so Trainer first sees them suspended."""
    policy = validating_policy(
        JOBSET_POLICY,
        [JOBSETS, (JOBSETS[0], JOBSETS[1], "jobsets/status")],
        ["CREATE", "UPDATE"],
        {
            "matchConditions": [{"name": "dispatch-objects", "expression": claims("jobsets")}],
            "validations": [
                {
                    "expression": "oldObject == null || "
                    "oldObject.?status.?restarts.orValue(0) <= object.?status.?restarts.orValue(0)",
                    "messageExpression": "'J (restarts) of a dispatch job never falls: saw ' + "
                    "string(oldObject.?status.?restarts.orValue(0)) + ' -> ' + "
                    "string(object.?status.?restarts.orValue(0))",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"request.operation != 'CREATE' || !({_dispatch_jobset('object')}) || "
                    "object.?spec.?suspend.orValue(false) == true",
                    "message": JOBSET_CREATED_SUSPENDED,
                    "reason": "Forbidden",
                },
            ],
        },
    )
    # The JobSet's create, and the status writes: its other updates are the owner policy's (Trainer, Kueue and
    # the garbage collector alone), and Trainer's unsuspend of a JobSet it made suspended is legitimate.
    policy["spec"]["matchConstraints"]["resourceRules"] = [
        {"apiGroups": [JOBSETS[0]], "apiVersions": [JOBSETS[1]], "resources": [resource], "operations": [operation]}
        for resource, operation in (("jobsets", "CREATE"), ("jobsets/status", "UPDATE"))
    ]
    return policy


JOB_RESUMED_WITH_A_RAISED: Final = (
    "a dispatch trainer Job is resumed (spec.suspend true -> false) only with A raised in its pod template "
    f"(annotation {ANNOTATION_ADMISSION}), or at its first start: resumed under the A it ran with, its ranks would "
    "run again with the identity of an execution that already ran. Kueue suspends the Job of a TrainJob whose "
    "Workload is not admitted (a TrainJob being deleted, an eviction) and JobSet resumes it; the next execution "
    "comes with the next admission, which raises A (Hold and Release the TrainJob to readmit it)"
)


def _template_a(obj: str) -> str:
    return f"{obj}.spec.template.metadata.?annotations[?{q(ANNOTATION_ADMISSION)}]"


def job_resume_policy() -> dict[str, Any]:
    """On a dispatch trainer Job (its pod template carries A), for everyone: an update that resumes it raises A in
    its pod template, unless it is the Job's first start (``metadata.generation`` 1: its spec never changed since
    JobSet created it suspended). JobSet resumes a Job in one update that merges the JobSet's pod template (A
    included) and sets ``suspend: false`` (jobset v0.11.1 ``resumeJob``), so every legitimate resume after a
    suspension carries the A of a new admission. Kueue (v0.19.2 ``shouldSuspendChildJob``) also suspends a child
    Job, or JobSet, whose TrainJob has no admitted Workload, e.g. one being deleted by a foreground delete (Stop);
    Trainer then resumes the JobSet, since its TrainJob is not suspended, and JobSet resumes the Job: without this
    rule its rank would start again under the A and J of the execution that just ended."""
    canonical = q(_CANONICAL_COUNT)
    return validating_policy(
        JOB_RESUME,
        [("batch", "v1", "jobs")],
        ["UPDATE"],
        {
            "matchConditions": [
                {
                    "name": "dispatch-trainer-jobs",
                    "expression": f"{_template_a('oldObject')}.hasValue() || {_template_a('object')}.hasValue()",
                },
                {
                    "name": "resumes",
                    "expression": "oldObject.spec.?suspend.orValue(false) == true && "
                    "object.spec.?suspend.orValue(false) == false",
                },
            ],
            "variables": [
                {"name": "oldA", "expression": f"{_template_a('oldObject')}.orValue('')"},
                {"name": "newA", "expression": f"{_template_a('object')}.orValue('')"},
            ],
            "validations": [
                {
                    "expression": "oldObject.metadata.?generation.orValue(0) == 1 || ("
                    f"variables.oldA.matches({canonical}) && variables.newA.matches({canonical}) && "
                    "int(variables.newA) > int(variables.oldA))",
                    "messageExpression": f"{q(JOB_RESUMED_WITH_A_RAISED)} + ': saw A ' + "
                    "(variables.oldA == '' ? 'absent' : variables.oldA) + ' -> ' + "
                    "(variables.newA == '' ? 'absent' : variables.newA)",
                    "reason": "Forbidden",
                },
            ],
        },
    )


POD_PROTECTED_PREFIXES: Final = (PREFIX, "jobset.sigs.k8s.io/", "batch.kubernetes.io/")
"""Label and annotation keys of a trainer pod that tie it to its TrainJob, its JobSet and Job, and its
execution (A, J, the completion index): the gate finds and judges the pod by them."""


def _keys_kept(old: str, new: str, prefixes: tuple[str, ...]) -> str:
    guarded = " || ".join(f"k.startsWith({q(p)})" for p in prefixes)
    return (
        f"{new}.all(k, !({guarded}) || (k in {old} && {old}[k] == {new}[k])) && "
        f"{old}.all(k, !({guarded}) || k in {new})"
    )


@dataclass(frozen=True)
class FieldRules:
    """Field rules over some writes of one kind of a dispatch job's objects, in one of two forms: a policy of their
    own (``field_policy``), or carried by the kind's owner policy (``owner_policy``), where every write they judge
    is already matched. Carried, a write is converted for CEL and matched once instead of twice: the API server
    converts a typed object (a pod) to unstructured form once per policy whose match constraints match it
    (docs/performance.md)."""

    name: str
    """The policy's name in its own form."""
    kind: owners.Kind
    resources: tuple[tuple[str, str, str], ...]
    """(group, version, resource or resource/subresource): the kind's resource, and subresources of it."""
    operations: tuple[str, ...]
    conditions: tuple[tuple[str, str], ...]
    """The match conditions (name, CEL), all of which hold of the writes the rules are about. Carried, they must
    imply the owner policy's (the kind's ``belongs`` on the object or the old one), else a write they match would
    not be judged."""
    variables: tuple[dict[str, str], ...]
    validations: tuple[dict[str, str], ...]


FIELD_RULES_APPLY: Final = "fieldRulesApply"
"""In an owner policy that carries field rules: this write is one of theirs (their resources, operations and
match conditions), the guard of each of their validations."""


def field_policy(rules: FieldRules) -> dict[str, Any]:
    """The field rules as a policy of their own."""
    return validating_policy(
        rules.name,
        list(rules.resources),
        list(rules.operations),
        {
            "matchConditions": [{"name": name, "expression": expression} for name, expression in rules.conditions],
            "variables": list(rules.variables),
            "validations": list(rules.validations),
        },
    )


def _carried(rules: FieldRules, variables: list[dict[str, str]]) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """The owner policy's ``variables`` with the field rules' and their guard, and the field rules' validations
    guarded: each judges exactly the writes the rules' own policy would match (its resources, operations and match
    conditions), and passes every other write the owner policy matches."""
    subresources = []
    for group, _, resource in rules.resources:
        base, _, sub = resource.partition("/")
        if group != rules.kind.group or base != rules.kind.resource:
            raise ValueError(f"{rules.name}: {group}/{resource} is not a resource of {rules.kind.kind}")
        subresources.append(sub)
    merged = list(variables)
    for v in rules.variables:
        same = [m for m in merged if m["name"] == v["name"]]
        if same and same[0]["expression"] != v["expression"]:
            raise ValueError(f"{rules.name}: variable {v['name']} differs from the owner policy's")
        if not same:
            merged.append(v)
    # An owner policy's variables.subresource is the request's, '' for the object itself.
    guard = (
        f"request.operation in {json.dumps(list(rules.operations))} && "
        f"variables.subresource in {json.dumps(subresources)} && "
        + " && ".join(f"({expression})" for _, expression in rules.conditions)
    )
    merged.append({"name": FIELD_RULES_APPLY, "expression": guard})
    validations = [
        {**v, "expression": f"!variables.{FIELD_RULES_APPLY} || ({v['expression']})"} for v in rules.validations
    ]
    return merged, validations


def pod_rules(config: Config) -> FieldRules:
    """On a pod that carries dispatch's finalizer (a trainer pod of a dispatch TrainJob, agent/domain/pod_finalizer.py),
    only dispatch removes the finalizer, and nobody but dispatch changes what the readmission gate finds and
    judges it by: its ownerReferences (pod -> Job -> JobSet) and its labels and annotations under
    dispatch.phpboyscout.uk/, jobset.sigs.k8s.io/ and batch.kubernetes.io/. A policy, not a webhook rule, so
    it holds while the webhook is down and never waits on it; ``pods/status`` is covered too, since a status
    write may change a pod's labels, annotations and finalizers. Break-glass too: only dispatch is exempt.
    Carried by the owner policy of pods (a pod with the finalizer belongs to a dispatch job)."""
    finalizer = q(POD_FINALIZER)
    return FieldRules(
        PODS,
        owners.PODS,
        (("", "v1", "pods"), ("", "v1", "pods/status")),
        ("UPDATE",),
        (("dispatch-pods", f"oldObject != null && {finalizer} in oldObject.metadata.?finalizers.orValue([])"),),
        (
            {"name": "dispatch", "expression": _is_dispatch(config)},
            {"name": "oldLabels", "expression": _map("oldObject", "labels")},
            {"name": "newLabels", "expression": _map("object", "labels")},
            {"name": "oldAnnotations", "expression": _map("oldObject", "annotations")},
            {"name": "newAnnotations", "expression": _map("object", "annotations")},
        ),
        (
            {
                "expression": f"variables.dispatch || {finalizer} in object.metadata.?finalizers.orValue([])",
                "message": f"only dispatch removes its finalizer {POD_FINALIZER}: it does so once the pod's "
                "processes are proven gone (the kubelet's terminal phase, or the node out of service)",
                "reason": "Forbidden",
            },
            {
                "expression": "variables.dispatch || oldObject.metadata.?ownerReferences.orValue([]) == "
                "object.metadata.?ownerReferences.orValue([])",
                "message": "the ownerReferences of a dispatch trainer pod are not changed: they tie it to its Job "
                "and JobSet",
                "reason": "Forbidden",
            },
            {
                "expression": "variables.dispatch || ("
                + _keys_kept("variables.oldLabels", "variables.newLabels", POD_PROTECTED_PREFIXES)
                + ")",
                "message": "the labels of a dispatch trainer pod under "
                + ", ".join(POD_PROTECTED_PREFIXES)
                + " are not changed",
                "reason": "Forbidden",
            },
            {
                "expression": "variables.dispatch || ("
                + _keys_kept("variables.oldAnnotations", "variables.newAnnotations", POD_PROTECTED_PREFIXES)
                + ")",
                "message": "the annotations of a dispatch trainer pod under "
                + ", ".join(POD_PROTECTED_PREFIXES)
                + " are not changed",
                "reason": "Forbidden",
            },
        ),
    )


def pod_policy(config: Config) -> dict[str, Any]:
    """The pod rules (``pod_rules``) as a policy of their own: for tests that bind the field rules alone. The chart
    renders them in the owner policy of pods."""
    return field_policy(pod_rules(config))


def carried_field_rules(config: Config) -> dict[str, FieldRules]:
    """The field rules each owner policy carries, by its kind's resource."""
    return {rules.kind.resource: rules for rules in (pod_rules(config),)}


def owner_policy_name(kind: owners.Kind) -> str:
    return f"{NAME}-owners-{kind.resource}"


def _write_test(operation: str, subresource: str) -> str:
    return f"(request.operation == {q(operation)} && variables.subresource == {q(subresource)})"


def _roles_test(roles: tuple[str, ...]) -> str:
    return "true" if owners.EVERYONE in roles else " || ".join(f"variables.{r}" for r in roles)


def _principal_test(config: Config, role: str) -> str:
    """CEL: the request's principal is one of ``role``'s: Kubernetes' own (owners.KUBERNETES_PRINCIPALS), or the
    config's."""
    return owners.KUBERNETES_PRINCIPALS.get(role) or is_principal(config.principals(role))


def _owner_test(config: Config, role: str) -> str:
    """CEL: the request's principal is one of ``role``'s, on an object the role owns (owners.ONLY_ON)."""
    only_on = owners.ONLY_ON.get(role)
    if only_on is None:
        return _principal_test(config, role)
    on_both = " && ".join(f"({o} == null || {only_on(o)})" for o in ("object", "oldObject"))
    return f"({_principal_test(config, role)}) && {on_both}"


def _who(roles: tuple[str, ...]) -> str:
    return ", ".join(owners.ROLE_TITLES[r] for r in roles)


def owner_policy(config: Config, kind: owners.Kind, fields: FieldRules | None = None) -> dict[str, Any]:
    """Default deny on one kind: a write on an object of a dispatch job (judged on the object and its old
    version) is refused unless its principal owns that write (webhook/owners.py), whatever field it touches."""
    roles = sorted({r for rs in kind.writes.values() for r in rs if r != owners.EVERYONE} | {owners.BREAK_GLASS})
    allowed = " || ".join(f"({_write_test(op, sub)} && ({_roles_test(rs)}))" for (op, sub), rs in kind.writes.items())
    who = json.dumps({owners.write_name(op, sub): _who(rs) for (op, sub), rs in kind.writes.items()})
    rule = {
        "apiGroups": [kind.group],
        "apiVersions": ["*"],
        "resources": [kind.resource, f"{kind.resource}/*"],
        "operations": ["CREATE", "UPDATE", "DELETE"],
    }
    validations = [
        {
            "expression": f"variables.{owners.BREAK_GLASS} || {allowed}",
            "messageExpression": f"'{kind.kind} ' + request.name + ' {owners.BELONGS}: ' + variables.write + "
            f"' is made only by ' + (variables.write in {who} ? {who}[variables.write] : 'nobody') + "
            "' (or break-glass), and ' + request.userInfo.username + ' is none of them'",
            "reason": "Forbidden",
        }
    ]
    if kind.parent is not None:
        parent_kind, pattern = kind.parent
        validations.append(
            {
                # Only a dispatch job's own children carry dispatch's finalizer and keys: a stranger's Job or
                # JobSet that copies them would otherwise block the controllers (the finalizer) or mislead the
                # gate.
                "expression": f"variables.{owners.BREAK_GLASS} || request.operation != 'CREATE' || "
                "variables.subresource != '' || "
                f"object.metadata.?ownerReferences.orValue([]).exists(r, r.?controller.orValue(false) && "
                f"r.?kind.orValue('') == {q(parent_kind)} && r.?name.orValue('').matches({q(pattern)}))",
                "message": f"a {kind.kind} with dispatch's marks (its finalizer, its keys, a dispatch job's name or "
                f"labels) is created only by its controller, a {parent_kind} of a dispatch job",
                "reason": "Forbidden",
            }
        )
    if kind is owners.PROLOGUES:
        validations.append(prologue_content_validation())
    variables = [
        # An empty subResource is absent from the request.
        {"name": "subresource", "expression": "request.?subResource.orValue('')"},
        {
            "name": "write",
            "expression": "request.operation + (variables.subresource == '' ? '' : ' ' + variables.subresource)",
        },
        *({"name": r, "expression": _owner_test(config, r)} for r in roles),
    ]
    if fields is not None:
        if fields.kind is not kind:
            raise ValueError(f"{fields.name} is about {fields.kind.kind}, not {kind.kind}")
        # After the owner rule, so that a write refused by both is refused naming its owners.
        variables, carried = _carried(fields, variables)
        validations += carried
    spec: dict[str, Any] = {
        "matchConditions": [
            {
                "name": "dispatch-job-objects",
                "expression": " || ".join(f"({o} != null && ({kind.belongs(o)}))" for o in ("object", "oldObject")),
            }
        ],
        "variables": variables,
        "validations": validations,
    }
    policy = validating_policy(owner_policy_name(kind), [], ["CREATE", "UPDATE", "DELETE"], spec)
    policy["spec"]["matchConstraints"]["resourceRules"] = [rule]
    return policy


PROLOGUE_CONTENT: Final = (
    f"a ConfigMap named {PROLOGUE_CONFIGMAP_PREFIX}<hash> is the prologue's, and whoever creates it, it is created "
    f"only as dispatch creates it: named {PROLOGUE_CONFIGMAP} (this version's hash), data exactly {{{PROLOGUE_KEY}: "
    "this version's prologue text}, no binaryData, immutable: true. A name always means one text: every dispatch "
    "trainer pod runs the file it holds"
)


def prologue_content_validation() -> dict[str, Any]:
    """On the prologue's ConfigMap, for everyone (break-glass too): created only with this version's name and
    exactly its text (contract/prologue.py ``prologue_configmap``). Its data never changes after (immutable)."""
    return {
        "expression": f"request.operation != 'CREATE' || (object.metadata.name == {q(PROLOGUE_CONFIGMAP)} && "
        f"object.?immutable.orValue(false) == true && size(object.?binaryData.orValue({{}})) == 0 && "
        f"object.?data.orValue({{}}) == {{{q(PROLOGUE_KEY)}: {q(PROLOGUE)}}})",
        "message": PROLOGUE_CONTENT,
        "reason": "Forbidden",
    }


def owner_policies(config: Config, *, carrying: bool = False) -> list[dict[str, Any]]:
    """One default-deny policy per kind of a dispatch job's objects; ``carrying``, each with the field rules it
    carries (``carried_field_rules``), as the chart renders them. Without, the owner rules alone: their tests, and
    the harness, which runs them over every namespace of tier B while the field rules are a test's choice."""
    carried = carried_field_rules(config) if carrying else {}
    return [owner_policy(config, kind, carried.get(kind.resource)) for kind in owners.KINDS]


def principal_policies(config: Config) -> list[dict[str, Any]]:
    """Default deny by principal, as the chart renders it: the owner policies, carrying their field rules, and the
    policy that keeps strangers from pinning a dispatch job's objects with blocking owner references."""
    return [*owner_policies(config, carrying=True), dependents_policy(config)]


RECORD_START: Final = f"{NAME}-record-start"
MARK_COPY: Final = f"{NAME}-mark-copy"
_CANONICAL_COUNT: Final = "^(0|[1-9][0-9]{0,17})$"
"""contract/admission.py ``parse_count``: a decimal count without leading zeros, in a 64-bit int."""
_POD_ANNOTATIONS_IN_JOB: Final = ("template", "spec", "template", "metadata", "annotations")
"""Where A's map lives in a replicated job of a runtime-patch entry (contract/admission.py ``admission_path``)."""


def _json_patch(op: str, path: str, value: str) -> str:
    """CEL: one JSON Patch operation; ``path`` and ``value`` are CEL expressions."""
    return f"JSONPatch{{op: {q(op)}, path: {path}, value: {value}}}"


def _json_patch_add(obj: str, path: str, parents: tuple[str, ...], key: str, value: str) -> str:
    """CEL: one JSON Patch ``add`` setting ``key`` under the fields ``parents`` of ``obj`` (at JSON Pointer ``path``,
    a CEL string) to ``value``. The first parent missing is added whole with the rest of the nest inside, as
    contract/objects.py ``add_op`` does: an ``add`` under a missing parent fails, and the API server refuses the
    write."""
    leaf = _json_patch("add", f"{path} + '/{'/'.join(parents)}/' + jsonpatch.escapeKey({q(key)})", value)
    for depth in range(len(parents), 0, -1):
        nest = value
        for name in reversed((*parents[depth:], key)):
            nest = f"{{{q(name)}: {nest}}}"
        missing = _json_patch("add", f"{path} + '/{'/'.join(parents[:depth])}'", nest)
        leaf = f"(!{obj}{''.join(f'.?{p}' for p in parents[:depth])}.hasValue() ? {missing} : {leaf})"
    return leaf


def record_start_policy(namespace: str, role: Role = ROLE_SINGLE) -> list[dict[str, Any]]:
    """The MutatingAdmissionPolicy that numbers every execution in the write that starts it: in each write that
    unsuspends a dispatch TrainJob (Kueue's admission, dispatch's Open and Release), in Kueue mode it raises A
    and the floor to max(A, floor) + 1 when A is not above the A the previous execution started with (or is
    below the floor), and it records A as ``admission-started``. In-process, so an execution starts while the
    webhook is down and Kueue's re-admission costs no write of dispatch's; without it (an API server older than
    v1.36) the webhook does the same, and with neither every unsuspend fails closed (the unsuspend policy
    requires A above the record, and the record). The same decision as contract/admission.py ``unsuspend_ops``
    (tests/cluster/test_record_start.py holds the two to each other). The mutation is a JSON Patch: an apply
    configuration costs the API server a typed (server-side apply) conversion of the whole TrainJob at every
    unsuspend. In role worker the start of MultiKueue's copy (its origin label) only records A, never raises it
    (contract/multicluster.py ``records_only``): the manager numbered the dispatch."""
    entries = f"object.spec.?runtimePatches.orValue([]).filter(p, p.?manager.orValue('') == {q(RUNTIME_PATCH_MANAGER)})"
    count = f"matches({q(_CANONICAL_COUNT)})"
    annotations = "'/metadata/annotations'"
    started, floor = (
        f"{annotations} + '/' + jsonpatch.escapeKey({q(k)})"
        for k in (ANNOTATION_ADMISSION_STARTED, ANNOTATION_ADMISSION_FLOOR)
    )
    # A TrainJob without annotations gets the map whole: an add under a missing map fails.
    record = (
        f"object.metadata.?annotations.hasValue() ? [{_json_patch('add', started, 'variables.next')}] : "
        f"[{_json_patch('add', annotations, '{' + q(ANNOTATION_ADMISSION_STARTED) + ': variables.next}')}]"
    )
    both = f"{{{q(ANNOTATION_ADMISSION_STARTED)}: variables.next, {q(ANNOTATION_ADMISSION_FLOOR)}: variables.next}}"
    raise_record = (
        f"object.metadata.?annotations.hasValue() ? [{_json_patch('add', started, 'variables.next')}, "
        f"{_json_patch('add', floor, 'variables.next')}] : [{_json_patch('add', annotations, both)}]"
    )
    entry = "'/spec/runtimePatches/' + string(variables.index)"
    job = f"{entry} + '/trainingRuntimeSpec/template/spec/replicatedJobs/0'"
    # The raise, located by index: the tests make the patch a no-op, should the entry or the job read not be the one
    # at the index (the API server then leaves the object as it was, and the unsuspend policy refuses it unrecorded).
    tests = [
        _json_patch("test", f"{entry} + '/manager'", q(RUNTIME_PATCH_MANAGER)),
        _json_patch("test", f"{job} + '/name'", "variables.job"),
    ]
    raised = (
        "["
        + ", ".join(tests)
        + ", "
        + _json_patch_add("variables.jobs[0]", job, _POD_ANNOTATIONS_IN_JOB, ANNOTATION_ADMISSION, "variables.next")
        + f"] + ({raise_record})"
    )
    conditions = [
        {"name": "dispatch-objects", "expression": claims("trainjobs")},
        {"name": "unsuspends", "expression": UNSUSPENDS},
    ]
    return _trainjob_mutation(
        RECORD_START,
        namespace,
        "UPDATE",
        conditions,
        {
            "variables": [
                {"name": "entries", "expression": entries},
                {
                    # Where dispatch's entry is, for the JSON Patch that raises A in it (used only when it is the one
                    # entry of dispatch's manager).
                    "name": "index",
                    "expression": f"object.spec.?runtimePatches.orValue([]).map(p, p.?manager.orValue(''))"
                    f".indexOf({q(RUNTIME_PATCH_MANAGER)})",
                },
                {
                    "name": "jobs",
                    "expression": "size(variables.entries) == 1 ? variables.entries[0].?trainingRuntimeSpec.?template"
                    ".?spec.?replicatedJobs.orValue([]) : []",
                },
                {"name": "job", "expression": "size(variables.jobs) == 1 ? variables.jobs[0].?name.orValue('') : ''"},
                {
                    "name": "pod",
                    "expression": "size(variables.jobs) == 1 ? variables.jobs[0].?template.?spec.?template.?metadata"
                    ".?annotations.orValue({}) : {}",
                },
                {"name": "mine", "expression": "object.metadata.?annotations.orValue({})"},
                {"name": "old", "expression": "oldObject.metadata.?annotations.orValue({})"},
                {
                    # Every count there readable, and at least one of A and the floor there: else nothing is
                    # written and the unsuspend policy refuses, naming why.
                    "name": "readable",
                    "expression": f"variables.job != '' && "
                    f"(!({q(ANNOTATION_ADMISSION)} in variables.pod) || "
                    f"variables.pod[{q(ANNOTATION_ADMISSION)}].{count}) && "
                    f"(!({q(ANNOTATION_ADMISSION_FLOOR)} in variables.mine) || "
                    f"variables.mine[{q(ANNOTATION_ADMISSION_FLOOR)}].{count}) && "
                    f"(!({q(ANNOTATION_ADMISSION_STARTED)} in variables.old) || "
                    f"variables.old[{q(ANNOTATION_ADMISSION_STARTED)}].{count}) && "
                    f"({q(ANNOTATION_ADMISSION)} in variables.pod || "
                    f"{q(ANNOTATION_ADMISSION_FLOOR)} in variables.mine)",
                },
                {
                    "name": "current",
                    "expression": f"variables.readable && {q(ANNOTATION_ADMISSION)} in variables.pod ? "
                    f"int(variables.pod[{q(ANNOTATION_ADMISSION)}]) : 0",
                },
                {
                    "name": "floor",
                    "expression": f"variables.readable && {q(ANNOTATION_ADMISSION_FLOOR)} in variables.mine ? "
                    f"int(variables.mine[{q(ANNOTATION_ADMISSION_FLOOR)}]) : 0",
                },
                {
                    "name": "before",
                    "expression": f"variables.readable && {q(ANNOTATION_ADMISSION_STARTED)} in variables.old ? "
                    f"int(variables.old[{q(ANNOTATION_ADMISSION_STARTED)}]) : 0",
                },
                {
                    "name": "highest",
                    "expression": "variables.current > variables.floor ? variables.current : variables.floor",
                },
                {
                    # Kueue mode (the queue label on both versions): in plain mode only dispatch's Open and
                    # Release start an execution, and they raise A in their own write.
                    "name": "kueue",
                    "expression": f"oldObject.metadata.?labels[?{q(LABEL_QUEUE_NAME)}].orValue('') != '' && "
                    f"object.metadata.?labels[?{q(LABEL_QUEUE_NAME)}].orValue('') != ''"
                    # On a worker, MultiKueue's copy is numbered by the manager: recorded, never raised here.
                    + (f" && !({_copy('oldObject')} || {_copy('object')})" if role == ROLE_WORKER else ""),
                },
                {
                    "name": "due",
                    "expression": "variables.readable && variables.kueue && (variables.current <= variables.before || "
                    "variables.current < variables.floor)",
                },
                {
                    "name": "next",
                    "expression": "variables.due ? string(variables.highest + 1) : string(variables.current)",
                },
            ],
            "mutations": [
                {
                    "patchType": "JSONPatch",
                    "jsonPatch": {
                        "expression": f"!variables.readable || (variables.due && variables.highest + 1 >= {R_BOUND})"
                        f" ? [] : variables.due ? {raised} : {q(ANNOTATION_ADMISSION)} in variables.pod && "
                        f"{annotation('object', ANNOTATION_ADMISSION_STARTED)} != variables.next ? ({record}) : []",
                    },
                }
            ],
        },
    )


def mark_copy_policy(namespace: str) -> list[dict[str, Any]]:
    """Role worker: the MutatingAdmissionPolicy that marks MultiKueue's copy of a dispatch TrainJob (its origin label)
    ``unverified`` and suspended at its creation, in-process (contract/multicluster.py ``mark_copy_ops``; the webhook
    does the same where the API server serves no MutatingAdmissionPolicy). The copy then starts only once dispatch's
    agent on the worker has matched its A to the stamp of its dispatch and removed the mark (docs/multicluster.md,
    "The stale copy"); the reserved-keys policy refuses MultiKueue's copy created without the mark."""
    mark = _json_patch_add("object", "''", ("metadata", "annotations"), ANNOTATION_UNVERIFIED, q(UNVERIFIED_TRUE))
    suspend = _json_patch("add", "'/spec/suspend'", "true")
    conditions = [
        {"name": "dispatch-objects", "expression": claims("trainjobs")},
        {"name": "multikueue-copy", "expression": _copy("object")},
    ]
    expression = (
        f"({_unverified('object')} ? [] : [{mark}]) + (object.?spec.?suspend.orValue(false) == true ? [] : [{suspend}])"
    )
    mutations = [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}]
    return _trainjob_mutation(MARK_COPY, namespace, "CREATE", conditions, {"mutations": mutations})


def _trainjob_mutation(
    name: str, namespace: str, operation: str, conditions: list[dict[str, str]], body: dict[str, Any]
) -> list[dict[str, Any]]:
    """A MutatingAdmissionPolicy over dispatch TrainJobs (``operation``, ``conditions``; ``body``: its variables and
    mutations), failing closed and never reinvoked, and its binding to the job namespaces."""
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "policy"}
    rule = {
        "apiGroups": [RESOURCES[0][0]],
        "apiVersions": ["*"],
        "resources": [RESOURCES[0][2]],
        "operations": [operation],
    }
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConstraints": {"resourceRules": [rule]},
            "matchConditions": conditions,
            **body,
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": labels},
        "spec": {"policyName": name, "matchResources": {"namespaceSelector": namespace_selector(namespace)}},
    }
    return [policy, binding]
