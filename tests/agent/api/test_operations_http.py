"""Every operation through the API (real sockets, real TLS) over the fake API server: what is written,
with which preconditions, and the fences."""

from __future__ import annotations

import asyncio

import pytest

from agent.api.client import AgentError
from agent.api.errors import ErrorKind
from agent.api.models import HoldRequest, ObjectRef, OutputRequest, PreflightRequest, StartResponse
from agent.api.service import lifecycle
from agent.api.service.base import CONFLICT_ATTEMPTS
from contract.admission import admission_count, admission_floor
from contract.keys import (
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_HOLD_INSTANCE,
    ANNOTATION_OPENED,
    LABEL_JOBSET_NAME,
)
from contract.upstream import JOBSETS, PODS, TRAINING_RUNTIMES, TRAINJOBS, WORKLOADS
from harness.fixtures import runtime
from tests.agent.api import controllers as c
from tests.agent.api.conftest import NAMESPACE, Agent, supervisor_grants
from tests.agent.api.requests import start_request

pytestmark = pytest.mark.asyncio
TJS = TRAINJOBS.path(NAMESPACE)
COPIES = TRAINING_RUNTIMES.path(NAMESPACE)
KUEUE = {"kueue": {"localQueue": "user-queue"}}


def ref(started: StartResponse) -> ObjectRef:
    return ObjectRef(namespace=started.namespace, name=started.name, uid=started.uid)


@pytest.fixture(autouse=True)
def readmission_controller(fake) -> None:
    """A live readmission controller: without it Kueue mode is observe-only (tests/agent/api/test_preflight_http.py)."""
    c.readmission_controller(fake)


# -- Start ----------------------------------------------------------------------------------------


async def test_start_in_plain_mode_creates_the_copy_and_the_trainjob_closed(agent: Agent):
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE))
    assert started.name == "dj-01arz3ndektsv4rrffq69g5fav-s3"
    tj = agent.fake.get(TJS, started.name)
    assert tj["metadata"]["uid"] == started.uid
    assert tj["spec"]["suspend"] is True
    assert tj["metadata"]["labels"]["site"] == "test"  # the site's labels from the settings
    copy = agent.fake.get(COPIES, started.name)
    assert copy["metadata"]["ownerReferences"] == [
        {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": started.name,
         "uid": started.uid, "controller": False, "blockOwnerDeletion": False}
    ]  # fmt: skip
    assert copy["metadata"]["annotations"]["dispatch.phpboyscout.uk/runtime-source"].startswith(
        "ClusterTrainingRuntime/torch-distributed@"
    )
    assert agent.fake.writes
    assert all(w.endswith("?fieldManager=dispatch.phpboyscout.uk/adapter") for w in agent.fake.writes)


async def test_start_copies_a_training_runtime_of_the_namespace(agent: Agent):
    source = runtime("TrainingRuntime")
    source["metadata"] = {"name": "team-runtime", "namespace": NAMESPACE}
    agent.fake.put(COPIES, source)
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE, runtime={"kind": "TrainingRuntime", "name": "team-runtime"}))
    copy = agent.fake.get(COPIES, started.name)
    assert copy["metadata"]["annotations"]["dispatch.phpboyscout.uk/runtime-source"].startswith(
        "TrainingRuntime/team-runtime@"
    )
    assert copy["spec"] == source["spec"]


async def test_start_is_idempotent_for_the_same_request_and_a_conflict_otherwise(agent: Agent):
    async with agent.client() as api:
        first = await api.start(start_request(NAMESPACE))
        again = await api.start(start_request(NAMESPACE))
        assert again == first
        with pytest.raises(AgentError) as other:
            await api.start(start_request(NAMESPACE, attempt=5))
        assert other.value.kind is ErrorKind.CONFLICT
        assert "not the one this request creates" in other.value.message
        await api.open(ref(first))
        with pytest.raises(AgentError) as opened:
            await api.start(start_request(NAMESPACE))
        assert opened.value.kind is ErrorKind.CONFLICT
    assert len(agent.fake.items(TJS)) == 1


async def test_start_takes_up_a_copy_an_interrupted_start_left(agent: Agent):
    req = start_request(NAMESPACE)
    async with agent.client() as api:
        started = await api.start(req)
    left = agent.fake.get(COPIES, started.name)
    del agent.fake.objects[TJS][started.name]
    del left["metadata"]["ownerReferences"]
    async with agent.client() as api:
        again = await api.start(req)
    assert again.uid != started.uid
    assert agent.fake.get(COPIES, started.name)["metadata"]["ownerReferences"][0]["uid"] == again.uid


async def test_start_refuses_a_name_an_earlier_trainjob_left_objects_under(agent: Agent):
    """Deleted and Started again: the new TrainJob would begin at A = 0 with a new JobSet and repeat the first
    execution's identity. While anything of the earlier one is left, Start refuses, naming it, writing nothing."""
    req = start_request(NAMESPACE)
    async with agent.client() as api:
        started = await api.start(req)
        await api.open(ref(started))
    name = started.name
    owner = [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": name, "uid": started.uid}]
    agent.fake.put(JOBSETS.path(NAMESPACE), {"metadata": {"name": name, "namespace": NAMESPACE}})
    pod = {"metadata": {"name": f"{name}-node-0-0-x", "namespace": NAMESPACE, "labels": {LABEL_JOBSET_NAME: name}}}
    agent.fake.put(PODS.path(NAMESPACE), pod)
    agent.fake.put(
        WORKLOADS.path(NAMESPACE),
        {"metadata": {"name": f"trainjob-{name}-1a2b3", "namespace": NAMESPACE, "ownerReferences": owner}},
    )
    del agent.fake.objects[TJS][name]  # deleted with its dependents orphaned, or not yet collected
    writes = len(agent.fake.writes)
    async with agent.client() as api:
        with pytest.raises(AgentError) as err:
            await api.start(req)
    assert err.value.kind is ErrorKind.CONFLICT
    assert "an earlier TrainJob of that name left 3 object(s) behind" in err.value.message
    assert err.value.orphans == [  # a plain-mode Start reads no Workloads (agent/domain/start.py's units judge them)
        f"{NAMESPACE}/jobset/{name}",
        f"{NAMESPACE}/pod/{name}-node-0-0-x",
        f"{NAMESPACE}/trainingruntime/{name}",
    ]
    assert len(agent.fake.writes) == writes
    assert agent.fake.get(TJS, name) is None

    # Once everything of it is gone the agent cannot tell: not repeating the name is the supervisor's part.
    for collection in (JOBSETS.path(NAMESPACE), PODS.path(NAMESPACE), WORKLOADS.path(NAMESPACE), COPIES):
        agent.fake.objects[collection].pop(name, None)
        agent.fake.objects[collection].pop(f"{name}-node-0-0-x", None)
        agent.fake.objects[collection].pop(f"trainjob-{name}-1a2b3", None)
    async with agent.client() as api:
        assert (await api.start(req)).uid != started.uid


async def test_a_runtime_that_could_restart_in_place_is_refused_before_anything_is_written(agent: Agent):
    source = agent.fake.get("/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes", "torch-distributed")
    del source["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]["backoffLimit"]
    async with agent.client() as api:
        with pytest.raises(AgentError) as err:
            await api.start(start_request(NAMESPACE))
    assert (err.value.kind, err.value.field) == (ErrorKind.INVALID, "runtime")
    assert "backoffLimit" in err.value.message
    assert agent.fake.writes == []


async def test_a_missing_namespace_is_invalid(agent: Agent):
    agent.fake.namespaces.discard(NAMESPACE)
    async with agent.client() as api:
        with pytest.raises(AgentError) as err:
            await api.start(start_request(NAMESPACE))
    assert (err.value.kind, err.value.field) == (ErrorKind.INVALID, "namespace")


async def test_a_trainjob_changed_after_creation_is_stopped_and_refused(agent: Agent):
    agent.fake.after_write.append(c.tamper(lambda tj: tj["spec"]["trainer"].update(image="evil:1")))
    async with agent.client() as api:
        with pytest.raises(AgentError) as err:
            await api.start(start_request(NAMESPACE))
    assert err.value.kind is ErrorKind.CONFLICT
    assert "changed after creation" in err.value.message
    assert "spec.trainer" in err.value.message
    assert agent.fake.items(TJS) == []
    assert agent.fake.items(COPIES) == []


async def test_kueue_mode_without_a_workload_in_time_is_stopped_and_refused(agent: Agent):
    async with agent.client() as api:
        with pytest.raises(AgentError) as err:
            await api.start(start_request(NAMESPACE, **KUEUE))
    assert err.value.kind is ErrorKind.REJECTED
    assert "Kueue is not managing this TrainJob: no Workload appeared" in err.value.message
    assert agent.fake.items(TJS) == []
    assert agent.fake.items(COPIES) == []


async def test_kueue_mode_without_our_check_is_refused(agent: Agent):
    c.admission_check(agent.fake)
    agent.fake.after_write.append(c.kueue(checks=("someone-elses",)))
    async with agent.client() as api:
        with pytest.raises(AgentError) as err:
            await api.start(start_request(NAMESPACE, **KUEUE))
    assert "does not list dispatch's AdmissionCheck" in err.value.message


async def test_kueue_mode_refuses_pods_that_request_nothing(agent: Agent):
    c.admission_check(agent.fake)
    agent.fake.after_write.append(c.kueue(requests={}))
    async with agent.client() as api:
        with pytest.raises(AgentError) as err:
            await api.start(start_request(NAMESPACE, **KUEUE))
    assert err.value.kind is ErrorKind.REJECTED
    assert "would admit it without dispatch's AdmissionCheck" in err.value.message
    assert agent.fake.items(TJS) == []


def _patches(fake, since: int) -> list[str]:
    """The resources the PATCHes since the ``since``-th write went to, in order."""
    return [w.split("?")[0].split("/")[-2] for w in fake.writes[since:] if w.startswith("PATCH")]


async def test_kueue_mode_start_open_hold_release(agent: Agent):
    c.admission_check(agent.fake)
    agent.fake.after_write.append(c.kueue())
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE, **KUEUE))
        tj = agent.fake.get(TJS, started.name)
        assert tj["metadata"]["annotations"][ANNOTATION_ADMISSION_GATED_BY] == "dispatch.phpboyscout.uk/gate"

        opened = await api.open(ref(started))
        assert (opened.outcome, opened.held_by) == ("gate removed", [])
        assert ANNOTATION_ADMISSION_GATED_BY not in agent.fake.get(TJS, started.name)["metadata"]["annotations"]

        before = len(agent.fake.writes)
        held = await api.hold(HoldRequest(**ref(started).model_dump(), who="alice", reason="maintenance"))
        assert held.outcome == "held: Workload deactivated"
        assert _patches(agent.fake, before) == ["trainjobs", "workloads"]  # the record first, then the means
        tj_notes = agent.fake.get(TJS, started.name)["metadata"]["annotations"]
        assert tj_notes["dispatch.phpboyscout.uk/hold-who"] == "alice"
        assert len(tj_notes[ANNOTATION_HOLD_INSTANCE]) == 26  # a ULID
        (workload,) = agent.fake.items(WORKLOADS.path(NAMESPACE))
        assert workload["spec"]["active"] is False
        assert workload["metadata"]["annotations"][ANNOTATION_HOLD_INSTANCE] == tj_notes[ANNOTATION_HOLD_INSTANCE]
        status = await api.status(ref(started))
        assert (status.phase, status.hold.who, status.hold.instance) == (
            "Held",
            "alice",
            tj_notes[ANNOTATION_HOLD_INSTANCE],
        )

        before = len(agent.fake.writes)
        released = await api.release(ref(started))
        assert released.outcome == "released: Workload reactivated"
        assert _patches(agent.fake, before) == ["trainjobs", "workloads"]  # the record first, then the means
        (workload,) = agent.fake.items(WORKLOADS.path(NAMESPACE))
        assert workload["spec"]["active"] is True
        assert ANNOTATION_HOLD_INSTANCE not in workload["metadata"]["annotations"]
        assert ANNOTATION_HOLD_INSTANCE not in agent.fake.get(TJS, started.name)["metadata"]["annotations"]
        assert (await api.status(ref(started))).hold is None
        assert (await api.release(ref(started))).outcome == "not held"


async def test_kueue_hold_rereads_after_the_workload_changed_and_writes_only_what_is_left(agent: Agent):
    c.admission_check(agent.fake)
    agent.fake.after_write.append(c.kueue())
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE, **KUEUE))
        await api.open(ref(started))
        agent.fake.conflicts["workloads"] = 1  # Kueue wrote the Workload after the agent read it
        before = len(agent.fake.writes)
        held = await api.hold(HoldRequest(**ref(started).model_dump(), who="alice", reason="maintenance"))
    assert held.outcome == "held: Workload deactivated"
    # The Workload's write lost the race (409): re-read, and the TrainJob, held already, is not written again.
    assert _patches(agent.fake, before) == ["trainjobs", "workloads", "workloads"]
    (workload,) = agent.fake.items(WORKLOADS.path(NAMESPACE))
    assert workload["spec"]["active"] is False


async def test_an_interrupted_kueue_hold_leaves_the_job_held_and_release_finishes_it(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
):
    """The Workload's write keeps losing: the answer is conflict, the TrainJob carries the hold (the job is
    held from any new execution, and Status says so); Release then lifts what was written."""
    monkeypatch.setattr(lifecycle, "CONFLICT_BACKOFF", 0.0)  # the attempts, not their pauses
    c.admission_check(agent.fake)
    agent.fake.after_write.append(c.kueue())
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE, **KUEUE))
        await api.open(ref(started))
        agent.fake.conflicts["workloads"] = CONFLICT_ATTEMPTS  # each attempt
        before = len(agent.fake.writes)
        with pytest.raises(AgentError) as err:
            await api.hold(HoldRequest(**ref(started).model_dump(), who="alice", reason="maintenance"))
        assert err.value.kind is ErrorKind.CONFLICT
        assert _patches(agent.fake, before) == ["trainjobs"] + ["workloads"] * CONFLICT_ATTEMPTS
        notes = agent.fake.get(TJS, started.name)["metadata"]["annotations"]
        assert notes["dispatch.phpboyscout.uk/hold-who"] == "alice"
        (workload,) = agent.fake.items(WORKLOADS.path(NAMESPACE))
        assert workload["spec"]["active"] is True
        assert (await api.status(ref(started))).hold.who == "alice"
        before = len(agent.fake.writes)
        released = await api.release(ref(started))
        assert released.outcome.startswith("released: hold lifted from the TrainJob")
        assert _patches(agent.fake, before) == ["trainjobs"]
        assert (await api.status(ref(started))).hold is None


async def test_several_workloads_claiming_the_trainjob_are_a_conflict_and_nothing_is_written(agent: Agent):
    c.admission_check(agent.fake)
    agent.fake.after_write.append(c.kueue())
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE, **KUEUE))
        (mine,) = agent.fake.items(WORKLOADS.path(NAMESPACE))
        forged = {k: v for k, v in mine.items() if k != "status"}
        forged["metadata"] = {**mine["metadata"], "name": "forged", "uid": "forged-uid"}
        agent.fake.put(WORKLOADS.path(NAMESPACE), forged)
        before = len(agent.fake.writes)
        calls = [api.open, api.release, api.status]
        calls.append(lambda r: api.hold(HoldRequest(**r.model_dump(), who="x", reason="y")))
        for call in calls:
            with pytest.raises(AgentError) as err:
                await call(ref(started))
            assert err.value.kind is ErrorKind.CONFLICT, call
            assert f"2 Workloads claim TrainJob {NAMESPACE}/{started.name}" in err.value.message
            assert f"forged, {mine['metadata']['name']}" in err.value.message
        assert agent.fake.writes[before:] == []
        # An ownerReference that is not the controller's does not claim it: the job is Kueue's Workload's again.
        forged["metadata"]["ownerReferences"] = [{**forged["metadata"]["ownerReferences"][0], "controller": False}]
        agent.fake.put(WORKLOADS.path(NAMESPACE), forged)
        assert (await api.open(ref(started))).outcome == "gate removed"


async def test_start_refuses_and_stops_a_trainjob_several_workloads_claim(agent: Agent):
    c.admission_check(agent.fake)
    agent.fake.after_write.append(c.kueue())

    def forge(fake, collection: str, obj: dict) -> None:
        """A second Workload claiming each new TrainJob, as Kueue's own does."""
        for wl in fake.items(WORKLOADS.path(NAMESPACE)) if collection.endswith("/trainjobs") else []:
            if wl["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == obj["metadata"]["uid"]:
                fake.put(
                    WORKLOADS.path(NAMESPACE), {**wl, "metadata": {**wl["metadata"], "name": "forged", "uid": "f"}}
                )
                return

    agent.fake.after_write.append(forge)
    async with agent.client() as api:
        with pytest.raises(AgentError) as err:
            await api.start(start_request(NAMESPACE, **KUEUE))
    assert err.value.kind is ErrorKind.REJECTED
    assert "2 Workloads claim TrainJob" in err.value.message
    assert "was stopped" in err.value.message
    assert agent.fake.items(TJS) == []


async def test_open_reports_another_partys_gate(agent: Agent):
    c.admission_check(agent.fake)
    agent.fake.after_write.append(c.kueue())
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE, **KUEUE))
        tj = agent.fake.get(TJS, started.name)
        tj["metadata"]["annotations"][ANNOTATION_ADMISSION_GATED_BY] = "dispatch.phpboyscout.uk/gate,admin.example/hold"
        opened = await api.open(ref(started))
    assert opened.held_by == ["admin.example/hold"]
    assert agent.fake.get(TJS, started.name)["metadata"]["annotations"][ANNOTATION_ADMISSION_GATED_BY] == (
        "admin.example/hold"
    )


# -- Open, Hold, Release in plain mode --------------------------------------------------------------


async def test_plain_mode_open_hold_release_raise_a(agent: Agent):
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE))
        opened = await api.open(ref(started))
        assert (opened.outcome, opened.a) == ("opened", 1)
        tj = agent.fake.get(TJS, started.name)
        assert tj["spec"]["suspend"] is False
        assert tj["metadata"]["annotations"][ANNOTATION_OPENED] == "true"
        assert (admission_count(tj), admission_floor(tj)) == (1, 1)
        assert (await api.open(ref(started))).outcome == "already past its gate"

        held = await api.hold(
            HoldRequest(**ref(started).model_dump(), who="bob", reason="r", until="2026-12-01T00:00:00Z")
        )
        assert held.outcome == "held: TrainJob suspended"
        tj = agent.fake.get(TJS, started.name)
        assert tj["spec"]["suspend"] is True
        assert tj["metadata"]["annotations"]["dispatch.phpboyscout.uk/hold-until"] == "2026-12-01T00:00:00Z"

        released = await api.release(ref(started))
        assert (released.outcome, released.a) == ("released: TrainJob unsuspended", 2)
        assert admission_count(agent.fake.get(TJS, started.name)) == 2
        assert (await api.release(ref(started))).outcome == "not held"


async def test_a_different_object_of_the_same_name_is_refused(agent: Agent):
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE))
        other = ref(started).model_copy(update={"uid": "an-older-uid"})
        for call in (api.open, api.release, api.stop, api.status):
            with pytest.raises(AgentError) as err:
                await call(other)
            if call == api.status:
                assert err.value.kind is ErrorKind.NOT_FOUND
            else:
                assert err.value.kind is ErrorKind.CONFLICT, call
                assert "a different object of the same name" in err.value.message


async def test_no_route_acts_on_a_trainjob_that_is_not_dispatchs_nor_reveals_its_uid(agent: Agent):
    """The agent as a confused deputy (issue 10, item 9): its ClusterRole could suspend or delete anyone's
    TrainJob, so every route refuses one that is not dispatch's, and no answer carries its uid."""
    theirs = agent.fake.put(TJS, {"metadata": {"name": "resnet", "namespace": NAMESPACE}, "spec": {"suspend": False}})
    uid = theirs["metadata"]["uid"]
    async with agent.client() as api:
        for guess in (uid, "a-guess"):
            target = ObjectRef(namespace=NAMESPACE, name="resnet", uid=guess)
            calls = [api.open, api.release, api.stop, api.status]
            calls.append(lambda r: api.hold(HoldRequest(**r.model_dump(), who="x", reason="y")))
            calls.append(lambda r: _drain(api.output(OutputRequest(**r.model_dump()))))
            for call in calls:
                with pytest.raises(AgentError) as err:
                    await call(target)
                assert err.value.kind is ErrorKind.REJECTED, call
                assert "is not dispatch's" in err.value.message
                assert uid not in err.value.message
    assert agent.fake.get(TJS, "resnet")["spec"] == {"suspend": False}
    assert not [w for w in agent.fake.writes if "resnet" in w]
    assert not agent.fake.deletes


async def test_a_different_object_of_the_same_name_is_not_revealed(agent: Agent):
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE))
        with pytest.raises(AgentError) as err:
            await api.open(ref(started).model_copy(update={"uid": "a-guess"}))
    assert err.value.kind is ErrorKind.CONFLICT
    assert started.uid not in err.value.message


@pytest.mark.parametrize("namespace", ["kube-system", "dispatch-system"])
async def test_start_and_preflight_refuse_the_namespaces_the_webhook_excludes(agent: Agent, namespace: str):
    agent.fake.namespaces.add(namespace)
    agent.fake.grants += supervisor_grants(namespace)  # the caller may: the refusal is the agent's own
    async with agent.client() as api:
        with pytest.raises(AgentError) as err:
            await api.start(start_request(namespace))
        assert (err.value.kind, err.value.field) == (ErrorKind.INVALID, "namespace")
        assert "excluded from dispatch's admission webhook" in err.value.message
        with pytest.raises(AgentError) as pre:
            await api.preflight(PreflightRequest.model_validate({"namespace": namespace, "runtime": {"name": "x"}}))
        assert (pre.value.kind, pre.value.field) == (ErrorKind.INVALID, "namespace")
    assert not agent.fake.writes


async def _drain(stream) -> None:
    async for _ in stream:
        pass


async def test_open_after_the_end_is_a_fence(agent: Agent):
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE))
        agent.fake.get(TJS, started.name)["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
        with pytest.raises(AgentError) as err:
            await api.open(ref(started))
    assert err.value.kind is ErrorKind.REJECTED
    assert "without ever being opened" in err.value.message


async def test_a_concurrent_write_is_a_conflict(agent: Agent, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(lifecycle, "CONFLICT_BACKOFF", 0.0)  # the attempts, not their pauses
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE))
        path = TRAINJOBS.path(NAMESPACE, started.name)
        agent.fake.stale[path] = CONFLICT_ATTEMPTS  # someone writes after each of the agent's reads
        with pytest.raises(AgentError) as err:
            await api.open(ref(started))
        assert err.value.kind is ErrorKind.CONFLICT
        assert f"changed under each of {CONFLICT_ATTEMPTS} writes; re-read and retry" in err.value.message
        assert agent.fake.get(TJS, started.name)["spec"]["suspend"] is True

        agent.fake.stale[path] = CONFLICT_ATTEMPTS - 1  # the last read and write go through
        assert (await api.open(ref(started))).a == 1
    patches = [w for w in agent.fake.writes if w.startswith("PATCH") and "/trainjobs/" in w]
    assert len(patches) == 2 * CONFLICT_ATTEMPTS


# -- Stop -----------------------------------------------------------------------------------------


async def test_stop_deletes_in_the_foreground_with_the_uid_and_is_idempotent(agent: Agent):
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE))
        assert (await api.stop(ref(started))).outcome == "stopping"
        assert agent.fake.deletes[-1] == (TRAINJOBS.path(NAMESPACE, started.name), "Foreground")
        assert (await api.stop(ref(started))).outcome == "already gone"


# -- Status ---------------------------------------------------------------------------------------


async def test_status_reads_the_pods_and_their_nodes(agent: Agent):
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE))
        await api.open(ref(started))
        js = c.jobset(agent.fake, NAMESPACE, started.name, started.uid)
        c.ready_node(agent.fake)
        c.owned_pod(agent.fake, js, f"{started.name}-node-0-0-x")
        # A stranger's pod with the JobSet's label: reported, never counted (issue 10, item 8).
        agent.fake.put("/api/v1/namespaces/team-a/pods", c.pod(started.name, "fake-0", j="7"))
        s = await api.status(ref(started))
    assert (s.phase, s.mode, s.gate, s.a, s.j, s.r) == ("Running", "plain", "open", 1, 0, 1)
    assert s.foreign == [
        "Pod fake-0 carries the TrainJob's JobSet label but is not its own: no Job controls it (JobSet's pods "
        "are each created by a Job)."
    ]
    (pod,) = s.pods
    assert (pod.node, pod.verdict, pod.may_still_run) == ("node-1", "Running", True)
    (execution,) = s.executions
    assert (execution.epoch, execution.attempt) == (1_000_003_000_001, "01ARZ3NDEKTSV4RRFFQ69G5FAV.3.2.1.0")
    assert s.ceased is False
    assert s.orphans == []
    assert s.deletion_timestamp is None


async def test_status_of_a_gone_trainjob_is_not_found_with_its_orphans(agent: Agent):
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE))
        c.jobset(agent.fake, NAMESPACE, started.name, started.uid)
        agent.fake.put("/api/v1/namespaces/team-a/pods", c.pod(started.name, "p-0"))
        await api.stop(ref(started))
        with pytest.raises(AgentError) as err:
            await api.status(ref(started))
    assert err.value.kind is ErrorKind.NOT_FOUND
    assert err.value.orphans == [
        f"{NAMESPACE}/jobset/{started.name}",
        f"{NAMESPACE}/pod/p-0",
        f"{NAMESPACE}/trainingruntime/{started.name}",
    ]


# -- Output ---------------------------------------------------------------------------------------


async def test_output_streams_rank_0s_log(agent: Agent):
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE))
        out = OutputRequest(**ref(started).model_dump())
        with pytest.raises(AgentError) as none:
            [chunk async for chunk in api.output(out)]
        assert none.value.kind is ErrorKind.NOT_FOUND

        pods = "/api/v1/namespaces/team-a/pods"
        js = c.jobset(agent.fake, NAMESPACE, started.name, started.uid)
        c.owned_pod(agent.fake, js, "rank1", index="1")
        c.owned_pod(agent.fake, js, "old-rank0", j="0")
        c.owned_pod(agent.fake, js, "rank0", j="1")
        # A stranger's labelled pod claiming a later restart: never streamed as rank 0 (issue 10, item 8).
        agent.fake.put(pods, c.pod(started.name, "fake-rank0", j="9"))
        agent.fake.logs[(NAMESPACE, "fake-rank0")] = [b"forged\n"]
        with pytest.raises(AgentError) as waiting:
            [chunk async for chunk in api.output(out)]
        assert waiting.value.kind is ErrorKind.CONFLICT
        assert "waiting to start" in waiting.value.message

        agent.fake.logs[(NAMESPACE, "rank0")] = [b"epoch 1\n", b"epoch 2\n", b"done\n"]
        agent.fake.logs[(NAMESPACE, "old-rank0")] = [b"old\n"]
        assert b"".join([chunk async for chunk in api.output(out)]) == b"epoch 1\nepoch 2\ndone\n"
        chunks = [chunk async for chunk in api.output(out.model_copy(update={"follow": True}))]
    assert b"".join(chunks) == b"epoch 1\nepoch 2\ndone\n"
    assert len(chunks) == 3  # arrived as written: streamed, not buffered
    assert ("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/rank0/log") in agent.fake.calls


KUEUE_LAG = "admission webhook \"vtrainjob.kb.io\" denied the request: runtime '{name}' not found"
TRAINER_LAG = (
    'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: spec.runtimeRef: Invalid value: '
    '"object": trainingruntimes "{name}" not found: specified trainingRuntime must be created before the TrainJob is created'
)


@pytest.mark.parametrize("message", [KUEUE_LAG, TRAINER_LAG])
async def test_start_rides_out_the_webhooks_lag_behind_the_new_runtime_copy(agent: Agent, message: str):
    """Kueue's and Trainer's webhooks read runtimes from caches that lag the copy Start has just made."""
    name = "dj-01arz3ndektsv4rrffq69g5fav-s3"
    agent.fake.refuse_creates += [("trainjobs", 403, message.format(name=name))] * 2
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE))
    assert agent.fake.get(TJS, started.name)["metadata"]["uid"] == started.uid
    assert agent.fake.refuse_creates == []


async def test_any_other_webhook_refusal_of_the_trainjob_is_final(agent: Agent):
    agent.fake.refuse_creates.append(("trainjobs", 403, 'admission webhook "x" denied the request: no'))
    async with agent.client() as api:
        with pytest.raises(AgentError) as err:
            await api.start(start_request(NAMESPACE))
    assert err.value.kind is ErrorKind.REJECTED
    assert "denied the request: no" in err.value.message


# -- List -----------------------------------------------------------------------------------------


async def test_list_names_dispatchs_trainjobs_only_by_name_or_patch(agent: Agent):
    from agent.api.models import ListRequest
    from tests.agent.api.requests import fresh_job_id

    job = fresh_job_id()
    async with agent.client() as api:
        first = await api.start(start_request(NAMESPACE, jobId=job, n=1))
        second = await api.start(start_request(NAMESPACE, jobId=job, n=2))
        other = await api.start(start_request(NAMESPACE, jobId=fresh_job_id()))
        agent.fake.put(TJS, {"metadata": {"name": "someone-elses", "namespace": NAMESPACE}, "spec": {}})
        listed = await api.list(ListRequest(namespace=NAMESPACE))
        assert sorted(i.name for i in listed.items) == sorted([first.name, second.name, other.name])
        assert listed.continue_ is None
        mine = await api.list(ListRequest(namespace=NAMESPACE, job_id=job))
        assert [(i.name, i.uid, i.job_id, i.n, i.phase, i.orphan) for i in sorted(mine.items, key=lambda i: i.n)] == [
            (first.name, first.uid, job, 1, "Gated", f"{NAMESPACE}/{first.name}"),
            (second.name, second.uid, job, 2, "Gated", f"{NAMESPACE}/{second.name}"),
        ]
        with pytest.raises(AgentError) as err:
            await api.list(ListRequest(namespace=NAMESPACE, job_id=job.lower()))
        assert (err.value.kind, err.value.field) == (ErrorKind.INVALID, "jobId")


async def test_a_follower_that_closes_frees_its_stream_at_once_on_a_quiet_log(agent: Agent):
    """The slot maxFollowStreams counts is given back when the caller goes, not at the next log line: a quiet
    job's log (here: the next line an hour away) must not lock its supervisor out of new follow streams."""
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE))
        js = c.jobset(agent.fake, NAMESPACE, started.name, started.uid)
        c.owned_pod(agent.fake, js, "rank0", j="1")
        agent.fake.logs[(NAMESPACE, "rank0")] = [b"epoch 1\n", b"epoch 2\n"]
        agent.fake.log_delay = 3600
        stream = api.output(OutputRequest(**ref(started).model_dump(), follow=True))
        assert await anext(stream) == b"epoch 1\n"
        assert agent.server.follow_streams != {}
        await stream.aclose()
        for _ in range(60):
            if agent.server.follow_streams == {}:
                break
            await asyncio.sleep(0.1)
    assert agent.server.follow_streams == {}, "the closed follower still holds its slot"
