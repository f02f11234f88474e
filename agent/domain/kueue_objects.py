"""Kueue's objects as the API's operations read them: dispatch's AdmissionChecks among those listed (their
names, the Active ones), the Workloads a TrainJob controls, and whether Kueue would admit a Workload past
dispatch's check (``unchecked``). Pure; Start, Hold, Status, List and Preflight use them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from agent.domain.workload import condition_true, owner_trainjob
from contract.keys import ADMISSION_CHECK_CONTROLLER
from contract.objects import dig


def our_checks(admission_checks: Iterable[Mapping[str, Any]]) -> list[str]:
    """Names of the AdmissionChecks served by dispatch's controller."""
    return sorted(
        str(dig(c, "metadata", "name"))
        for c in admission_checks
        if dig(c, "spec", "controllerName") == ADMISSION_CHECK_CONTROLLER
    )


def active(admission_checks: Iterable[Mapping[str, Any]], names: Iterable[str]) -> list[str]:
    named = set(names)
    return [
        str(dig(c, "metadata", "name"))
        for c in admission_checks
        if dig(c, "metadata", "name") in named and condition_true(c, "Active")
    ]


def controlled_workloads(workloads: Iterable[Mapping[str, Any]], uid: str) -> list[Mapping[str, Any]]:
    """The Workloads (among those read) whose controller ownerReference is the TrainJob ``uid``: kind
    TrainJob, apiVersion trainer.kubeflow.org/…, ``controller: true``, as Kueue creates it for the TrainJob.
    A Workload that merely carries the job-uid label, or refers to the TrainJob without being controlled by
    it, is not the TrainJob's."""
    return [w for w in workloads if (owner := owner_trainjob(w)) is not None and owner[1] == uid]


UNCHECKED: Final = (
    "its pods request no resources, so Kueue assigns it no flavor and would admit it without dispatch's "
    "AdmissionCheck (a check applies only to the flavors a Workload is assigned): the readmission gate would "
    "not hold; give the runtime's containers resource requests"
)


def unchecked(workload: Mapping[str, Any] | None) -> str | None:
    """Why Kueue would admit this Workload past dispatch's AdmissionCheck, or None.

    Kueue (pkg/workload AdmissionChecksForWorkload) keeps only the checks whose flavors intersect the flavors
    of the admission, and a pod set that requests nothing is assigned none. So a Workload none of whose
    containers requests (or limits, which default requests) anything is admitted with no check at all.
    """
    if workload is None:
        return None
    for pod_set in dig(workload, "spec", "podSets") or []:
        pod_spec = dig(pod_set, "template", "spec") or {}
        for key in ("containers", "initContainers"):
            for container in pod_spec.get(key) or []:
                resources = container.get("resources") if isinstance(container, Mapping) else None
                if isinstance(resources, Mapping) and (resources.get("requests") or resources.get("limits")):
                    return None
    return UNCHECKED
