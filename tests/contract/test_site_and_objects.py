import pytest

from contract.errors import ContractError
from contract.objects import add_op, annotations, dig, labels, parse_rfc3339, pointer
from contract.site import check_site_keys, reserved_prefix


@pytest.mark.parametrize(
    "key", ["dispatch.phpboyscout.uk/x", "kueue.x-k8s.io/x", "trainer.kubeflow.org/x", "jobset.sigs.k8s.io/x"]
)
def test_reserved_prefixes_refused(key):
    assert reserved_prefix(key)
    with pytest.raises(ContractError, match="is reserved") as err:
        check_site_keys("labels", {key: "v"})
    assert err.value.field == f"site labels.{key}"


def test_site_keys_allowed_and_malformed():
    check_site_keys("annotations", {"example.com/team": "a", "cost-centre": "42", "sub.kueue.x-k8s.io/x": "y"})
    assert reserved_prefix("example.com/x") is None
    with pytest.raises(ContractError, match="non-empty"):
        check_site_keys("labels", {"": "v"})
    with pytest.raises(ContractError, match="must be a string"):
        check_site_keys("labels", {"a": 1})


def test_dig_never_raises():
    obj = {"a": [{"b": 1}], "s": "x"}
    assert dig(obj, "a", 0, "b") == 1
    assert dig(obj, "a", -1, "b") == 1
    assert dig(obj, "a", 1, "b") is None
    assert dig(obj, "s", "b") is None
    assert dig(obj, "a", "b") is None
    assert dig(None, "a") is None
    assert labels({"metadata": {"labels": None}}) == {}
    assert annotations({"metadata": {"annotations": {"k": "v"}}}) == {"k": "v"}


def test_pointer_escapes_keys():
    assert pointer("metadata", "annotations", "a/b~c") == "/metadata/annotations/a~1b~0c"
    assert pointer("spec", "list", 3) == "/spec/list/3"


def test_add_op_creates_missing_parents_once():
    assert add_op({"metadata": {}}, ("metadata", "annotations", "k"), "v") == {
        "op": "add",
        "path": "/metadata/annotations",
        "value": {"k": "v"},
    }
    assert add_op({"m": {"a": {}}}, ("m", "a", "k"), "v") == {"op": "add", "path": "/m/a/k", "value": "v"}
    assert add_op({"l": [{"x": {}}]}, ("l", 0, "x", "y", "z"), 1) == {
        "op": "add",
        "path": "/l/0/x/y",
        "value": {"z": 1},
    }


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("2026-12-01T10:00:00Z", 1796119200), ("2026-12-01t11:00:00+01:00", 1796119200)],
)
def test_rfc3339_with_an_offset_is_a_moment(text, seconds):
    assert parse_rfc3339(text).timestamp() == seconds


@pytest.mark.parametrize("text", ["2026-12-01", "2026-12-01T10:00:00", "yesterday", "", None, 17])
def test_anything_else_is_not(text):
    """A date alone or a naive time would compare against this machine's local time: refused."""
    assert parse_rfc3339(text) is None
