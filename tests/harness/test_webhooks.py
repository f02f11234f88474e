"""harness/webhooks.py: the kustomize steps the harness performs on upstream webhook manifests."""

from __future__ import annotations

from typing import Any

import pytest

from harness.webhooks import (
    ServiceRef,
    apply_json6902_patches,
    external_name_service,
    json_patch,
    kueue_webhooks,
    wire_to_service,
    with_prefix,
)


def config(kind: str, name: str, *webhooks: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": w,
                "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": f"/{w}"}},
            }
            for w in webhooks
        ],
    }


def test_json_patch_replace_add_remove_on_a_copy() -> None:
    doc = {"a": {"b": [1, 2]}, "c": "x", "d/e": 1}
    patched = json_patch(
        doc,
        [
            {"op": "replace", "path": "/a/b/1", "value": 3},
            {"op": "add", "path": "/a/b/-", "value": 4},
            {"op": "add", "path": "/a/f", "value": {"g": 1}},
            {"op": "remove", "path": "/c"},
            {"op": "replace", "path": "/d~1e", "value": 2},
        ],
    )
    assert patched == {"a": {"b": [1, 3, 4], "f": {"g": 1}}, "d/e": 2}
    assert doc == {"a": {"b": [1, 2]}, "c": "x", "d/e": 1}
    with pytest.raises(ValueError, match="unsupported"):
        json_patch(doc, [{"op": "move", "from": "/c", "path": "/z"}])


def test_kueue_namespace_selector_goes_to_the_listed_webhooks_only() -> None:
    kustomization = {
        "patches": [
            {
                "patch": (
                    "apiVersion: admissionregistration.k8s.io/v1\n"
                    "kind: ValidatingWebhookConfiguration\n"
                    "metadata:\n  name: validating-webhook-configuration\n"
                    "webhooks:\n- name: vpod.kb.io\n  namespaceSelector:\n"
                    "    matchExpressions:\n    - key: kubernetes.io/metadata.name\n"
                    "      operator: NotIn\n      values: [kube-system, kueue-system]\n"
                )
            }
        ],
        "replacements": [
            {
                "targets": [
                    {"fieldPaths": ["webhooks.[name=mpod.kb.io].namespaceSelector"]},
                    {"fieldPaths": ["webhooks.[name=vtrainjob.kb.io].namespaceSelector"]},
                ]
            }
        ],
    }
    docs = kueue_webhooks(
        [
            config("MutatingWebhookConfiguration", "mutating-webhook-configuration", "mpod.kb.io", "mworkload.kb.io"),
            config(
                "ValidatingWebhookConfiguration", "validating-webhook-configuration", "vpod.kb.io", "vtrainjob.kb.io"
            ),
        ],
        kustomization,
    )
    assert [d["metadata"]["name"] for d in docs] == [
        "kueue-mutating-webhook-configuration",
        "kueue-validating-webhook-configuration",
    ]
    selected = {w["name"]: w.get("namespaceSelector") for d in docs for w in d["webhooks"]}
    excluded = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kueue-system"]}
        ]
    }
    assert selected == {
        "mpod.kb.io": excluded,
        "mworkload.kb.io": None,
        "vpod.kb.io": excluded,
        "vtrainjob.kb.io": excluded,
    }


def test_kueue_kustomization_without_the_selector_is_an_error() -> None:
    with pytest.raises(ValueError, match="namespaceSelector"):
        kueue_webhooks([], {"patches": []})


def test_targeted_json6902_patches_and_prefix() -> None:
    docs = [
        config("MutatingWebhookConfiguration", "mutating-webhook-configuration", "a"),
        config("ValidatingWebhookConfiguration", "validating-webhook-configuration", "b"),
    ]
    patched = apply_json6902_patches(
        docs,
        [({"kind": "MutatingWebhookConfiguration"}, [{"op": "replace", "path": "/metadata/name", "value": "m"}])],
    )
    assert [d["metadata"]["name"] for d in patched] == ["m", "validating-webhook-configuration"]
    assert [d["metadata"]["name"] for d in with_prefix(docs, "jobset-")] == [
        "jobset-mutating-webhook-configuration",
        "jobset-validating-webhook-configuration",
    ]


def test_wiring_points_every_webhook_at_the_service_port() -> None:
    service = ServiceRef("jobset-system", "jobset-webhook-service", 12345)
    (wired,) = wire_to_service([config("MutatingWebhookConfiguration", "m", "a", "b")], service, "Q0E=")
    for webhook in wired["webhooks"]:
        assert webhook["clientConfig"] == {
            "service": {
                "name": "jobset-webhook-service",
                "namespace": "jobset-system",
                "path": f"/{webhook['name']}",
                "port": 12345,
            },
            "caBundle": "Q0E=",
        }
    svc = external_name_service(service)
    assert svc["spec"] == {
        "type": "ExternalName",
        "externalName": "127.0.0.1",
        "ports": [{"name": "https", "port": 12345, "protocol": "TCP"}],
    }
    assert "jobset-webhook-service.jobset-system.svc" in service.dns_names
