"""Preflight's pure decisions on its probe: the probe TrainJob, what shows it leaked through its gate, what the
dry runs on it show, the owners' objects it must get, the served TrainJob schema, the API groups' versions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agent.domain.workload import condition_true
from contract.admission import admission_count, admission_started
from contract.errors import ContractError
from contract.keys import KIND_TRAINJOB, PROBE_NODE_SELECTOR_KEY, PROBE_NODE_SELECTOR_VALUE
from contract.objects import dig
from contract.ownership import dispatch_patch_index
from contract.trainjob import Submission, build_trainjob
from contract.upstream import JOBSET_GROUP, KUEUE_GROUP, TRAINER_GROUP, TRAINER_VERSION

GROUPS: Final = (TRAINER_GROUP, JOBSET_GROUP, KUEUE_GROUP)
"""The API groups whose versions Preflight reports."""


def api_versions(discovery: Any) -> dict[str, list[str]]:
    """Versions served of the groups dispatch uses, from ``GET /apis``; preferred first."""
    found: dict[str, list[str]] = {group: [] for group in GROUPS}
    for group in (discovery or {}).get("groups") or []:
        name = group.get("name")
        if name in found:
            versions = [v.get("version") for v in group.get("versions") or [] if v.get("version")]
            preferred = dig(group, "preferredVersion", "version")
            found[name] = sorted(versions, key=lambda v: v != preferred)
    return found


@dataclass(frozen=True)
class ProbeResult:
    seconds: float
    leaks: tuple[str, ...] = ()
    workload_problems: tuple[str, ...] = ()
    """Kueue mode: why the probe's Workload shows that Kueue does not manage it as dispatch needs."""
    error: str | None = None
    """The probe could not be run (created, watched) at all."""
    open_refused: str | None = None
    """Plain mode: why the API server refused Open's write on the probe (a dry run), or None."""
    unnumbered: str | None = None
    """Kueue mode: why the probe's start (opened and unsuspended, a dry run) was refused or not numbered by
    dispatch's admission, or None."""
    unapproved: str | None = None
    """Kueue mode: why the probe's start without the gate's approval was not refused (a dry run), or None."""
    owner_problems: tuple[str, ...] = ()
    """Which of the owners that build a job's objects wrote nothing for the probe (``owner_problems``)."""


def probe_trainjob(sub: Submission, runtime_spec: Mapping[str, Any]) -> dict[str, Any]:
    """The probe: a dispatch TrainJob as Start builds it, whose trainer pods could never be scheduled.

    The node selector goes into dispatch's own runtime patch entry (its pod spec), not into the runtime copy,
    whose spec stays the source's verbatim as for every job: the probe is then exactly what Start creates,
    plus a label no node carries. With the image in a reserved TLD, a pod that appears despite the gate
    still runs nothing.
    """
    tj = build_trainjob(sub, runtime_spec)
    i = dispatch_patch_index(tj)
    assert i is not None  # build_trainjob always writes dispatch's entry
    jobs = tj["spec"]["runtimePatches"][i]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod_template = jobs[0]["template"]["spec"]["template"]
    pod_template.setdefault("spec", {})["nodeSelector"] = {PROBE_NODE_SELECTOR_KEY: PROBE_NODE_SELECTOR_VALUE}
    return tj


def probe_leaks(
    trainjob: Mapping[str, Any] | None, workload: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]
) -> list[str]:
    """What shows that the closed probe got through its gate: a pod, an admission, an unsuspended TrainJob."""
    leaks = [f"pod {dig(p, 'metadata', 'name')} appeared" for p in pods]
    if trainjob is not None and dig(trainjob, "spec", "suspend") is not True:
        leaks.append("the probe TrainJob was unsuspended")
    for condition in ("QuotaReserved", "Admitted"):
        if condition_true(workload, condition):
            leaks.append(f"its Workload has {condition}=True")
    return leaks


def unnumbered(answer: Mapping[str, Any]) -> str | None:
    """Why the API server's answer to the probe's start (a dry run) shows that no admission numbered it: A not
    raised above 0, or not recorded as ``admission-started``. None when numbered."""
    try:
        a, started = admission_count(answer), admission_started(answer)
    except ContractError as exc:
        return f"the answer's A is unreadable: {exc}"
    if not a or started != a:
        return (
            f"the start was not numbered (A {a}, recorded {started}): neither dispatch's MutatingAdmissionPolicy "
            "record-start nor its mutating webhook raised A in the write, so Kueue's admissions would all run with "
            "one A"
        )
    return None


PROBE_APPROVAL: Final = "preflight-dry-run"
"""The Workload uid in the approval Preflight's dry-run start carries: the probe is never admitted."""


UNAPPROVED_START: Final = (
    "the probe's start without the readmission gate's approval (no approved-admission of its A) was accepted: "
    "neither the unsuspend policy nor dispatch's webhook refuses it, so a queue that admits without dispatch's "
    "check (a LocalQueue re-pointed or drained) would start a job without the gate's wait. Upgrade the chart's "
    "policies and webhook configurations to this version"
)


def owner_problems(jobset: Mapping[str, Any] | None, job: Mapping[str, Any] | None, seconds: float) -> list[str]:
    """The probe's objects the owners must have made within ``seconds``, though it stays closed: Trainer its JobSet,
    JobSet that JobSet's first Job (suspended). Either missing means that component cannot write a dispatch job's
    objects: most often it runs under a principal the owner policies do not name (docs/install.md, "Who may write a
    dispatch job's objects"), so every dispatch job would stall there."""
    if jobset is None:
        return [
            f"Trainer made no JobSet for the probe within {seconds:g}s: does it run as a principal of the chart's "
            "webhook.owners.trainer? The owner policies refuse a dispatch job's JobSet to anyone else"
        ]
    if job is None:
        return [
            f"JobSet made no Job for the probe's JobSet within {seconds:g}s: does it run as a principal of the chart's "
            "webhook.owners.jobset? The owner policies refuse a dispatch job's Jobs to anyone else"
        ]
    return []


TRAINJOB_KIND: Final = {"group": TRAINER_GROUP, "version": TRAINER_VERSION, "kind": KIND_TRAINJOB}


MINIMUM_TRAINER: Final = "v2.2.1"


def trainjob_schema_problems(document: Mapping[str, Any] | None) -> list[str]:
    """What the served TrainJob schema (OpenAPI v3 of trainer.kubeflow.org/v1alpha1) lacks that dispatch
    writes. ``spec.runtimePatches`` (where A lives) and ``spec.activeDeadlineSeconds`` came with Trainer
    v2.2.0; an API server prunes fields its schema does not know, silently, so an older Trainer would store
    a TrainJob without A."""
    schemas = dig(document, "components", "schemas")
    for schema in schemas.values() if isinstance(schemas, Mapping) else []:
        kinds = schema.get("x-kubernetes-group-version-kind") if isinstance(schema, Mapping) else None
        if isinstance(kinds, list) and TRAINJOB_KIND in kinds:
            spec = dig(schema, "properties", "spec", "properties") or {}
            missing = [f for f in ("runtimePatches", "activeDeadlineSeconds") if f not in spec]
            return [
                f"the served TrainJob has no spec.{f}: Trainer is older than v2.2.0; dispatch needs "
                f"Trainer {MINIMUM_TRAINER} or later"
                for f in missing
            ]
    return [f"the API server serves no TrainJob schema in {TRAINER_GROUP}/{TRAINER_VERSION} (is Trainer installed?)"]
