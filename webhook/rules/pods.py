"""The pod rules, carried by the owner policy of pods ``dispatch-k8s-owners-pods`` (so one policy matches a pod write,
not two; a policy only, no webhook rule): on a pod carrying dispatch's finalizer, only dispatch removes it, and nobody
else changes its ownerReferences nor its dispatch, JobSet and Job labels and annotations.
"""

from __future__ import annotations

from typing import Any, Final

from contract.keys import POD_FINALIZER, PREFIX
from webhook import owners
from webhook.cel import FieldRules, field_policy, is_principal, metadata_map, q
from webhook.config import Config
from webhook.configurations import NAME

PODS: Final = f"{NAME}-pods"

POD_PROTECTED_PREFIXES: Final = (PREFIX, "jobset.sigs.k8s.io/", "batch.kubernetes.io/")
"""Label and annotation keys of a trainer pod that tie it to its TrainJob, its JobSet and Job, and its
execution (A, J, the completion index): the gate finds and judges the pod by them."""


def _keys_kept(old: str, new: str, prefixes: tuple[str, ...]) -> str:
    guarded = " || ".join(f"k.startsWith({q(p)})" for p in prefixes)
    return (
        f"{new}.all(k, !({guarded}) || (k in {old} && {old}[k] == {new}[k])) && "
        f"{old}.all(k, !({guarded}) || k in {new})"
    )


def pod_rules(config: Config) -> FieldRules:
    """On a pod that carries dispatch's finalizer (a trainer pod of a dispatch TrainJob, agent/domain/pod_finalizer.py),
    only dispatch removes the finalizer, and nobody but dispatch changes what the readmission gate finds and
    judges it by: its ownerReferences (pod -> Job -> JobSet) and its labels and annotations under
    dispatch.phpboyscout.uk/, jobset.sigs.k8s.io/ and batch.kubernetes.io/. A policy, not a webhook rule, so
    it holds while the webhook is down and never waits on it; ``pods/status`` is covered too, since a status
    write may change a pod's labels, annotations and finalizers. Break-glass too: only dispatch is exempt.
    Carried by the owner policy of pods (a pod with the finalizer belongs to a dispatch job)."""
    finalizer = q(POD_FINALIZER)
    return FieldRules(
        PODS,
        owners.PODS,
        (("", "v1", "pods"), ("", "v1", "pods/status")),
        ("UPDATE",),
        (("dispatch-pods", f"oldObject != null && {finalizer} in oldObject.metadata.?finalizers.orValue([])"),),
        (
            {"name": "dispatch", "expression": is_principal(config.dispatch)},
            {"name": "oldLabels", "expression": metadata_map("oldObject", "labels")},
            {"name": "newLabels", "expression": metadata_map("object", "labels")},
            {"name": "oldAnnotations", "expression": metadata_map("oldObject", "annotations")},
            {"name": "newAnnotations", "expression": metadata_map("object", "annotations")},
        ),
        (
            {
                "expression": f"variables.dispatch || {finalizer} in object.metadata.?finalizers.orValue([])",
                "message": f"only dispatch removes its finalizer {POD_FINALIZER}: it does so once the pod's "
                "processes are proven gone (the kubelet's terminal phase, or the node out of service)",
                "reason": "Forbidden",
            },
            {
                "expression": "variables.dispatch || oldObject.metadata.?ownerReferences.orValue([]) == "
                "object.metadata.?ownerReferences.orValue([])",
                "message": "the ownerReferences of a dispatch trainer pod are not changed: they tie it to its Job "
                "and JobSet",
                "reason": "Forbidden",
            },
            {
                "expression": "variables.dispatch || ("
                + _keys_kept("variables.oldLabels", "variables.newLabels", POD_PROTECTED_PREFIXES)
                + ")",
                "message": "the labels of a dispatch trainer pod under "
                + ", ".join(POD_PROTECTED_PREFIXES)
                + " are not changed",
                "reason": "Forbidden",
            },
            {
                "expression": "variables.dispatch || ("
                + _keys_kept("variables.oldAnnotations", "variables.newAnnotations", POD_PROTECTED_PREFIXES)
                + ")",
                "message": "the annotations of a dispatch trainer pod under "
                + ", ".join(POD_PROTECTED_PREFIXES)
                + " are not changed",
                "reason": "Forbidden",
            },
        ),
    )


def pod_policy(config: Config) -> dict[str, Any]:
    """The pod rules (``pod_rules``) as a policy of their own: for tests that bind the field rules alone. The chart
    renders them in the owner policy of pods."""
    return field_policy(pod_rules(config))
