"""Guarantee 4 on a MultiKueue manager, decided (agent/multicluster/workers.py): which workers the gate reads before a
dispatch, which it holds on, and the hold's message naming them; the agent's ``workerKubeconfigs``; and the
worker clients' reload of a rotated credential (agent/multicluster/worker_reads.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.config import AgentConfig
from agent.domain.decide import Action, Blocker, hold_message
from agent.multicluster.worker_reads import WorkerClients
from agent.multicluster.workers import WorkerLook, is_remote, plan_workers, unreadable, worker_blockers
from contract.keys import ANNOTATION_FENCED
from contract.multicluster import MULTIKUEUE_CONTROLLER, config_clusters, is_fenced, multikueue_config_of
from tests.agent.domain.test_gate import go
from tests.agent.domain.test_nodeloss import node, pod


def check(name: str = "multikueue", config: str | None = "mk") -> dict[str, Any]:
    spec: dict[str, Any] = {"controllerName": MULTIKUEUE_CONTROLLER}
    if config is not None:
        spec["parameters"] = {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": config}
    return {"metadata": {"name": name}, "spec": spec}


def config(*clusters: str) -> dict[str, Any]:
    return {"metadata": {"name": "mk"}, "spec": {"clusters": list(clusters)}}


def cluster(name: str, fence: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if fence is not None:
        meta["annotations"] = {ANNOTATION_FENCED: fence}
    return {"metadata": meta}


def test_every_worker_of_the_config_is_read_when_the_agent_has_its_credential():
    plan = plan_workers({"multikueue": check()}, {"mk": config("w-2", "w-1")}, [cluster("w-1"), cluster("w-2")],
                        {"w-1", "w-2", "w-3"})  # fmt: skip
    assert plan.read == ("w-1", "w-2")
    assert plan.fenced == ()
    assert plan.blockers == ()


def test_a_worker_with_no_credential_holds_and_is_named():
    plan = plan_workers({"multikueue": check()}, {"mk": config("w-1", "w-2")}, [], {"w-1"})
    assert plan.read == ("w-1",)
    assert plan.blockers == (Blocker("", "the agent has no credential to read it (workerKubeconfigs)", "w-2"),)
    assert "worker w-2: the agent has no credential" in hold_message(plan.blockers)


def test_a_worker_declared_powered_off_is_not_read_and_holds_nothing():
    plan = plan_workers({"multikueue": check()}, {"mk": config("w-1", "w-2")}, [cluster("w-2", "powered-off")],
                        {"w-1", "w-2"}, record=["w-2"])  # fmt: skip
    assert plan.read == ("w-1",)
    assert plan.fenced == ("w-2",)
    assert plan.blockers == ()


def test_a_fenced_worker_is_still_read_and_trusted_unread_only_where_the_record_does_not_list_it():
    clusters = [cluster("w-2", "true")]
    plan = plan_workers({"multikueue": check()}, {"mk": config("w-1", "w-2")}, clusters, {"w-1", "w-2"})
    assert (plan.read, plan.fenced, plan.trusted) == (("w-1", "w-2"), (), frozenset({"w-2"}))
    listed = plan_workers({"multikueue": check()}, {"mk": config("w-1", "w-2")}, clusters, {"w-1", "w-2"},
                          record=["w-2"])  # fmt: skip
    assert (listed.read, listed.trusted) == (("w-1", "w-2"), frozenset())
    # Without a credential for it: trusted where not listed, else it holds, saying what would be trusted.
    bare = plan_workers({"multikueue": check()}, {"mk": config("w-1", "w-2")}, clusters, {"w-1"}, record=["w-2"])
    assert [b.worker for b in bare.blockers] == ["w-2"]
    assert "fenced: powered-off" in bare.blockers[0].why
    assert plan_workers({"multikueue": check()}, {"mk": config("w-1", "w-2")}, clusters, {"w-1"}).blockers == ()


def test_a_worker_the_record_lists_is_read_though_no_config_lists_it_now():
    plan = plan_workers({"multikueue": check()}, {"mk": config("w-1")}, [], {"w-1", "w-3"}, record=["w-3"])
    assert plan.read == ("w-1", "w-3")


@pytest.mark.parametrize("value", ["", "false", "True", "yes"])
def test_only_the_exact_fence_value_fences(value: str):
    assert not is_fenced(cluster("w-1", value))
    plan = plan_workers({"multikueue": check()}, {"mk": config("w-1")}, [cluster("w-1", value)], {"w-1"})
    assert plan.read == ("w-1",)
    assert plan.fenced == ()


def test_a_fence_on_a_worker_outside_the_config_changes_nothing():
    plan = plan_workers({"multikueue": check()}, {"mk": config("w-1")}, [cluster("w-9", "powered-off")], {"w-1"})
    assert (plan.read, plan.fenced) == (("w-1",), ())


@pytest.mark.parametrize(
    ("ac", "configs", "why"),
    [
        (None, {}, "names no MultiKueueConfig"),
        (check(config=None), {}, "names no MultiKueueConfig"),
        (check(), {"mk": None}, "names MultiKueueConfig mk, which cannot be read"),
        (check(), {}, "names MultiKueueConfig mk, which cannot be read"),
    ],
)
def test_workers_that_cannot_be_known_hold(ac: Any, configs: dict[str, Any], why: str):
    plan = plan_workers({"multikueue": ac}, configs, [], {"w-1"})
    assert plan.read == ()
    assert len(plan.blockers) == 1
    assert plan.blockers[0].worker == ""
    assert why in plan.blockers[0].why
    assert is_remote(plan.blockers[0])


def test_the_workers_of_several_checks_are_read_once_each():
    checks = {"a": check("a", "mk-a"), "b": check("b", "mk-b")}
    configs = {"mk-a": config("w-1", "w-2"), "mk-b": config("w-2", "w-3")}
    plan = plan_workers(checks, configs, [], {"w-1", "w-2", "w-3"})
    assert plan.read == ("w-1", "w-2", "w-3")


def test_the_config_and_check_readers_refuse_what_is_not_theirs():
    assert multikueue_config_of({"spec": {"parameters": {"kind": "ProvisioningRequestConfig", "name": "x"}}}) is None
    assert multikueue_config_of(None) is None
    assert config_clusters({"spec": {"clusters": ["w-1", 3, "", None]}}) == ["w-1"]
    assert config_clusters(None) == []


def _controlled(obj: dict[str, Any], api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    ref = {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True}
    obj["metadata"]["ownerReferences"] = [ref]
    return obj


def _job(name: str, jobset: str) -> dict[str, Any]:
    return _controlled({"metadata": {"name": name, "uid": f"uid-{name}"}}, "jobset.x-k8s.io/v1alpha2", "JobSet",
                       jobset, f"uid-{jobset}-on-the-worker")  # fmt: skip


def _pod_of(name: str, job: str, **kwargs: Any) -> dict[str, Any]:
    return _controlled(pod(name, **kwargs), "batch/v1", "Job", job, f"uid-{job}")


def test_a_pod_on_a_worker_that_may_still_run_holds_named_with_its_worker():
    look = WorkerLook([_pod_of("p-0", "dj-x-node-0", node="n1")], {"dj-x-node-0": _job("dj-x-node-0", "dj-x")},
                      {"n1": node("n1")})  # fmt: skip
    blockers = worker_blockers("w-1", "dj-x", look, ())
    assert [(b.pod, b.worker) for b in blockers] == [("p-0", "w-1")]
    message = hold_message(blockers)
    assert message.startswith("waiting for 1 pod(s) of the previous execution that may still run: p-0 on worker w-1: ")


def test_a_pod_whose_job_is_gone_on_a_worker_still_holds():
    look = WorkerLook([_pod_of("p-0", "dj-x-node-0", node="n1")], {}, {"n1": node("n1")})
    assert [b.pod for b in worker_blockers("w-1", "dj-x", look, ())] == ["p-0"]


def test_a_pod_the_chain_proves_someone_else_s_on_a_worker_holds_nothing():
    stray = WorkerLook(
        [_pod_of("p-0", "other-node-0", node="n1"), pod("p-1", node="n1")],
        {"other-node-0": _job("other-node-0", "other")},
        {"n1": node("n1")},
    )
    assert worker_blockers("w-1", "dj-x", stray, ()) == []


def test_a_pod_on_a_worker_that_has_ended_holds_nothing():
    done = _pod_of("p-0", "dj-x-node-0", node="n1", phase="Succeeded", containers=("terminated",))
    look = WorkerLook([done], {"dj-x-node-0": _job("dj-x-node-0", "dj-x")}, {"n1": node("n1")})
    assert worker_blockers("w-1", "dj-x", look, ()) == []


def test_the_hold_message_lists_pods_then_the_workers_it_cannot_see():
    blockers = [Blocker("p-0", "Running: on a Ready node", "w-1"), unreadable("w-2", "HTTP 403 Forbidden")]
    assert hold_message(blockers) == (
        "waiting for 1 pod(s) of the previous execution that may still run: p-0 on worker w-1: Running: on a Ready "
        "node; and waiting to see every worker where the previous execution may still run: worker w-2: cannot be "
        "read: HTTP 403 Forbidden"
    )


def test_one_cluster_s_hold_message_is_unchanged():
    assert hold_message([Blocker("p-0", "why")]) == (
        "waiting for 1 pod(s) of the previous execution that may still run: p-0: why"
    )
    assert not is_remote(Blocker("p-0", "why"))


def test_a_worker_that_cannot_be_read_holds_the_gate():
    d = go(blockers=[unreadable("w-2", "connection refused")])
    assert d.action is Action.HOLD
    assert "worker w-2: cannot be read: connection refused" in d.message


def test_worker_kubeconfigs_are_keyed_by_cluster_name():
    ok = AgentConfig.model_validate({"workerKubeconfigs": {"worker-1": "/etc/dispatch/workers/worker-1/kubeconfig"}})
    assert ok.worker_kubeconfigs == {"worker-1": "/etc/dispatch/workers/worker-1/kubeconfig"}
    with pytest.raises(ValueError, match="'Worker_1' is not a MultiKueueCluster name"):
        AgentConfig.model_validate({"workerKubeconfigs": {"Worker_1": "/x"}})
    with pytest.raises(ValueError, match="worker-1: the kubeconfig path is empty"):
        AgentConfig.model_validate({"workerKubeconfigs": {"worker-1": ""}})


def _kubeconfig(path: Path, server: str) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "w", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "w", "user": "u"}}],
                "current-context": "c",
            }
        )
    )


def test_a_rotated_kubeconfig_gets_a_new_client_and_an_unchanged_one_keeps_its_own(tmp_path: Path):
    path = tmp_path / "kubeconfig"
    _kubeconfig(path, "https://127.0.0.1:6443")

    async def run() -> list[str]:
        clients = WorkerClients({"w-1": path})
        try:
            first = await clients._client("w-1")
            same = await clients._client("w-1")
            _kubeconfig(path, "https://127.0.0.1:7443")
            rotated = await clients._client("w-1")
            assert same is first
            assert rotated is not first
            return [first.configuration.host, rotated.configuration.host]
        finally:
            await clients.close()

    assert asyncio.run(run()) == ["https://127.0.0.1:6443", "https://127.0.0.1:7443"]


def test_a_missing_kubeconfig_fails_the_read_so_the_worker_holds(tmp_path: Path):
    clients = WorkerClients({"w-1": tmp_path / "absent"})
    with pytest.raises(FileNotFoundError, match="absent"):
        asyncio.run(clients.look("w-1", "ns", "dj-x"))
