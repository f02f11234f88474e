"""The nemesis' schedule (chaos/nemesis.py plan) and its runner's bookkeeping, with fake processes and nodes."""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from chaos import nemesis
from chaos.nemesis import ALL, KINDS, PROCESSES, TARGETS, Nemesis, Planned, Skip, plan
from harness.kube_http import Credentials

WORKERS = ["chaos-worker-1", "chaos-worker-2"]
SEEDS = range(60)


def test_a_plan_is_the_same_for_a_seed_and_differs_across_seeds() -> None:
    assert plan(7, 1800, WORKERS) == plan(7, 1800, WORKERS)
    plans = {tuple(plan(seed, 1800, WORKERS)) for seed in range(20)}
    assert len(plans) == 20


@pytest.mark.parametrize("seed", SEEDS)
def test_every_kind_is_played_in_ten_minutes(seed: int) -> None:
    assert {p.fault for p in plan(seed, 600, WORKERS)} == set(ALL)


@pytest.mark.parametrize("duration", [120, 600, 1800, 3600])
def test_holds_keep_each_kinds_bounds_and_the_plan_its_duration(duration: float) -> None:
    for seed in SEEDS:
        planned = plan(seed, duration, WORKERS)
        for p in planned:
            lo, hi = KINDS[p.fault].hold
            assert lo <= p.hold <= hi + 1e-6, p
            assert p.at >= nemesis.GAP[0] - 1e-6, p
            assert p.at + p.hold + (KINDS[p.fault].settle if p.heal else 0) <= duration + 1e-6, p


def test_faults_never_overlap_but_those_left() -> None:
    lefts = 0
    for seed in SEEDS:
        planned = plan(seed, 3600, WORKERS)
        for before, after in itertools.pairwise(planned):
            # The next injection comes after the previous fault's heal and settle (or, left, after its hold).
            end = before.at + before.hold + (KINDS[before.fault].settle if before.heal else 0)
            assert after.at >= end + nemesis.GAP[0] - 1e-6, (before, after)
        left = [p for p in planned if not p.heal]
        lefts += len(left)
        for p in left:
            assert KINDS[p.fault].leavable, p
            assert KINDS[p.fault].node, p
            later = [q for q in planned if q.at > p.at and KINDS[q.fault].node]
            assert all(q.target != p.target for q in later), f"a fault on {p.target}, which was left lost"
        assert len({p.target for p in left}) < len(WORKERS), "every worker left lost"
    assert lefts > 0, "no plan leaves a fault unhealed"


def test_node_faults_target_workers_and_the_others_their_process_or_dispatch() -> None:
    for seed in SEEDS:
        for p in plan(seed, 1800, WORKERS):
            if KINDS[p.fault].node:
                assert p.target in WORKERS, p
            else:
                assert p.target == PROCESSES.get(p.fault, TARGETS.get(p.fault)), p
                assert p.target not in WORKERS


def test_a_menu_limits_the_kinds_and_a_wrong_name_is_refused() -> None:
    menu = ["etcd-pause", "kubelet-stop"]
    assert {p.fault for p in plan(3, 600, WORKERS, menu)} == set(menu)
    with pytest.raises(ValueError, match="unknown faults"):
        plan(3, 600, WORKERS, ["kubelet-kill", "meteor"])
    with pytest.raises(ValueError, match="worker"):
        plan(3, 600, [], ["kubelet-kill"])


def test_one_worker_is_never_left_lost() -> None:
    for seed in SEEDS:
        assert all(p.heal for p in plan(seed, 1800, WORKERS[:1]))


# --- the runner, with fakes ---------------------------------------------------------------------------------


class FakeSupervisor:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def send_signal(self, name: str, sig: signal.Signals) -> None:
        self.calls.append((name, sig.name))


class FakeNode:
    def __init__(self, name: str, fail: str = "") -> None:
        self.name = name
        self.fail = fail
        self.calls: list[str] = []
        self.kubelet = self.containerd = None

    def __getattr__(self, method: str) -> Any:
        def call() -> None:
            if method == self.fail:
                raise RuntimeError(f"{method} broke")
            self.calls.append(method)

        return call


@pytest.fixture
def env() -> SimpleNamespace:
    creds = Credentials(server="https://127.0.0.1:1", ca_file=Path("/nonexistent"))
    return SimpleNamespace(
        cp=SimpleNamespace(supervisor=FakeSupervisor(), admin=SimpleNamespace(credentials=creds)),
        tb=None,
        system=FakeNode("chaos-system"),
        workers=[FakeNode(WORKERS[0], fail="kill_kubelet"), FakeNode(WORKERS[1])],
        release_namespace="dispatch-system",
        release="dispatch-k8s",
    )


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nemesis, "MIN_GAP", 0.0)
    monkeypatch.setattr(Nemesis, "ready", lambda self, name: True)
    monkeypatch.setattr(Nemesis, "healthy", lambda self, name: True)
    monkeypatch.setattr(Nemesis, "renewed", lambda self, name, since: True)
    monkeypatch.setattr(Nemesis, "api_ready", lambda self: True)


def run(env: SimpleNamespace, planned: list[Planned]) -> tuple[Nemesis, list[dict[str, Any]]]:
    records: list[dict[str, Any]] = []
    nem = Nemesis(env, planned, lambda **fields: records.append(fields))  # type: ignore[arg-type]
    nem.run(threading.Event())
    return nem, records


def test_the_runner_injects_heals_skips_and_goes_on(env: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_leader(self: Nemesis) -> str:
        raise Skip("no holder of the Lease")

    monkeypatch.setattr(Nemesis, "lease_holder", no_leader)
    nem, records = run(env, [
        Planned(0.0, "etcd-pause", "etcd", 0.05, True, 0),
        Planned(0.0, "kubelet-kill", WORKERS[0], 0.05, True, 0),  # the fake's kill_kubelet raises
        Planned(0.0, "agent-leader-kill", "lease-holder", 0.05, True, 0),
        Planned(0.0, "kubelet-stop", WORKERS[1], 0.05, True, 0),
    ])  # fmt: skip
    assert [(r["fault"], r["action"]) for r in records] == [
        ("etcd-pause", "inject"), ("etcd-pause", "heal"),
        ("kubelet-kill", "skipped"),
        ("agent-leader-kill", "skipped"),
        ("kubelet-stop", "inject"), ("kubelet-stop", "heal"),
    ]  # fmt: skip
    assert "RuntimeError: kill_kubelet broke" in records[2]["detail"]
    assert records[3]["detail"] == "no holder of the Lease"
    assert env.cp.supervisor.calls == [("etcd", "SIGSTOP"), ("etcd", "SIGCONT")]
    assert env.workers[1].calls == ["pause_kubelet", "resume_kubelet"]
    assert nem.counts() == {"etcd-pause": 1, "kubelet-stop": 1}


def test_a_fault_left_is_healed_by_heal_all_once(env: SimpleNamespace) -> None:
    nem, records = run(env, [Planned(0.0, "kubelet-stop", WORKERS[1], 0.05, False, 0)])
    assert [r["action"] for r in records] == ["inject", "left"]
    assert env.workers[1].calls == ["pause_kubelet"]
    nem.heal_all()
    nem.heal_all()
    assert [r["action"] for r in records] == ["inject", "left", "heal"]
    assert env.workers[1].calls == ["pause_kubelet", "resume_kubelet"]


def test_stop_ends_the_run_during_a_hold_and_heal_all_heals(env: SimpleNamespace) -> None:
    records: list[dict[str, Any]] = []
    nem = Nemesis(env, [Planned(0.0, "etcd-pause", "etcd", 600, True, 0)], lambda **f: records.append(f))  # type: ignore[arg-type]
    stop = threading.Event()
    thread = threading.Thread(target=nem.run, args=(stop,))
    thread.start()
    threading.Timer(0.3, stop.set).start()
    thread.join(10)
    assert not thread.is_alive()
    assert [r["action"] for r in records] == ["inject"]
    nem.heal_all()
    assert [r["action"] for r in records] == ["inject", "heal"]
    assert env.cp.supervisor.calls == [("etcd", "SIGSTOP"), ("etcd", "SIGCONT")]


def test_a_process_sharing_our_pid_namespace_is_alone() -> None:
    assert nemesis.container_processes(os.getpid()) == [os.getpid()]


# --- the harness' restarts the nemesis relies on --------------------------------------------------------------


def test_a_process_restarted_from_a_thread_outlives_the_thread_and_keeps_its_place(tmp_path: Path) -> None:
    from harness.processes import ProcessSupervisor

    sup = ProcessSupervisor(tmp_path / "logs")
    try:
        sup.start("a", ["sh", "-c", 'echo "$X $PWD"; exec sleep 100'], env={"X": "one"}, cwd=tmp_path)
        sup.start("b", ["sleep", "100"])
        restarted: list[Any] = []
        # The kernel's parent-death signal follows the thread that forked: the nemesis heals from its own thread.
        thread = threading.Thread(target=lambda: restarted.append(sup.restart("a")))
        thread.start()
        thread.join()
        time.sleep(0.3)
        assert restarted[0].alive()
        assert [p.name for p in sup.processes] == ["a", "b"]
        assert sup.get("a") is restarted[0]
        assert (tmp_path / "logs" / "a.log").read_text().count(f"one {tmp_path}") == 2
        sup.kill("b")
        sup.check_alive()  # killed on purpose: not a crash
        sup.send_signal("a", signal.SIGSTOP)
        sup.restart("b")
        sup.check_alive()
    finally:
        sup.stop_all()


def test_a_node_heal_starts_again_what_died_meanwhile_as_systemd_would(env: SimpleNamespace) -> None:
    # A kubelet that starts while containerd is down exits: the heal of containerd-kill must bring it back.
    node = env.workers[1]
    node.containerd = SimpleNamespace(alive=lambda: True)
    node.kubelet = SimpleNamespace(alive=lambda: False)
    nem = Nemesis(env, [], lambda **fields: None)  # type: ignore[arg-type]
    said = nem.node_back(node)
    assert node.calls == ["restart_kubelet"]
    assert said.startswith("kubelet had exited: started again; Lease renewed, Ready and untainted after")
