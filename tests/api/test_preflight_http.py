"""Preflight over the fake API server: the probe, its removal, the capabilities, and observe-only."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from agent.api.client import AgentError
from agent.api.errors import ErrorKind
from agent.api.kube import LEASES, TRAINING_RUNTIMES, TRAINJOBS
from agent.api.models import ObjectRef, PreflightRequest
from contract.keys import PROBE_IMAGE
from tests.api import controllers as c
from tests.api.conftest import NAMESPACE, TEST_SETTINGS, Agent
from tests.api.fake_kube import FakeKube
from tests.api.requests import start_request

pytestmark = pytest.mark.asyncio
PLAIN = PreflightRequest.model_validate({"namespace": NAMESPACE, "runtime": {"name": "torch-distributed"}})
KUEUE = PreflightRequest.model_validate(
    {"namespace": NAMESPACE, "runtime": {"name": "torch-distributed"}, "kueue": {"localQueue": "user-queue"}}
)


def lease(fake: FakeKube, seconds_ago: float, duration: int = 15) -> None:
    renewed = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds_ago)
    fake.put(
        LEASES.path("dispatch-system"),
        {
            "metadata": {"name": "dispatch-admission", "namespace": "dispatch-system"},
            "spec": {"renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "leaseDurationSeconds": duration},
        },
    )


def probes_seen(fake: FakeKube) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    fake.after_write.append(lambda f, coll, obj: seen.append(obj) if coll.endswith("/trainjobs") else None)
    return seen


def nothing_left(fake: FakeKube) -> bool:
    return fake.items(TRAINJOBS.path(NAMESPACE)) == [] and fake.items(TRAINING_RUNTIMES.path(NAMESPACE)) == []


async def test_plain_mode_preflight_proves_the_start_gate_and_removes_the_probe(agent: Agent):
    seen = probes_seen(agent.fake)
    async with agent.client() as api:
        before = await api.capabilities()
        assert (before.start_gate, before.observe_only) == (False, False)
        assert before.start_gate_reason == "no Preflight has run yet"
        caps = await api.preflight(PLAIN)
        assert await api.capabilities() == caps
    assert (caps.start_gate, caps.readmission_gate, caps.observe_only) == (True, False, False)
    assert caps.readmission_gate_reason.startswith("not needed")
    assert caps.versions["kueue.x-k8s.io"] == ["v1beta2", "v1beta1"]
    probe = seen[0]
    assert probe["spec"]["trainer"]["image"] == PROBE_IMAGE
    entry = probe["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    assert entry["template"]["spec"]["template"]["spec"]["nodeSelector"] == {"dispatch.phpboyscout.uk/probe": "never"}
    assert probe["spec"]["suspend"] is True
    assert nothing_left(agent.fake)


async def test_a_leaking_gate_makes_the_agent_observe_only_until_a_preflight_passes(agent: Agent):
    agent.fake.after_write.append(c.unsuspend_everything)
    async with agent.client() as api:
        caps = await api.preflight(PLAIN)
        assert caps.observe_only
        assert not caps.start_gate
        assert "the start gate leaks" in caps.observe_only_reason
        assert "appeared" in caps.observe_only_reason
        assert "unsuspended" in caps.observe_only_reason
        assert nothing_left(agent.fake)
        for call, arg in (
            (api.start, start_request(NAMESPACE)),
            (api.stop, ObjectRef(namespace=NAMESPACE, name="dj-x", uid="u")),
        ):
            with pytest.raises(AgentError) as err:
                await call(arg)
            assert (err.value.kind, err.value.status) == (ErrorKind.OBSERVE_ONLY, 503)
            assert "the start gate leaks" in err.value.message
        with pytest.raises(AgentError) as read:  # reads go on
            await api.status(ObjectRef(namespace=NAMESPACE, name="dj-x", uid="u"))
        assert read.value.kind is ErrorKind.NOT_FOUND

        agent.fake.after_write.remove(c.unsuspend_everything)
        agent.fake.objects.pop(f"/api/v1/namespaces/{NAMESPACE}/pods", None)  # the leaked pod goes with its job
        assert not (await api.preflight(PLAIN)).observe_only
        await api.start(start_request(NAMESPACE))


async def test_kueue_mode_needs_a_live_readmission_controller(agent: Agent):
    c.admission_check(agent.fake)
    agent.fake.after_write.append(c.kueue())
    async with agent.client() as api:
        no_lease = await api.preflight(KUEUE)
        assert no_lease.start_gate
        assert not no_lease.readmission_gate
        assert no_lease.observe_only
        assert "Lease dispatch-system/dispatch-admission does not exist" in no_lease.observe_only_reason

        lease(agent.fake, seconds_ago=60)
        dead = await api.preflight(KUEUE)
        assert dead.observe_only
        assert "the readmission controller is dead" in dead.observe_only_reason
        assert dead.lease_renewed is not None

        lease(agent.fake, seconds_ago=1)
        alive = await api.preflight(KUEUE)
    assert (alive.start_gate, alive.readmission_gate, alive.observe_only) == (True, True, False)
    assert "dispatch-admission is Active and listed on the probe's Workload" in alive.readmission_gate_reason
    assert nothing_left(agent.fake)


async def test_kueue_mode_without_our_check_on_the_queue_is_observe_only(agent: Agent):
    c.admission_check(agent.fake)
    lease(agent.fake, seconds_ago=1)
    agent.fake.after_write.append(c.kueue(checks=()))
    async with agent.client() as api:
        caps = await api.preflight(KUEUE)
    assert caps.observe_only
    assert "does not list dispatch's AdmissionCheck" in caps.observe_only_reason


async def test_a_preflight_that_cannot_start_changes_nothing(agent: Agent):
    async with agent.client() as api:
        with pytest.raises(AgentError) as err:
            await api.preflight(PLAIN.model_copy(update={"runtime": PLAIN.runtime.model_copy(update={"name": "nope"})}))
        assert (err.value.kind, err.value.field) == (ErrorKind.INVALID, "runtime")
        assert not (await api.capabilities()).observe_only


@pytest.mark.parametrize("agent", [TEST_SETTINGS.model_copy(update={"require_preflight": True})], indirect=True)
async def test_a_site_may_require_a_preflight_first(agent: Agent):
    async with agent.client() as api:
        with pytest.raises(AgentError) as err:
            await api.start(start_request(NAMESPACE))
        assert err.value.kind is ErrorKind.OBSERVE_ONLY
        assert "no Preflight has passed yet" in err.value.message
        await api.preflight(PLAIN)
        await api.start(start_request(NAMESPACE))
