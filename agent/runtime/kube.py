"""The agent's calls to the API server: each one a plain JSON object in and out, with a timeout.

Objects are the API's JSON (camelCase dicts), never kubernetes_asyncio models: the pure modules read JSON
(agent/domain/node_loss.py refuses a model's snake_case dict), and a model would silently drop fields it does not
know. So every call is made with ``_preload_content=False`` and decoded here; note that the client then
does not raise on an error status itself, which ``serving.kube.read_json`` does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from kubernetes_asyncio import client

from agent.constants import (
    ADMISSION_CHECKS,
    JOBSETS,
    MULTIKUEUE_CLUSTERS,
    MULTIKUEUE_CONFIGS,
    REQUEST_TIMEOUT_SECONDS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
    WORKLOADS,
)
from agent.runtime.caches import Reads
from agent.runtime.events import EventRecorder
from agent.runtime.pod_lists import SharedPodLists
from contract.keys import ADMISSION_CHECK_CONTROLLER, FIELD_MANAGER, LABEL_JOBSET_NAME
from contract.multicluster import is_fenced
from contract.objects import dig
from contract.upstream import JOBSET_GROUP, JOBSET_VERSION, KUEUE_GROUP, KUEUE_VERSION, TRAINER_GROUP, TRAINER_VERSION
from serving.kube import or_none, read_json

JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

Obj = dict[str, Any]


class CheckNames(Protocol):
    """A watch-fed view of our AdmissionChecks (agent/domain/admission_check.py)."""

    @property
    def synced(self) -> bool: ...

    def ours(self) -> frozenset[str]: ...


class Kube:
    """The API as the agent uses it, and its Event recorder (``instance`` names this replica in Events).

    ``checks`` is set by the controller to its AdmissionCheck cache; without one (a test calling reconcile
    directly), our check names are LISTed on each call."""

    def __init__(
        self, api: client.ApiClient, *, instance: str = "", request_timeout: float = REQUEST_TIMEOUT_SECONDS
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.coordination = client.CoordinationV1Api(api)
        self.timeout = request_timeout
        self.checks: CheckNames | None = None
        self.events = EventRecorder(self.create_event, instance, self.patch_event)
        self.pod_lists = SharedPodLists(self._list_pods)
        self.reads = Reads(self)
        """A pass's reads of the Workload, TrainJob and JobSet: the watch caches when the controller feeds
        them (agent/runtime/caches.py), else GETs."""

    def _opts(self) -> dict[str, Any]:
        return {"_preload_content": False, "_request_timeout": self.timeout}

    # -- reads ------------------------------------------------------------------------------------

    async def get_workload(self, namespace: str, name: str) -> Obj | None:
        return await or_none(
            self.custom.get_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, WORKLOADS, name, **self._opts()
            )
        )

    async def our_checks(self) -> frozenset[str]:
        """Names of the AdmissionChecks whose controllerName is ours (several may share it)."""
        if self.checks is not None and self.checks.synced:
            return self.checks.ours()
        listed = await read_json(
            self.custom.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, ADMISSION_CHECKS, **self._opts())
        )
        return frozenset(
            dig(ac, "metadata", "name")
            for ac in listed.get("items", [])
            if dig(ac, "spec", "controllerName") == ADMISSION_CHECK_CONTROLLER
        )

    async def get_admission_check(self, name: str) -> Obj | None:
        """One AdmissionCheck, fresh (MultiKueue mode: its parameters name the MultiKueueConfig)."""
        return await or_none(
            self.custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, ADMISSION_CHECKS, name, **self._opts())
        )

    async def get_multikueue_config(self, name: str) -> Obj | None:
        """A MultiKueueConfig, fresh: its clusters are the workers a dispatch may have run on."""
        return await or_none(
            self.custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, MULTIKUEUE_CONFIGS, name, **self._opts())
        )

    async def fenced_workers(self) -> frozenset[str]:
        """The workers an administrator fenced (their MultiKueueClusters, fresh): renewed nothing."""
        return frozenset(str(dig(c, "metadata", "name")) for c in await self.list_multikueue_clusters() if is_fenced(c))

    async def list_multikueue_clusters(self) -> list[Obj]:
        """Every MultiKueueCluster, fresh (one LIST): which workers an administrator fenced."""
        listed = await read_json(
            self.custom.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, MULTIKUEUE_CLUSTERS, **self._opts())
        )
        return list(listed.get("items", []))

    async def get_training_runtime(self, namespace: str, name: str) -> Obj | None:
        """A TrainJob's runtime copy (MultiKueue mode: its maxRestarts gives K)."""
        return await or_none(
            self.custom.get_namespaced_custom_object(
                TRAINER_GROUP, TRAINER_VERSION, namespace, TRAINING_RUNTIMES, name, **self._opts()
            )
        )

    async def get_trainjob(self, namespace: str, name: str) -> Obj | None:
        return await or_none(
            self.custom.get_namespaced_custom_object(
                TRAINER_GROUP, TRAINER_VERSION, namespace, TRAINJOBS, name, **self._opts()
            )
        )

    async def get_jobset(self, namespace: str, name: str) -> Obj | None:
        return await or_none(
            self.custom.get_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSETS, name, **self._opts()
            )
        )

    async def list_pods(self, namespace: str, jobset_name: str) -> list[Obj]:
        """The JobSet's pods: every pod labelled with its name, whatever execution it belongs to, from a
        consistent LIST issued after this call was made, which concurrent callers share (agent/runtime/pod_lists.py)."""
        return await self.pod_lists.get(namespace, jobset_name)

    async def _list_pods(self, namespace: str | None, selector: str) -> list[Obj]:
        """One consistent LIST (no resourceVersion) of the pods matching ``selector``; all namespaces on None."""
        call = (
            self.core.list_namespaced_pod(namespace, label_selector=selector, **self._opts())
            if namespace is not None
            else self.core.list_pod_for_all_namespaces(label_selector=selector, **self._opts())
        )
        return list((await read_json(call)).get("items", []))

    async def get_job(self, namespace: str, name: str) -> Obj | None:
        """A batch/v1 Job (the link between a pod and its JobSet, agent/domain/pod_owners.py)."""
        return await or_none(self.batch.read_namespaced_job(name, namespace, **self._opts()))

    async def get_node(self, name: str) -> Obj | None:
        return await or_none(self.core.read_node(name, **self._opts()))

    async def get_lease(self, namespace: str, name: str) -> Obj | None:
        return await or_none(self.coordination.read_namespaced_lease(name, namespace, **self._opts()))

    async def list_leases(self, namespace: str, label_selector: str) -> list[Obj]:
        """The Leases of ``namespace`` with the label (one consistent LIST): on a worker, the manager's claims."""
        listed = await read_json(
            self.coordination.list_namespaced_lease(namespace, label_selector=label_selector, **self._opts())
        )
        return list(listed.get("items", []))

    # -- writes -----------------------------------------------------------------------------------

    async def patch_trainjob(
        self, namespace: str, name: str, ops: list[Mapping[str, Any]], *, status: bool = False
    ) -> Obj:
        """A JSON Patch; the caller's ops carry the uid and resourceVersion preconditions. ``status``: of the status
        subresource (only ever, on a MultiKueue manager, the release of a lost worker's quota:
        agent/multicluster/lost_quota.py)."""
        patch = (
            self.custom.patch_namespaced_custom_object_status if status else self.custom.patch_namespaced_custom_object
        )
        return await read_json(
            patch(
                TRAINER_GROUP,
                TRAINER_VERSION,
                namespace,
                TRAINJOBS,
                name,
                ops,
                field_manager=FIELD_MANAGER,
                _content_type=JSON_PATCH,
                **self._opts(),
            )
        )

    async def delete_trainjob(self, namespace: str, name: str, uid: str, resource_version: str) -> None:
        """Delete a TrainJob only if it is still the object read, as read (uid and resourceVersion preconditions):
        only ever, on a worker, MultiKueue's copy made from a stale view of the manager's TrainJob
        (agent/multicluster/copies.py)."""
        await read_json(
            self.custom.delete_namespaced_custom_object(
                TRAINER_GROUP,
                TRAINER_VERSION,
                namespace,
                TRAINJOBS,
                name,
                body=client.V1DeleteOptions(
                    preconditions=client.V1Preconditions(uid=uid, resource_version=resource_version),
                    propagation_policy="Background",
                ),
                **self._opts(),
            )
        )

    async def patch_pod(self, namespace: str, name: str, ops: list[Mapping[str, Any]]) -> Obj:
        """A JSON Patch on a pod (only ever the removal of dispatch's finalizer); its test ops and the
        resourceVersion it writes back are its preconditions."""
        return await read_json(
            self.core.patch_namespaced_pod(
                name, namespace, ops, field_manager=FIELD_MANAGER, _content_type=JSON_PATCH, **self._opts()
            )
        )

    async def patch_workload(self, namespace: str, name: str, ops: list[Mapping[str, Any]]) -> Obj:
        """A JSON Patch of a Workload (on a worker, the record of a copy's first admission and of the copy let start
        under it; on a manager, the stamp of a dispatch's A and the deactivation of a held Workload); the caller's ops
        carry the uid and resourceVersion preconditions."""
        return await read_json(
            self.custom.patch_namespaced_custom_object(
                KUEUE_GROUP,
                KUEUE_VERSION,
                namespace,
                WORKLOADS,
                name,
                ops,
                field_manager=FIELD_MANAGER,
                _content_type=JSON_PATCH,
                **self._opts(),
            )
        )

    async def apply_workload_status(self, body: Mapping[str, Any]) -> Obj:
        """Server-side apply on workloads/status; the body's uid and resourceVersion are its preconditions."""
        meta = body["metadata"]
        return await read_json(
            self.custom.patch_namespaced_custom_object_status(
                KUEUE_GROUP,
                KUEUE_VERSION,
                meta["namespace"],
                WORKLOADS,
                meta["name"],
                body,
                field_manager=FIELD_MANAGER,
                force=True,
                _content_type=APPLY_PATCH,
                **self._opts(),
            )
        )

    async def patch_admission_check_status(self, name: str, ops: list[Mapping[str, Any]]) -> Obj:
        """A JSON Patch on admissionchecks/{name}/status; its test ops are its preconditions."""
        return await read_json(
            self.custom.patch_cluster_custom_object_status(
                KUEUE_GROUP,
                KUEUE_VERSION,
                ADMISSION_CHECKS,
                name,
                ops,
                field_manager=FIELD_MANAGER,
                _content_type=JSON_PATCH,
                **self._opts(),
            )
        )

    async def create_event(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        return await read_json(
            self.core.create_namespaced_event(namespace, body, field_manager=FIELD_MANAGER, **self._opts())
        )

    async def patch_event(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> Obj:
        """A JSON Patch of one of our Events (its count), preconditioned by ``ops``' own tests."""
        return await read_json(
            self.core.patch_namespaced_event(
                name, namespace, ops, field_manager=FIELD_MANAGER, _content_type=JSON_PATCH, **self._opts()
            )
        )

    async def create_lease(self, namespace: str, body: Mapping[str, Any]) -> Obj:
        return await read_json(
            self.coordination.create_namespaced_lease(namespace, body, field_manager=FIELD_MANAGER, **self._opts())
        )

    async def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> Obj:
        """A PUT carrying the resourceVersion read: 409 when anyone wrote the Lease since."""
        return await read_json(
            self.coordination.replace_namespaced_lease(
                name, namespace, body, field_manager=FIELD_MANAGER, **self._opts()
            )
        )

    # -- what the watches list and watch -----------------------------------------------------------

    def list_functions(self) -> dict[str, Callable[..., Awaitable[Any]]]:
        """kubernetes_asyncio list calls, one per watched collection (all namespaces): those the controller
        enqueues from, and the TrainJobs and JobSets a pass reads from memory (agent/runtime/caches.py)."""

        def of(group: str, version: str, plural: str) -> Callable[..., Awaitable[Any]]:
            def call(**kwargs: Any) -> Awaitable[Any]:
                return self.custom.list_cluster_custom_object(group, version, plural, **kwargs)

            return call

        def pods(**kwargs: Any) -> Awaitable[Any]:
            # Every pod a JobSet made; others never matter to the gate.
            return self.core.list_pod_for_all_namespaces(label_selector=LABEL_JOBSET_NAME, **kwargs)

        return {
            ADMISSION_CHECKS: of(KUEUE_GROUP, KUEUE_VERSION, ADMISSION_CHECKS),
            WORKLOADS: of(KUEUE_GROUP, KUEUE_VERSION, WORKLOADS),
            "pods": pods,
            "nodes": self.core.list_node,
            TRAINJOBS: of(TRAINER_GROUP, TRAINER_VERSION, TRAINJOBS),
            JOBSETS: of(JOBSET_GROUP, JOBSET_VERSION, JOBSETS),
        }

    async def list_page(self, call: Callable[..., Awaitable[Any]], **kwargs: Any) -> Obj:
        return await read_json(call(**kwargs, **self._opts()))
