"""The nemesis: faults of the processes the cluster is made of, injected and healed on a schedule.

`plan()` is pure: a seed, a duration and the worker nodes' names give the schedule, the same every time. A
`Nemesis` plays it in real time against the campaign's cluster (chaos/env.py) and records each action
(RUN/schedule.jsonl: inject, heal, left, skipped). One fault is active at a time, plus those left unhealed on
purpose until the end (only node faults, and never on the last healthy worker); `heal_all()` heals them.

The faults (KINDS): the kubelet or containerd of a worker killed (SIGKILL, then restarted) or hung (SIGSTOP, then
SIGCONT); a worker lost for longer than the node grace period, its pods then force-deleted by an admin or its
Node deleted (pod GC removes the pods); a worker powered off and declared out of service; kube-apiserver, Kueue,
JobSet or the Trainer stopped and started again; etcd paused for a few seconds; dispatch's own processes (the
agent of the Lease holder, the webhook of one replica or of every replica) killed or hung, found by their
containers' host pids on the system node.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contract.keys import LEASE_NAME, NODE_LOSS_TAINTS, TAINT_OUT_OF_SERVICE
from harness.kube_http import ApiError, KubeHttp
from harness.real_node import RealNode
from harness.sandbox.on_node import deployment_pods

if TYPE_CHECKING:
    from chaos.env import Env


# --- the menu -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    name: str
    hold: tuple[float, float]
    """Seconds from injection to heal, drawn uniformly."""
    settle: float
    """Seconds the plan leaves after a heal for the heal itself (a node to be Ready again, a process to answer)."""
    node: bool = False
    """Targets a worker node."""
    leavable: bool = False
    """May be left unhealed until the end."""


_NODE = {"node": True, "leavable": True}
KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("kubelet-kill", (3, 15), 15, **_NODE),
        Kind("kubelet-stop", (5, 25), 10, **_NODE),
        Kind("containerd-kill", (3, 15), 15, **_NODE),
        Kind("containerd-stop", (5, 20), 10, **_NODE),
        Kind("agent-leader-kill", (2, 5), 10),
        Kind("agent-leader-stop", (5, 30), 5),
        Kind("webhook-kill", (2, 5), 10),
        Kind("webhook-stop", (5, 20), 5),
        # The node monitor's grace period is 20 s (harness/tier_b.py): a lost node must stay silent longer.
        Kind("node-lost-force-delete", (35, 60), 15, **_NODE),
        # Pod GC removes the pods of a deleted Node only after 40 s of quarantine, checked every 20 s.
        Kind("node-lost-node-delete", (70, 100), 25, **_NODE),
        Kind("out-of-service", (35, 60), 15, **_NODE),
        # Its SIGTERM drains for up to 10 s, past the hold.
        Kind("apiserver-restart", (1, 8), 15),
        Kind("kueue-restart", (2, 10), 10),
        Kind("jobset-restart", (2, 10), 10),
        Kind("trainer-restart", (2, 10), 10),
        # Longer, and the API server gives up on etcd.
        Kind("etcd-pause", (2, 8), 5),
        Kind("webhook-down", (10, 30), 5),
    )
}
ALL: tuple[str, ...] = tuple(KINDS)

PROCESSES = {
    "apiserver-restart": "kube-apiserver",
    "kueue-restart": "kueue",
    "jobset-restart": "jobset",
    "trainer-restart": "trainer-controller-manager",
    "etcd-pause": "etcd",
}
"""The control plane's processes (names in its ProcessSupervisor: harness/cluster.py, harness/tier_b.py)."""
TARGETS = {
    "agent-leader-kill": "lease-holder",
    "agent-leader-stop": "lease-holder",
    "webhook-kill": "any-replica",
    "webhook-stop": "any-replica",
    "webhook-down": "every-replica",
}
"""What the plan names for dispatch's faults; the pods are found when the fault is injected."""

GAP = (5.0, 25.0)
"""Seconds between one fault's end (its heal and settle) and the next injection."""
HEAL_PROBABILITY = 0.85
FIRST_ROUND_SHARE = 0.9
"""The first round (every kind once) is compressed, holds and gaps towards their minimums, to end by this share
of the duration: every kind is played even in a short campaign, with room for heals that take longer."""


@dataclass(frozen=True)
class Planned:
    at: float
    """Seconds from the start of the run: when to inject."""
    fault: str
    target: str
    """A worker for node faults, the process for the control plane's, TARGETS' word for dispatch's."""
    hold: float
    """Seconds from the injection to the heal (or to "left")."""
    heal: bool
    """False: left unhealed until the end."""
    choice: int
    """A random number for what is chosen when the fault is injected (which replica)."""

    @property
    def kind(self) -> Kind:
        return KINDS[self.fault]


def plan(seed: int, duration: float, workers: Sequence[str], menu: Sequence[str] = ALL,
         kinds: dict[str, Kind] = KINDS) -> list[Planned]:  # fmt: skip
    """The schedule for a seed: the menu shuffled in rounds, one fault after another with random gaps and holds,
    node faults on random healthy workers; each fault healed with HEAL_PROBABILITY when it may be left. ``kinds``:
    the menu's table (the MultiKueue arm's is chaos/mk_nemesis.py's, whose faults each target a worker)."""
    unknown = sorted(set(menu) - set(kinds))
    if unknown:
        raise ValueError(f"unknown faults {unknown}; the menu is {list(kinds)}")
    if not menu:
        return []
    if any(kinds[m].node for m in menu) and not workers:
        raise ValueError("node faults need at least one worker")
    rng = random.Random(seed)
    out: list[Planned] = []
    left_on: set[str] = set()
    t = 0.0
    first = True
    while True:
        order = list(dict.fromkeys(menu))
        rng.shuffle(order)
        draws = [(rng.uniform(*GAP), rng.uniform(*kinds[k].hold)) for k in order]
        if first:
            draws = _fit(order, draws, duration * FIRST_ROUND_SHARE, kinds)
        for kind, (gap, hold) in zip(order, draws, strict=True):
            k = kinds[kind]
            healthy = [w for w in workers if w not in left_on]
            if k.node and not healthy:
                continue
            target = rng.choice(healthy) if k.node else PROCESSES.get(kind, TARGETS.get(kind, ""))
            # Never the last healthy worker: the jobs need somewhere to run.
            heal = not (k.leavable and len(healthy) > 1 and rng.random() > HEAL_PROBABILITY)
            at = t + gap
            end = at + hold + (k.settle if heal else 0.0)
            if end > duration:
                return out
            out.append(Planned(round(at, 3), kind, target, round(hold, 3), heal, rng.randrange(1 << 30)))
            if not heal:
                left_on.add(target)
            t = end
        first = False


def _fit(order: list[str], draws: list[tuple[float, float]], budget: float,
         kinds: dict[str, Kind] = KINDS) -> list[tuple[float, float]]:  # fmt: skip
    """Gaps and holds scaled towards their minimums, by one factor, so the round ends within `budget`."""
    floor = sum(GAP[0] + kinds[k].hold[0] + kinds[k].settle for k in order)
    slack = sum(gap - GAP[0] + hold - kinds[k].hold[0] for k, (gap, hold) in zip(order, draws, strict=True))
    if floor + slack <= budget or slack <= 0:
        return draws
    f = max(0.0, (budget - floor) / slack)
    return [
        (GAP[0] + (gap - GAP[0]) * f, kinds[k].hold[0] + (hold - kinds[k].hold[0]) * f)
        for k, (gap, hold) in zip(order, draws, strict=True)
    ]


# --- running it -------------------------------------------------------------------------------------------


class Skip(Exception):
    """The fault cannot be injected now (no leader, no running container): recorded as skipped."""


MIN_GAP = 3.0
"""Seconds between one fault's end and the next injection when the schedule runs late."""
READY_TIMEOUT = 180.0
API_TIMEOUT = 10.0


class Nemesis:
    def __init__(self, env: Env, planned: list[Planned], record: Callable[..., None]) -> None:
        self.env = env
        self.planned = list(planned)
        self._record = record
        # Its own client: short timeouts, so a call while the API server is down fails fast.
        self.api = KubeHttp(env.cp.admin.credentials, timeout=API_TIMEOUT)
        self._lock = threading.RLock()
        self._active: list[_Fault] = []
        self._counts: Counter[str] = Counter()
        self._stop = threading.Event()
        self._closed = False
        self.faults: dict[str, type[_Fault]] = FAULTS

    # --- the campaign's interface -------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Plays the plan from now; returns at its end or soon after `stop` is set (faults still injected stay
        so: heal_all heals them)."""
        self._stop = stop
        start = time.monotonic()
        ready_at = start
        for p in self.planned:
            if self._sleep_until(max(start + p.at, ready_at)):
                return
            with self._lock:
                if self._closed:
                    return
                fault = self._inject(p)
            if fault is None:
                ready_at = time.monotonic() + MIN_GAP
                continue
            if self._sleep_until(fault.began_at + p.hold):
                return
            with self._lock:
                if self._closed or fault not in self._active:
                    return
                if p.heal:
                    self._heal(fault)
                else:
                    self._emit(fault, "left", "; ".join([*fault.notes, "left unhealed until the end"]))
            ready_at = time.monotonic() + MIN_GAP

    def heal_all(self) -> None:
        """Heals every fault still injected or left, and ends run(); safe to call again."""
        self._closed = True
        with self._lock:
            for fault in reversed(list(self._active)):
                self._heal(fault, at_end=True)

    def counts(self) -> dict[str, int]:
        """Faults injected, by kind."""
        return dict(self._counts)

    # --- one fault ----------------------------------------------------------------------------------

    def _inject(self, p: Planned) -> _Fault | None:
        if p.fault not in self.faults:
            self._record(fault=p.fault, target=p.target, action="skipped", detail="no such fault")
            return None
        fault = self.faults[p.fault](self, p)
        try:
            fault.inject()
        except Exception as e:
            if fault.began_at is None:
                why = str(e) if isinstance(e, Skip) else f"error: {type(e).__name__}: {e}"
                self._record(fault=p.fault, target=fault.target, action="skipped", detail=why[:2000])
                return None
            fault.notes.append(f"the injection failed after it took effect: {type(e).__name__}: {e}")
        return fault

    def _began(self, fault: _Fault, detail: str) -> None:
        fault.began_at = time.monotonic()
        self._active.append(fault)
        self._counts[fault.p.fault] += 1
        self._emit(fault, "inject", detail)

    def _heal(self, fault: _Fault, at_end: bool = False) -> None:
        try:
            detail = fault.heal()
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
            self._emit(fault, "left", f"the heal failed ({why}); tried again at the end" if not at_end
                       else f"the heal at the end failed: {why}")  # fmt: skip
            return
        self._active.remove(fault)
        self._emit(fault, "heal", "; ".join([*fault.notes, detail]))

    def _emit(self, fault: _Fault, action: str, detail: str) -> None:
        self._record(fault=fault.p.fault, target=fault.target, action=action, detail=detail[:2000])

    # --- helpers for the faults --------------------------------------------------------------------

    def _sleep_until(self, deadline: float) -> bool:
        """Sleeps until `deadline` (monotonic); True when stopped meanwhile."""
        while True:
            if self._stop.is_set() or self._closed:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._stop.wait(min(left, 1.0))

    def wait(self, predicate: Callable[[], Any], timeout: float, *, interruptible: bool = False) -> float | None:
        """Seconds until `predicate` held (its errors count as not yet), or None after `timeout` (or once
        stopped, when interruptible: an injection's waits end with the run, a heal's never)."""
        started = time.monotonic()
        while True:
            with contextlib.suppress(Exception):
                if predicate():
                    return time.monotonic() - started
            if time.monotonic() - started >= timeout or (interruptible and (self._stop.is_set() or self._closed)):
                return None
            time.sleep(0.5)

    def api_of(self, node: str) -> KubeHttp:
        """The client of the cluster the node ``node`` belongs to (the MultiKueue arm has several)."""
        return self.api

    def node(self, name: str) -> RealNode:
        for n in [self.env.system, *self.env.workers]:
            if n.name == name:
                return n
        raise Skip(f"no real node {name}")

    def ready(self, name: str) -> bool:
        node = self.api_of(name).get_or_none("v1", "Node", name)
        return _conditions(node or {}).get("Ready") == "True"

    def renewed(self, name: str, since: float) -> bool:
        """The kubelet renewed its node Lease after `since` (epoch seconds): it runs and reaches the API."""
        lease = self.api_of(name).get_or_none("coordination.k8s.io/v1", "Lease", name, "kube-node-lease") or {}
        renew = (lease.get("spec") or {}).get("renewTime")
        return bool(renew) and dt.datetime.fromisoformat(renew).timestamp() >= since

    def node_back(self, node: RealNode) -> str:
        """After a node fault's heal: a kubelet or containerd that died meanwhile is started again, as systemd
        would (a kubelet exits when it starts while containerd is down); then the wait until the kubelet has
        renewed its Lease since now and the node is Ready. A Ready condition alone may be the one from before
        the fault, still fresh."""
        said = []
        for what, process, restart in (
            ("containerd", node.containerd, node.restart_containerd),
            ("kubelet", node.kubelet, node.restart_kubelet),
        ):
            if process is not None and not process.alive():
                restart()
                said.append(f"{what} had exited: started again")
        since = time.time()
        took = self.wait(lambda: self.renewed(node.name, since) and self.healthy(node.name), READY_TIMEOUT)
        said.append(
            f"Lease renewed, Ready and untainted after {took:.1f} s"
            if took is not None
            else f"NOT (Lease renewed, Ready and untainted) after {READY_TIMEOUT:.0f} s"
        )
        return "; ".join(said)

    def healthy(self, name: str) -> bool:
        """Ready, and the node lifecycle controller has taken its node-loss taints off."""
        node = self.api_of(name).get_or_none("v1", "Node", name) or {}
        taints = {t["key"] for t in (node.get("spec") or {}).get("taints") or []}
        return _conditions(node).get("Ready") == "True" and not taints & set(NODE_LOSS_TAINTS)

    def wait_silent(self, name: str, timeout: float = 60) -> float | None:
        """Until the node lifecycle controller says the node's kubelet is silent (Ready no longer True)."""
        return self.wait(lambda: not self.ready(name), timeout, interruptible=True)

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        return self.api.request("GET", "/api/v1/pods", query={"fieldSelector": f"spec.nodeName={node}"})["items"]

    def api_ready(self) -> bool:
        return self.api.request("GET", "/readyz") == "ok"

    def taints(self, node: str, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
        """Rewrites the node's taints, conditionally on its resourceVersion (the node lifecycle controller writes
        them too)."""
        for _ in range(10):
            obj = self.api.get("v1", "Node", node)
            taints = change(list(obj["spec"].get("taints") or []))
            patch = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "spec": {"taints": taints}}
            try:
                self.api.merge_patch("v1", "Node", node, patch)
                return
            except ApiError as e:
                if e.status != 409:
                    raise
        raise RuntimeError(f"could not write the taints of {node}: conflicts")

    def dispatch_pods(self) -> list[dict[str, Any]]:
        return sorted(
            deployment_pods(self.api, self.env.release_namespace, self.env.release), key=lambda p: p["metadata"]["name"]
        )

    def lease_holder(self) -> str:
        lease = self.api.get_or_none("coordination.k8s.io/v1", "Lease", LEASE_NAME, self.env.release_namespace)
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        if not holder:
            raise Skip(f"no holder of Lease {self.env.release_namespace}/{LEASE_NAME}")
        return str(holder)

    def container(self, pod: dict[str, Any], name: str) -> tuple[str, int]:
        """The running container `name` of `pod`: its id and its first process's host pid."""
        pod_name = pod["metadata"]["name"]
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status["name"] == name and "running" in (status.get("state") or {}) and status.get("containerID"):
                cid = status["containerID"].split("://", 1)[-1]
                pid = self.node(pod["spec"]["nodeName"]).container_pids().get(cid)
                if pid is None:
                    raise Skip(f"container {name} of {pod_name} ({cid[:12]}) has no process on its node")
                return cid, pid
        raise Skip(f"container {name} of {pod_name} is not running")

    def container_status(self, pod_name: str, name: str) -> dict[str, Any]:
        pod = self.api.get_or_none("v1", "Pod", pod_name, self.env.release_namespace) or {}
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status["name"] == name:
                return status
        return {}


def _conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}


def container_processes(pid: int) -> list[int]:
    """Every process of the container whose first process is `pid`: those in its pid namespace (just `pid` if
    it shares ours)."""
    try:
        ns = os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return []
    if ns == os.readlink("/proc/self/ns/pid"):
        return [pid]
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(proc / "ns" / "pid") == ns:
                    found.append(int(proc.name))
    return sorted(found)


def _signal(pids: Sequence[int], sig: signal.Signals) -> int:
    """Signals each pid still there; how many were."""
    sent = 0
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
            sent += 1
    return sent


# --- the faults -----------------------------------------------------------------------------------------


class _Fault:
    """inject() does the fault's steps and calls began() once the fault is in effect; heal() undoes it and
    returns the heal's detail. A Skip (or any error) before began() skips the fault."""

    def __init__(self, nem: Nemesis, p: Planned) -> None:
        self.nem = nem
        self.p = p
        self.target = p.target
        self.began_at: float | None = None
        self.notes: list[str] = []

    def began(self, detail: str) -> None:
        self.nem._began(self, detail)

    def inject(self) -> None:
        raise NotImplementedError

    def heal(self) -> str:
        raise NotImplementedError


class _KubeletKill(_Fault):
    def inject(self) -> None:
        node = self.nem.node(self.target)
        pid = node.kubelet.pid if node.kubelet else None
        node.kill_kubelet()
        self.began(f"SIGKILL to the kubelet (pid {pid}); its containers keep running")

    def heal(self) -> str:
        node = self.nem.node(self.target)
        node.restart_kubelet()
        pid = node.kubelet.pid if node.kubelet else None
        return f"kubelet started again (pid {pid}); {self.nem.node_back(node)}"


class _KubeletStop(_Fault):
    def inject(self) -> None:
        self.nem.node(self.target).pause_kubelet()
        self.began("SIGSTOP to the kubelet")

    def heal(self) -> str:
        node = self.nem.node(self.target)
        node.resume_kubelet()
        return f"SIGCONT to the kubelet; {self.nem.node_back(node)}"


class _ContainerdKill(_Fault):
    def inject(self) -> None:
        node = self.nem.node(self.target)
        pid = node.containerd.pid if node.containerd else None
        node.kill_containerd()
        self.began(f"SIGKILL to containerd (pid {pid}); {len(node.container_pids())} containers keep running")

    def heal(self) -> str:
        node = self.nem.node(self.target)
        node.restart_containerd()
        return (
            f"containerd started again (pid {node.containerd.pid if node.containerd else None}), "
            f"{len(node.tasks())} tasks; {self.nem.node_back(node)}"
        )


class _ContainerdStop(_Fault):
    def inject(self) -> None:
        self.nem.node(self.target).pause_containerd()
        self.began("SIGSTOP to containerd")

    def heal(self) -> str:
        node = self.nem.node(self.target)
        node.resume_containerd()
        return f"SIGCONT to containerd; {self.nem.node_back(node)}"


class _NodeLost(_Fault):
    """The kubelet hangs (SIGSTOP) past the node grace period; then what an admin or a controller does about the
    silent node (after())."""

    def inject(self) -> None:
        node = self.nem.node(self.target)
        node.pause_kubelet()
        self.began("SIGSTOP to the kubelet: the node goes silent, its containers keep running")
        silent = self.nem.wait_silent(node.name)
        if silent is None:
            self.notes.append("the node never went NotReady: nothing more done")
            return
        self.notes.append(f"NotReady after {silent:.1f} s")
        self.after(node)

    def after(self, node: RealNode) -> None:
        raise NotImplementedError


class _NodeLostForceDelete(_NodeLost):
    def after(self, node: RealNode) -> None:
        deleted = []
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        for pod in self.nem.pods_on(node.name):
            meta = pod["metadata"]
            try:
                self.nem.api.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", body)
                deleted.append(f"{meta['namespace']}/{meta['name']}")
            except ApiError as e:
                if e.status != 404:
                    raise
        self.notes.append(f"force-deleted (grace 0) {len(deleted)} pod(s): {' '.join(deleted) or '-'}")

    def heal(self) -> str:
        node = self.nem.node(self.target)
        node.resume_kubelet()
        return f"SIGCONT to the kubelet; {self.nem.node_back(node)}"


POD_GC_SECONDS = 60.0
"""How long a heal waits for pod GC to remove a deleted Node's pods before the kubelet comes back."""


class _NodeLostNodeDelete(_NodeLost):
    def after(self, node: RealNode) -> None:
        pods = len(self.nem.pods_on(node.name))
        self.nem.api.delete("v1", "Node", node.name)
        self.notes.append(f"Node deleted, {pods} pod(s) bound to it")

    def heal(self) -> str:
        node = self.nem.node(self.target)
        gone = self.nem.wait(lambda: not self.nem.pods_on(node.name), POD_GC_SECONDS)
        pods = "pods gone" if gone is not None else f"pods still bound after {POD_GC_SECONDS:.0f} s more"
        # A kubelet registers its Node only when it starts: resumed, it goes on failing to find it.
        node.restart_kubelet()
        return f"{pods}; kubelet restarted to register its Node again; {self.nem.node_back(node)}"


OUT_OF_SERVICE = {"key": TAINT_OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute"}


class _OutOfService(_Fault):
    def inject(self) -> None:
        node = self.nem.node(self.target)
        running = len(node.container_pids())
        node.power_off()
        self.began(f"powered off: kubelet stopped, {running} container processes killed, containerd stopped")
        silent = self.nem.wait_silent(node.name)
        self.notes.append(f"NotReady after {silent:.1f} s" if silent is not None else "never NotReady")
        self.nem.taints(node.name, lambda ts: [t for t in ts if t["key"] != TAINT_OUT_OF_SERVICE] + [OUT_OF_SERVICE])
        self.notes.append(f"taint {TAINT_OUT_OF_SERVICE}=nodeshutdown:NoExecute applied")

    def heal(self) -> str:
        node = self.nem.node(self.target)
        started = time.monotonic()
        node.power_on(READY_TIMEOUT)
        on = time.monotonic() - started
        # As the operator does once the node is back (the taint keeps it out of service until then).
        self.nem.taints(node.name, lambda ts: [t for t in ts if t["key"] != TAINT_OUT_OF_SERVICE])
        return f"powered on: Ready after {on:.1f} s; taint {TAINT_OUT_OF_SERVICE} removed; {self.nem.node_back(node)}"


class _ProcessRestart(_Fault):
    """A component stops (SIGTERM, or SIGKILL for an odd choice) and stays down until healed."""

    def inject(self) -> None:
        sup = self.nem.env.cp.supervisor
        sig = signal.SIGKILL if self.p.choice % 2 else signal.SIGTERM
        pid = sup.get(self.target).pid
        self.began(f"{sig.name} to {self.target} (pid {pid}); down until healed")
        started = time.monotonic()
        # SIGTERM: kube-apiserver drains for a while (SIGKILL after the supervisor's grace period).
        sup.kill(self.target, sig)
        self.notes.append(f"exited {time.monotonic() - started:.1f} s after the {sig.name}")

    def heal(self) -> str:
        process = self.nem.env.cp.supervisor.restart(self.target)
        return f"started again (pid {process.pid}); {self.answering()}"

    def answering(self) -> str:
        # No probe of its own: still running a few seconds later.
        time.sleep(3)
        process = self.nem.env.cp.supervisor.get(self.target)
        return "running 3 s later" if process.alive() else f"exited: {process.describe_exit()[-500:]}"


class _ApiserverRestart(_ProcessRestart):
    def answering(self) -> str:
        took = self.nem.wait(self.nem.api_ready, 120)
        return f"/readyz ok after {took:.1f} s" if took is not None else "/readyz NOT ok after 120 s"


class _KueueRestart(_ProcessRestart):
    def answering(self) -> str:
        # Reading the ClusterQueue as v1beta1 goes through Kueue's conversion webhook.
        cq = self.nem.env.tb.cluster_queue
        took = self.nem.wait(lambda: self.nem.api.get("kueue.x-k8s.io/v1beta1", "ClusterQueue", cq), 120)
        return f"its webhook answers after {took:.1f} s" if took is not None else "its webhook NOT answering"


class _EtcdPause(_Fault):
    def inject(self) -> None:
        self.nem.env.cp.supervisor.send_signal(self.target, signal.SIGSTOP)
        self.began("SIGSTOP to etcd")

    def heal(self) -> str:
        self.nem.env.cp.supervisor.send_signal(self.target, signal.SIGCONT)
        took = self.nem.wait(self.nem.api_ready, 60)
        return f"SIGCONT to etcd; /readyz ok after {took:.1f} s" if took is not None else "/readyz NOT ok after 60 s"


@dataclass(frozen=True)
class _Hit:
    pod: str
    container_id: str
    pid: int
    """The container's first process: SIGKILL to it ends the container (its pid namespace dies with it)."""
    pids: list[int]
    """Every process of the container: SIGSTOP hangs them all."""


class _ContainerFault(_Fault):
    """SIGKILL or SIGSTOP to a container of dispatch's pods (pods()), by its processes' host pids."""

    container = ""
    sig = signal.SIGSTOP
    every = False
    """Every pod of pods() whose container runs (skipping the others), instead of all or nothing."""

    def __init__(self, nem: Nemesis, p: Planned) -> None:
        super().__init__(nem, p)
        self.hits: list[_Hit] = []

    def pods(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def inject(self) -> None:
        skipped = []
        for pod in self.pods():
            try:
                cid, pid = self.nem.container(pod, self.container)
            except Skip as e:
                if not self.every:
                    raise
                skipped.append(str(e))
                continue
            self.hits.append(_Hit(pod["metadata"]["name"], cid, pid, container_processes(pid) or [pid]))
        if not self.hits:
            raise Skip("; ".join(skipped) or "no pod")
        self.target = ",".join(h.pod for h in self.hits)
        for h in self.hits:
            _signal(h.pids if self.sig == signal.SIGSTOP else [h.pid], self.sig)
        what = "; ".join(
            f"{h.pod} container {h.container_id[:12]} pid(s) {' '.join(map(str, h.pids))}" for h in self.hits
        )
        self.began(f"{self.sig.name} to the {self.container} container: {what}" + "".join(f"; {s}" for s in skipped))

    def heal(self) -> str:
        if self.sig == signal.SIGKILL:
            return self.restarted()
        said = []
        for h in self.hits:
            n = _signal(h.pids, signal.SIGCONT)
            now = self.nem.container_status(h.pod, self.container).get("containerID", "")
            again = " (its container was restarted meanwhile)" if now and not now.endswith(h.container_id) else ""
            said.append(f"SIGCONT to {n} of {len(h.pids)} pid(s) of {h.pod}{again}")
        return "; ".join(said)

    def restarted(self) -> str:
        """Nothing to undo: the kubelet restarts the container; the heal waits until it is ready again."""
        said = []
        for h in self.hits:

            def again(h: _Hit = h) -> bool:
                status = self.nem.container_status(h.pod, self.container)
                return bool(status.get("ready")) and not status.get("containerID", "").endswith(h.container_id)

            took = self.nem.wait(again, 120)
            restarts = self.nem.container_status(h.pod, self.container).get("restartCount")
            said.append(
                f"{h.pod}: {self.container} ready again after {took:.1f} s (restartCount {restarts})"
                if took is not None
                else f"{h.pod}: {self.container} NOT ready again after 120 s"
            )
        return "; ".join(said)


class _AgentLeader(_ContainerFault):
    container = "agent"

    def pods(self) -> list[dict[str, Any]]:
        holder = self.nem.lease_holder()
        pods = [p for p in self.nem.dispatch_pods() if p["metadata"]["name"] == holder]
        if not pods:
            raise Skip(f"the Lease holder {holder} is not a pod of the release")
        return pods


class _AgentLeaderKill(_AgentLeader):
    sig = signal.SIGKILL


class _AgentLeaderStop(_AgentLeader):
    sig = signal.SIGSTOP


class _WebhookOne(_ContainerFault):
    container = "webhook"

    def pods(self) -> list[dict[str, Any]]:
        pods = self.nem.dispatch_pods()
        if not pods:
            raise Skip("no pod of the release")
        return [pods[self.p.choice % len(pods)]]


class _WebhookKill(_WebhookOne):
    sig = signal.SIGKILL


class _WebhookStop(_WebhookOne):
    sig = signal.SIGSTOP


class _WebhookDown(_ContainerFault):
    container = "webhook"
    sig = signal.SIGSTOP
    every = True

    def pods(self) -> list[dict[str, Any]]:
        pods = self.nem.dispatch_pods()
        if not pods:
            raise Skip("no pod of the release")
        return pods


FAULTS: dict[str, type[_Fault]] = {
    "kubelet-kill": _KubeletKill,
    "kubelet-stop": _KubeletStop,
    "containerd-kill": _ContainerdKill,
    "containerd-stop": _ContainerdStop,
    "agent-leader-kill": _AgentLeaderKill,
    "agent-leader-stop": _AgentLeaderStop,
    "webhook-kill": _WebhookKill,
    "webhook-stop": _WebhookStop,
    "node-lost-force-delete": _NodeLostForceDelete,
    "node-lost-node-delete": _NodeLostNodeDelete,
    "out-of-service": _OutOfService,
    "apiserver-restart": _ApiserverRestart,
    "kueue-restart": _KueueRestart,
    "jobset-restart": _ProcessRestart,
    "trainer-restart": _ProcessRestart,
    "etcd-pause": _EtcdPause,
    "webhook-down": _WebhookDown,
}
assert set(FAULTS) == set(KINDS)
