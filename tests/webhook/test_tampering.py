"""Issue 10 for real (tier B): a stranger ServiceAccount with ordinary namespace RBAC (create, update, patch and
delete on TrainJobs, Workloads, workloads/status, JobSets, jobsets/status and pods) tampers with dispatch's
jobs while the real Kueue, Trainer, JobSet and kwok run them and the agent serves the readmission gate. Each
attack is refused, and no two executions of a job share an R. Then the same attacks with dispatch's webhook
stopped (its configurations removed), against the ValidatingAdmissionPolicies alone.

In the harness Kueue, Trainer and JobSet run under upstream's usernames, the config's defaults; the admin creates
the jobs as Start would, so the config names it as dispatch; the stranger is a ServiceAccount of the test's
namespace.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from ulid import ULID

from agent.domain.operations import Hold, plan_hold
from contract.keys import ANNOTATION_ADMISSION_STARTED, LABEL_JOBSET_NAME, LABEL_QUEUE_NAME
from contract.trainjob import Submission, build_runtime_copy
from harness.cluster import ADMIN_USER, free_port
from harness.kube_http import ApiError, KubeHttp
from harness.principals import EDIT_RULES
from harness.tier_b import KWOK_COMPLETE_ANNOTATION
from harness.webhook_process import WebhookProcess, start_webhook
from tests.agent.gate import kit
from tests.agent.gate.kit import JOBSET_V, KUEUE_V, TRAINER_V, eventually
from tests.agent.gate.test_readmission_gate import (  # noqa: F401 (the fixtures)
    LOCAL_QUEUE,
    NOT_DISPATCH,
    RAISED,
    Gate,
    _assert,
    admitted_workload,
    create_dispatch_trainjob,
    gate,
    get_trainjob,
    json_patch,
    ns,
    open_trainjob,
    patch_workload,
    preemptor,
    wait_running,
)
from webhook.config import Config
from webhook.configurations import webhook_configurations
from webhook.policies import admission_policies

pytestmark = pytest.mark.e2e
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
A_PATH = (
    "/spec/runtimePatches/0/trainingRuntimeSpec/template/spec/replicatedJobs/0/template/spec/template/metadata"
    "/annotations/dispatch.phpboyscout.uk~1admission"
)


@dataclass
class Guarded:
    gate: Gate
    namespace: str
    stranger: KubeHttp
    mode: str
    workdir: Path
    webhook: WebhookProcess | None = None
    policies: list[dict[str, Any]] = field(default_factory=list)

    @property
    def admin(self) -> KubeHttp:
        return self.gate.admin

    def arm(self) -> None:
        """dispatch's webhook registered for the namespace ("webhook"), its policies bound to it ("policies alone"), or
        both ("policies + webhook", as the chart installs them). Armed once the test's jobs are where the attacks
        need them."""
        cp = self.gate.tier_b.control_plane
        config = _config(self.gate)
        if "webhook" in self.mode:
            self.webhook = start_webhook(cp, self.namespace, ADMIN_USER, self.workdir, config=config)
        if "policies" not in self.mode:
            return
        suffix = secrets.token_hex(3)
        for doc in admission_policies(Config.model_validate(config), namespace="dispatch-system"):
            doc["metadata"]["name"] += f"-{suffix}"
            if "policyName" in doc["spec"]:  # a binding, of a validating or the mutating policy
                doc["spec"]["policyName"] += f"-{suffix}"
                selector = {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}}
                doc["spec"]["matchResources"] = {"namespaceSelector": selector}
            cp.admin.create(doc)
            self.policies.append(doc)

    def disarm(self) -> None:
        if self.webhook is not None:
            self.webhook.unregister()
            self.webhook.stop()
        for doc in self.policies:
            self.gate.tier_b.control_plane.admin.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])


def _config(g: Gate) -> dict[str, Any]:
    """The admin creates the jobs as Start does, so it is dispatch too, and plays JobSet's restart of a job, so it is
    break-glass; Kueue, Trainer, JobSet and the controllers act under upstream's identities (harness/tier_b.py), the
    defaults."""
    agent = f"system:serviceaccount:{g.system}:dispatch-agent"
    return {
        "dispatch": {"usernames": [ADMIN_USER, agent]},
        "owners": {"breakGlass": {"usernames": [ADMIN_USER]}},
        "admissionChecks": [g.check],
    }


def _stranger(g: Gate, namespace: str, rules: list[dict[str, Any]] = EDIT_RULES) -> KubeHttp:
    cp = g.tier_b.control_plane
    role = f"attacker-{secrets.token_hex(3)}"
    rbac = "rbac.authorization.k8s.io/v1"
    cp.admin.create({"apiVersion": rbac, "kind": "Role", "metadata": {"name": role, "namespace": namespace},
                     "rules": rules})  # fmt: skip
    cp.ensure_service_account(namespace, "stranger")
    cp.admin.create({"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": role, "namespace": namespace},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                     "subjects": [{"kind": "ServiceAccount", "name": "stranger", "namespace": namespace}]})  # fmt: skip
    return KubeHttp(cp.service_account_credentials(namespace, "stranger"))


@contextmanager
def guarding(gate: Gate, ns: str, stranger: KubeHttp, mode: str, workdir: Path) -> Iterator[Guarded]:  # noqa: F811
    """A Guarded namespace, disarmed at the end whatever the test armed."""
    g = Guarded(gate, ns, stranger, mode, workdir)
    try:
        yield g
    finally:
        g.disarm()


@pytest.fixture(params=["webhook", "policies alone"])
def guarded(gate: Gate, ns: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Guarded]:  # noqa: F811
    with guarding(gate, ns, _stranger(gate, ns), request.param, tmp_path / "webhook") as g:
        yield g


def refused(g: Guarded, who: KubeHttp, path: str, body: Any, *, content_type: str = MERGE, method: str = "PATCH",
            says: str | tuple[str, ...] = "") -> str:  # fmt: skip
    """The write is refused (dry runs first, until the policies and configurations have loaded), by the
    webhook when it runs, else by a policy; returns the message."""

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
    message = json.loads(err.value.body)["message"]
    # The webhook, or a policy: the chart's when the test installs them, or the harness's copy of the owner policies
    # (over every namespace of tier B; docs/controlplane.md), which refuses writes no owner's principal makes.
    by = (
        ("ValidatingAdmissionPolicy 'dispatch-",)
        if g.policies
        else ("dispatch-k8s denied this", "dispatch-harness-owners")
    )
    assert any(b in message for b in by), message
    assert any(text in message for text in ((says,) if isinstance(says, str) else says)), message
    return message


def _says(g: Guarded, rule: str, policy_text: str) -> tuple[str, ...]:
    """What may refuse the write: the webhook's rule, or the field policy's text when the test installs the
    policies; and the owner policy's (the chart's, or the harness's copy), whichever the API server reports."""
    return (rule, "belongs to a dispatch job") if not g.policies else (policy_text, "belongs to a dispatch job")


def _opened_running(g: Guarded) -> tuple[dict[str, Any], kit.Recorder]:
    tj = create_dispatch_trainjob(g.gate, g.namespace, g.gate.runtime)
    name = tj["metadata"]["name"]
    pods = kit.Recorder(g.admin, g.admin.collection_path("v1", "Pod", g.namespace),
                        label_selector=f"{LABEL_JOBSET_NAME}={name}")  # fmt: skip
    open_trainjob(g.gate, tj)
    admitted_workload(g.gate, tj, RAISED.format(1))
    wait_running(g.gate, tj, a=1, j=0)
    return get_trainjob(g.gate, tj), pods


def test_items_1_2_3_4_7_on_a_closed_job(guarded: Guarded) -> None:
    """Forged Ready, queue switch, A to the bound, another entry overriding A, on a job that dispatch has not
    opened; and plain → Kueue."""
    g, s = guarded, guarded.stranger
    tj = create_dispatch_trainjob(g.gate, g.namespace, g.gate.runtime)
    path = g.admin.object_path(tj)

    def listed() -> dict[str, Any]:
        wl = kit.workload_of(g.admin, g.namespace, tj["metadata"]["uid"])
        assert kit.check_entry(wl, g.gate.check)["state"] == "Pending"
        return wl

    wl = eventually(listed, 30, "the Workload listing dispatch's check Pending")
    plain = _plain_job(g)
    g.arm()
    checks = [{**c, "state": "Ready"} if c["name"] == g.gate.check else c for c in wl["status"]["admissionChecks"]]
    refused(
        g,
        s,
        g.admin.object_path(wl) + "/status",
        {"status": {"admissionChecks": checks}},
        says=_says(g, "workload-status.check", "only dispatch's admission controller sets its check Ready"),
    )
    refused(
        g,
        s,
        path,
        {"metadata": {"labels": {LABEL_QUEUE_NAME: "elsewhere"}}},
        says=_says(g, "update.queue", "is chosen at Start and never changes"),
    )
    refused(g, s, path, [{"op": "replace", "path": A_PATH, "value": "999999"}], content_type=JSON_PATCH,
            says=_says(g, "update.counter", "or admission in the write that unsuspends, raises A"))  # fmt: skip
    # Item 2 while it is suspended (Trainer itself refuses runtime-patch changes on a running job).
    entry = {"manager": "example.com/mine", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"metadata": {"annotations": {
            "dispatch.phpboyscout.uk/admission": "1"}}}}}}]}}}}  # fmt: skip
    refused(g, s, path, [{"op": "add", "path": "/spec/runtimePatches/-", "value": entry}], content_type=JSON_PATCH,
            says=_says(g, "runtime-patch.foreign", "another manager's runtime-patch entry sets only pod labels and annotations"))  # fmt: skip
    plain = _plain_job(g)
    refused(
        g,
        s,
        g.admin.object_path(plain),
        {"metadata": {"labels": {LABEL_QUEUE_NAME: LOCAL_QUEUE}}},
        says=_says(g, "update.queue", "is chosen at Start and never changes"),
    )
    # Nothing ran: neither job has a pod, and A was never raised.
    assert kit.pods_of(g.admin, g.namespace, tj["metadata"]["name"]) == []
    assert kit.a_of(get_trainjob(g.gate, tj)) == 0


def _plain_job(g: Guarded) -> dict[str, Any]:
    sub = Submission(job_id=str(ULID()), n=2, g=0, attempt=0, namespace=g.namespace,
                     image="registry.invalid/dispatch-e2e/train:1", command=["python", "train.py"], queue=None)  # fmt: skip
    return kit.create_as_start(g.admin, sub, g.gate.runtime)


def test_items_5_6_on_a_running_job(guarded: Guarded) -> None:
    """The JobSet deleted and J lowered, and a held Workload reactivated."""
    g, s = guarded, guarded.stranger
    tj, pods = _opened_running(g)
    name = tj["metadata"]["name"]
    g.arm()
    try:
        jobset = g.admin.get(JOBSET_V, "JobSet", name, g.namespace)
        # The webhook's rule, or the owner policy of JobSets (a JobSet deleted meanwhile is detected too).
        refused(g, s, g.admin.object_path(jobset), None, method="DELETE",
                says=_says(g, "jobset.delete", "belongs to a dispatch job"))  # fmt: skip
        # J rises (as JobSet would), then the stranger lowers it.
        g.admin.request("PATCH", g.admin.object_path(jobset) + "/status", {"status": {"restarts": 1}},
                        content_type=MERGE)  # fmt: skip
        wait_running(g.gate, tj, a=1, j=1, within=120)
        refused(
            g,
            s,
            g.admin.object_path(jobset) + "/status",
            {"status": {"restarts": 0}},
            says=_says(g, "jobset-status.restarts", "never falls"),
        )
        # dispatch holds it (Kueue mode: the Workload deactivated), the stranger reactivates it.
        hold = Hold("h-1", kit.now(), "ops", "maintenance")  # one Hold: made in the plan, each retry would be another
        patch_workload(g.gate, tj, lambda t, w: plan_hold(t, w, hold))
        wl = kit.workload_of(g.admin, g.namespace, tj["metadata"]["uid"])
        refused(
            g,
            s,
            g.admin.object_path(wl),
            {"spec": {"active": True}},
            says=_says(g, "workload.hold", "only Release reactivates it"),
        )
        runs = kit.assert_r_strictly_increases(pods.first_seen())
        assert runs == [(1, 0), (1, 1)], runs
    finally:
        pods.stop()


def test_item_10_no_in_place_restart_even_with_rank_restart_allowed(guarded: Guarded) -> None:
    g = guarded
    sub = Submission(job_id=str(ULID()), n=3, g=0, attempt=0, namespace=g.namespace,
                     image="registry.invalid/dispatch-e2e/train:1", command=["python", "train.py"], queue=LOCAL_QUEUE)  # fmt: skip
    copy_ = build_runtime_copy(sub, g.gate.runtime)
    g.arm()
    copy_["spec"]["template"]["spec"]["failurePolicy"] = {"restartStrategy": "InPlaceRestart", "maxRestarts": 1}
    refused(g, g.admin, g.admin.collection_path(TRAINER_V, "TrainingRuntime", g.namespace), copy_, method="POST",
            content_type="application/json",
            says=_says(g, "runtime.in-place-restart", "never restarts in place"))  # fmt: skip
    assert g.admin.list(KUEUE_V, "Workload", g.namespace) == []


def test_with_the_webhook_down_a_preemption_and_readmission_still_work(gate: Gate, ns: str) -> None:  # noqa: F811
    """The chart's admission as installed (the policies, and the webhook configurations with their failure policies),
    the webhook itself down: a running dispatch job is preempted and re-admitted with a raised A, recorded by the
    MutatingAdmissionPolicy, while a stranger's forged raise is still refused."""
    cp, admin = gate.tier_b.control_plane, gate.admin
    tj, pods = _opened_running(Guarded(gate, ns, _stranger(gate, ns), "policies", Path()))
    name = tj["metadata"]["name"]
    suffix = secrets.token_hex(3)
    armed: list[dict[str, Any]] = []
    selector = {"matchLabels": {"kubernetes.io/metadata.name": ns}}
    # Nothing listens on this port: every call of the API server to the webhook fails.
    down = webhook_configurations(namespace="dispatch-system", url=f"https://127.0.0.1:{free_port()}",
                                  ca_bundle=b"unused", name=f"down-{suffix}", policies=True, mutating_policy=True)  # fmt: skip
    for doc in down:
        for hook in doc["webhooks"]:
            hook["namespaceSelector"] = selector
    for doc in [*admission_policies(Config.model_validate(_config(gate)), namespace="dispatch-system"), *down]:
        doc["metadata"]["name"] += f"-{suffix}"
        if "policyName" in doc.get("spec", {}):
            doc["spec"]["policyName"] += f"-{suffix}"
            doc["spec"]["matchResources"] = {"namespaceSelector": selector}
        armed.append(cp.admin.create(doc))
    try:
        stranger = _stranger(gate, ns)
        eventually(
            lambda: _assert(_forged_raise_refused(stranger, get_trainjob(gate, tj))), 30, "the policies in force"
        )
        other = preemptor(gate, ns)
        admitted_workload(gate, other, NOT_DISPATCH)
        other_pods = eventually(lambda: _assert(kit.running(kit.pods_of(admin, ns, other["metadata"]["name"]))), 90,
                                "the preemptor runs")  # fmt: skip
        for pod in other_pods:
            admin.merge_patch("v1", "Pod", pod["metadata"]["name"],
                              {"metadata": {"annotations": {KWOK_COMPLETE_ANNOTATION: "true"}}}, ns)  # fmt: skip
        admitted_workload(gate, tj, RAISED.format(2), within=90)
        wait_running(gate, tj, a=2)
        readmitted = get_trainjob(gate, tj)
        assert readmitted["metadata"]["annotations"][ANNOTATION_ADMISSION_STARTED] == "2", "recorded in-process"
        assert kit.assert_r_strictly_increases(pods.first_seen()) == [(1, 0), (2, 0)]
        assert _forged_raise_refused(stranger, readmitted)
        assert admin.list(TRAINER_V, "TrainJob", ns), name
    finally:
        pods.stop()
        for doc in reversed(armed):
            cp.admin.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])


def _forged_raise_refused(stranger: KubeHttp, tj: dict[str, Any]) -> bool:
    try:
        stranger.request("PATCH", stranger.object_path(tj), [{"op": "replace", "path": A_PATH, "value": "9"}],
                         query={"dryRun": "All"}, content_type=JSON_PATCH)  # fmt: skip
    except ApiError as err:
        # The owner policy, or the identity rule (the policy's text and the webhook's both name who may raise A).
        raisers = "admission in the write that unsuspends"
        return err.status == 403 and ("belongs to a dispatch job" in err.body or raisers in err.body)
    return False
