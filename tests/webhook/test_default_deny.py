"""Default deny, class by class (tier B): the attacks that got through a list of refused fields, tried by a stranger
holding every right on the Trainer, Kueue, JobSet, batch and core kinds of its namespace, against dispatch's
admission as the chart installs it (the policies and the webhook). Each is refused; where the write would have
mattered, the job's identity is checked too."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contract.keys import LABEL_JOBSET_NAME, LABEL_RESTART_ATTEMPT, POD_FINALIZER
from harness.kube_http import ApiError, KubeHttp
from tests.agent.gate import kit
from tests.agent.gate.kit import JOBSET_V, KUEUE_V, TRAINER_V, eventually
from tests.agent.gate.test_readmission_gate import (  # noqa: F401 (the fixtures)
    Gate,
    create_dispatch_trainjob,
    gate,
    get_trainjob,
    ns,
)
from tests.webhook.test_owner_fuzz import STRANGER_RULES
from tests.webhook.test_tampering import Guarded, _opened_running, _stranger

pytestmark = pytest.mark.e2e
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@pytest.fixture
def armed(gate: Gate, ns: str, tmp_path: Path) -> Iterator[Guarded]:  # noqa: F811
    g = Guarded(gate, ns, _stranger(gate, ns, rules=STRANGER_RULES), "policies + webhook", tmp_path / "webhook")
    try:
        yield g
    finally:
        g.disarm()


def refused(who: KubeHttp, method: str, path: str, body: Any = None, *, content_type: str = MERGE) -> str:
    """The write is refused by dispatch's admission (dry runs first, until the policies have loaded); the
    message."""

    def dry() -> int:
        try:
            who.request(method, path, body, query={"dryRun": "All"}, content_type=content_type)
        except ApiError as err:
            return err.status
        raise AssertionError(f"{method} {path} was admitted")

    eventually(dry, 30, f"{method} {path} refused")
    with pytest.raises(ApiError) as err:
        who.request(method, path, body, content_type=content_type)
    assert err.value.status == 403, err.value
    # By dispatch: one of its policies (the chart's, or the harness's copy of the owner policies: the API server runs
    # them before any webhook and reports the first refusal), or its webhook while the policies still load.
    body = err.value.body
    assert "ValidatingAdmissionPolicy 'dispatch-" in body or "dispatch-k8s denied" in body, body
    return body


def _child_job(g: Guarded, jobset: str) -> dict[str, Any]:
    (job,) = g.admin.list("batch/v1", "Job", g.namespace, label_selector=f"{LABEL_JOBSET_NAME}={jobset}")[:1]
    return {"apiVersion": "batch/v1", "kind": "Job", **job}


def test_the_jobset_and_its_jobs_are_their_owners_alone(armed: Guarded) -> None:
    g, s = armed, armed.stranger
    tj, pods = _opened_running(g)
    name = tj["metadata"]["name"]
    g.arm()
    try:
        jobset = g.admin.get(JOBSET_V, "JobSet", name, g.namespace)
        at = g.admin.object_path(jobset)
        # J pinned through the template: JobSet merges its labels over each Job's when it resumes.
        pin = [{"op": "add", "path": "/spec/replicatedJobs/0/template/spec/template/metadata/labels/"
                + LABEL_RESTART_ATTEMPT.replace("/", "~1"), "value": "0"}]  # fmt: skip
        refused(s, "PATCH", at, pin, content_type=JSON_PATCH)
        # Handed to the garbage collector (a new JobSet would start J at 0), or deleted outright.
        refused(s, "PATCH", at, {"metadata": {"ownerReferences": None}})
        refused(s, "DELETE", at)
        # Its Jobs: deleted (recreated under the same A and J) or suspended behind the owners' backs.
        job = _child_job(g, name)
        refused(s, "DELETE", g.admin.object_path(job))
        refused(s, "PATCH", g.admin.object_path(job), {"spec": {"suspend": True}})
        refused(s, "PATCH", g.admin.object_path(job) + "/status", {"status": {"failed": 0}})
        assert kit.assert_r_strictly_increases(pods.first_seen()) == [(1, 0)]
        assert g.admin.get(JOBSET_V, "JobSet", name, g.namespace)["metadata"]["uid"] == jobset["metadata"]["uid"]
    finally:
        pods.stop()


def test_a_closed_jobs_jobset_is_not_resumed_behind_the_trainjob(armed: Guarded) -> None:
    """The TrainJob's unsuspend is the choke point: resuming the JobSet (or a Job) directly would run the job
    without it, never opened, A never raised."""
    g, s = armed, armed.stranger
    tj = create_dispatch_trainjob(g.gate, g.namespace, g.gate.runtime)
    name = tj["metadata"]["name"]
    g.arm()
    jobset = eventually(lambda: g.admin.get(JOBSET_V, "JobSet", name, g.namespace), 30, "Trainer's JobSet")
    refused(s, "PATCH", g.admin.object_path(jobset), {"spec": {"suspend": False}})
    job = eventually(lambda: _child_job(g, name), 30, "JobSet's Job")
    refused(s, "PATCH", g.admin.object_path(job), {"spec": {"suspend": False}})
    assert kit.pods_of(g.admin, g.namespace, name) == []


def test_the_workload_is_kueues_and_dispatchs_alone(armed: Guarded) -> None:
    """A Kueue-mode hold's means and the quota: the Workload deleted, orphaned, reactivated, its reservation forged,
    or a decoy Workload claiming the TrainJob."""
    g, s = armed, armed.stranger
    tj = create_dispatch_trainjob(g.gate, g.namespace, g.gate.runtime)
    uid = tj["metadata"]["uid"]
    g.arm()
    wl = eventually(lambda: kit.workload_of(g.admin, g.namespace, uid), 30, "Kueue's Workload")
    wl = {"apiVersion": KUEUE_V, "kind": "Workload", **wl}
    at = g.admin.object_path(wl)
    refused(s, "DELETE", at)
    refused(s, "PATCH", at, {"metadata": {"ownerReferences": None}})
    refused(s, "PATCH", at, {"spec": {"active": False}})
    reserved = {"status": {"conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                                           "message": "forged", "lastTransitionTime": kit.now()}]}}  # fmt: skip
    refused(s, "PATCH", at + "/status", reserved)
    decoy = {
        "apiVersion": KUEUE_V,
        "kind": "Workload",
        "metadata": {
            "name": f"decoy-{secrets.token_hex(3)}",
            "namespace": g.namespace,
            "ownerReferences": [
                {
                    "apiVersion": TRAINER_V,
                    "kind": "TrainJob",
                    "name": tj["metadata"]["name"],
                    "uid": uid,
                    "controller": True,
                }
            ],
        },
        "spec": wl["spec"],
    }
    refused(s, "POST", g.admin.collection_path(KUEUE_V, "Workload", g.namespace), decoy,
                              content_type="application/json")  # fmt: skip
    # The TrainJob pointed at a prebuilt Workload of the stranger's.
    prebuilt = {"metadata": {"labels": {"kueue.x-k8s.io/prebuilt-workload-name": "mine"}}}
    refused(s, "PATCH", g.admin.object_path(get_trainjob(g.gate, tj)), prebuilt)
    assert [w["metadata"]["name"] for w in g.admin.list(KUEUE_V, "Workload", g.namespace)] == [wl["metadata"]["name"]]


def test_pods_status_and_claims_are_their_owners(armed: Guarded) -> None:
    """A forged terminal phase would make the agent drop its finalizer and the gate open while the processes may
    still run; pods claiming the job (its labels, a controller reference, dispatch's finalizer) would hold the
    gate forever; dispatch's finalizer on anyone's pod blocks its controllers. A pod's deletion stays anyone's."""
    g, s = armed, armed.stranger
    tj, pods = _opened_running(g)
    name = tj["metadata"]["name"]
    g.arm()
    try:
        (pod,) = kit.running(kit.pods_of(g.admin, g.namespace, name))
        at = g.admin.object_path({"apiVersion": "v1", "kind": "Pod", **pod})
        refused(s, "PATCH", at + "/status", {"status": {"phase": "Failed"}})
        refused(s, "PATCH", at, {"metadata": {"finalizers": None}})  # the owner policy, or the pods policy
        job = _child_job(g, name)
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
                 "uid": job["metadata"]["uid"], "controller": True}  # fmt: skip
        spec = {"restartPolicy": "Never", "containers": [{"name": "node", "image": "registry.invalid/x"}]}
        collection = g.admin.collection_path("v1", "Pod", g.namespace)
        for claim in (
            {"labels": {LABEL_JOBSET_NAME: name}},
            {"ownerReferences": [owner]},
            {"finalizers": [POD_FINALIZER]},
        ):
            fake = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"fake-{secrets.token_hex(3)}", **claim},
                    "spec": spec}  # fmt: skip
            refused(s, "POST", collection, fake, content_type="application/json")
        mine = s.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mine", "namespace": g.namespace},
                         "spec": spec})  # fmt: skip
        refused(s, "PATCH", g.admin.object_path(mine), {"metadata": {"finalizers": [POD_FINALIZER]}})
        s.delete("v1", "Pod", "mine", g.namespace)
        assert kit.assert_r_strictly_increases(pods.first_seen()) == [(1, 0)]
        assert kit.running(kit.pods_of(g.admin, g.namespace, name)), "the execution runs on, its pod untouched"
    finally:
        pods.stop()


def _terminal_status(pod: dict[str, Any]) -> dict[str, Any]:
    """A kubelet's report that every container of ``pod`` ended: phase Failed, each container terminated."""
    ended = {"exitCode": 137, "reason": "Error", "startedAt": kit.now(), "finishedAt": kit.now()}
    return {"status": {"phase": "Failed", "containerStatuses": [
        {"name": c["name"], "image": c["image"], "imageID": "", "ready": False, "restartCount": 0,
         "started": False, "state": {"terminated": ended}}
        for c in pod["spec"]["containers"]]}}  # fmt: skip


def _as(g: Guarded, user: str, group: str) -> KubeHttp:
    """``user`` in ``group``, with every right on the namespace's pods and their status: what refuses it is
    dispatch's admission (and, for a node's own name, NodeRestriction), never RBAC."""
    rbac, role = "rbac.authorization.k8s.io/v1", f"pods-{secrets.token_hex(3)}"
    rules = [{"apiGroups": [""], "resources": ["pods", "pods/status"], "verbs": ["get", "list", "patch", "update"]}]
    g.admin.create({"apiVersion": rbac, "kind": "Role", "metadata": {"name": role, "namespace": g.namespace},
                    "rules": rules})  # fmt: skip
    g.admin.create({"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": role, "namespace": g.namespace},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})  # fmt: skip
    return KubeHttp(g.admin.credentials, impersonate=(user, group))


def test_a_member_of_system_nodes_is_no_kubelet_of_a_pod_not_on_its_node(armed: Guarded) -> None:
    """A terminal status written by a member of system:nodes that is not the pod's node (a name not
    system:node:<its node>, which NodeRestriction does not confine) would make the agent drop dispatch's finalizer
    as proven gone and the gate admit the next execution while this one still runs: refused, whoever in that
    group; the pod keeps its finalizer and the execution its identity."""
    g = armed
    tj, pods = _opened_running(g)
    name = tj["metadata"]["name"]
    g.arm()
    try:
        (pod,) = kit.running(kit.pods_of(g.admin, g.namespace, name))
        at = g.admin.object_path({"apiVersion": "v1", "kind": "Pod", **pod})
        node = pod["spec"]["nodeName"]
        rogue = _as(g, f"dispatch-test:rogue-{secrets.token_hex(3)}", "system:nodes")
        refused(rogue, "PATCH", at + "/status", _terminal_status(pod))
        other = next(n for n in g.gate.tier_b.node_names if n != node)
        with pytest.raises(ApiError) as err:  # NodeRestriction, or dispatch's policy
            _as(g, f"system:node:{other}", "system:nodes").request(
                "PATCH", at + "/status", _terminal_status(pod), content_type=MERGE
            )
        assert err.value.status == 403, err.value
        time.sleep(5)  # the agent's passes, had anything reached it
        now = g.admin.get("v1", "Pod", pod["metadata"]["name"], g.namespace)
        assert POD_FINALIZER in now["metadata"].get("finalizers", []), "the pod keeps dispatch's finalizer"
        assert now["status"]["phase"] == "Running", now["status"]
        assert kit.assert_r_strictly_increases(pods.first_seen()) == [(1, 0)]
        assert kit.running(kit.pods_of(g.admin, g.namespace, name)), "the execution runs on, its pod untouched"
    finally:
        pods.stop()


def test_another_entry_may_not_touch_the_trainer_container(armed: Guarded) -> None:
    """A file mounted over the prologue's shell would decide the identity the job sees."""
    g = armed
    tj = create_dispatch_trainjob(g.gate, g.namespace, g.gate.runtime)
    g.arm()
    pod = {"spec": {"containers": [{"name": "node", "volumeMounts": [{"name": "shell", "mountPath": "/bin"}]}],
                    "volumes": [{"name": "shell", "emptyDir": {}}]}}  # fmt: skip
    entry = {"manager": "example.com/mine", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": pod}}}]}}}}  # fmt: skip
    body = [{"op": "add", "path": "/spec/runtimePatches/-", "value": entry}]
    # The owner policy, or the identity policy's rule on other entries.
    refused(g.stranger, "PATCH", g.admin.object_path(get_trainjob(g.gate, tj)), body, content_type=JSON_PATCH)
