"""Benchmark of dispatch's admission webhook: POST /validate for a realistic dispatch TrainJob (~10 KB).

Two measurements, printed as tables:

1. In-process cost of one review, split into decode (json.loads + parse_review), decide (lookups_needed +
   validate, the lookup answered from memory) and respond (response + json.dumps): a perf_counter_ns loop.
2. HTTPS keep-alive from a second process: this process runs the real server (webhook.server.serving,
   TLS from certs/pki.py, the runtime lookup answered from memory so the API server is not measured); a
   client subprocess with C keep-alive connections sends reviews for a bounded count and time and reports
   reviews/s and latency percentiles. With two CPUs or more the server is pinned to CPU 0 and the client
   to CPU 1, so the server's figures are for one core. The server's CPU time per review (TLS, HTTP and
   handler included) is measured too: its inverse is the capacity of one core.

Loopback only. Run from the repository root:  .venv/bin/python benchmarks/webhook_bench.py
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import socket
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CLIENT_CPU, SERVER_CPU = 1, 0
WARMUP = 300  # requests per run not counted: connection set-up, first-call costs


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


# --- the review --------------------------------------------------------------------------------------------


def realistic_review() -> tuple[dict[str, Any], dict[str, Any]]:
    """A CREATE of a dispatch TrainJob by dispatch's agent, as the API server sends it, and its runtime copy."""
    from contract.runtime_patch import Credential, Publish
    from contract.trainjob import Submission, build_runtime_copy, build_trainjob
    from webhook.config import DEFAULT_DISPATCH_USERNAME

    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "torch-distributed", "resourceVersion": "4711", "uid": "rt-uid"},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                "spec": {
                                    "backoffLimit": 0,
                                    "template": {
                                        "spec": {
                                            "restartPolicy": "Never",
                                            "containers": [{"name": "node", "image": "pytorch/pytorch:2.5.1"}],
                                        }
                                    },
                                },
                            },
                        }
                    ]
                }
            },
        },
    }
    submission = Submission(
        job_id="01ARZ3NDEKTSV4RRFFQ69G5FAV",
        n=3,
        g=1,
        attempt=2,
        namespace="team-a",
        image="registry.example/train:1",
        command=["python", "train.py"],
        args=["--epochs", "3", "--config", "configs/llama-8b.yaml"],
        env={"LR": "0.1", "BATCH": "32", "WANDB_PROJECT": "llama", "HF_HOME": "/cache/hf"},
        workdir="/workspace",
        credentials=[Credential("s3-creds", "/var/run/creds")],
        publish=Publish(image="registry.example/publish:1"),
        queue="team-a-queue",
    )
    trainjob = build_trainjob(submission, runtime["spec"])
    gvk = {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"}
    gvr = {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"}
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0df28fbd-5f5f-11e8-bc74-36e6bb280816",
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": trainjob["metadata"]["name"],
            "namespace": submission.namespace,
            "operation": "CREATE",
            "userInfo": {
                "username": DEFAULT_DISPATCH_USERNAME,
                "uid": "7d3d9b5e-3c3a-4b8e-9d8e-0f4c2b1a5e6d",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:dispatch-system", "system:authenticated"],
                "extra": {"authentication.kubernetes.io/pod-name": ["dispatch-k8s-agent-7c9f8b6d5-x2x4q"]},
            },
            "object": trainjob,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions", "fieldManager": "dispatch"},
        },
    }
    return review, build_runtime_copy(submission, runtime)


# --- in-process --------------------------------------------------------------------------------------------


def verdict_of(review: dict[str, Any], runtime_copy: dict[str, Any]) -> str:
    """What the rules answer for this review, so the report says which path was measured."""
    from webhook import admission
    from webhook.config import Config
    from webhook.review import Lookups, parse_review

    request = parse_review(review)
    wanted = admission.lookups_needed(request)
    verdict = admission.validate(request, Config(), Lookups(runtimes=dict.fromkeys(wanted, runtime_copy)))
    outcome = "allowed" if verdict.allowed else f"denied by {verdict.rule}: {verdict.message}"
    return f"{outcome}; {len(wanted)} runtime lookup(s), answered from memory"


def in_process(body: bytes, runtime_copy: dict[str, Any], calls: int) -> dict[str, list[float]]:
    from webhook import admission
    from webhook.config import Config
    from webhook.review import Lookups, parse_review, response

    config = Config()
    stages: dict[str, list[float]] = {"decode": [], "decide": [], "respond": [], "total": []}
    clock = time.perf_counter_ns
    for i in range(calls + WARMUP):
        t0 = clock()
        request = parse_review(json.loads(body))
        t1 = clock()
        wanted = admission.lookups_needed(request)
        verdict = admission.validate(request, config, Lookups(runtimes=dict.fromkeys(wanted, runtime_copy)))
        t2 = clock()
        answer = json.dumps(response(request, verdict), separators=(",", ":")).encode()
        t3 = clock()
        assert answer
        if i >= WARMUP:
            for stage, ns in zip(stages, (t1 - t0, t2 - t1, t3 - t2, t3 - t0), strict=True):
                stages[stage].append(ns / 1000)
    return stages


# --- HTTPS: the client (second process) --------------------------------------------------------------------


async def _client(args: argparse.Namespace, body: bytes) -> dict[str, Any]:
    uid = json.loads(body)["request"]["uid"].encode()
    head = f"POST /validate?timeout=5s HTTP/1.1\r\nHost: {args.host}\r\nContent-Type: application/json\r\n"
    request = f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body
    context = ssl.create_default_context(cafile=args.ca)
    tickets = {"left": args.requests + WARMUP}
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.monotonic() + args.seconds
    counted_from: list[float] = []

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(args.host, args.port, ssl=context)
        try:
            while tickets["left"] > 0 and time.monotonic() < deadline:
                tickets["left"] -= 1
                warm = tickets["left"] >= args.requests
                t0 = time.perf_counter_ns()
                writer.write(request)
                status = await reader.readline()
                length = 0
                while (line := await reader.readline()) != b"\r\n":
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                answer = await reader.readexactly(length)
                t1 = time.perf_counter_ns()
                if not status.startswith(b"HTTP/1.1 200") or uid not in answer:
                    errors.append(status.decode().strip())
                elif not warm:
                    if not counted_from:
                        counted_from.append(time.perf_counter())
                    latencies.append((t1 - t0) / 1e6)
        finally:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    elapsed = time.perf_counter() - counted_from[0] if counted_from else float("nan")
    return {"latencies_ms": latencies, "errors": errors, "elapsed": elapsed}


def client_main(args: argparse.Namespace) -> None:
    if args.pin is not None:
        os.sched_setaffinity(0, {args.pin})
    print(json.dumps(asyncio.run(_client(args, Path(args.body).read_bytes()))))


# --- HTTPS: the server (this process) ----------------------------------------------------------------------


async def https_runs(
    body_file: Path, ca_file: Path, tls_dir: Path, runtime_copy: dict[str, Any], args: argparse.Namespace
) -> list[dict[str, Any]]:
    from serving.tls import ReloadingServerContext
    from webhook.config import Config
    from webhook.server import Webhook, serving

    async def lookup(namespace: str, name: str) -> dict[str, Any]:
        return runtime_copy

    tls = ReloadingServerContext(tls_dir / "tls.crt", tls_dir / "tls.key")
    webhook = Webhook(Config(), tls, lookup=lookup)
    results = []
    async with serving(webhook, "127.0.0.1", 0) as port:
        for concurrency in args.concurrency:
            command = [
                sys.executable, __file__, "--client", "--host", "127.0.0.1", "--port", str(port),
                "--ca", str(ca_file), "--body", str(body_file), "--concurrency", str(concurrency),
                "--requests", str(args.requests), "--seconds", str(args.seconds),
            ]  # fmt: skip
            if args.pinned:
                command += ["--pin", str(CLIENT_CPU)]
            cpu_before, served_before = time.process_time(), _served(webhook)
            process = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE)
            stdout, _ = await process.communicate()
            cpu = time.process_time() - cpu_before
            served = _served(webhook) - served_before
            run = json.loads(stdout)
            run.update(concurrency=concurrency, server_cpu=cpu, served=served)
            results.append(run)
    return results


def _served(webhook: Any) -> int:
    return sum(webhook.metrics.reviews.values())


# --- report ------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20000, help="counted requests per HTTPS run")
    parser.add_argument("--seconds", type=float, default=20.0, help="time bound of each HTTPS run")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--calls", type=int, default=20000, help="in-process calls")
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--host", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ca", help=argparse.SUPPRESS)
    parser.add_argument("--body", help=argparse.SUPPRESS)
    parser.add_argument("--pin", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        args.concurrency = args.concurrency[0]
        client_main(args)
        return

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from certs import pki

    args.pinned = (os.cpu_count() or 1) >= 2 and hasattr(os, "sched_setaffinity")
    if args.pinned:
        os.sched_setaffinity(0, {SERVER_CPU})

    review, runtime_copy = realistic_review()
    body = json.dumps(review).encode()
    stages = in_process(body, runtime_copy, args.calls)

    with tempfile.TemporaryDirectory(prefix="webhook-bench-") as tmp:
        tmp_dir = Path(tmp)
        ca = pki.make_ca("bench-ca")
        leaf = pki.make_serving_cert(ca, "bench", ip_addresses=["127.0.0.1"])
        (tmp_dir / "ca.crt").write_bytes(ca.cert_pem)
        (tmp_dir / "tls.crt").write_bytes(leaf.cert_pem)
        (tmp_dir / "tls.key").write_bytes(leaf.key_pem)
        (tmp_dir / "review.json").write_bytes(body)
        runs = asyncio.run(https_runs(tmp_dir / "review.json", tmp_dir / "ca.crt", tmp_dir, runtime_copy, args))

    report(args, body, verdict_of(review, runtime_copy), stages, runs)


def report(
    args: argparse.Namespace, body: bytes, verdict: str, stages: dict[str, list[float]], runs: list[dict[str, Any]]
) -> None:
    import aiohttp

    print(f"dispatch webhook benchmark, {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}")
    print(
        f"host {socket.gethostname()}: {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(f"Python {platform.python_version()}, {ssl.OPENSSL_VERSION}, aiohttp {aiohttp.__version__}")
    print(f"review: CREATE of a dispatch TrainJob by dispatch's agent, {len(body):,} bytes of JSON")
    print(f"verdict: {verdict}")
    print()
    print(f"In-process, {args.calls:,} calls (after {WARMUP} warm-up), one thread")
    print(f"{'stage':<44}{'mean µs':>10}{'p50 µs':>10}{'p99 µs':>10}")
    names = {
        "decode": "decode (json.loads + parse_review)",
        "decide": "decide (lookups_needed + validate)",
        "respond": "respond (response + json.dumps)",
        "total": "total",
    }
    for stage, values in stages.items():
        ordered = sorted(values)
        mean = statistics.fmean(values)
        print(f"{names[stage]:<44}{mean:>10.1f}{percentile(ordered, 50):>10.1f}{percentile(ordered, 99):>10.1f}")
    print(f"=> {1e6 / statistics.fmean(stages['total']):,.0f} reviews/s of pure review work on one core")
    print()
    pinning = f"server pinned to CPU {SERVER_CPU}, client to CPU {CLIENT_CPU}" if args.pinned else "no CPU pinning"
    print(f"HTTPS keep-alive POST /validate from a second process ({pinning}); per run at most")
    print(f"{args.requests:,} counted requests (after {WARMUP} warm-up) or {args.seconds:g} s")
    header = (
        f"{'conns':>5}{'requests':>10}{'errors':>8}{'reviews/s':>11}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
        f"{'server CPU µs/review':>22}{'=> reviews/s/core':>19}"
    )
    print(header)
    for run in runs:
        latencies = sorted(run["latencies_ms"])
        per_review = run["server_cpu"] / run["served"] * 1e6 if run["served"] else float("nan")
        print(
            f"{run['concurrency']:>5}{len(latencies):>10,}{len(run['errors']):>8}"
            f"{len(latencies) / run['elapsed']:>11,.0f}{percentile(latencies, 50):>9.2f}"
            f"{percentile(latencies, 99):>9.2f}{latencies[-1]:>9.2f}{per_review:>22.0f}{1e6 / per_review:>19,.0f}"
        )
    if any(run["errors"] for run in runs):
        print("errors:", sorted({e for run in runs for e in run["errors"]}))


if __name__ == "__main__":
    main()
