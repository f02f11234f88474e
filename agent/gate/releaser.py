"""The shell around agent/domain/pod_finalizer.py: remove dispatch's pod finalizer as soon as it may go.

Fed by the controller's pod and node watches (on every replica, so a new leader starts warm); only the
leader patches. Each pod carrying the finalizer is looked at when it changes, and again when its Node
changes (an out-of-service taint, a silent kubelet). A look reads the Node afresh, decides with the pure
rule and sends one JSON Patch preconditioned on the pod as the watch delivered it: a 409 (it changed since)
or a 404/422 (gone, or another object) is left to the next event of that pod, which brings it as it is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agent.domain.pod_finalizer import carries, release_ops
from agent.runtime.kube import Kube
from contract.objects import dig
from serving.backoff import Backoff
from serving.client import KubeError
from serving.kube import describe_error

log = logging.getLogger(__name__)

PodKey = tuple[str, str]


def pod_key(pod: Mapping[str, Any]) -> PodKey:
    return str(dig(pod, "metadata", "namespace")), str(dig(pod, "metadata", "name"))


class FinalizerReleaser:
    name = "pod-finalizers"
    """As a runnable of the leader's (agent/gate/runnable.py)."""

    def __init__(self, kube: Kube, node_loss_taints: Sequence[str]) -> None:
        self.kube = kube
        self.node_loss_taints = tuple(node_loss_taints)
        self.pods: dict[PodKey, Mapping[str, Any]] = {}
        """The latest object of each pod that carries the finalizer."""
        self.due: set[PodKey] = set()
        self._wake = asyncio.Event()
        self._listing: set[PodKey] | None = None
        self.released = 0

    # -- fed by the watches (every replica) --------------------------------------------------------

    def list_begin(self) -> None:
        """A (re-)LIST of the pods begins: what it does not bring again is gone."""
        self._listing = set()

    def listed(self, items: Iterable[Mapping[str, Any]]) -> None:
        """One page of that LIST."""
        for pod in items:
            if self._listing is not None:
                self._listing.add(pod_key(pod))
            self.pod_event("ADDED", pod)

    def list_end(self) -> None:
        if self._listing is not None:
            for key in set(self.pods) - self._listing:
                self.pods.pop(key, None)
                self.due.discard(key)
        self._listing = None

    def pod_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        key = pod_key(pod)
        if kind == "DELETED" or not carries(pod):
            self.pods.pop(key, None)
            self.due.discard(key)
            return
        self.pods[key] = pod
        self._mark(key)

    def node_event(self, name: object) -> None:
        for key, pod in self.pods.items():
            if dig(pod, "spec", "nodeName") == name:
                self._mark(key)

    def all_nodes_changed(self) -> None:
        for key in self.pods:
            self._mark(key)

    def _mark(self, key: PodKey) -> None:
        self.due.add(key)
        self._wake.set()

    # -- the leader's loop --------------------------------------------------------------------------

    async def run(self) -> None:
        backoff = Backoff()
        while True:
            await self._wake.wait()
            self._wake.clear()
            failed: list[PodKey] = []
            while self.due:
                key = self.due.pop()
                pod = self.pods.get(key)
                if pod is not None and not await self.release(pod):
                    failed.append(key)
            if failed:
                await asyncio.sleep(backoff.next())
                for key in failed:
                    self._mark(key)
            else:
                backoff.reset()

    async def release(self, pod: Mapping[str, Any]) -> bool:
        """Remove the finalizer if the pod may no longer run; False when that should be tried again."""
        if not could_release(pod):
            return True  # neither terminal nor being deleted: it may run, whatever its node says
        node_name = dig(pod, "spec", "nodeName")
        try:
            node = await self.kube.get_node(node_name) if isinstance(node_name, str) and node_name else None
        except Exception as exc:
            log.warning("pod %s/%s: cannot read Node %s: %s", *pod_key(pod), node_name, describe_error(exc))
            return False
        ops = release_ops(pod, node, self.node_loss_taints)
        if ops is None:
            return True
        try:
            await self.kube.patch_pod(*pod_key(pod), ops)
        except KubeError as exc:
            if exc.status in (404, 409, 422):  # gone, changed or replaced: its next event decides afresh
                return True
            log.warning("pod %s/%s: cannot remove dispatch's finalizer: %s", *pod_key(pod), describe_error(exc))
            return False
        except Exception as exc:
            log.warning("pod %s/%s: cannot remove dispatch's finalizer: %s", *pod_key(pod), describe_error(exc))
            return False
        self.released += 1
        log.info("pod %s/%s: its processes are proven gone; dispatch's finalizer removed", *pod_key(pod))
        return True


def could_release(pod: Mapping[str, Any]) -> bool:
    """Only a pod being deleted or in a terminal phase can be proven gone: any other is skipped without
    reading its Node (a running pod's status changes often)."""
    return bool(dig(pod, "metadata", "deletionTimestamp")) or dig(pod, "status", "phase") in ("Succeeded", "Failed")
