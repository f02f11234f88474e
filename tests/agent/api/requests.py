"""Requests for the API tests."""

from __future__ import annotations

from typing import Any

from ulid import ULID

from agent.api.models import StartRequest

JOB_ID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def start_body(namespace: str, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "jobId": JOB_ID,
        "n": 3,
        "g": 1,
        "attempt": 2,
        "namespace": namespace,
        "runtime": {"name": "torch-distributed"},
        "image": "registry.example/train:1",
        "command": ["python", "train.py"],
        "args": ["--epochs", "3"],
        "env": {"LR": "0.1"},
    }
    body.update(overrides)
    return body


def start_request(namespace: str, **overrides: Any) -> StartRequest:
    return StartRequest.model_validate(start_body(namespace, **overrides))


def fresh_job_id() -> str:
    return str(ULID())
