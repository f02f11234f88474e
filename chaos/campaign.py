"""One campaign: supervisor traffic, the nemesis and the attacker at once on the campaign's cluster, then the
faults healed, the cluster settled, every job's final Status read, and the independent checker run over the
ledger and the recorded calls.

An arm is one such run in one namespace: `dispatch` (the product as installed) or `naive` (a naive check
controller in place of dispatch's readmission gate, and the unsuspend choke point removed: a system whose only
defence would be its check controller). The same seed gives the same traffic choices, fault schedule and
attacks; the timing of a real cluster does the rest.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chaos import attacker as attacks
from chaos import checker, naive, nemesis, records, site
from chaos import env as environment
from chaos.observer import Observer
from chaos.traffic import Traffic
from contract.keys import ADMISSION_CHECK_CONTROLLER, ADMISSION_CHECK_NAME
from harness.kube_http import ApiError
from harness.processes import wait_until
from harness.sandbox import site as sandbox_site
from harness.sandbox.install import RELEASE

ARMS = ("dispatch", "naive")
SETTLE_QUIET = 20.0
"""Seconds with no job's phase changing after which the final Statuses are read (the campaign's default)."""


@dataclass
class Result:
    arm: str
    seed: int
    duration: float
    nodes: list[str]
    jobs: int
    dir: str
    started_jobs: int = 0
    bounces: int = 0
    """Jobs held once they ran, and released (chaos/traffic.py): readmissions of a job that ran."""
    executions: int = 0
    preemptions: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    attacks: dict[str, int] = field(default_factory=dict)
    attack_kinds: int = 0
    violations: int = 0
    violations_by_rule: dict[str, int] = field(default_factory=dict)
    got_through: int = 0
    calls: int = 0
    failed_calls: int = 0
    max_gap: float = 0.0
    watch_delay: float = 0.0
    """The campaign's watch delay as its probes measured it (chaos/observer.py): the checker's resolution for
    when an execution was admitted."""
    report: str = ""

    @property
    def ok(self) -> bool:
        return self.violations == 0 and self.got_through == 0


def _dispatch_check(env: environment.Env) -> str:
    """The AdmissionCheck the chart installed (by its name: other AdmissionChecks of dispatch's controller may
    exist on a shared cluster)."""
    ac = env.admin.get(sandbox_site.KUEUE_V, "AdmissionCheck", ADMISSION_CHECK_NAME)
    if ac["spec"].get("controllerName") != ADMISSION_CHECK_CONTROLLER:
        raise RuntimeError(f"AdmissionCheck {ADMISSION_CHECK_NAME} is not dispatch's: {ac['spec']}")
    return ADMISSION_CHECK_NAME


def _queues_active(env: environment.Env) -> None:
    def active() -> bool:
        for q in site.QUEUES:
            cq = env.admin.get(sandbox_site.KUEUE_V, "ClusterQueue", q)
            conds = {c["type"]: c["status"] for c in (cq.get("status") or {}).get("conditions") or []}
            if conds.get("Active") != "True":
                return False
        return True

    wait_until(active, 120, interval=1, what=f"ClusterQueues {', '.join(site.QUEUES)} Active")


def _preemptions(env: environment.Env, namespace: str) -> int:
    """Workloads of the namespace evicted by a preemption, as Kueue's Events tell (read before the Events age)."""
    try:
        events = env.admin.list("v1", "Event", namespace)
    except (ApiError, OSError):
        return 0
    return sum(e.get("count") or 1 for e in events if e.get("reason") == "Preempted")


def _save_events(env: environment.Env, dir_: Path, namespace: str) -> None:
    """The Events of the arm's namespace (its Workloads, JobSets, Jobs and pods), of dispatch's (its pods) and of
    `default` (the nodes'). Not the whole cluster's: on the test suite's cluster those are every earlier test's
    too, tens of MB that took about 15 s per arm to read and write."""
    events: list[Any] = []
    for ns in dict.fromkeys((namespace, env.release_namespace, "default")):
        try:
            events.extend(env.admin.list("v1", "Event", ns))
        except (ApiError, OSError) as exc:
            events.append({"error": f"{ns}: {exc}"})
    (dir_ / "events.json").write_text(json.dumps(events, indent=1))


def run_arm(env: environment.Env, *, arm: str, seed: int, duration: float, jobs: int, menu: list[str] | None = None,
            log: Any = print, quiet: float = SETTLE_QUIET,
            disarm: Callable[[], list[str]] | None = None) -> Result:  # fmt: skip
    """One arm of a campaign on ``env``; its records and report go to ``env.run_dir / arm``. After the traffic,
    the final Statuses are read once no job's phase has changed for ``quiet`` seconds. ``disarm``: called once
    the arm's Preflight passed, before any traffic (a mutant arm's removal of parts of the choke point,
    chaos/mutants.py); returns what it removed."""
    dir_ = env.run_dir / arm
    dir_.mkdir(parents=True, exist_ok=True)
    namespace = f"chaos-{arm}"
    check = _dispatch_check(env)
    runtime = f"{site.RUNTIME}-{arm}"
    token = site.prepare(env.cp, env.tb, namespace=namespace, check=check, image=env.image.ref, run_dir=dir_,
                         runtime_name=runtime, roles=(f"{RELEASE}-supervisor", f"{RELEASE}-preflight"))  # fmt: skip
    _queues_active(env)
    rec = records.Recorder(dir_)
    workers = [w.name for w in env.workers]
    meta: dict[str, Any] = {"seed": seed, "duration": duration, "nodes": workers, "jobs": jobs, "arm": arm,
                            "started": time.time(), "heartbeat_seconds": site.HEARTBEAT_SECONDS}  # fmt: skip
    (dir_ / "campaign.json").write_text(json.dumps(meta, indent=1))

    traffic = Traffic(api_url=env.api.api_url, ca_file=env.api.ca_file, resolve=env.api.resolve, token_file=token,
                      admin=env.admin, namespace=namespace, image=env.image.ref, runtime=runtime,
                      others_runtime=env.tb.training_runtime, jobs=jobs, seed=seed, record=rec.to("calls"),
                      ledger=site.ledger_dir(dir_))  # fmt: skip
    if arm == "naive" and naive.is_disarmed(env.admin):
        # A second naive arm on this cluster: the first removed the choke point the start gate's proof needs, so
        # a Preflight now cannot prove it. The verdict the first arm's Preflight recorded, before it disarmed
        # anything, stands on the Lease (the naive controller keeps the Lease's record when it takes it over).
        log("  naive arm: the choke point is disarmed already; the earlier Preflight's verdict stands")
    else:
        asyncio.run(traffic.preflight_once())
    if disarm is not None:
        log(f"  {arm}: removed {', '.join(disarm()) or 'nothing of the choke point'}")
    gate: naive.NaiveGate | None = None
    stop = threading.Event()
    threads: list[threading.Thread] = []
    if arm == "naive":
        removed = naive.disarm_choke_point(env.admin)
        gate = naive.NaiveGate(env.admin, check=check, namespace=env.release_namespace)
        gate.take_over(60)
        threads.append(threading.Thread(target=gate.run, args=(stop,), name="naive-gate", daemon=True))
        what = ", ".join(removed) or "nothing more (an earlier naive arm did)"
        log(f"  naive arm: the naive check controller holds the Lease; removed {what}")

    stranger = attacks.stranger(env.cp, namespace)
    attacker = attacks.Attacker(env.admin, stranger, namespace, seed, rec.to("attacks"),
                                principal=f"system:serviceaccount:{namespace}:attacker")  # fmt: skip
    planned = nemesis.plan(seed, duration, workers, menu or nemesis.ALL)
    nem = nemesis.Nemesis(env, planned, rec.to("schedule"))
    threads.append(threading.Thread(target=attacker.run, args=(stop,), name="attacker", daemon=True))
    threads.append(threading.Thread(target=nem.run, args=(stop,), name="nemesis", daemon=True))
    # The campaign's own watch of the arm's Workloads and pods (observed.jsonl), from before the first Start until
    # every job is gone: the checker's only source for when an execution was admitted.
    observer = Observer(env.admin, namespace, rec.to("observed"))
    observer.start()
    for t in threads:
        t.start()
    until = time.time() + duration
    log(f"  {arm}: traffic, nemesis ({len(planned)} faults planned) and attacker for {duration:.0f}s")
    try:
        try:
            asyncio.run(traffic.run(until))
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=120)
            nem.heal_all()
        log(f"  {arm}: faults healed; settling")
        environment.wait_nodes_ready(env)
        asyncio.run(traffic.settle(quiet=quiet))
        preemptions = _preemptions(env, namespace)
        _save_events(env, dir_, namespace)
        asyncio.run(traffic.wind_down())
    finally:
        observer.stop()
    meta["ended"] = time.time()
    (dir_ / "campaign.json").write_text(json.dumps(meta, indent=1))

    report = checker.check_run(dir_)
    schedule = records.read(dir_, "schedule")
    attack_counts = attacker.counts()
    result = Result(
        arm=arm, seed=seed, duration=duration, nodes=workers, jobs=jobs, dir=str(dir_),
        started_jobs=traffic.counts.started, bounces=traffic.counts.bounces, executions=report.lives,
        preemptions=preemptions,
        faults=dict(nem.counts()), attacks=dict(attack_counts),
        attack_kinds=len({a["attack"] for a in records.read(dir_, "attacks")}),
        violations=len(report.violations),
        violations_by_rule=dict(Counter(str(v.rule) for v in report.violations)),
        got_through=attack_counts.get("got-through", 0), calls=traffic.counts.calls,
        failed_calls=traffic.counts.failed_calls, max_gap=report.max_gap, watch_delay=report.watch_delay,
        report=checker.explain(report, schedule),
    )  # fmt: skip
    (dir_ / "report.txt").write_text(result.report)
    (dir_ / "result.json").write_text(json.dumps({**asdict(result), "ok": result.ok}, indent=1))
    if gate is not None:
        log(f"  naive arm: the naive controller approved {gate.approvals()} admissions")
    return result


def summary(result: Result) -> list[str]:
    faults = sum(result.faults.values())
    rules = ", ".join(f"rule {k}: {v}" for k, v in sorted(result.violations_by_rule.items()))
    refused = result.attacks.get("refused", 0)
    tried = sum(result.attacks.values())
    return [
        f"arm {result.arm}, seed {result.seed}, {result.duration:.0f}s on {len(result.nodes)} real worker nodes, "
        f"{result.jobs} jobs at once",
        f"  jobs started {result.started_jobs} ({result.bounces} bounced), executions {result.executions}, "
        f"preemptions {result.preemptions}, "
        f"API calls {result.calls} ({result.failed_calls} failed)",
        f"  faults {faults}: " + ", ".join(f"{k} {v}" for k, v in sorted(result.faults.items())),
        f"  attacker writes {tried} ({result.attack_kinds} kinds): refused {refused}, "
        + ", ".join(f"{k} {v}" for k, v in sorted(result.attacks.items()) if k != "refused"),
        f"  violations {result.violations}"
        + (f" ({rules})" if result.violations else "")
        + f"; largest gap between a life's lines {result.max_gap:.3f}s; watch delay {result.watch_delay:.3f}s",
        f"  records and logs: {result.dir}",
    ]
