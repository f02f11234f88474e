"""Tier A: the agent refuses a namespace out of dispatch's scope (the chart's ``scope``) on the real API server,
reading the namespace's labels with its own documented RBAC: Start and Preflight into a namespace the selector
leaves out, and Open and Release once the namespace has lost the label, while Hold and Stop still act."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from agent.api.client import AgentError
from agent.api.errors import ErrorKind
from agent.api.models import HoldRequest, ObjectRef, PreflightRequest
from agent.api.settings import ApiSettings
from harness.cluster import ControlPlane
from tests.agent.api.cluster import (
    RunningAgent,
    Supervisors,
    allowed,
    bind,
    compliant_runtime,
    running_agent,
    supervisors,
)
from tests.agent.api.requests import fresh_job_id, start_request

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]
RUNTIME = "dispatch-api-scope-runtime"
LABEL = "dispatch-test/policed"
MERGE = "application/merge-patch+json"


@dataclass
class Setup:
    cp: ControlPlane
    agent: RunningAgent
    who: Supervisors

    def label(self, namespace: str, value: str | None) -> None:
        self.cp.admin.request(
            "PATCH", f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {LABEL: value}}}, content_type=MERGE
        )


@pytest_asyncio.fixture
async def setup(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> AsyncIterator[Setup]:
    other = control_plane.create_namespace("scope-other")
    who = supervisors(control_plane, namespace, other)
    compliant_runtime(control_plane, RUNTIME)
    value = secrets.token_hex(3)
    settings = ApiSettings.model_validate(
        {"labels": {"site": "tier-a"}, "probeSeconds": 2,
         "scope": {"namespaceSelector": {"matchLabels": {LABEL: value}}}}
    )  # fmt: skip
    # The supervisor may call the API in the other namespace too: the refusal there is the agent's own.
    bind(control_plane, "RoleBinding", "supervisor-there", "Role", "dispatch-supervisor", (namespace, "supervisor"),
         other)  # fmt: skip
    async with running_agent(control_plane, tmp_path, settings) as agent:
        await allowed(agent, who.tokens["supervisor"], namespace)
        await allowed(agent, who.tokens["supervisor"], other)
        s = Setup(control_plane, agent, who)
        s.label(namespace, value)
        yield s
    control_plane.delete_namespace(other)


def _request(namespace: str):
    return start_request(namespace, jobId=fresh_job_id(), runtime={"name": RUNTIME})


async def _refused(call, *args) -> str:
    with pytest.raises(AgentError) as err:
        await call(*args)
    assert (err.value.kind, err.value.field) == (ErrorKind.INVALID, "namespace"), err.value.message
    assert "not selected by scope.namespaceSelector" in err.value.message
    assert "scope.exemptNamespaces and scope.namespaceSelector" in err.value.message
    return err.value.message


async def test_out_of_scope_refuses_start_preflight_then_open_and_release_once_unlabelled(setup: Setup):
    ns, other = setup.who.namespace, setup.who.other_namespace
    admin = setup.cp.admin
    async with setup.agent.client(setup.who.tokens["supervisor"]) as c:
        # A caller granted dispatch's API in an unlabelled namespace: the agent refuses it before writing.
        await _refused(c.start, _request(other))
        assert admin.list("trainer.kubeflow.org/v1alpha1", "TrainJob", other) == []
        assert [m for m in admin.list("v1", "ConfigMap", other) if "prologue" in m["metadata"]["name"]] == []
        await _refused(c.preflight, PreflightRequest.model_validate({"namespace": other, "runtime": {"name": RUNTIME}}))
        started = await c.start(_request(ns))
        ref = ObjectRef(namespace=started.namespace, name=started.name, uid=started.uid)
        assert (await c.open(ref)).outcome == "opened"
        await c.hold(HoldRequest(**ref.model_dump(), who="bob", reason="maintenance"))
        # A namespace admin removes the label: the namespace leaves scope, and no execution may start there.
        setup.label(ns, None)
        before = admin.get("trainer.kubeflow.org/v1alpha1", "TrainJob", started.name, ns)
        await _refused(c.release, ref)
        await _refused(c.open, ref)
        after = admin.get("trainer.kubeflow.org/v1alpha1", "TrainJob", started.name, ns)
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        assert after["spec"]["suspend"] is True
        assert (await c.stop(ref)).outcome == "stopping"
