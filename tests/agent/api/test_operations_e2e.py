"""Tier B: the operations as a supervisor calls them, against the spec line by line (issue 11): a hold before
Open, plain mode waiting for the previous execution, the JobSet UID recorded by the adapter, Ceased defined
per phase, other parties' gates on the Workload, the field manager on every write, Start's read-back of
spec.suspend, List, and hold-until.

A pod is kept Terminating on a healthy node with a finalizer of the test's own: the Job controller deletes
it (a Hold suspends the job), kwok confirms no deletion while a finalizer is left, and the node-loss
classification says "Running: may still run" until the test removes it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from agent.api.client import AgentError
from agent.api.errors import ErrorKind
from agent.api.models import HoldRequest, ListRequest
from contract.keys import ANNOTATION_JOBSET_UID, FIELD_MANAGER
from harness.tier_b import KWOK_SLOW_KUBELET_ANNOTATION, TierB
from tests.agent.api import test_e2e as base
from tests.agent.api.cluster import apply
from tests.agent.api.requests import fresh_job_id, start_request
from tests.agent.api.test_e2e import E2E, KUEUE, QUEUE, RUNTIME, TRAINER, eventually, kueue_request, ref

# The tier B fixtures of tests/agent/api/test_e2e.py: dispatch's queue and the readmission controller's process.
controller = base.controller
e2e = base.e2e

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]
LINGER = "test.dispatch.phpboyscout.uk/linger"
ADMISSION_REG = "admissionregistration.k8s.io/v1"


def plain_request(e: E2E, **overrides: Any):
    return start_request(e.ns, **({"jobId": fresh_job_id(), "runtime": {"name": RUNTIME}} | overrides))


def hold_request(started, **extra: Any) -> HoldRequest:
    return HoldRequest(**ref(started).model_dump(), who="ops", reason="maintenance", **extra)


def pod_path(e: E2E, name: str) -> str:
    return f"/api/v1/namespaces/{e.ns}/pods/{name}"


def linger(e: E2E, pod: str) -> None:
    """Keep the pod in the API once deleted, still Running, as a kubelet that has not stopped its containers
    yet does: kwok confirms no deletion while a finalizer is left, and the harness's kubelet stage leaves a
    pod marked slow Running."""
    e.cp.admin.request(
        "PATCH", pod_path(e, pod),
        {"metadata": {"finalizers": [LINGER], "annotations": {KWOK_SLOW_KUBELET_ANNOTATION: "true"}}},
        content_type="application/strategic-merge-patch+json",
    )  # fmt: skip


def let_go(e: E2E, pod: str) -> None:
    """The kubelet stops the lingering pod's containers at last: it ends, and its deletion completes."""
    e.cp.admin.request(
        "PATCH", pod_path(e, pod),
        {"metadata": {"$deleteFromPrimitiveList/finalizers": [LINGER],
                      "annotations": {KWOK_SLOW_KUBELET_ANNOTATION: None}}},
        content_type="application/strategic-merge-patch+json",
    )  # fmt: skip


async def running_pod(e: E2E, name: str) -> dict[str, Any]:
    async def one() -> dict[str, Any]:
        pods = [p for p in e.pods(name) if not p["metadata"].get("deletionTimestamp")]
        assert [p["status"].get("phase") for p in pods] == ["Running"], pods
        return pods[0]

    return await eventually(one, 90, f"{name}: one pod Running")


# -- 1. A hold placed before Open survives Open, in both modes -------------------------------------------


async def test_plain_mode_a_hold_before_open_survives_open_and_release_runs_it(e2e: E2E):
    async with e2e.client() as api:
        started = await api.start(plain_request(e2e))
        await api.hold(hold_request(started))
        opened = await api.open(ref(started))
        assert (opened.outcome, opened.a) == ("opened; held until Release", None)
        await asyncio.sleep(3)
        assert e2e.pods(started.name) == []  # opened, but held: nothing runs
        s = await api.status(ref(started))
        assert (s.phase, s.gate, s.a) == ("Held", "open", 0)
        assert e2e.get("TrainJob", started.name)["spec"]["suspend"] is True
        released = await api.release(ref(started))
        assert (released.outcome, released.a) == ("released: TrainJob unsuspended", 1)
        await running_pod(e2e, started.name)
        await api.stop(ref(started))


async def test_kueue_mode_a_hold_before_open_survives_open(e2e: E2E):
    async with e2e.client() as api:
        started = await api.start(kueue_request(e2e))
        await api.hold(hold_request(started))
        opened = await api.open(ref(started))
        assert opened.outcome == "gate removed; held until Release"
        await asyncio.sleep(3)
        assert e2e.pods(started.name) == []
        assert (await api.status(ref(started))).phase == "Held"
        await api.release(ref(started))
        await running_pod(e2e, started.name)
        await api.stop(ref(started))


# -- 2, 3, 4. Plain mode: the previous execution, the JobSet UID, Ceased --------------------------------


async def test_plain_mode_release_waits_for_the_previous_execution_and_records_the_jobset(e2e: E2E):
    async with e2e.client() as api:
        started = await api.start(plain_request(e2e))
        gated = await api.status(ref(started))
        assert (gated.phase, gated.ceased) == ("Gated", True), gated.ceased_reason  # 4: nothing ever ran

        assert (await api.open(ref(started))).a == 1
        just_opened = await api.status(ref(started))
        assert just_opened.ceased is False, just_opened  # 4: its pods may not exist yet; they will
        pod = await running_pod(e2e, started.name)
        name = pod["metadata"]["name"]

        # 3: the JobSet's UID, recorded by the adapter in plain mode too (there is no gate to do it).
        jobset = e2e.get("JobSet", started.name, "jobset.x-k8s.io/v1alpha2")
        running = await api.status(ref(started))
        assert running.ceased is False
        assert (
            e2e.get("TrainJob", started.name)["metadata"]["annotations"][ANNOTATION_JOBSET_UID]
            == (jobset["metadata"]["uid"])
        )

        # 2: hold; the pod stays Terminating; Release refuses, naming it, and writes nothing.
        linger(e2e, name)
        await api.hold(hold_request(started))

        async def terminating() -> None:
            (p,) = e2e.pods(started.name)
            assert p["metadata"].get("deletionTimestamp"), p["metadata"]

        await eventually(terminating, 60, "the pod of the held job Terminating")
        held = await api.status(ref(started))
        assert (held.phase, held.ceased) == ("Held", False)  # 4: a pod may still run
        with pytest.raises(AgentError) as err:
            await api.release(ref(started))
        assert err.value.kind is ErrorKind.CONFLICT
        assert f"waiting for 1 pod(s) of the previous execution that may still run: {name}: Running" in (
            err.value.message
        )
        tj = e2e.get("TrainJob", started.name)
        assert tj["spec"]["suspend"] is True
        assert tj["metadata"]["annotations"]["dispatch.phpboyscout.uk/admission-floor"] == "1"

        let_go(e2e, name)

        async def gone() -> None:
            assert e2e.pods(started.name) == []

        await eventually(gone, 60, "the previous execution's pod gone")

        async def ceased_now() -> Any:
            s = await api.status(ref(started))
            assert s.ceased is True, s.ceased_reason
            return s

        # 4: gone is proof that it ended: it carried dispatch's finalizer, which only the agent removes, once
        # its processes are proven gone; so Ceased, on the evidence the readmission gate admits on.
        after = await eventually(ceased_now, 60, "held, its pod gone: Ceased")
        assert after.phase == "Held", after
        assert "it is held (suspended)" in after.ceased_reason

        assert (await api.release(ref(started))).a == 2
        again = await running_pod(e2e, started.name)
        assert again["metadata"]["annotations"]["dispatch.phpboyscout.uk/admission"] == "2"

        # 3: someone deletes the JobSet; Trainer builds a new one (J starts again): reported as foreign.
        e2e.cp.admin.delete("jobset.x-k8s.io/v1alpha2", "JobSet", started.name, e2e.ns)

        async def reported() -> None:
            s = await api.status(ref(started))
            assert any("is not the recorded" in f and jobset["metadata"]["uid"] in f for f in s.foreign), s.foreign

        await eventually(reported, 90, "a recreated JobSet reported")
        await api.stop(ref(started))


# -- 4. Ceased in Kueue mode, and at the end -------------------------------------------------------------


async def test_ceased_in_each_kueue_phase(e2e: E2E):
    async with e2e.client() as api:
        started = await api.start(kueue_request(e2e))
        assert (await api.status(ref(started))).ceased is True  # Gated: never opened
        await api.open(ref(started))
        queued = await api.status(ref(started))
        assert queued.phase in ("Queued", "Admitting", "Running"), queued
        assert queued.ceased is False, queued  # Kueue may admit it at any moment
        await running_pod(e2e, started.name)
        assert (await api.status(ref(started))).ceased is False
        await api.hold(hold_request(started))

        async def evicted() -> Any:
            s = await api.status(ref(started))
            assert (s.phase, s.pods) == ("Held", []), s
            return s

        await eventually(evicted, 90, "held: the pods gone")

        async def ceased_now() -> Any:
            s = await api.status(ref(started))
            assert s.ceased is True, (s.phase, s.ceased_reason)
            return s

        # Its pods left the API, and each carried dispatch's finalizer, which only the agent removes once the
        # processes are proven gone: so they ended, as the readmission gate reads it too.
        held = await eventually(ceased_now, 60, "held, its pods gone: Ceased")
        assert "its Workload is held (inactive)" in held.ceased_reason, held.ceased_reason
        await api.stop(ref(started))


async def test_ceased_once_the_job_completed(e2e: E2E):
    """A job whose pods complete (kwok completes a pod carrying the harness's annotation)."""
    cp = e2e.cp
    rt = cp.admin.get(TRAINER, "ClusterTrainingRuntime", RUNTIME)
    done = {"apiVersion": TRAINER, "kind": "ClusterTrainingRuntime", "metadata": {"name": f"{RUNTIME}-done"},
            "spec": rt["spec"]}  # fmt: skip
    pod_meta = done["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod_meta.setdefault("metadata", {}).setdefault("annotations", {})[
        "kwok.harness.dispatch.phpboyscout.uk/complete"
    ] = "true"
    apply(cp, done)
    async with e2e.client() as api:
        started = await api.start(plain_request(e2e, runtime={"name": f"{RUNTIME}-done"}))
        await api.open(ref(started))

        async def complete() -> Any:
            s = await api.status(ref(started))
            assert s.phase == "Complete", s
            return s

        s = await eventually(complete, 120, "the TrainJob Complete")
        assert [p.verdict for p in s.pods] == ["Ended"]
        assert s.ceased is True, s.ceased_reason
        await api.stop(ref(started))


async def test_ceased_once_the_deadline_deleted_the_jobset(e2e: E2E):
    """Trainer's activeDeadlineSeconds: the TrainJob Failed (DeadlineExceeded) and its JobSet deleted, so its
    pods are deleted too; once they are gone (their finalizer removed by the agent), Ceased."""
    async with e2e.client() as api:
        started = await api.start(plain_request(e2e, activeDeadlineSeconds=10))
        await api.open(ref(started))
        await running_pod(e2e, started.name)
        assert (await api.status(ref(started))).ceased is False

        async def ceased_now() -> Any:
            s = await api.status(ref(started))
            assert (s.phase, s.pods, s.ceased) == ("Failed", [], True), s
            return s

        s = await eventually(ceased_now, 120, "past its deadline, its pods gone: Ceased")
        assert "it ended (Failed)" in s.ceased_reason, s.ceased_reason
        assert e2e.get("JobSet", started.name, "jobset.x-k8s.io/v1alpha2") is None
        await api.stop(ref(started))


# -- 6. Other parties' gates on the Workload --------------------------------------------------------------


async def test_another_partys_gate_on_the_workload_is_reported(e2e: E2E):
    """Kueue copies the gate annotation onto the Workload; an admission of someone else's adds theirs there
    (a MutatingAdmissionPolicy stands for it). While a hold keeps the Workload inactive, that gate is on the
    Workload alone: Status reports it in heldBy."""
    name = f"wl-gate-{e2e.ns}"[:60]
    gates = 'object.metadata.annotations["kueue.x-k8s.io/admission-gated-by"]'
    has = 'has(object.metadata.annotations) && "kueue.x-k8s.io/admission-gated-by" in object.metadata.annotations'
    # On create, and on every update (Kueue syncs the TrainJob's gates onto an active Workload): theirs stays.
    value = f'({has}) ? ({gates}.contains("admin.example/hold") ? {gates} : {gates} + ",admin.example/hold") : "admin.example/hold"'
    e2e.cp.admin.create(
        {
            "apiVersion": ADMISSION_REG, "kind": "MutatingAdmissionPolicy", "metadata": {"name": name},
            "spec": {
                "matchConstraints": {
                    "resourceRules": [{"apiGroups": ["kueue.x-k8s.io"], "apiVersions": ["*"],
                                       "operations": ["CREATE", "UPDATE"], "resources": ["workloads"]}],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": e2e.ns}},
                },
                "failurePolicy": "Fail", "reinvocationPolicy": "Never",
                "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                    'Object{metadata: Object.metadata{annotations: {"kueue.x-k8s.io/admission-gated-by": '
                    + value + "}}}"}}],
            },
        }
    )  # fmt: skip
    e2e.cp.admin.create({"apiVersion": ADMISSION_REG, "kind": "MutatingAdmissionPolicyBinding",
                         "metadata": {"name": name}, "spec": {"policyName": name}})  # fmt: skip
    try:
        async with e2e.client() as api:

            async def gated_by_them() -> Any:
                started = await api.start(kueue_request(e2e))
                (wl,) = e2e.cp.admin.list(
                    KUEUE, "Workload", e2e.ns, label_selector=f"kueue.x-k8s.io/job-uid={started.uid}"
                )
                if "admin.example/hold" not in wl["metadata"]["annotations"].get(
                    "kueue.x-k8s.io/admission-gated-by", ""
                ):
                    await api.stop(ref(started))
                    raise AssertionError("the policy is not in effect yet")
                return started

            started = await eventually(gated_by_them, 60, "the policy in effect")
            await api.hold(hold_request(started))
            s = await api.status(ref(started))
            assert s.held_by == ["admin.example/hold"], s
            opened = await api.open(ref(started))
            assert opened.held_by == ["admin.example/hold"]
            await api.stop(ref(started))
    finally:
        e2e.cp.admin.delete(ADMISSION_REG, "MutatingAdmissionPolicyBinding", name)
        e2e.cp.admin.delete(ADMISSION_REG, "MutatingAdmissionPolicy", name)


# -- 7. The field manager on the Lease and on Events; the gate's hold in Kueue mode ----------------------


def manager_of(obj: dict[str, Any], field: str) -> set[str]:
    return {m["manager"] for m in obj["metadata"].get("managedFields") or [] if field in str(m.get("fieldsV1"))}


async def test_the_controller_writes_the_lease_and_events_with_dispatchs_field_manager(e2e: E2E):
    async def renewed() -> None:
        lease = e2e.cp.admin.get_or_none("coordination.k8s.io/v1", "Lease", "dispatch-admission", "dispatch-system")
        assert lease is not None, "the controller has not taken the Lease yet"
        assert manager_of(lease, "f:renewTime") == {FIELD_MANAGER}, lease["metadata"].get("managedFields")

    await eventually(renewed, 30, "the controller's Lease")
    async with e2e.client() as api:
        started = await api.start(kueue_request(e2e))
        await api.open(ref(started))
        pod = (await running_pod(e2e, started.name))["metadata"]["name"]
        linger(e2e, pod)
        await api.hold(hold_request(started))

        async def evicted() -> None:
            # A Release before Kueue has acted on the hold undoes it: the execution simply goes on.
            (p,) = e2e.pods(started.name)
            assert p["metadata"].get("deletionTimestamp"), p["metadata"]

        await eventually(evicted, 60, "Kueue evicts the held job: its pod Terminating")
        await api.release(ref(started))

        async def held_event() -> dict[str, Any]:
            # Release reactivates the Workload, then lifts the TrainJob's hold: Kueue may reserve quota in between,
            # and the gate hold the readmission on the hold first (an event of its own).
            events = [ev for ev in e2e.cp.admin.list("v1", "Event", e2e.ns)
                      if ev["involvedObject"].get("uid") == started.uid and ev["reason"] == "ReadmissionHeld"
                      and pod in ev["message"]]  # fmt: skip
            assert events, "no ReadmissionHeld event naming the Terminating pod yet"
            return events[0]

        event = await eventually(held_event, 90, "the gate holds the readmission on the Terminating pod")
        assert pod in event["message"]
        assert {m["manager"] for m in event["metadata"]["managedFields"]} == {FIELD_MANAGER}
        let_go(e2e, pod)
        again = await running_pod(e2e, started.name)
        assert again["metadata"]["annotations"]["dispatch.phpboyscout.uk/admission"] == "2"
        await api.stop(ref(started))


# -- 8. Start's read-back compares spec.suspend in plain mode -------------------------------------------


async def test_plain_start_refuses_a_trainjob_unsuspended_at_creation(e2e: E2E):
    name = f"unsuspend-{e2e.ns}"[:60]
    e2e.cp.admin.create(
        {
            "apiVersion": ADMISSION_REG, "kind": "MutatingAdmissionPolicy", "metadata": {"name": name},
            "spec": {
                "matchConstraints": {
                    "resourceRules": [{"apiGroups": ["trainer.kubeflow.org"], "apiVersions": ["v1alpha1"],
                                       "operations": ["CREATE"], "resources": ["trainjobs"]}],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": e2e.ns}},
                },
                "failurePolicy": "Fail", "reinvocationPolicy": "Never",
                "mutations": [{"patchType": "ApplyConfiguration",
                               "applyConfiguration": {"expression": "Object{spec: Object.spec{suspend: false}}"}}],
            },
        }
    )  # fmt: skip
    e2e.cp.admin.create({"apiVersion": ADMISSION_REG, "kind": "MutatingAdmissionPolicyBinding",
                         "metadata": {"name": name}, "spec": {"policyName": name}})  # fmt: skip
    try:
        async with e2e.client() as api:

            async def refused() -> AgentError:
                try:
                    started = await api.start(plain_request(e2e))
                except AgentError as exc:
                    return exc
                await api.stop(ref(started))
                raise AssertionError("the policy is not in effect yet")

            err = await eventually(refused, 60, "Start refuses the unsuspended TrainJob")
        assert err.kind is ErrorKind.CONFLICT, err
        assert "spec.suspend: wrote True, read False" in err.message

        async def stopped() -> None:
            left = [
                t for t in e2e.cp.admin.list(TRAINER, "TrainJob", e2e.ns) if not t["metadata"].get("deletionTimestamp")
            ]
            assert left == [], left

        await eventually(stopped, 30, "the refused TrainJob stopped")
    finally:
        e2e.cp.admin.delete(ADMISSION_REG, "MutatingAdmissionPolicyBinding", name)
        e2e.cp.admin.delete(ADMISSION_REG, "MutatingAdmissionPolicy", name)


# -- 9. List ---------------------------------------------------------------------------------------------


async def test_list_finds_dispatchs_trainjobs_page_by_page_and_stop_works_from_it(e2e: E2E, tier_b: TierB):
    async with e2e.client() as api:
        job = fresh_job_id()
        plain = await api.start(plain_request(e2e, jobId=job, n=1))
        kueue = await api.start(kueue_request(e2e, jobId=job, n=2))
        other = await api.start(plain_request(e2e))
        # Not dispatch's: another client's TrainJob of the same runtime.
        theirs = tier_b.admin.create({"apiVersion": TRAINER, "kind": "TrainJob",
                                      "metadata": {"name": "someone-elses", "namespace": e2e.ns},
                                      "spec": {"runtimeRef": {"name": RUNTIME}, "suspend": True}})  # fmt: skip
        everything = await api.list_all(e2e.ns, limit=1)
        assert sorted(i.name for i in everything) == sorted([plain.name, kueue.name, other.name])
        by_name = {i.name: i for i in everything}
        assert by_name[plain.name].model_dump(by_alias=True) == {
            "namespace": e2e.ns, "name": plain.name, "uid": plain.uid, "jobId": job, "n": 1, "phase": "Gated",
            "orphan": f"{e2e.ns}/{plain.name}", "deletionTimestamp": None,
        }  # fmt: skip
        assert by_name[kueue.name].phase == "Gated"

        first = await api.list(ListRequest(namespace=e2e.ns, limit=1))
        assert len(first.items) <= 1
        assert first.continue_  # four TrainJobs, one per page

        mine = await api.list(ListRequest(namespace=e2e.ns, job_id=job))
        assert sorted((i.name, i.uid) for i in mine.items) == sorted([(plain.name, plain.uid), (kueue.name, kueue.uid)])
        with pytest.raises(AgentError) as err:
            await api.list(ListRequest(namespace=e2e.ns, job_id="not-a-ulid"))
        assert (err.value.kind, err.value.field) == (ErrorKind.INVALID, "jobId")

        # A supervisor that lost its state stops what it finds.
        for item in mine.items:
            assert (await api.stop(ref(item))).outcome == "stopping"
        await api.stop(ref(other))
    tier_b.admin.delete(TRAINER, "TrainJob", theirs["metadata"]["name"], e2e.ns)

    async with e2e.agent.client(e2e.who.tokens["stranger"]) as stranger:
        with pytest.raises(AgentError) as err:
            await stranger.list(ListRequest(namespace=e2e.ns))
        assert err.value.kind is ErrorKind.FORBIDDEN
        assert "list trainjobs.dispatch.phpboyscout.uk" in err.value.message


# -- 10. hold-until is reported, not acted on -----------------------------------------------------------


async def test_an_expired_hold_is_reported_and_stays(e2e: E2E):
    past = (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    future = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    async with e2e.client() as api:
        for started in (await api.start(plain_request(e2e)), await api.start(kueue_request(e2e))):
            await api.open(ref(started))
            # Trainer and Kueue write the objects right after Open and Hold: a conflict is answered as documented
            # (re-read and retry), which is what a supervisor does.
            until_future, until_past = hold_request(started, until=future), hold_request(started, until=past)
            await eventually(lambda r=until_future: api.hold(r), 60, "held")
            s = await api.status(ref(started))
            assert (s.hold.who, s.hold.until, s.hold.expired) == ("ops", future, False), s.hold
            await eventually(lambda r=until_past: api.hold(r), 60, "held again")
            await asyncio.sleep(2)
            s = await api.status(ref(started))
            assert (s.phase, s.hold.until, s.hold.expired) == ("Held", past, True), s
            assert s.hold.reason == "maintenance"
            # Plain mode: the Release waits until the held execution's pod is gone (kwok confirms at once).
            await eventually(lambda started=started: api.release(ref(started)), 60, "released")
            assert (await api.status(ref(started))).hold is None
            await api.stop(ref(started))


# -- 5. Observe-only is cluster state; Stop and Hold go on in it ------------------------------------------


async def test_the_verdict_is_shared_by_every_replica(e2e: E2E, tmp_path):
    """Two replicas of the API (as the chart runs two), their verdict on a Lease of the test's own namespace:
    a Preflight through one decides for both, and requirePreflight is met by either's."""
    from agent.api.models import PreflightRequest
    from agent.api.settings import ApiSettings
    from tests.agent.api.cluster import running_agent

    here = {"leaseNamespace": e2e.ns, "probeSeconds": base.PROBE_SECONDS}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain = PreflightRequest.model_validate({"namespace": e2e.ns, "runtime": {"name": RUNTIME}})
    unchecked = PreflightRequest.model_validate(
        {"namespace": e2e.ns, "runtime": {"name": RUNTIME}, "kueue": {"localQueue": e2e.tb.local_queue}}
    )
    token = e2e.who.tokens["supervisor"]
    async with (
        running_agent(e2e.cp, tmp_path / "a", ApiSettings(**here)) as one,
        running_agent(e2e.cp, tmp_path / "b", ApiSettings(requirePreflight=True, **here)) as two,
        one.client(token) as first,
        two.client(token) as second,
    ):
        with pytest.raises(AgentError) as err:
            await second.start(plain_request(e2e))
        assert (err.value.kind, "no Preflight has passed yet" in err.value.message) == (ErrorKind.OBSERVE_ONLY, True)

        assert (await first.preflight(plain)).observe_only is False
        started = await second.start(plain_request(e2e))  # the other replica's Preflight counts
        assert (await second.capabilities()).start_gate is True

        failed = await first.preflight(unchecked)  # Kueue mode through a queue without dispatch's check
        assert failed.observe_only
        for api in (first, second):
            with pytest.raises(AgentError) as err:
                await api.start(kueue_request(e2e, queue=e2e.tb.local_queue))
            assert err.value.kind is ErrorKind.OBSERVE_ONLY
            assert "until a Kueue-mode Preflight passes" in err.value.message
            assert "does not list dispatch's AdmissionCheck" in err.value.message
        # Each mode has its own verdict: the failed Kueue-mode one does not stop plain mode.
        await first.open(ref(started))
        # Hold and Stop only reduce risk: they go on.
        assert (await second.hold(hold_request(started))).outcome == "held: TrainJob suspended"
        assert (await second.stop(ref(started))).outcome == "stopping"
        lease = e2e.cp.admin.get("coordination.k8s.io/v1", "Lease", "dispatch-admission", e2e.ns)
        assert {"dispatch.phpboyscout.uk/preflight-plain", "dispatch.phpboyscout.uk/preflight-kueue"} <= set(
            lease["metadata"]["annotations"]
        )

        assert (await second.preflight(plain)).observe_only is False
        assert (await first.capabilities()).observe_only is False


async def test_kueue_mode_is_observe_only_while_the_controllers_lease_is_not_renewed(e2e: E2E):
    """The readmission controller runs in the agent's leader. When the leader dies holding the Lease (SIGKILL:
    nothing releases it), a passing Kueue-mode verdict stops counting once the Lease is not renewed within its
    duration: Kueue-mode Start and Open are refused observe-only, plain mode goes on. When a leader renews it
    again, Kueue mode is allowed again, with no new Preflight."""
    async with e2e.client() as api:
        await eventually(lambda: base._passing(api, base.preflight(e2e)), 60, "a passing Kueue-mode Preflight")
        started = await api.start(kueue_request(e2e))
        proc = e2e.controller.proc
        assert proc is not None
        proc.kill()  # by its pid: the leader dies without releasing its Lease
        proc.wait(10)
        e2e.controller.proc = None
        try:

            async def down() -> Any:
                caps = await api.capabilities()
                assert (caps.mode, caps.observe_only) == ("kueue", True), caps
                return caps

            caps = await eventually(down, 30, "Kueue mode observe-only once the Lease is stale")
            assert caps.observe_only_reason.startswith(
                "the readmission controller is down: its Lease dispatch-system/dispatch-admission was last renewed at "
            )
            assert "longer than its leaseDurationSeconds (15)" in caps.observe_only_reason
            for call, arg in ((api.start, kueue_request(e2e)), (api.open, ref(started))):
                with pytest.raises(AgentError) as err:
                    await call(arg)
                assert err.value.kind is ErrorKind.OBSERVE_ONLY
                assert err.value.message.startswith("observe-only in Kueue mode: the readmission controller is down")
                assert "until its leader renews the Lease" in err.value.message
            plain = await api.start(plain_request(e2e))  # plain mode needs no readmission controller
            await api.stop(ref(plain))
        finally:
            e2e.controller.start()

        async def renewed() -> None:
            assert not (await api.capabilities()).observe_only

        await eventually(renewed, 60, "the Lease renewed by the restarted leader")
        opened = await api.open(ref(started))
        assert opened.outcome
        again = await api.start(kueue_request(e2e))
        for s in (started, again):
            await api.stop(ref(s))


# -- 7. The readmission controller's heartbeat: watched, not computed from clocks ------------------------


async def test_a_lease_renewed_in_the_future_but_not_any_more_is_dead(e2e: E2E, tmp_path):
    """A Lease whose renewTime lies an hour ahead of this machine's clock (the writer's clock runs fast) and
    that nobody renews: comparing clocks would call it fresh for an hour; watching it sees it dead."""
    from agent.api.models import PreflightRequest
    from agent.api.settings import ApiSettings
    from tests.agent.api.cluster import running_agent

    ahead = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    e2e.cp.admin.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                         "metadata": {"name": "dispatch-admission", "namespace": e2e.ns},
                         "spec": {"holderIdentity": "ghost", "renewTime": ahead, "acquireTime": ahead,
                                  "leaseDurationSeconds": 15}})  # fmt: skip
    req = PreflightRequest.model_validate(
        {"namespace": e2e.ns, "runtime": {"name": RUNTIME}, "kueue": {"localQueue": QUEUE}}
    )
    async with (
        running_agent(e2e.cp, tmp_path, ApiSettings(leaseNamespace=e2e.ns, probeSeconds=base.PROBE_SECONDS)) as agent,
        agent.client(e2e.who.tokens["supervisor"]) as api,
    ):
        caps = await api.preflight(req)
        assert caps.observe_only
        assert f"its Lease {e2e.ns}/dispatch-admission was not renewed in" in caps.observe_only_reason
        assert caps.lease_renewed == ahead

        e2e.cp.admin.merge_patch("coordination.k8s.io/v1", "Lease", "dispatch-admission",
                                 {"spec": {"holderIdentity": "", "leaseDurationSeconds": 1}}, namespace=e2e.ns)  # fmt: skip
        released = await api.preflight(req)
        assert "was released (it has no holder)" in released.observe_only_reason


# -- 11. Trainer's minimum version ------------------------------------------------------------------------


async def test_preflight_proves_trainers_webhook_accepts_opens_write_and_refuses_one_that_does_not(e2e: E2E):
    """The pinned Trainer (v2.2.1) serves spec.runtimePatches and its webhook accepts Open's raise-and-
    unsuspend in one update (a dry run on the probe). v2.2.0's rule — a runtime patch change only if the
    TrainJob stays suspended — stands in as a ValidatingAdmissionPolicy: Preflight then refuses, saying why."""
    from agent.api.models import PreflightRequest

    plain = PreflightRequest.model_validate({"namespace": e2e.ns, "runtime": {"name": RUNTIME}})
    async with e2e.client() as api:
        caps = await api.preflight(plain)
        assert (caps.trainer, caps.observe_only) == (True, False), caps
        assert "Open's write (raise A, unsuspend) is accepted" in caps.trainer_reason
        name = f"trainer-v220-{e2e.ns}"[:60]
        e2e.cp.admin.create(
            {
                "apiVersion": ADMISSION_REG, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {
                        "resourceRules": [{"apiGroups": ["trainer.kubeflow.org"], "apiVersions": ["v1alpha1"],
                                           "operations": ["UPDATE"], "resources": ["trainjobs"]}],
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": e2e.ns}},
                    },
                    "validations": [{
                        "expression": "object.spec.runtimePatches == oldObject.spec.runtimePatches || "
                                      "(has(object.spec.suspend) && object.spec.suspend)",
                        "message": "RuntimePatches can only be modified when the TrainJob is suspended",
                    }],
                },
            }
        )  # fmt: skip
        e2e.cp.admin.create({"apiVersion": ADMISSION_REG, "kind": "ValidatingAdmissionPolicyBinding",
                             "metadata": {"name": name},
                             "spec": {"policyName": name, "validationActions": ["Deny"]}})  # fmt: skip
        try:

            async def refused() -> Any:
                caps = await api.preflight(plain)
                assert caps.observe_only, "the policy is not in effect yet"
                return caps

            caps = await eventually(refused, 90, "Preflight refuses the v2.2.0 rule")
            assert (caps.trainer, caps.start_gate) == (False, True)
            assert "RuntimePatches can only be modified when the TrainJob is suspended" in caps.trainer_reason
        finally:
            e2e.cp.admin.delete(ADMISSION_REG, "ValidatingAdmissionPolicyBinding", name)
            e2e.cp.admin.delete(ADMISSION_REG, "ValidatingAdmissionPolicy", name)

        async def passing() -> None:
            assert not (await api.preflight(plain)).observe_only

        await eventually(passing, 90, "Preflight passes again")
