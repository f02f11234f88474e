"""The webhook configurations, built in Python so that the chart and the sandbox render the same ones.

Only objects that are, or claim to be, dispatch's are sent (``matchConditions``): an unrelated TrainJob
never reaches the webhook and never waits on it, even when the webhook is down. Validation fails closed
for dispatch's objects; kube-system and dispatch's own namespace are excluded so that the webhook can
never lock out the components that would fix it. Where the admission policies are installed, the writes they
judge are not sent at all (``policies``): only the creates no policy can judge.
"""

from __future__ import annotations

import base64
from typing import Any, Final

from contract import scope, upstream
from contract.keys import (
    ANNOTATION_ADMISSION_GATED_BY,
    GATE,
    KIND_TRAINJOB,
    LABEL_QUEUE_NAME,
    NAME,
    PREFIX,
    RUNTIME_PATCH_MANAGER,
    TRAINJOB_NAME_PREFIX,
)

TIMEOUT_SECONDS: Final = 5
PATHS: Final = {"validate": "/validate", "mutate": "/mutate"}


def _has_dispatch_key(o: str) -> str:
    return (
        f"(has({o}.metadata.labels) && {o}.metadata.labels.exists(k, k.startsWith('{PREFIX}'))) || "
        f"(has({o}.metadata.annotations) && ({o}.metadata.annotations.exists(k, k.startsWith('{PREFIX}')) || "
        f"('{ANNOTATION_ADMISSION_GATED_BY}' in {o}.metadata.annotations && "
        f"{o}.metadata.annotations['{ANNOTATION_ADMISSION_GATED_BY}'].contains('{GATE}'))))"
    )


def _has_dispatch_name(o: str) -> str:
    # A superset of dj-<ULID>-s<N>; the webhook decides exactly.
    return f"(has({o}.metadata.name) && {o}.metadata.name.startsWith('dj-'))"


def _has_dispatch_patch(o: str) -> str:
    return (
        f"(has({o}.spec) && has({o}.spec.runtimePatches) && "
        f"{o}.spec.runtimePatches.exists(p, has(p.manager) && p.manager == '{RUNTIME_PATCH_MANAGER}'))"
    )


def _owned_by_dispatch(o: str) -> str:
    # A Workload or JobSet whose owner is a TrainJob named like dispatch's (a superset; the webhook decides).
    return (
        f"(has({o}.metadata.ownerReferences) && {o}.metadata.ownerReferences.exists(r, "
        f"r.kind == '{KIND_TRAINJOB}' && r.name.startsWith('{TRAINJOB_NAME_PREFIX}')))"
    )


def claims(resource: str) -> str:
    """CEL, true when the object or its old version is, or claims to be, dispatch's."""
    parts = {
        "trainjobs": (_has_dispatch_key, _has_dispatch_name, _has_dispatch_patch),
        "trainingruntimes": (_has_dispatch_key, _has_dispatch_name),
        "workloads": (_has_dispatch_key, _owned_by_dispatch),
        "jobsets": (_has_dispatch_name, _owned_by_dispatch),
    }[resource]

    def one(o: str) -> str:
        return f"({o} != null && ({' || '.join(p(o) for p in parts)}))"

    return f"{one('object')} || {one('oldObject')}"


def opened() -> str:
    """CEL, true unless the request is a CREATE of a TrainJob already closed as webhook.admission.mutate
    would close it: Kueue mode (the queue-name label set) gated by dispatch's gate, or plain mode with
    ``suspend: true``. Any other operation (an UPDATE that unsuspends) is left to the other conditions.

    The mutating call is skipped only when this is false, i.e. only when mutate() has nothing to do; every
    test of it errs towards calling (CEL's ``trim`` strips no more than Python's ``strip``, so a gate CEL
    finds, Python finds too)."""
    queue = f"object.metadata.?labels[?'{LABEL_QUEUE_NAME}'].orValue('') != ''"
    gated = (
        f"object.metadata.?annotations[?'{ANNOTATION_ADMISSION_GATED_BY}'].orValue('')"
        f".split(',').exists(g, g.trim() == '{GATE}')"
    )
    suspended = "object.?spec.?suspend.orValue(false) == true"
    return f"request.operation != 'CREATE' || object == null || !(({queue}) ? ({gated}) : ({suspended}))"


def gvr(resource: upstream.Resource, subresource: str = "") -> tuple[str, str, str]:
    """(group, version, resource or resource/subresource), as a webhook's or a policy's rules name a resource."""
    return resource.group, resource.version, f"{resource.plural}/{subresource}" if subresource else resource.plural


ROUTED: Final = (upstream.TRAINJOBS, upstream.TRAINING_RUNTIMES, upstream.WORKLOADS, upstream.JOBSETS)
"""The resources the validating webhooks are sent (``VALIDATED``), in their order."""

# What each validating webhook is sent: (resource or subresource, operations). Status writes are routed only
# where they decide identity: dispatch's check on its Workloads, J on its JobSets; the JobSet's CREATE (created
# suspended) and DELETE too.
VALIDATED: Final = {
    "trainjobs": [("trainjobs", ["CREATE", "UPDATE"])],
    "trainingruntimes": [("trainingruntimes", ["CREATE", "UPDATE"])],
    "workloads": [("workloads", ["CREATE", "UPDATE"]), ("workloads/status", ["UPDATE"])],
    "jobsets": [("jobsets", ["CREATE", "DELETE"]), ("jobsets/status", ["UPDATE"])],
}

UNSUSPENDS: Final = (
    "request.operation == 'CREATE' || "
    "(has(oldObject.spec) && has(oldObject.spec.suspend) && oldObject.spec.suspend == true && "
    "!(has(object.spec) && has(object.spec.suspend) && object.spec.suspend == true))"
)
"""CEL: a create, or an update that unsuspends: the writes the mutating webhook acts on."""


def namespace_selector(own_namespace: str) -> dict[str, Any]:
    """The namespaces the webhooks and the policies apply to: all but kube-system and ``own_namespace``. The chart
    renders the site's scope in its place (charts/generate.py, contract/scope.py)."""
    return scope.namespace_selector(own_namespace)


def _client_config(
    path: str, *, namespace: str, service: str | None, port: int, url: str | None, ca_bundle: bytes | None
) -> dict[str, Any]:
    config: dict[str, Any] = (
        {"url": url.rstrip("/") + path}
        if url is not None
        else {"service": {"namespace": namespace, "name": service or NAME, "path": path, "port": port}}
    )
    if ca_bundle is not None:
        config["caBundle"] = base64.b64encode(ca_bundle).decode()
    return config


def _webhook(
    kind: str,
    group: str,
    version: str,
    resource: str,
    routes: list[tuple[str, list[str]]],
    timeout: int,
    *,
    also: tuple[dict[str, str], ...] = (),
    name: str | None = None,
    failure_policy: str = "Fail",
    **client: Any,
) -> dict[str, Any]:
    return {
        "name": f"{name or kind}.{resource}.dispatch.phpboyscout.uk",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "timeoutSeconds": timeout,
        "failurePolicy": failure_policy,
        "matchPolicy": "Equivalent",
        "namespaceSelector": namespace_selector(client["namespace"]),
        "rules": [
            {
                "apiGroups": [group],
                "apiVersions": [version],
                "resources": [routed],
                "operations": operations,
                "scope": "Namespaced",
            }
            for routed, operations in routes
        ],
        "matchConditions": [{"name": "dispatch-objects", "expression": claims(resource)}, *also],
        "clientConfig": _client_config(PATHS[kind], **client),
    }


FAIL_CLOSED_CREATES: Final = ("trainjobs", "trainingruntimes")
"""Whose creates no policy can judge: a TrainJob's rules read its runtime copy, a runtime copy's its source."""


def _split(
    resource: str, routes: list[tuple[str, list[str]]]
) -> tuple[list[tuple[str, list[str]]], list[tuple[str, list[str]]]]:
    """(the writes only the webhook judges, the writes the policies judge too) of a webhook's routes."""
    if resource not in FAIL_CLOSED_CREATES:
        return [], routes
    creates = [(r, ["CREATE"]) for r, ops in routes if "CREATE" in ops]
    others = [(r, [o for o in ops if o != "CREATE"]) for r, ops in routes]
    return creates, [(r, ops) for r, ops in others if ops]


MIRRORED: Final = "validate-mirrored"
"""The validating webhooks of writes the admission policies judge too: rendered only without the policies."""
RECORD_START: Final = "record-start"
"""The mutating webhook recording A at an unsuspend: rendered only where no MutatingAdmissionPolicy records it."""


def _mutating(
    client: dict[str, Any], timeout_seconds: int, *, policies: bool, mutating_policy: bool
) -> list[dict[str, Any]]:
    """The mutating webhooks: the closing of a TrainJob created open, and the record of A at an unsuspend where
    no MutatingAdmissionPolicy writes it."""
    trainjobs = gvr(upstream.TRAINJOBS)
    unsuspends = {"name": "creates-or-unsuspends", "expression": UNSUSPENDS}
    # Nothing to mutate in a TrainJob created closed (as Start creates them): the API server then does not
    # call the webhook for it at all (one HTTPS round trip less per create; docs/performance.md).
    created_open = {"name": "created-open", "expression": opened()}
    mutating = [
        {
            **_webhook(
                "mutate", *trainjobs, [("trainjobs", ["CREATE"])], timeout_seconds, also=(created_open,), **client
            ),
            "reinvocationPolicy": "Never",
        },
    ]
    if not mutating_policy:
        # The record of A at an unsuspend, where the MutatingAdmissionPolicy dispatch-k8s-record-start does not
        # write it in-process (an API server older than v1.36, or no policies).
        mutating.append(
            {
                **_webhook(
                    "mutate",
                    *trainjobs,
                    [("trainjobs", ["UPDATE"])],
                    timeout_seconds,
                    also=(unsuspends,),
                    name=RECORD_START,
                    failure_policy="Ignore" if policies else "Fail",
                    **client,
                ),
                "reinvocationPolicy": "Never",
            }
        )
    return mutating


def webhook_configurations(
    *,
    namespace: str,
    service: str | None = NAME,
    port: int = 443,
    url: str | None = None,
    ca_bundle: bytes | None = None,
    name: str = NAME,
    timeout_seconds: int = TIMEOUT_SECONDS,
    policies: bool = False,
    mutating_policy: bool = False,
) -> list[dict[str, Any]]:
    """The ValidatingWebhookConfiguration and MutatingWebhookConfiguration.

    Reach the webhook through the Service ``namespace/service:port`` (the chart) or a ``url`` (the
    sandbox and the tests, with the server on loopback). ``ca_bundle`` is left out of what the chart
    renders: the certificate controller injects it, so a ``helm upgrade`` never blanks it.

    The creates of TrainJobs and runtime copies (``validate.*``) and the closing of a TrainJob created open
    (``mutate.trainjobs``) are always sent, failing closed: their rules read another object, which no policy
    can. ``policies``: the admission policies (webhook/policies.py) are installed, and judge every other routed
    write in-process, so the webhook is not called for those at all (``validate-mirrored.*`` is left out: a
    call the API server may skip when it fails adds no guarantee, only its latency). ``mutating_policy``: the
    MutatingAdmissionPolicy records A at an unsuspend too, so ``record-start.trainjobs`` is left out; without
    it, the webhook records A, failing open onto the unsuspend policy, which then refuses the unrecorded
    unsuspend. Without the policies every route is sent and fails closed.
    """
    if mutating_policy and not policies:
        raise ValueError("the MutatingAdmissionPolicy is rendered only with the admission policies")
    client = {"namespace": namespace, "service": service, "port": port, "url": url, "ca_bundle": ca_bundle}
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "webhook"}
    if not 1 <= timeout_seconds <= 30:
        raise ValueError(f"timeoutSeconds must be 1 to 30 (the API server's bounds), not {timeout_seconds}")
    validating = []
    for g, v, r in (gvr(resource) for resource in ROUTED):
        creates, others = _split(r, VALIDATED[r])
        if creates:
            validating.append(_webhook("validate", g, v, r, creates, timeout_seconds, **client))
        if others and not policies:
            validating.append(_webhook("validate", g, v, r, others, timeout_seconds, name=MIRRORED, **client))
    mutating = _mutating(client, timeout_seconds, policies=policies, mutating_policy=mutating_policy)
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name, "labels": labels},
            "webhooks": validating,
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name, "labels": labels},
            "webhooks": mutating,
        },
    ]
