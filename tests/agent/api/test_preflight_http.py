"""Preflight over the fake API server: the probe, its removal, the capabilities, and observe-only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from agent.api.client import AgentError
from agent.api.errors import ErrorKind
from agent.api.models import HoldRequest, ObjectRef, PreflightRequest
from contract.keys import PROBE_IMAGE
from contract.upstream import TRAINING_RUNTIMES, TRAINJOBS
from tests.agent.api import controllers as c
from tests.agent.api.conftest import NAMESPACE, TEST_SETTINGS, Agent
from tests.agent.api.fake_kube import FakeKube
from tests.agent.api.requests import fresh_job_id, start_request

pytestmark = pytest.mark.asyncio
PLAIN = PreflightRequest.model_validate({"namespace": NAMESPACE, "runtime": {"name": "torch-distributed"}})
KUEUE = PreflightRequest.model_validate(
    {"namespace": NAMESPACE, "runtime": {"name": "torch-distributed"}, "kueue": {"localQueue": "user-queue"}}
)


def lease(fake: FakeKube, seconds_ago: float, duration: int = 15, holder: str = "agent-0") -> None:
    c.readmission_controller(fake, seconds_ago=seconds_ago, duration=duration, holder=holder)


@asynccontextmanager
async def renewing(fake: FakeKube) -> AsyncIterator[None]:
    """A live readmission controller: its Lease renewed every 0.2 s, as leader election does."""

    async def renew() -> None:
        while True:
            lease(fake, seconds_ago=0)
            await asyncio.sleep(0.2)

    task = asyncio.create_task(renew())
    try:
        yield
    finally:
        task.cancel()


@pytest.fixture(autouse=True)
def owners_at_work(fake: FakeKube) -> None:
    """Trainer and JobSet make the probe's JobSet and Job (a test that wants them missing removes the hook)."""
    fake.after_write.append(c.trainer_and_jobset())


def probes_seen(fake: FakeKube) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    fake.after_write.append(lambda f, coll, obj: seen.append(obj) if coll.endswith("/trainjobs") else None)
    return seen


def nothing_left(fake: FakeKube, but: str | None = None) -> bool:
    """No probe left behind (``but``: a TrainJob and its copy the test started itself)."""
    left = [o["metadata"]["name"] for path in (TRAINJOBS, TRAINING_RUNTIMES) for o in fake.items(path.path(NAMESPACE))]
    return [n for n in left if n != but] == []


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
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE))  # before: Open and Release act on its mode
        mine = ObjectRef(namespace=NAMESPACE, name=started.name, uid=started.uid)
        agent.fake.after_write.append(c.unsuspend_everything)
        caps = await api.preflight(PLAIN)
        assert caps.observe_only
        assert not caps.start_gate
        assert "the start gate leaks" in caps.observe_only_reason
        assert "appeared" in caps.observe_only_reason
        assert "unsuspended" in caps.observe_only_reason
        assert nothing_left(agent.fake, but=started.name)
        for call, arg in ((api.start, start_request(NAMESPACE)), (api.open, mine), (api.release, mine)):
            with pytest.raises(AgentError) as err:
                await call(arg)
            assert (err.value.kind, err.value.status) == (ErrorKind.OBSERVE_ONLY, 503)
            assert "observe-only in plain mode: until a plain-mode Preflight passes: the start gate leaks" in (
                err.value.message
            )
        # Open of no such TrainJob has no mode to judge: it is simply not found (and changes nothing).
        with pytest.raises(AgentError) as gone:
            await api.open(ObjectRef(namespace=NAMESPACE, name="dj-x", uid="u"))
        assert gone.value.kind is ErrorKind.NOT_FOUND
        with pytest.raises(AgentError) as read:  # reads go on
            await api.status(ObjectRef(namespace=NAMESPACE, name="dj-x", uid="u"))
        assert read.value.kind is ErrorKind.NOT_FOUND
        # Stop and Hold only reduce risk: they go on (here: there is nothing of that name to stop).
        assert (await api.stop(ObjectRef(namespace=NAMESPACE, name="dj-x", uid="u"))).outcome == "already gone"
        with pytest.raises(AgentError) as hold:
            await api.hold(HoldRequest(namespace=NAMESPACE, name="dj-x", uid="u", who="ops", reason="r"))
        assert hold.value.kind is ErrorKind.NOT_FOUND

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

        # A Lease nobody renews while Preflight watches it for its duration, though its renewTime is "fresh"
        # by this machine's clock (the other's runs ahead): dead. Liveness is seen, not computed from clocks.
        lease(agent.fake, seconds_ago=-3600, duration=2)
        dead = await api.preflight(KUEUE)
        assert dead.observe_only
        assert "the readmission controller is dead" in dead.observe_only_reason
        assert "was not renewed in 2s of watching" in dead.observe_only_reason
        assert dead.lease_renewed is not None

        lease(agent.fake, seconds_ago=0, holder="")  # released on shutdown
        released = await api.preflight(KUEUE)
        assert "was released (it has no holder)" in released.observe_only_reason

        async with renewing(agent.fake):
            alive = await api.preflight(KUEUE)
    assert (alive.start_gate, alive.readmission_gate, alive.observe_only) == (True, True, False)
    assert "dispatch-admission is Active and listed on the probe's Workload" in alive.readmission_gate_reason
    assert nothing_left(agent.fake)


async def test_kueue_mode_is_observe_only_while_the_controllers_lease_is_stale(agent: Agent):
    """A passing Kueue-mode verdict holds only while the readmission controller's Lease is renewed within its
    duration: stale, Kueue-mode Start is refused (plain mode goes on); renewed again, it is allowed again."""
    c.admission_check(agent.fake)
    agent.fake.after_write.append(c.kueue())
    kueue_start = start_request(NAMESPACE, jobId=fresh_job_id(), kueue={"localQueue": "user-queue"})
    async with agent.client() as api:
        async with renewing(agent.fake):
            assert not (await api.preflight(KUEUE)).observe_only
        lease(agent.fake, seconds_ago=16)  # the leader stopped renewing 16 s ago (duration 15)
        with pytest.raises(AgentError) as err:
            await api.start(kueue_start)
        assert err.value.kind is ErrorKind.OBSERVE_ONLY
        assert err.value.message.startswith("observe-only in Kueue mode: the readmission controller is down (its ")
        assert "longer than its leaseDurationSeconds (15)) until its leader renews the Lease" in err.value.message
        caps = await api.capabilities()
        assert (caps.mode, caps.observe_only, caps.readmission_gate) == ("kueue", True, False)
        assert caps.observe_only_reason.startswith("the readmission controller is down: its Lease")
        await api.start(start_request(NAMESPACE, jobId=fresh_job_id()))  # plain mode needs no controller

        lease(agent.fake, seconds_ago=0, holder="")  # released: a leader that stepped down
        with pytest.raises(AgentError) as err:
            await api.start(kueue_start)
        assert "was released (it has no holder)" in err.value.message

        lease(agent.fake, seconds_ago=0)  # a leader renews it again: no new Preflight needed
        started = await api.start(kueue_start)
        assert not (await api.capabilities()).observe_only
        lease(agent.fake, seconds_ago=16)
        with pytest.raises(AgentError) as err:  # Open acts in the TrainJob's mode: Kueue
            await api.open(ObjectRef(namespace=NAMESPACE, name=started.name, uid=started.uid))
        assert err.value.kind is ErrorKind.OBSERVE_ONLY


async def test_a_plain_mode_preflight_does_not_clear_kueue_modes_observe_only(agent: Agent):
    """Each mode has its own verdict: a plain-mode Preflight that passes after a failed Kueue-mode one lets
    plain mode go on, and Kueue mode stays observe-only until a Kueue-mode Preflight passes."""
    c.admission_check(agent.fake)
    hook = c.kueue(checks=())
    agent.fake.after_write.append(hook)
    kueue_start = start_request(NAMESPACE, jobId=fresh_job_id(), kueue={"localQueue": "user-queue"})
    async with agent.client() as api, renewing(agent.fake):
        assert (await api.preflight(KUEUE)).observe_only  # the queue does not list dispatch's check
        assert not (await api.preflight(PLAIN)).observe_only
        assert (await api.capabilities()).mode == "plain"  # the last Preflight's
        with pytest.raises(AgentError) as err:
            await api.start(kueue_start)
        assert err.value.message.startswith("observe-only in Kueue mode: until a Kueue-mode Preflight passes: ")
        assert "does not list dispatch's AdmissionCheck" in err.value.message
        await api.start(start_request(NAMESPACE))  # plain mode goes on

        agent.fake.after_write.remove(hook)
        agent.fake.after_write.append(c.kueue())
        assert not (await api.preflight(KUEUE)).observe_only
        await api.start(kueue_start)


async def test_kueue_mode_without_our_check_on_the_queue_is_observe_only(agent: Agent):
    c.admission_check(agent.fake)
    agent.fake.after_write.append(c.kueue(checks=()))
    async with agent.client() as api, renewing(agent.fake):
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


async def test_the_verdict_is_cluster_state_every_replica_reads(agent: Agent, fake: FakeKube, tls):
    """Two replicas over one API server: a failed Preflight answered by one makes the other observe-only
    too, and a passing one lifts it for both; requirePreflight is satisfied by either replica's Preflight."""
    from kubernetes_asyncio import client as k8s

    from agent.api.app import ApiServer, serving
    from agent.api.kube import Kube
    from serving.tls import ReloadingServerContext
    from tests.agent.api.conftest import HOST, TEST_SETTINGS
    from tests.agent.api.fake_kube import running

    strict = TEST_SETTINGS.model_copy(update={"require_preflight": True})
    async with running(fake) as kube_url, k8s.ApiClient(fake.configuration(kube_url)) as api_client:
        other = ApiServer(Kube(api_client, timeout=10), strict)
        context = ReloadingServerContext(tls.cert_file, tls.key_file)
        async with serving(other.app(), HOST, 0, context) as port:
            replica = Agent(f"https://{HOST}:{port}", fake, other, tls)
            async with agent.client() as first, replica.client() as second:
                with pytest.raises(AgentError) as err:
                    await second.start(start_request(NAMESPACE))
                assert "no Preflight has passed yet" in err.value.message
                assert (await first.preflight(PLAIN)).observe_only is False
                assert (await second.capabilities()).start_gate is True
                started = await second.start(start_request(NAMESPACE))

                fake.after_write.append(c.unsuspend_everything)
                assert (await second.preflight(PLAIN)).observe_only
                fake.after_write.remove(c.unsuspend_everything)
                with pytest.raises(AgentError) as err:
                    await first.open(ObjectRef(namespace=NAMESPACE, name=started.name, uid=started.uid))
                assert err.value.kind is ErrorKind.OBSERVE_ONLY
                assert "the start gate leaks" in err.value.message
                assert (await first.capabilities()).observe_only


async def test_a_trainer_older_than_the_minimum_is_refused(agent: Agent):
    """Below v2.2.0 the served TrainJob has no spec.runtimePatches (the API server would prune A away);
    v2.2.0's webhook refuses Open's atomic raise-and-unsuspend. Either is observe-only, saying which."""
    async with agent.client() as api:
        ok = await api.preflight(PLAIN)
        assert (ok.trainer, ok.observe_only) == (True, False)
        assert len(agent.fake.dry_runs) == 1  # Open's write on the probe, judged and not stored
        assert nothing_left(agent.fake)

        agent.fake.refuse_dry_runs = (
            "spec.runtimePatches: Forbidden: RuntimePatches can only be modified when the TrainJob is suspended"
        )
        old = await api.preflight(PLAIN)
        assert (old.trainer, old.start_gate, old.observe_only) == (False, True, True)
        assert "refuses Open's own write on the probe" in old.observe_only_reason
        assert "RuntimePatches can only be modified when the TrainJob is suspended" in old.trainer_reason
        agent.fake.refuse_dry_runs = None

        agent.fake.trainjob_spec = ("runtimeRef", "trainer", "podTemplateOverrides", "suspend")
        older = await api.preflight(PLAIN)
        assert older.observe_only
        assert "the served TrainJob has no spec.runtimePatches: Trainer is older than v2.2.0" in older.trainer_reason
        with pytest.raises(AgentError) as err:
            await api.start(start_request(NAMESPACE))
        assert err.value.kind is ErrorKind.OBSERVE_ONLY


@pytest.mark.parametrize(("jobs", "owner"), [(None, "webhook.owners.trainer"), (False, "webhook.owners.jobset")])
async def test_an_owner_that_writes_nothing_for_the_probe_makes_it_observe_only(agent: Agent, jobs, owner):
    """Trainer's JobSet and JobSet's Jobs are made even for a closed job: their absence after the probe means the
    owner policies refuse them (their principals are not the chart's), and every dispatch job would stall."""
    agent.fake.after_write.clear()
    if jobs is not None:
        agent.fake.after_write.append(c.trainer_and_jobset(jobs=jobs))
    async with agent.client() as cl:
        caps = await cl.preflight(PLAIN)
    assert caps.observe_only
    assert not caps.trainer
    assert owner in caps.trainer_reason, caps.trainer_reason
    assert owner in caps.observe_only_reason


async def test_without_mutating_admission_policies_the_start_gate_says_what_an_outage_of_the_webhook_does(agent: Agent):
    agent.fake.mutating_policies = False
    async with agent.client() as cl:
        caps = await cl.preflight(PLAIN)
    assert not caps.observe_only, caps.observe_only_reason
    assert "serves no MutatingAdmissionPolicy" in caps.start_gate_reason
    assert "every unsuspend is refused (fail closed)" in caps.start_gate_reason
    agent.fake.mutating_policies = True
    async with agent.client() as cl:
        assert "MutatingAdmissionPolicy" not in (await cl.preflight(PLAIN)).start_gate_reason


async def test_kueue_mode_is_observe_only_where_no_admission_numbers_a_start(agent: Agent):
    c.admission_check(agent.fake)
    agent.fake.after_write.append(c.kueue())
    agent.fake.numbers_starts = False  # the chart's record-start policy and mutating webhook are not installed
    async with agent.client() as api, renewing(agent.fake):
        caps = await api.preflight(KUEUE)
    assert (caps.start_gate, caps.readmission_gate, caps.trainer, caps.observe_only) == (True, True, False, True)
    assert "the start was not numbered (A 0, recorded None)" in caps.observe_only_reason
    assert any("dryRun=All" in p for p in agent.fake.dry_runs)  # asked as a dry run: nothing was stored
    assert nothing_left(agent.fake)


async def test_kueue_mode_is_observe_only_where_a_start_without_the_gates_approval_passes(agent: Agent):
    c.admission_check(agent.fake)
    agent.fake.after_write.append(c.kueue())
    agent.fake.approves_starts = False  # policies and webhook of a version before the approval rule
    async with agent.client() as api, renewing(agent.fake):
        caps = await api.preflight(KUEUE)
    assert (caps.start_gate, caps.readmission_gate, caps.observe_only) == (True, False, True)
    assert "start without the readmission gate's approval" in caps.readmission_gate_reason
    assert sum("dryRun=All" in p for p in agent.fake.dry_runs) == 2  # with the approval, then without: both dry
    assert nothing_left(agent.fake)
