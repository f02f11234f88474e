"""Whose pod is it (agent/domain/pod_owners.py): a label is not ownership (issue 10, item 8)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agent.domain.pod_owners import job_names, known_jobset_uids, sort_pods
from contract.keys import ANNOTATION_JOBSET_UID

NAME = "dj-01arz3ndektsv4rrffq69g5fav-s3"


def trainjob(recorded: str | None = "js-1") -> dict[str, Any]:
    notes = {ANNOTATION_JOBSET_UID: recorded} if recorded else {}
    return {"metadata": {"name": NAME, "namespace": "team-a", "uid": "tj-uid", "annotations": notes}}


def ref(kind: str, name: str, uid: str, api: str, controller: bool = True) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": controller}


def jobset(uid: str = "js-1", owner: str = "tj-uid") -> dict[str, Any]:
    return {
        "metadata": {
            "name": NAME,
            "uid": uid,
            "ownerReferences": [ref("TrainJob", NAME, owner, "trainer.kubeflow.org/v1alpha1")],
        }
    }


def job(name: str = f"{NAME}-node-0", uid: str = "job-1", js_uid: str = "js-1", js_name: str = NAME) -> dict:
    return {
        "metadata": {
            "name": name,
            "uid": uid,
            "ownerReferences": [ref("JobSet", js_name, js_uid, "jobset.x-k8s.io/v1alpha2")],
        }
    }


def pod(name: str, job_name: str | None = f"{NAME}-node-0", job_uid: str = "job-1", **kw: Any) -> dict[str, Any]:
    refs = [] if job_name is None else [ref("Job", job_name, job_uid, kw.get("api", "batch/v1"), kw.get("ctl", True))]
    return {"metadata": {"name": name, "ownerReferences": refs}}


def names(pods) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_a_pod_of_a_job_of_the_recorded_jobset_is_ours():
    s = sort_pods(trainjob(), jobset(), [pod("p")], {f"{NAME}-node-0": job()})
    assert (names(s.ours), s.foreign, s.unproven) == (["p"], (), ())


def test_a_labelled_pod_no_job_controls_is_foreign_and_not_counted():
    bare = pod("fake", job_name=None)
    not_controller = pod("fake2", ctl=False)
    other_kind = pod("fake3", api="batch/v2")
    s = sort_pods(trainjob(), jobset(), [bare, not_controller, other_kind], {f"{NAME}-node-0": job()})
    assert s.ours == ()
    assert [f.pod for f in s.foreign] == ["fake", "fake2", "fake3"]
    assert "no Job controls it" in s.foreign[0].report()


def test_a_pod_whose_job_belongs_to_another_jobset_or_no_jobset_is_foreign():
    jobs = {
        "theirs-node-0": job("theirs-node-0", "job-9", js_uid="js-9", js_name="theirs"),
        "bare": {"metadata": {"name": "bare", "uid": "b"}},
    }
    s = sort_pods(trainjob(), jobset(), [pod("a", "theirs-node-0", "job-9"), pod("b", "bare", "b")], jobs)
    assert s.ours == ()
    assert [f.why for f in s.foreign] == [
        "its Job theirs-node-0 belongs to JobSet theirs",
        "its Job bare is not controlled by a JobSet",
    ]


def test_a_pod_whose_job_is_gone_or_replaced_is_counted_as_unproven():
    """A JobSet deleted in the background leaves pods whose Job is gone: they may still run (safety first)."""
    s = sort_pods(trainjob(), jobset(), [pod("gone"), pod("replaced", job_uid="old")], {})
    assert names(s.ours) == ["gone", "replaced"]
    assert s.unproven == ("gone", "replaced")
    s = sort_pods(trainjob(), jobset(), [pod("replaced", job_uid="old")], {f"{NAME}-node-0": job()})
    assert s.unproven == ("replaced",)


def test_an_earlier_jobset_of_the_same_name_is_counted_not_foreign():
    """JobSet deleted and recreated by Trainer (J reset): the earlier one's pods may still run."""
    s = sort_pods(trainjob("js-2"), jobset("js-2"), [pod("old")], {f"{NAME}-node-0": job(js_uid="js-1")})
    assert (names(s.ours), s.unproven, s.foreign) == (["old"], ("old",), ())


def test_the_jobset_as_read_counts_only_when_the_trainjob_controls_it():
    assert known_jobset_uids(trainjob(None), jobset("js-5")) == {"js-5"}
    assert known_jobset_uids(trainjob(None), jobset("js-5", owner="someone")) == frozenset()
    assert known_jobset_uids(trainjob("js-1"), jobset("js-5")) == {"js-1", "js-5"}
    assert known_jobset_uids(trainjob(None), None) == frozenset()


def test_the_jobs_to_read():
    assert job_names([pod("a"), pod("b"), pod("c", "x"), pod("d", None)]) == [f"{NAME}-node-0", "x"]


junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)


@given(
    pods=st.lists(junk.filter(lambda x: isinstance(x, dict)), max_size=4),
    jobset_=junk,
    jobs=st.dictionaries(st.text(max_size=4), junk.filter(lambda x: isinstance(x, dict)), max_size=3),
)
def test_never_raises_and_loses_no_pod(pods, jobset_, jobs):
    """Every pod is either counted or reported; none silently dropped."""
    s = sort_pods(trainjob(), jobset_, pods, jobs)
    assert len(s.ours) + len(s.foreign) == len(pods)
