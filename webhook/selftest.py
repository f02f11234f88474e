"""``dispatch-webhook selftest``: does the API server reach the webhook? (the chart's ``helm test``)

Readiness proves that a pod reaches the API server. Every review travels the other way: from the API server,
through the Service, to a ready pod, over TLS verified with the injected caBundle. This sends what any
stranger might: a server-side dry run (nothing is stored) of a TrainJob that carries a dispatch name, as a
principal that is not dispatch. The webhook must deny it, and the denial must be dispatch-k8s's own; any other
answer names what is wrong. cert-manager's and Gatekeeper's post-install checks work the same way.

With the chart's admission policies on, the owner policy of TrainJobs refuses the probe first (the API server
evaluates the policies before any webhook): that refusal is dispatch's too, and passes. The webhook itself is
then proven by what only it judges, a dispatch TrainJob's create: Preflight's probe.

``judge`` (pure) reads one answer; ``run`` repeats the dry run until dispatch's denial or the deadline, since
a fresh install may need a few seconds for the Service's endpoints and the caBundle.
"""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass
from typing import Any, Final

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from ulid import ULID

from contract import upstream
from contract.names import build_name
from serving.kube import describe_api_error
from webhook.admission import DENIAL_PREFIX
from webhook.owners import BELONGS

TRAINJOBS: Final = upstream.TRAINJOBS
DEFAULT_RUNTIME: Final = "torch-distributed"
"""A ClusterTrainingRuntime Trainer ships: Trainer's own webhook, called beside ours, then accepts the probe."""


class Result(enum.Enum):
    PASSED = "passed"
    RETRY = "retry"
    """Not (yet) dispatch's denial, but something a fresh install outgrows: ask again until the deadline."""
    FAILED = "failed"


@dataclass(frozen=True)
class Verdict:
    result: Result
    message: str


def probe(namespace: str, *, runtime: str = DEFAULT_RUNTIME, job_id: str | None = None) -> dict[str, Any]:
    """A TrainJob that is dispatch's by its name alone (no key under dispatch.phpboyscout.uk/, so no field
    policy refuses it; the owner policy of TrainJobs does, when the chart renders it)."""
    return {
        "apiVersion": TRAINJOBS.api_version,
        "kind": "TrainJob",
        "metadata": {"name": build_name(job_id or str(ULID()), 1), "namespace": namespace},
        "spec": {"runtimeRef": {"name": runtime}},
    }


_UNREACHABLE: Final = (
    ("x509", "the API server does not trust the webhook's certificate: the caBundle is not (yet) injected "
             "into the webhook configurations, or the certificate is not for the Service's name"),
    ("certificate", "the API server does not trust the webhook's certificate: the caBundle is not (yet) "
                    "injected into the webhook configurations"),
    ("no endpoints", "the webhook's Service has no ready pod"),
    ("connection refused", "nothing listens on the webhook's port behind the Service"),
    ("deadline exceeded", "the webhook did not answer within the configuration's timeoutSeconds: "
                          "a NetworkPolicy or firewall between the API server and the pods?"),
    ("timeout", "the webhook did not answer in time: a NetworkPolicy or firewall between the API server "
                "and the pods?"),
    ("not found", "the webhook's Service is missing"),
)  # fmt: skip


def judge(status: int, message: str) -> Verdict:
    """What one answer to the dry run says (``status`` 201 when it was admitted)."""
    if 200 <= status <= 299:
        return Verdict(
            Result.RETRY,
            "admitted: the API server did not call dispatch's webhook for a dispatch TrainJob (are the "
            "chart's ValidatingWebhookConfiguration and its matchConditions installed, and is the namespace "
            "one the webhook is called for, not kube-system or the release's own?)",
        )
    if DENIAL_PREFIX in message or BELONGS in message:
        return Verdict(Result.PASSED, message)
    if "failed calling webhook" in message and "dispatch.phpboyscout.uk" in message:
        lowered = message.lower()
        why = next((why for key, why in _UNREACHABLE if key in lowered), "the API server cannot call the webhook")
        return Verdict(Result.RETRY, f"{why}: {message}")
    if status == 404:
        return Verdict(Result.FAILED, f"the TrainJob API is not served (is Kubeflow Trainer installed?): {message}")
    if status == 403 and "cannot create resource" in message:
        return Verdict(Result.FAILED, f"this ServiceAccount may not create TrainJobs here: {message}")
    # Another webhook (Trainer's, say) may answer first: the API server calls the validating webhooks at
    # once and reports the first denial. Ask again; dispatch's is as fast.
    return Verdict(Result.RETRY, f"denied, but not by dispatch-k8s: {message}")


async def attempt(api: client.ApiClient, namespace: str, runtime: str) -> Verdict:
    group, version, plural = TRAINJOBS.group, TRAINJOBS.version, TRAINJOBS.plural
    body = probe(namespace, runtime=runtime)
    try:
        await client.CustomObjectsApi(api).create_namespaced_custom_object(
            group, version, namespace, plural, body, dry_run="All", _request_timeout=35
        )
    except ApiException as exc:
        return judge(exc.status or 0, describe_api_error(exc))
    except (TimeoutError, OSError) as exc:
        return Verdict(Result.RETRY, f"the API server did not answer: {type(exc).__name__}: {exc}")
    return judge(201, "")


async def run(
    api: client.ApiClient, namespace: str, *, within: float, runtime: str = DEFAULT_RUNTIME, pause: float = 1.0
) -> tuple[Verdict, int]:
    """Dry runs until one is dispatch's denial, one fails for good, or ``within`` seconds pass; the last
    verdict and the number of attempts."""
    deadline = time.monotonic() + within
    attempts = 0
    while True:
        attempts += 1
        verdict = await attempt(api, namespace, runtime)
        if verdict.result is not Result.RETRY or time.monotonic() + pause >= deadline:
            return verdict, attempts
        await asyncio.sleep(pause)
