"""The unsuspend, the choke point: every execution starts with one, Kueue's or dispatch's, so it is checked for every
client against what must hold before any execution (``update.unsuspend``, ``update.approval``; the policy
``dispatch-k8s-unsuspend``): opened by dispatch, no gate, no hold, A above the A recorded at the previous unsuspend
and recorded in this write (``dispatch-k8s-record-start`` raises A in the write when due and records it, or the
mutating webhook where the API server has no MutatingAdmissionPolicy; with neither the unsuspend fails closed), and
in Kueue mode the readmission gate's approval of exactly that A.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from contract import upstream
from contract.admission import admission_count, approved_admission
from contract.errors import ContractError, Problem
from contract.gates import has_dispatch_gate, is_opened_by_dispatch
from contract.keys import (
    ANNOTATION_ADMISSION,
    ANNOTATION_ADMISSION_STARTED,
    ANNOTATION_APPROVED_ADMISSION,
    ANNOTATION_OPENED,
    GATE,
    HOLD_ANNOTATIONS,
    LABEL_QUEUE_NAME,
    OPENED_TRUE,
    RUNTIME_PATCH_MANAGER,
)
from contract.multicluster import ROLE_WORKER
from contract.objects import annotations
from contract.ownership import is_kueue_mode
from contract.patches import merged_admission
from webhook.cel import annotation, count_or_zero, dispatch_a, is_multikueue_copy, lists_gate, q, validating_policy
from webhook.config import Config
from webhook.configurations import NAME, UNSUSPENDS, claims, gvr
from webhook.rules.common import A_FIELD, count_or_error, started_admission, suspended, unsuspends
from webhook.rules.multicluster import copy_records_only, copy_verified

UNSUSPEND: Final = f"{NAME}-unsuspend"


def unsuspend_problems(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Problem]:
    """The choke point, for every client (Kueue's admission, dispatch's Open and Release, anyone else's):
    an unsuspend starts an execution, so dispatch must have opened the job, no hold of dispatch's may be in
    force, A in the merged pod template must be dispatch's A, and A must be above the A recorded at the
    previous unsuspend (the mutating webhook records it in this same write)."""
    if not unsuspends(old, new):
        return []
    problems = []

    def refuse(field: str, seen: object, accepted: str) -> None:
        problems.append(Problem("update.unsuspend", field, seen, accepted))

    # The readmission gate's own answer (contract/gates.py), so it never approves what is refused here.
    if not is_opened_by_dispatch(new):
        if annotations(new).get(ANNOTATION_OPENED) != OPENED_TRUE:
            refuse(
                f"metadata.annotations[{ANNOTATION_OPENED}]",
                annotations(new).get(ANNOTATION_OPENED),
                "dispatch opens the job before any execution (Open writes the opened mark, in both modes)",
            )
        if has_dispatch_gate(new):
            refuse(
                "metadata.annotations[kueue.x-k8s.io/admission-gated-by]", "dispatch's gate", "Open removes it first"
            )
    held = sorted(k for k in HOLD_ANNOTATIONS if k in annotations(new))
    if held:
        refuse("metadata.annotations", held, "a hold of dispatch's is in force: Release lifts it")
    a = count_or_error(admission_count, new)
    if not isinstance(a, int) or a < 1:
        refuse(
            A_FIELD, a.message if isinstance(a, ContractError) else a, "at least 1: an execution starts after a raise"
        )
        return problems
    merged = merged_admission(new)
    if merged != str(a):
        refuse(
            "spec.runtimePatches",
            f"A {merged} in the merged pod template",
            f"A {a} of dispatch's entry: no later entry may set {ANNOTATION_ADMISSION}",
        )
    previous = started_admission(old)
    if isinstance(previous, ContractError) or (isinstance(previous, int) and a <= previous):
        refuse(
            A_FIELD,
            f"A {a}, the previous execution started with A {previous}",
            "A is raised before every execution: in the write that unsuspends (dispatch's admission policy or "
            "mutating webhook), or by Open and Release",
        )
    if started_admission(new) != a:
        refuse(
            f"metadata.annotations[{ANNOTATION_ADMISSION_STARTED}]",
            annotations(new).get(ANNOTATION_ADMISSION_STARTED),
            f"{a}, recorded by dispatch's admission policy or mutating webhook in the write that unsuspends",
        )
    return problems


APPROVAL_ACCEPTED: Final = (
    "the readmission gate's approval of exactly this A (<A>/<Workload uid>), which dispatch writes before it sets its "
    "AdmissionCheck Ready: in Kueue mode an execution starts only through an admission dispatch's check approved. "
    "Does the job's LocalQueue point at a ClusterQueue that lists dispatch's AdmissionCheck?"
)


def approval_problems(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Problem]:
    """In Kueue mode every start carries the readmission gate's approval of the A it starts with (``approved-
    admission``, dispatch's key): a queue that admits without dispatch's check (a LocalQueue re-pointed, a
    ClusterQueue's checks edited, a drain) cannot start the job without the gate's wait. The approval names one
    A, and A is above the last start's at every start, so one approval starts at most one execution. MultiKueue's
    copy on a worker is not judged here: the manager's gate approved its dispatch, and the worker's agent lets it
    start (its mark ``unverified``)."""
    if not (unsuspends(old, new) and is_kueue_mode(old) and is_kueue_mode(new)):
        return []
    a = count_or_error(admission_count, new)
    if not isinstance(a, int):
        return []  # unsuspend_problems refuses it, naming why
    approved = count_or_error(approved_admission, new)
    if approved == a:
        return []
    seen = annotations(new).get(ANNOTATION_APPROVED_ADMISSION)
    return [
        Problem("update.approval", f"metadata.annotations[{ANNOTATION_APPROVED_ADMISSION}]", seen, APPROVAL_ACCEPTED)
    ]


def kueue_unsuspend_problems(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Problem]:
    """In Kueue mode only Kueue (once the readmission gate has approved and the Workload is admitted) and
    dispatch unsuspend a dispatch TrainJob: anyone else's unsuspend would start an execution Kueue never
    admitted, with the A of the last one, repeating an R."""
    if is_kueue_mode(old) and is_kueue_mode(new) and suspended(old) and not suspended(new):
        return [
            Problem(
                "update.unsuspend",
                "spec.suspend",
                "unsuspended by someone other than Kueue",
                "in Kueue mode Kueue unsuspends, after the readmission gate has approved",
            )
        ]
    return []


def _opened_by_dispatch(obj: str) -> str:
    """contract.gates.is_opened_by_dispatch in CEL: the opened mark, and no gate of dispatch's. The readmission
    gate approves only such a job, so Kueue never admits one whose unsuspend this refuses."""
    return f"{annotation(obj, ANNOTATION_OPENED)} == {q(OPENED_TRUE)} && !({lists_gate(obj)})"


def _queued(obj: str) -> str:
    return f"{obj}.metadata.?labels[?{q(LABEL_QUEUE_NAME)}].orValue('') != ''"


def _approved(config: Config) -> dict[str, Any]:
    """In the unsuspend policy: in Kueue mode the start carries the readmission gate's approval of exactly the A it
    starts with (``approval_problems``); on a worker, MultiKueue's copy is exempt (the
    manager's gate approved its dispatch; the worker's agent verifies it)."""
    copy = (
        f" || {is_multikueue_copy('oldObject')} || {is_multikueue_copy('object')}"
        if config.multicluster_role == ROLE_WORKER
        else ""
    )
    approved = annotation("object", ANNOTATION_APPROVED_ADMISSION)
    return {
        "expression": f"!({_queued('oldObject')} && {_queued('object')}){copy} || "
        f"{approved}.startsWith(variables.a + '/')",
        "messageExpression": f"'the start with A ' + variables.a + ' carries {ANNOTATION_APPROVED_ADMISSION} ' + "
        f"({approved} == '' ? 'none' : {approved}) + '; it needs ' + {q(APPROVAL_ACCEPTED)}",
        "reason": "Forbidden",
    }


def unsuspend_policy(config: Config) -> dict[str, Any]:
    """``dispatch-k8s-unsuspend``: ``unsuspend_problems`` and ``approval_problems`` in CEL."""
    return validating_policy(
        UNSUSPEND,
        [gvr(upstream.TRAINJOBS)],
        ["UPDATE"],
        {
            "matchConditions": [
                {"name": "dispatch-objects", "expression": claims("trainjobs")},
                {"name": "unsuspends", "expression": UNSUSPENDS},
            ],
            "variables": [
                {"name": "a", "expression": dispatch_a("object")},
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
                    f"{count_or_zero('variables.oldStarted')} < int(variables.a)",
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
                *([copy_records_only(), copy_verified()] if config.multicluster_role == ROLE_WORKER else []),
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


START_APPROVAL: Final = f"{NAME}-start-approval"


def start_approval_policy(config: Config) -> dict[str, Any]:
    """The unsuspend policy's rule of the gate's approval (``_approved``) as a policy of its own: the harness's tier B
    installs it over every namespace beside the owner policies and ``record-start``, so that its clusters hold every
    Kueue-mode start to the approval as the chart does. The chart carries the rule in ``unsuspend``."""
    return validating_policy(
        START_APPROVAL,
        [gvr(upstream.TRAINJOBS)],
        ["UPDATE"],
        {
            "matchConditions": [
                {"name": "dispatch-objects", "expression": claims("trainjobs")},
                {"name": "unsuspends", "expression": UNSUSPENDS},
            ],
            "variables": [{"name": "a", "expression": dispatch_a("object")}],
            "validations": [_approved(config)],
        },
    )
