"""``dispatch-certs uninstall``, the chart's pre-delete hook, on a real kube-apiserver (tier A): it deletes
our two webhook configurations, preconditioned on the uid it read; one already gone is fine; one of the
name without our label is someone else's and stays."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio import client

from certs import cli
from certs.cli import UninstallError, delete_configuration
from harness.async_client import api_client as admin_api_client

pytestmark = pytest.mark.cluster
async_test = pytest.mark.asyncio(loop_scope="function")

ADMISSION = "admissionregistration.k8s.io/v1"
KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def configuration(kind: str, name: str, *, ours: bool = True) -> dict[str, Any]:
    """A configuration that no request ever reaches: it matches one label nobody sets, in no namespace."""
    hook = {
        "name": "never.dispatch.phpboyscout.uk",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Ignore",
        "clientConfig": {"url": "https://127.0.0.1:9/never"},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "operations": ["CREATE"]}],
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": f"{name}-nothing"}},
        "objectSelector": {"matchLabels": {"dispatch.phpboyscout.uk/never": "true"}},
    }
    labels = {"app.kubernetes.io/name": "dispatch-k8s" if ours else "someone-else"}
    return {"apiVersion": ADMISSION, "kind": kind, "metadata": {"name": name, "labels": labels}, "webhooks": [hook]}


@pytest.fixture
def name(control_plane) -> Any:
    name = f"dispatch-k8s-{secrets.token_hex(3)}"
    yield name
    for kind in KINDS:
        control_plane.admin.delete(ADMISSION, kind, name)


@pytest_asyncio.fixture(loop_scope="function")
async def api(control_plane) -> AsyncIterator[client.ApiClient]:
    async with admin_api_client(control_plane.admin_credentials) as api:
        yield api


@async_test
async def test_deletes_both_of_ours_and_then_finds_them_absent(control_plane, name, api):
    for kind in KINDS:
        control_plane.admin.create(configuration(kind, name))
    assert [await delete_configuration(api, kind, name) for kind in KINDS] == ["deleted", "deleted"]
    for kind in KINDS:
        assert control_plane.admin.get_or_none(ADMISSION, kind, name) is None
    assert [await delete_configuration(api, kind, name) for kind in KINDS] == ["absent", "absent"]


@async_test
async def test_leaves_a_configuration_of_the_name_without_our_label(control_plane, name, api):
    control_plane.admin.create(configuration(KINDS[0], name, ours=False))
    assert await delete_configuration(api, KINDS[0], name) == "not ours"
    assert control_plane.admin.get_or_none(ADMISSION, KINDS[0], name) is not None


@async_test
async def test_a_configuration_replaced_after_the_read_is_read_again_and_judged_afresh(
    control_plane, name, api, monkeypatch
):
    """The delete carries the uid read: one replaced in between is refused (409), re-read, and deleted only if
    the new one is ours too. Here it is replaced by someone else's, which stays."""
    kind = KINDS[0]
    first = control_plane.admin.create(configuration(kind, name))
    real_read = client.AdmissionregistrationV1Api.read_validating_webhook_configuration
    reads = []

    async def read_then_replace(self, name_, **kwargs):
        obj = await real_read(self, name_, **kwargs)
        reads.append(obj.metadata.uid)
        if len(reads) == 1:  # between our read and our delete, someone else's takes the name
            control_plane.admin.delete(ADMISSION, kind, name)
            control_plane.admin.create(configuration(kind, name, ours=False))
        return obj

    monkeypatch.setattr(client.AdmissionregistrationV1Api, "read_validating_webhook_configuration", read_then_replace)
    assert await delete_configuration(api, kind, name, pause=0.01) == "not ours"
    assert reads[0] == first["metadata"]["uid"]
    assert len(reads) == 2
    assert reads[1] != reads[0]
    survivor = control_plane.admin.get(ADMISSION, kind, name)
    assert survivor["metadata"]["labels"]["app.kubernetes.io/name"] == "someone-else"


@async_test
async def test_a_refusal_is_an_error_naming_the_configuration(control_plane, name):
    control_plane.admin.create(configuration(KINDS[1], name))
    namespace = control_plane.create_namespace("uninstall")
    try:
        creds = control_plane.service_account_credentials(namespace, "nobody")  # no rights at all
        async with admin_api_client(creds) as api:
            with pytest.raises(UninstallError, match=f"MutatingWebhookConfiguration {name}: HTTP 403"):
                await delete_configuration(api, KINDS[1], name)
    finally:
        control_plane.delete_namespace(namespace)
    assert control_plane.admin.get_or_none(ADMISSION, KINDS[1], name) is not None


def test_the_command_line(control_plane, name, capsys):
    for kind in KINDS:
        control_plane.admin.create(configuration(kind, name))
    kubeconfig = str(control_plane.admin_kubeconfig)
    assert cli.main(["uninstall", "--webhook-configuration", name, "--kubeconfig", kubeconfig]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"ValidatingWebhookConfiguration {name}: deleted",
        f"MutatingWebhookConfiguration {name}: deleted",
    ]
    assert cli.main(["uninstall", "--webhook-configuration", name, "--kubeconfig", "/nonexistent"]) == 1
    assert "cannot configure the Kubernetes client" in capsys.readouterr().err
