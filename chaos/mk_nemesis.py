"""The MultiKueue arm's faults: each targets one worker, and each is healed before the next (chaos/nemesis.py plays
them; `plan(..., kinds=KINDS)` draws them).

    kueue-cut       Kueue's connection to the worker broken (its MultiKueueCluster's kubeconfig points nowhere)
                    while the manager agent's own credential works: after workerLostTimeout Kueue gives the job up
                    there and dispatches it elsewhere, and only dispatch's look and contact Lease stand between
                    the old copy and the new one
    kueue-cut-node-lost  the same, while the worker's real node is lost (its kubelet killed): the copies there
                    are deleted, their containers run on, and only the manager's look stands between them and
                    the next copy
    kubelet-kill    the worker's real node's kubelet killed for a while (its containers run on): a Hold and
                    Release, or a preemption, meanwhile must wait for them
    agent-cut       the reverse: the manager agent's credential for the worker broken, Kueue's works
    partition       both at once: the worker out of the manager's reach
    apiserver-stop  the worker's kube-apiserver hung (SIGSTOP), then resumed
    agent-kill      the worker's dispatch agent killed (SIGKILL), then started again
    agent-stop      the worker's dispatch agent hung (SIGSTOP), then resumed
    dropped         the worker removed from the MultiKueueConfig, then added back
    fence           the worker shut down (its real node powered off, Kueue and the manager agent both cut off),
                    then fenced `powered-off` by the operator as the docs ask (only once it is shut down); healed:
                    the node boots, the network comes back, the fence is taken off (its agent runs throughout,
                    as the docs require of a worker that rejoins)
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from chaos.nemesis import API_TIMEOUT, READY_TIMEOUT, Kind, Nemesis, Planned, Skip, _Fault, _KubeletKill
from contract.keys import ANNOTATION_FENCED, FENCED_POWERED_OFF
from harness.kube_http import KubeHttp
from harness.multicluster import KUEUE_V, MULTIKUEUE_CONFIG
from harness.real_node import RealNode

if TYPE_CHECKING:
    from chaos.mk_env import MkEnv

_WORKER = {"node": True}
KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        # Kueue's workerLostTimeout is 15 s (harness/multicluster.py): a cut must outlast it to move the job.
        Kind("kueue-cut", (20, 60), 15, **_WORKER),
        Kind("kueue-cut-node-lost", (25, 60), 20, **_WORKER),
        Kind("kubelet-kill", (40, 90), 15, **_WORKER),
        Kind("agent-cut", (20, 60), 10, **_WORKER),
        Kind("partition", (20, 60), 15, **_WORKER),
        Kind("apiserver-stop", (10, 40), 15, **_WORKER),
        Kind("agent-kill", (2, 6), 10, **_WORKER),
        Kind("agent-stop", (5, 30), 10, **_WORKER),
        Kind("dropped", (20, 60), 15, **_WORKER),
        Kind("fence", (30, 60), 30, **_WORKER),
    )
}
ALL: tuple[str, ...] = tuple(KINDS)


class MkNemesis(Nemesis):
    """The nemesis on the MultiKueue arm's clusters: the same player, this menu."""

    def __init__(self, env: MkEnv, planned: list[Planned], record: Callable[..., None]) -> None:
        super().__init__(env, planned, record)  # type: ignore[arg-type]  # it reads env.cp only
        self.mk = env
        self.faults = FAULTS
        self._apis = {w.name: KubeHttp(w.admin.credentials, timeout=API_TIMEOUT) for w in env.mc.workers}

    def node(self, name: str) -> RealNode:
        """A worker's real node, by the worker's name (what the plan targets) or the node's."""
        for worker, node in self.mk.nodes.items():
            if name in (worker, node.name):
                return node
        raise Skip(f"no real node {name}")

    def api_of(self, node: str) -> KubeHttp:
        for worker, real in self.mk.nodes.items():
            if node in (worker, real.name):
                return self._apis[worker]
        return self.api


class _MkFault(_Fault):
    @property
    def mk(self) -> MkEnv:
        return cast(MkNemesis, self.nem).mk


class _Cut(_MkFault):
    kueue = False
    agent = False

    def inject(self) -> None:
        mk, said = self.mk, []
        if self.kueue:
            mk.mc.break_connection(self.target)
            said.append("Kueue's kubeconfig for it points nowhere")
        if self.agent:
            self.working = mk.mc.break_agent_kubeconfig(mk.credentials[self.target])
            said.append("the manager agent's kubeconfig for it points nowhere")
        self.began("; ".join(said))

    def heal(self) -> str:
        mk, said = self.mk, []
        if self.agent:
            mk.credentials[self.target].write_bytes(self.working)
            said.append("the manager agent's kubeconfig restored")
        if self.kueue:
            mk.mc.restore_connection(self.target)
            took = self.nem.wait(lambda: (mk.mc.cluster_active(self.target) or {}).get("status") == "True", 120)
            said.append(f"Kueue's kubeconfig restored; Active again after {took:.1f} s" if took is not None
                        else "Kueue's kubeconfig restored; NOT Active again after 120 s")  # fmt: skip
        return "; ".join(said)


class _KueueCut(_Cut):
    kueue = True


class _KueueCutNodeLost(_Cut):
    """Kueue cut off from a worker whose real node is lost (its kubelet killed, its containers running on): the
    copies there are deleted when the manager stops claiming them, but nothing stops their containers, and Kueue
    moves the job after workerLostTimeout. Only the manager's look at the worker (its pods, which dispatch's
    finalizer keeps) stands between them and the next copy. (Killed, not SIGSTOPped: a stopped kubelet is resumed
    by the kernel when a process of its orphaned process group exits, which ends the fault early.)"""

    kueue = True

    def inject(self) -> None:
        self.nem.node(self.target).kill_kubelet()
        super().inject()
        self.notes.append("the worker's real node's kubelet killed (SIGKILL): its containers run on")

    def heal(self) -> str:
        reach = super().heal()
        node = self.nem.node(self.target)
        node.restart_kubelet()
        return f"{reach}; the kubelet started again; {self.nem.node_back(node)}"


class _AgentCut(_Cut):
    agent = True


class _Partition(_Cut):
    kueue = agent = True


class _Signal(_MkFault):
    """SIGSTOP, then SIGCONT, of one process of the worker's control plane's supervisor."""

    def process(self) -> str:
        raise NotImplementedError

    def inject(self) -> None:
        cp = self.mk.plane(self.target)
        cp.supervisor.send_signal(self.process(), signal.SIGSTOP)
        self.began(f"{self.process()} hung (SIGSTOP)")

    def heal(self) -> str:
        cp = self.mk.plane(self.target)
        cp.supervisor.send_signal(self.process(), signal.SIGCONT)
        return f"{self.process()} resumed (SIGCONT)"


class _ApiserverStop(_Signal):
    def process(self) -> str:
        return "kube-apiserver"


class _AgentStop(_Signal):
    def process(self) -> str:
        return str(self.mk.agents[self.target].name)


class _AgentKill(_MkFault):
    def inject(self) -> None:
        self.mk.agents[self.target].kill()
        self.began("the worker's agent killed (SIGKILL)")

    def heal(self) -> str:
        started = time.monotonic()
        self.mk.restart_agent(self.target)
        return f"the worker's agent started again, leading after {time.monotonic() - started:.1f} s"


class _Dropped(_MkFault):
    def _clusters(self, change: Callable[[list[str]], list[str]]) -> list[str]:
        admin = self.mk.admin
        for _ in range(10):
            config = admin.get(KUEUE_V, "MultiKueueConfig", MULTIKUEUE_CONFIG)
            clusters = change(list(config["spec"]["clusters"]))
            patch = {"metadata": {"resourceVersion": config["metadata"]["resourceVersion"]},
                     "spec": {"clusters": clusters}}  # fmt: skip
            try:
                admin.merge_patch(KUEUE_V, "MultiKueueConfig", MULTIKUEUE_CONFIG, patch)
                return list(clusters)
            except Exception:
                time.sleep(0.2)
        raise RuntimeError("the MultiKueueConfig kept changing")

    def inject(self) -> None:
        left = self._clusters(lambda cs: [c for c in cs if c != self.target])
        self.began(f"dropped from the MultiKueueConfig (left: {', '.join(left)})")

    def heal(self) -> str:
        order = self.mk.worker_names
        now = self._clusters(lambda cs: [c for c in order if c in cs or c == self.target])
        return f"added back to the MultiKueueConfig ({', '.join(now)})"


class _Fence(_Partition):
    """The worker shut down: its real node powered off and the worker out of reach (Kueue's connection and the
    manager agent's both cut), then fenced `powered-off` by the operator. Its control plane and dispatch agent run
    on (a worker that rejoins must start its agent before its workloads: docs/multicluster.md). Healed as a
    machine comes back: the node boots, then the network, then the operator takes the fence off."""

    def inject(self) -> None:
        node = self.mk.nodes[self.target]
        running = len(node.container_pids())
        node.power_off()
        super().inject()
        self.notes.append(f"{node.name} powered off ({running} container processes killed)")
        self.mk.admin.merge_patch(KUEUE_V, "MultiKueueCluster", self.target,
                                  {"metadata": {"annotations": {ANNOTATION_FENCED: FENCED_POWERED_OFF}}})  # fmt: skip
        self.notes.append(f"fenced {FENCED_POWERED_OFF} once it was shut down")

    def heal(self) -> str:
        node = self.mk.nodes[self.target]
        started = time.monotonic()
        node.power_on(READY_TIMEOUT)
        on = f"{node.name} powered on, Ready after {time.monotonic() - started:.1f} s"
        reach = super().heal()
        self.mk.admin.merge_patch(KUEUE_V, "MultiKueueCluster", self.target,
                                  {"metadata": {"annotations": {ANNOTATION_FENCED: None}}})  # fmt: skip
        return f"{on}; {reach}; the fence taken off"


FAULTS: dict[str, type[_Fault]] = {
    "kueue-cut": _KueueCut,
    "kueue-cut-node-lost": _KueueCutNodeLost,
    "kubelet-kill": _KubeletKill,
    "agent-cut": _AgentCut,
    "partition": _Partition,
    "apiserver-stop": _ApiserverStop,
    "agent-kill": _AgentKill,
    "agent-stop": _AgentStop,
    "dropped": _Dropped,
    "fence": _Fence,
}
assert set(FAULTS) == set(KINDS)
