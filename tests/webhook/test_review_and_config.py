import base64
import json
import re

import pytest

from webhook.config import DEFAULT_DISPATCH_USERNAME, Config, ConfigError, Principals, load_config
from webhook.review import MalformedReview, User, Verdict, parse_review, response


def review(**request_overrides):
    req = {
        "uid": "u-1",
        "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
        "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
        "operation": "CREATE",
        "name": "x",
        "namespace": "ns",
        "userInfo": {"username": "alice", "groups": ["g"]},
        "object": {"metadata": {"name": "x"}},
        "oldObject": None,
    }
    req.update(request_overrides)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def test_parse_review():
    r = parse_review(review(subResource="status", dryRun=True))
    assert (r.uid, r.group, r.kind, r.resource, r.sub_resource, r.operation) == (
        "u-1", "trainer.kubeflow.org", "TrainJob", "trainjobs", "status", "CREATE",
    )  # fmt: skip
    assert r.user == User("alice", ("g",))
    assert r.object == {"metadata": {"name": "x"}}
    assert r.old_object is None
    assert r.dry_run is True
    core = parse_review(review(kind={"group": "", "version": "v1", "kind": "Pod"}, userInfo={}))
    assert core.group == ""
    assert core.user == User("")


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ([], "JSON object"),
        ({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1", "request": {}}, "apiVersion"),
        ({**review(), "request": None}, "request must be an object"),
        (review(kind="TrainJob"), "request.kind and request.resource"),
        (review(userInfo=None), "userInfo must be an object"),
        (review(userInfo={"username": "a", "groups": "g"}), "groups must be a list"),
        (review(operation="PATCH"), "'PATCH' is not one of"),
        (review(operation=None), "operation must be"),
        (review(uid=""), "uid must be"),
        (review(object="x"), "object must be an object or null"),
        (review(kind={"group": "", "kind": "Pod"}), "kind.version"),
    ],
)
def test_malformed_reviews_say_what_is_wrong(body, says):
    with pytest.raises(MalformedReview, match=re.escape(says)):
        parse_review(body)


def test_response_echoes_and_encodes():
    r = parse_review(review())
    allowed = response(r, Verdict.allow(warnings=("careful",), patch=[{"op": "add", "path": "/a", "value": 1}]))
    assert allowed["apiVersion"] == "admission.k8s.io/v1"
    assert allowed["kind"] == "AdmissionReview"
    answer = allowed["response"]
    assert answer["uid"] == "u-1"
    assert answer["allowed"] is True
    assert answer["warnings"] == ["careful"]
    assert answer["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(answer["patch"])) == [{"op": "add", "path": "/a", "value": 1}]
    denied = response(r, Verdict.deny("rule.x", "no"))["response"]
    assert denied == {
        "uid": "u-1",
        "allowed": False,
        "status": {"code": 403, "message": "no", "reason": "Forbidden"},
    }
    assert "patch" not in response(r, Verdict.allow(patch=[]))["response"]
    internal = response(r, Verdict.deny("internal-error", "boom", code=500))["response"]
    assert internal["status"] == {"code": 500, "message": "boom", "reason": "InternalError"}


def test_config_defaults_and_principals():
    config = Config()
    assert config.dispatch.includes(User(DEFAULT_DISPATCH_USERNAME))
    assert not config.dispatch.includes(User("alice"))
    assert Principals(groups=("dispatchers",)).includes(User("bob", ("x", "dispatchers")))
    assert load_config(None) == config


def test_config_file(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("dispatch:\n  usernames: [me]\nallowRankRestart: true\n")
    config = load_config(path)
    assert config.dispatch.usernames == ("me",)
    assert config.allow_rank_restart is True
    assert config.allow_spec_prologue is False
    (tmp_path / "empty.yaml").write_text("")
    assert load_config(tmp_path / "empty.yaml") == Config()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("dispatch:\n  usernamez: [me]\n", "dispatch.usernamez: Extra inputs are not permitted"),
        ("allowRankRestart: maybe\n", "allowRankRestart"),
        ("[1, 2]\n", "(top level)"),
        ("a: [\n", "cannot read config"),
    ],
)
def test_bad_config_names_the_key(tmp_path, text, says):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(says)):
        load_config(path)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.yaml")
