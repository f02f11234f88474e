"""The capabilities report: from a Preflight's findings (``capabilities``), or while no verdict proves the gates
(``unproven``, ``no_verdict``). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from agent.api.models import Capabilities
from agent.api.service.heartbeat import LeaseState
from agent.api.service.probe import MINIMUM_TRAINER, ProbeResult
from contract.keys import ADMISSION_CHECK_CONTROLLER
from contract.upstream import KUEUE_GROUP

OWNERS_NOT_GIVEN: Final = (
    "the owners' principals were not given to the agent (api.owners), so Preflight did not prove them (the chart "
    "gives them)"
)


def mode_name(kueue: bool) -> str:
    return "kueue" if kueue else "plain"


def capabilities(
    *,
    kueue: bool,
    probe: ProbeResult,
    lease: LeaseState,
    versions: Mapping[str, list[str]],
    checks: Sequence[str],
    active_checks: Sequence[str],
    trainer_problems: Sequence[str] = (),
    records_in_process: bool = True,
    owners_proven: bool = True,
    owner_notes: Sequence[str] = (),
) -> Capabilities:
    """The capabilities report, and whether the adapter must be observe-only (and why). ``records_in_process``:
    the API server serves MutatingAdmissionPolicy, so the chart's policy records A at every unsuspend even while
    dispatch's webhook is down; without it the gates hold still (an unrecorded unsuspend is refused), but an outage
    of the webhook then stops every execution, which the start gate's reason says. ``owner_notes``: what the
    proof of the principals took as configured (agent/api/principals.py ``principal_notes``), said in the trainer's
    reason whatever the verdict, never a reason to be observe-only."""
    start_gate, start_reason = _start_gate(probe, records_in_process)
    if not kueue:
        readmission, readmission_reason = False, "not needed: nothing re-admits a plain-mode TrainJob"
        trouble = [] if start_gate else [start_reason]
    else:
        readmission, readmission_reason = _readmission_gate(probe, lease, versions, checks, active_checks)
        trouble = ([] if start_gate else [start_reason]) + ([] if readmission else [readmission_reason])
    trainer = _trainer_problems(probe, trainer_problems)
    trainer_reason = "; ".join(trainer) or (
        "the served TrainJob has spec.runtimePatches and spec.activeDeadlineSeconds"
        + (
            "; a start is numbered in its own write (a dry run on the probe)"
            if kueue
            else "; Open's write (raise A, unsuspend) is accepted (a dry run on the probe)"
        )
        + ("" if owners_proven else f"; {OWNERS_NOT_GIVEN}")
    )
    trainer_reason = "; ".join([trainer_reason, *owner_notes])
    trouble += trainer
    return Capabilities(
        trainer=not trainer,
        trainer_reason=trainer_reason,
        start_gate=start_gate,
        start_gate_reason=start_reason,
        readmission_gate=readmission,
        readmission_gate_reason=readmission_reason,
        lease_renewed=lease.renewed,
        versions=dict(versions),
        observe_only=bool(trouble),
        observe_only_reason="; ".join(trouble) or None,
        mode=mode_name(kueue),
    )


def _start_gate(probe: ProbeResult, records_in_process: bool) -> tuple[bool, str]:
    """Whether the closed probe stayed closed, and why (``capabilities``)."""
    if probe.error is not None:
        return False, f"the probe could not be run: {probe.error}"
    elif probe.leaks:
        return False, "the start gate leaks: " + "; ".join(probe.leaks)
    start_reason = f"the closed probe stayed closed for {probe.seconds:g}s"
    if not records_in_process:
        start_reason += (
            "; the API server serves no MutatingAdmissionPolicy, so dispatch's webhook alone records A at each "
            "unsuspend: while it is down, every unsuspend is refused (fail closed)"
        )
    return True, start_reason


def _readmission_gate(
    probe: ProbeResult,
    lease: LeaseState,
    versions: Mapping[str, list[str]],
    checks: Sequence[str],
    active_checks: Sequence[str],
) -> tuple[bool, str]:
    """Kueue mode: whether the readmission gate is proven, and why (``capabilities``)."""
    problems = []
    if not versions.get(KUEUE_GROUP):
        problems.append(f"the API server serves no {KUEUE_GROUP} API")
    if not checks:
        problems.append(f"no AdmissionCheck has controllerName {ADMISSION_CHECK_CONTROLLER}")
    elif not active_checks:
        problems.append(f"dispatch's AdmissionCheck ({', '.join(checks)}) is not Active")
    problems += list(probe.workload_problems)
    if probe.unapproved is not None:
        problems.append(probe.unapproved)
    if not lease.fresh:
        problems.append(lease.reason)
    if problems:
        return False, "; ".join(problems)
    return True, (
        f"dispatch's AdmissionCheck {', '.join(active_checks)} is Active and listed on the probe's Workload; "
        + lease.reason
    )


def _trainer_problems(probe: ProbeResult, trainer_problems: Sequence[str]) -> list[str]:
    """Why Trainer (with dispatch's admission and the owners) cannot run a dispatch job as dispatch needs."""
    trainer = [*trainer_problems, *probe.owner_problems]
    if probe.unnumbered is not None:
        trainer.append(
            "the probe's start (opened and unsuspended in one update, a dry run) was not numbered by dispatch's "
            f"admission: {probe.unnumbered}; Kueue-mode executions are numbered in the write that starts them "
            f"(install the chart's admission; Trainer's webhook accepts A changing in it from {MINIMUM_TRAINER} on)"
        )
    if probe.open_refused is not None:
        trainer.append(
            "the API server refuses Open's own write on the probe (raise A and unsuspend in one update, a dry run): "
            f"{probe.open_refused}; Trainer's webhook accepts it from {MINIMUM_TRAINER} on (v2.2.0 refuses a runtime "
            "patch change unless the TrainJob stays suspended), so plain-mode Open and Release could not raise A"
        )
    return trainer


def unproven(reason: str, observe_only: bool, kueue: bool | None = None) -> Capabilities:
    """The report of a mode (None: of no mode) while no verdict proves the gates."""
    return Capabilities(
        trainer=False,
        trainer_reason=reason,
        start_gate=False,
        start_gate_reason=reason,
        readmission_gate=False,
        readmission_gate_reason=reason,
        lease_renewed=None,
        versions={},
        observe_only=observe_only,
        observe_only_reason=reason if observe_only else None,
        mode=None if kueue is None else mode_name(kueue),
    )


def no_verdict(require_preflight: bool, kueue: bool | None = None) -> Capabilities:
    """The report while no Preflight of the mode has recorded a verdict in the cluster."""
    if require_preflight:
        return unproven("no Preflight has passed yet", observe_only=True, kueue=kueue)
    return unproven("no Preflight has run yet", observe_only=False, kueue=kueue)
