"""Record-start: in every write that unsuspends a dispatch TrainJob, A is raised when due and recorded as
``admission-started``. The mutating webhook's ``record_start_patch`` and the MutatingAdmissionPolicy
``dispatch-k8s-record-start`` decide the same (tests/webhook/test_record_start.py compares them case by case).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from contract.admission import admission_started, unsuspend_ops
from contract.errors import ContractError
from contract.identity import R_BOUND
from contract.keys import (
    ANNOTATION_ADMISSION,
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_ADMISSION_STARTED,
    LABEL_QUEUE_NAME,
    RUNTIME_PATCH_MANAGER,
)
from contract.multicluster import ROLE_SINGLE, ROLE_WORKER, Role, records_only
from contract.ownership import is_kueue_mode
from webhook.cel import (
    CANONICAL_COUNT,
    annotation,
    dispatch_entries,
    is_multikueue_copy,
    json_patch,
    json_patch_add,
    q,
    trainjob_mutation,
)
from webhook.configurations import NAME, UNSUSPENDS, claims
from webhook.rules.common import unsuspends

RECORD_START: Final = f"{NAME}-record-start"

_POD_ANNOTATIONS_IN_JOB: Final = ("template", "spec", "template", "metadata", "annotations")
"""Where A's map lives in a replicated job of a runtime-patch entry (contract/admission.py ``admission_path``)."""


def record_start_policy(namespace: str, role: Role = ROLE_SINGLE) -> list[dict[str, Any]]:
    """The MutatingAdmissionPolicy that numbers every execution in the write that starts it: in each write that
    unsuspends a dispatch TrainJob (Kueue's admission, dispatch's Open and Release), in Kueue mode it raises A
    and the floor to max(A, floor) + 1 when A is not above the A the previous execution started with (or is
    below the floor), and it records A as ``admission-started``. In-process, so an execution starts while the
    webhook is down and Kueue's re-admission costs no write of dispatch's; without it (an API server older than
    v1.36) the webhook does the same, and with neither every unsuspend fails closed (the unsuspend policy
    requires A above the record, and the record). The same decision as contract/admission.py ``unsuspend_ops``
    (tests/webhook/test_record_start.py holds the two to each other). The mutation is a JSON Patch: an apply
    configuration costs the API server a typed (server-side apply) conversion of the whole TrainJob at every
    unsuspend. In role worker the start of MultiKueue's copy (its origin label) only records A, never raises it
    (contract/multicluster.py ``records_only``): the manager numbered the dispatch."""
    record, raised = _patches()
    conditions = [
        {"name": "dispatch-objects", "expression": claims("trainjobs")},
        {"name": "unsuspends", "expression": UNSUSPENDS},
    ]
    mutation = (
        f"!variables.readable || (variables.due && variables.highest + 1 >= {R_BOUND})"
        f" ? [] : variables.due ? {raised} : {q(ANNOTATION_ADMISSION)} in variables.pod && "
        f"{annotation('object', ANNOTATION_ADMISSION_STARTED)} != variables.next ? ({record}) : []"
    )
    return trainjob_mutation(
        RECORD_START,
        namespace,
        "UPDATE",
        conditions,
        {
            "variables": [*_entry_variables(), *_count_variables(role)],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": mutation}}],
        },
    )


def _patches() -> tuple[str, str]:
    """CEL: the JSON Patch that records A, and the one that raises A and the floor and records it."""
    annotations = "'/metadata/annotations'"
    started, floor = (
        f"{annotations} + '/' + jsonpatch.escapeKey({q(k)})"
        for k in (ANNOTATION_ADMISSION_STARTED, ANNOTATION_ADMISSION_FLOOR)
    )
    # A TrainJob without annotations gets the map whole: an add under a missing map fails.
    record = (
        f"object.metadata.?annotations.hasValue() ? [{json_patch('add', started, 'variables.next')}] : "
        f"[{json_patch('add', annotations, '{' + q(ANNOTATION_ADMISSION_STARTED) + ': variables.next}')}]"
    )
    both = f"{{{q(ANNOTATION_ADMISSION_STARTED)}: variables.next, {q(ANNOTATION_ADMISSION_FLOOR)}: variables.next}}"
    raise_record = (
        f"object.metadata.?annotations.hasValue() ? [{json_patch('add', started, 'variables.next')}, "
        f"{json_patch('add', floor, 'variables.next')}] : [{json_patch('add', annotations, both)}]"
    )
    entry = "'/spec/runtimePatches/' + string(variables.index)"
    job = f"{entry} + '/trainingRuntimeSpec/template/spec/replicatedJobs/0'"
    # The raise, located by index: the tests make the patch a no-op, should the entry or the job read not be the one
    # at the index (the API server then leaves the object as it was, and the unsuspend policy refuses it unrecorded).
    tests = [
        json_patch("test", f"{entry} + '/manager'", q(RUNTIME_PATCH_MANAGER)),
        json_patch("test", f"{job} + '/name'", "variables.job"),
    ]
    raised = (
        "["
        + ", ".join(tests)
        + ", "
        + json_patch_add("variables.jobs[0]", job, _POD_ANNOTATIONS_IN_JOB, ANNOTATION_ADMISSION, "variables.next")
        + f"] + ({raise_record})"
    )
    return record, raised


def _entry_variables() -> list[dict[str, str]]:
    """dispatch's entry, its trainer job and its pod annotations, and the TrainJob's annotations old and new."""
    return [
        {"name": "entries", "expression": dispatch_entries("object")},
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
    ]


def _count_variables(role: Role) -> list[dict[str, str]]:
    """A, the floor and the record as numbers, and the decision: whether a raise is due, and the A to record."""
    count = f"matches({q(CANONICAL_COUNT)})"
    return [
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
            + (
                f" && !({is_multikueue_copy('oldObject')} || {is_multikueue_copy('object')})"
                if role == ROLE_WORKER
                else ""
            ),
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
    ]


def record_start_patch(old: Mapping[str, Any] | None, new: Mapping[str, Any], role: Role) -> list[dict[str, Any]]:
    """The mutating webhook's twin of the policy: in any client's write that unsuspends a dispatch TrainJob
    (Kueue's admission, dispatch's Open or Release), in Kueue mode raise A when it was not raised since the last
    start, and record A as ``admission-started`` (contract/admission.py ``unsuspend_ops``); on a MultiKueue
    worker, the start of MultiKueue's copy only records A (contract/multicluster.py ``records_only``). Where the
    API server serves MutatingAdmissionPolicy the chart leaves this to the policy."""
    if not unsuspends(old, new):
        return []
    try:
        before = admission_started(old)
    except ContractError:
        return []  # validation refuses it, naming why
    kueue = is_kueue_mode(old) and is_kueue_mode(new)
    return unsuspend_ops(new, before, kueue=kueue, records_only=records_only(role, old, new))
