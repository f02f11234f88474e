"""The agent's refusal of a namespace out of dispatch's scope: the pure decision over the settings (targets.py
``excluded_namespace``), and Start, Open, Release and Preflight refusing through the API (a fake API server; the
real one: test_scope_cluster.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from agent.api.client import AgentError
from agent.api.errors import ErrorKind
from agent.api.models import HoldRequest, ObjectRef, PreflightRequest, StartResponse
from agent.api.service.targets import excluded_namespace, needs_labels
from agent.api.settings import LabelSelector, NamespaceScope
from contract.upstream import NAMESPACES, TRAINJOBS
from tests.agent.api.conftest import NAMESPACE, TEST_SETTINGS, Agent, supervisor_grants
from tests.agent.api.fake_kube import FakeKube
from tests.agent.api.requests import fresh_job_id, start_request

OWN = "dispatch-system"
TENANT = {"matchLabels": {"dispatch.example/policed": "true"}}


# -- the agent's refusal (agent/api/service/targets.py) over the settings' scope ----------------------------


def test_the_agents_refusal_is_invalid_on_the_namespace_and_names_the_values_to_change():
    scope = NamespaceScope.model_validate({"exemptNamespaces": ["sandbox"], "namespaceSelector": TENANT})
    assert needs_labels(scope)
    assert not needs_labels(NamespaceScope())
    refusal = excluded_namespace("sandbox", OWN, scope, {"dispatch.example/policed": "true"})
    assert refusal is not None
    assert (refusal.kind, refusal.field) == (ErrorKind.INVALID, "namespace")
    assert "scope.exemptNamespaces and scope.namespaceSelector" in refusal.message
    assert "would not be policed" in refusal.message
    assert excluded_namespace("team-a", OWN, scope, {"dispatch.example/policed": "true"}) is None
    unlabelled = excluded_namespace("team-a", OWN, scope, {})
    assert unlabelled is not None
    assert "not selected by scope.namespaceSelector" in unlabelled.message
    assert excluded_namespace("team-a", OWN) is None
    built_in = excluded_namespace("kube-system", OWN, scope, {})
    assert built_in is not None
    assert "excluded from dispatch's admission webhook" in built_in.message
    assert "scope.exemptNamespaces" not in built_in.message, "no value brings kube-system into scope"


@pytest.mark.parametrize(
    "requirement",
    [
        {"key": "a", "operator": "In"},
        {"key": "a", "operator": "Exists", "values": ["x"]},
        {"key": "", "operator": "Exists"},
        {"key": "a", "operator": "Gt", "values": ["1"]},
    ],
)
def test_the_agent_refuses_a_selector_the_api_server_would_refuse(requirement):
    with pytest.raises(ValidationError):
        LabelSelector.model_validate({"matchExpressions": [requirement]})


def test_the_settings_selector_reaches_the_decision_in_the_api_servers_form():
    selector = LabelSelector.model_validate(
        {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]}
    )
    assert selector.as_kubernetes() == {
        "matchLabels": {"a": "1"},
        "matchExpressions": [{"key": "b", "operator": "Exists"}],
    }
    assert LabelSelector().as_kubernetes() == {}


# -- through the API, over a fake API server ------------------------------------------------------------------

LABEL = "dispatch.example/policed"
SCOPED = TEST_SETTINGS.model_copy(
    update={"scope": NamespaceScope.model_validate({"exemptNamespaces": ["sandbox"], "namespaceSelector": TENANT})}
)


def _namespace(fake: FakeKube, name: str, labels: dict[str, str]) -> None:
    fake.namespaces.add(name)
    fake.put(NAMESPACES.path(), {"apiVersion": "v1", "kind": "Namespace",
                                 "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}}})  # fmt: skip


def _ref(s: StartResponse) -> ObjectRef:
    return ObjectRef(namespace=s.namespace, name=s.name, uid=s.uid)


async def _refused(call: Any, *args: Any) -> AgentError:
    with pytest.raises(AgentError) as err:
        await call(*args)
    assert (err.value.kind, err.value.field) == (ErrorKind.INVALID, "namespace"), err.value.message
    assert "scope.exemptNamespaces and scope.namespaceSelector" in err.value.message
    return err.value


@pytest.mark.asyncio
@pytest.mark.parametrize("agent", [SCOPED], indirect=True)
async def test_start_and_preflight_refuse_a_namespace_out_of_scope_before_writing(agent: Agent):
    _namespace(agent.fake, NAMESPACE, {LABEL: "true"})
    _namespace(agent.fake, "team-b", {})
    _namespace(agent.fake, "sandbox", {LABEL: "true"})
    for ns in ("team-b", "sandbox"):
        agent.fake.grants += supervisor_grants(ns)  # the caller may: the refusal is the agent's own
    async with agent.client() as api:
        for ns, why in (("team-b", "not selected by scope.namespaceSelector"), ("sandbox", "exempt")):
            err = await _refused(api.start, start_request(ns, jobId=fresh_job_id()))
            assert why in err.message
            await _refused(api.preflight, PreflightRequest.model_validate({"namespace": ns, "runtime": {"name": "x"}}))
        assert not agent.fake.writes
        started = await api.start(start_request(NAMESPACE))
        assert started.namespace == NAMESPACE


@pytest.mark.asyncio
@pytest.mark.parametrize("agent", [SCOPED], indirect=True)
async def test_a_namespace_relabelled_out_of_scope_refuses_open_and_release_but_not_hold_or_stop(agent: Agent):
    _namespace(agent.fake, NAMESPACE, {LABEL: "true"})
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE))
        assert (await api.open(_ref(started))).outcome == "opened"
        held = await api.hold(HoldRequest(**_ref(started).model_dump(), who="bob", reason="r"))
        assert held.outcome == "held: TrainJob suspended"
        # A namespace admin removes the opt-in label: from now on nothing dispatch writes there is policed.
        _namespace(agent.fake, NAMESPACE, {})
        before = agent.fake.get(TRAINJOBS.path(NAMESPACE), started.name)
        err = await _refused(api.release, _ref(started))
        assert "not selected by scope.namespaceSelector" in err.message
        await _refused(api.open, _ref(started))
        assert agent.fake.get(TRAINJOBS.path(NAMESPACE), started.name) == before, "nothing was written"
        # Stopping is always allowed: it ends executions, never starts one.
        assert (await api.stop(_ref(started))).outcome == "stopping"


@pytest.mark.asyncio
@pytest.mark.parametrize("agent", [SCOPED], indirect=True)
async def test_with_a_selector_a_missing_namespace_is_refused(agent: Agent):
    agent.fake.grants += supervisor_grants("nowhere")
    async with agent.client() as api:
        with pytest.raises(AgentError) as err:
            await api.start(start_request("nowhere"))
    assert (err.value.kind, err.value.field) == (ErrorKind.INVALID, "namespace")
    assert "does not exist" in err.value.message
