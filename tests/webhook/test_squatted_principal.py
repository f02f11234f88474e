"""A principal named but not present (tier B): the owner policies name a username no component runs as, and whoever
may create that ServiceAccount (rights in its namespace, or to create the namespace) holds an owner's writes.

JobSet runs here as ``jobset-system:jobset-controller-manager`` (harness/tier_b.py), so ``kubeflow-system``'s
namesake is free. A user creates it, binds it the rights it holds in its own namespace, and with its token tries
JobSet's writes on a running dispatch job: a copy of its Job under the dispatch JobSet, ``restarts`` raised (and,
with the policies alone, the JobSet deleted, which would start J again). The chart's defaults name one principal
per component, so each is refused.
"""

from __future__ import annotations

import copy
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contract.keys import LABEL_JOBSET_NAME
from harness.kube_http import ApiError, KubeHttp
from tests.agent.gate import kit
from tests.agent.gate.kit import JOBSET_V
from tests.agent.gate.test_readmission_gate import Gate, gate, ns  # noqa: F401 (the fixtures)
from tests.webhook.test_owner_fuzz import STRANGER_RULES
from tests.webhook.test_tampering import Guarded, _opened_running, guarding

pytestmark = pytest.mark.e2e
MERGE = "application/merge-patch+json"
JSON = "application/json"
SQUATTED = ("kubeflow-system", "jobset-controller-manager")
"""Trainer's manifests install JobSet under this name in Trainer's namespace; the harness runs the standalone one."""
_JOB_KEYS = ("controller-uid", "batch.kubernetes.io/controller-uid", "job-name", "batch.kubernetes.io/job-name")


def _squatter(g: Gate, namespace: str) -> KubeHttp:
    """The free name taken: its namespace made if absent, the ServiceAccount created there, and bound (in the job's
    namespace, where the user holds them) the rights the user has."""
    cp = g.tier_b.control_plane
    sa_namespace, sa_name = SQUATTED
    try:
        cp.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": sa_namespace}})
    except ApiError as err:
        if err.status != 409:
            raise
    cp.ensure_service_account(sa_namespace, sa_name)
    rbac = "rbac.authorization.k8s.io/v1"
    role = f"squatter-{secrets.token_hex(3)}"
    cp.admin.create({"apiVersion": rbac, "kind": "Role", "metadata": {"name": role, "namespace": namespace},
                     "rules": STRANGER_RULES})  # fmt: skip
    cp.admin.create({"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": role, "namespace": namespace},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                     "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_namespace}]})  # fmt: skip
    return KubeHttp(cp.service_account_credentials(sa_namespace, sa_name))


@pytest.fixture(params=["policies + webhook", "policies alone"])
def squatted(gate: Gate, ns: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Guarded]:  # noqa: F811
    with guarding(gate, ns, _squatter(gate, ns), request.param, tmp_path / "webhook") as g:
        yield g


def _job_copy(job: dict[str, Any]) -> dict[str, Any]:
    """The running Job again under another name, still the dispatch JobSet's child: the same A and J."""
    meta = job["metadata"]
    spec = copy.deepcopy(job["spec"])
    spec.pop("selector", None)
    template = spec["template"].setdefault("metadata", {})
    template["labels"] = {k: v for k, v in (template.get("labels") or {}).items() if k not in _JOB_KEYS}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in _JOB_KEYS}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{meta['name']}-{secrets.token_hex(2)}",
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": meta.get("annotations") or {},
            "ownerReferences": meta["ownerReferences"],
        },
        "spec": spec,
    }


def _admitted(who: KubeHttp, method: str, path: str, body: Any = None) -> bool:
    """A dry run of the write (nothing is stored): admitted, or refused by admission (403)."""
    try:
        who.request(method, path, body, query={"dryRun": "All"}, content_type=MERGE if method == "PATCH" else JSON)
    except ApiError as err:
        if err.status != 403:
            raise
        return False
    return True


def test_a_free_owner_name_writes_nothing_on_a_running_job(squatted: Guarded) -> None:
    g, squatter = squatted, squatted.stranger
    tj, pods = _opened_running(g)
    name = tj["metadata"]["name"]
    g.arm()
    try:
        jobset = g.admin.get(JOBSET_V, "JobSet", name, g.namespace)
        at = g.admin.object_path(jobset)
        (job,) = g.admin.list("batch/v1", "Job", g.namespace, label_selector=f"{LABEL_JOBSET_NAME}={name}")[:1]
        writes = {
            "a copy of the running Job": ("POST", g.admin.collection_path("batch/v1", "Job", g.namespace),
                                          _job_copy({"apiVersion": "batch/v1", "kind": "Job", **job})),
            "restarts raised": ("PATCH", at + "/status",
                                {"status": {"restarts": int(jobset.get("status", {}).get("restarts", 0)) + 1}}),
            "the JobSet deleted": ("DELETE", at, None),
        }  # fmt: skip

        # The harness's copy of the owner policies takes any ServiceAccount for dispatch (its tests' agents run as
        # ServiceAccounts), so the refusal is the chart's policies' (or the webhook's): they load asynchronously, and
        # each write is asked again (a dry run) until refused, or 30 s pass.
        def through() -> list[str]:
            return [what for what, write in writes.items() if _admitted(squatter, *write)]

        deadline = time.monotonic() + 30
        while through() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert through() == [], f"{'/'.join(SQUATTED)} made JobSet's writes: {through()}"
        assert kit.assert_r_strictly_increases(pods.first_seen()) == [(1, 0)]
        assert g.admin.get(JOBSET_V, "JobSet", name, g.namespace)["metadata"]["uid"] == jobset["metadata"]["uid"]
    finally:
        pods.stop()
