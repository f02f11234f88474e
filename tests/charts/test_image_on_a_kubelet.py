"""The project's image (scripts/build-image: `docker build` of the Dockerfile) on a real kubelet (tier C).

Each container of the chart's Deployment, as `helm template` renders it with default values, runs from the
built image with its own security context (non-root by number, read-only root filesystem, no capabilities,
the pod's seccomp profile) and its own command; only the arguments are replaced by ``--help``, so that the
container needs nothing from the cluster. What this proves the static checks of tests/charts/test_image.py
cannot: the image starts, the kubelet accepts runAsNonRoot for its numeric user, and each console script the
chart names exists and imports under a read-only root.
"""

from __future__ import annotations

import copy
import secrets
from typing import Any

import pytest

from harness.kube_http import ApiError, KubeHttp
from harness.pytest_plugin import TierC
from harness.real_node import real_node_pod_spec
from tests.agent.gate.kit import eventually
from tests.charts.sets import rendered

pytestmark = [pytest.mark.e2e, pytest.mark.node]


def deployment_pod_spec() -> dict[str, Any]:
    (deployment,) = [d for d in rendered("defaults").docs if d["kind"] == "Deployment"]
    return deployment["spec"]["template"]["spec"]


def create_once_kueue_sees_the_namespace(admin: KubeHttp, pod: dict[str, Any]) -> None:
    """Creates ``pod``. Kueue's pod webhook reads namespaces from its informer's cache and refuses, as NotFound,
    a pod of a namespace created a moment ago that the cache has not seen yet: that refusal alone is retried."""

    def create() -> ApiError | None:
        try:
            admin.create(pod)
        except ApiError as exc:
            if exc.status == 404 and "mpod.kb.io" in exc.body and "Namespace" in exc.body:
                raise AssertionError(exc.body) from exc
            return exc  # any other refusal is the test's failure, not retried
        return None

    refused = eventually(create, 30, "Kueue's pod webhook sees the test's namespace")
    if refused is not None:
        raise refused


def test_every_container_of_the_chart_starts_from_the_built_image(tier_c: TierC, namespace: str) -> None:
    if tier_c.image is None:
        pytest.fail(tier_c.image_problem, pytrace=False)
    admin = tier_c.tier_b.admin
    chart_pod = deployment_pod_spec()
    containers = chart_pod.get("initContainers", []) + chart_pod["containers"]
    assert {c["name"] for c in containers} >= {"webhook", "agent"}
    names = []
    for c in containers:
        container = copy.deepcopy(c)
        container.update(image=tier_c.image, imagePullPolicy="Never", args=[c["args"][0], "--help"])
        # A native sidecar (restartPolicy Always) runs here as a plain container that exits.
        for key in (
            "ports",
            "livenessProbe",
            "readinessProbe",
            "startupProbe",
            "volumeMounts",
            "env",
            "lifecycle",
            "restartPolicy",
        ):
            container.pop(key, None)
        name = f"{c['name']}-{secrets.token_hex(2)}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "restartPolicy": "Never",
                "securityContext": chart_pod["securityContext"],
                "automountServiceAccountToken": False,
                "containers": [container],
                **real_node_pod_spec(tier_c.node.name),
            },
        }
        create_once_kueue_sees_the_namespace(admin, pod)
        names.append((name, container))

    for name, container in names:

        def finished(name: str = name) -> dict[str, Any]:
            pod = admin.get("v1", "Pod", name, namespace)
            assert pod["status"].get("phase") in ("Succeeded", "Failed"), pod["status"]
            return pod

        pod = eventually(finished, 120, f"the pod {name} finished")
        status = pod["status"]["containerStatuses"][0]
        log = admin.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}/log")
        assert status["state"]["terminated"]["exitCode"] == 0, (container["command"], status, log)
        assert "usage" in str(log).lower(), log
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
