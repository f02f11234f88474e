"""The prologue's ConfigMap: its content-addressed name and content, what Start accepts of one already there, and
the owner policy that keeps a name meaning one text (rendered here; enforced on the API server in
tests/webhook/test_owners_on_the_api_server.py)."""

from __future__ import annotations

import copy
import hashlib

import pytest

from agent.domain.start import prologue_configmap_refusal
from contract.prologue import PROLOGUE, PROLOGUE_CONFIGMAP, configmap_differences, prologue_configmap
from webhook import owners
from webhook.config import Config
from webhook.rules.owners import PROLOGUE_CONTENT, owner_policies


def test_the_name_is_the_texts_hash_and_the_content_the_text_immutable():
    assert "dispatch-k8s-prologue-" + hashlib.sha256(PROLOGUE.encode()).hexdigest()[:10] == PROLOGUE_CONFIGMAP
    made = prologue_configmap("team-a")
    assert made["metadata"]["name"] == PROLOGUE_CONFIGMAP
    assert made["metadata"]["namespace"] == "team-a"
    assert made["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "dispatch-k8s"
    assert (made["data"], made["immutable"], "binaryData" in made) == ({"prologue.sh": PROLOGUE}, True, False)
    assert len(PROLOGUE_CONFIGMAP) <= 63  # a DNS label: also usable as a volume's configMap name anywhere


def as_read(configmap: dict) -> dict:
    read = copy.deepcopy(configmap)
    read["metadata"] |= {"uid": "u", "resourceVersion": "1", "labels": {"someone": "relabelled"}}
    return read


def test_start_takes_exactly_its_own_whatever_the_labels():
    assert configmap_differences(as_read(prologue_configmap("team-a"))) == []
    assert prologue_configmap_refusal("team-a", as_read(prologue_configmap("team-a"))) is None


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda cm: cm["data"].update({"prologue.sh": 'exec "$@"\n'}), "data[prologue.sh] is not this version's"),
        (lambda cm: cm["data"].update({"extra": "x"}), "data has keys ['extra', 'prologue.sh']"),
        (lambda cm: cm.pop("data"), "data has keys None"),
        (lambda cm: cm.update({"binaryData": {"x": "eA=="}}), "it has binaryData ['x']"),
        (lambda cm: cm.update({"immutable": False}), "immutable is False, not true"),
        (lambda cm: cm.pop("immutable"), "immutable is None, not true"),
    ],
)
def test_start_refuses_any_other_naming_the_configmap_and_what_differs(change, says):
    read = as_read(prologue_configmap("team-a"))
    change(read)
    refusal = prologue_configmap_refusal("team-a", read)
    assert refusal is not None
    assert refusal.startswith(f"ConfigMap team-a/{PROLOGUE_CONFIGMAP} exists and is not the prologue")
    assert says in refusal
    assert "nothing was written" in refusal


def test_a_configmap_gone_between_the_conflict_and_the_read_is_retried_by_the_caller():
    assert "created and deleted concurrently; retry" in prologue_configmap_refusal("team-a", None)


def test_the_owner_policy_binds_the_name_to_the_text_for_everyone():
    (policy,) = [p for p in owner_policies(Config()) if p["metadata"]["name"] == "dispatch-k8s-owners-configmaps"]
    spec = policy["spec"]
    assert spec["matchConstraints"]["resourceRules"][0]["resources"] == ["configmaps", "configmaps/*"]
    assert 'startsWith("dispatch-k8s-prologue-")' in spec["matchConditions"][0]["expression"]
    (content,) = [v for v in spec["validations"] if v.get("message") == PROLOGUE_CONTENT]
    # not under break-glass: a name means one text whoever creates it
    assert "breakGlass" not in content["expression"]
    assert f'object.metadata.name == "{PROLOGUE_CONFIGMAP}"' in content["expression"]
    assert '{"prologue.sh": ' in content["expression"]
    creators = owners.PROLOGUES.writes
    assert creators == {
        ("CREATE", ""): (owners.DISPATCH, owners.MANAGER_AGENT),
        ("DELETE", ""): (owners.DISPATCH, owners.GARBAGE_COLLECTOR),
    }
    assert (
        "system:serviceaccount:kube-system:namespace-controller" in owners.DEFAULT_USERNAMES[owners.GARBAGE_COLLECTOR]
    )
