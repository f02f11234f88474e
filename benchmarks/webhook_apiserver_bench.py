"""What dispatch's webhook adds to a TrainJob create through the real API server (tier A), next to its floor.

Three arms, measured in the same run on the same cluster, in interleaved rounds (the machine is shared, so
absolute times drift; compare arms within a round):

1. **nothing**: no webhook configuration and no admission policy of ours.
2. **policies only**: the ValidatingAdmissionPolicies (webhook/policies.py), which the API server evaluates
   in process. This is the floor the webhook is held to.
3. **policies + webhook**: the policies and the webhook configurations (webhook/configurations.py), with
   the webhook a separate process on loopback, as the chart runs it (runtime copies from its watch,
   falling back to a GET; /mutate skipped by ``matchConditions`` when the TrainJob is created closed).

Each measured create is a canonical dispatch TrainJob (its runtime copy made beforehand, not measured),
written by dispatch's ServiceAccount, as Start makes it.

    .venv/bin/python -m benchmarks.webhook_apiserver_bench [--creates 200] [--rounds 3]   (repository root)
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import secrets
import ssl
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contract.trainjob import build_runtime_copy, build_trainjob
from harness.cluster import ControlPlane, new_run_dir, start_control_plane
from tests.cluster.principals import Principals, principals
from tests.cluster.webhook_process import WebhookProcess, start_webhook, wait_enforced
from tests.unit.fixtures import runtime, submission
from webhook.config import Config
from webhook.config import Principals as ConfigPrincipals
from webhook.policies import admission_policies

WARMUP = 20
ARMS = ("nothing", "policies only", "policies + webhook")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def policies(who: Principals, namespace: str) -> list[dict[str, Any]]:
    """The chart's policies, renamed for this run and bound to its namespace alone."""
    config = Config(dispatch=ConfigPrincipals(usernames=(who.dispatch_username,)))
    suffix = secrets.token_hex(3)
    docs = admission_policies(config, namespace="dispatch-system")
    for doc in docs:
        doc["metadata"]["name"] += f"-{suffix}"
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            doc["spec"]["policyName"] += f"-{suffix}"
            doc["spec"]["matchResources"] = {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            }
    return docs


def mutate_calls(hook: WebhookProcess) -> float:
    """How many /mutate reviews the webhook has answered (its own metric)."""
    context = ssl.create_default_context(cadata=hook.ca_pem.decode())
    with urllib.request.urlopen(f"https://127.0.0.1:{hook.port}/metrics", context=context, timeout=5) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("dispatch_webhook_reviews_total{") and 'endpoint="mutate"' in line
    )


class Arms:
    """Switches between the arms: what is registered with the API server."""

    def __init__(self, cp: ControlPlane, who: Principals, namespace: str, hook: WebhookProcess) -> None:
        self.cp, self.who, self.namespace, self.hook = cp, who, namespace, hook
        self.policies = policies(who, namespace)
        self.current = "policies + webhook"  # start_webhook registered the configurations

    def _set(self, docs: list[dict[str, Any]], on: bool) -> None:
        for doc in docs:
            if on:
                self.cp.admin.create(doc)
            else:
                self.cp.admin.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])

    def switch(self, arm: str) -> None:
        want_policies, want_webhook = arm != "nothing", arm == "policies + webhook"
        have_policies, have_webhook = self.current != "nothing", self.current == "policies + webhook"
        if want_policies != have_policies:
            self._set(self.policies, want_policies)
        if want_webhook != have_webhook:
            self._set(self.hook.configurations, want_webhook)
        self.current = arm
        if want_webhook and arm != "nothing":
            wait_enforced(self.who.stranger, self.namespace)
        time.sleep(3)  # configurations and policies load asynchronously (and their removal too)


def measure(who: Principals, namespace: str, creates: int, n: Callable[[], int]) -> list[float]:
    subs = [submission(namespace=namespace, n=n()) for _ in range(creates + WARMUP)]
    for sub in subs:  # the runtime copies are not what is measured
        who.dispatch.create(build_runtime_copy(sub, runtime()))
    time.sleep(0.5)  # and the webhook's watch has seen them, as it has any copy made a moment before
    bodies = [build_trainjob(sub, runtime()["spec"]) for sub in subs]
    for body in bodies[:WARMUP]:  # warm connections and caches
        who.dispatch.create(body)
    timings = []
    for body in bodies[WARMUP:]:
        started = time.perf_counter()
        who.dispatch.create(body)
        timings.append((time.perf_counter() - started) * 1000)
    return timings


def run(creates: int, rounds: int) -> None:
    with start_control_plane(new_run_dir()) as cp:
        namespace = cp.create_namespace("bench")
        who = principals(cp, namespace)
        hook = start_webhook(cp, namespace, who.dispatch_username, Path(tempfile.mkdtemp()))
        wait_enforced(who.stranger, namespace)
        arms = Arms(cp, who, namespace, hook)
        counter = iter(range(1, 999_999))
        results: dict[str, list[list[float]]] = {arm: [] for arm in ARMS}
        mutates = 0.0
        for r in range(rounds):
            for arm in ARMS if r % 2 == 0 else tuple(reversed(ARMS)):
                arms.switch(arm)
                before = mutate_calls(hook) if arm == "policies + webhook" else 0.0
                timings = measure(who, namespace, creates, lambda: next(counter))
                if arm == "policies + webhook":
                    mutates += mutate_calls(hook) - before
                results[arm].append(timings)
                print(
                    f"round {r + 1} {arm:<20} n={len(timings):4d}  p50 {percentile(timings, 0.5):6.2f} ms  "
                    f"p99 {percentile(timings, 0.99):6.2f} ms  mean {statistics.mean(timings):6.2f} ms",
                    flush=True,
                )
        arms.switch("nothing")
        hook.stop()

    print()
    print(
        f"{creates} creates per arm per round, {rounds} rounds; {platform.node()}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.2f}; {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; /mutate called "
        f"{mutates:.0f} times for {creates * rounds + WARMUP * rounds} webhook-arm creates"
    )
    print(f"{'round':<6} {'arm':<20} {'p50 ms':>8} {'p99 ms':>8}   webhook over policies: p50 / p99")
    for r in range(rounds):
        floor = results["policies only"][r]
        for arm in ARMS:
            t = results[arm][r]
            extra = ""
            if arm == "policies + webhook":
                extra = (
                    f"   {percentile(t, 0.5) - percentile(floor, 0.5):+.2f} ms / "
                    f"{percentile(t, 0.99) - percentile(floor, 0.99):+.2f} ms"
                )
            print(f"{r + 1:<6} {arm:<20} {percentile(t, 0.5):8.2f} {percentile(t, 0.99):8.2f}{extra}")
    pooled = {arm: [x for run_ in results[arm] for x in run_] for arm in ARMS}
    p = {arm: (percentile(v, 0.5), percentile(v, 0.99)) for arm, v in pooled.items()}
    print(
        f"all rounds: nothing {p['nothing'][0]:.2f} / {p['nothing'][1]:.2f} ms, policies only "
        f"{p['policies only'][0]:.2f} / {p['policies only'][1]:.2f} ms, policies + webhook "
        f"{p['policies + webhook'][0]:.2f} / {p['policies + webhook'][1]:.2f} ms (p50 / p99); the webhook adds "
        f"{p['policies + webhook'][0] - p['policies only'][0]:+.2f} ms at p50 and "
        f"{p['policies + webhook'][1] - p['policies only'][1]:+.2f} ms at p99"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creates", type=int, default=200, help=f"measured creates per arm per round (+{WARMUP})")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three arms, interleaved")
    args = parser.parse_args()
    if not 1 <= args.creates <= 5000 or not 1 <= args.rounds <= 20:
        parser.error("--creates must be 1..5000 and --rounds 1..20")
    run(args.creates, args.rounds)
