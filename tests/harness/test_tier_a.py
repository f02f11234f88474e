"""Tier A: the API server authenticates, authorizes and admits like a real cluster, and serves our CRDs."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from certs import pki
from harness.async_client import api_client as make_api_client
from harness.binaries import locate
from harness.cluster import ControlPlane
from tests.harness.waiting import eventually
from tests.harness.webhook_server import json_patch_response, serve_webhook

pytestmark = pytest.mark.cluster

EXPECTED_CRDS = [
    "trainjobs.trainer.kubeflow.org",
    "trainingruntimes.trainer.kubeflow.org",
    "clustertrainingruntimes.trainer.kubeflow.org",
    "jobsets.jobset.x-k8s.io",
    "workloads.kueue.x-k8s.io",
    "clusterqueues.kueue.x-k8s.io",
    "localqueues.kueue.x-k8s.io",
    "resourceflavors.kueue.x-k8s.io",
    "admissionchecks.kueue.x-k8s.io",
    "workloadpriorityclasses.kueue.x-k8s.io",
    "cohorts.kueue.x-k8s.io",
    "topologies.kueue.x-k8s.io",
    "multikueueclusters.kueue.x-k8s.io",
    "multikueueconfigs.kueue.x-k8s.io",
    "provisioningrequestconfigs.kueue.x-k8s.io",
]


async def whoami(api: client.ApiClient) -> client.V1UserInfo:
    review = await client.AuthenticationV1Api(api).create_self_subject_review(
        client.V1SelfSubjectReview(api_version="authentication.k8s.io/v1", kind="SelfSubjectReview")
    )
    return review.status.user_info


@pytest.mark.asyncio
async def test_client_certificate_authenticates_as_cluster_admin(api_client: client.ApiClient) -> None:
    version = await client.VersionApi(api_client).get_code()
    assert version.git_version == locate().versions["K8S_VERSION"]

    user = await whoami(api_client)
    assert user.username == "dispatch-admin"
    assert "system:masters" in user.groups


@pytest.mark.asyncio
async def test_service_account_token_authenticates(control_plane: ControlPlane, namespace: str) -> None:
    async with make_api_client(control_plane.service_account_credentials(namespace, "agent")) as api:
        user = await whoami(api)
    assert user.username == f"system:serviceaccount:{namespace}:agent"
    assert f"system:serviceaccounts:{namespace}" in user.groups

    # The same identity through a kubeconfig file, as a process run under the SA would load it.
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(control_plane.service_account_kubeconfig(namespace, "agent")),
        client_configuration=configuration,
    )
    async with client.ApiClient(configuration) as api:
        assert (await whoami(api)).username == f"system:serviceaccount:{namespace}:agent"


@pytest.mark.asyncio
async def test_forged_token_is_rejected(control_plane: ControlPlane, namespace: str) -> None:
    bogus = control_plane.service_account_credentials(namespace, "agent")
    forged = type(bogus)(server=bogus.server, ca_file=bogus.ca_file, token=bogus.token[:-4] + "AAAA")
    async with make_api_client(forged) as api:
        with pytest.raises(ApiException) as e:
            await whoami(api)
    assert e.value.status == 401


@pytest.mark.asyncio
async def test_rbac_denies_service_account_without_binding(
    control_plane: ControlPlane, namespace: str, api_client: client.ApiClient
) -> None:
    async with make_api_client(control_plane.service_account_credentials(namespace, "agent")) as api:
        core = client.CoreV1Api(api)
        with pytest.raises(ApiException) as denied:
            await core.list_namespaced_config_map(namespace)
        assert denied.value.status == 403

        # A Role of our own: the aggregated `view` ClusterRole gets its rules from the controller
        # manager's aggregation controller, which tier A does not run.
        rbac = client.RbacAuthorizationV1Api(api_client)
        await rbac.create_namespaced_role(
            namespace,
            client.V1Role(
                metadata=client.V1ObjectMeta(name="read-configmaps"),
                rules=[client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["get", "list"])],
            ),
        )
        await rbac.create_namespaced_role_binding(
            namespace,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name="agent-read-configmaps"),
                role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="read-configmaps"),
                subjects=[client.RbacV1Subject(kind="ServiceAccount", name="agent", namespace=namespace)],
            ),
        )
        await eventually(lambda: core.list_namespaced_config_map(namespace), what="read access granted")

        # Reading only, and only here: writing and other namespaces stay denied.
        with pytest.raises(ApiException) as write:
            await core.create_namespaced_config_map(
                namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="nope"))
            )
        assert write.value.status == 403
        with pytest.raises(ApiException) as elsewhere:
            await core.list_namespaced_config_map("kube-system")
        assert elsewhere.value.status == 403


@pytest.mark.asyncio
async def test_crds_are_established_and_served(api_client: client.ApiClient, namespace: str) -> None:
    crds = await client.ApiextensionsV1Api(api_client).list_custom_resource_definition()
    established = {
        crd.metadata.name
        for crd in crds.items
        if any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])
    }
    assert set(EXPECTED_CRDS) <= established

    custom = client.CustomObjectsApi(api_client)
    created = await custom.create_namespaced_custom_object(
        "trainer.kubeflow.org",
        "v1alpha1",
        namespace,
        "trainjobs",
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "schema-check"},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "suspend": True},
        },
    )
    # Defaults come from the Trainer CRD's structural schema, so the CRD really is the upstream one.
    assert created["spec"]["runtimeRef"]["kind"] == "ClusterTrainingRuntime"
    assert created["spec"]["runtimeRef"]["apiGroup"] == "trainer.kubeflow.org"

    # ...and so do the CRD's CEL rules.
    with pytest.raises(ApiException) as invalid:
        await custom.create_namespaced_custom_object(
            "trainer.kubeflow.org",
            "v1alpha1",
            namespace,
            "trainjobs",
            {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": "bad-manager"},
                "spec": {"runtimeRef": {"name": "torch-distributed"}, "managedBy": "example.com/other"},
            },
        )
    assert invalid.value.status == 422
    assert "ManagedBy must be trainer.kubeflow.org/trainjob-controller" in invalid.value.body

    flavor = await custom.create_cluster_custom_object(
        "kueue.x-k8s.io",
        "v1beta2",
        "resourceflavors",
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": namespace}},
    )
    assert flavor["metadata"]["uid"]
    await custom.delete_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "resourceflavors", namespace)


def _namespace_selector(namespace: str) -> dict[str, Any]:
    return {"matchLabels": {"kubernetes.io/metadata.name": namespace}}


@pytest.mark.asyncio
async def test_admission_webhooks_are_called(
    control_plane: ControlPlane, namespace: str, api_client: client.ApiClient, tmp_path: Path
) -> None:
    ca = pki.CertifiedKey(control_plane.ca_file.read_bytes(), control_plane.pki.path("ca.key").read_bytes())

    def mutate(review: dict[str, Any]) -> dict[str, Any]:
        labels = {**review["request"]["object"]["metadata"].get("labels", {}), "mutated-by": "test-webhook"}
        return json_patch_response([{"op": "add", "path": "/metadata/labels", "value": labels}])

    def validate(review: dict[str, Any]) -> dict[str, Any]:
        labels = review["request"]["object"]["metadata"].get("labels", {})
        if labels.get("deny") == "true":
            return {"allowed": False, "status": {"code": 403, "message": "denied by the test webhook"}}
        return {"allowed": True}

    suffix = secrets.token_hex(3)
    admission = client.AdmissionregistrationV1Api(api_client)
    with (
        serve_webhook(ca, mutate, tmp_path / "mutating") as mutating,
        serve_webhook(ca, validate, tmp_path / "validating") as validating,
    ):
        rule = {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["configmaps"],
        }
        common = {
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
            "namespaceSelector": _namespace_selector(namespace),
            "rules": [rule],
        }
        await admission.create_mutating_webhook_configuration(
            {
                "metadata": {"name": f"test-mutating-{suffix}"},
                "webhooks": [
                    {
                        **common,
                        "name": "mutate.test.invalid",
                        "clientConfig": {"url": mutating.url, "caBundle": mutating.ca_bundle},
                    }
                ],
            }
        )
        await admission.create_validating_webhook_configuration(
            {
                "metadata": {"name": f"test-validating-{suffix}"},
                "webhooks": [
                    {
                        **common,
                        "name": "validate.test.invalid",
                        "clientConfig": {"url": validating.url, "caBundle": validating.ca_bundle},
                    }
                ],
            }
        )
        try:
            core = client.CoreV1Api(api_client)

            async def mutated() -> None:
                name = f"cm-{secrets.token_hex(3)}"
                cm = await core.create_namespaced_config_map(
                    namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name))
                )
                assert (cm.metadata.labels or {}).get("mutated-by") == "test-webhook"

            await eventually(mutated, what="mutating webhook applied")

            with pytest.raises(ApiException) as denied:
                await core.create_namespaced_config_map(
                    namespace,
                    client.V1ConfigMap(metadata=client.V1ObjectMeta(name="bad", labels={"deny": "true"})),
                )
            assert denied.value.status == 403
            assert "denied by the test webhook" in denied.value.body

            # The validating webhook saw the object after mutation, as admission orders them.
            seen = [r["request"]["object"]["metadata"] for r in validating.reviews]
            assert any(m.get("labels", {}).get("mutated-by") == "test-webhook" for m in seen)
            assert {r["request"]["namespace"] for r in mutating.reviews} == {namespace}
        finally:
            await admission.delete_mutating_webhook_configuration(f"test-mutating-{suffix}")
            await admission.delete_validating_webhook_configuration(f"test-validating-{suffix}")


@pytest.mark.asyncio
async def test_validating_admission_policy_is_enforced(api_client: client.ApiClient, namespace: str) -> None:
    admission = client.AdmissionregistrationV1Api(api_client)
    name = f"test-policy-{secrets.token_hex(3)}"
    await admission.create_validating_admission_policy(
        {
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["configmaps"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": ("!has(object.metadata.labels) || !('forbidden' in object.metadata.labels)"),
                        "message": "the forbidden label is not allowed",
                    }
                ],
            },
        }
    )
    await admission.create_validating_admission_policy_binding(
        {
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": _namespace_selector(namespace)},
            },
        }
    )
    try:
        core = client.CoreV1Api(api_client)

        async def denied() -> None:
            cm = client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name=f"cm-{secrets.token_hex(3)}", labels={"forbidden": "x"})
            )
            with pytest.raises(ApiException) as e:
                await core.create_namespaced_config_map(namespace, cm)
            assert e.value.status == 422
            assert "the forbidden label is not allowed" in e.value.body

        await eventually(denied, what="policy enforced")
        await core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="ok")))
    finally:
        await admission.delete_validating_admission_policy_binding(name)
        await admission.delete_validating_admission_policy(name)
