"""Start's checks after creating a TrainJob, as pure functions of what was written and what was read back.

Start reads the TrainJob back and refuses it, stopping the object, if anything it wrote has changed —
labels, annotations, runtimeRef, trainer, activeDeadlineSeconds, its runtime patch, or a managedBy set by
someone else (MultiKueue's only where the queue lists the MultiKueue check: ``multikueue_start_problems``);
and in plain mode spec.suspend, dispatch's own field there (its start gate). It does not compare fields
others own by design, such as spec.suspend in Kueue mode (Kueue's). In Kueue mode the Workload must carry
the gate and list dispatch's AdmissionCheck.

Before anything else, Start makes sure the namespace has the prologue's ConfigMap (contract/prologue.py), which
every trainer pod mounts and runs: it accepts one already there only if it is exactly dispatch's
(``prologue_configmap_refusal``), and creates nothing otherwise.

Before it creates a TrainJob, Start looks for what an earlier TrainJob of the same name left in the API
(``earlier_incarnation``): a new TrainJob starts at A = 0 with a new JobSet (J = 0), so its first execution
would repeat the earlier one's first identity, and could run beside the earlier one's pods.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Final

from contract.admission import admission_count, admission_floor
from contract.gates import gates_of
from contract.keys import GATE
from contract.multicluster import (
    MULTIKUEUE_MANAGED_BY,
    budget_problem,
    listed_multikueue_checks,
    managed_by_multikueue,
    multikueue_checks,
    multikueue_problems,
)
from contract.objects import annotations as annotations_of
from contract.objects import dig, labels
from contract.ownership import dispatch_patch, is_kueue_mode
from contract.prologue import PROLOGUE_CONFIGMAP, configmap_differences
from contract.upstream import TRAINER_GROUP

DEFAULT_MANAGED_BY: Final = "trainer.kubeflow.org/trainjob-controller"
NOT_MANAGED: Final = "Kueue is not managing this TrainJob"


def _entry(obj: object) -> dict[str, Any] | None:
    entry = dispatch_patch(obj)
    if entry is None:
        return None
    entry = copy.deepcopy(dict(entry))
    entry.pop("time", None)  # stamped by Trainer's mutating webhook
    return entry


def _ref(obj: object) -> dict[str, Any]:
    return {"apiGroup": TRAINER_GROUP, **(dig(obj, "spec", "runtimeRef") or {})}


def readback_changes(written: Mapping[str, Any], read: Mapping[str, Any]) -> list[str]:
    """What of the TrainJob as written is not as read back; empty when nothing changed."""
    changes = []
    for where, get in (("label", labels), ("annotation", annotations_of)):
        have = get(read)
        for key, value in get(written).items():
            if have.get(key) != value:
                changes.append(f"{where} {key}: wrote {value!r}, read {have.get(key)!r}")
    for name, read_value, written_value in (
        ("spec.runtimeRef", _ref(read), _ref(written)),
        ("spec.trainer", dig(read, "spec", "trainer"), dig(written, "spec", "trainer")),
        (
            "spec.activeDeadlineSeconds",
            dig(read, "spec", "activeDeadlineSeconds"),
            dig(written, "spec", "activeDeadlineSeconds"),
        ),
        ("dispatch's runtime patch", _entry(read), _entry(written)),
    ):
        if read_value != written_value:
            changes.append(f"{name} is not as written")
    if not is_kueue_mode(written) and dig(read, "spec", "suspend") != dig(written, "spec", "suspend"):
        # Plain mode's start gate is spec.suspend, and it is dispatch's: anything else lets the job run unopened.
        changes.append(
            f"spec.suspend: wrote {dig(written, 'spec', 'suspend')!r}, read {dig(read, 'spec', 'suspend')!r}"
        )
    managed_by = dig(read, "spec", "managedBy")
    # MultiKueue's: accepted here, and then only where the queue lists the MultiKueue check (multikueue_problems).
    if managed_by not in (None, DEFAULT_MANAGED_BY, MULTIKUEUE_MANAGED_BY, dig(written, "spec", "managedBy")):
        changes.append(f"spec.managedBy is {managed_by!r}, set by someone else")
    return changes


def multikueue_start_problems(
    read: Mapping[str, Any],
    found: Mapping[str, Mapping[str, Any] | str | None],
    runtime_spec: Mapping[str, Any],
    *,
    min_dispatches: int,
) -> list[str]:
    """Start's MultiKueue checks of the TrainJob as read back, once its Workload is there: ``managedBy``
    MultiKueue's exactly where the queue's ClusterQueue lists a MultiKueue check (Kueue copies the ClusterQueue's
    checks into the Workload); and, in a MultiKueue queue, the runtime copy (``runtime_spec``) free of what lets J
    pass maxRestarts and affording ``min_dispatches`` dispatches.

    ``found``: every check the Workload lists but dispatch's own, as read fresh (the AdmissionCheck, None when it
    is not there, or why it could not be read), never a list taken earlier: a check that cannot be identified
    could be a MultiKueue check, so Start refuses (fail closed, as the gate holds: agent/domain/decide.py
    ``dispatch_mode``)."""
    managed = managed_by_multikueue(read)
    unknown = [
        f"AdmissionCheck {n}: {'not found' if ac is None else f'cannot be read: {ac}'}"
        for n, ac in sorted(found.items())
        if not isinstance(ac, Mapping)
    ]
    if unknown:
        return [
            f"cannot identify every check of the Workload ({'; '.join(unknown)}), so not whether MultiKueue copies "
            "this TrainJob"
        ]
    listed = sorted(multikueue_checks([ac for ac in found.values() if isinstance(ac, Mapping)]))
    if not listed:
        if managed:
            return [
                f"spec.managedBy is {MULTIKUEUE_MANAGED_BY!r}, but the queue's ClusterQueue lists no MultiKueue check"
            ]
        return []
    if not managed:
        return [
            f"the queue's ClusterQueue lists the MultiKueue check {', '.join(listed)}, but spec.managedBy is not "
            f"{MULTIKUEUE_MANAGED_BY!r}: the gate would never dispatch it"
        ]
    problems = [str(p) for p in multikueue_problems(runtime_spec)]
    if problems:
        return problems
    a = max((c for c in (admission_count(read), admission_floor(read)) if c is not None), default=0)
    refusal = budget_problem(runtime_spec, a, min_dispatches)
    return [refusal] if refusal else []


def multikueue_unproven(
    workload: Mapping[str, Any] | None, multikueue: Collection[str], workers: Sequence[str] = (), *, proven: bool
) -> str | None:
    """Why Preflight cannot prove Kueue mode for a queue whose ClusterQueue lists a MultiKueue check (the probe's
    Workload lists it), or None: not such a queue, or ``proven``, every worker the manager's gate would read for
    it proven (agent/multicluster/worker_proof.py; ``workers``: what Preflight found on each, one line each)."""
    listed = listed_multikueue_checks(workload, multikueue)
    if not listed or proven:
        return None
    found = f"; its workers: {'; '.join(workers)}" if workers else "; it names no worker"
    return (
        f"the queue's ClusterQueue lists the MultiKueue check {', '.join(listed)}: not every worker it may send a "
        'job to is proven (docs/multicluster.md, "Plumbing"), so dispatch jobs must not be queued to it'
        f"{found}"
    )


def workload_problems(workload: Mapping[str, Any] | None, checks: Iterable[str]) -> list[str]:
    """Why Kueue is not managing the TrainJob as dispatch needs: no Workload, no gate, not our check."""
    if workload is None:
        return [f"{NOT_MANAGED}: no Workload appeared"]
    problems = []
    if GATE not in gates_of(workload):
        problems.append(f"{NOT_MANAGED}: its Workload does not carry the gate {GATE}")
    listed = {c.get("name") for c in dig(workload, "status", "admissionChecks") or [] if isinstance(c, Mapping)}
    if not listed & set(checks):
        problems.append(f"{NOT_MANAGED}: its Workload does not list dispatch's AdmissionCheck")
    return problems


def earlier_incarnation(
    namespace: str,
    name: str,
    *,
    jobset: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    runtime_copy: Mapping[str, Any] | None,
) -> tuple[str, ...]:
    """What an earlier TrainJob of ``name`` left behind, as orphan references; empty when nothing is left.

    Called only while no TrainJob of the name exists, so every JobSet or pod of the name is an earlier
    incarnation's (or a stranger's claiming the name: refused alike). Workloads are not read: a Workload runs
    nothing itself, Kueue ties it to its TrainJob's uid (a new TrainJob gets a Workload of its own), and what
    could repeat an identity or run beside the new job is a pod, or a JobSet that makes pods. A runtime copy is
    the earlier one's when it carries an owner reference or is being deleted; one with neither is what a Start
    interrupted before it created the TrainJob leaves, and is taken up (its labels are judged when it is)."""
    found = []
    if jobset is not None:
        found.append(f"{namespace}/jobset/{dig(jobset, 'metadata', 'name')}")
    found += [f"{namespace}/pod/{dig(p, 'metadata', 'name')}" for p in pods]
    if runtime_copy is not None and (
        dig(runtime_copy, "metadata", "ownerReferences") or dig(runtime_copy, "metadata", "deletionTimestamp")
    ):
        found.append(f"{namespace}/trainingruntime/{dig(runtime_copy, 'metadata', 'name')}")
    return tuple(found)


def earlier_incarnation_message(namespace: str, name: str, left: Sequence[str]) -> str:
    """Start's refusal while an earlier TrainJob of the name left something behind."""
    return (
        f"TrainJob {namespace}/{name} does not exist, but an earlier TrainJob of that name left {len(left)} "
        "object(s) behind (orphans): a new one would start again at A = 0 with a new JobSet, repeating the "
        "earlier one's identity, and could run beside its pods; nothing was written. Start a name again only "
        "if no TrainJob of it was ever opened, once they are gone; a new run of a job is a new submission N"
    )


def prologue_configmap_refusal(namespace: str, read: Mapping[str, Any] | None) -> str | None:
    """Why Start may not use the prologue's ConfigMap as read in ``namespace``; None when it is exactly the one
    Start creates. Its pods would run whatever text it holds, so nothing less than an exact match is taken."""
    where = f"ConfigMap {namespace}/{PROLOGUE_CONFIGMAP}"
    if read is None:
        return f"{where} was created and deleted concurrently; retry"
    problems = configmap_differences(read)
    if not problems:
        return None
    return (
        f"{where} exists and is not the prologue this version of dispatch runs: " + "; ".join(problems) + ". Every "
        "trainer pod of the namespace would run what it holds, so nothing was written; delete it (dispatch "
        "recreates it) or ask the cluster admin who created it"
    )
