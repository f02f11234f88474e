"""The parts of the tests' Kueue double (tests/agent/kueue_double.py) that the benchmarks play Kueue with too:
Kueue's write of a Workload's status, and a TrainJob as dispatch's Open leaves it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from contract.keys import ANNOTATION_ADMISSION_GATED_BY, ANNOTATION_OPENED, OPENED_TRUE

KUEUE_V = "kueue.x-k8s.io/v1beta2"


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def opened(tj: dict[str, Any]) -> dict[str, Any]:
    """The TrainJob as dispatch's Open leaves it in Kueue mode (agent/domain/operations.py plan_open)."""
    tj["metadata"]["annotations"].pop(ANNOTATION_ADMISSION_GATED_BY, None)
    tj["metadata"]["annotations"][ANNOTATION_OPENED] = OPENED_TRUE
    return tj


def status_body(
    wl: Mapping[str, Any], checks: Mapping[str, tuple[str, str]], *, reserved: bool, evicted: bool = False
) -> dict[str, Any]:
    """Kueue's status write: every check entry, the conditions, the admission; strict (resourceVersion)."""
    old = {c["name"]: c for c in wl.get("status", {}).get("admissionChecks", [])}
    stamp = now()
    entries = [
        {
            "name": name,
            "state": state,
            "message": message,
            "lastTransitionTime": old[name]["lastTransitionTime"] if old.get(name, {}).get("state") == state else stamp,
        }
        for name, (state, message) in sorted(checks.items())
    ]
    conditions = [
        {
            "type": "QuotaReserved",
            "status": "True" if reserved else "False",
            "reason": "QuotaReserved" if reserved else "Pending",
            "message": "Quota reserved in ClusterQueue cq" if reserved else "waiting for quota",
            "lastTransitionTime": stamp,
        }
    ]
    if evicted:
        conditions.append(
            {
                "type": "Evicted",
                "status": "True",
                "reason": "Preempted",
                "message": "Preempted",
                "lastTransitionTime": stamp,
            }
        )
    status: dict[str, Any] = {"conditions": conditions, "admissionChecks": entries}
    if reserved:
        status["admission"] = {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {"name": "node", "count": 1, "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "1"}}
            ],
        }
    meta = wl["metadata"]
    return {
        "apiVersion": KUEUE_V,
        "kind": "Workload",
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion")},
        "status": status,
    }
