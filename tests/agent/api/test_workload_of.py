"""Which Workload is a TrainJob's: only one Kueue created for it (a controller ownerReference to the TrainJob),
and never a pick among several that claim it so."""

from __future__ import annotations

import pytest

from agent.api.errors import ApiError, ErrorKind
from agent.api.service.listing import UNKNOWN, list_items
from agent.api.service.targets import SeveralWorkloads, workload_of
from harness.fixtures import trainjob
from tests.agent.domain.test_gate import workload

OWNER = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "name": "dj-01arz3ndektsv4rrffq69g5fav-s3",
    "uid": "tj-uid",
    "controller": True,
}


def claiming(name: str, **ref: object) -> dict:
    wl = workload()
    wl["metadata"]["name"] = name
    wl["metadata"]["labels"] = {"kueue.x-k8s.io/job-uid": "tj-uid"}
    wl["metadata"]["ownerReferences"] = [{**OWNER, **ref}]
    return wl


def test_the_workload_is_the_one_the_trainjob_controls():
    mine = claiming("trainjob-mine")
    assert workload_of([mine], "tj-uid") is mine
    assert workload_of([], "tj-uid") is None
    assert workload_of([claiming("else", uid="another-uid")], "tj-uid") is None


@pytest.mark.parametrize(
    "ref",
    [
        {"controller": False},  # an owner, not the controller
        {"controller": None},
        {"kind": "JobSet"},
        {"apiVersion": "kueue.x-k8s.io/v1beta2"},
        {"apiVersion": "trainer.example.com/v1alpha1"},
    ],
)
def test_a_workload_that_only_refers_to_the_trainjob_is_not_its_own(ref):
    """The job-uid label and an ownerReference carrying the uid are not enough: anyone may write those."""
    stranger = claiming("stranger", **ref)
    if ref.get("controller", True) is None:
        del stranger["metadata"]["ownerReferences"][0]["controller"]
    assert workload_of([stranger], "tj-uid") is None
    mine = claiming("trainjob-mine")
    assert workload_of([stranger, mine], "tj-uid") is mine


def test_several_workloads_claiming_the_trainjob_are_refused_naming_them():
    first, second = claiming("trainjob-a"), claiming("trainjob-b")
    with pytest.raises(SeveralWorkloads) as err:
        workload_of([second, claiming("other", controller=False), first], "tj-uid")
    assert isinstance(err.value, ApiError)
    assert err.value.kind is ErrorKind.CONFLICT
    assert "2 Workloads claim TrainJob team-a/dj-01arz3ndektsv4rrffq69g5fav-s3 (uid tj-uid)" in err.value.message
    assert "trainjob-a, trainjob-b" in err.value.message
    assert "does not pick one" in err.value.message


def test_list_reports_a_trainjob_several_workloads_claim_as_unknown():
    tj = trainjob()
    (item,) = list_items([tj], [claiming("trainjob-a")], ["dispatch-admission"], None)
    assert item.phase == "Gated"
    (item,) = list_items([tj], [claiming("trainjob-a"), claiming("trainjob-b")], ["dispatch-admission"], None)
    assert item.phase == UNKNOWN
    forged = claiming("forged", controller=False)
    (item,) = list_items([tj], [claiming("trainjob-a"), forged], ["dispatch-admission"], None)
    assert item.phase == "Gated"
