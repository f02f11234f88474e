"""The owner fuzz's mutator (tests/webhook/test_owner_fuzz.py) is total: whatever the object's shape and the seed,
it makes a write to try and never fails itself, so a fuzz run fails only on what the cluster answered."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from tests.webhook.test_owner_fuzz import mutate

OBJECT: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "dj-x-s1-node-0-0-abc",
        "namespace": "team-a",
        "resourceVersion": "7",
        "labels": {"a": "b"},
        "annotations": {"c": "d"},
        "finalizers": ["example.com/f"],
        "ownerReferences": [{"kind": "Job", "name": "j", "uid": "u"}],
    },
    "spec": {"containers": [{"name": "node", "env": [{"name": "X", "value": "1"}]}]},
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
}


@pytest.mark.parametrize("shape", ["full", "bare"])
def test_any_seed_gives_a_write_with_its_name_and_a_metadata_mapping(shape: str) -> None:
    obj = OBJECT if shape == "full" else {"metadata": {"name": "n", "namespace": "ns"}, "spec": {}}
    read = copy.deepcopy(obj)
    for seed in range(3000):
        new = mutate(random.Random(seed), obj)
        assert isinstance(new["metadata"], dict), seed
        assert (new["metadata"]["name"], new["metadata"]["namespace"]) == (
            obj["metadata"]["name"],
            obj["metadata"]["namespace"],
        ), seed
    assert obj == read, "the object read is never changed"
