"""Three control planes on loopback for Kueue's MultiKueue: a manager and two workers, each a full tier B.

The manager's Kueue runs MultiKueue (a short ``workerLostTimeout``); its ClusterQueue ``cluster-queue`` lists the
MultiKueue AdmissionCheck, whose MultiKueueConfig names one MultiKueueCluster per worker. Each worker is an
ordinary tier B: MultiKueue's copies of a job run there, on kwok's nodes. Ready once `start_multicluster()`
returns: every MultiKueueCluster, the AdmissionCheck and the manager's ClusterQueue Active. Call
`create_queue_namespace(name)` for a namespace with a LocalQueue of the same name on all three.

    mc = start_multicluster()
    try:
        mc.create_queue_namespace("team-a")
    finally:
        mc.stop()
"""

from __future__ import annotations

import base64
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from agent.api.settings import KueueConfigRef
from agent.multicluster.worker_reads import CONTACT_RULES, WORKER_RULES
from contract.multicluster import ROLE_WORKER
from harness.binaries import TIER_B_BINARIES, Artifacts, locate
from harness.cluster import ControlPlane, new_run_dir, start_control_plane
from harness.kube_http import Credentials, KubeHttp
from harness.kubeconfig import kubeconfig
from harness.processes import wait_until
from harness.tier_b import (
    CLUSTER_QUEUE,
    KUEUE_NAMESPACE,
    LOCAL_QUEUE,
    TierB,
    cluster_queue,
    install_owner_policies,
    policy_config,
    start_tier_b,
)
from webhook.config import Principals
from webhook.policies import admission_policies
from webhook.rules.unsuspend import UNSUSPEND as UNSUSPEND_POLICY

KUEUE_V: Final = "kueue.x-k8s.io/v1beta2"
MULTIKUEUE_CONTROLLER: Final = "kueue.x-k8s.io/multikueue"
"""The AdmissionCheck controller name of MultiKueue, and the ``spec.managedBy`` Kueue gives a job it sends away."""
ADMISSION_CHECK: Final = "multikueue"
MULTIKUEUE_CONFIG: Final = "multikueue"
SECRET_KEY: Final = "kubeconfig"
"""The key of the kubeconfig in a MultiKueueCluster's Secret."""
WORKER_LOST_TIMEOUT: Final = "15s"
"""The manager's workerLostTimeout (15 min by default; Kueue takes any duration that is not negative): above the
tests' contact Lease of 8 s, as docs/multicluster.md's proof needs."""
DEFAULT_SECOND_ORIGIN: Final = "manager-b"
"""The MultiKueue origin of ``start_second_manager``'s Kueue (the first manager's is Kueue's default)."""
UNREACHABLE_SERVER: Final = "https://127.0.0.1:1"
"""Where `break_connection` points a worker's kubeconfig, as Kueue's own tests do (test/util BreakConnection)."""

MULTIKUEUE_USER: Final = "dispatch-harness:multikueue"
"""The identity of the manager's MultiKueue on every worker: a client certificate of the worker's CA, with no
group, so on the worker it is a principal of its own, neither Kueue nor an admin."""
MULTIKUEUE_ROLE: Final = "dispatch-harness-multikueue"
# What Kueue v0.19.2's MultiKueue does on a worker (pkg/controller/admissionchecks/multikueue and each
# integration's MultiKueue adapter): it watches Workloads and every adapter's job kind, selected by its origin
# label; creates, updates and deletes the remote Workloads and writes their status; creates and deletes the
# remote jobs and reads their status. Only the manager's integrations (MANAGER_FRAMEWORKS) need a rule.
MULTIKUEUE_RULES: Final = (
    {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["workloads"],
        "verbs": ["create", "delete", "get", "list", "watch", "update", "patch"],
    },
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads/status"], "verbs": ["get", "update", "patch"]},
    {
        "apiGroups": ["trainer.kubeflow.org"],
        "resources": ["trainjobs"],
        "verbs": ["create", "delete", "get", "list", "watch"],
    },
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs/status"], "verbs": ["get"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["create", "delete", "get", "list", "watch"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets/status"], "verbs": ["get"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "delete", "get", "list", "watch"]},
    {"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["get"]},
)
MANAGER_AGENT_USER: Final = "dispatch-harness:manager-agent"
"""The identity of dispatch's agent on the manager when it reads and prepares a worker: a client certificate of the
worker's CA, bound there to exactly agent.multicluster.worker_reads.WORKER_RULES and CONTACT_RULES."""
MANAGER_AGENT_ROLE: Final = "dispatch-harness-manager-agent"
MANAGER_FRAMEWORKS: Final = ("batch/job", "jobset.x-k8s.io/jobset", "trainer.kubeflow.org/trainjob")
"""The manager's Kueue integrations. MultiKueue opens a watch on each worker for every enabled integration that
has a MultiKueue adapter, and does not connect while one fails: upstream's default list names kinds (MPIJob,
AppWrapper, LeaderWorkerSet) whose CRDs tier B does not install."""


@dataclass
class Worker:
    name: str
    """The name of its MultiKueueCluster on the manager."""
    tier_b: TierB
    secret: str
    """The manager's Secret (in Kueue's namespace) that holds the worker's kubeconfig."""
    kubeconfig: bytes
    """The working kubeconfig: the worker's CA and MULTIKUEUE_USER's certificate and key, all inline."""

    @property
    def admin(self) -> KubeHttp:
        return self.tier_b.admin

    @property
    def control_plane(self) -> ControlPlane:
        return self.tier_b.control_plane


@dataclass
class MultiCluster:
    manager: TierB
    workers: list[Worker]
    admission_check: str = ADMISSION_CHECK
    multikueue_config: str = MULTIKUEUE_CONFIG
    local_queue: str = LOCAL_QUEUE
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def cluster_names(self) -> list[str]:
        """The MultiKueueClusters, one per worker, in the MultiKueueConfig's order."""
        return [w.name for w in self.workers]

    @property
    def control_planes(self) -> list[ControlPlane]:
        return [self.manager.control_plane, *(w.control_plane for w in self.workers)]

    @property
    def tiers(self) -> list[TierB]:
        return [self.manager, *(w.tier_b for w in self.workers)]

    def worker(self, name: str) -> Worker:
        for w in self.workers:
            if w.name == name:
                return w
        raise KeyError(name)

    def _worker(self, worker: Worker | str) -> Worker:
        return worker if isinstance(worker, Worker) else self.worker(worker)

    # --- the connection to a worker, as Kueue's own tests break it ---------------------------

    def break_connection(self, worker: Worker | str) -> None:
        """Points the worker's kubeconfig at a port nothing listens on; MultiKueue's client to it then fails
        (its MultiKueueCluster turns Active=False, ClientConnectionFailed). The worker itself runs on."""
        w = self._worker(worker)
        config = yaml.safe_load(w.kubeconfig)
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = UNREACHABLE_SERVER
        self._set_kubeconfig(w, yaml.safe_dump(config, sort_keys=False).encode())

    def restore_connection(self, worker: Worker | str) -> None:
        """Puts the working kubeconfig back; MultiKueue reconnects at once (a changed kubeconfig resets its
        back-off)."""
        w = self._worker(worker)
        self._set_kubeconfig(w, w.kubeconfig)

    def _set_kubeconfig(self, w: Worker, data: bytes) -> None:
        patch = {"data": {SECRET_KEY: base64.b64encode(data).decode()}}
        self.manager.admin.merge_patch("v1", "Secret", w.secret, patch, namespace=KUEUE_NAMESPACE)

    def cluster_active(self, worker: Worker | str) -> dict[str, Any] | None:
        """The worker's MultiKueueCluster's ``Active`` condition (None before Kueue set one)."""
        cluster = self.manager.admin.get(KUEUE_V, "MultiKueueCluster", self._worker(worker).name)
        return _find_condition(cluster, "Active")

    # --- the manager agent's own credentials to the workers (guarantee 4, the replicas) -----------

    def agent_kubeconfigs(self, directory: Path, component: str = "manager-agent") -> dict[str, Path]:
        """For each worker, a kubeconfig file in ``directory`` for MANAGER_AGENT_USER, bound on the worker to
        exactly WORKER_RULES and CONTACT_RULES (the chart grants the latter in the worker agents' Lease namespace
        only; here in every namespace, as each test's agents have a Lease namespace of their own): the agent
        config's ``workerKubeconfigs``. ``component``: the name of the certificate files on the worker (another
        manager's agent gets its own, so issuing it leaves the first one's files as they are)."""
        files = {}
        for w in self.workers:
            cp = w.control_plane
            rbac = "rbac.authorization.k8s.io/v1"
            cp.admin.apply({"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": MANAGER_AGENT_ROLE},
                            "rules": [dict(r) for r in (*WORKER_RULES, *CONTACT_RULES)]})  # fmt: skip
            cp.admin.apply({"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": MANAGER_AGENT_ROLE},
                            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                        "name": MANAGER_AGENT_ROLE},
                            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                          "name": MANAGER_AGENT_USER}]})  # fmt: skip
            source = cp.client_kubeconfig(component, MANAGER_AGENT_USER)
            files[w.name] = directory / f"{w.name}.kubeconfig"
            files[w.name].write_bytes(source.read_bytes())
        return files

    @staticmethod
    def break_agent_kubeconfig(path: Path) -> bytes:
        """Points one of ``agent_kubeconfigs``'s files at a port nothing listens on (the agent reads the file
        again at its next look); returns the working content, for ``restore_agent_kubeconfig``."""
        working = path.read_bytes()
        config = yaml.safe_load(working)
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = UNREACHABLE_SERVER
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return working

    # --- namespaces ---------------------------------------------------------------------------

    def create_queue_namespace(self, name: str, timeout: float = 30) -> str:
        """The namespace ``name`` with the LocalQueue LOCAL_QUEUE, Active, on the manager and on every worker:
        MultiKueue sends a job to the same namespace and queue name on a worker."""
        for tb in self.tiers:
            tb.admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
            tb.create_local_queue(name, self.local_queue, timeout=timeout)
        return name

    def delete_namespace(self, name: str) -> None:
        for tb in self.tiers:
            tb.control_plane.delete_namespace(name)

    def stop(self) -> None:
        # The manager first: stopped after the workers, its MultiKueue would only log their refused connections.
        for cp in self.control_planes:
            cp.stop()


def worker_unsuspend_policy(name: str) -> list[dict[str, Any]]:
    """The chart's unsuspend policy in role worker (a marked copy does not start; a start records A, never raises
    it) and its binding, named ``name``: the tier Bs here install the owner policies only, so that a test may run
    copies with no dispatch agent on the workers."""
    config = policy_config(ROLE_WORKER, Principals(usernames=(MULTIKUEUE_USER,)),
                           Principals(usernames=(MANAGER_AGENT_USER,)))  # fmt: skip
    docs = [d for d in admission_policies(config, namespace="dispatch-system")
            if UNSUSPEND_POLICY in (d["metadata"]["name"], d["spec"].get("policyName"))]  # fmt: skip
    for doc in docs:
        doc["metadata"]["name"] = name
        if "policyName" in doc["spec"]:
            doc["spec"]["policyName"] = name
    if len(docs) != 2:
        raise RuntimeError(f"the unsuspend policy and its binding, not {len(docs)} documents")
    return docs


def _find_condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == type_), None)


def _is_active(admin: KubeHttp, kind: str, name: str) -> bool:
    condition = _find_condition(admin.get(KUEUE_V, kind, name), "Active")
    return condition is not None and condition["status"] == "True"


def manager_kueue_config(worker_lost_timeout: str, gc_interval: str, origin: str | None = None) -> dict[str, Any]:
    """The top-level sections of the manager's Kueue configuration that differ from tier B's. The MultiKueue
    feature gates are on by default in Kueue v0.19. ``origin``: ``multiKueue.origin``, the value of the origin label
    on the objects this manager makes on a worker (None: Kueue's default, ``multikueue``)."""
    multikueue: dict[str, Any] = {"workerLostTimeout": worker_lost_timeout, "gcInterval": gc_interval}
    if origin is not None:
        multikueue["origin"] = origin
    return {"multiKueue": multikueue, "integrations": {"frameworks": list(MANAGER_FRAMEWORKS)}}


def _store_kueue_config(manager: TierB) -> None:
    """The Configuration the manager's Kueue runs with (the file tier B started it with), in the ConfigMap where an
    install keeps it and the manager agent's Preflight reads its workerLostTimeout
    (agent/multicluster/kueue_config.py)."""
    ref = KueueConfigRef()
    assert ref.namespace == KUEUE_NAMESPACE, "the agent's default is where this Kueue runs"
    text = (manager.control_plane.run_dir / "kueue" / "config.yaml").read_text()  # harness.tier_b's _start_kueue
    metadata = {"namespace": ref.namespace, "name": ref.name}
    manager.admin.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {ref.key: text}})


def _grant_multikueue(worker: ControlPlane) -> None:
    worker.admin.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": MULTIKUEUE_ROLE},
            "rules": [dict(rule) for rule in MULTIKUEUE_RULES],
        }
    )
    worker.admin.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": MULTIKUEUE_ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": MULTIKUEUE_ROLE},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": MULTIKUEUE_USER}],
        }
    )


def worker_kubeconfig(worker: ControlPlane, cluster_name: str) -> bytes:
    """A kubeconfig for MULTIKUEUE_USER on ``worker``, as MultiKueue accepts it: the CA and a client certificate
    (issued now by the worker's CA) inline; no file path, token file or exec plugin."""
    component = "multikueue"
    worker.client_kubeconfig(component, MULTIKUEUE_USER)
    creds = Credentials(
        server=worker.api_url,
        ca_file=worker.ca_file,
        client_cert_file=worker.pki.path(f"{component}.crt"),
        client_key_file=worker.pki.path(f"{component}.key"),
    )
    config = kubeconfig(creds, MULTIKUEUE_USER, cluster=cluster_name, embed=True)
    return yaml.safe_dump(config, sort_keys=False).encode()


def _connect(manager: TierB, name: str, worker: TierB) -> Worker:
    """The worker's RBAC for MultiKueue, its owner policies as the chart's in role worker (MultiKueue's principal
    creates and deletes its copies of dispatch's TrainJobs and Workloads; the manager's agent its replicas of the
    runtime copies), and its Secret and MultiKueueCluster on the manager."""
    _grant_multikueue(worker.control_plane)
    install_owner_policies(
        worker.control_plane,
        multicluster_role=ROLE_WORKER,
        multikueue=Principals(usernames=(MULTIKUEUE_USER,)),
        manager_agent=Principals(usernames=(MANAGER_AGENT_USER,)),
    )
    data = worker_kubeconfig(worker.control_plane, name)
    secret = f"multikueue-{name}"
    manager.admin.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"namespace": KUEUE_NAMESPACE, "name": secret},
            "data": {SECRET_KEY: base64.b64encode(data).decode()},
        }
    )
    manager.admin.apply(
        {
            "apiVersion": KUEUE_V,
            "kind": "MultiKueueCluster",
            "metadata": {"name": name},
            "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": secret}}},
        }
    )
    return Worker(name=name, tier_b=worker, secret=secret, kubeconfig=data)


def _install_multikueue(manager: TierB, names: Sequence[str]) -> None:
    """The MultiKueueConfig, the AdmissionCheck and the manager's ClusterQueue listing it."""
    admin = manager.admin
    admin.apply(
        {
            "apiVersion": KUEUE_V,
            "kind": "MultiKueueConfig",
            "metadata": {"name": MULTIKUEUE_CONFIG},
            "spec": {"clusters": list(names)},
        }
    )
    admin.apply(
        {
            "apiVersion": KUEUE_V,
            "kind": "AdmissionCheck",
            "metadata": {"name": ADMISSION_CHECK},
            "spec": {
                "controllerName": MULTIKUEUE_CONTROLLER,
                "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": MULTIKUEUE_CONFIG},
            },
        }
    )
    queue = cluster_queue()
    queue["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": ADMISSION_CHECK}]}
    admin.apply(queue)


def _wait_multikueue_active(manager: TierB, names: Sequence[str], timeout: float, whose: str) -> None:
    """Every MultiKueueCluster of ``names``, the MultiKueue AdmissionCheck and the ClusterQueue listing it Active."""
    for name in names:
        wait_until(lambda name=name: _is_active(manager.admin, "MultiKueueCluster", name), timeout,
                   what=f"{whose} MultiKueueCluster {name} Active")  # fmt: skip
    wait_until(lambda: _is_active(manager.admin, "AdmissionCheck", ADMISSION_CHECK), timeout,
               what=f"{whose} AdmissionCheck {ADMISSION_CHECK} Active")  # fmt: skip
    wait_until(lambda: _is_active(manager.admin, "ClusterQueue", CLUSTER_QUEUE), timeout,
               what=f"{whose} ClusterQueue {CLUSTER_QUEUE} Active with the MultiKueue check")  # fmt: skip


def start_multicluster(
    *,
    workers: int = 2,
    worker_lost_timeout: str = WORKER_LOST_TIMEOUT,
    gc_interval: str = "10s",
    artifacts: Artifacts | None = None,
    timeout: float = 300,
) -> MultiCluster:
    """Starts a manager and ``workers`` workers, each a tier B with its own etcd, API server and CA, and connects
    them with MultiKueue; returns once everything is Active. On failure every process started is stopped.

    The tier A parts start one after another on the calling thread (the first supervisor registers the harness's
    signal handlers, which only the main thread may do), then the tier B parts in parallel, as most of their start
    is waiting. Starting the tier A parts in parallel too overloaded 2 busy cores (a Kueue missed its 120 s to
    become ready)."""
    artifacts = artifacts or locate()
    artifacts.require(TIER_B_BINARIES)
    started = time.monotonic()
    timings: dict[str, float] = {}
    names = [f"worker-{i + 1}" for i in range(workers)]
    planes: list[ControlPlane] = []
    try:
        for _ in range(workers + 1):
            planes.append(start_control_plane(new_run_dir(), artifacts))
        timings["tier_a_ready"] = time.monotonic() - started
        # Nothing runs on the manager (MultiKueue sends every job away), so it has no node: a job it ran by
        # mistake would stay Pending there, and its JobSet would show. Nor does Trainer run there: Trainer
        # v2.2.1 does not honour spec.managedBy (its controller never reads it), and Kueue unsuspends the
        # manager's TrainJob once a worker admitted its copy, so a Trainer on the manager would create the
        # JobSet there too and the job would run twice. Kueue only needs Trainer's CRDs and the runtime.
        manager_config = manager_kueue_config(worker_lost_timeout, gc_interval)
        with ThreadPoolExecutor(max_workers=workers + 1) as pool:
            manager_future = pool.submit(
                start_tier_b, planes[0], 0, timeout, kueue_config=manager_config, trainer=False
            )
            worker_futures = [pool.submit(start_tier_b, cp, 3, timeout) for cp in planes[1:]]
            manager = manager_future.result()
            worker_tiers = [f.result() for f in worker_futures]
        timings["tier_b_ready"] = time.monotonic() - started

        _store_kueue_config(manager)
        connected = [_connect(manager, name, tb) for name, tb in zip(names, worker_tiers, strict=True)]
        _install_multikueue(manager, names)
        _wait_multikueue_active(manager, names, timeout, "the manager's")
        timings["multikueue_active"] = time.monotonic() - started
        return MultiCluster(manager=manager, workers=connected, timings=timings)
    except BaseException:
        for cp in reversed(planes):
            cp.stop()
        raise


@dataclass
class SecondManager(MultiCluster):
    """Another manager connected to some workers of a MultiCluster: its own control plane and Kueue, whose
    MultiKueue runs with another origin. The workers are shared: ``stop`` and ``delete_namespace`` touch only its
    own control plane."""

    origin: str = DEFAULT_SECOND_ORIGIN

    def delete_namespace(self, name: str) -> None:
        self.manager.control_plane.delete_namespace(name)

    def stop(self) -> None:
        self.manager.control_plane.stop()


def start_second_manager(
    mc: MultiCluster,
    workers: Sequence[str],
    *,
    origin: str = DEFAULT_SECOND_ORIGIN,
    worker_lost_timeout: str = WORKER_LOST_TIMEOUT,
    gc_interval: str = "10s",
    timeout: float = 300,
) -> SecondManager:
    """A second MultiKueue manager for ``workers`` of ``mc`` (by name): a tier B with no node and no Trainer, as
    ``start_multicluster``'s manager, whose Kueue runs with ``multiKueue.origin`` ``origin``, connected to those
    workers with its own Secrets, MultiKueueClusters, MultiKueueConfig, AdmissionCheck and ClusterQueue. The
    workers' grants to MultiKueue's principal are per worker CA, so they serve it as they serve the first manager.
    Returns once all of it is Active; on failure its control plane is stopped. Call from the main thread."""
    artifacts = mc.manager.control_plane.artifacts
    shared = [mc.worker(name) for name in workers]
    started = time.monotonic()
    cp = start_control_plane(new_run_dir(), artifacts)
    try:
        config = manager_kueue_config(worker_lost_timeout, gc_interval, origin)
        manager = start_tier_b(cp, 0, timeout, kueue_config=config, trainer=False)
        _store_kueue_config(manager)
        connected = [_connect(manager, w.name, w.tier_b) for w in shared]
        names = [w.name for w in connected]
        _install_multikueue(manager, names)
        _wait_multikueue_active(manager, names, timeout, "the second manager's")
        timings = {"multikueue_active": time.monotonic() - started}
        return SecondManager(manager=manager, workers=connected, timings=timings, origin=origin)
    except BaseException:
        cp.stop()
        raise
