"""The MultiKueue arm's clusters: a manager and two workers (harness/multicluster.py, three control planes), each
worker with a real node for the trainers, and dispatch's agent on all three.

The manager runs no node (MultiKueue sends every job away); each worker runs kwok's nodes and one real node
(`chaos-mk-<worker>`), where the trainers' containers run, so a copy's processes can outlive what its API server
says. The agents run as processes beside the control planes, each under a ServiceAccount with the agent's RBAC:
the manager's serves the supervisor API (real TLS on loopback) and reads and renews the workers with its own
credential (``workerKubeconfigs``); each worker's runs in role worker. The workers carry the chart's owner policies
and unsuspend policy in role worker. dispatch's webhook server is not run: the owner policies, the record-start
and unsuspend policies are the choke point here, as on the test suite's three control planes.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.api.rbac import AGENT_RULES, PREFLIGHT_RULES, SUPERVISOR_RULES
from certs import pki
from chaos import site
from chaos.env import WORKER_LABEL
from contract.keys import ADMISSION_CHECK_NAME
from contract.multicluster import ROLE_WORKER
from harness.agent_process import CLUSTER_RULES, LEADER, WORKER_CLUSTER_RULES, AgentProcess, grant, start_agent
from harness.binaries import locate_node
from harness.cluster import ControlPlane, free_port
from harness.kube_http import KubeHttp
from harness.multicluster import ADMISSION_CHECK, MultiCluster, start_multicluster, worker_unsuspend_policy
from harness.processes import stop_everything, wait_until
from harness.real_node import RealNode, start_real_node
from harness.sandbox import on_node
from harness.sandbox.site import KUEUE_V, admission_check

SYSTEM = "dispatch-system"
"""The agents' Lease namespace, one name on all three clusters (the contact Lease's on the workers)."""
LEASE = "dispatch-admission"
MANAGER = "manager"
CONTACT_SECONDS = 8
"""The manager agent's contact Lease: below the manager's workerLostTimeout (harness/multicluster.py, 15 s)."""
ROUND_SECONDS = 2
ROLES = ("dispatch-supervisor", "dispatch-preflight")
UNSUSPEND = "dispatch-chaos-mk-unsuspend"


@dataclass
class MkEnv:
    mc: MultiCluster
    nodes: dict[str, RealNode]
    """Worker name -> its real node."""
    agents: dict[str, AgentProcess]
    """MANAGER or a worker's name -> its agent."""
    starters: dict[str, Callable[[], AgentProcess]]
    """How each agent is started again (after a kill)."""
    credentials: dict[str, Path]
    """The manager agent's kubeconfig file for each worker."""
    api_url: str
    ca_file: Path
    run_dir: Path
    image: on_node.Image
    check: str = ADMISSION_CHECK_NAME
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def admin(self) -> KubeHttp:
        return self.mc.manager.admin

    @property
    def cp(self) -> ControlPlane:
        """The manager's control plane (the nemesis's client talks to it)."""
        return self.mc.manager.control_plane

    @property
    def worker_names(self) -> list[str]:
        return [w.name for w in self.mc.workers]

    def plane(self, name: str) -> ControlPlane:
        return self.mc.manager.control_plane if name == MANAGER else self.mc.worker(name).control_plane

    def restart_agent(self, name: str) -> None:
        """The agent ``name`` started again, after it died or was stopped."""
        with contextlib.suppress(Exception):
            self.plane(name).supervisor.stop(self.agents[name].name)
        self.agents[name] = self.starters[name]()

    def stop(self) -> None:
        for name, agent in self.agents.items():
            with contextlib.suppress(Exception):
                self.plane(name).supervisor.stop(agent.name)
        for node in self.nodes.values():
            with contextlib.suppress(Exception):
                node.stop()
        with contextlib.suppress(Exception):
            self.mc.stop()
        stop_everything()


def _tls(directory: Path) -> tuple[Path, Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    ca = pki.make_ca("dispatch-chaos-mk")
    pair = pki.make_serving_cert(ca, "dispatch-agent", ip_addresses=["127.0.0.1"])
    cert, key, ca_file = directory / "tls.crt", directory / "tls.key", directory / "ca.crt"
    cert.write_bytes(pair.cert_pem)
    key.write_bytes(pair.key_pem)
    key.chmod(0o600)
    ca_file.write_bytes(ca.cert_pem)
    return cert, key, ca_file


def _namespace(cp: ControlPlane, name: str) -> None:
    cp.admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def _manager_agent(mc: MultiCluster, work: Path, credentials: dict[str, Path], port: int,
                   tls: tuple[Path, Path, Path], tree: Path | None) -> Callable[[], AgentProcess]:  # fmt: skip
    cp = mc.manager.control_plane
    _namespace(cp, SYSTEM)
    kubeconfig = grant(cp, SYSTEM, [*CLUSTER_RULES, *AGENT_RULES])
    for name, rules in zip(ROLES, (SUPERVISOR_RULES, PREFLIGHT_RULES), strict=True):
        cp.admin.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                        "metadata": {"name": name}, "rules": rules})  # fmt: skip
    config: dict[str, Any] = {
        "leaseNamespace": SYSTEM,
        "leaseName": LEASE,
        "workerKubeconfigs": {w: str(p) for w, p in credentials.items()},
        "workerContactSeconds": CONTACT_SECONDS,
        "workerRoundSeconds": ROUND_SECONDS,
    }
    cert, key, _ = tls
    extra = ["--tls-cert-file", str(cert), "--tls-private-key-file", str(key), "--api-port", str(port)]
    return lambda: start_agent(cp, kubeconfig=kubeconfig, name="dispatch-agent-manager", config=config,
                               workdir=work, extra=extra, until=LEADER, cwd=tree)  # fmt: skip


def _worker_agent(cp: ControlPlane, name: str, work: Path, tree: Path | None) -> Callable[[], AgentProcess]:
    _namespace(cp, SYSTEM)
    kubeconfig = grant(cp, SYSTEM, WORKER_CLUSTER_RULES)
    config = {"leaseNamespace": SYSTEM, "leaseName": LEASE, "multiclusterRole": ROLE_WORKER}
    return lambda: start_agent(cp, kubeconfig=kubeconfig, name=f"dispatch-agent-{name}", config=config,
                               workdir=work, until=LEADER, cwd=tree)  # fmt: skip


def runs_from(tree: Path) -> None:
    """Raises unless `python -m agent` started in ``tree`` imports the tree's packages, not the installed ones: a
    mutant the agents did not run would pass for a product that was not caught."""
    code = "import agent, contract; print(agent.__file__); print(contract.__file__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, check=True)
    outside = [f for f in out.stdout.split() if not Path(f).resolve().is_relative_to(tree.resolve())]
    if outside:
        raise RuntimeError(f"the agent started in {tree} would import {outside}, not the tree's")


def start(run_dir: Path, *, image: on_node.Image, tree: Path | None = None) -> MkEnv:
    """Three control planes connected by MultiKueue, a real node on each worker, dispatch's agent on each (run
    from ``tree`` when given: a mutant's, chaos/mutants.py)."""
    if tree is not None:
        runs_from(tree)
    artifacts = locate_node().require()
    mc = start_multicluster()
    nodes: dict[str, RealNode] = {}
    agents: dict[str, AgentProcess] = {}
    try:
        for w in mc.workers:
            node = start_real_node(w.control_plane, f"chaos-mk-{w.name}", artifacts, images=[image.archive])
            nodes[w.name] = node
            w.admin.merge_patch("v1", "Node", node.name, {"metadata": {"labels": {WORKER_LABEL: "true"}}})
        work = run_dir / "agents"
        work.mkdir(parents=True, exist_ok=True)
        # dispatch's AdmissionCheck on every cluster: on the manager beside MultiKueue's, on each worker alone.
        for cp in mc.control_planes:
            cp.admin.apply(admission_check(ADMISSION_CHECK_NAME))
        for w in mc.workers:
            for doc in worker_unsuspend_policy(UNSUSPEND):
                w.admin.apply(doc)
        starters: dict[str, Callable[[], AgentProcess]] = {}
        credentials = mc.agent_kubeconfigs(work)
        port = free_port()
        tls = _tls(work / "tls")
        starters[MANAGER] = _manager_agent(mc, work, credentials, port, tls, tree)
        for w in mc.workers:
            starters[w.name] = _worker_agent(w.control_plane, w.name, work, tree)
        for name, starter in starters.items():
            agents[name] = starter()
        for cp in mc.control_planes:
            wait_until(lambda cp=cp: _active(cp.admin, ADMISSION_CHECK_NAME), 60, interval=0.5,
                       what=f"dispatch's AdmissionCheck Active on {cp.run_dir.name}")  # fmt: skip
        return MkEnv(mc, nodes, agents, starters, credentials, f"https://127.0.0.1:{port}", tls[2], run_dir, image)
    except BaseException:
        for node in nodes.values():
            with contextlib.suppress(Exception):
                node.stop()
        mc.stop()
        stop_everything()
        raise


def _active(admin: KubeHttp, check: str) -> bool:
    ac = admin.get_or_none(KUEUE_V, "AdmissionCheck", check) or {}
    return any(c.get("type") == "Active" and c.get("status") == "True"
               for c in (ac.get("status") or {}).get("conditions") or [])  # fmt: skip


def prepare(env: MkEnv, *, namespace: str, runtime_name: str, dir_: Path) -> Path:
    """The arm's namespace, runtime, priorities and queues on all three clusters (the manager's queues list
    MultiKueue's check too), and the supervisor on the manager; the supervisor's token file."""
    token = site.prepare(env.mc.manager.control_plane, env.mc.manager, namespace=namespace, check=env.check,
                         image=env.image.ref, run_dir=dir_, runtime_name=runtime_name, roles=ROLES,
                         also=(ADMISSION_CHECK,))  # fmt: skip
    for w in env.mc.workers:
        site.prepare_queues(w.control_plane, w.tier_b, namespace=namespace, check=env.check, image=env.image.ref,
                            ledger=site.ledger_dir(dir_), runtime_name=runtime_name)  # fmt: skip
    return token
