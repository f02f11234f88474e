"""The JobSet UID record, made when the JobSet is first seen (agent/gate/jobset_record.py), against the real API server:
the controller runs, the test creates the JobSet as Trainer would, and nothing here calls reconcile. So a
readmission later writes nothing to the TrainJob for it."""

from __future__ import annotations

import time

import pytest

from contract.keys import ANNOTATION_ADMISSION_GATED_BY, ANNOTATION_JOBSET_UID, ANNOTATION_OPENED, OPENED_TRUE
from contract.objects import annotations
from tests.agent import kueue_double as kueue
from tests.agent.gate.test_controller import eventually

pytestmark = pytest.mark.cluster
JOBSET = "jobset.x-k8s.io/v1alpha2"


def _jobset(cp, tj, owner) -> dict:
    return cp.admin.create({
        "apiVersion": JOBSET, "kind": "JobSet",
        "metadata": {"name": tj["metadata"]["name"], "namespace": tj["metadata"]["namespace"],
                     "ownerReferences": [kueue.controller_ref(owner)]},
        "spec": {"suspend": True, "replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "node", "image": "x"}]}}}}}]},
    })  # fmt: skip


def _opened(cp, tj) -> dict:
    """As Open leaves it: dispatch's gate gone, the opened mark (tier A installs no policy that would refuse the
    admin)."""
    body = {"metadata": {"annotations": {ANNOTATION_ADMISSION_GATED_BY: None, ANNOTATION_OPENED: OPENED_TRUE}}}
    return cp.admin.request("PATCH", cp.admin.object_path(tj), body, content_type="application/merge-patch+json")


def _touch(cp, jobset, value: str) -> None:
    cp.admin.request("PATCH", cp.admin.object_path(jobset), {"metadata": {"labels": {"touched": value}}},
                     content_type="application/merge-patch+json")  # fmt: skip


def test_the_jobset_uid_is_recorded_once_the_job_is_opened_and_only_once(control_plane, namespace, agent):
    """Before Open the record is left to the write due anyway (Open's, or the gate's approval): the recorder adds
    no TrainJob write to a first start and does not race Open. Once opened, a JobSet event records it, once."""
    cp = control_plane
    kueue.create_admission_check(cp)  # the controller's readiness waits for a listed AdmissionCheck watch
    tj = kueue.create_dispatch_trainjob(cp, namespace, closed=True)
    jobset = _jobset(cp, tj, tj)
    time.sleep(3)
    assert ANNOTATION_JOBSET_UID not in annotations(kueue.get_trainjob(cp, tj))
    assert agent.call(lambda c: c.recorder.recorded) == 0
    _opened(cp, tj)
    touches = iter(range(1000))

    def recorded() -> bool:
        _touch(cp, jobset, str(next(touches)))  # a JobSet event, as Trainer's applies make
        return annotations(kueue.get_trainjob(cp, tj)).get(ANNOTATION_JOBSET_UID) == jobset["metadata"]["uid"]

    eventually(recorded, what="the JobSet UID to be recorded")
    recorded_tj = kueue.get_trainjob(cp, tj)
    # Further JobSet events (a status, a label) write nothing more: the record is made once.
    _touch(cp, jobset, "again")
    time.sleep(2)
    assert kueue.get_trainjob(cp, tj)["metadata"]["resourceVersion"] == recorded_tj["metadata"]["resourceVersion"]
    assert agent.call(lambda c: c.recorder.recorded) == 1


def test_a_jobset_that_is_not_the_trainjobs_own_is_not_recorded(control_plane, namespace, agent):
    cp = control_plane
    kueue.create_admission_check(cp)
    tj = kueue.create_dispatch_trainjob(cp, namespace)
    stranger = kueue.create_plain_trainjob(cp, namespace)
    _jobset(cp, tj, stranger)  # the TrainJob's name, another owner: an orphan of an earlier TrainJob, say
    time.sleep(3)
    assert ANNOTATION_JOBSET_UID not in annotations(kueue.get_trainjob(cp, tj))
    assert agent.call(lambda c: c.recorder.recorded) == 0
