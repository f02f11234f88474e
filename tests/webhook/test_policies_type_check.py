"""The chart's admission policies type-check cleanly, in every MultiKueue role, on the real API server with its
controller-manager (tier B): the controller that type-checks a ValidatingAdmissionPolicy's expressions against
the schema of each kind it matches, and writes ``status.typeChecking``, runs in kube-controller-manager, which
tier A does not run.

Two kinds of warning are known and harmless, and allowed here by name; any other fails:

* a field that one of the kinds a policy matches does not have: ``reserved-keys`` tests ``spec.suspend`` (a
  TrainJob's) with ``has()`` on every kind it matches, and at admission the API server evaluates the expression
  on the object's data, where ``has()`` of a missing field is false;
* a field newer Trainers' runtime-patch schema offers and v2.2.1's lacks: ``identity`` refuses
  ``terminationGracePeriodSeconds`` in another manager's entry (``.?…hasValue()``), for clusters that run a newer
  Trainer."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from contract.multicluster import ROLE_MANAGER, ROLE_SINGLE, ROLE_WORKER
from harness.principals import bound_here
from harness.tier_b import TierB
from webhook.config import Config, Principals
from webhook.policies import admission_policies

pytestmark = pytest.mark.e2e
VAP = "ValidatingAdmissionPolicy"
KNOWN: frozenset[tuple[str, str, str]] = frozenset({
    ("dispatch-k8s-reserved-keys", "spec.validations[1].expression", "undefined field 'suspend'"),
    # Role worker's: MultiKueue's copy of a TrainJob is created suspended (webhook/policies.py _copy_created_marked).
    ("dispatch-k8s-reserved-keys", "spec.validations[3].expression", "undefined field 'suspend'"),
    ("dispatch-k8s-identity", "spec.validations[7].expression", "undefined field 'terminationGracePeriodSeconds'"),
})  # fmt: skip
"""(policy, field, error): the harmless warnings above."""


@pytest.fixture(params=[ROLE_SINGLE, ROLE_MANAGER, ROLE_WORKER])
def installed(tier_b: TierB, request: pytest.FixtureRequest) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    cp = tier_b.control_plane
    role = request.param
    mk = Principals(usernames=("dispatch-type-check:multikueue",)) if role == ROLE_WORKER else Principals()
    namespace = cp.create_namespace(f"type-check-{role or 'single'}")
    config = Config(multiclusterRole=role, multikueue=mk)
    docs = [d for d in admission_policies(config, namespace="dispatch-system") if d["kind"].startswith("Validating")]
    suffix = secrets.token_hex(3)
    docs = bound_here(docs, namespace, suffix)
    for doc in docs:
        cp.admin.create(doc)
    yield suffix, [d for d in docs if d["kind"] == VAP]
    for doc in reversed(docs):
        cp.admin.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])
    cp.delete_namespace(namespace)


def _errors(name: str, warnings: list[dict[str, str]]) -> set[tuple[str, str, str]]:
    """(policy, field, error) of each type error in a policy's warnings."""
    return {
        (name, w["fieldRef"], found.group(1))
        for w in warnings
        for found in re.finditer(r"ERROR: <input>:\d+:\d+: ([^\n]+)", w["warning"])
    }


def test_each_roles_policies_type_check_cleanly(tier_b: TierB, installed: tuple[str, list[dict[str, Any]]]) -> None:
    admin = tier_b.control_plane.admin
    suffix, policies = installed
    deadline = time.monotonic() + 90
    errors: set[tuple[str, str, str]] = set()
    for doc in policies:
        name = doc["metadata"]["name"]
        while True:
            status = admin.get(doc["apiVersion"], VAP, name).get("status") or {}
            if "typeChecking" in status:
                break
            assert time.monotonic() < deadline, f"{name} not type-checked within 90 s: {status}"
            time.sleep(0.5)
        errors |= _errors(name.removesuffix(f"-{suffix}"), status["typeChecking"].get("expressionWarnings", []))
    assert errors - KNOWN == set()
    assert errors, "no warning at all: the known ones are gone, so drop them from KNOWN"
