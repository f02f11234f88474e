"""The record of A at an unsuspend, in-process: the MutatingAdmissionPolicy on the real API server (no webhook)
writes exactly what dispatch's mutating webhook would, case by case."""

from __future__ import annotations

import copy
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ulid import ULID

from contract.admission import admission_path, raise_admission
from contract.keys import ANNOTATION_ADMISSION_STARTED
from contract.objects import annotations
from contract.trainjob import build_trainjob
from harness.cluster import ControlPlane
from tests.unit.fixtures import runtime, submission
from tests.unit.kubelet import apply_json_patch
from tests.unit.test_webhook_rules import request
from webhook.admission import mutate
from webhook.config import Config
from webhook.policies import record_start_policy

pytestmark = pytest.mark.cluster
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@pytest.fixture
def recorded(control_plane: ControlPlane, namespace: str) -> Iterator[str]:
    """The policy, renamed for this test and bound to its namespace alone; waits until it records."""
    suffix = secrets.token_hex(3)
    docs = record_start_policy("dispatch-system")
    for doc in docs:
        doc["metadata"]["name"] += f"-{suffix}"
    docs[1]["spec"]["policyName"] = docs[0]["metadata"]["name"]
    docs[1]["spec"]["matchResources"] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    }
    for doc in docs:
        control_plane.admin.create(doc)
    deadline = time.monotonic() + 30
    while True:
        tj = _raised(control_plane, namespace)
        stored = _unsuspend(control_plane, tj)
        if ANNOTATION_ADMISSION_STARTED in annotations(stored):
            break
        assert time.monotonic() < deadline, "the MutatingAdmissionPolicy was not in force within 30 s"
        time.sleep(0.2)
    yield namespace
    for doc in reversed(docs):
        control_plane.admin.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])


def _raised(cp: ControlPlane, namespace: str, times: int = 1) -> dict[str, Any]:
    """A dispatch TrainJob as Start creates it (closed), with A raised ``times``."""
    sub = submission(namespace=namespace, job_id=str(ULID()))
    tj = cp.admin.create(build_trainjob(sub, runtime()["spec"]))
    for _ in range(times):
        tj = cp.admin.request("PATCH", cp.admin.object_path(tj), raise_admission(tj).patch, content_type=JSON_PATCH)
    return tj


def _unsuspend(cp: ControlPlane, tj: dict[str, Any]) -> dict[str, Any]:
    """The stored object if ``tj`` were unsuspended now (a dry run: admission runs, nothing is stored)."""
    new = copy.deepcopy(tj)
    new["spec"]["suspend"] = False
    return cp.admin.request("PUT", cp.admin.object_path(tj), new, query={"dryRun": "All"})


def _webhook_would_store(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    verdict = mutate(request("UPDATE", new, old), Config())
    after = apply_json_patch(new, verdict.patch) if verdict.patch else new
    return annotations(after).get(ANNOTATION_ADMISSION_STARTED)


def set_a(value: str) -> Callable[[dict[str, Any]], None]:
    """A change setting A in dispatch's runtime-patch entry to ``value``."""

    def change(tj: dict[str, Any]) -> None:
        *parents, key = admission_path(tj)
        node: Any = tj
        for part in parents:
            node = node[part]
        node[key] = value

    return change


def _annotate(key: str, value: str) -> Callable[[dict[str, Any]], None]:
    return lambda tj: tj["metadata"].setdefault("annotations", {}).update({key: value})


CASES: dict[str, tuple[int, Callable | None, bool]] = {
    # name: (raises before, change in the write, unsuspends)
    "first execution, A 1": (1, None, True),
    "A 3": (3, None, True),
    "already recorded": (2, _annotate(ANNOTATION_ADMISSION_STARTED, "2"), True),
    "a stale record": (2, _annotate(ANNOTATION_ADMISSION_STARTED, "1"), True),
    "A not a count": (1, set_a("01"), True),
    "not an unsuspend": (1, None, False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_policy_records_what_the_webhook_would(control_plane, recorded, case):
    raises, change, unsuspends = CASES[case]
    old = _raised(control_plane, recorded, raises)
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = not unsuspends
    new["metadata"].setdefault("labels", {})["touched"] = "yes"
    if change is not None:
        change(new)
    stored = control_plane.admin.request("PUT", control_plane.admin.object_path(old), new, query={"dryRun": "All"})
    assert annotations(stored).get(ANNOTATION_ADMISSION_STARTED) == _webhook_would_store(old, new), case
    if case == "first execution, A 1":
        assert annotations(stored)[ANNOTATION_ADMISSION_STARTED] == "1"
