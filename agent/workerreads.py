"""The manager's reads of its workers for guarantee 4 (agent/workers.py decides): the MultiKueue checks, their
MultiKueueConfigs and the MultiKueueClusters' fences on the manager, then each worker's labelled pods and their
nodes, with the agent's own read-only credential for that worker.

Every read is fresh (no cache): a fence, a config change and a pod that ended are seen by the next pass. Any
failure to read a worker is a hold that names it, never an approval.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from agent import podowners
from agent.constants import REQUEST_TIMEOUT_SECONDS
from agent.gate import Blocker
from agent.kube import Kube, or_none
from agent.workers import WorkerLook, plan_workers, unreadable, worker_blockers
from contract.keys import LABEL_JOBSET_NAME
from contract.multicluster import listed_multikueue_checks, multikueue_config_of
from contract.objects import dig
from serving.kube import api_client, describe_api_error, read_json

log = logging.getLogger(__name__)

Obj = dict[str, Any]

WORKER_READER_RULES: Final[tuple[dict[str, Any], ...]] = (
    # The job's trainer pods on the worker: one LIST by the JobSet's label, in the job's namespace.
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    # Each labelled pod's Job (GET): the link to the JobSet that owns it (a label is not proof; agent/podowners.py).
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]},
    # The nodes they are bound to (GET): a pod on a lost node is judged as on one cluster (docs/nodeloss.md).
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
)
"""The rights of the manager agent's credential on a worker, and nothing more: it writes nothing there. The
chart grants them on a worker (role worker, ``multicluster.managerAgent``); the tests run under exactly these."""


class WorkerClients:
    """One read-only client per worker (its MultiKueueCluster's name), each from a kubeconfig file. The file is
    read again on every use: a rotated credential (a mounted Secret the kubelet updated) gets a new client at the
    next read, with no restart."""

    def __init__(self, kubeconfigs: Mapping[str, str | Path], request_timeout: float = REQUEST_TIMEOUT_SECONDS):
        self._files = {name: Path(path) for name, path in kubeconfigs.items()}
        self._clients: dict[str, tuple[bytes, client.ApiClient]] = {}
        self.timeout = request_timeout

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._files)

    async def _client(self, worker: str) -> client.ApiClient:
        path = self._files[worker]
        content = path.read_bytes()
        held = self._clients.get(worker)
        if held is not None and held[0] == content:
            return held[1]
        api = await api_client(str(path))
        if held is not None:
            await held[1].close()
        self._clients[worker] = (content, api)
        return api

    async def look(self, worker: str, namespace: str, jobset_name: str) -> WorkerLook:
        """The pods labelled with the JobSet's name in ``namespace`` on ``worker`` (a consistent LIST), the Jobs
        they name and the Nodes they are bound to (GETs; one not found is left out: gone)."""
        core = client.CoreV1Api(api := await self._client(worker))
        batch = client.BatchV1Api(api)
        opts = {"_preload_content": False, "_request_timeout": self.timeout}
        listed = await read_json(
            core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOBSET_NAME}={jobset_name}", **opts)
        )
        pods = list(listed.get("items", []))
        jobs = await _found(podowners.job_names(pods), lambda j: batch.read_namespaced_job(j, namespace, **opts))
        names = sorted({n for p in pods if isinstance(n := dig(p, "spec", "nodeName"), str) and n})
        nodes = await _found(names, lambda n: core.read_node(n, **opts))
        return WorkerLook(pods, jobs, nodes)

    async def close(self) -> None:
        for _, api in self._clients.values():
            await api.close()
        self._clients.clear()


async def _found(names: Iterable[str], get: Callable[[str], Awaitable[Any]]) -> dict[str, Obj]:
    """Each named object (GETs, one at a time), those not found left out; any other failure raises."""
    return {name: obj for name in names if (obj := await or_none(get(name))) is not None}


async def look_at_workers(
    kube: Kube,
    workers: WorkerClients | None,
    workload: Mapping[str, Any],
    multikueue: Collection[str],
    jobset_name: str,
    taints: Sequence[str],
) -> list[Blocker]:
    """What on the workers holds a dispatch of ``workload`` (in MultiKueue mode; ``multikueue``: the MultiKueue
    checks' names): the pods that may still run there, the workers that cannot be read or have no credential,
    and MultiKueue checks whose workers cannot be known. Empty: nothing of an earlier execution may run on any
    worker."""
    listed = listed_multikueue_checks(workload, multikueue)
    checks = dict(zip(listed, await asyncio.gather(*(kube.get_admission_check(n) for n in listed)), strict=True))
    config_names = sorted({c for ac in checks.values() if (c := multikueue_config_of(ac)) is not None})
    found = await asyncio.gather(*(kube.get_multikueue_config(n) for n in config_names))
    configs = dict(zip(config_names, found, strict=True))
    plan = plan_workers(checks, configs, await kube.list_multikueue_clusters(), workers.names if workers else ())
    namespace = dig(workload, "metadata", "namespace")

    async def read(worker: str) -> list[Blocker]:
        assert workers is not None  # plan_workers reads only workers with a credential
        try:
            seen = await workers.look(worker, namespace, jobset_name)
        except ApiException as exc:
            return [unreadable(worker, describe_api_error(exc))]
        except Exception as exc:  # any failure to read a worker is a hold, never an approval
            return [unreadable(worker, f"{type(exc).__name__}: {exc}".rstrip(": "))]
        return worker_blockers(worker, jobset_name, seen, taints)

    held = await asyncio.gather(*(read(w) for w in plan.read))
    if plan.fenced:
        log.debug("fenced worker(s) not read: %s", ", ".join(plan.fenced))
    return [*plan.blockers, *(b for found in held for b in found)]
