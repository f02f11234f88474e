"""Start's checks after creating a TrainJob, as pure functions of what was written and what was read back.

Start reads the TrainJob back and refuses it, stopping the object, if anything it wrote has changed —
labels, annotations, runtimeRef, trainer, activeDeadlineSeconds, its runtime patch, or a managedBy set by
someone else; and in plain mode spec.suspend, dispatch's own field there (its start gate). It does not
compare fields others own by design, such as spec.suspend in Kueue mode (Kueue's). In Kueue mode the
Workload must carry the gate and list dispatch's AdmissionCheck.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any, Final

from contract.gates import gates_of
from contract.keys import GATE, TRAINER_GROUP
from contract.objects import annotations, dig, labels
from contract.ownership import dispatch_patch, is_kueue_mode

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
    for where, get in (("label", labels), ("annotation", annotations)):
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
    if managed_by not in (None, DEFAULT_MANAGED_BY, dig(written, "spec", "managedBy")):
        changes.append(f"spec.managedBy is {managed_by!r}, set by someone else")
    return changes


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
