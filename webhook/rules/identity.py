"""Identity: the counters only rise (``update.*``; the policy ``dispatch-k8s-identity``), for everyone.

A in dispatch's runtime patch and the admission floor never fall and are never removed; only dispatch, or admission
in the write that unsuspends, raises them, together and only to max(A, floor) + 1 (dispatch, on a TrainJob
MultiKueue manages, above it); dispatch's entry changes in nothing but A; the recorded JobSet UID never changes; the
queue never changes; the record of A changes only in an unsuspend; and no other runtime-patch entry sets a pod key
that decides identity. Kueue's and Trainer's own writes touch none of these, so they pass.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from contract import upstream
from contract.admission import admission_count, admission_floor
from contract.errors import ContractError, Problem
from contract.keys import (
    ANNOTATION_ADMISSION,
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_ADMISSION_STARTED,
    ANNOTATION_JOBSET_UID,
    LABEL_QUEUE_NAME,
    LABEL_RESTART_ATTEMPT,
    PREFIX,
    RUNTIME_PATCH_MANAGER,
)
from contract.multicluster import MULTIKUEUE_MANAGED_BY, ROLE_WORKER
from contract.objects import annotations, dig, labels
from contract.ownership import dispatch_patch, is_kueue_mode
from contract.patches import FOREIGN_POD_SPEC
from webhook.cel import annotation, dispatch_a, dispatch_entries, is_principal, pod_key_reserved, q, validating_policy
from webhook.config import Config
from webhook.configurations import NAME, UNSUSPENDS, claims, gvr
from webhook.rules.common import A_FIELD, FLOOR_FIELD, count_or_error, started_admission, suspended, unsuspends
from webhook.rules.multicluster import origin_kept

IDENTITY: Final = f"{NAME}-identity"


def _without_a(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The entry as dispatch wrote it, less what may change: A, and the ``time`` Trainer stamps."""
    entry = copy.deepcopy(dict(entry))
    entry.pop("time", None)
    jobs = dig(entry, "trainingRuntimeSpec", "template", "spec", "replicatedJobs")
    for job in jobs if isinstance(jobs, list) else []:
        notes = dig(job, "template", "spec", "template", "metadata", "annotations")
        if isinstance(notes, dict):
            notes.pop(ANNOTATION_ADMISSION, None)
    return entry


def _entry_problems(old_entry: Mapping[str, Any] | None, new_entry: Mapping[str, Any] | None) -> list[Problem]:
    """dispatch's runtime-patch entry is written at creation, never removed, and changes in nothing but A."""
    if old_entry is None and new_entry is not None:
        seen, accepted = RUNTIME_PATCH_MANAGER, "dispatch's entry is written at creation only"
    elif old_entry is not None and new_entry is None:
        seen, accepted = "entry removed", "dispatch's entry is never removed"
    elif old_entry is not None and new_entry is not None and _without_a(old_entry) != _without_a(new_entry):
        seen, accepted = "entry rewritten", "only A changes in dispatch's entry"
    else:
        return []
    return [Problem("update.runtime-patch", "spec.runtimePatches", seen, accepted)]


def update_problems(old: Mapping[str, Any], new: Mapping[str, Any], *, dispatch: bool = True) -> list[Problem]:
    """``dispatch``: the writer is dispatch, the one principal that raises A outside an unsuspend (in one, the
    raise is admission's own: see contract/admission.py ``unsuspend_ops``)."""
    old_entry, new_entry = dispatch_patch(old), dispatch_patch(new)
    problems = _entry_problems(old_entry, new_entry)
    a_before, a_after = (
        count_or_error(admission_count, old),
        count_or_error(admission_count, new) if new_entry else None,
    )
    floor_before, floor_after = count_or_error(admission_floor, old), count_or_error(admission_floor, new)
    for field, before, after in ((A_FIELD, a_before, a_after), (FLOOR_FIELD, floor_before, floor_after)):
        if isinstance(after, ContractError):
            problems.append(Problem("update.counter", field, after.message, "a decimal count without leading zeros"))
        elif isinstance(before, int) and (after is None or after < before):
            seen = f"{before} -> {'removed' if after is None else after}"
            problems.append(Problem("update.counter", field, seen, f"never below {before}, never removed"))
    # In a MultiKueue queue dispatch's gate raises by K = maxRestarts + 1 (contract/multicluster.py).
    by_k = dispatch and dig(new, "spec", "managedBy") == MULTIKUEUE_MANAGED_BY
    problems += _raise_problems(
        a_before, a_after, floor_before, floor_after, dispatch=dispatch or unsuspends(old, new), by_k=by_k
    )
    problems += _started_problems(old, new, a_after)

    queue_before, queue_after = labels(old).get(LABEL_QUEUE_NAME), labels(new).get(LABEL_QUEUE_NAME)
    if queue_before != queue_after:
        problems.append(
            Problem(
                "update.queue",
                f"metadata.labels[{LABEL_QUEUE_NAME}]",
                f"{queue_before} -> {queue_after}",
                "the queue (and Kueue or plain mode) is chosen at Start and never changes: another queue may "
                "admit without dispatch's check",
            )
        )

    uid_before, uid_after = (
        annotations(old).get(ANNOTATION_JOBSET_UID),
        annotations(new).get(ANNOTATION_JOBSET_UID),
    )
    if uid_before is not None and uid_after != uid_before:
        problems.append(
            Problem(
                "update.jobset-uid",
                f"metadata.annotations[{ANNOTATION_JOBSET_UID}]",
                f"{uid_before} -> {uid_after}",
                "recorded once, never changed",
            )
        )

    plain = not (is_kueue_mode(old) and is_kueue_mode(new))
    if plain and suspended(old) and not suspended(new):
        highest = max((c for c in (a_before, floor_before) if isinstance(c, int)), default=0)
        raised = isinstance(a_after, int) and a_after > highest and floor_after == a_after
        if not raised:
            problems.append(
                Problem(
                    "update.unsuspend",
                    "spec.suspend",
                    f"unsuspended with A {a_before} -> {a_after}, floor {floor_before} -> {floor_after}",
                    f"in plain mode the unsuspending update raises A above {highest} (patch and floor)",
                )
            )
    return problems


def _raise_problems(
    a_before: object,
    a_after: object,
    floor_before: object,
    floor_after: object,
    *,
    dispatch: bool,
    by_k: bool = False,
) -> list[Problem]:
    """A and the floor rise only by dispatch or in an unsuspend (``dispatch`` true for both), together, and only
    to max(A, floor) + 1: a stranger pushing A to the bound would make every later raise fail. ``by_k``:
    dispatch's own write in a MultiKueue queue, where its gate raises by K, so any value above max(A, floor)."""
    counts = (a_before, a_after, floor_before, floor_after)
    if any(isinstance(c, ContractError) for c in counts) or (a_before, floor_before) == (a_after, floor_after):
        return []
    if isinstance(a_after, int) and isinstance(a_before, int) and a_after < a_before:
        return []  # reported as a fall
    if not dispatch:
        return [
            Problem(
                "update.counter",
                A_FIELD,
                f"A {a_before} -> {a_after}, floor {floor_before} -> {floor_after}",
                "only dispatch raises A and the admission floor, or admission in the write that unsuspends",
            )
        ]
    expected = max(c for c in (a_before, floor_before, 0) if isinstance(c, int)) + 1
    if by_k and isinstance(a_after, int) and a_after >= expected and floor_after == a_after:
        return []
    if a_after != expected or floor_after != expected:
        return [
            Problem(
                "update.counter",
                A_FIELD,
                f"A {a_before} -> {a_after}, floor {floor_before} -> {floor_after}",
                f"a raise writes max(A, floor) + 1 = {expected} into both",
            )
        ]
    return []


def _started_problems(old: Mapping[str, Any], new: Mapping[str, Any], a_after: object) -> list[Problem]:
    before, after = started_admission(old), started_admission(new)
    if before == after:
        return []
    if unsuspends(old, new) and isinstance(a_after, int) and after == a_after:
        return []
    return [
        Problem(
            "update.admission-started",
            f"metadata.annotations[{ANNOTATION_ADMISSION_STARTED}]",
            f"{before} -> {after}",
            "recorded by the webhook as A in the write that unsuspends, and nowhere else",
        )
    ]


def _never_falls(old: str, new: str) -> str:
    return f"{old} == '' || ({new} != '' && int({new}) >= int({old}))"


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
        + f" && {pod}.?metadata.?labels.orValue({{}}).all(k, !{pod_key_reserved('k')}) && "
        f"{pod}.?metadata.?annotations.orValue({{}}).all(k, !{pod_key_reserved('k')}))"
    )


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


def _raised_together() -> dict[str, Any]:
    """CEL: only dispatch, or admission in an unsuspend, raises A and the floor, together, to max(A, floor) + 1."""
    return {
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
    }


def _foreign_entries_clean() -> dict[str, Any]:
    """CEL: another manager's runtime-patch entry sets only what Kueue's may (``runtime-patch.foreign``)."""
    return {
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
    }


def identity_policy(config: Config) -> dict[str, Any]:
    """``dispatch-k8s-identity``: ``update_problems`` and ``foreign_entry_problems`` in CEL."""
    return validating_policy(
        IDENTITY,
        [gvr(upstream.TRAINJOBS)],
        ["UPDATE"],
        {
            "matchConditions": [{"name": "dispatch-objects", "expression": claims("trainjobs")}],
            "variables": [
                {"name": "dispatch", "expression": is_principal(config.dispatch)},
                {"name": "oldA", "expression": dispatch_a("oldObject")},
                {"name": "newA", "expression": dispatch_a("object")},
                {"name": "oldFloor", "expression": annotation("oldObject", ANNOTATION_ADMISSION_FLOOR)},
                {"name": "newFloor", "expression": annotation("object", ANNOTATION_ADMISSION_FLOOR)},
                {"name": "oldJobSet", "expression": annotation("oldObject", ANNOTATION_JOBSET_UID)},
                {"name": "newJobSet", "expression": annotation("object", ANNOTATION_JOBSET_UID)},
                {"name": "oldStarted", "expression": annotation("oldObject", ANNOTATION_ADMISSION_STARTED)},
                {"name": "newStarted", "expression": annotation("object", ANNOTATION_ADMISSION_STARTED)},
                {"name": "unsuspends", "expression": UNSUSPENDS},
                {"name": "oldEntries", "expression": dispatch_entries("oldObject")},
                {"name": "newEntries", "expression": dispatch_entries("object")},
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
                _raised_together(),
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
                _foreign_entries_clean(),
                *([origin_kept()] if config.multicluster_role == ROLE_WORKER else []),
            ],
        },
    )
