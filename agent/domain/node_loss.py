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
delete) leaves ``may_still_run=True``. See docs/nodeloss.md for the table and the upstream facts. What the Pod and
its Node say, read without trusting their shape, is agent/domain/node_evidence.py.

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

from agent.domain.node_evidence import (
    DELETION_BY_POD_GC,
    DELETION_BY_TAINT_MANAGER,
    EVICTION_BY_EVICTION_API,
    PREEMPTION_BY_SCHEDULER,
    TERMINATION_BY_KUBELET,
    NodeHealth,
    deletion_timestamp,
    disruption_reason,
    has_pod_spec,
    kubelet_terminal,
    node_health,
    pod_evidence,
    pod_name,
    quote,
    snake_cased,
)
from contract.objects import dig

_SNAKE_CASE_REASON: Final = (
    "the {kind} has snake_case keys (a client model's to_dict()?), not the API's JSON: pass the JSON object "
    "(for kubernetes_asyncio, _preload_content=False or ApiClient.sanitize_for_serialization)"
)


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
        label = name if isinstance(name, str) and name else pod_name(pod)
        return _classify(pod, node, _site_keys(node_loss_taints), gone=gone or pod is None, final=final, name=label)
    except Exception as exc:  # a safety gate must answer, and the safe answer is "may still run"
        return Classification(label, Verdict.UNKNOWN, f"could not be classified ({type(exc).__name__}): {quote(exc)}")


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
        return Classification(name, Verdict.UNKNOWN, f"the pod record is not an object: {quote(pod)}")
    if snake_cased(pod):
        return Classification(name, Verdict.UNKNOWN, _SNAKE_CASE_REASON.format(kind="pod"))
    node_name = dig(pod, "spec", "nodeName")
    if node_name is not None and not isinstance(node_name, str):
        return Classification(name, Verdict.UNKNOWN, f"spec.nodeName cannot be read: {quote(node_name)}")
    bound = node_name or None
    deleting = deletion_timestamp(pod)
    evidence = pod_evidence(pod, deleting, gone=gone, final=final)

    # A terminal phase the kubelet wrote is permanent and needs nothing from the node.
    ended, distrust = kubelet_terminal(pod)
    if ended:
        return Classification(name, Verdict.ENDED, f"{evidence}; written by the kubelet: {distrust}", bound)
    if distrust:
        evidence = f"{evidence} ({distrust})"

    if bound is None:
        return _unbound(name, evidence, deleting=deleting, gone=gone, final=final, pod_spec=has_pod_spec(pod))

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
    if snake_cased(node):
        return Classification(name, Verdict.UNKNOWN, f"{evidence}; " + _SNAKE_CASE_REASON.format(kind="Node"), bound)
    node_label = dig(node, "metadata", "name")
    if node_label != bound:
        return Classification(
            name,
            Verdict.UNKNOWN,
            f"{evidence}; the Node passed is {quote(node_label)}, the pod is bound to {bound}",
            bound,
        )
    health = node_health(node, site_keys)
    if health is None:
        return Classification(
            name, Verdict.UNKNOWN, f"{evidence}; Node {bound}'s conditions or taints cannot be read", bound
        )
    where = f"node {bound} {health.describe()}"

    lost = _on_lost_node(name, evidence, where, bound, health, gone=gone, deleting=deleting)
    if lost is not None:
        return lost
    return _on_healthy_node(name, pod, evidence, where, bound, health, gone=gone, deleting=deleting)


def _on_lost_node(
    name: str, evidence: str, where: str, bound: str, health: NodeHealth, *, gone: bool, deleting: str | None
) -> Classification | None:
    """The verdict when the pod's node is out of service or lost; None when it is Ready with no node-loss taint."""
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
                "out-of-service asserts the node is shut down, but its kubelet still posts "
                f"Ready={quote(health.ready)}, which contradicts it"
            )
        else:
            why = "its node is lost"
        if gone:
            why += "; removed from the API without a terminal phase from the kubelet (a force delete)"
        return Classification(
            name, Verdict.NODE_LOST, f"{evidence}; {where}: {why}; its processes may still run", bound
        )
    return None


def _on_healthy_node(
    name: str,
    pod: Mapping[str, Any],
    evidence: str,
    where: str,
    bound: str,
    health: NodeHealth,
    *,
    gone: bool,
    deleting: str | None,
) -> Classification:
    """The verdict on a node that is Ready and carries no node-loss taint: only the pod's own marks tell."""
    if gone:
        return Classification(
            name,
            Verdict.DELETED,
            f"{evidence}; {where}: removed from the API without a terminal phase from the kubelet (a force delete "
            "by a person or a controller); the kubelet stops it when it notices, but nothing proves it has",
            bound,
        )
    reason = disruption_reason(pod)
    if reason == PREEMPTION_BY_SCHEDULER:
        verdict, tail = Verdict.PREEMPTED, "preempted by the scheduler; it runs until the kubelet stops it"
    elif reason == EVICTION_BY_EVICTION_API:
        verdict, tail = Verdict.EVICTED, "evicted through the Eviction API; it runs until the kubelet stops it"
    elif reason == DELETION_BY_TAINT_MANAGER:
        verdict = Verdict.TAINT_EVICTED
        tail = (
            f"evicted by a NoExecute taint that is not node loss ({health.no_execute_description()}); "
            "it runs until the kubelet stops it"
        )
    elif reason == TERMINATION_BY_KUBELET:
        verdict, tail = (
            Verdict.RUNNING,
            "the kubelet is terminating it (node pressure, node shutdown or critical-pod preemption); it runs until "
            "its phase is terminal",
        )
    elif reason == DELETION_BY_POD_GC:
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


# -- Small readers --------------------------------------------------------------------------------


def _site_keys(keys: Any) -> frozenset[str]:
    """The site's nodeLossTaints as a set; tolerant of a lone string or junk (they only add may-run evidence)."""
    if isinstance(keys, str):
        return frozenset({keys})
    try:
        return frozenset(k for k in keys if isinstance(k, str))
    except TypeError:
        return frozenset()
