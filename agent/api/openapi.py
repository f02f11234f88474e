"""The OpenAPI 3.1 document, generated from the route table and the pydantic models."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, Final

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from agent.api.errors import STATUS, ErrorKind
from agent.api.models import ErrorResponse
from agent.api.routes import OPENAPI_PATH, ROUTES, Route

REF: Final = "#/components/schemas/{model}"
COMMON_ERRORS: Final = (400, 401, 403, 429, 500, 503)
TITLE: Final = "dispatch-k8s agent API"


def _kinds(code: int) -> list[str]:
    return [k.value for k, status in STATUS.items() if status == code]


def _error_response(code: int, route: Route) -> dict[str, Any]:
    kinds = _kinds(code)
    if code == 503 and not route.may_run:
        kinds = [k for k in kinds if k != ErrorKind.OBSERVE_ONLY.value]
    return {
        "description": " or ".join(kinds) or "error",
        "content": {"application/json": {"schema": {"$ref": REF.format(model=ErrorResponse.__name__)}}},
    }


def _operation(route: Route) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": route.operation,
        "summary": route.summary,
        "description": route.description,
        "x-dispatch-rights": [need.describe() for need in route.needs],
    }
    if route.request is not None:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": REF.format(model=route.request.__name__)}}},
        }
    if route.response is not None:
        ok: dict[str, Any] = {
            "description": "OK",
            "content": {"application/json": {"schema": {"$ref": REF.format(model=route.response.__name__)}}},
        }
    else:
        ok = {
            "description": "the log, as it is written (chunked); the pod's name in X-Dispatch-Pod",
            "headers": {"X-Dispatch-Pod": {"schema": {"type": "string"}}},
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    op["responses"] = {"200": ok} | {
        str(code): _error_response(code, route) for code in sorted({*COMMON_ERRORS, *route.errors})
    }
    return op


def schemas(models: Sequence[type[BaseModel]]) -> dict[str, Any]:
    """Each model's JSON Schema under components/schemas: requests as validated, responses as serialized
    (by alias: what is on the wire)."""
    inputs = {r.request for r in ROUTES if r.request is not None}
    pairs = [(m, "validation" if m in inputs else "serialization") for m in models]
    _, defs = models_json_schema(pairs, ref_template=REF, by_alias=True)
    return defs.get("$defs", {})


def document(version: str = "1") -> dict[str, Any]:
    models: list[type[BaseModel]] = [ErrorResponse]
    for route in ROUTES:
        for model in (route.request, route.response):
            if model is not None and model not in models:
                models.append(model)
    paths: dict[str, Any] = {route.path: {route.method.lower(): _operation(route)} for route in ROUTES}
    paths[OPENAPI_PATH] = {
        "get": {
            "operationId": "openapi",
            "summary": "This document",
            "security": [],
            "responses": {"200": {"description": "OpenAPI 3.1", "content": {"application/json": {"schema": {}}}}},
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": TITLE,
            "version": version,
            "description": "What the supervisor asks of the agent: the adapter's operations on dispatch TrainJobs. "
            "Every call but this document needs a bearer token the API server accepts (TokenReview) and the right "
            "named in x-dispatch-rights on the API group dispatch.phpboyscout.uk (SubjectAccessReview).",
        },
        "paths": paths,
        "components": {
            "schemas": schemas(models),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


def render() -> str:
    """The document as clients/go/openapi.json commits it (what the agent serves, indented)."""
    return json.dumps(document(), indent=2) + "\n"


def main() -> None:
    """``python -m agent.api.openapi > clients/go/openapi.json``: export the document for the Go client."""
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
