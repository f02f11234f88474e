"""Tier B: Stop ends an execution for good. Stop deletes the TrainJob in the foreground (agent/api/service/lifecycle.py
``STOP_PROPAGATION``): the garbage collector deletes its JobSet while the ``foregroundDeletion`` finalizer keeps the
TrainJob, and Trainer v2.2.1, which reconciles a TrainJob whatever its ``deletionTimestamp``, then creates a JobSet
again, running (the TrainJob is unsuspended), with J at 0 and the pods' A unchanged: the execution Stop ended would
run again under the same R. The policy ``dispatch-k8s-jobsets`` (webhook/policies.py ``jobset_policy``) refuses a
dispatch JobSet created running, so Trainer's create is refused and nothing runs again. Without the policy this test
fails: the JobSet is made again and a pod of (A, J) = (1, 0) runs again.

The agent's API and readmission controller, the real Kueue, Trainer, JobSet and kube-controller-manager (its
garbage collector) and kwok; the policy bound to the test's namespace alone.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agent.api.client import AgentError
from agent.api.errors import ErrorKind
from contract.keys import LABEL_JOBSET_NAME
from harness.kube_http import ApiError, KubeHttp
from tests.agent.api import test_e2e as base
from tests.agent.api.requests import fresh_job_id, start_request
from tests.agent.api.test_e2e import E2E, RUNTIME, TRAINER, eventually, kueue_request, ref, status_or_error
from tests.agent.gate import kit
from tests.agent.gate.kit import JOBSET_V
from webhook.rules.jobs import job_resume_policy
from webhook.rules.jobsets import JOBSET_CREATED_SUSPENDED, jobset_policy

# The tier B fixtures of tests/agent/api/test_e2e.py: dispatch's queue and the readmission controller's process.
controller = base.controller
e2e = base.e2e

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]
ADMISSION_REG = "admissionregistration.k8s.io/v1"
KEEP = "test.dispatch.phpboyscout.uk/keep"
SETTLE = 5.0
"""Seconds to watch, once the JobSet is gone, for what Trainer makes of the TrainJob it still sees."""
REFUSED = "TrainJobResourcesCreationFailed"
"""The reason of the Event Trainer records on a TrainJob whose JobSet it could not apply."""


def _running_jobset(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": JOBSET_V,
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"suspend": False, "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "node", "image": "registry.invalid/x"}]}}}}}]},
    }  # fmt: skip


def _enforced(admin: KubeHttp, namespace: str) -> None:
    """Policies load asynchronously: a dry-run create of a running dispatch JobSet is refused by this one. (The
    admin is break-glass for the harness's owner policies, so nothing else refuses it.)"""
    probe = _running_jobset(namespace, f"dj-{fresh_job_id().lower()}-s1")
    path = admin.collection_path(JOBSET_V, "JobSet", namespace)
    deadline = time.monotonic() + 30
    refusal: ApiError | None = None
    while refusal is None:
        try:
            admin.request("POST", path, probe, query={"dryRun": "All"})
        except ApiError as err:
            refusal = err
        else:
            assert time.monotonic() < deadline, "the JobSet policy was not enforced within 30 s"
            time.sleep(0.2)
    assert refusal.status == 403, refusal
    assert JOBSET_CREATED_SUSPENDED in json.loads(refusal.body)["message"], refusal.body


def _bound(e2e: E2E, policy: dict[str, Any]) -> str:
    """``policy`` renamed for the test and bound to its namespace alone; its name."""
    admin = e2e.cp.admin
    name = policy["metadata"]["name"] = f"{policy['metadata']['name']}-{secrets.token_hex(3)}"
    binding = {
        "apiVersion": ADMISSION_REG,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": e2e.ns}}},
        },
    }
    admin.create(policy)
    admin.create(binding)
    return name


def _unbind(e2e: E2E, name: str) -> None:
    e2e.cp.admin.delete(ADMISSION_REG, "ValidatingAdmissionPolicyBinding", name)
    e2e.cp.admin.delete(ADMISSION_REG, "ValidatingAdmissionPolicy", name)


@pytest.fixture
def jobsets_policy(e2e: E2E) -> Iterator[str]:
    """dispatch's JobSet policy as the chart renders it (it names no principal), bound to the test's namespace."""
    name = _bound(e2e, jobset_policy())
    try:
        _enforced(e2e.cp.admin, e2e.ns)
        yield name
    finally:
        _unbind(e2e, name)


def _denials(admin: KubeHttp, policy: str) -> int:
    """How many writes the policy has refused, as the API server counts them (its /metrics)."""
    total = 0.0
    for line in str(admin.request("GET", "/metrics")).splitlines():
        if (
            line.startswith("apiserver_validating_admission_policy_check_total{")
            and f'policy="{policy}"' in line
            and 'enforcement_action="deny"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


async def _first_execution_running(api: Any, started: Any) -> None:
    """Once opened, the job runs its first execution: one pod Running, (A, J) = (1, 0)."""

    async def running() -> None:
        s = await api.status(ref(started))
        assert (s.phase, s.a, s.j, [p.phase for p in s.pods]) == ("Running", 1, 0, ["Running"]), s

    await eventually(running, 90, "running after Open")


def _keep(admin: KubeHttp, namespace: str, name: str, keep: bool) -> None:
    """Add or remove the test's own finalizer on the TrainJob (resourceVersion-preconditioned; again on a conflict:
    Kueue and Trainer write it too)."""
    for _ in range(10):
        tj = admin.get_or_none(TRAINER, "TrainJob", name, namespace)
        if tj is None:
            return
        kept = [f for f in tj["metadata"].get("finalizers") or [] if f != KEEP] + ([KEEP] if keep else [])
        meta = {"finalizers": kept, "resourceVersion": tj["metadata"]["resourceVersion"]}
        try:
            admin.merge_patch(TRAINER, "TrainJob", name, {"metadata": meta}, namespace)
            return
        except ApiError as err:
            if err.status != 409:
                raise
    raise AssertionError(f"the TrainJob's finalizers kept conflicting: {name}")


@pytest.mark.parametrize("kueue", [True, False], ids=["kueue-mode", "plain-mode"])
async def test_stop_ends_the_execution_for_good(e2e: E2E, jobsets_policy: str, kueue: bool):
    """Stop while the TrainJob is kept after its JobSet is gone. Here the garbage collector usually removes the
    TrainJob within milliseconds of the JobSet, so Trainer's recreation is a race the test would mostly lose; a
    finalizer of the test's own keeps the TrainJob as a slower collector, a Workload Kueue has not released yet, or
    any other party's finalizer does, until Trainer has acted."""
    admin, ns = e2e.cp.admin, e2e.ns
    request = kueue_request(e2e) if kueue else start_request(ns, jobId=fresh_job_id(), runtime={"name": RUNTIME})
    name = f"dj-{request.job_id.lower()}-s{request.n}"
    jobsets = kit.Recorder(admin, admin.collection_path(JOBSET_V, "JobSet", ns))
    pods = kit.Recorder(admin, admin.collection_path("v1", "Pod", ns), label_selector=f"{LABEL_JOBSET_NAME}={name}")
    try:
        async with e2e.client() as api:
            started = await api.start(request)
            assert started.name == name
            await api.open(ref(started))

            await _first_execution_running(api, started)
            ended = {p["metadata"]["uid"] for p in e2e.pods(name)}
            jobset = admin.get(JOBSET_V, "JobSet", name, ns)
            assert jobset["spec"]["suspend"] is False
            _keep(admin, ns, name, True)
            before = _denials(admin, jobsets_policy)

            assert (await api.stop(ref(started))).outcome == "stopping"

            async def jobset_gone() -> None:
                tj = e2e.get("TrainJob", name)
                assert tj is not None, "the TrainJob is gone: the test's finalizer did not keep it"
                assert tj["metadata"].get("deletionTimestamp"), tj["metadata"]
                now = e2e.get("JobSet", name, JOBSET_V)
                assert now is None or now["metadata"]["uid"] != jobset["metadata"]["uid"], e2e.dependents(name)
                assert not {p["metadata"]["uid"] for p in e2e.pods(name)} & ended, e2e.dependents(name)

            await eventually(jobset_gone, 120, "the JobSet and the pods of the execution deleted, the TrainJob kept")
            await asyncio.sleep(SETTLE)

            # Trainer tried to make the JobSet again, for the TrainJob being deleted, and the policy refused it.
            # Trainer's Event and log say only "unknown (patch jobsets... <name>)" (its client does not decode the
            # refusal); the API server's count of the policy's denials says whose refusal it was.
            async def refused() -> list[str]:
                events = [e for e in admin.list("v1", "Event", ns) if e["reason"] == REFUSED
                          and e["involvedObject"].get("uid") == started.uid]  # fmt: skip
                messages = [e["message"] for e in events]
                assert any(f"patch jobsets.jobset.x-k8s.io {name}" in m for m in messages), messages
                assert _denials(admin, jobsets_policy) > before, f"no refusal by {jobsets_policy}: {messages}"
                return messages

            # No JobSet was made for it again, and no pod ran again: the pods of the execution Stop ended are the
            # only ones ever seen, all under (A, J) = (1, 0).
            made = [js["metadata"]["uid"] for js in jobsets.first_seen() if js["metadata"]["name"] == name]
            assert made == [jobset["metadata"]["uid"]], f"the TrainJob's JobSet was made again: {made}"
            seen = pods.first_seen()
            runs = [(p["metadata"]["name"], kit.pod_a_j(p)) for p in seen]
            assert {p["metadata"]["uid"] for p in seen} == ended, f"a pod ran again: {runs}"
            assert kit.executions(seen) == [(1, 0)], runs
            await eventually(refused, 30, "Trainer's create of a running JobSet refused by the policy")

            _keep(admin, ns, name, False)

            async def gone() -> None:
                answer = await status_or_error(api, ref(started))
                assert isinstance(answer, AgentError), f"still there: {e2e.dependents(name)}; {answer}"
                assert answer.kind is ErrorKind.NOT_FOUND
                assert answer.orphans == []

            await eventually(gone, 60, "the TrainJob gone, with its pods and JobSet")
    finally:
        _keep(admin, ns, name, False)
        for recorder in (jobsets, pods):
            recorder.stop()


async def test_a_job_suspended_as_kueues_child_is_not_resumed_under_the_same_a(e2e: E2E, jobsets_policy: str):
    """Kueue (v0.19.2 ``shouldSuspendChildJob``) suspends the JobSet and the Jobs of a TrainJob that has no admitted
    Workload, as when the TrainJob is being deleted (Stop's foreground delete, while the pods' finalizers hold the
    garbage collector); Trainer resumes the JobSet (the TrainJob is not suspended) and JobSet resumes the Job, in one
    update that leaves A as it was. The Job controller then replaces the pod its suspension deleted: the rank ran
    again under the (A, J) of the execution that had just ended (the campaign, docs/reliability.md). Here Kueue's
    patch is made by the test, on a running job; the policy ``dispatch-k8s-job-resume`` refuses JobSet's resume, so
    no pod runs again. Without the policy this test fails: a second pod of (A, J) = (1, 0) appears."""
    admin, ns = e2e.cp.admin, e2e.ns
    policy = _bound(e2e, job_resume_policy())
    request = kueue_request(e2e)
    name = f"dj-{request.job_id.lower()}-s{request.n}"
    pods = kit.Recorder(admin, admin.collection_path("v1", "Pod", ns), label_selector=f"{LABEL_JOBSET_NAME}={name}")
    try:
        async with e2e.client() as api:
            started = await api.start(request)
            await api.open(ref(started))

            await _first_execution_running(api, started)
            ran = {p["metadata"]["uid"] for p in e2e.pods(name)}
            jobs = [j for j in admin.list("batch/v1", "Job", ns) if j["metadata"]["name"].startswith(f"{name}-")]
            assert len(jobs) == 1, [j["metadata"]["name"] for j in jobs]
            before = _denials(admin, policy)

            # Kueue's patch of a child whose ancestor has no admitted Workload.
            admin.merge_patch("batch/v1", "Job", jobs[0]["metadata"]["name"], {"spec": {"suspend": True}}, ns)

            # JobSet resumes a suspended Job of a running JobSet at once; the Job controller then makes a pod.
            await asyncio.sleep(2 * SETTLE)
            seen = pods.first_seen()
            runs = [(p["metadata"]["name"], kit.pod_a_j(p)) for p in seen]
            assert {p["metadata"]["uid"] for p in seen} == ran, f"a pod ran again: {runs}"
            assert kit.executions(seen) == [(1, 0)], runs
            job = admin.get("batch/v1", "Job", jobs[0]["metadata"]["name"], ns)
            assert job["spec"]["suspend"] is True, "the Job was resumed"

            async def refused() -> None:
                assert _denials(admin, policy) > before, "JobSet's resume of the Job was not refused"

            await eventually(refused, 30, "JobSet's resume under the same A refused by the policy")
            assert (await api.stop(ref(started))).outcome == "stopping"
    finally:
        pods.stop()
        _unbind(e2e, policy)
