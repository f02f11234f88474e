"""AdmissionReview v1 in and out: decode to a plain Request, answer with a Verdict.

Decode, decide, respond (controller-runtime's webhook shape): the server decodes with ``parse_review``,
``webhook.admission`` decides, and ``response`` builds the answer that echoes the request's uid,
apiVersion and kind.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from webhook.runtime_facts import RuntimeFacts

REVIEW_KIND: Final = "AdmissionReview"
REVIEW_API_VERSIONS: Final = ("admission.k8s.io/v1",)
OPERATIONS: Final = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class MalformedReview(ValueError):
    """The body is not an AdmissionReview v1 request; the server answers 400."""


@dataclass(frozen=True)
class User:
    username: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Request:
    """The parts of an AdmissionReview request the rules read."""

    uid: str
    api_version: str
    group: str
    version: str
    kind: str
    resource: str
    sub_resource: str
    operation: str
    name: str
    namespace: str
    user: User
    object: Mapping[str, Any] | None
    old_object: Mapping[str, Any] | None
    dry_run: bool = False


@dataclass(frozen=True)
class Verdict:
    """An answer. ``rule`` names the rule that decided (``"allow"`` when none objected), for metrics."""

    allowed: bool
    rule: str = "allow"
    message: str = ""
    warnings: tuple[str, ...] = ()
    patch: list[dict[str, Any]] | None = None
    code: int = 200

    @classmethod
    def allow(cls, *, warnings: tuple[str, ...] = (), patch: list[dict[str, Any]] | None = None) -> Verdict:
        return cls(True, warnings=warnings, patch=patch or None)

    @classmethod
    def deny(cls, rule: str, message: str, *, code: int = 403) -> Verdict:
        return cls(False, rule=rule, message=message, code=code)


def _str(value: object, field_name: str, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise MalformedReview(f"request.{field_name} must be a non-empty string")
    return value


def _obj(value: object, field_name: str) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise MalformedReview(f"request.{field_name} must be an object or null")
    return value


def parse_review(body: object) -> Request:
    """The Request inside an AdmissionReview v1 body, or MalformedReview saying what is wrong."""
    if not isinstance(body, Mapping):
        raise MalformedReview("the body must be a JSON object")
    api_version = body.get("apiVersion")
    if body.get("kind") != REVIEW_KIND or api_version not in REVIEW_API_VERSIONS:
        raise MalformedReview(f"expected kind {REVIEW_KIND} and apiVersion admission.k8s.io/v1")
    req = body.get("request")
    if not isinstance(req, Mapping):
        raise MalformedReview("request must be an object")
    kind, resource = req.get("kind"), req.get("resource")
    if not isinstance(kind, Mapping) or not isinstance(resource, Mapping):
        raise MalformedReview("request.kind and request.resource must be objects")
    user = req.get("userInfo")
    if not isinstance(user, Mapping):
        raise MalformedReview("request.userInfo must be an object")
    groups = user.get("groups") or []
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise MalformedReview("request.userInfo.groups must be a list of strings")
    operation = _str(req.get("operation"), "operation")
    if operation not in OPERATIONS:
        raise MalformedReview(f"request.operation {operation!r} is not one of {', '.join(OPERATIONS)}")
    dry_run = req.get("dryRun", False)
    return Request(
        uid=_str(req.get("uid"), "uid"),
        api_version=api_version,
        group=_str(kind.get("group"), "kind.group", required=False),
        version=_str(kind.get("version"), "kind.version"),
        kind=_str(kind.get("kind"), "kind.kind"),
        resource=_str(resource.get("resource"), "resource.resource"),
        sub_resource=_str(req.get("subResource"), "subResource", required=False),
        operation=operation,
        name=_str(req.get("name"), "name", required=False),
        namespace=_str(req.get("namespace"), "namespace", required=False),
        user=User(_str(user.get("username"), "userInfo.username", required=False), tuple(groups)),
        object=_obj(req.get("object"), "object"),
        old_object=_obj(req.get("oldObject"), "oldObject"),
        dry_run=dry_run is True,
    )


def response(request: Request, verdict: Verdict) -> dict[str, Any]:
    """The AdmissionReview answer, echoing the request's uid, apiVersion and kind."""
    answer: dict[str, Any] = {"uid": request.uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        reason = "InternalError" if verdict.code >= 500 else "Forbidden"
        answer["status"] = {"code": verdict.code, "message": verdict.message, "reason": reason}
    if verdict.warnings:
        answer["warnings"] = list(verdict.warnings)
    if verdict.patch:
        answer["patchType"] = "JSONPatch"
        answer["patch"] = base64.b64encode(json.dumps(verdict.patch, separators=(",", ":")).encode()).decode()
    return {"apiVersion": request.api_version, "kind": REVIEW_KIND, "response": answer}


@dataclass
class Lookups:
    """The one lookup a rule may need, supplied by the shell: the runtime copy a TrainJob refers to.

    ``runtimes`` maps (namespace, name) to the TrainingRuntime as read, or to its facts (what the webhook
    keeps of it, webhook/runtime_facts.py), or None when it does not exist. The server fills it before
    deciding so that the rules stay pure.
    """

    runtimes: dict[tuple[str, str], Mapping[str, Any] | RuntimeFacts | None] = field(default_factory=dict)
