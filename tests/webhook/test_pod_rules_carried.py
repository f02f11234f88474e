"""The pod rules as the chart renders them, carried by the owner policy of pods, on the real API server: every owner
of a pod write is still bound by them (break-glass too), dispatch alone is not, and a pod write that breaks both the
owner rule and a pod rule is refused by one policy, not two (the API server converts the pod for CEL once per
policy that matches the write: docs/performance.md). tests/webhook/test_policies.py holds the pod rules as a policy
of their own, tests/webhook/test_owners_on_the_api_server.py the owner rules alone."""

from __future__ import annotations

import json
import re
import secrets
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from ulid import ULID

from contract.keys import POD_FINALIZER
from harness.cluster import ControlPlane
from harness.kube_http import ApiError, KubeHttp
from harness.principals import bound_here
from tests.webhook.test_owners_on_the_api_server import NODE, RBAC, ROLES, STRANGER, _config, _user
from webhook import owners
from webhook.policies import admission_policies
from webhook.rules.owners import owner_policy_name

pytestmark = pytest.mark.cluster
JSON_PATCH = "application/json-patch+json"
STRIP = [{"op": "test", "path": "/metadata/finalizers/0", "value": POD_FINALIZER},
         {"op": "remove", "path": "/metadata/finalizers/0"}]  # fmt: skip
_SAMPLE = re.compile(r"^apiserver_validating_admission_policy_check_total\{(.*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _pod(namespace: str) -> dict[str, Any]:
    """A trainer pod of a dispatch job, as the Job controller makes it: dispatch's finalizer, the JobSet's labels, A."""
    name = f"dj-{str(ULID()).lower()}-s1"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-node-0-0-{secrets.token_hex(3)}",
            "namespace": namespace,
            "labels": {"jobset.sigs.k8s.io/jobset-name": name, "team": "a"},
            "annotations": {"dispatch.phpboyscout.uk/admission": "1"},
            "finalizers": [POD_FINALIZER],
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"{name}-node-0",
                                 "uid": "00000000-0000-0000-0000-000000000001", "controller": True}],
        },
        # Bound: its kubelet is system:node:<NODE>, which writes the status of that node's pods alone.
        "spec": {"nodeName": NODE, "containers": [{"name": "node", "image": "registry.invalid/trainer"}]},
    }  # fmt: skip


@pytest.fixture
def armed(control_plane: ControlPlane, namespace: str) -> Iterator[tuple[dict[str, Any], dict[str, KubeHttp], str]]:
    """The chart's validating policies bound to this namespace, a dispatch trainer pod in it, and a client per role
    of webhook/owners.py (impersonated, each allowed by RBAC to do anything there) and a stranger's."""
    cp = control_plane
    cp.ensure_service_account(namespace, "default")
    users = [_user(r) for r in (*ROLES, STRANGER)]
    cp.admin.create({
        "apiVersion": RBAC, "kind": "RoleBinding", "metadata": {"name": "everything", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u} for u in users],
    })  # fmt: skip
    cp.admin.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})  # so no pod GC of the pod
    # Before the policies: the admin is not the Job controller, which alone creates a dispatch job's pods.
    pod = cp.admin.create(_pod(namespace))
    suffix = secrets.token_hex(3)
    docs = admission_policies(_config(), namespace="dispatch-system")
    docs = bound_here([d for d in docs if d["kind"].startswith("Validating")], namespace, suffix)
    for doc in docs:
        cp.admin.create(doc)
    clients = {r: KubeHttp(cp.admin_credentials, impersonate=(_user(r), None)) for r in (*ROLES, STRANGER)}
    try:
        yield pod, clients, suffix
    finally:
        # The pod goes with its namespace once dispatch removed its finalizer (the policies still bind).
        dispatch = clients[owners.DISPATCH]
        dispatch.request("PATCH", dispatch.object_path(pod), STRIP, content_type=JSON_PATCH)
        for doc in docs:
            cp.admin.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])
        cp.admin.delete("v1", "Node", NODE)


def _try(http: KubeHttp, pod: dict[str, Any], ops: list[dict[str, Any]], sub: str = "") -> str | None:
    """A JSON Patch of the pod (or its subresource) as a dry run: None when admitted, else the refusal."""
    path = http.object_path(pod) + (f"/{sub}" if sub else "")
    try:
        http.request("PATCH", path, ops, query={"dryRun": "All"}, content_type=JSON_PATCH)
    except ApiError as err:
        if err.status != 403:
            raise
        return str(json.loads(err.body)["message"])
    return None


def _refused(http: KubeHttp, pod: dict[str, Any], ops: list[dict[str, Any]], sub: str = "") -> str:
    """The refusal of a write the loaded policies refuse. Policies load asynchronously: retried until refused."""
    deadline = time.monotonic() + 30
    while (refusal := _try(http, pod, ops, sub)) is None:
        assert time.monotonic() < deadline, f"{ops} on {sub or 'the pod'} was not refused within 30 s"
        time.sleep(0.2)
    return refusal


def _denials(admin: KubeHttp, suffix: str) -> Counter[str]:
    """Each of this test's policies' count of failed validations that denied a request (the API server's metric
    counts a policy's failed validations, not the policy's passes)."""
    out: Counter[str] = Counter()
    for line in str(admin.request("GET", "/metrics")).splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        labels = dict(_LABEL.findall(m.group(1)))
        if labels.get("enforcement_action") == "deny" and labels.get("policy", "").endswith(f"-{suffix}"):
            out[labels["policy"].removesuffix(f"-{suffix}")] += int(float(m.group(2)))
    return out


def test_every_owner_of_a_pod_write_is_bound_by_the_pod_rules_and_dispatch_alone_is_not(armed):
    pod, clients, _ = armed
    refusal = _refused(clients[owners.KUBELET], pod, STRIP, "status")
    assert "only dispatch removes its finalizer" in refusal
    assert "belongs to a dispatch job" not in refusal, "a kubelet writes a pod's status"
    relabel = [{"op": "replace", "path": "/metadata/labels/jobset.sigs.k8s.io~1jobset-name", "value": "dj-other"}]
    assert "labels of a dispatch trainer pod" in _refused(clients[owners.JOB_CONTROLLER], pod, relabel)
    orphan = [{"op": "remove", "path": "/metadata/ownerReferences"}]
    assert "ownerReferences of a dispatch trainer pod" in _refused(clients[owners.GARBAGE_COLLECTOR], pod, orphan)
    re_a = [{"op": "replace", "path": "/metadata/annotations/dispatch.phpboyscout.uk~1admission", "value": "5"}]
    assert "annotations of a dispatch trainer pod" in _refused(clients[owners.JOB_CONTROLLER], pod, re_a)
    # Break-glass may make any write the owner rule judges, and is still bound by the pod rules.
    assert "only dispatch removes its finalizer" in _refused(clients[owners.BREAK_GLASS], pod, STRIP)
    # What does not tie the pod to its execution stays its owners' to change, and dispatch removes its finalizer.
    team = [{"op": "replace", "path": "/metadata/labels/team", "value": "b"}]
    assert _try(clients[owners.JOB_CONTROLLER], pod, team) is None
    assert _try(clients[owners.DISPATCH], pod, STRIP) is None


def test_a_pod_write_is_judged_by_one_policy(armed, control_plane):
    """A stranger removing dispatch's finalizer breaks the owner rule and a pod rule: both fail in one policy."""
    pod, clients, suffix = armed
    stranger = clients[STRANGER]
    # Loaded: the owner rule refuses the stranger, the pod rules refuse the kubelet.
    label = [{"op": "add", "path": "/metadata/labels/x", "value": "y"}]
    assert "belongs to a dispatch job" in _refused(stranger, pod, label)
    assert "only dispatch removes its finalizer" in _refused(clients[owners.KUBELET], pod, STRIP, "status")
    before = _denials(control_plane.admin, suffix)
    refusal = _try(stranger, pod, STRIP)
    after = _denials(control_plane.admin, suffix)
    # The owner rule comes first: the refusal names the write's owners.
    assert refusal is not None
    assert "belongs to a dispatch job" in refusal, refusal
    pods = owner_policy_name(owners.PODS)
    assert after - before == Counter({pods: 2}), (
        "the owner rule and the finalizer rule each failed once, in the owner policy of pods and no other",
        after - before,
    )
