"""dispatch's pod finalizer: the evidence a deleted pod leaves until its processes are proven gone.

The readmission gate is stateless: it LISTs a TrainJob's pods afresh each time. A pod removed from the API
while its node is silent (a person's force delete; the pod garbage collector after a lost Node object was
deleted) would simply be missing from the next LIST, and the gate would approve the next execution while
the old processes may still run. So every trainer pod carries ``dispatch.phpboyscout.uk/may-still-run``
(contract/keys.py POD_FINALIZER, put on the pod template by dispatch's runtime patch; the Job controller
copies a template's finalizers onto the pods it creates). A pod being deleted keeps its object, with a
``deletionTimestamp``, until the agent removes the finalizer, and the agent removes it only when the
node-loss classification (agent/domain/node_loss.py) says the pod may no longer run: the kubelet wrote a terminal
phase, the pod was never bound, or its node is out of service with a silent kubelet. A pod whose node is
gone keeps its finalizer, so it stays listed, and the gate stays Pending naming it.

Only dispatch may remove it: a ValidatingAdmissionPolicy refuses everyone else (webhook/policies.py).
When the agent is down nothing removes it: deleted pods stay Terminating (and a namespace being deleted
waits), which is the safe side; the agent removes it from every pod that qualifies when it is back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agent.domain.node_loss import classify
from contract.admission import preconditions
from contract.errors import ContractError
from contract.keys import POD_FINALIZER
from contract.objects import dig, pointer


def finalizers(pod: object) -> list[Any]:
    value = dig(pod, "metadata", "finalizers")
    return value if isinstance(value, list) else []


def carries(pod: object) -> bool:
    return POD_FINALIZER in finalizers(pod)


def release_ops(
    pod: Mapping[str, Any], node: Mapping[str, Any] | None, node_loss_taints: Iterable[str] = ()
) -> list[dict[str, Any]] | None:
    """The JSON Patch that removes dispatch's finalizer from ``pod`` (as read), or None while its processes
    may still run (or it carries no finalizer of ours). ``node`` is the Node it is bound to, as read now
    (None when absent). Preconditioned on the pod's uid, its resourceVersion, and the finalizer's place."""
    if not carries(pod):
        return None
    if classify(pod, node, tuple(node_loss_taints)).may_still_run:
        return None
    try:
        guard = preconditions(pod)
    except ContractError:
        return None
    index = finalizers(pod).index(POD_FINALIZER)
    path = pointer("metadata", "finalizers", index)
    return [*guard, {"op": "test", "path": path, "value": POD_FINALIZER}, {"op": "remove", "path": path}]
