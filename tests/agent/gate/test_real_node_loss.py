"""Losing a real node (tier C): its kubelet stops, its containers keep running, exactly the case the
readmission gate exists for. The gate holds the readmission, naming the pod, for as long as nothing says the
node is down; the operator's out-of-service taint releases it, and the old container is really gone (the
machine was powered off) before the new execution's pods exist.

The node is the test's own (started here, stopped at the end), so the session's real node stays healthy.
"""

from __future__ import annotations

import calendar
import secrets
import time
from typing import Any

import pytest

from agent.domain.operations import Hold, plan_hold, plan_release
from contract.keys import LABEL_JOBSET_NAME, TAINT_OUT_OF_SERVICE, TAINT_UNREACHABLE
from harness.binaries import locate_node
from harness.pytest_plugin import TierC
from harness.real_node import start_real_node
from tests.agent.gate import kit
from tests.agent.gate.kit import TRAINER_V, eventually
from tests.agent.gate.test_readmission_gate import (
    JSON_PATCH,
    RAISED,
    Gate,
    admitted_workload,
    open_trainjob,
    patch_workload,
)
from tests.prologue.test_prologue_on_a_kubelet import JOB_CPU, create, real_runtime, submission

pytestmark = [pytest.mark.e2e, pytest.mark.node]


def test_a_container_on_a_node_whose_kubelet_died_holds_the_gate_until_out_of_service(
    tier_c: TierC, gate: Gate, ns: str
) -> None:
    admin, cp = gate.admin, gate.tier_b.control_plane
    node = start_real_node(cp, f"real-lost-{secrets.token_hex(3)}", locate_node().require())
    runtime_name = f"dispatch-real-lost-{secrets.token_hex(3)}"
    recorders: list[kit.Recorder] = []
    try:
        runtime = real_runtime(tier_c, runtime_name, cpu=JOB_CPU, max_restarts=0)
        pod_spec = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        pod_spec["nodeSelector"] = {"kubernetes.io/hostname": node.name}
        admin.create(runtime)
        runtime = admin.get(TRAINER_V, "ClusterTrainingRuntime", runtime_name)
        sub = submission(ns, node.artifacts.base_image, gate.low)
        tj = create(gate, sub, runtime)
        name = tj["metadata"]["name"]
        pods = kit.Recorder(admin, admin.collection_path("v1", "Pod", ns), label_selector=f"{LABEL_JOBSET_NAME}={name}")
        trainjobs = kit.Recorder(admin, admin.collection_path(TRAINER_V, "TrainJob", ns))
        recorders += [pods, trainjobs]
        open_trainjob(gate, tj)
        admitted_workload(gate, tj, RAISED.format(1))

        def running_here() -> dict[str, Any]:
            live = kit.running(kit.pods_of(admin, ns, name))
            assert len(live) == 1, [p["metadata"]["name"] for p in live]
            assert live[0]["spec"]["nodeName"] == node.name
            return live[0]

        pod = eventually(running_here, 120, "the trainer Running on the test's real node")
        pod_name = pod["metadata"]["name"]
        container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
        assert container_id in node.container_pids()

        # The kubelet dies; the container does not. After the grace period the node is Unknown and tainted.
        node.stop_kubelet()

        def lost() -> None:
            n = admin.get("v1", "Node", node.name)
            assert kit.conditions(n)["Ready"]["status"] == "Unknown", kit.conditions(n)["Ready"]
            assert TAINT_UNREACHABLE in {t["key"] for t in n["spec"].get("taints") or []}, n["spec"]

        eventually(lost, 90, "the node declared unreachable")
        assert container_id in node.container_pids(), "the container stopped with its kubelet"

        # Hold and Release as the supervisor API does: Kueue evicts, the pod is being deleted but nobody can
        # confirm it; the gate holds the readmission and names the pod.
        hold = Hold(instance="tier-c", since=kit.now(), who="tests/node", reason="real node loss")
        patch_workload(gate, tj, lambda t, w: plan_hold(t, w, hold))

        def deleting() -> None:
            left = kit.pods_of(admin, ns, name)
            assert [p["metadata"]["name"] for p in left] == [pod_name], left
            assert left[0]["metadata"].get("deletionTimestamp"), "the pod is not being deleted"

        eventually(deleting, 60, "Kueue stops the job; the pod stays, being deleted")
        patch_workload(gate, tj, plan_release)

        def held() -> dict[str, Any]:
            entry = kit.check_entry(kit.workload_of(admin, ns, tj["metadata"]["uid"]), gate.check)
            assert entry["state"] == "Pending", entry
            assert entry["message"].startswith("waiting for 1 pod(s) of the previous execution"), entry
            assert f"{pod_name}: NodeLost: " in entry["message"], entry["message"]
            return entry

        eventually(held, 60, "the check held, naming the pod on the lost node")
        for _ in range(6):  # and it stays so, while the container really runs
            held()
            assert container_id in node.container_pids()
            assert kit.a_of(admin.get(TRAINER_V, "TrainJob", name, ns)) == 1
            time.sleep(0.5)

        # The machine is powered off, then the operator says so. Only then does the gate raise A.
        node.power_off()
        assert node.container_pids() == {}, "a container of the powered-off node is still alive"
        off_at = time.time()
        admin.request(
            "PATCH",
            f"/api/v1/nodes/{node.name}",
            [{"op": "add", "path": "/spec/taints/-",
              "value": {"key": TAINT_OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute"}}],
            content_type=JSON_PATCH,
        )  # fmt: skip
        admitted_workload(gate, tj, RAISED.format(2), within=90)
        eventually(lambda: _assert(len(pods.first_seen()) > 1), 90, "the new execution's pods")
        new = pods.first_seen()[1:]
        assert all(kit.pod_a_j(p) == (2, 0) for p in new), [kit.pod_a_j(p) for p in new]
        created = [
            calendar.timegm(time.strptime(p["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")) for p in new
        ]
        assert min(created) >= int(off_at), "a new pod was created before the old container died"
        assert kit.assert_a_rises_before_each_admission(trainjobs.versions(name)) == [1, 2]
    finally:
        for r in recorders:
            r.stop()
        node.stop()
        admin.delete("v1", "Node", node.name)
        admin.delete(TRAINER_V, "ClusterTrainingRuntime", runtime_name)


def _assert(value: Any) -> Any:
    assert value
    return value
