"""dispatch's agent as a real process (``python -m agent serve``) under the control plane's supervisor, with
the least RBAC its gate needs, and the probes tests and benchmarks read it by."""

from __future__ import annotations

import os
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.cluster import ControlPlane, free_port
from harness.processes import ManagedProcess

LEASE = "dispatch-admission"
LEADER = (200, "ok (leader)")

# What the agent's gate needs, and nothing more (docs/agent.md); the chart renders the same.
CLUSTER_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["admissionchecks"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["multikueueconfigs"], "verbs": ["get"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["multikueueclusters"], "verbs": ["list"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads/status", "admissionchecks/status"], "verbs": ["patch"]},
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs/status"], "verbs": ["patch"]},
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainingruntimes"], "verbs": ["get"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
]
WORKER_CLUSTER_RULES: list[dict[str, Any]] = [
    *CLUSTER_RULES,
    # Role worker only: the delete of MultiKueue's copy made from a stale view of the manager's TrainJob.
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["delete"]},
]
LEASE_RULES: list[dict[str, Any]] = [
    # list: on a MultiKueue worker, the manager's claims (agent/multicluster/claims.py), as the chart grants it there.
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "create", "update"]}
]


@dataclass
class AgentProcess:
    name: str
    process: ManagedProcess
    port: int
    """The plain-HTTP health port: /healthz, /readyz, /metrics."""

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()
        except OSError as err:
            return 0, str(err)

    def log(self) -> str:
        return self.process.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL, without a word: a leader that dies holding the Lease."""
        os.killpg(self.process.pid, signal.SIGKILL)  # the process group the supervisor started
        self.process.popen.wait(10)

    def metric(self, name: str, labels: str = "") -> float:
        """The sum of a metric's samples whose labels contain ``labels`` (e.g. 'result="admit"')."""
        total = 0.0
        for line in self.get("/metrics")[1].splitlines():
            if (line.startswith(name + " ") or line.startswith(name + "{")) and labels in line:
                total += float(line.rsplit(" ", 1)[1])
        return total


def grant(cp: ControlPlane, namespace: str, rules: list[dict[str, Any]] | None = None) -> Path:
    """A ServiceAccount with the agent's RBAC (``rules``, by default ``CLUSTER_RULES``), the Lease rights only
    in ``namespace``; its kubeconfig."""
    name = f"dispatch-agent-{namespace}"
    cp.ensure_service_account(namespace, "dispatch-agent")
    subject = [{"kind": "ServiceAccount", "name": "dispatch-agent", "namespace": namespace}]
    rbac = "rbac.authorization.k8s.io/v1"
    cp.admin.create(
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules or CLUSTER_RULES}
    )
    cp.admin.create({"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": name},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                     "subjects": subject})  # fmt: skip
    cp.admin.create({"apiVersion": rbac, "kind": "Role", "metadata": {"name": "lease", "namespace": namespace},
                     "rules": LEASE_RULES})  # fmt: skip
    cp.admin.create({"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": "lease", "namespace": namespace},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lease"},
                     "subjects": subject})  # fmt: skip
    return cp.service_account_kubeconfig(namespace, "dispatch-agent")


def start_agent(
    cp: ControlPlane,
    *,
    kubeconfig: Path,
    name: str,
    config: dict[str, Any],
    workdir: Path,
    extra: Sequence[str] = (),
    until: tuple[int, str] | None = None,
    timeout: float = 60,
    cwd: Path | None = None,
) -> AgentProcess:
    """Start the agent and wait until /readyz answers 200 (or exactly ``until``, e.g. LEADER). ``cwd``: a tree
    whose packages the agent runs instead of the installed ones (a chaos mutant's)."""
    config_file = workdir / f"{name}.yaml"
    config_file.write_text(yaml.safe_dump(config))
    port = free_port()
    argv = [sys.executable, "-m", "agent", "serve", "--kubeconfig", kubeconfig, "--config", config_file,
            "--health-port", str(port), "--bind-address", "127.0.0.1", "--identity", name, *extra]  # fmt: skip
    agent = AgentProcess(name, cp.supervisor.start(name, argv, cwd=cwd), port)
    deadline = time.monotonic() + timeout
    while (agent.get("/readyz") != until) if until else (agent.get("/readyz")[0] != 200):
        if not agent.process.alive() or time.monotonic() > deadline:
            raise AssertionError(f"{name} did not become ready: {agent.process.describe_exit()}")
        time.sleep(0.1)
    return agent
