"""The real webhook process's memory with N runtime copies in a real API server (tier A), before and after.

    .venv/bin/python -m benchmarks.webhook_memory_e2e [--copies 10000] [--code DIR ...]   (from the repository root)

Starts etcd and kube-apiserver (tier A), creates N runtime copies (benchmarks/webhook_memory_bench.py's, of
realistic size) in one namespace as dispatch's field manager, then for each ``--code`` checkout in turn
(default: this one; a ``git worktree`` of an older commit gives the "before") starts ``python -m webhook
serve`` from it, under a ServiceAccount that may get, list and watch TrainingRuntimes, as the chart runs it:
the same copies, the same API server. Once its watch has listed them all (a review of a TrainJob create
whose lookup is answered from memory, counted by ``dispatch_webhook_runtime_lookups_total{source="memory"}``)
it reads the process's VmRSS and VmHWM, stops it, and starts the next. Also reported: the process idle
before the copies exist (the first checkout's). Not registered with the API server: nothing is admitted.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from benchmarks.webhook_memory_bench import copy_json
from harness.async_client import api_client
from harness.cluster import ControlPlane, free_port, new_run_dir, start_control_plane
from harness.webhook_process import LOOKUP_RULES, serving_files

DISPATCH = "bench-dispatch"
CONCURRENCY = 16


def body(i: int, namespace: str) -> dict[str, Any]:
    """Copy ``i`` as dispatch creates it: what the API server sets itself is left out."""
    obj = json.loads(copy_json(i))
    meta = obj["metadata"]
    for key in ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"):
        meta.pop(key, None)
    meta["namespace"] = namespace
    return obj  # type: ignore[no-any-return]


async def create_copies(cp: ControlPlane, namespace: str, n: int) -> float:
    from kubernetes_asyncio import client

    started = time.monotonic()
    async with api_client(cp.admin_credentials) as api:
        custom = client.CustomObjectsApi(api)
        semaphore = asyncio.Semaphore(CONCURRENCY)

        async def one(i: int) -> None:
            async with semaphore:
                await custom.create_namespaced_custom_object(
                    "trainer.kubeflow.org", "v1alpha1", namespace, "trainingruntimes", body(i, namespace),
                    field_manager="dispatch.phpboyscout.uk/adapter", _preload_content=False,
                )  # fmt: skip

        for start in range(0, n, 1000):
            await asyncio.gather(*(one(i) for i in range(start, min(n, start + 1000))))
            print(f"  created {min(n, start + 1000):,} copies in {time.monotonic() - started:.0f}s", flush=True)
    return time.monotonic() - started


class Webhook:
    def __init__(self, cp: ControlPlane, code: str, kubeconfig: Path, workdir: Path, ca_pem: bytes) -> None:
        self.port = free_port()
        self.ca = ssl.create_default_context(cadata=ca_pem.decode())
        argv = [sys.executable, "-m", "webhook", "serve", "--bind-address", "127.0.0.1", "--port", str(self.port),
                "--tls-cert-file", str(workdir / "tls.crt"), "--tls-private-key-file", str(workdir / "tls.key"),
                "--config", str(workdir / "config.yaml"), "--kubeconfig", str(kubeconfig)]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": code}
        self.log = (workdir / f"webhook-{self.port}.log").open("w")
        self.proc = subprocess.Popen(argv, cwd=code, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def status(self, key: str) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
        raise KeyError(key)

    def _get(self, path: str, data: bytes | None = None) -> str:
        req = urllib.request.Request(f"https://127.0.0.1:{self.port}{path}", data=data)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, context=self.ca, timeout=10) as resp:
            return str(resp.read().decode())

    def memory_lookups(self) -> float:
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in self._get("/metrics").splitlines()
            if line.startswith("dispatch_webhook_runtime_lookups_total{") and 'source="memory"' in line
        )

    def wait_synced(self, namespace: str, last: int, timeout: float) -> float:
        """Seconds until a review's lookup of the last copy is answered from memory (the LIST is done)."""
        name = json.loads(copy_json(last))["metadata"]["name"]
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "bench", "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
            "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
            "name": name, "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": DISPATCH}, "object": {"metadata": {"name": name, "namespace": namespace},
                                                         "spec": {"runtimeRef": {"name": name}}}}}  # fmt: skip
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the webhook exited with {self.proc.returncode}")
            try:
                self._get("/validate", json.dumps(review).encode())
                if self.memory_lookups() >= 1:
                    return time.monotonic() - started
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError("the webhook's watch did not list the copies in time")

    def wait_ready(self, timeout: float) -> None:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            try:
                if self._get("/readyz") == "ok":
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError("the webhook did not become ready")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--copies", type=int, default=10_000)
    parser.add_argument("--code", nargs="+", default=[str(Path(__file__).resolve().parents[1])])
    args = parser.parse_args()
    print(f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.2f}", flush=True)
    run_dir = new_run_dir()
    cp = start_control_plane(run_dir)
    try:
        namespace = cp.create_namespace("wmem")
        workdir = run_dir / "webhook"
        ca_pem = serving_files(workdir, "dispatch-webhook")
        (workdir / "config.yaml").write_text(yaml.safe_dump({"dispatch": {"usernames": [DISPATCH]}}))
        cp.admin.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                         "metadata": {"name": "webhook-lookup"}, "rules": LOOKUP_RULES})  # fmt: skip
        cp.ensure_service_account(namespace, "dispatch-webhook")
        cp.admin.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                         "metadata": {"name": "webhook-lookup"},
                         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                     "name": "webhook-lookup"},
                         "subjects": [{"kind": "ServiceAccount", "name": "dispatch-webhook",
                                       "namespace": namespace}]})  # fmt: skip
        kubeconfig = cp.service_account_kubeconfig(namespace, "dispatch-webhook")
        idle = Webhook(cp, args.code[0], kubeconfig, workdir, ca_pem)
        try:
            idle.wait_ready(60)
            time.sleep(5)
            print(f"idle, no copies ({args.code[0]}): VmRSS {idle.status('VmRSS') / 1024:.1f} MiB, "
                  f"VmHWM {idle.status('VmHWM') / 1024:.1f} MiB", flush=True)  # fmt: skip
        finally:
            idle.stop()
        seconds = asyncio.run(create_copies(cp, namespace, args.copies))
        print(f"{args.copies:,} copies created in {seconds:.0f}s, load {os.getloadavg()[0]:.2f}", flush=True)
        for code in args.code:
            hook = Webhook(cp, code, kubeconfig, workdir, ca_pem)
            try:
                synced = hook.wait_synced(namespace, args.copies - 1, 900)
                listed = (hook.status("VmRSS"), hook.status("VmHWM"))
                time.sleep(10)
                print(f"{code}: listed in {synced:.1f}s; VmRSS {listed[0] / 1024:.1f} MiB (peak VmHWM "
                      f"{listed[1] / 1024:.1f} MiB), 10 s later {hook.status('VmRSS') / 1024:.1f} MiB; "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
            finally:
                hook.stop()
        print(f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        cp.stop()


if __name__ == "__main__":
    main()
