"""A small fake of the API server (a real HTTP server, not a patched client): objects by path with uids,
resourceVersions and label selectors, JSON Patch with its preconditions, deletes with a uid precondition,
TokenReview and SubjectAccessReview, discovery and pod logs. Enough to drive the agent's API over real
sockets; the real API server's behaviour is checked by the cluster tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from kubernetes_asyncio import client

from contract.admission import admission_started, unsuspend_ops
from contract.errors import ContractError
from contract.ownership import is_kueue_mode
from tests.agent.api.objects import PatchInvalid, PatchTestFailed, apply_patch
from tests.loopback import serving
from webhook.rules.unsuspend import approval_problems

AGENT_TOKEN = "agent-token"
Hook = Callable[["FakeKube", str, dict[str, Any]], None]


def status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code}
    return web.json_response({**body, "message": message}, status=code)


@dataclass(frozen=True)
class Grant:
    user: str
    verb: str
    resource: str
    namespace: str | None = None
    """None: every namespace (and cluster-scoped resources)."""
    subresource: str | None = None


@dataclass
class Parsed:
    collection: str
    namespace: str | None
    plural: str
    name: str | None
    subresource: str | None


def parse(path: str) -> Parsed | None:
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) >= 3:
        prefix, rest = parts[:2], parts[2:]
    elif parts[0] == "apis" and len(parts) >= 4:
        prefix, rest = parts[:3], parts[3:]
    else:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    collection = "/" + "/".join(prefix + (["namespaces", namespace] if namespace else []) + [rest[0]])
    return Parsed(
        collection, namespace, rest[0], rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
    )


def matches(obj: dict[str, Any], selector: str | None) -> bool:
    if not selector:
        return True
    have = obj.get("metadata", {}).get("labels") or {}
    return all(have.get(k) == v for k, v in (term.split("=", 1) for term in selector.split(",")))


@dataclass
class FakeKube:
    namespaces: set[str] = field(default_factory=set)
    objects: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    """token -> TokenReview status.user"""
    grants: list[Grant] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)
    """(method, path) of every request but the reviews."""
    reviews: list[dict[str, Any]] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    """Path and query of every create and patch."""
    deletes: list[tuple[str, str | None]] = field(default_factory=list)
    """(path, propagationPolicy) of every delete."""
    after_write: list[Hook] = field(default_factory=list)
    """Called after each create or patch with (fake, collection, object as stored): controllers and tamperers."""
    refuse_creates: list[tuple[str, int, str]] = field(default_factory=list)
    """(plural, status, message): the next create of that resource is refused so, once each (a webhook)."""
    logs: dict[tuple[str, str], list[bytes]] = field(default_factory=dict)
    """(namespace, pod) -> chunks; a pod without an entry has a container still waiting."""
    log_delay: float = 0.05
    log_wait: float = 0.0
    """Seconds before a log's answer begins (a kubelet slow to open the stream)."""
    stale: dict[str, int] = field(default_factory=dict)
    """Object path -> how many GETs still answer with an old resourceVersion (someone wrote since)."""
    conflicts: dict[str, int] = field(default_factory=dict)
    """Resource (plural) -> how many of its next PATCHes someone else's write beats (409, nothing stored)."""
    groups: dict[str, list[str]] = field(
        default_factory=lambda: {
            "trainer.kubeflow.org": ["v1alpha1"],
            "jobset.x-k8s.io": ["v1alpha2"],
            "kueue.x-k8s.io": ["v1beta2", "v1beta1"],
        }
    )
    trainjob_spec: tuple[str, ...] = ("runtimeRef", "trainer", "runtimePatches", "activeDeadlineSeconds", "suspend")
    """The TrainJob spec's fields the fake's OpenAPI v3 document serves."""
    dry_runs: list[str] = field(default_factory=list)
    """Path and query of every dry-run patch (judged, never stored)."""
    mutating_policies: bool = True
    """Whether discovery shows MutatingAdmissionPolicy served (v1.36 and later)."""
    numbers_starts: bool = True
    approves_starts: bool = True
    """The unsuspend policy's rule that a Kueue-mode start carries the gate's approval of its A is installed."""
    """dispatch's admission (the chart's MutatingAdmissionPolicy record-start): a TrainJob patch that unsuspends
    gets A raised when due and recorded in the same write (contract/admission.py ``unsuspend_ops``)."""
    refuse_dry_runs: str | None = None
    """A webhook's refusal of every dry-run patch (as Trainer v2.2.0 refuses Open's atomic unsuspend)."""
    _rv: itertools.count = field(default_factory=lambda: itertools.count(1000))

    # -- setup helpers -----------------------------------------------------------------------------

    def user(self, token: str, username: str, groups: tuple[str, ...] = ()) -> None:
        self.users[token] = {"username": username, "uid": f"uid-{username}", "groups": list(groups)}

    def put(self, collection: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` as created (uid, resourceVersion), without hooks."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta["resourceVersion"] = str(next(self._rv))
        meta.setdefault("creationTimestamp", "2026-11-29T10:00:00Z")
        meta.setdefault("generation", 1)
        self.objects.setdefault(collection, {})[meta["name"]] = obj
        return obj

    def get(self, collection: str, name: str) -> dict[str, Any] | None:
        return self.objects.get(collection, {}).get(name)

    def items(self, collection: str) -> list[dict[str, Any]]:
        return list(self.objects.get(collection, {}).values())

    def reads(self) -> list[tuple[str, str]]:
        """Every call on an object (everything but the reviews and discovery)."""
        return list(self.calls)

    # -- the server --------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if path.endswith("/tokenreviews"):
            return await self._token_review(request)
        if path.endswith("/subjectaccessreviews"):
            return await self._access_review(request)
        if path == "/apis":
            return self._discovery()
        if path == "/apis/admissionregistration.k8s.io/v1":
            kinds = ["ValidatingAdmissionPolicy", *(["MutatingAdmissionPolicy"] if self.mutating_policies else [])]
            return web.json_response({"kind": "APIResourceList", "resources": [{"kind": k} for k in kinds]})
        if path.startswith("/openapi/v3"):
            return self._openapi_v3(path)
        self.calls.append((request.method, path))
        if request.headers.get("Authorization") != f"Bearer {AGENT_TOKEN}":
            return status(401, "Unauthorized", "Unauthorized")
        where = parse(path)
        if where is None:
            return status(404, "NotFound", f"no route {path}")
        if where.subresource == "log":
            return await self._log(request, where)
        method = request.method
        if method == "GET" and where.name is None:
            items = [o for o in self.items(where.collection) if matches(o, request.query.get("labelSelector"))]
            return web.json_response({"kind": "List", "metadata": {"resourceVersion": "1"}, "items": items})
        if method == "GET":
            obj = self.get(where.collection, where.name)
            if obj is None:
                return status(404, "NotFound", f'{where.plural} "{where.name}" not found')
            if self.stale.get(path, 0) > 0:
                self.stale[path] -= 1
                obj = copy.deepcopy(obj)
                obj["metadata"]["resourceVersion"] = "1"
            return web.json_response(obj)
        if method in ("POST", "PATCH"):
            self.writes.append(f"{method} {request.path_qs}")
        if method == "POST":
            return await self._create(request, where)
        if method == "PATCH":
            return await self._patch(request, where)
        if method == "DELETE":
            return await self._delete(request, where)
        if method == "PUT":
            self.writes.append(f"{method} {request.path_qs}")
            return await self._replace(request, where)
        return status(405, "MethodNotAllowed", method)

    def _openapi_v3(self, path: str) -> web.Response:
        """The served schemas: only the TrainJob's, with the fields dispatch writes (``trainjob_spec``)."""
        if path == "/openapi/v3":
            url = "/openapi/v3/apis/trainer.kubeflow.org/v1alpha1?hash=F4KE"
            return web.json_response({"paths": {"apis/trainer.kubeflow.org/v1alpha1": {"serverRelativeURL": url}}})
        kind = {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"}
        schema = {
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {f: {} for f in self.trainjob_spec}}},
            "x-kubernetes-group-version-kind": [kind],
        }
        return web.json_response({"components": {"schemas": {"io.kubeflow.trainer.v1alpha1.TrainJob": schema}}})

    def _discovery(self) -> web.Response:
        groups = [
            {
                "name": name,
                "versions": [{"groupVersion": f"{name}/{v}", "version": v} for v in versions],
                "preferredVersion": {"groupVersion": f"{name}/{versions[0]}", "version": versions[0]},
            }
            for name, versions in self.groups.items()
        ]
        return web.json_response({"kind": "APIGroupList", "groups": groups})

    async def _token_review(self, request: web.Request) -> web.Response:
        review = await request.json()
        self.reviews.append(review)
        user = self.users.get(review["spec"]["token"])
        review["status"] = {"authenticated": True, "user": user} if user else {"authenticated": False}
        return web.json_response(review, status=201)

    async def _access_review(self, request: web.Request) -> web.Response:
        review = await request.json()
        self.reviews.append(review)
        spec, attrs = review["spec"], review["spec"]["resourceAttributes"]
        allowed = attrs.get("group") == "dispatch.phpboyscout.uk" and any(
            g.user == spec["user"]
            and g.verb == attrs["verb"]
            and g.resource == attrs["resource"]
            and g.subresource == attrs.get("subresource")
            and (g.namespace is None or g.namespace == attrs.get("namespace"))
            for g in self.grants
        )
        review["status"] = {"allowed": allowed} | ({} if allowed else {"reason": "no RBAC policy matched"})
        return web.json_response(review, status=201)

    def _hooks(self, collection: str, obj: dict[str, Any]) -> None:
        for hook in list(self.after_write):
            hook(self, collection, obj)

    async def _create(self, request: web.Request, where: Parsed) -> web.Response:
        if where.namespace is not None and where.namespace not in self.namespaces:
            return status(404, "NotFound", f'namespaces "{where.namespace}" not found')
        obj = await request.json()
        name = obj["metadata"]["name"]
        refusal = next((r for r in self.refuse_creates if r[0] == where.plural), None)
        if refusal is not None:
            self.refuse_creates.remove(refusal)
            return status(refusal[1], "Forbidden" if refusal[1] == 403 else "Invalid", refusal[2])
        if self.get(where.collection, name) is not None:
            return status(409, "AlreadyExists", f'{where.plural} "{name}" already exists')
        if where.namespace:
            obj["metadata"]["namespace"] = where.namespace
        stored = self.put(where.collection, obj)
        self._hooks(where.collection, stored)
        return web.json_response(self.get(where.collection, name), status=201)

    async def _patch(self, request: web.Request, where: Parsed) -> web.Response:
        if request.content_type != "application/json-patch+json":
            return status(415, "UnsupportedMediaType", request.content_type)
        current = self.get(where.collection, where.name or "")
        if current is None:
            return status(404, "NotFound", f'{where.plural} "{where.name}" not found')
        try:
            patched = apply_patch(current, await request.json())
        except (PatchTestFailed, PatchInvalid) as exc:
            return status(422, "Invalid", f"the server rejected our request due to an error in our request: {exc}")
        beaten = self.conflicts.get(where.plural, 0) > 0
        if beaten:
            self.conflicts[where.plural] -= 1
        if beaten or patched["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            return status(
                409, "Conflict", "the object has been modified; please apply your changes to the latest version"
            )
        if patched["metadata"].get("uid") != current["metadata"]["uid"]:
            return status(422, "Invalid", "metadata.uid: field is immutable")
        if self.numbers_starts and where.plural == "trainjobs" and _unsuspends(current, patched):
            kueue = is_kueue_mode(current) and is_kueue_mode(patched)
            with contextlib.suppress(ContractError):  # the record unreadable: the policy writes nothing
                patched = apply_patch(patched, unsuspend_ops(patched, admission_started(current), kueue=kueue))
            # the unsuspend policy's rule of the gate's approval
            unapproved = approval_problems(current, patched) if self.approves_starts else []
            if unapproved:
                return status(
                    403, "Forbidden", f"ValidatingAdmissionPolicy 'unsuspend' denied request: {unapproved[0]}"
                )
        if request.query.get("dryRun") == "All":
            self.dry_runs.append(request.path_qs)
            if self.refuse_dry_runs is not None:
                return status(
                    403, "Forbidden", f'admission webhook "trainjob" denied the request: {self.refuse_dry_runs}'
                )
            return web.json_response(patched)
        patched["metadata"]["resourceVersion"] = str(next(self._rv))
        if patched.get("spec") != current.get("spec"):
            patched["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        self.objects[where.collection][where.name or ""] = patched
        self._hooks(where.collection, patched)
        return web.json_response(self.get(where.collection, where.name or ""))

    async def _replace(self, request: web.Request, where: Parsed) -> web.Response:
        current = self.get(where.collection, where.name or "")
        if current is None:
            return status(404, "NotFound", f'{where.plural} "{where.name}" not found')
        body = await request.json()
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            return status(
                409, "Conflict", "the object has been modified; please apply your changes to the latest version"
            )
        body["metadata"] = {**body["metadata"], "uid": current["metadata"]["uid"]}
        body["metadata"]["resourceVersion"] = str(next(self._rv))
        self.objects[where.collection][where.name or ""] = body
        self._hooks(where.collection, body)
        return web.json_response(self.get(where.collection, where.name or ""))

    async def _delete(self, request: web.Request, where: Parsed) -> web.Response:
        body = await request.json() if request.can_read_body else {}
        self.deletes.append((request.path, body.get("propagationPolicy")))
        current = self.get(where.collection, where.name or "")
        if current is None:
            return status(404, "NotFound", f'{where.plural} "{where.name}" not found')
        want = (body.get("preconditions") or {}).get("uid")
        if want and want != current["metadata"]["uid"]:
            return status(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {want}, UID in object meta: {current['metadata']['uid']}",
            )
        del self.objects[where.collection][where.name or ""]
        return web.json_response({"kind": "Status", "status": "Success"})

    async def _log(self, request: web.Request, where: Parsed) -> web.StreamResponse:
        key = (where.namespace or "", where.name or "")
        if self.get(where.collection, key[1]) is None:
            return status(404, "NotFound", f'pods "{key[1]}" not found')
        if key not in self.logs:
            return status(400, "BadRequest", f'container "node" in pod "{key[1]}" is waiting to start')
        await asyncio.sleep(self.log_wait)
        response = web.StreamResponse()
        response.content_type = "text/plain"
        response.enable_chunked_encoding()
        await response.prepare(request)
        chunks = self.logs[key]
        follow = request.query.get("follow") == "true"
        try:
            for chunk in chunks if follow else [b"".join(chunks)]:
                await response.write(chunk)
                if not await _pause(request, self.log_delay):
                    return response  # the reader went away (a kubelet ends the stream so)
            await response.write_eof()
        except ConnectionResetError:  # the reader went away mid-write: the stream ends, as a kubelet's would
            pass
        return response

    # -- a client for the agent --------------------------------------------------------------------

    def configuration(self, url: str) -> client.Configuration:
        config = client.Configuration(host=url)
        config.api_key = {"BearerToken": AGENT_TOKEN}
        config.api_key_prefix = {"BearerToken": "Bearer"}
        return config


async def _pause(request: web.Request, seconds: float) -> bool:
    """Sleep ``seconds``, or until the reader's connection closes (False)."""
    end = asyncio.get_running_loop().time() + seconds
    while (left := end - asyncio.get_running_loop().time()) > 0:
        if request.transport is None or request.transport.is_closing():
            return False
        await asyncio.sleep(min(left, 0.1))
    return True


@asynccontextmanager
async def running(fake: FakeKube) -> AsyncIterator[str]:
    """Serve the fake on loopback over plain HTTP; yields its URL."""
    async with serving(fake.app()) as url:
        yield url


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)


def _unsuspends(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return old.get("spec", {}).get("suspend") is True and new.get("spec", {}).get("suspend") is not True
