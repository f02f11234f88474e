"""The manager's reads of its workers for guarantee 4 (agent/multicluster/workers.py decides): the MultiKueue checks,
their MultiKueueConfigs and the MultiKueueClusters' fences on the manager, then each worker's labelled pods and their
nodes, with the agent's own credential for that worker. And its only writes there (agent/multicluster/replicas.py
decides): the replica of the job's runtime copy and the prologue's ConfigMap before a dispatch, and the deletion of the
replicas whose TrainJob is gone.

Every read is fresh (no cache): a fence, a config change and a pod that ended are seen by the next pass. Any
failure to read or prepare a worker is a hold that names it, never an approval.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from kubernetes_asyncio import client

from agent.constants import (
    ADMISSION_CHECKS,
    CLUSTER_QUEUES,
    JOBSETS,
    LOCAL_QUEUES,
    REQUEST_TIMEOUT_SECONDS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
)
from agent.domain import pod_owners
from agent.domain.decide import Blocker
from agent.domain.start import prologue_configmap_refusal
from agent.multicluster.contact_lease import contact_lease, contact_origin
from agent.multicluster.replicas import replica_blocker, unprepared
from agent.multicluster.worker_proof import WorkerProof, accesses, listed_checks
from agent.multicluster.workers import WorkerLook
from contract.claims import DEFAULT_ORIGIN, Want, claim_lease
from contract.keys import (
    CLAIM_PREFIX,
    FIELD_MANAGER,
    LABEL_CLAIM,
    LABEL_JOBSET_NAME,
    LABEL_REPLICA_OF,
    LEASE_MANAGER_CONTACT,
    LEASE_NAMESPACE,
)
from contract.objects import dig, labels
from contract.prologue import PROLOGUE_CONFIGMAP, prologue_configmap
from contract.upstream import (
    COORDINATION_GROUP,
    JOBSET_GROUP,
    JOBSET_VERSION,
    KUEUE_GROUP,
    KUEUE_VERSION,
    TRAINER_GROUP,
    TRAINER_VERSION,
)
from serving.client import KubeError
from serving.kube import api_client, or_none, read_json

Obj = dict[str, Any]

WORKER_RULES: Final[tuple[dict[str, Any], ...]] = (
    # The job's trainer pods on the worker: one LIST by the JobSet's label, in the job's namespace.
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    # Each labelled pod's Job (GET): the link to the JobSet that owns it (a label is not proof; agent/pod_owners.py).
    # And every Job of the JobSet's name (LIST by its label): one not finished may still make pods.
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list"]},
    # The nodes they are bound to (GET): a pod on a lost node is judged as on one cluster (docs/nodeloss.md).
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
    # The replicas of the runtime copies: made before a dispatch, listed and deleted once their TrainJob is gone.
    # The worker's policy dispatch-k8s-manager-agent confines the writes to dispatch's runtime copies.
    {"apiGroups": [TRAINER_GROUP], "resources": ["trainingruntimes"], "verbs": ["get", "list", "create", "delete"]},
    # The prologue's ConfigMap its pods mount: read by its one name, created where missing (the same policy
    # confines the create to it; RBAC cannot restrict a create by name).
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": [PROLOGUE_CONFIGMAP]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
    # Preflight's proof of the worker (agent/multicluster/worker_proof.py): the job's LocalQueue, its ClusterQueue and
    # the AdmissionChecks that lists (dispatch's worker-side check there, Active). Reads of queue configuration only.
    {"apiGroups": [KUEUE_GROUP], "resources": ["localqueues", "clusterqueues", "admissionchecks"], "verbs": ["get"]},
    # Status and Output on the manager follow the job to the worker MultiKueue runs it on (its Workload's
    # status.clusterName): MultiKueue's copy of the TrainJob and its JobSet (GET; the pods, Jobs and Nodes above),
    # and rank 0's log.
    {"apiGroups": [TRAINER_GROUP], "resources": ["trainjobs"], "verbs": ["get"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
)
"""The rights of the manager agent's credential on a worker, and nothing more, but for ``CONTACT_RULES``. The chart
grants them on a worker (role worker, ``multicluster.managerAgent``); the tests run under exactly these."""

CONTACT_RULES: Final[tuple[dict[str, Any], ...]] = (
    # The contact Lease it renews there (agent/multicluster/contact.py) and the claims (agent/multicluster/claims.py):
    # listed, read, created, renewed and deleted. RBAC cannot restrict a create or a LIST by name; the worker's policies
    # dispatch-k8s-manager-agent and dispatch-k8s-manager-contact confine its writes to the contact Lease and the
    # names starting dispatch-claim-, and let no one else write those.
    {
        "apiGroups": [COORDINATION_GROUP],
        "resources": ["leases"],
        "verbs": ["get", "list", "create", "update", "delete"],
    },
)
"""The manager agent's rights in the worker agent's Lease namespace only (a Role there, in the chart)."""


class WorkerClients:
    """One client per worker (its MultiKueueCluster's name), each from a kubeconfig file. The file is read again
    on every use: a rotated credential (a mounted Secret the kubelet updated) gets a new client at the next read,
    with no restart."""

    def __init__(
        self,
        kubeconfigs: Mapping[str, str | Path],
        request_timeout: float = REQUEST_TIMEOUT_SECONDS,
        *,
        lease_namespace: str = LEASE_NAMESPACE,
        origin: str = DEFAULT_ORIGIN,
    ):
        self.origin = origin
        """This manager's MultiKueue origin: the label of its contact Lease and claims on the workers."""
        self._files = {name: Path(path) for name, path in kubeconfigs.items()}
        self.lease_namespace = lease_namespace
        """Where the workers' agents read the contact Lease (their ``leaseNamespace``)."""
        self._clients: dict[str, tuple[bytes, client.ApiClient]] = {}
        self.timeout = request_timeout

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._files)

    async def client(self, worker: str) -> client.ApiClient:
        """The client for ``worker`` (the API's reads there go through it: agent/api/service.py)."""
        return await self._client(worker)

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

    async def look(self, worker: str, namespace: str, jobset_name: str, claim: str | None = None) -> WorkerLook:
        """What of the job ``worker`` shows: the claim ``claim`` (a Lease name) in the worker agents' Lease
        namespace, MultiKueue's copy of the TrainJob and its JobSet (by the job's name), every Job labelled with the
        JobSet's name, then the pods so labelled (consistent LISTs), the Jobs they name and the Nodes they are bound
        to (GETs; one not found is left out: gone). Each maker is read before what it makes (claim, copy, JobSet,
        Jobs, pods): one seen finished or absent made, before that read, every pod it will make, so the pods LIST
        after it lists them; read the other way, a pod made between the pods LIST and its Job's end would be
        missed."""
        core = client.CoreV1Api(api := await self._client(worker))
        batch, custom = client.BatchV1Api(api), client.CustomObjectsApi(api)
        opts = {"_preload_content": False, "_request_timeout": self.timeout}
        selector = f"{LABEL_JOBSET_NAME}={jobset_name}"
        lease = None
        if claim is not None:
            coordination = client.CoordinationV1Api(api)
            lease = await or_none(coordination.read_namespaced_lease(claim, self.lease_namespace, **opts))
        copy = await or_none(
            custom.get_namespaced_custom_object(
                TRAINER_GROUP, TRAINER_VERSION, namespace, TRAINJOBS, jobset_name, **opts
            )
        )
        jobset = await or_none(
            custom.get_namespaced_custom_object(JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSETS, jobset_name, **opts)
        )
        all_jobs = await read_json(batch.list_namespaced_job(namespace, label_selector=selector, **opts))
        listed = await read_json(core.list_namespaced_pod(namespace, label_selector=selector, **opts))
        pods = list(listed.get("items", []))
        jobs = await _found(pod_owners.job_names(pods), lambda j: batch.read_namespaced_job(j, namespace, **opts))
        names = sorted({n for p in pods if isinstance(n := dig(p, "spec", "nodeName"), str) and n})
        nodes = await _found(names, lambda n: core.read_node(n, **opts))
        return WorkerLook(pods, jobs, nodes, copy=copy, jobset=jobset, all_jobs=list(all_jobs.get("items", [])),
                          claim=lease)  # fmt: skip

    async def claims(self, worker: str, origin: str) -> list[Obj]:
        """The claims of this manager (``origin``) on ``worker`` (one LIST by their label, which the contact Lease
        carries too). A worker whose contact Lease another manager renews is refused (``_refuse_shared``): no claim
        of this manager's is renewed or deleted there."""
        coordination = client.CoordinationV1Api(await self._client(worker))
        listed = await read_json(
            coordination.list_namespaced_lease(
                self.lease_namespace, label_selector=LABEL_CLAIM,
                _preload_content=False, _request_timeout=self.timeout,
            )
        )  # fmt: skip
        items = list(listed.get("items", []))
        self._refuse_shared(next((i for i in items if dig(i, "metadata", "name") == LEASE_MANAGER_CONTACT), None))
        mine = [c for c in items if labels(c).get(LABEL_CLAIM) == origin]
        return [c for c in mine if str(dig(c, "metadata", "name")).startswith(CLAIM_PREFIX)]

    def _refuse_shared(self, contact: Mapping[str, Any] | None) -> None:
        """Raises when ``contact``, the worker's contact Lease, is another manager's (another MultiKueue origin): a
        worker serves one manager, so this one writes nothing there (no claim, no replica, no contact renewal) and
        deletes nothing of the other's; its dispatches there are held, its Preflight says why."""
        other = contact_origin(contact)
        if other is not None and other != self.origin:
            raise RuntimeError(f"the contact Lease there is renewed by another manager (MultiKueue origin {other})")

    async def _refuse_shared_worker(self, api: client.ApiClient) -> None:
        """``_refuse_shared`` on the contact Lease as read now (one GET)."""
        coordination = client.CoordinationV1Api(api)
        self._refuse_shared(
            await or_none(
                coordination.read_namespaced_lease(
                    LEASE_MANAGER_CONTACT, self.lease_namespace, _preload_content=False, _request_timeout=self.timeout
                )
            )
        )

    async def renew_claim(
        self, worker: str, have: Mapping[str, Any] | None, want: Want, origin: str, now: dt.datetime, duration: int
    ) -> None:
        """Create or renew (a PUT preconditioned on the resourceVersion read) the claim ``want`` on ``worker``."""
        coordination = client.CoordinationV1Api(await self._client(worker))
        create, body = claim_lease(have, want, namespace=self.lease_namespace, origin=origin, now=now,
                                   duration=duration)  # fmt: skip
        made = {"field_manager": FIELD_MANAGER, "_preload_content": False, "_request_timeout": self.timeout}
        if create:
            await read_json(coordination.create_namespaced_lease(self.lease_namespace, body, **made))
        else:
            await read_json(coordination.replace_namespaced_lease(want.name, self.lease_namespace, body, **made))

    async def delete_claim(self, worker: str, lease: Mapping[str, Any]) -> None:
        """Delete the claim ``lease`` on ``worker``, preconditioned on its uid (one not found is gone already)."""
        coordination = client.CoordinationV1Api(await self._client(worker))
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=dig(lease, "metadata", "uid")))
        await or_none(
            coordination.delete_namespaced_lease(
                dig(lease, "metadata", "name"), self.lease_namespace, body=body,
                _preload_content=False, _request_timeout=self.timeout,
            )
        )  # fmt: skip

    async def prepare(self, worker: str, want: Mapping[str, Any]) -> list[Blocker]:
        """``worker`` ready for the job: the replica ``want`` of its runtime copy and the prologue's ConfigMap in
        its namespace, each read and created where missing (a 409 is read again: a concurrent pass made it). What
        is there and is not as needed holds, named. A worker another manager renews the contact Lease of is refused
        before any write (``_refuse_shared``)."""
        api = await self._client(worker)
        await self._refuse_shared_worker(api)
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        opts = {"_preload_content": False, "_request_timeout": self.timeout}
        namespace, name = dig(want, "metadata", "namespace"), dig(want, "metadata", "name")
        made = {"field_manager": FIELD_MANAGER, **opts}

        def read_replica() -> Awaitable[Any]:
            return custom.get_namespaced_custom_object(
                TRAINER_GROUP, TRAINER_VERSION, namespace, TRAINING_RUNTIMES, name, **opts
            )

        def create_replica() -> Awaitable[Any]:
            return custom.create_namespaced_custom_object(
                TRAINER_GROUP, TRAINER_VERSION, namespace, TRAINING_RUNTIMES, dict(want), **made
            )

        have = await _read_or_create(read_replica, create_replica)
        blocker = replica_blocker(worker, want, have)
        configmap = await _read_or_create(
            lambda: core.read_namespaced_config_map(PROLOGUE_CONFIGMAP, namespace, **opts),
            lambda: core.create_namespaced_config_map(namespace, prologue_configmap(namespace), **made),
        )
        refusal = prologue_configmap_refusal(namespace, configmap)
        return [b for b in (blocker, unprepared(worker, refusal) if refusal else None) if b is not None]

    async def replicas(self, worker: str) -> list[Obj]:
        """Every replica on ``worker`` (one LIST, all namespaces, by ``LABEL_REPLICA_OF``), for the sweep. A worker
        another manager renews the contact Lease of is refused (``_refuse_shared``): its replicas of that manager's
        jobs have no TrainJob here, and are not this manager's to delete."""
        api = await self._client(worker)
        await self._refuse_shared_worker(api)
        custom = client.CustomObjectsApi(api)
        listed = await read_json(
            custom.list_cluster_custom_object(
                TRAINER_GROUP, TRAINER_VERSION, TRAINING_RUNTIMES, label_selector=LABEL_REPLICA_OF,
                _preload_content=False, _request_timeout=self.timeout,
            )
        )  # fmt: skip
        return list(listed.get("items", []))

    async def delete_replica(self, worker: str, replica: Mapping[str, Any]) -> None:
        """Delete ``replica`` on ``worker``, preconditioned on its uid (a replica made again since is kept)."""
        custom = client.CustomObjectsApi(await self._client(worker))
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=dig(replica, "metadata", "uid")))
        await or_none(
            custom.delete_namespaced_custom_object(
                TRAINER_GROUP, TRAINER_VERSION, dig(replica, "metadata", "namespace"),
                TRAINING_RUNTIMES, dig(replica, "metadata", "name"), body=body,
                _preload_content=False, _request_timeout=self.timeout,
            )
        )  # fmt: skip

    async def prove(self, worker: str, namespace: str, queue: str) -> WorkerProof:
        """What Preflight proves ``worker`` by (agent/multicluster/worker_proof.py): each right of WORKER_RULES asked
        with a SelfSubjectAccessReview, then the job's LocalQueue, its ClusterQueue and the AdmissionChecks that lists
        (GETs; one not found is None)."""
        api = await self._client(worker)
        custom, auth = client.CustomObjectsApi(api), client.AuthorizationV1Api(api)
        opts = {"_preload_content": False, "_request_timeout": self.timeout}
        denied = []
        rights = [*accesses(WORKER_RULES, namespace), *accesses(CONTACT_RULES, self.lease_namespace)]
        for access in rights:
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                    "spec": {"resourceAttributes": access.attributes()}}  # fmt: skip
            review = await read_json(auth.create_self_subject_access_review(body, **opts))
            if not dig(review, "status", "allowed"):
                denied.append((access, str(dig(review, "status", "reason") or "not allowed")))

        def get(plural: str, name: str) -> Awaitable[Any]:
            return custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, name, **opts)

        try:
            localqueue = await or_none(
                custom.get_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, LOCAL_QUEUES, queue, **opts)
            )
            cq = dig(localqueue, "spec", "clusterQueue")
            clusterqueue = await or_none(get(CLUSTER_QUEUES, cq)) if isinstance(cq, str) and cq else None
            checks = {n: await or_none(get(ADMISSION_CHECKS, n)) for n in listed_checks(clusterqueue)}
        except KubeError as exc:
            if exc.status != 403:
                raise
            # A right refused: the reviews above name it; the queue is reported unread, not missing.
            return WorkerProof(None, None, {}, tuple(denied), unread=exc.describe())
        coordination = client.CoordinationV1Api(api)
        try:
            contact = await or_none(
                coordination.read_namespaced_lease(LEASE_MANAGER_CONTACT, self.lease_namespace, **opts)
            )
        except KubeError as exc:
            if exc.status != 403:
                raise
            contact = None  # the reviews above name the right
        return WorkerProof(localqueue, clusterqueue, checks, tuple(denied), contact=contact)

    async def renew_contact(self, worker: str, duration: int) -> int | None:
        """Renew the contact Lease on ``worker`` (agent/multicluster/contact_lease.py ``contact_lease`` decides: a
        renewal, or a new epoch after a gap); the epoch it shows now. A conflict (another replica renewed meanwhile) is
        left to the next renewal."""
        namespace = self.lease_namespace
        coordination = client.CoordinationV1Api(await self._client(worker))
        opts = {"_preload_content": False, "_request_timeout": self.timeout}
        lease = await or_none(coordination.read_namespaced_lease(LEASE_MANAGER_CONTACT, namespace, **opts))
        self._refuse_shared(lease)
        create, body = contact_lease(lease, namespace=namespace, now=dt.datetime.now(dt.UTC), duration=duration,
                                     origin=self.origin)  # fmt: skip
        made = {"field_manager": FIELD_MANAGER, **opts}
        if create:
            written = await read_json(coordination.create_namespaced_lease(namespace, body, **made))
        else:
            written = await read_json(
                coordination.replace_namespaced_lease(LEASE_MANAGER_CONTACT, namespace, body, **made)
            )
        return dig(written, "spec", "leaseTransitions")

    async def close(self) -> None:
        for _, api in self._clients.values():
            await api.close()
        self._clients.clear()


async def _found(names: Iterable[str], get: Callable[[str], Awaitable[Any]]) -> dict[str, Obj]:
    """Each named object (GETs, one at a time), those not found left out; any other failure raises."""
    return {name: obj for name in names if (obj := await or_none(get(name))) is not None}


async def _read_or_create(read: Callable[[], Awaitable[Any]], create: Callable[[], Awaitable[Any]]) -> Obj | None:
    """The object as read, or as created where it was not found; read again after a 409 (None: gone again)."""
    found = await or_none(read())
    if found is not None:
        return found
    try:
        return await read_json(create())
    except KubeError as exc:
        if exc.status != 409:
            raise
    return await or_none(read())
