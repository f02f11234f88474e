"""``dispatch-certs uninstall --prologue-configmap``, the chart's pre-delete hook, on a real kube-apiserver (tier A):
it deletes the prologue's ConfigMap of that name in every namespace where it carries the prologue's labels,
preconditioned on what it listed, under RBAC that names the ConfigMap and nothing else (a list by its name).

Each test uses a name of its own (``dispatch-k8s-prologue-<random>``), so the cluster-wide list never meets
another test's ConfigMaps on the shared API server."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio import client

from certs import cli
from certs.cli import UninstallError, delete_prologue_configmaps
from contract.keys import PROLOGUE_CONFIGMAP_LABELS, PROLOGUE_CONFIGMAP_PREFIX
from contract.prologue import prologue_configmap
from harness.async_client import api_client as admin_api_client

pytestmark = pytest.mark.cluster
async_test = pytest.mark.asyncio(loop_scope="function")
RBAC = "rbac.authorization.k8s.io/v1"


def prologue(namespace: str, name: str, *, labelled: bool = True) -> dict[str, Any]:
    cm = prologue_configmap(namespace)
    cm["metadata"]["name"] = name
    if not labelled:
        cm["metadata"]["labels"] = {"app.kubernetes.io/name": "someone-else"}
    return cm


@pytest.fixture
def name() -> str:
    return PROLOGUE_CONFIGMAP_PREFIX + secrets.token_hex(5)


@pytest.fixture
def namespaces(control_plane) -> Iterator[list[str]]:
    made = [control_plane.create_namespace("prologue") for _ in range(3)]
    yield made
    for ns in made:
        control_plane.delete_namespace(ns)


@pytest_asyncio.fixture(loop_scope="function")
async def api(control_plane) -> AsyncIterator[client.ApiClient]:
    async with admin_api_client(control_plane.admin_credentials) as api:
        yield api


@async_test
async def test_deletes_the_labelled_ones_of_the_name_in_every_namespace(control_plane, name, namespaces, api):
    a, b, other = namespaces
    admin = control_plane.admin
    for ns in (a, b):
        admin.create(prologue(ns, name))
    admin.create(prologue(other, name, labelled=False))  # the name, not the labels: someone else's
    admin.create(prologue(a, name + "x"))  # the labels, another name: not the one asked for
    assert await delete_prologue_configmaps(api, name) == {a: "deleted", b: "deleted"}
    assert admin.get_or_none("v1", "ConfigMap", name, a) is None
    assert admin.get_or_none("v1", "ConfigMap", name, b) is None
    assert admin.get_or_none("v1", "ConfigMap", name, other) is not None
    assert admin.get_or_none("v1", "ConfigMap", name + "x", a) is not None
    assert await delete_prologue_configmaps(api, name) == {}


@pytest.fixture
def hook_credentials(control_plane, name, namespaces) -> Iterator[Any]:
    """A ServiceAccount with exactly the hook's ConfigMap rule (charts/dispatch-k8s/templates/uninstall-hook.yaml)."""
    sa_ns = namespaces[2]
    role = f"{name}-hook"
    admin = control_plane.admin
    admin.create({"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": role},
                  "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [name],
                             "verbs": ["list", "delete"]}]})  # fmt: skip
    admin.create({"apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": role},
                  "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                  "subjects": [{"kind": "ServiceAccount", "name": "hook", "namespace": sa_ns}]})  # fmt: skip
    try:
        yield control_plane.service_account_credentials(sa_ns, "hook")
    finally:
        admin.delete(RBAC, "ClusterRoleBinding", role)
        admin.delete(RBAC, "ClusterRole", role)


@async_test
async def test_the_hooks_rights_name_the_configmap_and_suffice(control_plane, name, namespaces, hook_credentials):
    """RBAC judges a list with the field selector ``metadata.name=<name>`` as a request for that name, so the
    hook lists every namespace's ConfigMap of the name without the right to read any other ConfigMap."""
    a = namespaces[0]
    control_plane.admin.create(prologue(a, name))
    async with admin_api_client(hook_credentials) as api:
        assert await delete_prologue_configmaps(api, name) == {a: "deleted"}
        with pytest.raises(UninstallError, match=r"ConfigMaps .*x: HTTP 403"):
            await delete_prologue_configmaps(api, name + "x")  # a name the rule does not give


@async_test
async def test_one_replaced_after_the_list_is_listed_again(control_plane, name, namespaces, api, monkeypatch):
    """The delete carries the uid and resourceVersion listed: one replaced in between is refused (409), the list
    is made again, and the new one is deleted."""
    a = namespaces[0]
    first = control_plane.admin.create(prologue(a, name))
    real_list = client.CoreV1Api.list_config_map_for_all_namespaces
    uids = []

    async def list_then_replace(self, **kwargs):
        listed = await real_list(self, **kwargs)
        uids.append([i.metadata.uid for i in listed.items])
        if len(uids) == 1:  # between our list and our delete, the ConfigMap is made again
            control_plane.admin.delete("v1", "ConfigMap", name, a)
            control_plane.admin.create(prologue(a, name))
        return listed

    monkeypatch.setattr(client.CoreV1Api, "list_config_map_for_all_namespaces", list_then_replace)
    assert await delete_prologue_configmaps(api, name, pause=0.01) == {a: "deleted"}
    assert uids[0] == [first["metadata"]["uid"]]
    assert len(uids) == 2, uids
    assert uids[1] != uids[0], uids
    assert control_plane.admin.get_or_none("v1", "ConfigMap", name, a) is None


def test_the_command_line(control_plane, name, namespaces, capsys):
    a, b, _ = namespaces
    for ns in (a, b):
        control_plane.admin.create(prologue(ns, name))
    kubeconfig = str(control_plane.admin_kubeconfig)
    configuration = f"{name}-none"  # no webhook configuration of the name: absent, fine
    argv = ["uninstall", "--webhook-configuration", configuration, "--prologue-configmap", name]
    assert cli.main([*argv, "--kubeconfig", kubeconfig]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"ValidatingWebhookConfiguration {configuration}: absent",
        f"MutatingWebhookConfiguration {configuration}: absent",
        f"ConfigMap {name}: " + ", ".join(f"{ns} deleted" for ns in sorted((a, b))),
    ]
    assert cli.main([*argv, "--kubeconfig", kubeconfig]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"ConfigMap {name}: none"
    assert set(PROLOGUE_CONFIGMAP_LABELS.items()) <= set(prologue(a, name)["metadata"]["labels"].items())
