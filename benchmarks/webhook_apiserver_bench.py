"""What dispatch's admission adds to the writes that start a job, through the real API server (tier A).

Two operations, each measured in one run on one API server, with every arm in a namespace of its own and the arms
*interleaved*: each step writes once in each arm's namespace, in an order that rotates, so all arms see the same
load at the same moment (the machine is shared; compare arms, not runs):

* **create**: a canonical dispatch TrainJob, written by dispatch's ServiceAccount as Start makes it (its runtime
  copy made beforehand, not measured);
* **unsuspend**: Kueue's admission of a dispatch TrainJob that dispatch opened and whose A the readmission gate
  raised (both beforehand, not measured): ``spec.suspend`` false, by Kueue's principal. The write that opens an
  execution.

The arms:

1. **nothing**: no webhook configuration and no admission policy of ours applies to its namespace.
2. **policies only**: the chart's admission policies (webhook/policies.py: the owner policies, the field rules and
   the MutatingAdmissionPolicy that records A), which the API server evaluates in process. The floor.
3. **chart before**: the policies and the webhook configurations as the chart rendered them before the webhook
   was taken off the writes the policies judge: every route, ``validate-mirrored.*`` and ``record-start`` with
   ``failurePolicy: Ignore``. The webhook is a separate process on loopback, as the chart runs it.
4. **chart**: the policies and the webhook configurations as the chart renders them now (on an API server that
   serves MutatingAdmissionPolicy): only the creates no policy can judge reach the webhook.
5. **policies + allow-all** (creates only): dispatch's configurations served by benchmarks/allow_all_webhook.py,
   the same server stack answering ``allowed`` at once: the floor of being a webhook at all.
6. **policies + allow-all (Go)** (creates only): benchmarks/allow_all_go (standard library only, built here with
   the local Go toolchain): the floor of any webhook, whatever its language.

    .venv/bin/python -m benchmarks.webhook_apiserver_bench [--creates 300] [--rounds 3]   (repository root)
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contract.trainjob import build_runtime_copy, build_trainjob
from harness import webhook_process
from harness.chart_admission import chart_policies, kueue, opened_and_raised, unsuspend, wait_recorded
from harness.cluster import ControlPlane, free_port, new_run_dir, start_control_plane
from harness.fixtures import runtime, submission
from harness.kube_http import KubeHttp
from harness.principals import EDIT_RULES, Principals, principals
from harness.webhook_process import WebhookProcess, register, reviews, start_webhook, wait_enforced
from webhook.configurations import MIRRORED, RECORD_START

ROOT = Path(__file__).resolve().parent.parent
WARMUP = 20
NOTHING, POLICIES, BEFORE, CHART = "nothing", "policies only", "chart before", "chart"
ALLOW_ALL, ALLOW_ALL_GO = "policies + allow-all", "policies + allow-all (Go)"
CREATE_ARMS = (NOTHING, POLICIES, BEFORE, CHART, ALLOW_ALL, ALLOW_ALL_GO)
UNSUSPEND_ARMS = (NOTHING, POLICIES, BEFORE, CHART)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def grant(cp: ControlPlane, namespace: str, home: str) -> None:
    """dispatch's and the stranger's ServiceAccounts (of ``home``) may write dispatch's kinds in ``namespace`` too."""
    rbac = "rbac.authorization.k8s.io/v1"
    cp.admin.create({"apiVersion": rbac, "kind": "Role", "metadata": {"name": "edit", "namespace": namespace},
                     "rules": EDIT_RULES})  # fmt: skip
    cp.admin.create({"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": "edit", "namespace": namespace},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "edit"},
                     "subjects": [{"kind": "ServiceAccount", "name": who, "namespace": home}
                                  for who in ("dispatch", "stranger")]})  # fmt: skip


def as_before(hook: WebhookProcess) -> None:
    """The configurations ``hook`` was registered with (every route, failing closed) made the chart's as it was:
    the routes the policies judge too fail open."""
    hook.unregister()
    for doc in hook.configurations:
        for h in doc["webhooks"]:
            if h["name"].split(".", 1)[0] in (MIRRORED, RECORD_START):
                h["failurePolicy"] = "Ignore"
        hook.cp.admin.create(doc)


def start_allow_all(cp: ControlPlane, namespace: str, go: bool = False) -> WebhookProcess:
    """benchmarks/allow_all_webhook.py (or, ``go``, benchmarks/allow_all_go) on loopback, registered with
    dispatch's configurations for ``namespace``."""
    workdir = Path(tempfile.mkdtemp())
    ca_pem = webhook_process.serving_files(workdir, "allow-all")
    tls = ["--tls-cert-file", workdir / "tls.crt", "--tls-private-key-file", workdir / "tls.key"]
    port = free_port()
    if go:
        binary = workdir / "allow-all-go"
        env = {**os.environ, "GOTOOLCHAIN": "local"}
        subprocess.run(["nice", "-n", "10", "go", "build", "-o", binary, "."],
                       cwd=ROOT / "benchmarks" / "allow_all_go", env=env, check=True, timeout=600)  # fmt: skip
        argv = [binary, "--address", f"127.0.0.1:{port}", *tls]
    else:
        argv = [sys.executable, "-m", "benchmarks.allow_all_webhook", "--port", str(port), *tls]
    process = cp.supervisor.start(f"allow-all-{'go-' if go else ''}{namespace}", argv)
    return register(cp, namespace, process, port, ca_pem, "allow-all", policies=True, mutating_policy=True)


def interleaved(arms: list[str], steps: int, write: Callable[[str, int], Any]) -> dict[str, list[float]]:
    """``write(arm, i)`` for each step i in each arm, the order of the arms rotating; ms each, warm-up left out."""
    timings: dict[str, list[float]] = {arm: [] for arm in arms}
    for i in range(steps):
        for arm in arms[i % len(arms) :] + arms[: i % len(arms)]:
            started = time.perf_counter()
            write(arm, i)
            if i >= WARMUP:
                timings[arm].append((time.perf_counter() - started) * 1000)
    return timings


def measure(
    who: Principals, kueue_http: KubeHttp, namespaces: dict[str, str], creates: int, first: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """``creates`` (+ warm-up) creates per arm, then as many unsuspends per arm of the TrainJobs just created, each
    opened and raised beforehand; ms each."""
    steps = range(first, first + creates + WARMUP)
    bodies: dict[str, list[dict[str, Any]]] = {}
    for arm, namespace in namespaces.items():
        subs = [submission(namespace=namespace, n=n) for n in steps]
        for sub in subs:  # the runtime copies are not what is measured
            who.dispatch.create(build_runtime_copy(sub, runtime()))
        bodies[arm] = [build_trainjob(sub, runtime()["spec"]) for sub in subs]
    time.sleep(0.5)  # the webhook's watch has seen them, as it has any copy made a moment before
    created: dict[str, list[dict[str, Any]]] = {arm: [] for arm in namespaces}

    def create(arm: str, i: int) -> None:
        created[arm].append(who.dispatch.create(bodies[arm][i]))

    create_ms = interleaved(list(CREATE_ARMS), len(steps), create)
    ready = {arm: [opened_and_raised(who, tj) for tj in created[arm]] for arm in UNSUSPEND_ARMS}
    unsuspend_ms = interleaved(list(UNSUSPEND_ARMS), len(steps), lambda arm, i: unsuspend(kueue_http, ready[arm][i]))
    return create_ms, unsuspend_ms


def _row(label: str, t: list[float], floor: list[float] | None) -> str:
    extra = ""
    if floor is not None:
        extra = (
            f"   {percentile(t, 0.5) - percentile(floor, 0.5):+6.2f} / "
            f"{percentile(t, 0.99) - percentile(floor, 0.99):+6.2f}"
        )
    return f"{label:<36} {len(t):5d} {percentile(t, 0.5):8.2f} {percentile(t, 0.99):8.2f}{extra}"


def report(operation: str, arms: tuple[str, ...], results: dict[str, list[list[float]]], rounds: int) -> None:
    print(f"\n{operation}: {'arm (round)':<28} {'n':>5} {'p50 ms':>8} {'p99 ms':>8}   over policies only: p50 / p99")
    for r in range(rounds):
        for arm in arms:
            floor = results[POLICIES][r] if arm != NOTHING else None
            print(_row(f"  {arm} ({r + 1})", results[arm][r], floor))
    pooled = {arm: [x for run_ in results[arm] for x in run_] for arm in arms}
    for arm in arms:
        print(_row(f"  {arm} (all)", pooled[arm], pooled[POLICIES] if arm != NOTHING else None))
    p50 = {arm: percentile(v, 0.5) for arm, v in pooled.items()}
    p99 = {arm: percentile(v, 0.99) for arm, v in pooled.items()}
    print(
        f"  all rounds: the policies over nothing {p50[POLICIES] - p50[NOTHING]:+.2f} ms p50, "
        f"{p99[POLICIES] - p99[NOTHING]:+.2f} ms p99; the chart over the chart before "
        f"{p50[CHART] - p50[BEFORE]:+.2f} ms p50, {p99[CHART] - p99[BEFORE]:+.2f} ms p99"
    )


def run(creates: int, rounds: int) -> None:
    with start_control_plane(new_run_dir()) as cp:
        home = cp.create_namespace("bench")
        who = principals(cp, home)
        namespaces = {NOTHING: cp.create_namespace("bench-0"), POLICIES: cp.create_namespace("bench-1"), BEFORE: home}
        namespaces |= {CHART: cp.create_namespace("bench-3"), ALLOW_ALL: cp.create_namespace("bench-4")}
        namespaces[ALLOW_ALL_GO] = cp.create_namespace("bench-5")
        for namespace in namespaces.values():
            if namespace != home:
                grant(cp, namespace, home)
        kueue_http, kueue_username = kueue(cp, home, list(namespaces.values()))
        # One webhook process, registered twice: every route for the chart before (made to fail open as it did), and
        # as the chart registers it now.
        config = {"dispatch": {"usernames": [who.dispatch_username]}, "kueue": {"usernames": [kueue_username]}}
        hook = start_webhook(cp, home, who.dispatch_username, Path(tempfile.mkdtemp()), config)
        as_before(hook)
        now = register(cp, namespaces[CHART], hook.process, hook.port, hook.ca_pem, "dispatch-k8s",
                       policies=True, mutating_policy=True)  # fmt: skip
        allow_all = start_allow_all(cp, namespaces[ALLOW_ALL])
        allow_go = start_allow_all(cp, namespaces[ALLOW_ALL_GO], go=True)
        for arm in (BEFORE, CHART):  # before the policies, whose owner policy would refuse the canary first
            wait_enforced(who.stranger, namespaces[arm])
        for doc in chart_policies(who, kueue_username, [namespaces[a] for a in CREATE_ARMS if a != NOTHING]):
            cp.admin.create(doc)
        for arm in UNSUSPEND_ARMS[1:]:  # policies load asynchronously: until an unsuspend is recorded
            sub = submission(namespace=namespaces[arm], n=999_999)
            who.dispatch.create(build_runtime_copy(sub, runtime()))
            wait_recorded(
                kueue_http, opened_and_raised(who, who.dispatch.create(build_trainjob(sub, runtime()["spec"])))
            )
        time.sleep(3)
        create_results: dict[str, list[list[float]]] = {arm: [] for arm in CREATE_ARMS}
        unsuspend_results: dict[str, list[list[float]]] = {arm: [] for arm in UNSUSPEND_ARMS}
        before = reviews(hook)
        for r in range(rounds):
            create_ms, unsuspend_ms = measure(who, kueue_http, namespaces, creates, 1 + r * (creates + WARMUP))
            for arm in CREATE_ARMS:
                create_results[arm].append(create_ms[arm])
            for arm in UNSUSPEND_ARMS:
                unsuspend_results[arm].append(unsuspend_ms[arm])
            print(f"round {r + 1} done", flush=True)
        answered = reviews(hook) - before
        now.unregister()
        hook.stop()
        allow_all.stop()
        allow_go.stop()

    print(
        f"\n{creates} writes per arm per operation per round (+{WARMUP} warm-up), {rounds} rounds, arms interleaved; "
        f"{platform.node()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; dispatch's webhook answered {answered:.0f} reviews "
        "(both registrations)"
    )
    report("create", CREATE_ARMS, create_results, rounds)
    report("unsuspend", UNSUSPEND_ARMS, unsuspend_results, rounds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creates", type=int, default=300, help=f"measured writes per arm per round (+{WARMUP})")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (fresh objects each)")
    args = parser.parse_args()
    if not 1 <= args.creates <= 5000 or not 1 <= args.rounds <= 20:
        parser.error("--creates must be 1..5000 and --rounds 1..20")
    run(args.creates, args.rounds)
