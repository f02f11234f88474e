"""The runtime copy on the workers of a MultiKueue manager, decided (agent/multicluster/replicas.py): the replica made from the
manager's copy, what holds a dispatch in the replica found on a worker, the hold's message, and which replicas the
sweep deletes."""

from __future__ import annotations

import copy
from typing import Any

from agent.domain.decide import Blocker, hold_message
from agent.multicluster.replicas import replica, replica_blocker, stale_replicas, unprepared
from agent.multicluster.workers import is_remote
from contract.keys import LABEL_JOB_ID, LABEL_REPLICA_OF, LABEL_SUBMISSION

NAME = "dj-01hzy0000000000000000000ab-s1"
UID = "5f0c1e8a-0000-4000-8000-000000000001"


def manager_copy() -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {
            "name": NAME,
            "namespace": "team",
            "uid": "copy-uid",
            "resourceVersion": "42",
            "generation": 1,
            "creationTimestamp": "2026-12-04T00:00:00Z",
            "labels": {LABEL_JOB_ID: "01hzy0000000000000000000ab", LABEL_SUBMISSION: "1"},
            "annotations": {"dispatch.phpboyscout.uk/runtime-source": "ClusterTrainingRuntime/torch@7"},
            "ownerReferences": [{"kind": "TrainJob", "name": NAME, "uid": UID, "controller": True}],
            "finalizers": ["trainer.kubeflow.org/resource-in-use"],
            "managedFields": [{"manager": "dispatch.phpboyscout.uk/adapter"}],
        },
        "spec": {"template": {"spec": {"failurePolicy": {"maxRestarts": 2}, "replicatedJobs": [{"name": "node"}]}}},
    }


def test_a_replica_carries_the_copy_s_name_keys_and_spec_and_none_of_its_identity_on_the_manager():
    source = manager_copy()
    r = replica(source, UID)
    assert r["apiVersion"] == source["apiVersion"]
    assert r["kind"] == "TrainingRuntime"
    assert r["metadata"] == {
        "name": NAME,
        "namespace": "team",
        "labels": {**source["metadata"]["labels"], LABEL_REPLICA_OF: UID},
        "annotations": source["metadata"]["annotations"],
    }
    assert r["spec"] == source["spec"]
    r["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] = 9  # a deep copy: the source is untouched
    assert source["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] == 2


def found(**changes: Any) -> dict[str, Any]:
    """The replica as a worker's API returns it, with ``changes`` to its metadata or spec."""
    have = copy.deepcopy(replica(manager_copy(), UID))
    have["metadata"] |= {"uid": "replica-uid", "resourceVersion": "7"}
    for key, value in changes.items():
        (have if key == "spec" else have["metadata"])[key] = value
    return have


def test_no_replica_holds_nothing_it_is_created_and_the_same_replica_holds_nothing():
    want = replica(manager_copy(), UID)
    assert replica_blocker("w-1", want, None) is None
    assert replica_blocker("w-1", want, found()) is None


def test_a_replica_of_another_trainjob_of_the_name_holds_until_the_sweep_deletes_it():
    want = replica(manager_copy(), UID)
    b = replica_blocker("w-1", want, found(labels={**want["metadata"]["labels"], LABEL_REPLICA_OF: "earlier"}))
    assert b is not None
    assert b.worker == "w-1"
    assert b.unprepared
    assert "is not the replica of this job's runtime copy" in b.why
    assert "'earlier'" in b.why


def test_a_runtime_of_the_name_made_by_someone_else_holds():
    want = replica(manager_copy(), UID)
    b = replica_blocker("w-1", want, found(labels={}))
    assert b is not None
    assert "None" in b.why


def test_a_replica_whose_spec_differs_holds_naming_the_fix():
    want = replica(manager_copy(), UID)
    b = replica_blocker("w-1", want, found(spec={"template": {"spec": {}}}))
    assert b is not None
    assert "differs from the job's runtime copy: delete it, or fence the worker" in b.why


def test_a_replica_being_deleted_holds_until_it_is_gone():
    want = replica(manager_copy(), UID)
    b = replica_blocker("w-1", want, found(deletionTimestamp="2026-12-04T00:00:00Z"))
    assert b is not None
    assert "is being deleted there" in b.why


def test_the_hold_names_the_unprepared_worker_apart_from_those_that_cannot_be_seen():
    blockers = [
        Blocker("", "cannot be read: connection refused", "w-2"),
        unprepared("w-1", "TrainingRuntime team/x there differs"),
    ]
    message = hold_message(blockers)
    assert message == (
        "waiting to see every worker where the previous execution may still run: worker w-2: cannot be read: "
        "connection refused; and waiting for the workers to be ready to run the job: worker w-1: TrainingRuntime "
        "team/x there differs"
    )
    assert all(is_remote(b) for b in blockers)  # nothing here watches the workers: looked at again after a backoff


def test_the_sweep_deletes_only_replicas_whose_trainjob_is_gone_or_another():
    mine = found()
    other_ns = found(namespace="other")
    going = found(name="dj-01hzy0000000000000000000ac-s1", deletionTimestamp="2026-12-04T00:00:00Z")
    replaced = found(name="dj-01hzy0000000000000000000ad-s1")
    trainjobs = {
        ("team", NAME): {"metadata": {"uid": UID}},
        ("other", NAME): None,  # deleted
        ("team", "dj-01hzy0000000000000000000ad-s1"): {"metadata": {"uid": "a-new-trainjob-of-the-name"}},
    }
    assert stale_replicas([mine, other_ns, going, replaced], trainjobs) == [other_ns, replaced]
