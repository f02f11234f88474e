"""Tier B: no stranger pins a dispatch job's deletion. Stop deletes the TrainJob in the foreground (agent/api/service/lifecycle.py
``STOP_PROPAGATION``): the garbage collector removes it only once every dependent whose owner reference says
``blockOwnerDeletion: true`` is gone. A stranger who may create ConfigMaps in the namespace made one with such a
reference to the TrainJob and a finalizer of its own: the ConfigMap could never go, and neither could the TrainJob,
so Stop never completed. ``OwnerReferencesPermissionEnforcement``, which would ask for delete rights on the owner, is
off by default. The policy ``dispatch-k8s-dependents`` (webhook/dependents.py) refuses a new blocking reference to a
dispatch job's object from anyone but the components that make its dependents; a reference that does not block
stays allowed, and Stop completes regardless of it (the garbage collector deletes that object without waiting).

Here the policy is the harness's copy, which tier B runs over every namespace from its start (harness/tier_b.py
``install_owner_policies``), the stranger a user of its own (tier B's copy counts every ServiceAccount as dispatch).
Without the policy this test fails: the TrainJob is still there, held by the stranger's ConfigMap.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from agent.api.client import AgentError
from agent.api.errors import ErrorKind
from harness.kube_http import ApiError, KubeHttp
from tests.agent.api import test_e2e as base
from tests.agent.api.cluster import apply
from tests.agent.api.requests import fresh_job_id, start_request
from tests.agent.api.test_e2e import E2E, RUNTIME, TRAINER, eventually, ref, status_or_error
from tests.agent.api.test_stop_e2e import _first_execution_running

controller = base.controller
e2e = base.e2e

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]
MERGE = "application/merge-patch+json"
STRANGER = "dispatch-test:pinning-stranger"
FINALIZER = "stranger.example.com/keep"


def _stranger(e2e: E2E) -> KubeHttp:
    """A user (not a ServiceAccount) with the built-in ``edit`` role in the test's namespace."""
    apply(e2e.cp, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "pinning-stranger", "namespace": e2e.ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": STRANGER}],
    })  # fmt: skip
    return KubeHttp(e2e.cp.admin_credentials, impersonate=(STRANGER, None))


def _configmap(namespace: str, owner: dict[str, Any], *, blocks: bool) -> dict[str, Any]:
    meta = owner["metadata"]
    reference = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"]}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"stranger-{secrets.token_hex(3)}",
            "namespace": namespace,
            "finalizers": [FINALIZER],
            "ownerReferences": [{**reference, "blockOwnerDeletion": blocks}],
        },
    }


def _refusal(write: Any) -> str | None:
    """None when the write is admitted, else the refusal's body."""
    try:
        write()
    except ApiError as err:
        if err.status != 403:
            raise
        return err.body
    return None


def _release(admin: KubeHttp, namespace: str, names: list[str]) -> None:
    for name in names:
        if admin.get_or_none("v1", "ConfigMap", name, namespace) is not None:
            admin.merge_patch("v1", "ConfigMap", name, {"metadata": {"finalizers": None}}, namespace)


async def test_a_strangers_dependent_does_not_hold_stop(e2e: E2E):
    admin, ns = e2e.cp.admin, e2e.ns
    stranger = _stranger(e2e)
    request = start_request(ns, jobId=fresh_job_id(), runtime={"name": RUNTIME})
    made: list[str] = []
    try:
        async with e2e.client() as api:
            started = await api.start(request)
            await api.open(ref(started))
            await _first_execution_running(api, started)
            trainjob = {"apiVersion": TRAINER, "kind": "TrainJob", **admin.get(TRAINER, "TrainJob", started.name, ns)}
            collection = admin.collection_path("v1", "ConfigMap", ns)

            # A reference that does not block: the stranger's to make; the job's deletion does not wait for it.
            loose = _configmap(ns, trainjob, blocks=False)
            stranger.request("POST", collection, loose)
            made.append(loose["metadata"]["name"])
            # The attack: a blocking reference and a finalizer of the stranger's own, at create...
            pin = _configmap(ns, trainjob, blocks=True)
            created = _refusal(lambda: stranger.request("POST", collection, pin))
            made.append(pin["metadata"]["name"])
            # ... and added by an update (the loose reference made blocking).
            blocking = {**loose["metadata"]["ownerReferences"][0], "blockOwnerDeletion": True}
            patch = {"metadata": {"ownerReferences": [blocking]}}
            updated = _refusal(lambda: stranger.request("PATCH", f"{collection}/{made[0]}", patch, content_type=MERGE))

            assert (await api.stop(ref(started))).outcome == "stopping"

            async def gone() -> None:
                answer = await status_or_error(api, ref(started))
                left = [(c["metadata"]["name"], c["metadata"].get("deletionTimestamp"))
                        for c in admin.list("v1", "ConfigMap", ns) if c["metadata"]["name"] in made]  # fmt: skip
                assert isinstance(answer, AgentError), f"Stop did not complete: {e2e.dependents(started.name)}, {left}"
                assert answer.kind is ErrorKind.NOT_FOUND

            await eventually(gone, 90, "the TrainJob gone after Stop")

            for refusal in (created, updated):
                assert refusal is not None, "a stranger's blocking owner reference to the TrainJob was admitted"
                assert "blockOwnerDeletion" in refusal, refusal
                assert started.name in refusal, refusal
                assert "ValidatingAdmissionPolicy 'dispatch-harness-dependents'" in refusal, refusal
            # The loose dependent was deleted with the job (its own finalizer keeps it, holding nothing).
            left = admin.get("v1", "ConfigMap", made[0], ns)
            assert left["metadata"].get("deletionTimestamp"), left["metadata"]
    finally:
        _release(admin, ns, made)
