"""Property tests over HTTPS: whatever arrives, the server answers, and the answer is well formed.

The oracle is the decoder itself: a body that ``parse_review`` accepts must get an AdmissionReview that
echoes its uid, apiVersion and kind, and was decided by the rules (never an internal error or a failed
lookup); a body it refuses must get a 400 carrying exactly its message. The server runs in a thread with
its own event loop so hypothesis can drive it from plain synchronous tests.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from contract import keys
from harness.fixtures import runtime_copy, trainjob
from tests.webhook.conftest import DISPATCH, HOST, Pki, ServerThread
from webhook.config import DEFAULT_KUEUE_USERNAME
from webhook.review import OPERATIONS, MalformedReview, parse_review

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip

WORKLOAD = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Workload",
    "metadata": {
        "name": "trainjob-dj-01arz3ndektsv4rrffq69g5fav-s3-1a2b3",
        "namespace": "team-a",
        "labels": {keys.LABEL_JOB_ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV"},
        "annotations": {keys.ANNOTATION_ADMISSION_GATED_BY: keys.GATE},
    },
    "spec": {"queueName": "team-a-queue", "active": True, "podSets": [{"name": "node", "count": 3}]},
}
OBJECTS = [trainjob(), trainjob(queue=None), runtime_copy(), WORKLOAD]
TARGETS = [
    ("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs"),
    ("trainer.kubeflow.org", "v1alpha1", "TrainingRuntime", "trainingruntimes"),
    ("kueue.x-k8s.io", "v1beta2", "Workload", "workloads"),
    ("", "v1", "Pod", "pods"),
]
USERS = [
    DISPATCH,
    DEFAULT_KUEUE_USERNAME,
    "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager",
    "system:serviceaccount:kube-system:generic-garbage-collector",
    "alice@example.com",
    "",
]
GROUPS = ["system:authenticated", "system:serviceaccounts", "system:masters", "dispatch-admins"]
INTERESTING_KEYS = [
    keys.LABEL_JOB_ID, keys.LABEL_SUBMISSION, keys.ANNOTATION_COMMENT, keys.ANNOTATION_ADMISSION,
    keys.ANNOTATION_ADMISSION_FLOOR, keys.ANNOTATION_JOBSET_UID, keys.ANNOTATION_ADMISSION_GATED_BY,
    keys.LABEL_QUEUE_NAME, keys.ANNOTATION_OPENED, "suspend", "runtimePatches", "runtimeRef", "manager",
    "labels", "annotations", "name", "namespace", "restartPolicy", "backoffLimit", "backoffLimitPerIndex",
    "podFailurePolicy", "failurePolicy", "generation", "env", "command",
]  # fmt: skip
INTERESTING_VALUES = st.sampled_from(
    [keys.GATE, f"{keys.GATE},other/gate", "0", "1", "-1", "999", "true", "false", "Never", "OnFailure",
     keys.RUNTIME_PATCH_MANAGER, keys.KUEUE_RUNTIME_PATCH_MANAGER, "DISPATCH_EPOCH", None, True, False, 0]
)  # fmt: skip


@st.composite
def edited(draw: st.DrawFn, base: Any) -> Any:
    """``base`` with a few random edits anywhere in it: keys set to odd values or removed."""
    obj = copy.deepcopy(base)
    for _ in range(draw(st.integers(0, 4))):
        node = obj
        while isinstance(node, dict) and node and draw(st.booleans()):
            child = node[draw(st.sampled_from(sorted(node)))]
            if isinstance(child, list) and child:
                child = child[draw(st.integers(0, len(child) - 1))]
            if not isinstance(child, dict):
                break
            node = child
        if not isinstance(node, dict):
            continue
        if node and draw(st.booleans()):
            del node[draw(st.sampled_from(sorted(node)))]
        else:
            key = draw(st.sampled_from(INTERESTING_KEYS) | st.text(max_size=12))
            node[key] = draw(INTERESTING_VALUES | json_values)
    return obj


objects = st.none() | st.sampled_from(OBJECTS).flatmap(edited) | st.dictionaries(st.text(max_size=8), json_values)


@st.composite
def reviews(draw: st.DrawFn) -> Any:
    """AdmissionReview-shaped bodies: mostly well formed, with any field possibly missing or odd."""
    group, version, kind, resource = draw(st.sampled_from(TARGETS))

    def maybe(odd: st.SearchStrategy[Any], usual: Any) -> Any:  # one field in sixteen is odd
        return draw(odd) if draw(st.integers(0, 15)) == 0 else usual

    request = {
        "uid": maybe(st.text(max_size=36) | json_values, "e911857d-c318-11e8-bbad-025000000001"),
        "kind": maybe(json_values, {"group": group, "version": version, "kind": kind}),
        "resource": maybe(json_values, {"group": group, "version": version, "resource": resource}),
        "subResource": draw(st.sampled_from([None, "status", "scale"])),
        "name": maybe(json_values, draw(st.sampled_from(["", "dj-01arz3ndektsv4rrffq69g5fav-s3", "x"]))),
        "namespace": maybe(json_values, "team-a"),
        "operation": maybe(st.text(max_size=8) | json_values, draw(st.sampled_from(OPERATIONS))),
        "userInfo": maybe(
            json_values,
            {
                "username": maybe(json_values, draw(st.sampled_from(USERS))),
                "groups": maybe(json_values, draw(st.lists(st.sampled_from(GROUPS), max_size=3))),
            },
        ),
        "object": draw(objects),
        "oldObject": draw(objects),
        "dryRun": draw(st.sampled_from([None, True, False])),
    }
    if draw(st.integers(0, 3)) == 0:
        for field in draw(st.sets(st.sampled_from(sorted(request)), min_size=1, max_size=2)):
            del request[field]
    body: dict[str, Any] = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    if draw(st.integers(0, 9)) == 0:
        body[draw(st.sampled_from(sorted(body)))] = draw(json_values)
    return body


def _post(port: int, pki: Pki, path: str, body: bytes) -> tuple[int, str]:
    connection = http.client.HTTPSConnection(HOST, port, context=pki.client_context(), timeout=30)
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        connection.close()


def _check(status: int, text: str, body: bytes) -> None:
    """The answer a body must get, decided by the decoder the server uses."""
    event(f"HTTP {status}")
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        assert status == 400
        assert text.startswith(("malformed JSON", "empty body"))
        return
    try:
        request = parse_review(document)
    except MalformedReview as exc:
        refusal = str(exc)
    else:
        refusal = None
    if refusal is not None:
        assert (status, text) == (400, refusal)
        return
    assert status == 200, text
    answer = json.loads(text)
    assert (answer["apiVersion"], answer["kind"]) == (request.api_version, "AdmissionReview")
    response = answer["response"]
    assert response["uid"] == request.uid
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert isinstance(response["status"]["code"], int)
        message = response["status"]["message"]
        assert isinstance(message, str)
        assert message
        assert "failed internally" not in message, message
        assert "cannot check this request" not in message, message
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        assert isinstance(json.loads(base64.b64decode(response["patch"])), list)
    assert all(isinstance(w, str) for w in response.get("warnings", []))


@FUZZ
@given(body=st.binary(max_size=300))
def test_random_bytes(server_thread: tuple[ServerThread, Pki], body: bytes):
    running, pki = server_thread
    status, text = _post(running.port, pki, "/validate", body)
    _check(status, text, body)


@FUZZ
@given(document=json_values, path=st.sampled_from(["/validate", "/mutate"]))
def test_random_json(server_thread: tuple[ServerThread, Pki], document: Any, path: str):
    running, pki = server_thread
    body = json.dumps(document).encode()
    _check(*_post(running.port, pki, path, body), body)


@settings(FUZZ, max_examples=300)
@given(document=reviews(), path=st.sampled_from(["/validate", "/mutate"]))
def test_random_admission_reviews(server_thread: tuple[ServerThread, Pki], document: Any, path: str):
    running, pki = server_thread
    body = json.dumps(document).encode()
    _check(*_post(running.port, pki, path, body), body)
