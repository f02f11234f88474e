"""No stranger pins a dispatch job's objects, on the real API server: the policy ``dispatch-k8s-dependents``
(webhook/dependents.py) alone, bound to a namespace of the test's own that holds a dispatch job's objects.

Each role acts through impersonation, as in tests/webhook/test_owners_on_the_api_server.py. A new owner reference with
``blockOwnerDeletion: true`` to any of the job's objects is refused to a stranger, on create and on an update that
adds it, whatever the dependent's kind; the components make theirs; a reference that does not block, one to
somebody else's object, and one already there are not judged.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from harness.cluster import ControlPlane
from harness.kube_http import ApiError, KubeHttp
from tests.webhook.test_owners_on_the_api_server import ROLES, Job, _config, _make_job, _user
from webhook import owners
from webhook.dependents import OWNED, PINS, dependents_policy

pytestmark = pytest.mark.cluster
RBAC = "rbac.authorization.k8s.io/v1"
REG = "admissionregistration.k8s.io/v1"
MERGE = "application/merge-patch+json"
STRANGER = "stranger"
EPHEMERAL = owners.POD_DEPENDENT_MAKERS[0]
"""kube-controller-manager's ephemeral volume controller, by its ServiceAccount's name."""


def _ref(obj: dict[str, Any], *, blocks: bool = True) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"],
            "blockOwnerDeletion": blocks}  # fmt: skip


def _dependent(kind: str, namespace: str, refs: list[dict[str, Any]]) -> dict[str, Any]:
    """A ConfigMap, a Secret or a Service of the writer's own, with ``refs`` as its owner references."""
    meta = {"name": f"dep-{secrets.token_hex(4)}", "namespace": namespace, "ownerReferences": refs}
    body: dict[str, Any] = {
        "ConfigMap": {"data": {"k": "v"}},
        "Secret": {"stringData": {"k": "v"}},
        "Service": {"spec": {"clusterIP": "None", "selector": {"app": "x"}, "ports": [{"port": 80}]}},
        "PersistentVolumeClaim": {
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
        },
    }[kind]
    return {"apiVersion": "v1", "kind": kind, "metadata": meta, **body}


def _create(http: KubeHttp, obj: dict[str, Any], *, dry: bool = True) -> str | None:
    """None when admitted, else the refusal's message."""
    path = http.collection_path(obj["apiVersion"], obj["kind"], obj["metadata"]["namespace"])
    try:
        http.request("POST", path, obj, query={"dryRun": "All"} if dry else None)
    except ApiError as err:
        if err.status != 403:
            raise
        return str(json.loads(err.body)["message"])
    return None


def _patch(http: KubeHttp, obj: dict[str, Any], patch: dict[str, Any]) -> str | None:
    try:
        http.request("PATCH", http.object_path(obj), patch, query={"dryRun": "All"}, content_type=MERGE)
    except ApiError as err:
        if err.status != 403:
            raise
        return str(json.loads(err.body)["message"])
    return None


@pytest.fixture(scope="module")
def armed(control_plane: ControlPlane) -> Iterator[tuple[Job, dict[str, KubeHttp]]]:
    """A dispatch job's objects in a namespace of their own, the policy bound to it alone, and a client per role, a
    stranger's and kube-controller-manager's ephemeral volume controller's, each allowed anything by RBAC."""
    cp = control_plane
    namespace = cp.create_namespace(f"dependents-{secrets.token_hex(3)}")
    cp.ensure_service_account(namespace, "default")
    job = _make_job(cp.admin, namespace)
    suffix = secrets.token_hex(3)
    users = [*(_user(r) for r in (*ROLES, STRANGER)), EPHEMERAL]
    binding_name = f"dependents-test-{suffix}"
    cp.admin.create({
        "apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": binding_name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u} for u in users],
    })  # fmt: skip
    policy = dependents_policy(_config())
    name = policy["metadata"]["name"] = f"{policy['metadata']['name']}-{suffix}"
    selector = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    binding = {"apiVersion": REG, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
               "spec": {"policyName": name, "validationActions": ["Deny"],
                        "matchResources": {"namespaceSelector": selector}}}  # fmt: skip
    cp.admin.create(policy)
    cp.admin.create(binding)
    clients = {r: KubeHttp(cp.admin_credentials, impersonate=(_user(r), None)) for r in (*ROLES, STRANGER)}
    clients[EPHEMERAL] = KubeHttp(cp.admin_credentials, impersonate=(EPHEMERAL, None))
    _wait_enforced(clients[STRANGER], job)
    yield job, clients
    cp.admin.delete(REG, "ValidatingAdmissionPolicyBinding", name)
    cp.admin.delete(REG, "ValidatingAdmissionPolicy", name)
    cp.admin.delete(RBAC, "ClusterRoleBinding", binding_name)
    cp.delete_namespace(namespace)


def _wait_enforced(stranger: KubeHttp, job: Job) -> None:
    probe = _dependent("ConfigMap", job.namespace, [_ref(job.objects["trainjobs"])])
    deadline = time.monotonic() + 30
    while _create(stranger, probe) is None:
        assert time.monotonic() < deadline, "the dependents policy was not enforced within 30 s"
        time.sleep(0.2)


OWNED_RESOURCES = [o.kind.resource for o in OWNED]


@pytest.mark.parametrize("resource", OWNED_RESOURCES)
@pytest.mark.parametrize("kind", ["ConfigMap", "Secret"])
def test_a_strangers_blocking_reference_is_refused_at_create(armed, resource: str, kind: str):
    job, clients = armed
    owner = job.objects[resource]
    refusal = _create(clients[STRANGER], _dependent(kind, job.namespace, [_ref(owner)]))
    assert refusal is not None, f"a stranger's {kind} holding {owner['kind']} {owner['metadata']['name']} admitted"
    assert f"{kind} dep-" in refusal, refusal
    assert f"its owner reference to {owner['kind']} {owner['metadata']['name']} {PINS}" in refusal, refusal
    assert f"{_user(STRANGER)} is none of them" in refusal, refusal
    assert "Set blockOwnerDeletion to false" in refusal, refusal


@pytest.mark.parametrize("resource", OWNED_RESOURCES)
def test_a_strangers_reference_that_does_not_block_passes(armed, resource: str):
    """It holds nothing: the garbage collector deletes the stranger's object with the job without waiting."""
    job, clients = armed
    owner = job.objects[resource]
    assert _create(clients[STRANGER], _dependent("ConfigMap", job.namespace, [_ref(owner, blocks=False)])) is None


def test_an_update_that_adds_a_blocking_reference_is_refused(armed, control_plane: ControlPlane):
    job, clients = armed
    stranger = clients[STRANGER]
    trainjob, pod = job.objects["trainjobs"], job.objects["pods"]
    mine = _dependent("ConfigMap", job.namespace, [_ref(trainjob, blocks=False)])
    assert _create(stranger, mine, dry=False) is None
    # Adding one, or making the one there block: each a reference the old object does not have.
    assert _patch(stranger, mine, {"metadata": {"ownerReferences": [_ref(trainjob)]}}) is not None
    added = [_ref(trainjob, blocks=False), _ref(pod)]
    refusal = _patch(stranger, mine, {"metadata": {"ownerReferences": added}})
    assert refusal is not None
    assert f"its owner reference to Pod {pod['metadata']['name']}" in refusal, refusal
    # The stranger's own edits of it that leave its references as they are pass.
    assert _patch(stranger, mine, {"metadata": {"labels": {"mine": "yes"}}}) is None
    control_plane.admin.delete("v1", "ConfigMap", mine["metadata"]["name"], job.namespace)


def test_a_blocking_reference_already_there_is_not_judged_again(armed, control_plane: ControlPlane):
    """Made by break-glass (or before the policy): the stranger's later edits and the garbage collector's removal of
    the reference pass."""
    job, clients = armed
    refs = [_ref(job.objects["jobsets"])]
    old = clients[owners.BREAK_GLASS].create(_dependent("ConfigMap", job.namespace, refs))
    stranger = clients[STRANGER]
    assert _patch(stranger, old, {"metadata": {"labels": {"edited": "yes"}}}) is None
    gc = clients[owners.GARBAGE_COLLECTOR]
    assert _patch(gc, old, {"metadata": {"ownerReferences": None}}) is None
    control_plane.admin.delete("v1", "ConfigMap", old["metadata"]["name"], job.namespace)


# What each component makes with a blocking reference to the job's objects (webhook/dependents.py OWNED).
LEGITIMATE = [
    (owners.TRAINER, "trainjobs", "ConfigMap"),  # the MPI hostfile, the status server's CA
    (owners.TRAINER, "trainjobs", "Secret"),  # MPI's SSH keys
    (owners.KUEUE, "trainjobs", "ConfigMap"),
    (owners.DISPATCH, "trainjobs", "ConfigMap"),
    (owners.DISPATCH, "trainingruntimes", "ConfigMap"),
    (owners.JOBSET, "jobsets", "Service"),  # the headless Service
    (owners.JOB_CONTROLLER, "jobs", "ConfigMap"),
    (owners.KUEUE, "workloads", "ConfigMap"),  # a ProvisioningRequest's PodTemplate, say
    (EPHEMERAL, "pods", "PersistentVolumeClaim"),  # a generic ephemeral volume's claim
    (owners.BREAK_GLASS, "pods", "ConfigMap"),
]


@pytest.mark.parametrize(("who", "resource", "kind"), LEGITIMATE, ids=[f"{w}-{r}-{k}" for w, r, k in LEGITIMATE])
def test_the_components_make_their_dependents(armed, who: str, resource: str, kind: str):
    job, clients = armed
    assert _create(clients[who], _dependent(kind, job.namespace, [_ref(job.objects[resource])])) is None


def test_each_component_is_refused_on_the_kinds_whose_dependents_it_does_not_make(armed):
    job, clients = armed
    for role in (owners.TRAINER, owners.JOBSET, owners.KUEUE):
        for owned in OWNED:
            if role in owned.makers:
                continue
            dependent = _dependent("ConfigMap", job.namespace, [_ref(job.objects[owned.kind.resource])])
            assert _create(clients[role], dependent) is not None, (role, owned.kind.kind)


def test_unrelated_blocking_references_pass(armed, control_plane: ControlPlane):
    """Names and kinds not of a dispatch job's objects: another TrainJob, the JobSet's Service (a dispatch name, not
    a dispatch kind), a ConfigMap named like a Job of a dispatch job, a Pod in another group's version."""
    job, clients = armed
    uid = "00000000-0000-0000-0000-000000000001"
    ours = job.name
    unrelated = [
        {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "my-training", "uid": uid},
        {"apiVersion": "v1", "kind": "Service", "name": ours, "uid": uid},
        {"apiVersion": "v1", "kind": "ConfigMap", "name": f"{ours}-node-0", "uid": uid},
        {"apiVersion": "example.com/v1", "kind": "Pod", "name": f"{ours}-node-0-0-abc", "uid": uid},
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": uid},
    ]
    for ref in unrelated:
        dependent = _dependent("ConfigMap", job.namespace, [{**ref, "blockOwnerDeletion": True}])
        assert _create(clients[STRANGER], dependent) is None, ref
    assert _create(clients[STRANGER], _dependent("ConfigMap", job.namespace, [])) is None
