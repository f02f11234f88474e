"""Default deny by principal, on the real API server: the owner policies alone (no webhook, no other policy).

Every role of webhook/owners.py acts through impersonation (the admin's right), each as a username of its own,
and tries every write on each kind of a dispatch job's objects, as a dry run (admission runs, nothing is
stored). Each write must pass exactly when webhook/owners.py says its role owns it: the policies the API
server evaluates and the table docs/security.md is checked against agree on every case.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import pytest
from ulid import ULID

from contract.prologue import PROLOGUE, PROLOGUE_CONFIGMAP, prologue_configmap
from harness.cluster import ControlPlane
from harness.kube_http import ApiError, KubeHttp
from webhook import owners
from webhook.config import Config, Owners, Principals
from webhook.rules.owners import owner_policies

pytestmark = pytest.mark.cluster
MERGE = "application/merge-patch+json"
RBAC = "rbac.authorization.k8s.io/v1"
STRANGER = "stranger"
ROLES = (owners.DISPATCH, owners.KUEUE, *Owners.model_fields, owners.KUBELET)
NODE: Final = f"owners-node-{secrets.token_hex(3)}"
"""The node the job's pod is bound to: its kubelet is the user system:node:<NODE> (a Node object with no kubelet)."""
NODES_GROUP: Final = "system:nodes"


def _user(role: str) -> str:
    """Each role's own username; a kubelet's is its node's, as Kubernetes names it (no setting names it)."""
    return f"{owners.NODE_USER_PREFIX}{NODE}" if role == owners.KUBELET else f"dispatch-test:{role}"


IMPOSTOR: Final = "dispatch-test:not-a-node"
"""A member of system:nodes under another name than a node's: NodeRestriction does not know it as a node."""
OTHER_NODE: Final = f"{owners.NODE_USER_PREFIX}{NODE}-other"
NO_NODE: Final = owners.NODE_USER_PREFIX
"""``system:node:`` alone, whose node name is empty: the node of no pod, an unbound one included."""


def _config() -> Config:
    principals = {r: Principals(usernames=(_user(r),)) for r in ROLES}
    return Config(
        dispatch=principals[owners.DISPATCH],
        kueue=principals[owners.KUEUE],
        owners=Owners(**{r: principals[r] for r in Owners.model_fields}),
    )


@dataclass
class Job:
    """One dispatch job's objects, as their controllers would have made them."""

    namespace: str
    name: str
    objects: dict[str, dict[str, Any]]


def _ref(obj: dict[str, Any], *, controller: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": controller,
    }


def _pod_spec() -> dict[str, Any]:
    return {"restartPolicy": "Never", "containers": [{"name": "node", "image": "registry.invalid/trainer"}]}


def _trainjob(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runtimeRef": {"name": name, "kind": "TrainingRuntime"}, "suspend": True},
    }


def _runtime(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"template": {"spec": {"replicatedJobs": [_replicated_job()]}}},
    }


def _replicated_job() -> dict[str, Any]:
    return {"name": "node", "replicas": 1, "template": {"spec": {"template": {"spec": _pod_spec()}}}}


def _jobset(namespace: str, name: str, owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": [_ref(owner)]},
        "spec": {"suspend": True, "replicatedJobs": [_replicated_job()]},
    }


def _job(namespace: str, name: str, owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"jobset.sigs.k8s.io/jobset-name": owner["metadata"]["name"]},
            "ownerReferences": [_ref(owner)],
        },
        "spec": {"suspend": True, "template": {"spec": _pod_spec()}},
    }


def _pod(namespace: str, name: str, owner: dict[str, Any], jobset: str, node: str | None = NODE) -> dict[str, Any]:
    spec = _pod_spec() | ({"nodeName": node} if node else {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"jobset.sigs.k8s.io/jobset-name": jobset},
            "ownerReferences": [_ref(owner)],
        },
        "spec": spec,
    }


def _workload(namespace: str, name: str, owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": [_ref(owner)]},
        "spec": {"queueName": "q", "podSets": [{"name": "node", "count": 1, "template": {"spec": _pod_spec()}}]},
    }


def _configmap(namespace: str, name: str = PROLOGUE_CONFIGMAP, text: str = PROLOGUE) -> dict[str, Any]:
    return {
        **prologue_configmap(namespace),
        "metadata": {"name": name, "namespace": namespace},
        "data": {"prologue.sh": text},
    }


OLDER_PROLOGUE: Final = "dispatch-k8s-prologue-0123456789"
"""An older version's ConfigMap, in place before the policies: what UPDATE and DELETE are tried on (a create of
this version's, by dispatch, must pass, so it must not exist yet)."""


def _dispatch_name() -> str:
    return f"dj-{str(ULID()).lower()}-s1"


def _make_job(admin: KubeHttp, namespace: str) -> Job:
    name = _dispatch_name()
    trainjob = admin.create(_trainjob(namespace, name))
    runtime = admin.create(_runtime(namespace, name))
    jobset = admin.create(_jobset(namespace, name, trainjob))
    job = admin.create(_job(namespace, f"{name}-node-0", jobset))
    pod = admin.create(_pod(namespace, f"{name}-node-0-0-{secrets.token_hex(3)}", job, name))
    workload = admin.create(_workload(namespace, f"trainjob-{name}-{secrets.token_hex(3)}", trainjob))
    prologue = admin.create(_configmap(namespace, OLDER_PROLOGUE, 'exec "$@"\n'))
    return Job(namespace, name, {
        "trainjobs": trainjob, "trainingruntimes": runtime, "jobsets": jobset, "jobs": job, "pods": pod,
        "workloads": workload, "configmaps": prologue,
    })  # fmt: skip


def _fresh(job: Job, resource: str) -> dict[str, Any]:
    """A new object of ``resource`` that claims to belong to ``job``, as its creator would make it."""
    o, ns, name = job.objects, job.namespace, job.name
    return {
        "trainjobs": lambda: _trainjob(ns, _dispatch_name()),
        "trainingruntimes": lambda: _runtime(ns, _dispatch_name()),
        "jobsets": lambda: _jobset(ns, _dispatch_name(), o["trainjobs"]),
        "jobs": lambda: _job(ns, f"{name}-node-1", o["jobsets"]),
        "pods": lambda: _pod(ns, f"{name}-node-0-0-{secrets.token_hex(3)}", o["jobs"], name),
        "workloads": lambda: _workload(ns, f"trainjob-{name}-{secrets.token_hex(3)}", o["trainjobs"]),
        "configmaps": lambda: _configmap(ns),
    }[resource]()  # fmt: skip


@pytest.fixture(scope="module")
def armed(control_plane: ControlPlane) -> Iterator[tuple[Job, dict[str, KubeHttp]]]:
    """A dispatch job's objects in a namespace of their own, the owner policies bound to it, and a client per
    role (and a stranger's), each allowed by RBAC to do anything: what they may not do is the policies'."""
    cp = control_plane
    namespace = cp.create_namespace(f"owners-{secrets.token_hex(3)}")
    cp.ensure_service_account(namespace, "default")  # no controller makes it in tier A; pods need it
    cp.admin.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})  # so no pod GC of its pods
    job = _make_job(cp.admin, namespace)
    suffix = secrets.token_hex(3)
    binding_name = f"owners-test-{suffix}"
    users = [_user(r) for r in (*ROLES, STRANGER)] + [IMPOSTOR, OTHER_NODE, NO_NODE]
    cp.admin.create({
        "apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": binding_name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u} for u in users],
    })  # fmt: skip
    docs = []
    for policy in owner_policies(_config()):
        policy["metadata"]["name"] += f"-{suffix}"
        binding = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy["metadata"]["name"]},
            "spec": {
                "policyName": policy["metadata"]["name"],
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
            },
        }
        docs += [cp.admin.create(policy), cp.admin.create(binding)]
    # No group: the policies alone judge each role by its name (a kubelet's is not confined by NodeRestriction here).
    clients = {r: _as(cp, _user(r)) for r in (*ROLES, STRANGER)}
    _wait_enforced(clients[STRANGER], job)
    yield job, clients
    for doc in reversed(docs):
        cp.admin.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])
    cp.admin.delete(RBAC, "ClusterRoleBinding", binding_name)
    cp.delete_namespace(namespace)
    cp.admin.delete("v1", "Node", NODE)


def _as(cp: ControlPlane, user: str, group: str | None = None) -> KubeHttp:
    return KubeHttp(cp.admin_credentials, impersonate=(user, group))


def _wait_enforced(stranger: KubeHttp, job: Job) -> None:
    """Policies load asynchronously, each on its own: wait until the stranger's label on every kind is refused."""
    deadline = time.monotonic() + 30
    pending = set(job.objects)
    while pending and time.monotonic() < deadline:
        for resource in sorted(pending):
            if _attempt(stranger, job, resource, ("UPDATE", "")) is not None:
                pending.discard(resource)
        time.sleep(0.2)
    assert not pending, f"owner policies not enforced within 30 s on {sorted(pending)}"


WRITES: dict[str, list[tuple[str, str]]] = {
    resource: [("CREATE", ""), ("UPDATE", ""), ("UPDATE", "status"), ("DELETE", "")]
    for resource in ("trainjobs", "trainingruntimes", "jobsets", "jobs", "workloads")
}
WRITES["trainingruntimes"].remove(("UPDATE", "status"))  # TrainingRuntimes have no status
WRITES["configmaps"] = [("CREATE", ""), ("UPDATE", ""), ("DELETE", "")]
WRITES["pods"] = [
    ("CREATE", ""),
    ("UPDATE", ""),
    ("UPDATE", "status"),
    ("CREATE", "binding"),
    ("CREATE", "eviction"),
    ("UPDATE", "ephemeralcontainers"),
    ("UPDATE", "resize"),
    ("DELETE", ""),
]


def _attempt(http: KubeHttp, job: Job, resource: str, write: tuple[str, str]) -> str | None:
    """Try ``write`` as a dry run; None when admitted, else the refusal's message."""
    obj = job.objects[resource]
    path = http.object_path(obj)
    operation, sub = write
    dry = {"dryRun": "All"}
    try:
        if operation == "CREATE" and not sub:
            http.request("POST", path.rsplit("/", 1)[0], _fresh(job, resource), query=dry)
        elif sub == "binding":
            target = {"apiVersion": "v1", "kind": "Node", "name": "somewhere"}
            binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": obj["metadata"]["name"]},
                       "target": target}  # fmt: skip
            try:
                http.request("POST", f"{path}/binding", binding, query=dry)
            except ApiError as err:
                # The pod is bound (its kubelet's status write needs a node): a binding admission let through
                # then conflicts with that node.
                if err.status != 409:
                    raise
        elif sub == "eviction":
            eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                        "metadata": {"name": obj["metadata"]["name"], "namespace": job.namespace}}  # fmt: skip
            http.request("POST", f"{path}/eviction", eviction, query=dry)
        elif operation == "UPDATE":
            patch = {"metadata": {"labels": {"touched-by": "test"}}} if not sub else {}
            http.request("PATCH", f"{path}/{sub}" if sub else path, patch, query=dry, content_type=MERGE)
        else:
            http.request("DELETE", path, query=dry)
    except ApiError as err:
        if err.status != 403:
            raise
        return json.loads(err.body)["message"]
    return None


CASES = [(resource, write) for resource, writes in WRITES.items() for write in writes]


@pytest.mark.parametrize(("resource", "write"), CASES, ids=[f"{r}-{owners.write_name(*w)}" for r, w in CASES])
def test_each_write_passes_exactly_for_its_owners(armed, resource, write):
    job, clients = armed
    kind = next(k for k in owners.KINDS if k.resource == resource)
    allowed = owners.allowed_roles(kind, *write)
    outcomes = {role: _attempt(http, job, resource, write) for role, http in clients.items()}
    for role, refusal in outcomes.items():
        expected = owners.EVERYONE in allowed or role in allowed
        assert (refusal is None) == expected, (role, refusal)
        if refusal is not None and not (role == owners.KUBELET and _by_node_restriction(refusal)):
            assert "belongs to a dispatch job" in refusal or "created only by its controller" in refusal, refusal
            assert _user(role) in refusal or "created only by its controller" in refusal, refusal


def _by_node_restriction(refusal: str) -> bool:
    """NodeRestriction's refusal: it confines a user named system:node:<name> (in system:nodes or not) to the status
    and the eviction of its node's pods, and runs before any validating policy."""
    return (
        "mirror pods" in refusal
        or "only 'status' and 'eviction' are allowed" in refusal
        or ("can only update pod status for pods with spec.nodeName set to itself" in refusal)
    )


def test_the_refusal_names_the_object_the_write_and_its_owners(armed):
    job, clients = armed
    refusal = _attempt(clients[STRANGER], job, "jobs", ("UPDATE", "status"))
    name = job.objects["jobs"]["metadata"]["name"]
    assert refusal is not None
    assert f"Job {name} belongs to a dispatch job: UPDATE status is made only by the Job controller" in refusal
    assert f"{_user(STRANGER)} is none of them" in refusal


def test_belonging_is_judged_on_the_old_object_and_the_new(armed, control_plane):
    """A stranger may neither strip a dispatch pod of its marks (the old object belongs) nor give an ordinary pod
    dispatch's marks (the new one would); an ordinary pod stays the stranger's to edit."""
    job, clients = armed
    stranger = clients[STRANGER]
    pod = job.objects["pods"]
    strip = {"metadata": {"labels": None, "ownerReferences": None}}
    with pytest.raises(ApiError) as err:
        stranger.request("PATCH", stranger.object_path(pod), strip, query={"dryRun": "All"}, content_type=MERGE)
    assert err.value.status == 403
    plain = control_plane.admin.create({"apiVersion": "v1", "kind": "Pod", "spec": _pod_spec(),
                                        "metadata": {"name": "plain", "namespace": job.namespace}})  # fmt: skip
    path = stranger.object_path(plain)
    stranger.request("PATCH", path, {"metadata": {"labels": {"mine": "yes"}}}, content_type=MERGE)
    for claim in (
        {"metadata": {"labels": {"jobset.sigs.k8s.io/jobset-name": job.name}}},
        {"metadata": {"finalizers": ["dispatch.phpboyscout.uk/may-still-run"]}},
        {"metadata": {"labels": {"dispatch.phpboyscout.uk/job-id": "x"}}},
    ):
        with pytest.raises(ApiError) as err:
            stranger.request("PATCH", path, claim, query={"dryRun": "All"}, content_type=MERGE)
        assert err.value.status == 403, claim
    stranger.delete("v1", "Pod", "plain", job.namespace)


def test_only_a_dispatch_jobs_own_children_carry_its_marks(armed):
    """The Job controller may create a dispatch job's pods, but a pod carrying dispatch's finalizer whose
    controller is another Job (a stranger's Job that copied the finalizer) is refused to it too."""
    job, clients = armed
    pod = _pod(job.namespace, f"other-{secrets.token_hex(3)}", job.objects["jobs"], job.name)
    pod["metadata"]["ownerReferences"][0]["name"] = "someone-elses-job"
    pod["metadata"]["finalizers"] = ["dispatch.phpboyscout.uk/may-still-run"]
    controller = clients[owners.JOB_CONTROLLER]
    with pytest.raises(ApiError) as err:
        controller.request("POST", controller.collection_path("v1", "Pod", job.namespace), pod, query={"dryRun": "All"})
    assert err.value.status == 403
    assert "is created only by its controller, a Job of a dispatch job" in json.loads(err.value.body)["message"]


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda cm: cm["data"].update({"prologue.sh": 'exec "$@"\n'}), id="another-text"),
        pytest.param(lambda cm: cm["data"].update({"extra": "x"}), id="another-key"),
        pytest.param(lambda cm: cm.update({"binaryData": {"x": "eA=="}}), id="binary-data"),
        pytest.param(lambda cm: cm.update({"immutable": False}), id="mutable"),
        pytest.param(lambda cm: cm.pop("immutable"), id="immutable-unset"),
        pytest.param(lambda cm: cm["metadata"].update({"name": OLDER_PROLOGUE[:-1] + "8"}), id="another-hash"),
    ],
)
def test_the_prologues_configmap_is_created_only_as_dispatch_creates_it_whoever_tries(armed, change):
    """A name always means one text: not even dispatch or break-glass may create one under the prefix that is not
    exactly this version's (a squatter's text would run in every trainer pod of the namespace)."""
    job, clients = armed
    for role in (owners.DISPATCH, owners.BREAK_GLASS):
        http = clients[role]
        configmap = _configmap(job.namespace)
        change(configmap)
        with pytest.raises(ApiError) as err:
            http.request("POST", http.collection_path("v1", "ConfigMap", job.namespace), configmap,
                         query={"dryRun": "All"})  # fmt: skip
        assert err.value.status == 403, role
        assert "it is created only as dispatch creates it" in json.loads(err.value.body)["message"]
    # and exactly this version's is dispatch's to create
    http = clients[owners.DISPATCH]
    http.request("POST", http.collection_path("v1", "ConfigMap", job.namespace), _configmap(job.namespace),
                 query={"dryRun": "All"})  # fmt: skip


# -- A kubelet is one node (docs/security.md, attack 13) -------------------------------------------------


def _refused_by_the_policy(refusal: str | None, user: str) -> None:
    assert refusal is not None, f"{user} wrote the status of a pod that is not its node's"
    assert "UPDATE status is made only by the kubelet of the pod's node" in refusal, refusal
    assert f"{user} is none of them" in refusal, refusal


def test_a_kubelet_writes_the_status_of_its_own_nodes_pods_only(armed, control_plane):
    """A terminal status is the agent's proof that the processes are gone: only the pod's node may write one. A
    member of system:nodes under another name, which NodeRestriction does not confine, is refused by the policy; the
    pod's own node passes, in system:nodes or not. Another node is refused too: here by NodeRestriction, which runs
    before any validating policy (the policy's own test of the node, for an API server without NodeRestriction, is
    tests/webhook/test_owners.py's)."""
    job, _ = armed
    status = ("UPDATE", "status")
    assert _attempt(_as(control_plane, _user(owners.KUBELET), NODES_GROUP), job, "pods", status) is None
    assert _attempt(_as(control_plane, _user(owners.KUBELET)), job, "pods", status) is None
    _refused_by_the_policy(_attempt(_as(control_plane, IMPOSTOR, NODES_GROUP), job, "pods", status), IMPOSTOR)
    for group in (NODES_GROUP, None):
        refusal = _attempt(_as(control_plane, OTHER_NODE, group), job, "pods", status)
        assert refusal is not None, group
        assert _by_node_restriction(refusal) or f"{OTHER_NODE} is none of them" in refusal, refusal


def test_no_node_writes_the_status_of_an_unbound_pod(armed, control_plane):
    """An unbound pod is no node's: not even ``system:node:`` with its empty name matches its empty nodeName (refused
    by NodeRestriction here, or by the policy)."""
    job, clients = armed
    controller = clients[owners.JOB_CONTROLLER]
    unbound = _pod(job.namespace, f"{job.name}-node-0-0-{secrets.token_hex(3)}", job.objects["jobs"], job.name, None)
    created = controller.request("POST", controller.collection_path("v1", "Pod", job.namespace), unbound)
    of_unbound = Job(job.namespace, job.name, {**job.objects, "pods": created})
    for user in (NO_NODE, _user(owners.KUBELET)):
        refusal = _attempt(_as(control_plane, user), of_unbound, "pods", ("UPDATE", "status"))
        assert refusal is not None, user
        assert (
            "could not determine node" in refusal
            or _by_node_restriction(refusal)
            or (f"{user} is none of them" in refusal)
        ), refusal
