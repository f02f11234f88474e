"""The MultiKueue arm: the same supervisor traffic, through the manager's agent, on a manager and two workers
(chaos/mk_env.py), under the cross-cluster faults of chaos/mk_nemesis.py; the same ledger and checker.

The trainers of every worker write to one ledger on this host, by job, so a job's executions on all workers are
judged together: two copies of one job running at once on two workers is an overlap (rule 3), whatever each
cluster's API says. The campaign's own watch (chaos/observer.py) runs on each worker, where the executions run:
an execution's admission is its copy's Workload admitted by that worker's Kueue.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from chaos import checker, mk_env, mk_nemesis, nemesis, records, site
from chaos.campaign import SETTLE_QUIET, Result
from chaos.mk_env import MkEnv
from chaos.observer import Observer
from chaos.traffic import Traffic
from harness.kube_http import KubeHttp
from harness.processes import wait_until
from harness.sandbox.site import KUEUE_V

ARM = "multicluster"


def _active(admin: KubeHttp, kind: str, name: str, namespace: str | None = None) -> bool:
    obj = admin.get_or_none(KUEUE_V, kind, name, namespace) or {}
    return any(c.get("type") == "Active" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])  # fmt: skip


def _queues_active(env: MkEnv, namespace: str) -> None:
    for cp in env.mc.control_planes:
        for q in site.QUEUES:
            wait_until(lambda cp=cp, q=q: _active(cp.admin, "ClusterQueue", q) and
                       _active(cp.admin, "LocalQueue", q, namespace), 120, interval=1,
                       what=f"ClusterQueue and LocalQueue {q} Active on {cp.run_dir.name}")  # fmt: skip


def wait_nodes_ready(env: MkEnv, timeout: float = 180) -> None:
    """Every worker's real node Ready again (after the nemesis healed it)."""

    def ready() -> bool:
        for name, node in env.nodes.items():
            obj = env.mc.worker(name).admin.get_or_none("v1", "Node", node.name) or {}
            conds = {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}
            if conds.get("Ready") != "True":
                return False
        return True

    wait_until(ready, timeout, interval=1, what="every worker's real node Ready")


def _observe(env: MkEnv, namespace: str, record: Callable[..., None]) -> list[Observer]:
    """One watch per worker; its records say which worker."""
    observers = []
    for w in env.mc.workers:
        tagged = lambda _name=w.name, **fields: record(**fields, cluster=_name)  # noqa: E731
        observers.append(Observer(w.admin, namespace, tagged))
    return observers


def run_arm(env: MkEnv, *, seed: int, duration: float, jobs: int, menu: list[str] | None = None,
            log: Any = print, quiet: float = SETTLE_QUIET, arm: str = ARM) -> Result:  # fmt: skip
    """One MultiKueue arm on ``env``; its records and report go to ``env.run_dir / arm``."""
    dir_ = env.run_dir / arm
    dir_.mkdir(parents=True, exist_ok=True)
    namespace = f"chaos-{arm}"
    runtime = f"{site.RUNTIME}-{arm}"
    token = mk_env.prepare(env, namespace=namespace, runtime_name=runtime, dir_=dir_)
    _queues_active(env, namespace)
    rec = records.Recorder(dir_)
    workers = env.worker_names
    meta: dict[str, Any] = {"seed": seed, "duration": duration, "nodes": [n.name for n in env.nodes.values()],
                            "workers": workers, "jobs": jobs, "arm": arm, "started": time.time(),
                            "heartbeat_seconds": site.HEARTBEAT_SECONDS}  # fmt: skip
    (dir_ / "campaign.json").write_text(json.dumps(meta, indent=1))
    traffic = Traffic(api_url=env.api_url, ca_file=env.ca_file, resolve={}, token_file=token, admin=env.admin,
                      namespace=namespace, image=env.image.ref, runtime=runtime,
                      others_runtime=env.mc.manager.training_runtime, jobs=jobs, seed=seed, record=rec.to("calls"),
                      ledger=site.ledger_dir(dir_))  # fmt: skip
    asyncio.run(traffic.preflight_once())
    planned = nemesis.plan(seed, duration, workers, menu or list(mk_nemesis.ALL), kinds=mk_nemesis.KINDS)
    nem = mk_nemesis.MkNemesis(env, planned, rec.to("schedule"))
    stop = threading.Event()
    thread = threading.Thread(target=nem.run, args=(stop,), name="nemesis", daemon=True)
    observers = _observe(env, namespace, rec.to("observed"))
    for o in observers:
        o.start()
    thread.start()
    log(f"  {arm}: traffic through the manager's agent and the nemesis ({len(planned)} faults planned) for "
        f"{duration:.0f}s")  # fmt: skip
    try:
        try:
            asyncio.run(traffic.run(time.time() + duration))
        finally:
            stop.set()
            thread.join(timeout=120)
            nem.heal_all()
        log(f"  {arm}: faults healed; settling")
        wait_nodes_ready(env)
        asyncio.run(traffic.settle(quiet=quiet))
        asyncio.run(traffic.wind_down())
    finally:
        for o in observers:
            o.stop()
    meta["ended"] = time.time()
    (dir_ / "campaign.json").write_text(json.dumps(meta, indent=1))
    report = checker.check_run(dir_)
    schedule = records.read(dir_, "schedule")
    result = Result(
        arm=arm, seed=seed, duration=duration, nodes=meta["nodes"], jobs=jobs, dir=str(dir_),
        started_jobs=traffic.counts.started, bounces=traffic.counts.bounces, executions=report.lives,
        faults=dict(nem.counts()), violations=len(report.violations),
        violations_by_rule=dict(Counter(str(v.rule) for v in report.violations)),
        calls=traffic.counts.calls, failed_calls=traffic.counts.failed_calls, max_gap=report.max_gap,
        watch_delay=report.watch_delay, report=checker.explain(report, schedule),
    )  # fmt: skip
    (dir_ / "report.txt").write_text(result.report)
    (dir_ / "result.json").write_text(json.dumps({**asdict(result), "ok": result.ok}, indent=1))
    return result
