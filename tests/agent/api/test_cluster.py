"""Tier A: the API against the real API server (TokenReview, SubjectAccessReview, JSON Patch preconditions,
deletes with preconditions) in plain mode, which needs no controllers. The agent runs as a ServiceAccount
with exactly the documented RBAC."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from agent.api.client import AgentClient, AgentError
from agent.api.errors import ErrorKind
from agent.api.models import HoldRequest, ObjectRef, PreflightRequest, StartResponse
from agent.api.settings import ApiSettings
from agent.domain.operations import plan_open
from contract.admission import admission_count, admission_floor
from contract.keys import ANNOTATION_OPENED, FIELD_MANAGER
from contract.prologue import PROLOGUE, PROLOGUE_CONFIGMAP, prologue_configmap
from contract.trainjob import build_trainjob
from harness.cluster import ControlPlane
from harness.fixtures import runtime, submission
from tests.agent.api.cluster import (
    RunningAgent,
    Supervisors,
    allowed,
    compliant_runtime,
    owners_at_work,
    running_agent,
    supervisors,
)
from tests.agent.api.requests import fresh_job_id, start_request

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]
TRAINER = "trainer.kubeflow.org/v1alpha1"
RUNTIME = "dispatch-api-test-runtime"
SETTINGS = ApiSettings(labels={"site": "tier-a"}, probeSeconds=2)


@dataclass
class Setup:
    cp: ControlPlane
    agent: RunningAgent
    who: Supervisors

    @property
    def ns(self) -> str:
        return self.who.namespace

    def client(self, who: str = "supervisor") -> AgentClient:
        return self.agent.client(self.who.tokens[who])

    def trainjob(self, name: str) -> dict | None:
        return self.cp.admin.get_or_none(TRAINER, "TrainJob", name, self.ns)


@pytest_asyncio.fixture
async def setup(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> AsyncIterator[Setup]:
    other = control_plane.create_namespace("api-other")
    who = supervisors(control_plane, namespace, other)
    compliant_runtime(control_plane, RUNTIME)
    async with running_agent(control_plane, tmp_path, SETTINGS) as agent:
        await allowed(agent, who.tokens["supervisor"], namespace)
        yield Setup(control_plane, agent, who)
    control_plane.delete_namespace(other)


def ref(s: StartResponse) -> ObjectRef:
    return ObjectRef(namespace=s.namespace, name=s.name, uid=s.uid)


def request(setup: Setup, **overrides):
    return start_request(setup.ns, **({"jobId": fresh_job_id(), "runtime": {"name": RUNTIME}} | overrides))


# -- The authorization matrix ---------------------------------------------------------------------


async def test_authorization_matrix(setup: Setup):
    req = request(setup)
    for token, kind in ((None, ErrorKind.UNAUTHENTICATED), ("not-a-token", ErrorKind.UNAUTHENTICATED),
                        ("stranger", ErrorKind.FORBIDDEN), ("elsewhere", ErrorKind.FORBIDDEN)):  # fmt: skip
        client = setup.agent.client(setup.who.tokens.get(token, token or ""))
        async with client as c:
            with pytest.raises(AgentError) as err:
                await c.start(req)
        assert err.value.kind is kind, token
    name = f"dj-{req.job_id.lower()}-s{req.n}"
    assert setup.trainjob(name) is None  # nothing was written for a refused call
    assert setup.cp.admin.get_or_none(TRAINER, "TrainingRuntime", name, setup.ns) is None

    async with setup.client("elsewhere") as c:  # its Role counts in the other namespace
        other = await c.start(req.model_copy(update={"namespace": setup.who.other_namespace}))
        assert other.namespace == setup.who.other_namespace
    async with setup.client() as c:
        started = await c.start(req)
        assert started.name == name
        async with setup.client("elsewhere") as elsewhere:  # Preflight's right is cluster-wide, its own
            with pytest.raises(AgentError) as err:
                await elsewhere.capabilities()
        assert err.value.kind is ErrorKind.FORBIDDEN
        assert not (await c.capabilities()).observe_only


# -- Plain mode, the whole life ---------------------------------------------------------------------


async def test_plain_mode_start_open_hold_release_status_stop(setup: Setup):
    req = request(setup)
    async with setup.client() as c:
        started = await c.start(req)
        assert await c.start(req) == started  # idempotent
        tj = setup.trainjob(started.name)
        assert tj["metadata"]["uid"] == started.uid
        assert tj["spec"]["suspend"] is True
        assert tj["metadata"]["labels"]["site"] == "tier-a"
        assert {f["manager"] for f in tj["metadata"]["managedFields"]} == {"dispatch.phpboyscout.uk/adapter"}
        copy = setup.cp.admin.get(TRAINER, "TrainingRuntime", started.name, setup.ns)
        assert [(o["uid"], o["controller"], o["blockOwnerDeletion"]) for o in copy["metadata"]["ownerReferences"]] == [
            (started.uid, False, False)
        ]

        status = await c.status(ref(started))
        assert (status.phase, status.gate, status.a, status.floor) == ("Gated", "closed", 0, None)

        opened = await c.open(ref(started))
        assert (opened.outcome, opened.a) == ("opened", 1)
        tj = setup.trainjob(started.name)
        assert tj["spec"]["suspend"] is False
        assert tj["metadata"]["annotations"][ANNOTATION_OPENED] == "true"
        assert (admission_count(tj), admission_floor(tj)) == (1, 1)
        assert (await c.open(ref(started))).outcome == "already past its gate"

        held = await c.hold(HoldRequest(**ref(started).model_dump(), who="ops", reason="drain"))
        assert held.outcome == "held: TrainJob suspended"
        assert (await c.status(ref(started))).phase == "Held"
        released = await c.release(ref(started))
        assert (released.outcome, released.a) == ("released: TrainJob unsuspended", 2)
        status = await c.status(ref(started))
        assert (status.phase, status.a, status.floor, status.j) == ("Running", 2, 2, None)

        assert (await c.stop(ref(started))).outcome == "stopping"
        # Foreground: the TrainJob stays, being deleted, until the garbage collector (not on tier A) is done.
        tj = setup.trainjob(started.name)
        assert tj["metadata"]["deletionTimestamp"]
        assert "foregroundDeletion" in tj["metadata"]["finalizers"]
        assert (await c.status(ref(started))).deletion_timestamp == tj["metadata"]["deletionTimestamp"]
        assert (await c.stop(ref(started))).outcome == "stopping"


async def test_a_different_object_of_the_same_name_is_refused(setup: Setup):
    async with setup.client() as c:
        started = await c.start(request(setup))
        old = ref(started).model_copy(update={"uid": "0b1e6a3c-0000-4000-8000-000000000000"})
        for call in (c.open, c.release, c.stop):
            with pytest.raises(AgentError) as err:
                await call(old)
            assert err.value.kind is ErrorKind.CONFLICT
            assert "a different object of the same name" in err.value.message
        assert setup.trainjob(started.name)["spec"]["suspend"] is True


async def test_open_after_the_end_is_a_fence(setup: Setup):
    async with setup.client() as c:
        started = await c.start(request(setup))
        setup.cp.admin.request(
            "PATCH",
            f"/apis/{TRAINER}/namespaces/{setup.ns}/trainjobs/{started.name}/status",
            {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "X", "message": "x",
                                        "lastTransitionTime": "2026-11-29T10:00:00Z"}]}},
            content_type="application/merge-patch+json",
        )  # fmt: skip
        with pytest.raises(AgentError) as err:
            await c.open(ref(started))
    assert err.value.kind is ErrorKind.REJECTED
    assert setup.trainjob(started.name)["spec"]["suspend"] is True


async def test_a_write_after_the_read_fails_its_precondition(setup: Setup):
    async with setup.client() as c:
        started = await c.start(request(setup))
    service = setup.agent.server.service
    read = await service._own(ref(started))
    plan = plan_open(read)
    setup.cp.admin.merge_patch(TRAINER, "TrainJob", started.name, {"metadata": {"labels": {"x": "y"}}}, setup.ns)
    assert await service._apply(plan, read, None) is False  # 409: the write is refused; Open re-reads
    assert setup.trainjob(started.name)["spec"]["suspend"] is True


def _leave_its_jobset_and_delete_it(setup: Setup, started) -> None:
    """The TrainJob's JobSet (as Trainer owns it), then the TrainJob deleted: tier A has no garbage
    collector, so the JobSet and the runtime copy are left behind."""
    setup.cp.admin.create(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": started.name, "namespace": setup.ns,
                         "ownerReferences": [{"apiVersion": TRAINER, "kind": "TrainJob", "name": started.name,
                                              "uid": started.uid, "controller": True}]},
            "spec": {"replicatedJobs": []},
        }
    )  # fmt: skip
    setup.cp.admin.delete(TRAINER, "TrainJob", started.name, setup.ns)  # background: no GC on tier A


async def test_status_of_a_deleted_trainjob_lists_its_orphans(setup: Setup):
    async with setup.client() as c:
        started = await c.start(request(setup))
        _leave_its_jobset_and_delete_it(setup, started)
        with pytest.raises(AgentError) as err:
            await c.status(ref(started))
    assert err.value.kind is ErrorKind.NOT_FOUND
    assert err.value.orphans == [
        f"{setup.ns}/jobset/{started.name}",
        f"{setup.ns}/trainingruntime/{started.name}",
    ]


async def test_start_refuses_the_name_of_a_deleted_trainjob_while_its_objects_are_left(setup: Setup):
    """A new TrainJob of the name would start again at A = 0 with a new JobSet: refused, naming what is left."""
    req = request(setup)
    async with setup.client() as c:
        started = await c.start(req)
        _leave_its_jobset_and_delete_it(setup, started)
        with pytest.raises(AgentError) as err:
            await c.start(req)
    assert err.value.kind is ErrorKind.CONFLICT
    assert err.value.orphans == [
        f"{setup.ns}/jobset/{started.name}",
        f"{setup.ns}/trainingruntime/{started.name}",
    ]
    assert setup.cp.admin.get_or_none(TRAINER, "TrainJob", started.name, setup.ns) is None  # nothing written


async def test_start_refuses_a_runtime_that_may_restart_in_place(setup: Setup):
    bad = compliant_runtime(setup.cp, "dispatch-api-test-restarting")
    setup.cp.admin.merge_patch(
        TRAINER,
        "ClusterTrainingRuntime",
        bad,
        {"spec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step":
             "trainer"}}, "spec": {"template": {"spec": {"restartPolicy": "OnFailure",
                                                         "containers": [{"name": "node", "image": "x"}]}}}}}]}}}},
    )  # fmt: skip
    async with setup.client() as c:
        with pytest.raises(AgentError) as err:
            await c.start(request(setup, runtime={"name": bad}))
    assert (err.value.kind, err.value.field) == (ErrorKind.INVALID, "runtime")
    assert "restartPolicy" in err.value.message


async def test_plain_mode_preflight_on_the_api_server(setup: Setup):
    async with setup.client() as c, owners_at_work(setup.cp, setup.ns):
        caps = await c.preflight(PreflightRequest.model_validate({"namespace": setup.ns, "runtime": {"name": RUNTIME}}))
    assert (caps.start_gate, caps.readmission_gate, caps.observe_only) == (True, False, False)
    assert caps.trainer, caps.trainer_reason  # the served schema has spec.runtimePatches; Open's write accepted
    assert caps.versions["trainer.kubeflow.org"] == ["v1alpha1"]
    assert "v1beta2" in caps.versions["kueue.x-k8s.io"]
    assert setup.cp.admin.list(TRAINER, "TrainJob", setup.ns) == []
    assert setup.cp.admin.list(TRAINER, "TrainingRuntime", setup.ns) == []


# -- Someone else's admission changes what Start wrote ------------------------------------------------


def mutating_policy(setup: Setup, name: str, expression: str) -> None:
    """A MutatingAdmissionPolicy (GA in 1.36) that rewrites TrainJobs created in the test's namespace."""
    setup.cp.admin.create(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "matchConstraints": {
                    "resourceRules": [{"apiGroups": ["trainer.kubeflow.org"], "apiVersions": ["v1alpha1"],
                                       "operations": ["CREATE"], "resources": ["trainjobs"]}],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": setup.ns}},
                },
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}],
            },
        }
    )  # fmt: skip
    setup.cp.admin.create(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name},
        }
    )


async def wait_for_policy(setup: Setup, check) -> None:
    probe = build_trainjob(submission(namespace=setup.ns, job_id=fresh_job_id(), queue=None), runtime()["spec"])
    for _ in range(100):
        made = setup.cp.admin.request("POST", f"/apis/{TRAINER}/namespaces/{setup.ns}/trainjobs", probe,
                                      query={"dryRun": "All"})  # fmt: skip
        if check(made):
            return
        await asyncio.sleep(0.2)
    raise AssertionError("the MutatingAdmissionPolicy never took effect")


async def test_a_trainjob_rewritten_at_creation_is_stopped_and_refused(setup: Setup):
    name = f"tamper-{setup.ns}"[:60]
    mutating_policy(setup, name, 'Object{spec: Object.spec{trainer: Object.spec.trainer{image: "evil.example/x:1"}}}')
    try:
        await wait_for_policy(setup, lambda tj: tj["spec"]["trainer"]["image"] == "evil.example/x:1")
        req = request(setup)
        async with setup.client() as c:
            with pytest.raises(AgentError) as err:
                await c.start(req)
        assert err.value.kind is ErrorKind.CONFLICT
        assert "changed after creation, so it was stopped: spec.trainer is not as written" in err.value.message
        name_ = f"dj-{req.job_id.lower()}-s{req.n}"
        assert setup.trainjob(name_) is None
        assert setup.cp.admin.get_or_none(TRAINER, "TrainingRuntime", name_, setup.ns) is None
    finally:
        setup.cp.admin.delete("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding", name)
        setup.cp.admin.delete("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy", name)


def live_controller_lease(cp: ControlPlane, namespace: str) -> None:
    """The readmission controller's Lease, as a leader just renewed it (for an hour): tier A runs no controller,
    and without its heartbeat Kueue-mode Start is observe-only."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cp.admin.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": "dispatch-admission", "namespace": namespace},
                     "spec": {"holderIdentity": "tier-a", "renewTime": now, "leaseDurationSeconds": 3600}})  # fmt: skip


async def test_another_partys_gate_added_at_creation_is_a_read_back_change(setup: Setup, tmp_path: Path):
    """Kueue lets gates be removed after creation, never added; so another party's gate can only come at
    creation, from an admission like this one, and Start's read-back refuses the TrainJob for it."""
    live_controller_lease(setup.cp, setup.ns)
    (tmp_path / "own-lease").mkdir()
    here = SETTINGS.model_copy(update={"lease_namespace": setup.ns})
    name = f"gate-{setup.ns}"[:60]
    mutating_policy(
        setup,
        name,
        'Object{metadata: Object.metadata{annotations: {"kueue.x-k8s.io/admission-gated-by": '
        '"dispatch.phpboyscout.uk/gate,admin.example/hold"}}}',
    )
    try:
        await wait_for_policy(
            setup,
            lambda tj: (
                "admin.example/hold" in tj["metadata"]["annotations"].get("kueue.x-k8s.io/admission-gated-by", "")
            ),
        )
        async with (
            running_agent(setup.cp, tmp_path / "own-lease", here) as agent,
            agent.client(setup.who.tokens["supervisor"]) as c,
        ):
            with pytest.raises(AgentError) as err:
                await c.start(request(setup, kueue={"localQueue": "q"}))
        assert err.value.kind is ErrorKind.CONFLICT
        assert "annotation kueue.x-k8s.io/admission-gated-by: wrote 'dispatch.phpboyscout.uk/gate'" in err.value.message
    finally:
        setup.cp.admin.delete("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding", name)
        setup.cp.admin.delete("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy", name)


async def test_preflight_refuses_a_trainer_whose_webhook_refuses_opens_atomic_unsuspend(setup: Setup):
    """Trainer v2.2.0's webhook refuses a runtime patch change unless the TrainJob is suspended after the
    update (v2.2.1 accepts the atomic unsuspend, #3489). A ValidatingAdmissionPolicy with v2.2.0's rule stands
    for it on the real API server: Preflight sends Open's own write as a dry run, sees it refused, and makes
    the agent observe-only, saying why."""
    name = f"trainer-v220-{setup.ns}"[:60]
    admin = setup.cp.admin
    admin.create(
        {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [{"apiGroups": ["trainer.kubeflow.org"], "apiVersions": ["v1alpha1"],
                                       "operations": ["UPDATE"], "resources": ["trainjobs"]}],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": setup.ns}},
                },
                "validations": [{
                    "expression": "object.spec.runtimePatches == oldObject.spec.runtimePatches || "
                                  "(has(object.spec.suspend) && object.spec.suspend)",
                    "message": "RuntimePatches can only be modified when the TrainJob is suspended",
                }],
            },
        }
    )  # fmt: skip
    admin.create({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
                  "metadata": {"name": name}, "spec": {"policyName": name, "validationActions": ["Deny"]}})  # fmt: skip
    req = PreflightRequest.model_validate({"namespace": setup.ns, "runtime": {"name": RUNTIME}})
    try:
        async with setup.client() as c, owners_at_work(setup.cp, setup.ns):
            for _ in range(100):  # until the policy is in effect
                caps = await c.preflight(req)
                if caps.observe_only:
                    break
            assert (caps.trainer, caps.start_gate, caps.observe_only) == (False, True, True), caps
            assert "refuses Open's own write on the probe" in caps.observe_only_reason
            assert "RuntimePatches can only be modified when the TrainJob is suspended" in caps.trainer_reason
            assert setup.cp.admin.list(TRAINER, "TrainJob", setup.ns) == []  # the probe is removed
            with pytest.raises(AgentError) as err:
                await c.start(request(setup))
            assert err.value.kind is ErrorKind.OBSERVE_ONLY
    finally:
        admin.delete("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", name)
        admin.delete("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", name)
    async with setup.client() as c, owners_at_work(setup.cp, setup.ns):
        for _ in range(100):
            if not (await c.preflight(req)).observe_only:
                break
        assert not (await c.capabilities()).observe_only


# -- The agent is no confused deputy (issue 10, item 9) --------------------------------------------


async def test_a_supervisor_cannot_have_the_agent_act_on_a_trainjob_that_is_not_dispatchs(setup: Setup):
    """A caller granted dispatch's API in the namespace, aiming the agent's ClusterRole at someone else's
    TrainJob there: every route refuses without saying its uid, and the TrainJob is untouched."""
    theirs = build_trainjob(submission(namespace=setup.ns, queue=None), runtime()["spec"])
    theirs["metadata"] = {"name": "resnet-team-b", "namespace": setup.ns}
    theirs["spec"]["runtimePatches"] = []
    theirs["spec"]["runtimeRef"] = {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                    "name": RUNTIME}  # fmt: skip
    created = setup.cp.admin.create(theirs)
    uid = created["metadata"]["uid"]
    target = ObjectRef(namespace=setup.ns, name="resnet-team-b", uid=uid)
    async with setup.client() as c:
        calls = [c.open, c.release, c.stop, c.status,
                 lambda r: c.hold(HoldRequest(**r.model_dump(), who="x", reason="y"))]  # fmt: skip
        for call in calls:
            with pytest.raises(AgentError) as err:
                await call(target)
            assert err.value.kind is ErrorKind.REJECTED
            assert "is not dispatch's" in err.value.message
            assert uid not in err.value.message
        with pytest.raises(AgentError) as excluded:
            await c.start(start_request("kube-system", jobId=fresh_job_id(), runtime={"name": RUNTIME}))
        assert (excluded.value.kind, excluded.value.field) in ((ErrorKind.INVALID, "namespace"),
                                                               (ErrorKind.FORBIDDEN, None))  # fmt: skip
    after = setup.trainjob("resnet-team-b")
    assert after is not None
    assert after["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert "deletionTimestamp" not in after["metadata"]


# -- The prologue's ConfigMap -----------------------------------------------------------------------


async def test_start_creates_the_prologues_configmap_reuses_it_and_refuses_another(setup: Setup):
    admin, ns, other = setup.cp.admin, setup.ns, setup.who.other_namespace
    assert admin.get_or_none("v1", "ConfigMap", PROLOGUE_CONFIGMAP, ns) is None
    async with setup.client() as c:
        first = await c.start(request(setup))
        made = admin.get("v1", "ConfigMap", PROLOGUE_CONFIGMAP, ns)
        assert (made["data"], made["immutable"], made.get("binaryData")) == ({"prologue.sh": PROLOGUE}, True, None)
        assert {f["manager"] for f in made["metadata"]["managedFields"]} == {FIELD_MANAGER}
        # the TrainJob's pods mount it: the name in dispatch's entry is this one
        assert PROLOGUE_CONFIGMAP in json.dumps(setup.trainjob(first.name)["spec"]["runtimePatches"])
        await c.start(request(setup))  # a second job of the namespace takes it as it is
        assert admin.get("v1", "ConfigMap", PROLOGUE_CONFIGMAP, ns)["metadata"]["uid"] == made["metadata"]["uid"]

    # One that is not exactly dispatch's (left by a write before the policies): refused, naming it; nothing written.
    squatter = {**prologue_configmap(other), "data": {"prologue.sh": 'exec "$@"\n'}}
    admin.create(squatter)
    req = request(setup).model_copy(update={"namespace": other})
    async with setup.client("elsewhere") as c:
        with pytest.raises(AgentError) as err:
            await c.start(req)
    assert err.value.kind is ErrorKind.CONFLICT
    assert f"ConfigMap {other}/{PROLOGUE_CONFIGMAP} exists and is not the prologue" in err.value.message
    assert "data[prologue.sh] is not this version's prologue text" in err.value.message
    name = f"dj-{req.job_id.lower()}-s{req.n}"
    assert admin.get_or_none(TRAINER, "TrainJob", name, other) is None
    assert admin.get_or_none(TRAINER, "TrainingRuntime", name, other) is None
