import pytest
from pydantic import ValidationError

from agent.api.errors import ApiError, ErrorKind
from agent.api.models import ObjectRef, StartRequest, StatusResponse
from agent.domain.status import status
from contract.trainjob import build_trainjob
from harness.fixtures import JOB_ID, runtime, trainjob

REQUEST = {
    "jobId": JOB_ID,
    "n": 3,
    "g": 1,
    "attempt": 2,
    "namespace": "team-a",
    "runtime": {"name": "torch-distributed"},
    "image": "registry.example/train:1",
    "command": ["python", "train.py"],
    "args": ["--epochs", "3"],
    "env": {"LR": "0.1"},
    "workDir": "/workspace",
    "credentials": [{"secret": "s3-creds", "mountPath": "/var/run/creds"}],
    "publish": {"via": "initContainer", "initContainer": "fetch-publish"},
    "kueue": {"localQueue": "team-a-queue", "priorityClass": "high"},
}


def test_a_start_request_becomes_the_contracts_trainjob():
    tj = build_trainjob(StartRequest.model_validate(REQUEST).submission({"site": "x"}, {}), runtime()["spec"])
    assert tj["metadata"]["name"] == "dj-01arz3ndektsv4rrffq69g5fav-s3"
    assert tj["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "high"
    assert tj["metadata"]["labels"]["site"] == "x"
    assert tj["spec"]["trainer"]["args"] == ["python", "train.py", "--epochs", "3"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"n": 1_000_000}, "n"),
        ({"command": []}, "command"),
        ({"surprise": 1}, "surprise"),
        ({"namespace": "Team_A"}, "namespace"),
    ],
)
def test_invalid_requests_name_the_field(change, field):
    with pytest.raises(ValidationError) as err:
        StartRequest.model_validate({**REQUEST, **change})
    assert err.value.errors()[0]["loc"][0] == field


def test_status_response_and_errors():
    s = status(trainjob=trainjob(), workload=None, jobset=None, pods=[], nodes={}, runtime_copy=None, checks=[])
    body = StatusResponse.of(ObjectRef(namespace="team-a", name="x", uid="u"), s).model_dump(by_alias=True)
    assert body["phase"] == "Gated"
    assert body["heldBy"] == []
    err = ApiError(ErrorKind.INVALID, "bad", field="n")
    assert (err.status, err.body()) == (400, {"error": "invalid", "message": "bad", "field": "n"})
    assert ApiError(ErrorKind.OBSERVE_ONLY, "no gate").status == 503
