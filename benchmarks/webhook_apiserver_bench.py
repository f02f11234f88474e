"""What dispatch's webhook adds to a TrainJob create through the real API server (tier A), next to its floor.

Three arms, in one run on one API server, each in a namespace of its own, and measured *interleaved*: each
step creates one TrainJob in each arm's namespace, in an order that rotates, so all three see the same load
at the same moment (the machine is shared; compare arms, not runs):

1. **nothing**: no webhook configuration and no admission policy of ours applies to its namespace.
2. **policies only**: the ValidatingAdmissionPolicies (webhook/policies.py), which the API server evaluates
   in process. This is the floor the webhook is held to.
3. **policies + webhook**: the policies and the webhook configurations (webhook/configurations.py), with
   the webhook a separate process on loopback, as the chart runs it (runtime copies from its watch,
   falling back to a GET; /mutate skipped by ``matchConditions`` when the TrainJob is created closed).
4. **policies + webhook, no levers**: the same with a second webhook process as it was before issue 13:
   its ServiceAccount may only GET runtime copies (so every lookup is a GET through the API server) and
   its mutating configuration lacks the ``created-open`` condition (so /mutate is called on every create).
5. **policies + a webhook that allows everything**: the policies and dispatch's own configurations, but
   served by benchmarks/allow_all_webhook.py, the same server stack answering ``allowed`` at once. This is
   the floor of being a webhook at all: what dispatch's webhook adds over it is its own work.
6. **policies + the same in Go**: benchmarks/allow_all_go (standard library only, built here with the
   local Go toolchain): the floor of any webhook, whatever its language; what the API server's own side
   of a webhook call costs.

Each measured create is a canonical dispatch TrainJob (its runtime copy made beforehand, not measured),
written by dispatch's ServiceAccount, as Start makes it.

    .venv/bin/python -m benchmarks.webhook_apiserver_bench [--creates 300] [--rounds 3]   (repository root)
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import secrets
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from contract.trainjob import build_runtime_copy, build_trainjob
from harness.cluster import ControlPlane, free_port, new_run_dir, start_control_plane
from tests.cluster import webhook_process
from tests.cluster.principals import EDIT_RULES, Principals, principals
from tests.cluster.webhook_process import WebhookProcess, start_webhook, wait_enforced
from tests.unit.fixtures import runtime, submission
from webhook.config import Config
from webhook.config import Principals as ConfigPrincipals
from webhook.policies import admission_policies

ROOT = Path(__file__).resolve().parent.parent
WARMUP = 20
ARMS = (
    "nothing",
    "policies only",
    "policies + webhook",
    "policies + webhook, no levers",
    "policies + allow-all",
    "policies + allow-all (Go)",
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def policies(who: Principals, namespaces: list[str]) -> list[dict[str, Any]]:
    """The chart's policies, renamed for this run and bound to ``namespaces`` alone."""
    config = Config(dispatch=ConfigPrincipals(usernames=(who.dispatch_username,)))
    suffix = secrets.token_hex(3)
    docs = admission_policies(config, namespace="dispatch-system")
    for doc in docs:
        doc["metadata"]["name"] += f"-{suffix}"
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            doc["spec"]["policyName"] += f"-{suffix}"
            doc["spec"]["matchResources"] = {
                "namespaceSelector": {
                    "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]
                }
            }
    return docs


def grant(cp: ControlPlane, namespace: str, home: str) -> None:
    """dispatch's ServiceAccount (of ``home``) may write dispatch's kinds in ``namespace`` too."""
    rbac = "rbac.authorization.k8s.io/v1"
    cp.admin.create({"apiVersion": rbac, "kind": "Role", "metadata": {"name": "edit", "namespace": namespace},
                     "rules": EDIT_RULES})  # fmt: skip
    cp.admin.create({"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": "edit", "namespace": namespace},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "edit"},
                     "subjects": [{"kind": "ServiceAccount", "name": "dispatch", "namespace": home}]})  # fmt: skip


def webhook_metric(hook: WebhookProcess, name: str, label: str) -> float:
    """The sum of the webhook's samples of ``name`` whose labels contain ``label``."""
    context = ssl.create_default_context(cadata=hook.ca_pem.decode())
    with urllib.request.urlopen(f"https://127.0.0.1:{hook.port}/metrics", context=context, timeout=5) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{") and label in line
    )


def counts(hook: WebhookProcess) -> tuple[float, float, float]:
    """/mutate reviews, runtime lookups answered from memory, and by a GET."""
    lookups = "dispatch_webhook_runtime_lookups_total"
    return (
        webhook_metric(hook, "dispatch_webhook_reviews_total", 'endpoint="mutate"'),
        webhook_metric(hook, lookups, 'source="memory"'),
        webhook_metric(hook, lookups, 'source="api"'),
    )


def start_without_levers(cp: ControlPlane, namespace: str, dispatch_username: str) -> WebhookProcess:
    """A second webhook as it was before the levers: GET-only RBAC (its watch is refused, so it never
    answers from memory) and no ``created-open`` condition on /mutate."""
    saved = webhook_process.LOOKUP_RULES
    webhook_process.LOOKUP_RULES = [
        {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainingruntimes"], "verbs": ["get"]}
    ]
    try:
        hook = start_webhook(cp, namespace, dispatch_username, Path(tempfile.mkdtemp()))
    finally:
        webhook_process.LOOKUP_RULES = saved
    hook.unregister()
    for doc in hook.configurations:
        for h in doc["webhooks"]:
            h["matchConditions"] = [c for c in h["matchConditions"] if c["name"] != "created-open"]
        cp.admin.create(doc)
    return hook


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
        subprocess.run(["go", "build", "-o", binary, "."], cwd=ROOT / "benchmarks" / "allow_all_go", env=env,
                       check=True, timeout=600)  # fmt: skip
        argv = [binary, "--address", f"127.0.0.1:{port}", *tls]
    else:
        argv = [sys.executable, "-m", "benchmarks.allow_all_webhook", "--port", str(port), *tls]
    process = cp.supervisor.start(f"allow-all-{'go-' if go else ''}{namespace}", argv)
    return webhook_process.register(cp, namespace, process, port, ca_pem, "allow-all")


def measure(who: Principals, namespaces: dict[str, str], creates: int, first: int) -> dict[str, list[float]]:
    """``creates`` (+ warm-up) creates per arm, interleaved with the order rotating; ms each."""
    steps = range(first, first + creates + WARMUP)
    bodies: dict[str, list[dict[str, Any]]] = {}
    for arm, namespace in namespaces.items():
        subs = [submission(namespace=namespace, n=n) for n in steps]
        for sub in subs:  # the runtime copies are not what is measured
            who.dispatch.create(build_runtime_copy(sub, runtime()))
        bodies[arm] = [build_trainjob(sub, runtime()["spec"]) for sub in subs]
    time.sleep(0.5)  # the webhook's watch has seen them, as it has any copy made a moment before
    timings: dict[str, list[float]] = {arm: [] for arm in namespaces}
    arms = list(namespaces)
    for i in range(len(steps)):
        order = arms[i % len(arms) :] + arms[: i % len(arms)]
        for arm in order:
            started = time.perf_counter()
            who.dispatch.create(bodies[arm][i])
            if i >= WARMUP:
                timings[arm].append((time.perf_counter() - started) * 1000)
    return timings


def run(creates: int, rounds: int) -> None:
    with start_control_plane(new_run_dir()) as cp:
        home = cp.create_namespace("bench")
        who = principals(cp, home)
        namespaces = {arm: cp.create_namespace(f"bench-{i}") for i, arm in enumerate(ARMS[:2])}
        for namespace in namespaces.values():
            grant(cp, namespace, home)
        namespaces["policies + webhook"] = home
        hook = start_webhook(cp, home, who.dispatch_username, Path(tempfile.mkdtemp()))
        old_ns = namespaces["policies + webhook, no levers"] = cp.create_namespace("bench-3")
        grant(cp, old_ns, home)
        old = start_without_levers(cp, old_ns, who.dispatch_username)
        allow_ns = namespaces["policies + allow-all"] = cp.create_namespace("bench-4")
        grant(cp, allow_ns, home)
        allow_all = start_allow_all(cp, allow_ns)
        go_ns = namespaces["policies + allow-all (Go)"] = cp.create_namespace("bench-5")
        grant(cp, go_ns, home)
        allow_go = start_allow_all(cp, go_ns, go=True)
        for doc in policies(who, [namespaces["policies only"], home, old_ns, allow_ns, go_ns]):
            cp.admin.create(doc)
        wait_enforced(who.stranger, home)
        time.sleep(3)  # policies load asynchronously
        results: dict[str, list[list[float]]] = {arm: [] for arm in ARMS}
        before = counts(hook)
        for r in range(rounds):
            timings = measure(who, namespaces, creates, 1 + r * (creates + WARMUP))
            for arm in ARMS:
                results[arm].append(timings[arm])
                t = timings[arm]
                print(
                    f"round {r + 1} {arm:<29} n={len(t):4d}  p50 {percentile(t, 0.5):6.2f} ms  "
                    f"p99 {percentile(t, 0.99):6.2f} ms  mean {statistics.mean(t):6.2f} ms",
                    flush=True,
                )
        mutates, memory, api = (after - b for after, b in zip(counts(hook), before, strict=True))
        old_mutates, old_memory, old_api = counts(old)
        hook.stop()
        old.stop()
        allow_all.stop()
        allow_go.stop()

    print()
    print(
        f"{creates} creates per arm per round (+{WARMUP} warm-up), {rounds} rounds, arms interleaved; "
        f"{platform.node()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; webhook: /mutate called {mutates:.0f} times, runtime "
        f"copies from memory {memory:.0f}, by GET {api:.0f}; without levers: /mutate {old_mutates:.0f}, memory "
        f"{old_memory:.0f}, GET {old_api:.0f}"
    )
    print(f"{'round':<6} {'arm':<29} {'p50 ms':>8} {'p99 ms':>8}   webhook over policies: p50 / p99")
    for r in range(rounds):
        floor = results["policies only"][r]
        for arm in ARMS:
            t = results[arm][r]
            extra = ""
            if arm.startswith("policies + "):
                extra = (
                    f"   {percentile(t, 0.5) - percentile(floor, 0.5):+.2f} ms / "
                    f"{percentile(t, 0.99) - percentile(floor, 0.99):+.2f} ms"
                )
            print(f"{r + 1:<6} {arm:<29} {percentile(t, 0.5):8.2f} {percentile(t, 0.99):8.2f}{extra}")
    pooled = {arm: [x for run_ in results[arm] for x in run_] for arm in ARMS}
    p = {arm: (percentile(v, 0.5), percentile(v, 0.99)) for arm, v in pooled.items()}
    print(
        f"all rounds: nothing {p['nothing'][0]:.2f} / {p['nothing'][1]:.2f} ms, policies only "
        f"{p['policies only'][0]:.2f} / {p['policies only'][1]:.2f} ms, policies + webhook "
        f"{p['policies + webhook'][0]:.2f} / {p['policies + webhook'][1]:.2f} ms (p50 / p99); the webhook adds "
        f"{p['policies + webhook'][0] - p['policies only'][0]:+.2f} ms at p50 and "
        f"{p['policies + webhook'][1] - p['policies only'][1]:+.2f} ms at p99; without the levers "
        f"{p['policies + webhook, no levers'][0] - p['policies only'][0]:+.2f} ms and "
        f"{p['policies + webhook, no levers'][1] - p['policies only'][1]:+.2f} ms; a webhook that allows "
        f"everything {p['policies + allow-all'][0] - p['policies only'][0]:+.2f} ms and "
        f"{p['policies + allow-all'][1] - p['policies only'][1]:+.2f} ms; dispatch's over that one "
        f"{p['policies + webhook'][0] - p['policies + allow-all'][0]:+.2f} ms and "
        f"{p['policies + webhook'][1] - p['policies + allow-all'][1]:+.2f} ms; in Go "
        f"{p['policies + allow-all (Go)'][0] - p['policies only'][0]:+.2f} ms and "
        f"{p['policies + allow-all (Go)'][1] - p['policies only'][1]:+.2f} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creates", type=int, default=300, help=f"measured creates per arm per round (+{WARMUP})")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (fresh objects each)")
    args = parser.parse_args()
    if not 1 <= args.creates <= 5000 or not 1 <= args.rounds <= 20:
        parser.error("--creates must be 1..5000 and --rounds 1..20")
    run(args.creates, args.rounds)
