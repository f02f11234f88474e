"""The raise and the record of A at an unsuspend, in-process: the MutatingAdmissionPolicy on the real API server (no
webhook) writes exactly what dispatch's mutating webhook would (contract/admission.py ``unsuspend_ops``), case by
case: A in dispatch's runtime-patch entry, the floor and the record."""

from __future__ import annotations

import copy
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ulid import ULID

from contract.admission import admission_path, raise_admission
from contract.keys import ANNOTATION_ADMISSION_FLOOR, ANNOTATION_ADMISSION_STARTED, LABEL_QUEUE_NAME
from contract.objects import annotations, dig
from contract.trainjob import build_trainjob
from harness.cluster import ControlPlane
from harness.fixtures import runtime, submission
from harness.kube_http import ApiError
from tests.harness.kubelet import apply_json_patch
from tests.webhook.test_webhook_rules import request
from webhook.admission import mutate
from webhook.config import Config
from webhook.rules.record_start import record_start_policy

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
        try:
            stored = _unsuspend(control_plane, _raised(control_plane, namespace))
            if ANNOTATION_ADMISSION_STARTED in annotations(stored):
                break
        except ApiError as err:
            # A mutating policy needs the CRD's schema (its type converter), which the API server loads a moment after
            # the CRD is established.
            if err.status != 503:
                raise
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


def _counts(tj: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """A, the floor and the record, as stored (raw: some cases store what is not a count)."""
    return (
        dig(tj, *admission_path(tj)),
        annotations(tj).get(ANNOTATION_ADMISSION_FLOOR),
        annotations(tj).get(ANNOTATION_ADMISSION_STARTED),
    )


def _webhook_would_store(old: dict[str, Any], new: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    verdict = mutate(request("UPDATE", new, old), Config())
    return _counts(apply_json_patch(new, verdict.patch) if verdict.patch else new)


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


def _plain(tj: dict[str, Any]) -> None:
    tj["metadata"]["labels"].pop(LABEL_QUEUE_NAME)


def _drop_a(tj: dict[str, Any]) -> None:
    *parents, key = admission_path(tj)
    node: Any = tj
    for part in parents:
        node = node[part]
    del node[key]


def _no_annotations(tj: dict[str, Any]) -> None:
    tj["metadata"].pop("annotations", None)


def _no_pod(key: str) -> Callable[[dict[str, Any]], None]:
    """A change removing ``key`` (``annotations`` or ``metadata``) from the pod template in dispatch's entry."""
    depth = {"annotations": 2, "metadata": 3}[key]

    def change(tj: dict[str, Any]) -> None:
        node: Any = tj
        for part in admission_path(tj)[:-depth]:
            node = node[part]
        del node[key]

    return change


def _foreign_entry_first(tj: dict[str, Any]) -> None:
    """Another manager's runtime-patch entry before dispatch's, so dispatch's is not the first."""
    tj["spec"]["runtimePatches"].insert(0, {"manager": "example.com/other"})


CASES: dict[
    str, tuple[int, Callable | None, Callable | None, bool, tuple[str | None, str | None, str | None] | None]
] = {
    # name: (raises before, change to the stored object, change in the write, unsuspends, (A, floor, record))
    "first execution, A 0: raised in the write": (0, None, None, True, ("1", "1", "1")),
    "first execution, A 1 (Open raised it)": (1, None, None, True, ("1", "1", "1")),
    "A 3": (3, None, None, True, ("3", "3", "3")),
    "re-admitted, A not raised since": (2, _annotate(ANNOTATION_ADMISSION_STARTED, "2"), None, True, ("3", "3", "3")),
    "already recorded in the write": (2, None, _annotate(ANNOTATION_ADMISSION_STARTED, "2"), True, ("2", "2", "2")),
    "a stale record in the write": (2, None, _annotate(ANNOTATION_ADMISSION_STARTED, "1"), True, ("2", "2", "2")),
    "A below the floor": (2, set_a("1"), None, True, ("3", "3", "3")),
    "floor only: raised from it": (2, _annotate(ANNOTATION_ADMISSION_STARTED, "2"), _drop_a, True, ("3", "3", "3")),
    "A empty": (2, _annotate(ANNOTATION_ADMISSION_STARTED, "2"), set_a(""), True, None),
    "a floor not a count": (1, None, _annotate(ANNOTATION_ADMISSION_FLOOR, "1x"), True, None),
    "A not a count": (1, None, set_a("01"), True, None),
    "a record not a count": (1, _annotate(ANNOTATION_ADMISSION_STARTED, "x"), None, True, None),
    "at the epoch bound": (
        1,
        lambda tj: _annotate(ANNOTATION_ADMISSION_STARTED, "999999")(tj) or set_a("999999")(tj),
        None,
        True,
        None,
    ),
    "not an unsuspend": (1, _annotate(ANNOTATION_ADMISSION_STARTED, "1"), None, False, ("1", "1", "1")),
    "plain mode, not raised since: recorded, not raised": (
        2,
        lambda tj: _annotate(ANNOTATION_ADMISSION_STARTED, "2")(tj) or _plain(tj),
        None,
        True,
        ("2", "2", "2"),
    ),
    "plain mode, the first execution": (1, _plain, None, True, ("1", "1", "1")),
    "plain mode, floor only": (
        2,
        lambda tj: _annotate(ANNOTATION_ADMISSION_STARTED, "2")(tj) or _plain(tj),
        _drop_a,
        True,
        None,
    ),
    # The JSON Patch's edges: a map it adds into may be missing (an add under it would fail the write), and
    # dispatch's entry is found by its index.
    "no annotations on the TrainJob: the record": (1, None, _no_annotations, True, ("1", None, "1")),
    "no annotations on the TrainJob: the raise": (
        1,
        _annotate(ANNOTATION_ADMISSION_STARTED, "1"),
        _no_annotations,
        True,
        ("2", "2", "2"),
    ),
    "annotations null on the TrainJob: the raise": (
        1,
        _annotate(ANNOTATION_ADMISSION_STARTED, "1"),
        lambda tj: tj["metadata"].update(annotations=None),
        True,
        ("2", "2", "2"),
    ),
    "no annotations on the pod template: raised from the floor": (
        2,
        _annotate(ANNOTATION_ADMISSION_STARTED, "2"),
        _no_pod("annotations"),
        True,
        ("3", "3", "3"),
    ),
    "no metadata on the pod template: raised from the floor": (
        2,
        _annotate(ANNOTATION_ADMISSION_STARTED, "2"),
        _no_pod("metadata"),
        True,
        ("3", "3", "3"),
    ),
    "dispatch's entry not the first: raised in it": (
        2,
        _annotate(ANNOTATION_ADMISSION_STARTED, "2"),
        _foreign_entry_first,
        True,
        ("3", "3", "3"),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_policy_writes_what_the_webhook_would(control_plane, recorded, case):
    raises, before, change, unsuspends, expected = CASES[case]
    old = _raised(control_plane, recorded, raises)
    if before is not None:
        stored_old = copy.deepcopy(old)
        before(stored_old)
        old = control_plane.admin.request("PUT", control_plane.admin.object_path(old), stored_old)
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = not unsuspends
    new["metadata"].setdefault("labels", {})["touched"] = "yes"
    if change is not None:
        change(new)
    stored = control_plane.admin.request("PUT", control_plane.admin.object_path(old), new, query={"dryRun": "All"})
    assert _counts(stored) == _webhook_would_store(old, new), case
    if expected is not None:
        assert _counts(stored) == expected, case
    else:  # nothing written: the unsuspend policy refuses it, naming why
        assert _counts(stored) == _counts(new), case
