"""Node-loss classification: may a pod still run, and why.

A pure module: plain objects as the Kubernetes API returns them, no I/O. The readmission gate asks it
"may a pod of the previous execution still run?" before it raises A and admits the next execution, and the
supervisor's Status API asks whether an execution has ``Ceased`` (all its processes certainly gone).

The safety rule, applied everywhere: **a pod may still run unless the API proves otherwise.** Only three
facts prove it, and only they ever give ``may_still_run=False``:

* the kubelet reported a terminal phase (``Succeeded``/``Failed``): the kubelet never restarts a
  terminal pod, and since 1.27 it writes the terminal phase before it confirms a deletion;
* the pod was never bound to a node and can no longer be (the API server refuses to bind a pod that is
  being deleted, and a pod removed unbound never ran);
* the pod's node carries ``node.kubernetes.io/out-of-service`` while the node's kubelet is not posting
  status, and the pod is being deleted or gone: the operator's assertion that the node is shut down, the
  only one the API has.

Everything else (``unreachable``/``not-ready``/the site's taints, a missing Node, an eviction, a force
delete) leaves ``may_still_run=True``. See docs/nodeloss.md for the table and the upstream facts.

**How a gone pod is passed.** The caller passes what it still knows: the last object it saw (best: the
object of the watch ``DELETED`` event, which is the pod's state at removal: pass ``final=True``), or an
older view (``final=False``), or only a name (``pod=None``). A stateless caller that never saw a gone pod
cannot pass it at all: that is the caller's gap, not this module's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from contract.keys import NODE_LOSS_TAINTS, TAINT_OUT_OF_SERVICE
from contract.objects import dig

# Kubernetes' own vocabulary (not the spec's): DisruptionTarget reasons and who writes them.
_DISRUPTION_TARGET: Final = "DisruptionTarget"
_PREEMPTION_BY_SCHEDULER: Final = "PreemptionByScheduler"
_DELETION_BY_TAINT_MANAGER: Final = "DeletionByTaintManager"
_EVICTION_BY_EVICTION_API: Final = "EvictionByEvictionAPI"
_DELETION_BY_POD_GC: Final = "DeletionByPodGC"
_TERMINATION_BY_KUBELET: Final = "TerminationByKubelet"
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
_SNAKE_CASE_REASON: Final = (
    "the {kind} has snake_case keys (a client model's to_dict()?), not the API's JSON: pass the JSON object "
    "(for kubernetes_asyncio, _preload_content=False or ApiClient.sanitize_for_serialization)"
)
# Evidence strings quote values from the object; bound them so junk cannot make a message huge.
_QUOTE_MAX: Final = 120


class Verdict(StrEnum):
    """What became of a pod. ``may_still_run`` is fixed by the verdict, so the two can never disagree."""

    RUNNING = "Running"
    """The pod exists, is not terminal, and nothing says its node is lost: it runs, or may start."""
    ENDED = "Ended"
    """Terminal phase (Succeeded or Failed) written by the kubelet: its processes are gone."""
    NOT_SCHEDULED = "NotScheduled"
    """Never bound to a node, and can no longer be: it never ran."""
    NODE_LOST = "NodeLost"
    """Its node is lost (unreachable, not ready, a site node-loss taint, or the Node is gone): may still run."""
    CEASED = "Ceased"
    """Its node is out of service by the operator's assertion and the pod is deleted or being deleted."""
    TAINT_EVICTED = "TaintEvicted"
    """Evicted by a NoExecute taint that is not node loss; the node is healthy; runs until the kubelet stops it."""
    PREEMPTED = "Preempted"
    """Preempted by the scheduler; runs until the kubelet stops it."""
    EVICTED = "Evicted"
    """Evicted through the Eviction API (drain, descheduler, ...); runs until the kubelet stops it."""
    DELETED = "Deleted"
    """Gone from the API, and nothing proves its processes ended (a force delete leaves no trace)."""
    UNKNOWN = "Unknown"
    """The objects cannot be read: treated as may still run."""

    @property
    def may_still_run(self) -> bool:
        """The readmission gate's question: may a process of this pod still run, now or later?"""
        return self not in _CERTAINLY_GONE


_CERTAINLY_GONE: Final = frozenset({Verdict.ENDED, Verdict.NOT_SCHEDULED, Verdict.CEASED})


@dataclass(frozen=True)
class Classification:
    """One pod's verdict and the evidence it rests on."""

    pod: str
    verdict: Verdict
    reason: str
    node: str | None = None

    @property
    def may_still_run(self) -> bool:
        return self.verdict.may_still_run


@dataclass(frozen=True)
class PodRecord:
    """What the caller knows of one pod of the previous execution.

    * a live pod: ``PodRecord(obj=pod)`` (or pass the dict itself to :func:`assess`);
    * a pod gone from the API: ``gone=True`` with the last object seen, ``final=True`` when that object is
      the one the watch ``DELETED`` event carried (its state at removal), ``final=False`` for an older view;
    * only a name: ``PodRecord(name=..., gone=True)``.

    ``name`` defaults to ``obj``'s ``metadata.name``.
    """

    name: str | None = None
    obj: Mapping[str, Any] | None = None
    gone: bool = False
    final: bool = False


@dataclass(frozen=True)
class Assessment:
    """The gate's answer over a set of pods, each with its verdict, in the order given."""

    classifications: tuple[Classification, ...] = field(default_factory=tuple)

    @property
    def may_still_run(self) -> list[tuple[str, Classification]]:
        """The pods that may still run, with why: the gate stays Pending while this is not empty."""
        return [(c.pod, c) for c in self.classifications if c.may_still_run]

    @property
    def ceased(self) -> bool:
        """Every process of these pods is certainly gone (``Ceased`` for the Status API).

        True for an empty set: the answer covers only the pods the caller passed.
        """
        return not any(c.may_still_run for c in self.classifications)

    def message(self, max_chars: int = 32768) -> str:
        """One line per pod that may still run, cut to ``max_chars`` (Kueue's limit on a check message)."""
        blocking = self.may_still_run
        if not blocking:
            return ""
        head = f"{len(blocking)} pod(s) of the previous execution may still run:"
        lines = [head]
        used = len(head)
        for i, (name, c) in enumerate(blocking):
            line = f"{name}: {c.verdict.value}: {c.reason}"
            rest = len(blocking) - i
            tail = f"... and {rest} more"
            # Keep room for the tail so a cut message still says how many were left out.
            if used + 1 + len(line) + (0 if rest == 1 else 1 + len(tail)) > max_chars:
                if used + 1 + len(tail) <= max_chars:
                    lines.append(tail)
                break
            lines.append(line)
            used += 1 + len(line)
        return "\n".join(lines)[:max_chars]


def classify(
    pod: Mapping[str, Any] | None,
    node: Mapping[str, Any] | None,
    node_loss_taints: Iterable[str] = (),
    *,
    gone: bool = False,
    final: bool = False,
    name: str | None = None,
) -> Classification:
    """Classify one pod.

    ``pod``: the Pod as read; when ``gone``, the last object seen (``final=True`` when it is the watch
    ``DELETED`` event's object); None when only the name is known (implies ``gone``).
    ``node``: the Node named by the pod's ``spec.nodeName`` as read now, or None when that Node object is
    absent. ``node_loss_taints``: the site's ``nodeLossTaints`` keys, added to unreachable/not-ready/
    out-of-service. ``name``: the pod's name when ``pod`` is None (else read from ``pod``).

    Never raises: whatever cannot be read is ``UNKNOWN``, which may still run.
    """
    label = name if isinstance(name, str) and name else "<unnamed>"
    try:
        label = name if isinstance(name, str) and name else _pod_name(pod)
        return _classify(pod, node, _site_keys(node_loss_taints), gone=gone or pod is None, final=final, name=label)
    except Exception as exc:  # a safety gate must answer, and the safe answer is "may still run"
        return Classification(label, Verdict.UNKNOWN, f"could not be classified ({type(exc).__name__}): {_q(exc)}")


def classify_record(
    record: PodRecord | Mapping[str, Any],
    nodes: Mapping[str, Mapping[str, Any]],
    node_loss_taints: Iterable[str] = (),
) -> Classification:
    """Classify a :class:`PodRecord` (or a live Pod dict), finding its node in ``nodes`` by name.

    ``nodes`` maps a node name to the Node as read; a name it lacks is a Node that is absent.
    """
    try:
        if isinstance(record, PodRecord):
            pod, gone, final, name = record.obj, record.gone, record.final, record.name
        else:
            pod, gone, final, name = record, False, False, None
        node_name = dig(pod, "spec", "nodeName")
        node = nodes.get(node_name) if isinstance(node_name, str) and node_name else None
        return classify(pod, node, node_loss_taints, gone=gone, final=final, name=name)
    except Exception as exc:  # same rule as classify: never raise, answer "may still run"
        return Classification("<unnamed>", Verdict.UNKNOWN, f"could not be classified ({type(exc).__name__})")


def assess(
    pods: Iterable[PodRecord | Mapping[str, Any]],
    nodes: Mapping[str, Mapping[str, Any]],
    node_loss_taints: Iterable[str] = (),
) -> Assessment:
    """The readmission gate's question over the previous execution's pods: which may still run, and why.

    ``pods``: one entry per pod (per pod UID), live or gone, as :class:`PodRecord` or a live Pod dict.
    ``nodes``: node name to Node; absent names are absent Nodes. The caller chooses the set (which pods
    belong to the previous execution); this function only judges each one.
    """
    keys = tuple(_site_keys(node_loss_taints))
    return Assessment(tuple(classify_record(p, nodes, keys) for p in pods))


# -- The decision ---------------------------------------------------------------------------------


def _classify(
    pod: Mapping[str, Any] | None, node: object, site_keys: frozenset[str], *, gone: bool, final: bool, name: str
) -> Classification:
    if pod is None:
        # The node argument cannot be trusted to be this pod's: nothing says where the pod ran.
        return Classification(
            name, Verdict.DELETED, "gone from the API and only its name is known: nothing proves its processes ended"
        )
    if not isinstance(pod, Mapping):
        return Classification(name, Verdict.UNKNOWN, f"the pod record is not an object: {_q(pod)}")
    if _snake_cased(pod):
        return Classification(name, Verdict.UNKNOWN, _SNAKE_CASE_REASON.format(kind="pod"))
    node_name = dig(pod, "spec", "nodeName")
    if node_name is not None and not isinstance(node_name, str):
        return Classification(name, Verdict.UNKNOWN, f"spec.nodeName cannot be read: {_q(node_name)}")
    bound = node_name or None
    deleting = _deletion_timestamp(pod)
    evidence = _pod_evidence(pod, deleting, gone=gone, final=final)

    # A terminal phase the kubelet wrote is permanent and needs nothing from the node.
    ended, distrust = _kubelet_terminal(pod)
    if ended:
        return Classification(name, Verdict.ENDED, f"{evidence}; written by the kubelet: {distrust}", bound)
    if distrust:
        evidence = f"{evidence} ({distrust})"

    if bound is None:
        return _unbound(name, evidence, deleting=deleting, gone=gone, final=final, pod_spec=_has_pod_spec(pod))

    if node is None:
        return Classification(
            name,
            Verdict.NODE_LOST,
            f"{evidence}; its Node {bound} is absent (deleted): PodGC's orphan path force-deletes such pods, "
            "and deleting a Node says nothing about the machine's processes",
            bound,
        )
    if not isinstance(node, Mapping):
        return Classification(name, Verdict.UNKNOWN, f"{evidence}; the Node record is not an object", bound)
    if _snake_cased(node):
        return Classification(name, Verdict.UNKNOWN, f"{evidence}; " + _SNAKE_CASE_REASON.format(kind="Node"), bound)
    node_label = dig(node, "metadata", "name")
    if node_label != bound:
        return Classification(
            name,
            Verdict.UNKNOWN,
            f"{evidence}; the Node passed is {_q(node_label)}, the pod is bound to {bound}",
            bound,
        )
    health = _node_health(node, site_keys)
    if health is None:
        return Classification(
            name, Verdict.UNKNOWN, f"{evidence}; Node {bound}'s conditions or taints cannot be read", bound
        )
    where = f"node {bound} {health.describe()}"

    if health.out_of_service is not None and health.kubelet_silent:
        if gone or deleting:
            return Classification(
                name,
                Verdict.CEASED,
                f"{evidence}; {where}: the operator asserts the node is shut down, and a pod that is "
                "deleted or being deleted is never started again",
                bound,
            )
        return Classification(
            name,
            Verdict.NODE_LOST,
            f"{evidence}; {where}: the operator asserts the node is shut down, but the pod is not being deleted, "
            "so it stays bound and its kubelet would start it again if the node came back",
            bound,
        )
    if health.lost:
        if health.out_of_service is not None:
            why = (
                f"out-of-service asserts the node is shut down, but its kubelet still posts Ready={_q(health.ready)}, "
                "which contradicts it"
            )
        else:
            why = "its node is lost"
        if gone:
            why += "; removed from the API without a terminal phase from the kubelet (a force delete)"
        return Classification(
            name, Verdict.NODE_LOST, f"{evidence}; {where}: {why}; its processes may still run", bound
        )

    # The node is Ready and carries no node-loss taint.
    if gone:
        return Classification(
            name,
            Verdict.DELETED,
            f"{evidence}; {where}: removed from the API without a terminal phase from the kubelet (a force delete "
            "by a person or a controller); the kubelet stops it when it notices, but nothing proves it has",
            bound,
        )
    reason = _disruption_reason(pod)
    if reason == _PREEMPTION_BY_SCHEDULER:
        verdict, tail = Verdict.PREEMPTED, "preempted by the scheduler; it runs until the kubelet stops it"
    elif reason == _EVICTION_BY_EVICTION_API:
        verdict, tail = Verdict.EVICTED, "evicted through the Eviction API; it runs until the kubelet stops it"
    elif reason == _DELETION_BY_TAINT_MANAGER:
        verdict = Verdict.TAINT_EVICTED
        tail = (
            f"evicted by a NoExecute taint that is not node loss ({health.no_execute_description()}); "
            "it runs until the kubelet stops it"
        )
    elif reason == _TERMINATION_BY_KUBELET:
        verdict, tail = (
            Verdict.RUNNING,
            "the kubelet is terminating it (node pressure, node shutdown or critical-pod preemption); it runs until "
            "its phase is terminal",
        )
    elif reason == _DELETION_BY_POD_GC:
        # PodGC saw the Node absent; one of the same name exists now. The first machine may still run it.
        verdict, tail = Verdict.NODE_LOST, "PodGC found its Node absent, so the machine it ran on is unknown"
    elif deleting:
        verdict, tail = Verdict.RUNNING, "being deleted on a healthy node: it runs until it is gone or terminal"
    else:
        verdict, tail = Verdict.RUNNING, "running or about to"
    return Classification(name, verdict, f"{evidence}; {where}: {tail}", bound)


def _unbound(
    name: str, evidence: str, *, deleting: str | None, gone: bool, final: bool, pod_spec: bool
) -> Classification:
    if not pod_spec and (deleting or gone):
        # "Unbound" is read from an absence (no spec.nodeName); without a real pod spec the absence may be a
        # partial or reshaped object, so it proves nothing.
        return Classification(
            name, Verdict.UNKNOWN, f"{evidence}; no spec.nodeName, but no pod spec either: cannot tell it never ran"
        )
    if deleting:
        # pkg/registry/core/pod/storage: binding a pod with a deletionTimestamp fails, "is being deleted,
        # cannot be assigned to a host". So an unbound pod seen deleting never ran and never will.
        return Classification(
            name, Verdict.NOT_SCHEDULED, f"{evidence}; never bound to a node, and a pod being deleted cannot be bound"
        )
    if gone and final:
        return Classification(
            name, Verdict.NOT_SCHEDULED, f"{evidence}; removed from the API without ever being bound to a node"
        )
    if gone:
        return Classification(
            name,
            Verdict.DELETED,
            f"{evidence}; gone, and last seen unbound in a view older than its removal: it may have been bound and "
            "run since",
        )
    return Classification(name, Verdict.RUNNING, f"{evidence}; not bound to a node yet: it may be scheduled and start")


# -- Reading the pod ------------------------------------------------------------------------------


def _kubelet_terminal(pod: Mapping[str, Any]) -> tuple[bool, str]:
    """(True, why) when the kubelet wrote a terminal phase; else (False, why a terminal phase is not trusted).

    Others write ``Failed`` too: PodGC on orphans (with ``DeletionByPodGC``), on terminating pods of an
    out-of-service node (no condition), and on unscheduled terminating pods; anyone with status rights.
    Their mark is the frozen container statuses: the kubelet never reports a container running in a
    terminal pod.
    """
    phase = dig(pod, "status", "phase")
    if phase not in _TERMINAL_PHASES:
        return False, ""
    if _mappings(dig(pod, "status", "conditions")) is None:
        return False, "not the kubelet's for certain: status.conditions cannot be read"
    if _disruption_reason(pod) == _DELETION_BY_POD_GC:
        return False, f"written by PodGC, not by the kubelet (DisruptionTarget {_DELETION_BY_POD_GC})"
    running: list[str] = []
    for key in _CONTAINER_STATUS_LISTS:
        statuses = _mappings(dig(pod, "status", key))
        if statuses is None:
            return False, f"not the kubelet's for certain: status.{key} cannot be read"
        for cs in statuses:
            state = cs.get("state")
            if state is None:
                continue
            if not isinstance(state, Mapping):
                return False, f"not the kubelet's for certain: a container state in status.{key} cannot be read"
            if "running" in state:
                running.append(_q(cs.get("name")))
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
    entries = _mappings(dig(pod, "metadata", "managedFields"))
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
    conditions = _mappings(dig(pod, "status", "conditions")) or []
    for c in conditions:
        if c.get("type") == _DISRUPTION_TARGET and c.get("status") == "True":
            return c
    return None


def _disruption_reason(pod: Mapping[str, Any]) -> str | None:
    c = _disruption_target(pod)
    reason = c.get("reason") if c is not None else None
    return reason if isinstance(reason, str) else None


def _deletion_timestamp(pod: Mapping[str, Any]) -> str | None:
    # Only a real timestamp counts: "being deleted" enables a False verdict, so junk must not.
    value = dig(pod, "metadata", "deletionTimestamp")
    return value if isinstance(value, str) and value else None


def _pod_evidence(pod: Mapping[str, Any], deleting: str | None, *, gone: bool, final: bool) -> str:
    parts = [f"phase {_q(dig(pod, 'status', 'phase'))}"]
    status_reason = dig(pod, "status", "reason")
    if isinstance(status_reason, str) and status_reason:
        parts.append(f"reason {_q(status_reason)}")
    dt = _disruption_target(pod)
    if dt is not None:
        parts.append(f"DisruptionTarget {_q(dt.get('reason'))}")
    if deleting:
        grace = dig(pod, "metadata", "deletionGracePeriodSeconds")
        parts.append(f"deletionTimestamp {_q(deleting)}" + (f" (grace {_q(grace)}s)" if grace is not None else ""))
    if gone:
        parts.append("gone from the API (" + ("final state" if final else "last view") + ")")
    return ", ".join(parts)


def _has_pod_spec(pod: Mapping[str, Any]) -> bool:
    """Every Pod the API returns has ``spec.containers``; its presence says the object is whole."""
    return isinstance(dig(pod, "spec", "containers"), list)


def _snake_cased(obj: Mapping[str, Any]) -> bool:
    """A client model's ``to_dict()`` (kubernetes_asyncio) rather than the API's JSON.

    Read as JSON, such a pod has no ``nodeName``, ``deletionTimestamp`` or ``containerStatuses``: it would
    look unbound, or ended with nothing running. Refusing it is safer than misreading it.
    """
    for section, keys in _SNAKE_CASE_MARKERS:
        part = obj.get(section)
        if isinstance(part, Mapping) and any(k in part for k in keys):
            return True
    return False


def _pod_name(pod: object) -> str:
    value = dig(pod, "metadata", "name")
    return value if isinstance(value, str) and value else "<unnamed>"


# -- Reading the node -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Taint:
    key: str
    effect: object
    time_added: object

    def describe(self) -> str:
        added = f" added {_q(self.time_added)}" if self.time_added else ""
        return f"{self.key}:{_q(self.effect)}{added}"


@dataclass(frozen=True)
class _NodeHealth:
    ready: object  # the Ready condition's status, None when the node has none
    ready_detail: str
    loss_taints: tuple[_Taint, ...]
    out_of_service: _Taint | None
    no_execute: tuple[_Taint, ...]

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


def _node_health(node: Mapping[str, Any], site_keys: frozenset[str]) -> _NodeHealth | None:
    conditions = _mappings(dig(node, "status", "conditions"))
    taints = _mappings(dig(node, "spec", "taints"))
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
        detail = f"Ready={_q(status)}"
        extras = [f"reason {_q(ready.get('reason'))}"] if ready.get("reason") else []
        # Only a silent kubelet's heartbeat is frozen; a live one's moves, and would make the gate's
        # message (and the Event it triggers) change on every status post.
        if status == "Unknown" and ready.get("lastHeartbeatTime"):
            extras.append(f"last heartbeat {_q(ready.get('lastHeartbeatTime'))}")
        if ready.get("lastTransitionTime"):
            extras.append(f"since {_q(ready.get('lastTransitionTime'))}")
        if extras:
            detail += " (" + ", ".join(extras) + ")"
    parsed: list[_Taint] = []
    for t in taints:
        key = t.get("key")
        if not isinstance(key, str):
            return None
        parsed.append(_Taint(key, t.get("effect"), t.get("timeAdded")))
    loss_keys = site_keys.union(NODE_LOSS_TAINTS)
    return _NodeHealth(
        ready=status,
        ready_detail=detail,
        loss_taints=tuple(t for t in parsed if t.key in loss_keys),
        # PodGC matches the key with any effect (TaintKeyExists); so do we.
        out_of_service=next((t for t in parsed if t.key == TAINT_OUT_OF_SERVICE), None),
        no_execute=tuple(t for t in parsed if t.effect == "NoExecute"),
    )


# -- Small readers --------------------------------------------------------------------------------


def _mappings(value: object) -> list[Mapping[str, Any]] | None:
    """A list of objects: [] when absent, None when it is not a list of objects (cannot tell)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        return None
    return value


def _site_keys(keys: Any) -> frozenset[str]:
    """The site's nodeLossTaints as a set; tolerant of a lone string or junk (they only add may-run evidence)."""
    if isinstance(keys, str):
        return frozenset({keys})
    try:
        return frozenset(k for k in keys if isinstance(k, str))
    except TypeError:
        return frozenset()


def _q(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= _QUOTE_MAX else text[: _QUOTE_MAX - 3] + "..."
