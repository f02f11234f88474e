"""The README's install, upgrade and uninstall commands (charts/readme.py COMMANDS), run by the real helm against a
real API server (tier A), with this test's release, namespace and chart path in place of the README's.

Tier A runs no pods, so two things differ from a cluster with kubelets, and both are tested elsewhere: the
pre-delete hook is off here (its Job would never finish; its command runs as a process under its own rights in
test_on_the_api_server.py), and `helm test`'s Pod never runs (its command runs as a process in test_helm_test.py).
What this shows is what install.md promises of an upgrade with Helm 4's server-side apply: the certificate
controller's keys in the Secret and the caBundle it injected survive `helm upgrade --reset-then-reuse-values`, and the
uninstall removes the webhook configurations with the rest.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from charts.readme import COMMANDS
from harness.cluster import ControlPlane
from tests.charts.helm import CHART, readme_argv, run_helm
from tests.charts.test_on_the_api_server import ADMISSION, _release

pytestmark = pytest.mark.cluster

FIELD_MANAGER = "dispatch.phpboyscout.uk/adapter"
KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
NO_HOOK = ("--set", "uninstallHook.enabled=false")
"""The pre-delete hook's Job would wait for a kubelet (module docstring)."""


def _helm(cp: ControlPlane, argv: list[str], *extra: str) -> str:
    return run_helm(*argv, "--kubeconfig", str(cp.admin_kubeconfig), *extra).stdout


def _patch(cp: ControlPlane, doc_path: str, body: Any, content_type: str) -> dict[str, Any]:
    query = {"fieldManager": FIELD_MANAGER}
    return cp.admin.request("PATCH", doc_path, body, query=query, content_type=content_type)


def test_the_readmes_commands_install_upgrade_and_uninstall(control_plane):
    cp = control_plane
    release = _release()
    namespace = f"{release}-ns"
    full = release  # the release name contains dispatch-k8s: it is the fullname
    try:
        _helm(cp, readme_argv(COMMANDS["install"], release, namespace), *NO_HOOK)
        deployment = cp.admin.get("apps/v1", "Deployment", full, namespace)
        assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == (
            "registry.example/dispatch-k8s:0.1.0"
        )
        secret_path = cp.admin.object_path({"apiVersion": "v1", "kind": "Secret",
                                            "metadata": {"name": f"{full}-certs", "namespace": namespace}})  # fmt: skip
        assert "data" not in cp.admin.get("v1", "Secret", f"{full}-certs", namespace)

        # What the certificate controller writes, with its field manager: the Secret's keys and the caBundle.
        data = {k: base64.b64encode(f"{k} of the controller".encode()).decode() for k in ("ca.crt", "tls.crt")}
        _patch(cp, secret_path, {"data": data}, "application/merge-patch+json")
        bundle = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n").decode()
        for kind in KINDS:
            live = cp.admin.get(ADMISSION, kind, full)
            path = cp.admin.object_path(live)
            ops = [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
                   for i in range(len(live["webhooks"]))]  # fmt: skip
            _patch(cp, path, ops, "application/json-patch+json")

        _helm(cp, readme_argv(COMMANDS["upgrade"], release, namespace))
        deployment = cp.admin.get("apps/v1", "Deployment", full, namespace)
        assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == (
            "registry.example/dispatch-k8s:0.2.0"
        ), "the release's values kept the repository, --set changed the tag"
        assert cp.admin.get("v1", "Secret", f"{full}-certs", namespace).get("data") == data, "the keys survive"
        for kind in KINDS:
            hooks = cp.admin.get(ADMISSION, kind, full)["webhooks"]
            assert [h["clientConfig"].get("caBundle") for h in hooks] == [bundle] * len(hooks), kind
        assert "STATUS: deployed" in _helm(cp, ["status", release, "--namespace", namespace])
        assert "REVISION: 2" in _helm(cp, ["status", release, "--namespace", namespace])

        _helm(cp, readme_argv(COMMANDS["uninstall"], release, namespace))
        for kind in KINDS:
            assert cp.admin.get_or_none(ADMISSION, kind, full) is None, f"{kind} left failing closed"
        assert cp.admin.get_or_none("v1", "Secret", f"{full}-certs", namespace) is None
        assert cp.admin.get_or_none("rbac.authorization.k8s.io/v1", "ClusterRole", f"{full}-agent") is None
    finally:
        _remove(cp, release, namespace)


def _chart_before(value: str, flag: str, to: Path) -> Path:
    """This chart as it was before ``value`` (section.key) existed: the value out of values.yaml and the
    schema, and the line that passes it (``flag``) out of the Deployment."""
    shutil.copytree(CHART, to)
    section, key = value.split(".")
    values = (to / "values.yaml").read_text()
    start = values.index(f"\n{section}:\n")
    entry = re.compile(rf"\n(?:  # .*\n)*  {key}: .*\n")
    found = entry.search(values, start)
    assert found, value
    (to / "values.yaml").write_text(values[: found.start()] + "\n" + values[found.end() :])
    schema = json.loads((to / "values.schema.json").read_text())
    del schema["properties"][section]["properties"][key]
    schema["properties"][section]["required"].remove(key)
    (to / "values.schema.json").write_text(json.dumps(schema))
    deployment = to / "templates" / "deployment.yaml"
    lines = deployment.read_text().splitlines(keepends=True)
    kept = [line for line in lines if flag not in line]
    assert len(kept) == len(lines) - 1, flag
    deployment.write_text("".join(kept))
    return to


def test_the_readmes_upgrade_gives_a_value_added_since_the_release_its_default(control_plane, tmp_path):
    """An upgrade from a release that predates a value: the README's command must give it the chart's default.

    `--reuse-values` does not: Helm then renders the new chart with the old chart's values in place of its own, so
    the new key is missing and the schema refuses the upgrade. `--reset-then-reuse-values` (Helm ≥ 3.14) starts
    from the new chart's values and lays the release's own settings over them."""
    cp = control_plane
    release = _release()
    namespace = f"{release}-ns"
    value = "api.shutdownDelaySeconds"
    old = _chart_before(value, f"--shutdown-delay-duration={{{{ .Values.{value} }}}}s", tmp_path / "dispatch-k8s")
    install = readme_argv(COMMANDS["install"], release, namespace)
    try:
        _helm(cp, [str(old) if arg == str(CHART) else arg for arg in install], *NO_HOOK)
        agent = _container(cp, release, namespace, "agent")
        assert not [a for a in agent["args"] if a.startswith("--shutdown-delay-duration")], agent["args"]

        _helm(cp, readme_argv(COMMANDS["upgrade"], release, namespace))
        agent = _container(cp, release, namespace, "agent")
        assert "--shutdown-delay-duration=5s" in agent["args"], agent["args"]
        assert agent["image"] == "registry.example/dispatch-k8s:0.2.0", "the release's values kept, --set applied"
    finally:
        _remove(cp, release, namespace)


def _remove(cp: ControlPlane, release: str, namespace: str) -> None:
    """Whatever the test left: the release without its hook, the webhook configurations (fail-closed), the
    namespace. The release name contains dispatch-k8s, so it is the fullname."""
    run_helm("uninstall", release, "--namespace", namespace, "--kubeconfig", str(cp.admin_kubeconfig),
             "--no-hooks", "--ignore-not-found", check=False)  # fmt: skip
    for kind in KINDS:
        cp.admin.delete(ADMISSION, kind, release)
    cp.delete_namespace(namespace)


def _container(cp: ControlPlane, release: str, namespace: str, name: str) -> dict[str, Any]:
    spec = cp.admin.get("apps/v1", "Deployment", release, namespace)["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] if c["name"] == name)
