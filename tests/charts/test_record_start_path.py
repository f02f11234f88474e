"""`helm install` of the chart with its defaults takes the record of A's path the API server allows, and polices.

`admissionPolicies.recordStart: auto` (the default) renders the MutatingAdmissionPolicy `<fullname>-record-start`
where the API server serves MutatingAdmissionPolicy (Kubernetes 1.36 and later), and the webhook `record-start` in
its place where it does not (docs/install.md). This runs on every Kubernetes version of the matrix
(docs/compatibility.md: the kube-oldest lane runs it on the oldest the chart admits): the README's install command,
then the path it took read back from the API server, the validating policies in force (a stranger's write of a
reserved label refused by the API server itself); and the explicit choices, `recordStart: policy` refused by name
where the kind is not served.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import pytest

from charts.readme import COMMANDS
from harness.cluster import ControlPlane
from harness.fixtures import runtime
from harness.kube_http import ApiError
from harness.principals import principals
from tests.charts.helm import readme_argv, run_helm
from tests.charts.test_on_the_api_server import ADMISSION, _release

pytestmark = pytest.mark.cluster

MAP_KIND = "MutatingAdmissionPolicy"
RECORD_START_WEBHOOK = "record-start.trainjobs.dispatch.phpboyscout.uk"
NO_HOOK = ("--set", "uninstallHook.enabled=false")
"""Tier A runs no pods: the pre-delete hook's Job would never finish (tests/charts/test_lifecycle.py)."""


def _serves_mutating_policies(cp: ControlPlane) -> bool:
    resources = cp.admin.request("GET", f"/apis/{ADMISSION}")["resources"]
    return any(r["kind"] == MAP_KIND for r in resources)


def _helm(cp: ControlPlane, *argv: str, check: bool = True) -> Any:
    return run_helm(*argv, "--kubeconfig", str(cp.admin_kubeconfig), check=check)


def _remove(cp: ControlPlane, release: str, namespace: str) -> None:
    _helm(cp, "uninstall", release, "--namespace", namespace, "--no-hooks", "--ignore-not-found", check=False)
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        cp.admin.delete(ADMISSION, kind, release)
    cp.delete_namespace(namespace)


def _refused_by_policy(http: Any, obj: dict[str, Any], patch: dict[str, Any]) -> str:
    """The API server's message refusing this merge patch: tried as a dry run until the policies, which load
    asynchronously, refuse it, then for real."""
    path = http.object_path(obj)
    deadline = time.monotonic() + 30
    while True:
        try:
            http.request("PATCH", path, patch, query={"dryRun": "All"}, content_type="application/merge-patch+json")
        except ApiError as err:
            if err.status != 403:
                raise
            break
        assert time.monotonic() < deadline, f"PATCH {path} was not refused within 30 s"
        time.sleep(0.2)
    with pytest.raises(ApiError) as err:
        http.request("PATCH", path, patch, content_type="application/merge-patch+json")
    assert err.value.status == 403, err.value
    return str(json.loads(err.value.body)["message"])


def test_the_default_install_takes_the_record_path_the_api_server_serves_and_polices(control_plane):
    cp = control_plane
    served = _serves_mutating_policies(cp)
    release = _release()
    namespace = f"{release}-ns"
    home = cp.create_namespace("record-path")
    try:
        _helm(cp, *readme_argv(COMMANDS["install"], release, namespace), *NO_HOOK)
        hooks = [h["name"] for h in cp.admin.get(ADMISSION, "MutatingWebhookConfiguration", release)["webhooks"]]
        if served:
            assert cp.admin.get(ADMISSION, MAP_KIND, f"{release}-record-start"), "auto takes the policy"
            assert RECORD_START_WEBHOOK not in hooks, hooks
        else:
            assert RECORD_START_WEBHOOK in hooks, f"auto takes the webhook where the kind is not served: {hooks}"
        policies = cp.admin.request("GET", f"/apis/{ADMISSION}/validatingadmissionpolicies")["items"]
        ours = [p["metadata"]["name"] for p in policies if p["metadata"]["name"].startswith(f"{release}-")]
        assert len(ours) == 15, ours

        # The chart's validating policies are in force: a stranger may not put a runtime under dispatch's labels (the
        # release's reserved-keys policy refuses it, or its owner policy: the new object belongs to a dispatch job).
        who = principals(cp, home)
        plain = runtime("TrainingRuntime")
        plain["metadata"] = {"name": f"plain-{secrets.token_hex(3)}", "namespace": home, "labels": {"team": "a"}}
        plain = who.stranger.create(plain)
        message = _refused_by_policy(who.stranger, plain, {"metadata": {"labels": {"dispatch.phpboyscout.uk/x": "1"}}})
        assert f"ValidatingAdmissionPolicy '{release}-" in message, message
    finally:
        _remove(cp, release, namespace)
        cp.delete_namespace(home)


@pytest.mark.parametrize("choice", ["policy", "webhook"])
def test_an_explicit_record_start_is_installed_or_refused_by_name(control_plane, choice):
    """`webhook` installs the webhook path anywhere; `policy` the MutatingAdmissionPolicy where the kind is served,
    and elsewhere fails the install naming the kind."""
    cp = control_plane
    served = _serves_mutating_policies(cp)
    release = _release()
    namespace = f"{release}-ns"
    try:
        install = readme_argv(COMMANDS["install"], release, namespace)
        result = _helm(cp, *install, *NO_HOOK, "--set", f"admissionPolicies.recordStart={choice}", check=False)
        if choice == "policy" and not served:
            assert result.returncode != 0, "recordStart=policy installed on an API server without the kind"
            assert MAP_KIND in result.stderr, result.stderr
            return
        assert result.returncode == 0, result.stderr
        hooks = [h["name"] for h in cp.admin.get(ADMISSION, "MutatingWebhookConfiguration", release)["webhooks"]]
        assert (RECORD_START_WEBHOOK in hooks) == (choice == "webhook"), hooks
        if served:
            policy = cp.admin.get_or_none(ADMISSION, MAP_KIND, f"{release}-record-start")
            assert (policy is not None) == (choice == "policy")
    finally:
        _remove(cp, release, namespace)
