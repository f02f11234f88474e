"""What a Pod and its Node say, read without trusting their shape: the evidence node-loss classification's
verdicts rest on (agent/domain/node_loss.py decides; docs/nodeloss.md has the table).

A pure module: plain objects as the Kubernetes API returns them (JSON, camelCase), no I/O. Its readers answer
None, or "cannot tell", where an object cannot be read, and quote what they read bounded in length.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from contract.keys import NODE_LOSS_TAINTS, TAINT_OUT_OF_SERVICE
from contract.objects import dig

# Kubernetes' own vocabulary (not the spec's): DisruptionTarget reasons and who writes them.
DISRUPTION_TARGET: Final = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER: Final = "PreemptionByScheduler"
DELETION_BY_TAINT_MANAGER: Final = "DeletionByTaintManager"
EVICTION_BY_EVICTION_API: Final = "EvictionByEvictionAPI"
DELETION_BY_POD_GC: Final = "DeletionByPodGC"
TERMINATION_BY_KUBELET: Final = "TerminationByKubelet"
_TERMINAL_PHASES: Final = ("Succeeded", "Failed")
_CONTAINER_STATUS_LISTS: Final = ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses")
# PodGC patches the phase to Failed through kube-controller-manager's client, so its managedFields entry
# names this manager. Only negative evidence: a phase owned by it was not written by a kubelet. We do not
# require "kubelet", because kwok (tier B) and other kubelet stand-ins write status under their own names.
_NON_KUBELET_PHASE_WRITERS: Final = frozenset({"kube-controller-manager"})
# Keys only a client model's to_dict() has; the API's JSON is camelCase.
_SNAKE_CASE_MARKERS: Final = (
    ("metadata", ("creation_timestamp", "deletion_timestamp", "managed_fields", "resource_version")),
    ("spec", ("node_name",)),
    ("status", ("container_statuses", "node_info")),
)
# Evidence strings quote values from the object; bound them so junk cannot make a message huge.
_QUOTE_MAX: Final = 120


# -- Reading the pod ------------------------------------------------------------------------------


def kubelet_terminal(pod: Mapping[str, Any]) -> tuple[bool, str]:
    """(True, why) when the kubelet wrote a terminal phase; else (False, why a terminal phase is not trusted).

    Others write ``Failed`` too: PodGC on orphans (with ``DeletionByPodGC``), on terminating pods of an
    out-of-service node (no condition), and on unscheduled terminating pods; anyone with status rights.
    Their mark is the frozen container statuses: the kubelet never reports a container running in a
    terminal pod.
    """
    phase = dig(pod, "status", "phase")
    if phase not in _TERMINAL_PHASES:
        return False, ""
    if mappings(dig(pod, "status", "conditions")) is None:
        return False, "not the kubelet's for certain: status.conditions cannot be read"
    if disruption_reason(pod) == DELETION_BY_POD_GC:
        return False, f"written by PodGC, not by the kubelet (DisruptionTarget {DELETION_BY_POD_GC})"
    running: list[str] = []
    for key in _CONTAINER_STATUS_LISTS:
        statuses = mappings(dig(pod, "status", key))
        if statuses is None:
            return False, f"not the kubelet's for certain: status.{key} cannot be read"
        for cs in statuses:
            state = cs.get("state")
            if state is None:
                continue
            if not isinstance(state, Mapping):
                return False, f"not the kubelet's for certain: a container state in status.{key} cannot be read"
            if "running" in state:
                running.append(quote(cs.get("name")))
    if running:
        return False, f"not written by the kubelet: containers {', '.join(running)} still reported running"
    writers = _phase_writers(pod)
    if writers is None:
        return False, "not the kubelet's for certain: metadata.managedFields cannot be read"
    foreign = sorted(writers & _NON_KUBELET_PHASE_WRITERS)
    if foreign:
        return False, f"written by {', '.join(foreign)}, not by the kubelet"
    return True, "its processes are gone"


def _phase_writers(pod: Mapping[str, Any]) -> set[str] | None:
    """Managers owning ``status.phase`` per managedFields; empty when not recorded; None when unreadable."""
    entries = mappings(dig(pod, "metadata", "managedFields"))
    if entries is None:
        return None
    owners: set[str] = set()
    for entry in entries:
        if dig(entry, "fieldsV1", "f:status", "f:phase") is not None:
            manager = entry.get("manager")
            owners.add(manager if isinstance(manager, str) else "?")
    return owners


def _disruption_target(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The DisruptionTarget condition when its status is True (a cleared one says nothing)."""
    conditions = mappings(dig(pod, "status", "conditions")) or []
    for c in conditions:
        if c.get("type") == DISRUPTION_TARGET and c.get("status") == "True":
            return c
    return None


def disruption_reason(pod: Mapping[str, Any]) -> str | None:
    c = _disruption_target(pod)
    reason = c.get("reason") if c is not None else None
    return reason if isinstance(reason, str) else None


def deletion_timestamp(pod: Mapping[str, Any]) -> str | None:
    # Only a real timestamp counts: "being deleted" enables a False verdict, so junk must not.
    value = dig(pod, "metadata", "deletionTimestamp")
    return value if isinstance(value, str) and value else None


def pod_evidence(pod: Mapping[str, Any], deleting: str | None, *, gone: bool, final: bool) -> str:
    parts = [f"phase {quote(dig(pod, 'status', 'phase'))}"]
    status_reason = dig(pod, "status", "reason")
    if isinstance(status_reason, str) and status_reason:
        parts.append(f"reason {quote(status_reason)}")
    dt = _disruption_target(pod)
    if dt is not None:
        parts.append(f"DisruptionTarget {quote(dt.get('reason'))}")
    if deleting:
        grace = dig(pod, "metadata", "deletionGracePeriodSeconds")
        parts.append(
            f"deletionTimestamp {quote(deleting)}" + (f" (grace {quote(grace)}s)" if grace is not None else "")
        )
    if gone:
        parts.append("gone from the API (" + ("final state" if final else "last view") + ")")
    return ", ".join(parts)


def has_pod_spec(pod: Mapping[str, Any]) -> bool:
    """Every Pod the API returns has ``spec.containers``; its presence says the object is whole."""
    return isinstance(dig(pod, "spec", "containers"), list)


def snake_cased(obj: Mapping[str, Any]) -> bool:
    """A client model's ``to_dict()`` (kubernetes_asyncio) rather than the API's JSON.

    Read as JSON, such a pod has no ``nodeName``, ``deletionTimestamp`` or ``containerStatuses``: it would
    look unbound, or ended with nothing running. Refusing it is safer than misreading it.
    """
    for section, keys in _SNAKE_CASE_MARKERS:
        part = obj.get(section)
        if isinstance(part, Mapping) and any(k in part for k in keys):
            return True
    return False


def pod_name(pod: object) -> str:
    value = dig(pod, "metadata", "name")
    return value if isinstance(value, str) and value else "<unnamed>"


# -- Reading the node -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Taint:
    key: str
    effect: object
    time_added: object

    def describe(self) -> str:
        added = f" added {quote(self.time_added)}" if self.time_added else ""
        return f"{self.key}:{quote(self.effect)}{added}"


@dataclass(frozen=True)
class NodeHealth:
    ready: object  # the Ready condition's status, None when the node has none
    ready_detail: str
    loss_taints: tuple[Taint, ...]
    out_of_service: Taint | None
    no_execute: tuple[Taint, ...]

    @property
    def kubelet_silent(self) -> bool:
        """The kubelet is not posting status: Ready is Unknown (the node controller's mark) or missing.

        Narrower than PodGC's "not Ready": a node posting Ready=False has a live kubelet, which contradicts an
        out-of-service assertion. A shut-down node turns Unknown within node-monitor-grace-period anyway.
        """
        return self.ready in (None, "Unknown")

    @property
    def lost(self) -> bool:
        return self.ready != "True" or bool(self.loss_taints)

    def describe(self) -> str:
        parts = [self.ready_detail]
        if self.loss_taints:
            parts.append("taints " + ", ".join(t.describe() for t in self.loss_taints))
        return "(" + "; ".join(parts) + ")"

    def no_execute_description(self) -> str:
        if not self.no_execute:
            return "no NoExecute taint remains on the node"
        return "NoExecute taints " + ", ".join(t.describe() for t in self.no_execute)


def node_health(node: Mapping[str, Any], site_keys: frozenset[str]) -> NodeHealth | None:
    conditions = mappings(dig(node, "status", "conditions"))
    taints = mappings(dig(node, "spec", "taints"))
    if conditions is None or taints is None:
        return None
    readies = [c for c in conditions if c.get("type") == "Ready"]
    if len(readies) > 1:
        return None  # two Ready conditions: cannot tell which one the node controller means
    ready = readies[0] if readies else None
    if ready is None:
        status, detail = None, "no Ready condition"
    else:
        status = ready.get("status")
        if not isinstance(status, str):
            return None
        detail = f"Ready={quote(status)}"
        extras = [f"reason {quote(ready.get('reason'))}"] if ready.get("reason") else []
        # Only a silent kubelet's heartbeat is frozen; a live one's moves, and would make the gate's
        # message (and the Event it triggers) change on every status post.
        if status == "Unknown" and ready.get("lastHeartbeatTime"):
            extras.append(f"last heartbeat {quote(ready.get('lastHeartbeatTime'))}")
        if ready.get("lastTransitionTime"):
            extras.append(f"since {quote(ready.get('lastTransitionTime'))}")
        if extras:
            detail += " (" + ", ".join(extras) + ")"
    parsed: list[Taint] = []
    for t in taints:
        key = t.get("key")
        if not isinstance(key, str):
            return None
        parsed.append(Taint(key, t.get("effect"), t.get("timeAdded")))
    loss_keys = site_keys.union(NODE_LOSS_TAINTS)
    return NodeHealth(
        ready=status,
        ready_detail=detail,
        loss_taints=tuple(t for t in parsed if t.key in loss_keys),
        # PodGC matches the key with any effect (TaintKeyExists); so do we.
        out_of_service=next((t for t in parsed if t.key == TAINT_OUT_OF_SERVICE), None),
        no_execute=tuple(t for t in parsed if t.effect == "NoExecute"),
    )


# -- Small readers --------------------------------------------------------------------------------


def mappings(value: object) -> list[Mapping[str, Any]] | None:
    """A list of objects: [] when absent, None when it is not a list of objects (cannot tell)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        return None
    return value


def quote(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= _QUOTE_MAX else text[: _QUOTE_MAX - 3] + "..."
