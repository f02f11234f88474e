"""The readmission gate holds a dispatch job whose namespace is out of dispatch's scope (agent/gate/reconcile.py
``_scope``; docs/install.md, "Scope: which namespaces dispatch polices"), against the real API server, the test
playing Kueue's part: with a namespace selector, the namespace's labels are read at each pass, so a namespace
relabelled out of scope holds the next admission, and one relabelled back in lets it through."""

from __future__ import annotations

import pytest

from agent.config import AgentConfig
from agent.domain.decide import Action
from agent.gate.context import Pass
from agent.gate.reconcile import reconcile
from agent.runtime.kube import Kube
from tests.agent import kueue_double as kueue
from tests.agent.runtime.test_cached_reads import dispatch_workload, key

pytestmark = pytest.mark.cluster
async_test = pytest.mark.asyncio(loop_scope="function")

SELECTED = AgentConfig.model_validate({"api": {"scope": {"namespaceSelector": {"matchLabels": {"dispatch": "on"}}}}})


def _label(cp, namespace: str, value: str | None) -> None:
    cp.admin.merge_patch("v1", "Namespace", namespace, {"metadata": {"labels": {"dispatch": value}}})


@async_test
async def test_a_namespace_the_selector_leaves_out_holds_the_gate_until_it_is_back_in_scope(
    control_plane, namespace, api_client
):
    cp = control_plane
    (check,), _, wl = dispatch_workload(cp, namespace)
    ctx = Pass.fresh(Kube(api_client, instance="test"), SELECTED)

    held = await reconcile(ctx, key(wl))
    assert held.action is Action.HOLD
    assert f"namespace {namespace} is not selected by scope.namespaceSelector" in held.message
    assert "the gate holds it" in held.message
    entry = kueue.entry(kueue.get_workload(cp, wl), check)
    assert (entry["state"], entry["message"]) == ("Pending", held.message)

    _label(cp, namespace, "on")
    admitted = await reconcile(Pass.fresh(Kube(api_client, instance="test"), SELECTED), key(wl))
    assert admitted.action is Action.ADMIT
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Ready"


@async_test
async def test_an_exempt_namespace_holds_the_gate_without_reading_it(control_plane, namespace, api_client):
    cp = control_plane
    (check,), _, wl = dispatch_workload(cp, namespace)
    exempt = AgentConfig.model_validate({"api": {"scope": {"exemptNamespaces": [namespace]}}})
    held = await reconcile(Pass.fresh(Kube(api_client, instance="test"), exempt), key(wl))
    assert held.action is Action.HOLD
    assert "(scope.exemptNamespaces)" in held.message
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Pending"
