"""A dispatch job's writes as dispatch's API makes them, for the tests, the benchmarks and the sandbox that act
as a supervisor without the agent's HTTPS API in between: Start's creates, and the JSON Patches of Open, Hold and
Release (agent/domain/operations.py plans them), each preconditioned on a fresh read."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent.api.service.failures import RUNTIME_NOT_SEEN
from agent.domain.operations import Target, Write
from contract.keys import FIELD_MANAGER, LABEL_WORKLOAD_JOB_UID
from contract.prologue import prologue_configmap
from contract.trainjob import Submission, build_runtime_copy, build_trainjob
from harness.kube_http import ApiError, KubeHttp
from harness.sandbox.site import KUEUE_V, TRAINER_V

JSON_PATCH = "application/json-patch+json"

_PROLOGUE_MADE: set[tuple[str, str]] = set()
"""(API server, namespace) where create_as_start made sure of the prologue's ConfigMap."""


_PROLOGUE_MADE: set[tuple[str, str]] = set()
"""(API server, namespace) where create_as_start made sure of the prologue's ConfigMap."""


def create_as_start(admin: KubeHttp, sub: Submission, runtime: Mapping[str, Any]) -> dict[str, Any]:
    """The runtime copy, then the TrainJob, as Start creates them: Kueue's and Trainer's webhooks read the copy
    from their informer caches and may refuse the TrainJob for a moment (agent/api/service/base.py rides this out
    the same way, on the same messages). The prologue's ConfigMap first, as Start makes sure of it (a real
    kubelet does not start a trainer pod without it): once per namespace and API server in this process, so
    that a benchmark's jobs cost the API server what their own objects cost (Start reads it each time)."""
    return create_copy_and_trainjob(admin, sub, runtime)[1]


def create_copy_and_trainjob(
    admin: KubeHttp, sub: Submission, runtime: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``create_as_start``, returning the runtime copy as created too."""
    if (admin.credentials.server, sub.namespace) not in _PROLOGUE_MADE:
        try:
            admin.create(prologue_configmap(sub.namespace))
        except ApiError as exc:
            if exc.status != 409:  # made for an earlier job of the namespace
                raise
        _PROLOGUE_MADE.add((admin.credentials.server, sub.namespace))
    copy = admin.create(build_runtime_copy(sub, runtime))
    return copy, create_once_runtime_seen(admin, build_trainjob(sub, runtime["spec"]))


def create_once_runtime_seen(admin: KubeHttp, trainjob: Mapping[str, Any], seconds: float = 30) -> dict[str, Any]:
    """The TrainJob created, asked again while Trainer's webhook refuses it for a runtime its cache has not seen
    yet (a runtime copy just created), as Start does."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return admin.create(dict(trainjob))
        except ApiError as exc:
            message = str(exc)
            not_seen = exc.status == 403 and "untime" in message and any(p in message for p in RUNTIME_NOT_SEEN)
            if not not_seen or time.monotonic() > deadline:
                raise
        time.sleep(0.25)


def workload_of(admin: KubeHttp, namespace: str, owner_uid: str) -> dict[str, Any]:
    items = admin.list(KUEUE_V, "Workload", namespace, label_selector=f"{LABEL_WORKLOAD_JOB_UID}={owner_uid}")
    assert len(items) == 1, f"{len(items)} Workloads for the TrainJob {owner_uid}"
    return items[0]


Plan = Callable[[dict[str, Any], dict[str, Any]], Sequence[Write]]


def write_as_the_api(admin: KubeHttp, trainjob: Mapping[str, Any], plan: Plan) -> None:
    """Open, Hold or Release (``plan``: the writes still due, from the TrainJob and its Workload as read) as the
    supervisor API makes them: each write preconditioned on a fresh read, read again after a conflict (Kueue
    writes too)."""
    meta = trainjob["metadata"]
    for _ in range(20):
        read = admin.get(TRAINER_V, "TrainJob", meta["name"], meta["namespace"])
        wl = workload_of(admin, meta["namespace"], meta["uid"])
        writes = plan(read, wl)
        if not writes:
            return
        target = read if writes[0].target is Target.TRAINJOB else wl
        try:
            admin.request("PATCH", admin.object_path(target), writes[0].patch, query={"fieldManager": FIELD_MANAGER},
                          content_type=JSON_PATCH)  # fmt: skip
        except ApiError as exc:
            if exc.status != 409:
                raise
            time.sleep(0.2)
    raise AssertionError("the writes kept conflicting")
