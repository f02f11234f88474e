"""The prologue's ConfigMap never blocks a namespace's deletion (tier B): the harness's owner policies, as the
chart's, refuse its deletion to everyone but dispatch, break-glass and the garbage collector's principals, among
them kube-controller-manager's namespace controller, which must delete it for the namespace to go."""

from __future__ import annotations

import secrets

import pytest

from contract.prologue import PROLOGUE_CONFIGMAP, prologue_configmap
from harness.tier_b import HARNESS_POLICY_PREFIX, TierB
from tests.agent.gate.kit import eventually

pytestmark = pytest.mark.e2e


def test_a_namespace_holding_the_prologues_configmap_is_deleted(tier_b: TierB) -> None:
    cp = tier_b.control_plane
    policy = cp.admin.get("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy",
                          f"{HARNESS_POLICY_PREFIX}-owners-configmaps")  # fmt: skip
    assert "dispatch-k8s-prologue-" in policy["spec"]["matchConditions"][0]["expression"]
    namespace = cp.create_namespace(f"prologue-{secrets.token_hex(3)}")
    cp.admin.create(prologue_configmap(namespace))  # the harness's admin is break-glass: exactly dispatch's
    cp.delete_namespace(namespace)

    def gone() -> None:
        assert cp.admin.get_or_none("v1", "Namespace", namespace) is None, "the namespace is still Terminating"

    eventually(gone, 120, "the namespace deleted, its prologue ConfigMap with it")
    assert cp.admin.get_or_none("v1", "ConfigMap", PROLOGUE_CONFIGMAP, namespace) is None
