"""Installs the webhook configurations of Kueue, JobSet and Trainer the way upstream's kustomize does,
for managers that run as local processes.

Upstream ships the webhook manifests of each project before kustomize (`config/components/webhook`)
plus a kustomization: a name prefix, a namespace, and a few patches. We copy those inputs from the
module cache (controlplane/build.sh) and perform the same few steps here, rather than build kustomize.
The webhooks keep their Service-based clientConfig; the Service becomes an ExternalName pointing at
loopback, which the API server resolves to `<externalName>:<clientConfig.service.port>`.
"""

from __future__ import annotations

import base64
import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
LOOPBACK_HOST = "127.0.0.1"

Doc = dict[str, Any]


@dataclass(frozen=True)
class ServiceRef:
    namespace: str
    name: str
    port: int

    @property
    def dns_names(self) -> list[str]:
        """The names the API server may verify: it sends `<name>.<namespace>.svc` as TLS server name."""
        return [
            f"{self.name}.{self.namespace}.svc",
            f"{self.name}.{self.namespace}.svc.cluster.local",
            "localhost",
        ]


def json_patch(doc: Doc, ops: Iterable[Mapping[str, Any]]) -> Doc:
    """RFC 6902 `add`, `replace` and `remove` on a copy of `doc` (all that the upstream patches use)."""
    result = copy.deepcopy(doc)
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target: Any = result
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        key: Any = int(last) if isinstance(target, list) and last != "-" else last
        match op["op"]:
            case "replace":
                target[key] = copy.deepcopy(op["value"])
            case "add":
                if isinstance(target, list):
                    target.insert(len(target) if key == "-" else key, copy.deepcopy(op["value"]))
                else:
                    target[key] = copy.deepcopy(op["value"])
            case "remove":
                del target[key]
            case other:
                raise ValueError(f"unsupported JSON patch op {other!r}")
    return result


def wire_to_service(docs: Iterable[Doc], service: ServiceRef, ca_bundle: str | None) -> list[Doc]:
    """Points every webhook (and CRD conversion) clientConfig at `service`, with our CA bundle if given."""
    out = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        if doc["kind"] in WEBHOOK_KINDS:
            for webhook in doc.get("webhooks", []):
                _wire_client_config(webhook["clientConfig"], service, ca_bundle)
        out.append(doc)
    return out


def _wire_client_config(client_config: Doc, service: ServiceRef, ca_bundle: str | None) -> None:
    svc = client_config.setdefault("service", {})
    svc.update({"namespace": service.namespace, "name": service.name, "port": service.port})
    if ca_bundle:
        client_config["caBundle"] = ca_bundle
    else:
        client_config.pop("caBundle", None)


def external_name_service(service: ServiceRef) -> Doc:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"namespace": service.namespace, "name": service.name},
        "spec": {
            "type": "ExternalName",
            "externalName": LOOPBACK_HOST,
            "ports": [{"name": "https", "port": service.port, "protocol": "TCP"}],
        },
    }


def rename(docs: Iterable[Doc], names: Mapping[str, str]) -> list[Doc]:
    out = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        doc["metadata"]["name"] = names.get(doc["metadata"]["name"], doc["metadata"]["name"])
        out.append(doc)
    return out


def with_prefix(docs: Iterable[Doc], prefix: str) -> list[Doc]:
    return rename(docs, {d["metadata"]["name"]: prefix + d["metadata"]["name"] for d in docs})


# --- per project -------------------------------------------------------------------------------

_TARGET_WEBHOOK = re.compile(r"webhooks\.\[name=([^\]]+)\]\.namespaceSelector")


def kueue_webhooks(manifests: list[Doc], kustomization: Doc) -> list[Doc]:
    """config/default: namePrefix kueue-; config/components/webhook: the namespaceSelector that keeps
    Kueue's own and kube-system's objects away from its webhooks, copied to the listed webhooks."""
    selector: Doc | None = None
    for patch in kustomization.get("patches", []):
        for webhook in _yaml_patch_webhooks(patch):
            if "namespaceSelector" in webhook:
                selector = webhook["namespaceSelector"]
    if selector is None:
        raise ValueError("Kueue's webhook kustomization no longer carries the namespaceSelector patch")
    targets: set[str] = set()
    for replacement in kustomization.get("replacements", []):
        for target in replacement.get("targets", []):
            for field_path in target.get("fieldPaths", []):
                targets.update(_TARGET_WEBHOOK.findall(field_path))
    targets.add("vpod.kb.io")  # the source of the replacement, set by the patch itself
    docs = copy.deepcopy(manifests)
    for doc in docs:
        for webhook in doc.get("webhooks", []):
            if webhook["name"] in targets:
                webhook["namespaceSelector"] = copy.deepcopy(selector)
    return with_prefix(docs, "kueue-")


def _yaml_patch_webhooks(patch: Mapping[str, Any]) -> list[Doc]:
    body = patch.get("patch")
    if not body:
        return []
    doc = yaml.safe_load(body)
    return list(doc.get("webhooks", [])) if isinstance(doc, dict) else []


def apply_json6902_patches(
    manifests: list[Doc], patches: Iterable[tuple[Mapping[str, Any], list[Mapping[str, Any]]]]
) -> list[Doc]:
    """Kustomize `patches:` entries with a target (kind and optional name) and a JSON 6902 body."""
    docs = copy.deepcopy(manifests)
    for target, ops in patches:
        for i, doc in enumerate(docs):
            if (
                doc["kind"] == target.get("kind")
                and target.get("name", doc["metadata"]["name"]) == (doc["metadata"]["name"])
            ):
                docs[i] = json_patch(doc, ops)
    return docs


def dump_ca_bundle(ca_pem: bytes) -> str:
    return base64.b64encode(ca_pem).decode()
