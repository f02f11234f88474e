"""A small synchronous Kubernetes REST client on the standard library, for the harness itself.

The harness bootstraps clusters from plain scripts as well as from pytest, before any event loop
exists, so it talks to the API with urllib; tests use kubernetes_asyncio. Objects are plain dicts.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FIELD_MANAGER = "dispatch-harness"

JsonObject = dict[str, Any]


class ApiError(RuntimeError):
    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:2000]}")
        self.status = status
        self.body = body
        try:
            self.reason = json.loads(body).get("reason", "")
        except (ValueError, AttributeError):
            self.reason = ""


@dataclass(frozen=True)
class Credentials:
    """How to reach and authenticate to one API server: a CA, and a client cert or a bearer token."""

    server: str
    ca_file: Path
    client_cert_file: Path | None = None
    client_key_file: Path | None = None
    token: str | None = None

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if self.client_cert_file is not None:
            context.load_cert_chain(str(self.client_cert_file), str(self.client_key_file))
        return context


@dataclass(frozen=True)
class ResourceInfo:
    plural: str
    namespaced: bool


@dataclass
class KubeHttp:
    credentials: Credentials
    timeout: float = 30.0
    impersonate: tuple[str, str | None] | None = None
    """(username, group or None) to act as, with the credentials' right to impersonate (an admin's). One group
    at most: the API server takes each group from a header of its own, and urllib sends a header once."""
    _context: ssl.SSLContext | None = field(default=None, init=False, repr=False)
    _resources: dict[tuple[str, str], ResourceInfo] = field(default_factory=dict, init=False, repr=False)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        if self._context is None:
            self._context = self.credentials.ssl_context()
        url = self.credentials.server + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        if self.credentials.token:
            headers["Authorization"] = f"Bearer {self.credentials.token}"
        if self.impersonate is not None:
            user, group = self.impersonate
            headers["Impersonate-User"] = user
            if group is not None:
                headers["Impersonate-Group"] = group
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, context=self._context, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, method, path, e.read().decode(errors="replace")) from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    # --- discovery-based paths -------------------------------------------------------------

    def resource_info(self, api_version: str, kind: str) -> ResourceInfo:
        key = (api_version, kind)
        if key not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            for r in self.request("GET", base)["resources"]:
                if "/" not in r["name"]:
                    self._resources[(api_version, r["kind"])] = ResourceInfo(r["name"], r["namespaced"])
        try:
            return self._resources[key]
        except KeyError:
            raise LookupError(f"the API server does not serve {kind} in {api_version}") from None

    def collection_path(self, api_version: str, kind: str, namespace: str | None = None) -> str:
        info = self.resource_info(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if info.namespaced:
            if not namespace:
                raise ValueError(f"{kind} is namespaced; give a namespace")
            return f"{base}/namespaces/{namespace}/{info.plural}"
        return f"{base}/{info.plural}"

    def object_path(self, obj: Mapping[str, Any]) -> str:
        meta = obj["metadata"]
        collection = self.collection_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        return f"{collection}/{meta['name']}"

    # --- verbs -------------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> JsonObject:
        return self.request("GET", f"{self.collection_path(api_version, kind, namespace)}/{name}")

    def get_or_none(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> JsonObject | None:
        try:
            return self.get(api_version, kind, name, namespace)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
    ) -> list[JsonObject]:
        query = {"labelSelector": label_selector} if label_selector else None
        path = self.collection_path(api_version, kind, namespace)
        return self.request("GET", path, query=query)["items"]

    def create(self, obj: Mapping[str, Any]) -> JsonObject:
        meta = obj["metadata"]
        path = self.collection_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        return self.request("POST", path, obj)

    def apply(self, obj: Mapping[str, Any], *, subresource: str = "") -> JsonObject:
        """Server-side apply, forcing ownership: the harness is the only writer of what it installs."""
        path = self.object_path(obj) + (f"/{subresource}" if subresource else "")
        return self.request(
            "PATCH",
            path,
            obj,
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
            content_type="application/apply-patch+yaml",
        )

    def merge_patch(
        self, api_version: str, kind: str, name: str, patch: Mapping[str, Any], namespace: str | None = None
    ) -> JsonObject:
        path = f"{self.collection_path(api_version, kind, namespace)}/{name}"
        return self.request("PATCH", path, patch, content_type="application/merge-patch+json")

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        try:
            self.request("DELETE", f"{self.collection_path(api_version, kind, namespace)}/{name}")
        except ApiError as e:
            if e.status != 404:
                raise
