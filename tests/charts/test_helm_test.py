"""The chart's `helm test`: its hook as rendered, its RBAC on a real API server, and its command run as a
local process through the real API server (tier A runs no pods: the webhook runs on loopback under its own
ServiceAccount, as in harness/sandbox, and the hook's command under the hook's ServiceAccount).

It passes on dispatch-k8s's denial, and fails naming the cause when the API server cannot reach the
webhook: nothing listening, a caBundle that does not verify the certificate, no webhook configuration.
"""

from __future__ import annotations

import copy
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.cluster import ControlPlane, free_port
from harness.sandbox.install import _get, generate_certs, loopback_webhook_configurations, wait_for_process
from tests.charts.helm import ROOT, Rendered, template, template_error
from tests.charts.test_on_the_api_server import ADMISSION, _apply_rbac, _cleanup, _config, _release, _verdicts
from tests.charts.test_render import parse_args, pod_spec

TRAINER = "trainer.kubeflow.org"


# --- as rendered -------------------------------------------------------------------------------------------


def _hooks(r: Rendered) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in r.hooks() if d["metadata"]["name"].endswith("-test")}


def test_the_test_hook_runs_the_selftest_with_rights_only_in_its_namespace():
    r = template({"helmTest": {"namespace": "team-a"}})
    hooks = _hooks(r)
    assert set(hooks) == {(k, "dispatch-k8s-test") for k in ("ServiceAccount", "Role", "RoleBinding", "Pod")}
    for (kind, _), doc in hooks.items():
        annotations = doc["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "test"
        # The rights go whether the test passes or fails; a failed Pod stays for its log.
        policy = "before-hook-creation,hook-succeeded" + ("" if kind == "Pod" else ",hook-failed")
        assert annotations["helm.sh/hook-delete-policy"] == policy, kind
        weight = int(annotations["helm.sh/hook-weight"])
        assert (weight == 0) if kind == "Pod" else (weight < 0), "the rights exist before the Pod"
    assert hooks[("Role", "dispatch-k8s-test")]["metadata"]["namespace"] == "team-a"
    assert hooks[("Role", "dispatch-k8s-test")]["rules"] == [
        {"apiGroups": [TRAINER], "resources": ["trainjobs"], "verbs": ["create"]}
    ]
    assert hooks[("RoleBinding", "dispatch-k8s-test")]["subjects"] == [
        {"kind": "ServiceAccount", "name": "dispatch-k8s-test", "namespace": "dispatch-system"}
    ]
    pod = hooks[("Pod", "dispatch-k8s-test")]
    assert pod["spec"]["serviceAccountName"] == "dispatch-k8s-test"
    assert pod["spec"]["restartPolicy"] == "Never"
    (container,) = pod["spec"]["containers"]
    args = parse_args(container)
    assert (args.command, args.namespace, args.timeout, args.runtime) == (
        "selftest",
        "team-a",
        60.0,
        "torch-distributed",
    )
    assert container["image"] == pod_spec(r)["containers"][0]["image"]
    assert pod["spec"]["securityContext"] == pod_spec(r)["securityContext"]


def test_the_check_may_also_run_after_install_and_upgrade():
    hooks = _hooks(template({"helmTest": {"postInstall": True}}))
    assert {d["metadata"]["annotations"]["helm.sh/hook"] for d in hooks.values()} == {"test,post-install,post-upgrade"}
    assert not _hooks(template({"helmTest": {"enabled": False}}))


@pytest.mark.parametrize("namespace", ["kube-system", "dispatch-system"])
def test_a_namespace_the_webhook_is_never_called_for_is_refused(namespace):
    error = template_error({"helmTest": {"namespace": namespace}})
    assert f"helmTest.namespace ({namespace}) must be a namespace the webhook is called for" in error, error


# --- on the API server ---------------------------------------------------------------------------------------


@pytest.fixture
def probe_namespace(control_plane: ControlPlane) -> Iterator[str]:
    name = control_plane.create_namespace("probe")
    yield name
    control_plane.delete_namespace(name)


@pytest.mark.cluster
def test_helm_test_passes_through_the_api_server_and_names_what_is_wrong(
    control_plane, namespace, probe_namespace, tmp_path
):
    cp = control_plane
    r = template({"helmTest": {"namespace": probe_namespace}}, release=_release(), namespace=namespace)
    full = r.one("Deployment")["metadata"]["name"]
    cluster_scoped = _apply_rbac(cp, r)
    (pod,) = r.of("Pod")
    test_sa = pod["spec"]["serviceAccountName"]
    (container,) = pod["spec"]["containers"]
    hook_kubeconfig = cp.service_account_kubeconfig(namespace, test_sa)
    configurations: list[dict[str, Any]] = []

    def selftest(*more: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "webhook", *container["args"], *more, "--kubeconfig", str(hook_kubeconfig)]
        return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)

    def register(url: str, ca: Path) -> None:
        docs = loopback_webhook_configurations(copy.deepcopy(r), url, ca.read_bytes())  # type: ignore[arg-type]
        for doc in docs:
            for hook in doc["webhooks"]:
                # Only the probe's namespace: the API server is shared with other tests.
                hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": probe_namespace}}
            cp.admin.apply(doc)
        configurations[:] = docs

    try:
        # The hook's rights: a TrainJob created in its namespace, and nothing else.
        checks = [
            ("the probe", ("create", TRAINER, "trainjobs", {"ns": probe_namespace})),
            ("not elsewhere", ("create", TRAINER, "trainjobs", {"ns": namespace})),
            ("nor in default", ("create", TRAINER, "trainjobs", {"ns": "default"})),
            ("never read", ("get", TRAINER, "trainjobs", {"ns": probe_namespace, "name": "x"})),
            ("never changed", ("patch", TRAINER, "trainjobs", {"ns": probe_namespace, "name": "x"})),
            ("never deleted", ("delete", TRAINER, "trainjobs", {"ns": probe_namespace, "name": "x"})),
            ("no Secret", ("get", "", "secrets", {"ns": namespace, "name": f"{full}-certs"})),
            ("no pod", ("create", "", "pods", {"ns": probe_namespace})),
        ]
        verdicts = list(_verdicts(cp, namespace, test_sa, checks).values())
        assert verdicts == [True] + [False] * (len(checks) - 1), dict(
            zip([c[0] for c in checks], verdicts, strict=True)
        )

        # The webhook on loopback, under its own ServiceAccount (the webhook container's), with the chart's config.
        certs = generate_certs(tmp_path)
        webhook_config = _config(r, f"{full}-webhook", "config.yaml", tmp_path / "webhook.yaml")
        port = free_port()
        sa_kubeconfig = cp.service_account_kubeconfig(namespace, f"{full}-webhook")
        webhook = cp.supervisor.start(f"selftest-webhook-{namespace}", [
            sys.executable, "-m", "webhook", "serve", "--tls-cert-file", str(certs.cert),
            "--tls-private-key-file", str(certs.key), "--port", str(port), "--bind-address", "127.0.0.1",
            "--config", str(webhook_config), "--kubeconfig", str(sa_kubeconfig),
        ])  # fmt: skip
        url = f"https://127.0.0.1:{port}"
        context = ssl.create_default_context(cafile=str(certs.ca))
        last = [(0, "")]

        def ready() -> bool:
            last[0] = _get(f"{url}/readyz", context)
            return last[0][0] == 200

        wait_for_process(webhook, ready, 30, "the webhook's /readyz", last)

        # No configuration yet: the API server admits the probe, and the check says it was not called.
        not_called = selftest("--timeout=2s")
        assert not_called.returncode == 1, not_called.stdout
        assert "did not call dispatch's webhook" in not_called.stderr, not_called.stderr

        # A caBundle that does not verify the webhook's certificate.
        register(url, generate_certs(tmp_path / "other").ca)
        untrusted = selftest("--timeout=2s")
        assert untrusted.returncode == 1, untrusted.stdout
        assert "does not trust the webhook's certificate" in untrusted.stderr, untrusted.stderr

        # As installed: dispatch-k8s's denial, on the first attempt or soon after.
        register(url, certs.ca)
        passed = selftest()
        assert passed.returncode == 0, passed.stderr
        assert passed.stdout.startswith("ok: the API server called dispatch-k8s's webhook"), passed.stdout
        assert "dispatch-k8s denied this CREATE of TrainJob" in passed.stdout
        assert (
            cp.admin.request("GET", cp.admin.collection_path(f"{TRAINER}/v1alpha1", "TrainJob", probe_namespace))[
                "items"
            ]
            == []
        ), "a dry run stores nothing"

        # The webhook gone: nothing listens where the configuration points.
        cp.supervisor.stop(webhook.name)
        down = selftest("--timeout=2s")
        assert down.returncode == 1, down.stdout
        assert "nothing listens on the webhook's port" in down.stderr, down.stderr
    finally:
        for doc in configurations:
            cp.admin.delete(ADMISSION, doc["kind"], doc["metadata"]["name"])
        _cleanup(cp, cluster_scoped)
