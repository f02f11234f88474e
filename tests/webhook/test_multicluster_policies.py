"""The MultiKueue roles' policies on the real API server (docs/multicluster.md; no webhook, no controller):

* role manager: nothing of a dispatch job runs there. The create of its JobSet, Job or pod is refused to
  everyone, and passes in the other roles;
* role worker: the manager's MultiKueue creates and deletes its copies of dispatch's TrainJobs and Workloads
  (Kueue's origin label on them), updates those Workloads and their status, and nothing more. A stranger and
  Kueue act as they did before (Kueue creates no object with dispatch's keys). The manager's dispatch agent
  creates and deletes the replicas of runtime copies and creates the prologue's ConfigMap, and nothing more.

Every principal acts through impersonation (the admin's right) with cluster-admin's RBAC, so what one may do and
another may not is the policies' doing. Writes are dry runs: admission runs, nothing is stored.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from ulid import ULID

from agent.multicluster.contact_lease import contact_lease
from contract.claims import Want, claim_lease, claim_name
from contract.keys import (
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_ADMISSION_STARTED,
    ANNOTATION_OPENED,
    ANNOTATION_UNVERIFIED,
    LABEL_REPLICA_OF,
    LEASE_MANAGER_CONTACT,
    UNVERIFIED_TRUE,
)
from contract.multicluster import MULTIKUEUE_MANAGED_BY, MULTIKUEUE_ORIGIN_LABEL, ROLE_MANAGER, ROLE_SINGLE, ROLE_WORKER
from contract.prologue import prologue_configmap
from contract.trainjob import build_runtime_copy, build_trainjob
from harness.cluster import ControlPlane
from harness.fixtures import runtime, submission
from harness.kube_http import ApiError, KubeHttp
from harness.principals import bound_here
from webhook.config import Config, Principals
from webhook.policies import admission_policies
from webhook.rules.multicluster import MANAGER_AGENT_MESSAGE, MANAGER_CONTACT_MESSAGE, MANAGER_RUNS_NOTHING_MESSAGE

pytestmark = pytest.mark.cluster
RBAC = "rbac.authorization.k8s.io/v1"
MERGE = "application/merge-patch+json"
DISPATCH, KUEUE, MULTIKUEUE, STRANGER = "dispatch", "kueue", "multikueue", "stranger"
MANAGER_AGENT = "manager-agent"
PRINCIPALS = (DISPATCH, KUEUE, MULTIKUEUE, STRANGER, MANAGER_AGENT)
DRY = {"dryRun": "All"}


def _user(who: str) -> str:
    return f"dispatch-mc-test:{who}"


def _config(role: str) -> Config:
    """dispatch, Kueue and (in role worker) MultiKueue as the impersonated users."""
    return Config(
        dispatch=Principals(usernames=(_user(DISPATCH),)),
        kueue=Principals(usernames=(_user(KUEUE),)),
        multiclusterRole=role,
        multikueue=Principals(usernames=(_user(MULTIKUEUE),)) if role == ROLE_WORKER else Principals(),
        managerAgent=Principals(usernames=(_user(MANAGER_AGENT),)) if role == ROLE_WORKER else Principals(),
    )


@dataclass
class Armed:
    role: str
    namespace: str
    clients: dict[str, KubeHttp]
    admin: KubeHttp
    stored: dict[str, dict[str, Any]]
    policies: list[str]
    """The names of the ValidatingAdmissionPolicies installed."""


def _arm(
    cp: ControlPlane, config: Config, *, owners_too: bool, before: Callable[[str], dict[str, Any]] = lambda ns: {}
) -> Iterator[Armed]:
    """A namespace of its own, the objects ``before`` makes there (stored by the admin before any policy), the
    policies of ``config`` bound to it (renamed for this test), and a client per principal, each allowed by RBAC
    to do anything."""
    namespace = cp.create_namespace(f"mc-{config.multicluster_role or 'single'}")
    cp.ensure_service_account(namespace, "default")  # no controller makes it in tier A; pods need it
    stored = {key: cp.admin.create(obj) for key, obj in before(namespace).items()}
    suffix = secrets.token_hex(3)
    binding = f"mc-test-{suffix}"
    cp.admin.create({
        "apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": binding},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": _user(w)} for w in PRINCIPALS],
    })  # fmt: skip
    docs = [
        d
        for d in admission_policies(config, namespace="dispatch-system", owners_too=owners_too)
        if d["kind"].startswith("Validating")
    ]
    for doc in bound_here(docs, namespace, suffix):
        cp.admin.create(doc)
    clients = {w: KubeHttp(cp.admin_credentials, impersonate=(_user(w), None)) for w in PRINCIPALS}
    names = [d["metadata"]["name"] for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    yield Armed(config.multicluster_role, namespace, clients, cp.admin, stored, names)
    for doc in reversed(docs):
        cp.admin.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])
    cp.admin.delete(RBAC, "ClusterRoleBinding", binding)
    cp.delete_namespace(namespace)


def _refusal(call: Callable[[], Any]) -> str | None:
    """None when admitted, else the API server's refusal."""
    try:
        call()
    except ApiError as err:
        if err.status != 403:
            raise
        return json.loads(err.body)["message"]
    return None


def _enforced(call: Callable[[], Any], seconds: float = 30) -> str:
    """Policies load asynchronously, each on its own: the refusal of ``call`` (a dry run) once it comes."""
    deadline = time.monotonic() + seconds
    while True:
        refusal = _refusal(call)
        if refusal is not None:
            return refusal
        assert time.monotonic() < deadline, "not refused within 30 s"
        time.sleep(0.2)


def _create(http: KubeHttp, obj: dict[str, Any]) -> Callable[[], Any]:
    path = http.object_path(obj).rsplit("/", 1)[0]
    return lambda: http.request("POST", path, obj, query=DRY)


def _name() -> str:
    return f"dj-{str(ULID()).lower()}-s1"


def _pod_spec() -> dict[str, Any]:
    return {"restartPolicy": "Never", "containers": [{"name": "node", "image": "registry.invalid/trainer"}]}


def _children(namespace: str, name: str) -> dict[str, dict[str, Any]]:
    """A dispatch job's JobSet, Job and pod, known by their names and JobSet's label (as the owner policies know
    them), as Trainer, JobSet and the Job controller would create them."""
    jobset_label = {"jobset.sigs.k8s.io/jobset-name": name}
    replicated = {"name": "node", "replicas": 1, "template": {"spec": {"template": {"spec": _pod_spec()}}}}
    return {
        "jobsets": {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"suspend": True, "replicatedJobs": [replicated]},
        },
        "jobs": {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"{name}-node-0", "namespace": namespace, "labels": jobset_label},
            "spec": {"suspend": True, "template": {"spec": _pod_spec()}},
        },
        "pods": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{name}-node-0-0-abcde", "namespace": namespace, "labels": jobset_label},
            "spec": _pod_spec(),
        },
    }


# --- role manager: nothing runs there ---------------------------------------------------------------------


@pytest.fixture(params=[ROLE_MANAGER, ROLE_SINGLE, ROLE_WORKER])
def field_rules(request, control_plane) -> Iterator[Armed]:
    # The field rules and the manager's policy, without the owner policies: here the admin plays every owner.
    yield from _arm(control_plane, _config(request.param), owners_too=False)


def _wait_loaded(armed: Armed) -> None:
    """The field rules are loaded once a stranger's dispatch key on a runtime is refused."""
    canary = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": "canary", "namespace": armed.namespace, "labels": {"dispatch.phpboyscout.uk/x": "y"}},
        "spec": {"template": {"spec": {"replicatedJobs": []}}},
    }
    assert "only dispatch adds" in _enforced(_create(armed.clients[STRANGER], canary))


def test_a_manager_refuses_a_dispatch_jobs_jobset_job_and_pod_to_everyone_and_the_other_roles_do_not(field_rules):
    armed = field_rules
    manager = armed.role == ROLE_MANAGER
    _wait_loaded(armed)
    for resource, obj in _children(armed.namespace, _name()).items():
        for http in (armed.admin, armed.clients[DISPATCH], armed.clients[STRANGER]):
            if manager:
                refusal = _enforced(_create(http, obj))
                assert MANAGER_RUNS_NOTHING_MESSAGE in refusal, (resource, refusal)
                assert obj["metadata"]["name"] in refusal
            else:
                assert _refusal(_create(http, obj)) is None, resource
    # Someone else's: never this policy's business.
    other = _children(armed.namespace, "resnet")
    for obj in other.values():
        assert _refusal(_create(armed.admin, obj)) is None


# --- role worker: MultiKueue's principal ----------------------------------------------------------------------


def _worker_objects(namespace: str) -> dict[str, dict[str, Any]]:
    return {
        "copy": _trainjob(namespace, copy=True),
        "own": _trainjob(namespace, copy=False),
        "workload copy": _workload(namespace, copy=True),
        "own workload": _workload(namespace, copy=False),
        "replica": _runtime_copy(namespace, replica=True),
        "own runtime copy": _runtime_copy(namespace, replica=False),
        "contact lease": contact_lease(None, namespace=namespace, now=dt.datetime.now(dt.UTC), duration=60)[1],
        "claim": claim_lease(None, Want("w", claim_name(str(uuid.uuid4())), "4/u", f"{namespace}/j"),
                             namespace=namespace, origin="manager", now=dt.datetime.now(dt.UTC), duration=60)[1],
    }  # fmt: skip


@pytest.fixture(scope="module")
def worker(control_plane) -> Iterator[Armed]:
    for armed in _arm(control_plane, _config(ROLE_WORKER), owners_too=True, before=_worker_objects):
        # Policies load asynchronously, each on its own: wait for the three that decide here, each by a write
        # that it alone refuses (DELETE: the owner policies; Kueue's dispatch label: the reserved keys).
        stranger, kueue = armed.clients[STRANGER], armed.clients[KUEUE]
        for obj in (armed.stored["own"], armed.stored["own workload"]):
            assert "DELETE is made only by" in _enforced(_delete(stranger, obj))
        label = {"metadata": {"labels": {"dispatch.phpboyscout.uk/probe": "x"}}}
        assert "only dispatch adds" in _enforced(_patch(kueue, armed.stored["own"], label))
        yield armed


def _delete(http: KubeHttp, obj: dict[str, Any]) -> Callable[[], Any]:
    return lambda: http.request("DELETE", http.object_path(obj), query=DRY)


def _patch(http: KubeHttp, obj: dict[str, Any], body: dict[str, Any], sub: str = "") -> Callable[[], Any]:
    path = http.object_path(obj) + (f"/{sub}" if sub else "")
    return lambda: http.request("PATCH", path, body, query=DRY, content_type=MERGE)


def _refused_as_not_its_own(message: str) -> bool:
    """Refused by an owner policy, or by the reserved keys (either may answer first when both refuse)."""
    return "belongs to a dispatch job" in message or "only dispatch adds" in message


def _trainjob(namespace: str, *, copy: bool) -> dict[str, Any]:
    """A dispatch TrainJob, opened, with A, the floor and the record of the previous start, as MultiKueue copies it
    to a worker (``copy``: with its origin label) or as dispatch created it (without)."""
    tj = build_trainjob(submission(namespace=namespace, job_id=str(ULID())), runtime()["spec"])
    annotations = tj["metadata"]["annotations"]
    annotations.pop(ANNOTATION_ADMISSION_GATED_BY, None)
    annotations |= {ANNOTATION_OPENED: "true", ANNOTATION_ADMISSION_FLOOR: "3", ANNOTATION_ADMISSION_STARTED: "1"}
    if copy:
        tj["metadata"]["labels"][MULTIKUEUE_ORIGIN_LABEL] = "manager"
        annotations[ANNOTATION_UNVERIFIED] = UNVERIFIED_TRUE  # as dispatch's mutating webhook or mark-copy leaves it
    return tj


def _runtime_copy(namespace: str, *, replica: bool) -> dict[str, Any]:
    """A dispatch runtime copy, as the manager's agent replicates it to a worker (``replica``: with replica-of) or
    as dispatch made it there."""
    made = build_runtime_copy(submission(namespace=namespace, job_id=str(ULID())), runtime())
    if replica:
        made["metadata"]["labels"][LABEL_REPLICA_OF] = str(uuid.uuid4())
    return made


def _workload(namespace: str, *, copy: bool, job: str | None = None) -> dict[str, Any]:
    """The Workload of a dispatch TrainJob (dispatch's key on it), as MultiKueue copies it (``copy``: its origin
    label; no owner) or as Kueue made it."""
    labels = {MULTIKUEUE_ORIGIN_LABEL: "manager"} if copy else {}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"trainjob-{job or _name()}-1a2b3",
            "namespace": namespace,
            "labels": labels,
            "annotations": {ANNOTATION_OPENED: "true"},
        },
        "spec": {"queueName": "q", "podSets": [{"name": "node", "count": 1, "template": {"spec": _pod_spec()}}]},
    }


def test_on_a_worker_multikueue_creates_its_copies_and_a_stranger_and_kueue_do_not_create_a_trainjob(worker):
    ns, c = worker.namespace, worker.clients
    copy = _trainjob(ns, copy=True)
    # Its copy of a TrainJob, with dispatch's keys, A, the floor and admission-started as the manager left them.
    assert _refusal(_create(c[MULTIKUEUE], copy)) is None
    # Unmarked (no mutation of dispatch's ran): refused, it could start with an earlier dispatch's A.
    unmarked = _trainjob(ns, copy=True)
    del unmarked["metadata"]["annotations"][ANNOTATION_UNVERIFIED]
    assert f"marked {ANNOTATION_UNVERIFIED}" in _enforced(_create(c[MULTIKUEUE], unmarked))
    assert _refused_as_not_its_own(_enforced(_create(c[STRANGER], copy)))
    assert _refused_as_not_its_own(_enforced(_create(c[KUEUE], copy)))
    # Not its copy: no origin label.
    assert _refused_as_not_its_own(_enforced(_create(c[MULTIKUEUE], _trainjob(ns, copy=False))))
    # Its copies of Workloads, with dispatch's keys: MultiKueue creates them. Kueue creates Workloads, but the
    # exemption for dispatch's keys is MultiKueue's copy's alone; a stranger creates none.
    workload = _workload(ns, copy=True)
    assert _refusal(_create(c[MULTIKUEUE], workload)) is None
    assert "only dispatch adds" in _enforced(_create(c[KUEUE], workload))
    assert _refused_as_not_its_own(_enforced(_create(c[STRANGER], workload)))
    assert _refused_as_not_its_own(_enforced(_create(c[MULTIKUEUE], _workload(ns, copy=False))))


def test_on_a_worker_multikueue_deletes_its_copies_only(worker):
    c, stored = worker.clients, worker.stored
    assert _refusal(_delete(c[MULTIKUEUE], stored["copy"])) is None
    assert _refusal(_delete(c[MULTIKUEUE], stored["workload copy"])) is None
    assert _refusal(_delete(c[KUEUE], stored["copy"])) is None
    assert "DELETE is made only by" in _enforced(_delete(c[MULTIKUEUE], stored["own"]))
    assert "DELETE is made only by" in _enforced(_delete(c[MULTIKUEUE], stored["own workload"]))
    assert "DELETE is made only by" in _enforced(_delete(c[STRANGER], stored["copy"]))


def test_on_a_worker_multikueue_changes_nothing_of_a_trainjob_after_its_create(worker):
    mk, copy = worker.clients[MULTIKUEUE], worker.stored["copy"]
    floor = {"metadata": {"annotations": {ANNOTATION_ADMISSION_FLOOR: "9"}}}
    assert _enforced(_patch(mk, copy, floor))
    assert "UPDATE is made only by" in _enforced(_patch(mk, copy, {"metadata": {"labels": {"touched": "yes"}}}))
    assert _enforced(_patch(mk, copy, {"spec": {"suspend": False}}))


def test_on_a_worker_multikueue_updates_its_workload_copies_as_it_does_and_no_dispatch_key(worker):
    mk, wl = worker.clients[MULTIKUEUE], worker.stored["workload copy"]
    # RemoveRemoteObjects: Kueue's resource-in-use finalizer off before the delete; a priority copied from the
    # manager's Workload.
    assert _refusal(_patch(mk, wl, {"metadata": {"finalizers": None}, "spec": {"priority": 5}})) is None
    # Its status (the preemption gate it opens): a write that leaves dispatch's check alone passes.
    assert _refusal(_patch(mk, wl, {"status": {"conditions": []}}, "status")) is None
    # dispatch's keys are dispatch's, and dispatch's check is set Ready by dispatch alone.
    assert "only dispatch adds" in _enforced(_patch(mk, wl, {"metadata": {"annotations": {ANNOTATION_OPENED: "no"}}}))
    ready = {
        "name": "dispatch-admission",
        "state": "Ready",
        "message": "",
        "lastTransitionTime": "2026-12-01T10:00:00Z",
    }
    assert "sets its check Ready" in _enforced(_patch(mk, wl, {"status": {"admissionChecks": [ready]}}, "status"))
    # Not its copy: Kueue's own Workload.
    own = worker.stored["own workload"]
    assert "UPDATE is made only by" in _enforced(_patch(mk, own, {"spec": {"priority": 5}}))


def test_on_a_worker_multikueue_creates_no_other_kind_of_a_dispatch_job(worker):
    ns, c = worker.namespace, worker.clients
    for resource, obj in _children(ns, _name()).items():
        obj["metadata"].setdefault("labels", {})[MULTIKUEUE_ORIGIN_LABEL] = "manager"
        assert "CREATE is made only by" in _enforced(_create(c[MULTIKUEUE], obj)), resource


# --- role manager: Kueue's MultiKueue copies the worker's TrainJob status back ------------------------------


def test_on_a_worker_the_manager_s_agent_writes_only_replicas_and_the_prologue_s_configmap(worker):
    ns, c, stored = worker.namespace, worker.clients, worker.stored
    agent = c[MANAGER_AGENT]
    plain = _runtime_copy(ns, replica=False)
    plain["metadata"] = {"name": "not-dispatch-s", "namespace": ns}
    # Refused first: each waits for the policies to load.
    assert MANAGER_AGENT_MESSAGE in _enforced(_create(agent, plain))  # no other TrainingRuntime
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": ns}}
    assert MANAGER_AGENT_MESSAGE in _enforced(_create(agent, other))  # no other ConfigMap
    # Not a replica: its own policy and the owner policy both refuse (either may answer first).
    for refusal in (_enforced(_create(agent, _runtime_copy(ns, replica=False))),
                    _enforced(_delete(agent, stored["own runtime copy"]))):  # fmt: skip
        assert _refused_as_not_its_own(refusal) or MANAGER_AGENT_MESSAGE in refusal, refusal
    assert _refused_as_not_its_own(_enforced(_create(c[STRANGER], _runtime_copy(ns, replica=True))))
    assert _enforced(_patch(agent, stored["replica"], {"metadata": {"annotations": {"x": "y"}}}))  # no update
    # Its own: the create of a replica, carrying the copy's keys; its delete; the prologue's ConfigMap.
    assert _refusal(_create(agent, _runtime_copy(ns, replica=True))) is None
    assert _refusal(_delete(agent, stored["replica"])) is None
    assert _refusal(_create(agent, prologue_configmap(ns))) is None


def _manager_objects(namespace: str) -> dict[str, dict[str, Any]]:
    managed = _trainjob(namespace, copy=False)
    managed["spec"]["managedBy"] = MULTIKUEUE_MANAGED_BY
    return {"managed": managed, "own": _trainjob(namespace, copy=False)}


def test_on_a_manager_kueue_and_dispatch_write_the_status_of_the_trainjobs_multikueue_manages_and_of_no_other(
    control_plane,
):
    for armed in _arm(control_plane, _config(ROLE_MANAGER), owners_too=True, before=_manager_objects):
        c, managed, own = armed.clients, armed.stored["managed"], armed.stored["own"]
        status = {"status": {"conditions": []}}
        # Trainer's own write of a TrainJob's status, refused to Kueue once the owner policy is loaded.
        refusal = _enforced(_patch(c[KUEUE], own, status, "status"))
        assert "UPDATE status is made only by Trainer, Kueue's MultiKueue (the TrainJobs it manages)" in refusal
        # MultiKueue's copy of the worker's status onto the TrainJob it manages.
        assert _refusal(_patch(c[KUEUE], managed, status, "status")) is None
        assert "UPDATE status is made only by" in _enforced(_patch(c[STRANGER], managed, status, "status"))
        # dispatch's release of a lost worker's quota (agent/multicluster/lost_quota.py): on the TrainJobs MultiKueue manages only.
        assert _refusal(_patch(c[DISPATCH], managed, status, "status")) is None
        assert "UPDATE status is made only by" in _enforced(_patch(c[DISPATCH], own, status, "status"))


def test_on_a_worker_only_the_manager_s_agent_creates_and_renews_the_contact_lease(worker):
    """While the contact Lease is renewed, the worker's agent keeps the copies it let start: a renewal by anyone
    else could keep a copy running after the manager lost the worker. Its delete stops them, and is not refused."""
    ns, c, lease = worker.namespace, worker.clients, worker.stored["contact lease"]
    renewal = {"spec": {"renewTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}
    for who in (DISPATCH, KUEUE, MULTIKUEUE, STRANGER):
        assert MANAGER_CONTACT_MESSAGE in _enforced(_patch(c[who], lease, renewal)), who
        fresh = {**lease, "metadata": {"name": LEASE_MANAGER_CONTACT, "namespace": ns}}
        assert MANAGER_CONTACT_MESSAGE in _enforced(_create(c[who], fresh)), who
    assert _refusal(_patch(c[MANAGER_AGENT], lease, renewal)) is None
    other = {**lease, "metadata": {"name": "not-the-contact", "namespace": ns}}
    assert MANAGER_AGENT_MESSAGE in _enforced(_create(c[MANAGER_AGENT], other))  # no other Lease
    assert _refusal(_create(c[STRANGER], other)) is None  # another Lease is not dispatch's
    assert _refusal(_delete(c[STRANGER], lease)) is None  # a delete only stops the copies


def test_on_a_worker_only_the_manager_s_agent_creates_and_renews_a_claim_and_deletes_it(worker):
    """While a claim is renewed, the worker's agent lets the copy it names start and run: a renewal by anyone else
    could keep a copy running that the manager no longer wants there. Its delete only stops the copy."""
    c, claim = worker.clients, worker.stored["claim"]
    renewal = {"spec": {"renewTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}
    fresh = {**claim, "metadata": {**claim["metadata"], "name": claim_name(str(uuid.uuid4()))}}
    fresh["metadata"].pop("resourceVersion", None)
    fresh["metadata"].pop("uid", None)
    for who in (DISPATCH, KUEUE, MULTIKUEUE, STRANGER):
        assert MANAGER_CONTACT_MESSAGE in _enforced(_patch(c[who], claim, renewal)), who
        assert MANAGER_CONTACT_MESSAGE in _enforced(_create(c[who], fresh)), who
    assert _refusal(_patch(c[MANAGER_AGENT], claim, renewal)) is None
    assert _refusal(_create(c[MANAGER_AGENT], fresh)) is None
    assert _refusal(_delete(c[MANAGER_AGENT], claim)) is None
    assert _refusal(_delete(c[STRANGER], claim)) is None  # a delete only stops the copy
    contact = worker.stored["contact lease"]
    assert MANAGER_AGENT_MESSAGE in _enforced(_delete(c[MANAGER_AGENT], contact))  # no other Lease's delete
