"""The campaign's cluster: tier B (real API server, etcd, Kueue, JobSet, Trainer, kwok's nodes) with real nodes
(tier C), and dispatch installed from its chart as the sandbox installs it on a real node, with two replicas.

Real nodes: one `system` node runs dispatch's two pods (never made lost: the campaign attacks the agent's and
the webhook's processes directly), and `workers` run the dispatch jobs' trainer containers. kwok's nodes run the
other parties' preempting TrainJobs. Everything the harness starts registers its cleanup, so an interrupted
campaign leaves no process, mount, cgroup or bridge behind.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.keys import ADMISSION_CHECK_NAME
from harness.binaries import locate, locate_node
from harness.cluster import ControlPlane, start_control_plane
from harness.kube_http import KubeHttp
from harness.processes import stop_everything, wait_until
from harness.real_node import RealNode, start_real_node
from harness.sandbox import on_node
from harness.sandbox.install import NAMESPACE, RELEASE
from harness.sandbox.site import KUEUE_V
from harness.service_network import ServiceNetwork, start_service_network
from harness.tier_b import TierB, start_tier_b

SYSTEM_NODE = "chaos-system"
WORKER_PREFIX = "chaos-worker-"
WORKER_LABEL = "chaos.dispatch.phpboyscout.uk/worker"
"""On the real worker nodes: the dispatch jobs' trainer pods select it."""
REPLICAS = 2
KWOK_NODES = 3
CHART_VALUES: dict[str, Any] = {"replicas": REPLICAS}
QUEUES_GONE_S = 120.0
"""Detaching waits this long for the campaign's queues, and then for the chart's AdmissionCheck, to go."""
"""Over the sandbox's values: two replicas, so a leader's death hands the gate to the other."""


@dataclass
class Env:
    cp: ControlPlane
    tb: TierB
    system: RealNode
    workers: list[RealNode]
    network: ServiceNetwork
    run_dir: Path
    image: on_node.Image
    api: on_node.AgentApi
    pods: list[str]
    """dispatch's pods, as installed."""
    helm_version: str
    release_namespace: str = NAMESPACE
    release: str = RELEASE
    attached: bool = False
    """Started on a cluster someone else owns (the test suite's tier C): stop() leaves it as it found it."""
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def admin(self) -> KubeHttp:
        return self.cp.admin

    def node(self, name: str) -> RealNode:
        return next(n for n in [self.system, *self.workers] if n.name == name)

    def stop(self) -> None:
        """Everything, in reverse order of start; safe to call twice. Attached: only what the campaign added."""
        if self.attached:
            self._detach()
            return
        for step in (self.network.stop, *(n.stop for n in reversed(self.workers)), self.system.stop, self.cp.stop):
            with contextlib.suppress(Exception):
                step()
        stop_everything()

    def stop_workers(self) -> None:
        """Attached, on a cluster about to be stopped (the test suite's last test): only the worker nodes the
        campaign added, their containers, mounts, cgroups and bridges, which outlive the cluster's processes.
        What the arms created and the chart go with the cluster."""
        for worker in reversed(self.workers):
            with contextlib.suppress(Exception):
                worker.stop()
        self.workers = []

    def _detach(self) -> None:
        # The suite goes on after a campaign, so detaching must leave nothing a later test could trip on. Kueue
        # keeps a ClusterQueue while it has admitted Workloads, and the chart's AdmissionCheck while a ClusterQueue
        # names it: a queue left Terminating would pin the check, and with it the next install's uninstall.
        # So: the namespaces (their Workloads) and the queues go first, while the chart still runs the agent.
        self._delete_cluster_scoped(("ClusterQueue", "Namespace"))
        try:
            wait_until(self._chaos_queues_gone, timeout=QUEUES_GONE_S, interval=1.0, what="the campaign's queues")
        except TimeoutError:
            # The naive arm's last Workloads may hold them; the cluster is a test's, and Kueue has nothing to
            # account for any more.
            for cq in self._chaos(KUEUE_V, "ClusterQueue"):
                with contextlib.suppress(Exception):
                    self.admin.merge_patch(KUEUE_V, "ClusterQueue", cq, {"metadata": {"finalizers": None}})
        with contextlib.suppress(Exception):
            on_node.helm_uninstall(self.cp, self.run_dir / "install")
        self._delete_cluster_scoped(tuple(kind for _, kind in CLUSTER_SCOPED))
        with contextlib.suppress(TimeoutError):
            wait_until(
                lambda: self.admin.get_or_none(KUEUE_V, "AdmissionCheck", ADMISSION_CHECK_NAME) is None,
                timeout=QUEUES_GONE_S,
                what="the chart's AdmissionCheck",
            )
        for worker in reversed(self.workers):
            with contextlib.suppress(Exception):
                worker.stop()
            with contextlib.suppress(Exception):
                self.admin.delete("v1", "Node", worker.name)
        self.workers = []

    def _chaos_queues_gone(self) -> bool:
        # Pods of the naive arm keep dispatch's finalizer (no agent led to remove it), which holds their
        # Terminating namespaces, and so the Workloads, and so the queues: strip it on every poll.
        for ns in self._chaos("v1", "Namespace"):
            for pod in self.admin.list("v1", "Pod", ns):
                if pod["metadata"].get("finalizers"):
                    with contextlib.suppress(Exception):
                        self.admin.merge_patch(
                            "v1", "Pod", pod["metadata"]["name"], {"metadata": {"finalizers": None}}, ns
                        )
        return not self._chaos(KUEUE_V, "ClusterQueue")

    def _chaos(self, api_version: str, kind: str) -> list[str]:
        return [
            o["metadata"]["name"]
            for o in self.admin.list(api_version, kind)
            if o["metadata"]["name"].startswith("chaos-")
        ]

    def _delete_cluster_scoped(self, kinds: tuple[str, ...]) -> None:
        for api_version, kind in CLUSTER_SCOPED:
            if kind not in kinds:
                continue
            for name in self._chaos(api_version, kind):
                with contextlib.suppress(Exception):
                    self.admin.delete(api_version, kind, name)


CLUSTER_SCOPED = (
    (KUEUE_V, "ClusterQueue"),
    ("kueue.x-k8s.io/v1beta2", "WorkloadPriorityClass"),
    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"),
    ("v1", "Namespace"),
)
"""What the campaign's arms create outside their namespaces, all named `chaos-...`; detaching deletes it."""


def _add_workers(cp: ControlPlane, count: int, image: on_node.Image) -> list[RealNode]:
    artifacts = locate_node().require()
    workers: list[RealNode] = []
    try:
        for i in range(1, count + 1):
            workers.append(start_real_node(cp, f"{WORKER_PREFIX}{i}", artifacts, images=[image.archive]))
            cp.admin.merge_patch("v1", "Node", workers[-1].name, {"metadata": {"labels": {WORKER_LABEL: "true"}}})
    except BaseException:
        for w in workers:
            w.stop()
        raise
    return workers


def _install(cp: ControlPlane, system: RealNode, image: on_node.Image, run_dir: Path) -> tuple[str, list[str], Any]:
    work = run_dir / "install"
    work.mkdir(parents=True, exist_ok=True)
    version, pods = on_node.helm_install(cp, system, image, work, more=CHART_VALUES)
    return version, pods, on_node.agent_api(cp, work, pods)


def attach(cp: ControlPlane, tb: TierB, system: RealNode, network: ServiceNetwork, run_dir: Path, *, workers: int,
           image: on_node.Image) -> Env:  # fmt: skip
    """The campaign on a cluster that is already up with a real node and kube-proxy (the test suite's tier C):
    adds the worker nodes and installs the chart; Env.stop() removes both and what the arms created.

    The workers start while the chart installs: its pods select the system node, so neither waits for the other
    (one after the other they took about 50 s of the test's setup)."""
    with ThreadPoolExecutor(1, thread_name_prefix="chaos-workers") as pool:
        adding = pool.submit(_add_workers, cp, workers, image)
        try:
            version, pods, api = _install(cp, system, image, run_dir)
        except BaseException:
            with contextlib.suppress(Exception):
                for w in adding.result():
                    w.stop()
            raise
        try:
            added = adding.result()
        except BaseException:
            with contextlib.suppress(Exception):
                on_node.helm_uninstall(cp, run_dir / "install")
            raise
    return Env(cp, tb, system, added, network, run_dir, image, api, pods, version, attached=True)


def start(run_dir: Path, *, workers: int, image: on_node.Image) -> Env:
    """Tier C with ``workers`` real worker nodes and a system node, dispatch installed with its chart."""
    locate().require(("helm",))
    artifacts = locate_node().require()
    cp = start_control_plane(run_dir)
    nodes: list[RealNode] = []
    network: ServiceNetwork | None = None
    try:
        tb = start_tier_b(cp, nodes=KWOK_NODES)
        system = start_real_node(cp, SYSTEM_NODE, artifacts, images=[image.archive])
        nodes.append(system)
        nodes.extend(_add_workers(cp, workers, image))
        network = start_service_network(cp, system, artifacts)
        version, pods, api = _install(cp, system, image, run_dir)
        return Env(cp, tb, system, nodes[1:], network, run_dir, image, api, pods, version)
    except BaseException:
        if network is not None:
            network.stop()
        for n in reversed(nodes):
            n.stop()
        cp.stop()
        stop_everything()
        raise


def wait_nodes_ready(env: Env, timeout: float = 180) -> None:
    """Every real node Ready again (after the nemesis healed them)."""

    def ready() -> bool:
        for n in [env.system, *env.workers]:
            try:
                node = env.admin.get_or_none("v1", "Node", n.name) or {}
            except OSError:  # the API server restarting
                return False
            conds = {c["type"]: c["status"] for c in (node.get("status") or {}).get("conditions") or []}
            if conds.get("Ready") != "True":
                return False
        return True

    wait_until(ready, timeout, interval=1, what="every real node Ready")
