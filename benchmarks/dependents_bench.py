"""What the policy ``dispatch-k8s-dependents`` (webhook/dependents.py) costs the writes that are not about it, through
the real API server (tier A).

The policy matches every create and update of every namespaced resource, so every such write in a job namespace
meets it; its match condition is meant to send away at once every write that does not add a blocking owner reference
to a name starting ``dj-`` or ``trainjob-dj-``. Two arms, each a namespace of one API server: **without** (the policy
exists but is not bound there: the API server only matches its rules) and **with** (bound, as the chart binds it).
The arms are *interleaved*, each step writing once in each, the order rotating, so both see the same load at the
same moment (the machine is shared: compare arms, not runs). The writes, by the admin:

* **create**: a ConfigMap with no owner reference;
* **update**: a label on such a ConfigMap (a merge patch);
* **create, unrelated owner**: a ConfigMap with a blocking owner reference to a Deployment ``web``;
* **create, loose reference**: a ConfigMap with a non-blocking owner reference to a TrainJob named as dispatch's;
* **create, judged**: a ConfigMap with a blocking owner reference to a ConfigMap named as dispatch's, which passes
  the match condition and is judged (and admitted: no dispatch kind), the most any admitted write pays;
* **create pod**: an ordinary pod (ten variables, a volume), no owner reference: a larger typed object, which the
  API server converts to unstructured form for the policy's match condition.

Beside the latencies, the API server's own time in its ValidatingAdmissionPolicy admission plugin
(``apiserver_admission_controller_admission_duration_seconds``), per create, with each arm's creates run apart.

    .venv/bin/python -m benchmarks.dependents_bench [--writes 300] [--rounds 3]   (repository root)
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import secrets
import sys
import time
from collections.abc import Callable
from typing import Any

from harness.cluster import ControlPlane, new_run_dir, start_control_plane
from harness.kube_http import ApiError, KubeHttp
from webhook.config import Config
from webhook.dependents import dependents_policy

WARMUP = 20
WITHOUT, WITH = "without", "with"
ARMS = (WITHOUT, WITH)
MERGE = "application/merge-patch+json"
DISPATCH_NAME = "dj-01m8teswbywsp6rmqspyn2dsqq-s1"
UID = "00000000-0000-0000-0000-000000000001"
OWNERS: dict[str, list[dict[str, Any]]] = {
    "create": [],
    "create, unrelated owner": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": UID, "blockOwnerDeletion": True}
    ],
    "create, loose reference": [
        {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": DISPATCH_NAME, "uid": UID}
    ],
    "create, judged": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": DISPATCH_NAME, "uid": UID, "blockOwnerDeletion": True}
    ],
}
OPERATIONS = ("create", "update", "create, unrelated owner", "create, loose reference", "create, judged", "create pod")
PLUGIN = (
    'apiserver_admission_controller_admission_duration_seconds_{}{{name="ValidatingAdmissionPolicy",operation="CREATE"'
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def configmap(namespace: str, refs: list[dict[str, Any]]) -> dict[str, Any]:
    meta = {"name": f"b-{secrets.token_hex(5)}", "namespace": namespace, "ownerReferences": refs}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


def pod(namespace: str) -> dict[str, Any]:
    """An ordinary pod, as a Deployment's would be, no owner reference: a typed object larger than a ConfigMap."""
    container = {
        "name": "app",
        "image": "registry.invalid/app:1",
        "args": ["serve", "--port=8080"],
        "env": [{"name": f"VAR_{i}", "value": "x" * 20} for i in range(10)],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
        "ports": [{"containerPort": 8080}],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    meta = {"name": f"p-{secrets.token_hex(5)}", "namespace": namespace, "labels": {"app": "web", "tier": "front"}}
    spec = {"containers": [container], "volumes": [{"name": "data", "emptyDir": {}}], "restartPolicy": "Always"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}  # fmt: skip


def interleaved(steps: int, write: Callable[[str, int], Any]) -> dict[str, list[float]]:
    """``write(arm, i)`` for each step i in each arm, the order of the arms rotating; ms each, warm-up left out."""
    timings: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for i in range(steps):
        for arm in ARMS[i % 2 :] + ARMS[: i % 2]:
            started = time.perf_counter()
            write(arm, i)
            if i >= WARMUP:
                timings[arm].append((time.perf_counter() - started) * 1000)
    return timings


def measure(admin: KubeHttp, namespaces: dict[str, str], operation: str, steps: int) -> dict[str, list[float]]:
    paths = {arm: admin.collection_path("v1", "ConfigMap", ns) for arm, ns in namespaces.items()}
    if operation == "update":
        targets = {arm: [admin.create(configmap(ns, [])) for _ in range(steps)] for arm, ns in namespaces.items()}

        def update(arm: str, i: int) -> None:
            patch = {"metadata": {"labels": {"touched": str(i)}}}
            admin.request("PATCH", admin.object_path(targets[arm][i]), patch, content_type=MERGE)

        return interleaved(steps, update)
    if operation == "create pod":
        pods = {arm: admin.collection_path("v1", "Pod", ns) for arm, ns in namespaces.items()}
        specs = {arm: [pod(ns) for _ in range(steps)] for arm, ns in namespaces.items()}
        return interleaved(steps, lambda arm, i: admin.request("POST", pods[arm], specs[arm][i]))
    bodies = {arm: [configmap(ns, OWNERS[operation]) for _ in range(steps)] for arm, ns in namespaces.items()}
    return interleaved(steps, lambda arm, i: admin.request("POST", paths[arm], bodies[arm][i]))


def plugin_seconds(admin: KubeHttp) -> tuple[float, float]:
    """The ValidatingAdmissionPolicy plugin's summed seconds and count over admitted creates, so far."""
    text = str(admin.request("GET", "/metrics"))
    total = {"sum": 0.0, "count": 0.0}
    for what in total:
        prefix = PLUGIN.format(what)
        for line in text.splitlines():
            if line.startswith(prefix) and 'rejected="false"' in line and 'type="validate"' in line:
                total[what] += float(line.rsplit(" ", 1)[1])
    return total["sum"], total["count"]


def plugin_per_create(admin: KubeHttp, namespace: str, creates: int) -> float:
    """Mean microseconds in the plugin per create of an unrelated ConfigMap, with only this arm writing."""
    path = admin.collection_path("v1", "ConfigMap", namespace)
    seconds, count = plugin_seconds(admin)
    for _ in range(creates):
        admin.request("POST", path, configmap(namespace, []))
    seconds2, count2 = plugin_seconds(admin)
    return (seconds2 - seconds) / max(count2 - count, 1) * 1e6


def bind(cp: ControlPlane, namespace: str) -> None:
    """The policy, bound to ``namespace`` alone; returns once it refuses a stranger's pin there."""
    policy = dependents_policy(Config())
    name = policy["metadata"]["name"]
    selector = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    cp.admin.create(policy)
    spec = {"policyName": name, "validationActions": ["Deny"], "matchResources": {"namespaceSelector": selector}}
    binding = {"metadata": {"name": name}, "spec": spec}
    cp.admin.create(
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding"} | binding
    )
    pin = [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": DISPATCH_NAME, "uid": UID,
            "blockOwnerDeletion": True}]  # fmt: skip
    path = cp.admin.collection_path("v1", "ConfigMap", namespace)
    deadline = time.monotonic() + 30
    while True:
        try:
            cp.admin.request("POST", path, configmap(namespace, pin), query={"dryRun": "All"})
        except ApiError as err:
            if err.status == 403:
                return
            raise
        if time.monotonic() > deadline:
            raise SystemExit("the policy was not enforced within 30 s")
        time.sleep(0.2)


def _row(label: str, t: list[float], floor: list[float] | None) -> str:
    extra = ""
    if floor is not None:
        extra = (
            f"   {percentile(t, 0.5) - percentile(floor, 0.5):+6.2f} / "
            f"{percentile(t, 0.99) - percentile(floor, 0.99):+6.2f}"
        )
    return f"{label:<44} {len(t):5d} {percentile(t, 0.5):8.2f} {percentile(t, 0.99):8.2f}{extra}"


def report(results: dict[str, dict[str, list[list[float]]]], rounds: int) -> None:
    print(f"\n{'operation, arm (round)':<44} {'n':>5} {'p50 ms':>8} {'p99 ms':>8}   with over without: p50 / p99")
    for operation in OPERATIONS:
        for r in range(rounds):
            floor = results[operation][WITHOUT][r]
            for arm in ARMS:
                print(_row(f"{operation}, {arm} ({r + 1})", results[operation][arm][r], floor if arm == WITH else None))
        pooled = {arm: [x for run_ in results[operation][arm] for x in run_] for arm in ARMS}
        for arm in ARMS:
            print(_row(f"{operation}, {arm} (all)", pooled[arm], pooled[WITHOUT] if arm == WITH else None))


def run(writes: int, rounds: int) -> None:
    steps = writes + WARMUP
    with start_control_plane(new_run_dir()) as cp:
        admin = cp.admin
        namespaces = {WITHOUT: cp.create_namespace("deps-0"), WITH: cp.create_namespace("deps-1")}
        for namespace in namespaces.values():
            cp.ensure_service_account(namespace, "default")  # no controller makes it in tier A; pods need it
        bind(cp, namespaces[WITH])
        time.sleep(2)
        results: dict[str, dict[str, list[list[float]]]] = {op: {arm: [] for arm in ARMS} for op in OPERATIONS}
        plugin: dict[str, list[float]] = {arm: [] for arm in ARMS}
        for r in range(rounds):
            for operation in OPERATIONS:
                for arm, t in measure(admin, namespaces, operation, steps).items():
                    results[operation][arm].append(t)
            for arm in ARMS:
                plugin[arm].append(plugin_per_create(admin, namespaces[arm], writes))
            print(f"round {r + 1} done", flush=True)
    print(
        f"\n{writes} writes per arm per operation per round (+{WARMUP} warm-up), {rounds} rounds, arms interleaved; "
        f"{platform.node()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC"
    )
    report(results, rounds)
    print("\nthe API server's ValidatingAdmissionPolicy plugin, per create of an unrelated ConfigMap, each arm alone:")
    for arm in ARMS:
        print(f"  {arm:<8} " + "  ".join(f"{us:7.1f} µs" for us in plugin[arm]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=300, help=f"measured writes per arm per operation (+{WARMUP})")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (fresh objects each)")
    args = parser.parse_args()
    if not 1 <= args.writes <= 5000 or not 1 <= args.rounds <= 20:
        sys.exit("--writes must be 1..5000 and --rounds 1..20")
    run(args.writes, args.rounds)
