"""The gate's calls to the API server: each one named and typed, a plain JSON object in and out, with a timeout,
made through the agent's one client (serving/client.py: the API's JSON, never kubernetes_asyncio's models; errors
are ``KubeError``) on ``contract.upstream``'s resources.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kubernetes_asyncio import client

from agent.constants import (
    ADMISSION_CHECKS,
    JOBSETS,
    REQUEST_TIMEOUT_SECONDS,
    TRAINJOBS,
    WORKLOADS,
)
from agent.runtime.events import EventRecorder
from agent.runtime.pod_lists import SharedPodLists
from contract import upstream
from contract.keys import ADMISSION_CHECK_CONTROLLER, LABEL_JOBSET_NAME
from contract.multicluster import is_fenced
from contract.objects import dig
from serving.client import Kube as Rest

Obj = dict[str, Any]


ALL_PODS = upstream.PODS.everywhere()
ALL_WORKLOADS = upstream.WORKLOADS.everywhere()
ALL_TRAINJOBS = upstream.TRAINJOBS.everywhere()
ALL_JOBSETS = upstream.JOBSETS.everywhere()


class Kube:
    """The API as the agent uses it, and its Event recorder (``instance`` names this replica in Events). Every read
    here is a fresh one: the watch-fed reads are the controller's (agent/runtime/caches.py ``Reads``)."""

    def __init__(
        self, api: client.ApiClient, *, instance: str = "", request_timeout: float = REQUEST_TIMEOUT_SECONDS
    ) -> None:
        self.api = api
        self.rest = Rest(api, timeout=request_timeout, unreachable=False)
        """The generic JSON client every call here is made with; a transport failure propagates as it is (a failed
        pass), not as a KubeError."""
        self.timeout = request_timeout
        self.events = EventRecorder(self.create_event, instance, self.patch_event)
        self.pod_lists = SharedPodLists(self._list_pods)

    # -- reads ------------------------------------------------------------------------------------

    async def get_workload(self, namespace: str, name: str) -> Obj | None:
        return await self.rest.get(upstream.WORKLOADS.path(namespace, name))

    async def our_checks(self) -> frozenset[str]:
        """Names of the AdmissionChecks whose controllerName is ours (several may share it), LISTed: the controller
        asks its AdmissionCheck watch instead once it has listed (agent/gate/context.py ``OurChecks``)."""
        listed = await self.rest.request("GET", upstream.ADMISSION_CHECKS.path())
        return frozenset(
            dig(ac, "metadata", "name")
            for ac in listed.get("items", [])
            if dig(ac, "spec", "controllerName") == ADMISSION_CHECK_CONTROLLER
        )

    async def get_admission_check(self, name: str) -> Obj | None:
        """One AdmissionCheck, fresh (MultiKueue mode: its parameters name the MultiKueueConfig)."""
        return await self.rest.get(upstream.ADMISSION_CHECKS.path(name=name))

    async def get_multikueue_config(self, name: str) -> Obj | None:
        """A MultiKueueConfig, fresh: its clusters are the workers a dispatch may have run on."""
        return await self.rest.get(upstream.MULTIKUEUE_CONFIGS.path(name=name))

    async def fenced_workers(self) -> frozenset[str]:
        """The workers an administrator fenced (their MultiKueueClusters, fresh): renewed nothing."""
        return frozenset(str(dig(c, "metadata", "name")) for c in await self.list_multikueue_clusters() if is_fenced(c))

    async def list_multikueue_clusters(self) -> list[Obj]:
        """Every MultiKueueCluster, fresh (one LIST): which workers an administrator fenced."""
        listed = await self.rest.request("GET", upstream.MULTIKUEUE_CLUSTERS.path())
        return list(listed.get("items", []))

    async def get_training_runtime(self, namespace: str, name: str) -> Obj | None:
        """A TrainJob's runtime copy (MultiKueue mode: its maxRestarts gives K)."""
        return await self.rest.get(upstream.TRAINING_RUNTIMES.path(namespace, name))

    async def get_trainjob(self, namespace: str, name: str) -> Obj | None:
        return await self.rest.get(upstream.TRAINJOBS.path(namespace, name))

    async def get_jobset(self, namespace: str, name: str) -> Obj | None:
        return await self.rest.get(upstream.JOBSETS.path(namespace, name))

    async def list_pods(self, namespace: str, jobset_name: str) -> list[Obj]:
        """The JobSet's pods: every pod labelled with its name, whatever execution it belongs to, from a
        consistent LIST issued after this call was made, which concurrent callers share (agent/runtime/pod_lists.py)."""
        return await self.pod_lists.get(namespace, jobset_name)

    async def _list_pods(self, namespace: str | None, selector: str) -> list[Obj]:
        """One consistent LIST (no resourceVersion) of the pods matching ``selector``; all namespaces on None."""
        path = upstream.PODS.path(namespace) if namespace is not None else ALL_PODS
        return list((await self.rest.request("GET", path, query=[("labelSelector", selector)])).get("items", []))

    async def get_job(self, namespace: str, name: str) -> Obj | None:
        """A batch/v1 Job (the link between a pod and its JobSet, agent/domain/pod_owners.py)."""
        return await self.rest.get(upstream.JOBS.path(namespace, name))

    async def get_node(self, name: str) -> Obj | None:
        return await self.rest.get(upstream.NODES.path(name=name))

    async def get_lease(self, namespace: str, name: str) -> Obj | None:
        return await self.rest.get(upstream.LEASES.path(namespace, name))

    async def list_leases(self, namespace: str, label_selector: str) -> list[Obj]:
        """The Leases of ``namespace`` with the label (one consistent LIST): on a worker, the manager's claims."""
        listed = await self.rest.request(
            "GET", upstream.LEASES.path(namespace), query=[("labelSelector", label_selector)]
        )
        return list(listed.get("items", []))

    # -- writes -----------------------------------------------------------------------------------

    async def patch_trainjob(
        self, namespace: str, name: str, ops: list[Mapping[str, Any]], *, status: bool = False
    ) -> Obj:
        """A JSON Patch; the caller's ops carry the uid and resourceVersion preconditions. ``status``: of the status
        subresource (only ever, on a MultiKueue manager, the release of a lost worker's quota:
        agent/multicluster/lost_quota.py)."""
        return await self.rest.json_patch(upstream.TRAINJOBS.path(namespace, name, "status" if status else None), ops)

    async def delete_trainjob(self, namespace: str, name: str, uid: str, resource_version: str) -> None:
        """Delete a TrainJob only if it is still the object read, as read (uid and resourceVersion preconditions):
        only ever, on a worker, MultiKueue's copy made from a stale view of the manager's TrainJob
        (agent/multicluster/copies.py). A TrainJob already gone is a 404, raised like any refusal."""
        options = {
            "preconditions": {"resourceVersion": resource_version, "uid": uid},
            "propagationPolicy": "Background",
        }
        await self.rest.request("DELETE", upstream.TRAINJOBS.path(namespace, name), body=options)

    async def patch_pod(self, namespace: str, name: str, ops: list[Mapping[str, Any]]) -> Obj:
        """A JSON Patch on a pod (only ever the removal of dispatch's finalizer); its test ops and the
        resourceVersion it writes back are its preconditions."""
        return await self.rest.json_patch(upstream.PODS.path(namespace, name), ops)

    async def patch_workload(self, namespace: str, name: str, ops: list[Mapping[str, Any]]) -> Obj:
        """A JSON Patch of a Workload (on a worker, the record of a copy's first admission and of the copy let start
        under it; on a manager, the stamp of a dispatch's A and the deactivation of a held Workload); the caller's ops
        carry the uid and resourceVersion preconditions."""
        return await self.rest.json_patch(upstream.WORKLOADS.path(namespace, name), ops)

    async def apply_workload_status(self, body: Mapping[str, Any]) -> Obj:
        """Server-side apply on workloads/status; the body's uid and resourceVersion are its preconditions."""
        meta = body["metadata"]
        return await self.rest.apply(upstream.WORKLOADS.path(meta["namespace"], meta["name"], "status"), body)

    async def patch_admission_check_status(self, name: str, ops: list[Mapping[str, Any]]) -> Obj:
        """A JSON Patch on admissionchecks/{name}/status; its test ops are its preconditions."""
        return await self.rest.json_patch(upstream.ADMISSION_CHECKS.path(name=name, subresource="status"), ops)

    async def create_event(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        return await self.rest.create(upstream.EVENTS.path(namespace), body)

    async def patch_event(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> Obj:
        """A JSON Patch of one of our Events (its count), preconditioned by ``ops``' own tests."""
        return await self.rest.json_patch(upstream.EVENTS.path(namespace, name), ops)

    async def create_lease(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        return await self.rest.create(upstream.LEASES.path(namespace), body)

    async def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> Obj:
        """A PUT carrying the resourceVersion read: 409 when anyone wrote the Lease since."""
        return await self.rest.replace(upstream.LEASES.path(namespace, name), body)

    # -- what the watches list and watch -----------------------------------------------------------

    def list_functions(self) -> dict[str, Callable[..., Awaitable[Any]]]:
        """The unread GET of each watched collection (all namespaces; serving/client.py ``collection``): those the
        controller enqueues from, and the TrainJobs and JobSets a pass reads from memory (agent/runtime/caches.py)."""
        return {
            ADMISSION_CHECKS: self.rest.collection(upstream.ADMISSION_CHECKS.path()),
            WORKLOADS: self.rest.collection(ALL_WORKLOADS),
            # Every pod a JobSet made; others never matter to the gate.
            "pods": self.rest.collection(ALL_PODS, label_selector=LABEL_JOBSET_NAME),
            "nodes": self.rest.collection(upstream.NODES.path()),
            TRAINJOBS: self.rest.collection(ALL_TRAINJOBS),
            JOBSETS: self.rest.collection(ALL_JOBSETS),
        }

    async def list_page(self, call: Callable[..., Awaitable[Any]], **kwargs: Any) -> Obj:
        return await self.rest.list_page(call, **kwargs)
