"""The webhook's memory per runtime copy, at 10,000 and 100,000 copies, in process (no API server).

    .venv/bin/python -m benchmarks.webhook_memory_bench [--copies 10000 100000] [--code DIR] [--show]
    (from the repository root)

Each size runs in a fresh child process, which builds the webhook's store of runtime copies
(webhook/kube.py ``RuntimeCopies``) and feeds it as a fresh webhook's watch does, through the real code
path: serving/watch.py's ``list_all`` calls the store's ``list_page``, which reads each page of 500 as the API
server's JSON bytes (serving/kube.py ``read_json``) and hands it to the store; then serving/watch.py's
``stream`` reads one MODIFIED event line per copy (Start adding the copy's ownerReference to its TrainJob),
as the watch does. Reported: VmRSS idle, after the LIST (and its peak, VmHWM), after the events, the peak,
and per copy.

A copy is of realistic size: a TrainingRuntime with initializers and a trainer of three containers (env,
volume mounts, resources, probes, security context), volumes, tolerations and affinity, and the
managedFields the API server adds; ``--show`` prints one and its JSON size. The copies are of four source
runtimes (four images), each copy with its own name, uid, labels and annotation.

``--code DIR`` runs the children on the webhook and agent code of another checkout (a ``git worktree`` of
an older commit: the "before" figures), with this file's copies and measurement.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import functools
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PAGE = 500
NAMESPACE = "team-a"
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def status(key: str) -> int:
    """A /proc/self/status field in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise KeyError(key)


def job_id(i: int) -> str:
    """A canonical ULID-shaped JobID (26 Crockford base32 characters), distinct for each i."""
    head = "01KB2" + "".join(CROCKFORD[(i * 7 + k) % 32] for k in range(9))
    tail = "".join(CROCKFORD[(i >> (5 * k)) & 31] for k in range(12))
    return head + tail


def _env(source: int) -> list[dict[str, Any]]:
    plain = {
        "PYTHONUNBUFFERED": "1",
        "NCCL_DEBUG": "WARN",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_IB_DISABLE": "1",
        "OMP_NUM_THREADS": "8",
        "TORCH_DISTRIBUTED_DEBUG": "OFF",
        "HF_HOME": "/cache/huggingface",
        "TRANSFORMERS_CACHE": "/cache/huggingface/transformers",
        "WANDB_PROJECT": f"team-a-research-{source}",
        "WANDB_MODE": "offline",
        "DATA_ROOT": "/data/datasets",
        "CHECKPOINT_DIR": "/checkpoints",
        "LOG_LEVEL": "info",
    }
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in plain.items()]
    env += [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}},
        {"name": "S3_ENDPOINT", "valueFrom": {"configMapKeyRef": {"name": "storage", "key": "endpoint"}}},
        {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}},
    ]
    return env


def _container(name: str, image: str, *, gpu: bool, command: list[str]) -> dict[str, Any]:
    limits = {"cpu": "16", "memory": "120Gi", **({"nvidia.com/gpu": "8"} if gpu else {})}
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "env": _env(len(image)),
        "ports": [{"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
        "resources": {"requests": limits if gpu else {"cpu": "250m", "memory": "256Mi"}, "limits": limits},
        "volumeMounts": [
            {"name": "data", "mountPath": "/data", "readOnly": True},
            {"name": "checkpoints", "mountPath": "/checkpoints"},
            {"name": "cache", "mountPath": "/cache"},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "config", "mountPath": "/etc/train", "readOnly": True},
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "capabilities": {"drop": ["ALL"]},
        },
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 9090}, "periodSeconds": 10},
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def _pod(containers: list[dict[str, Any]], restart: str) -> dict[str, Any]:
    return {
        "restartPolicy": restart,
        "serviceAccountName": "training",
        "priorityClassName": "research",
        "terminationGracePeriodSeconds": 120,
        "securityContext": {"fsGroup": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": containers,
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}},
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "checkpoints"}},
            {"name": "cache", "emptyDir": {"sizeLimit": "200Gi"}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
            {"name": "config", "configMap": {"name": "train-config", "defaultMode": 420}},
        ],
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "team", "operator": "Equal", "value": "research", "effect": "NoSchedule"},
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "gpu.type", "operator": "In", "values": ["a100", "h100"]}]}
                    ]
                }
            }
        },
    }


def _initializer(name: str, image: str) -> dict[str, Any]:
    return {
        "name": name,
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": name}},
            "spec": {"template": {"spec": _pod([_container(name, image, gpu=False, command=["init"])], "OnFailure")}},
        },
    }


def source_spec(source: int) -> dict[str, Any]:
    """A training runtime's spec as a site writes one, in one of a few variants (its image)."""
    image = f"registry.example/research/train:2026.{source + 1}"
    trainer = [
        _container("node", image, gpu=True, command=["torchrun", "/app/train.py"]),
        _container("log-shipper", "registry.example/fluent-bit:3.1", gpu=False, command=["/fluent-bit/bin/fluent-bit"]),
        _container("metrics", "registry.example/dcgm-exporter:3.3", gpu=False, command=["dcgm-exporter"]),
    ]
    return {
        "mlPolicy": {"numNodes": 4, "torch": {"numProcPerNode": "auto"}},
        "template": {
            "spec": {
                "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
                "failurePolicy": {"maxRestarts": 0},
                "replicatedJobs": [
                    _initializer("dataset-initializer", "registry.example/dataset-initializer:v2.2"),
                    _initializer("model-initializer", "registry.example/model-initializer:v2.2"),
                    {
                        "name": "node",
                        "template": {
                            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                            "spec": {"backoffLimit": 0, "template": {"spec": _pod(trainer, "Never")}},
                        },
                    },
                ],
            }
        },
    }


def fields_v1(value: Any) -> dict[str, Any]:
    """managedFields' fieldsV1 for ``value`` as the API server writes it: a key per field, lists of named
    items keyed by name."""
    if isinstance(value, dict):
        return {f"f:{k}": fields_v1(v) for k, v in value.items()}
    if isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v for v in value):
        return {f'k:{{"name":"{v["name"]}"}}': {".": {}, **fields_v1(v)} for v in value}
    return {}


@functools.cache
def _source_json(source: int) -> tuple[str, str]:
    """The spec of source ``source`` and its managedFields entry, as JSON, made once: the API server's bytes
    for each copy are assembled from them, so the benchmark's own work stays small beside the webhook's."""
    spec = source_spec(source)
    annotations = {
        "dispatch.phpboyscout.uk/runtime-source": f"ClusterTrainingRuntime/research-{source}@{4711 + source}"
    }
    fields = {"f:metadata": {"f:labels": {"f:dispatch.phpboyscout.uk/job-id": {},
                                          "f:dispatch.phpboyscout.uk/submission": {}},
                             "f:annotations": fields_v1(annotations)},
              "f:spec": fields_v1(spec)}  # fmt: skip
    managed = {"manager": "dispatch.phpboyscout.uk/adapter", "operation": "Update",
               "apiVersion": "trainer.kubeflow.org/v1alpha1", "time": "2026-12-02T09:00:00Z",
               "fieldsType": "FieldsV1", "fieldsV1": fields}  # fmt: skip
    return json.dumps(spec, separators=(",", ":")), json.dumps(managed, separators=(",", ":"))


def copy_json(i: int, *, owned: bool = False) -> str:
    """Copy ``i`` as the API server sends it (a LIST item or a watch event's object), as JSON."""
    jid = job_id(i)
    name = f"dj-{jid.lower()}-s{i % 7}"
    source = i % 4
    spec, managed = _source_json(source)
    meta: dict[str, Any] = {
        "name": name,
        "namespace": NAMESPACE,
        "uid": f"{i:08x}-0000-4000-8000-{i:012x}",
        "resourceVersion": str(100_000 + 2 * i + int(owned)),
        "generation": 1,
        "creationTimestamp": "2026-12-02T09:00:00Z",
        "labels": {"dispatch.phpboyscout.uk/job-id": jid, "dispatch.phpboyscout.uk/submission": str(i % 7)},
        "annotations": {
            "dispatch.phpboyscout.uk/runtime-source": f"ClusterTrainingRuntime/research-{source}@{4711 + source}"
        },
    }
    if owned:
        meta["ownerReferences"] = [
            {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": name,
             "uid": f"{i:08x}-1111-4000-8000-{i:012x}", "controller": False, "blockOwnerDeletion": False}
        ]  # fmt: skip
    head = json.dumps(meta, separators=(",", ":"))[:-1]
    return (
        '{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainingRuntime","metadata":'
        f'{head},"managedFields":[{managed}]}},"spec":{spec}}}'
    )


def runtime_copy(i: int, *, owned: bool = False) -> dict[str, Any]:
    return json.loads(copy_json(i, owned=owned))  # type: ignore[no-any-return]


class _Body:
    """What kubernetes_asyncio returns with ``_preload_content=False``: aiohttp's response, as far as
    serving/kube.py ``read_json`` and serving/watch.py ``stream`` read it."""

    status, reason = 200, "OK"

    def __init__(self, raw: bytes = b"", lines: Iterator[bytes] | None = None) -> None:
        self._raw, self._lines = raw, lines
        self.content = self

    async def read(self) -> bytes:
        return self._raw

    async def readline(self) -> bytes:
        return next(self._lines, b"") if self._lines is not None else b""

    def release(self) -> None:
        self._raw = b""


class FakeServer:
    """The API server's answers to the store's LIST (pages of 500, as JSON bytes) and WATCH (one line each)."""

    def __init__(self, n: int) -> None:
        self.n = n

    async def __call__(self, **kwargs: Any) -> _Body:
        if kwargs.get("watch"):
            return _Body(lines=self._events())
        start = int(kwargs.get("_continue") or 0)
        end = min(self.n, start + kwargs["limit"])
        items = ",".join(copy_json(i) for i in range(start, end))
        meta = json.dumps({"resourceVersion": "999999", **({"continue": str(end)} if end < self.n else {})})
        return _Body(f'{{"kind":"TrainingRuntimeList","metadata":{meta},"items":[{items}]}}'.encode())

    def _events(self) -> Iterator[bytes]:
        for i in range(self.n):
            yield f'{{"type":"MODIFIED","object":{copy_json(i, owned=True)}}}\n'.encode()


def child(n: int, root: str, page: int | None) -> None:
    sys.path.insert(0, root)
    from serving import watch
    from webhook import kube
    from webhook.kube import RuntimeCopies

    if page is not None:
        kube.LIST_PAGE = page  # type: ignore[misc]  # the page size's share of the memory, for docs/performance.md

    class NoApi:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(name)

    async def fallback(namespace: str, name: str) -> None:
        raise AssertionError("no GET expected")

    async def run() -> dict[str, float]:
        copies = RuntimeCopies(NoApi(), fallback)  # type: ignore[arg-type]
        server = FakeServer(n)
        out: dict[str, float] = {"idle": status("VmRSS")}
        started = time.perf_counter()
        listed, _ = await watch.list_all(copies, server, copies)  # type: ignore[arg-type]
        out["list_s"] = time.perf_counter() - started
        out["listed"], out["listed_peak"] = status("VmRSS"), status("VmHWM")
        started = time.perf_counter()
        await watch.stream(server, ["999999"], copies, 300, copies._on_live)
        out["events_s"] = time.perf_counter() - started
        out["events"], out["peak"] = status("VmRSS"), status("VmHWM")
        out["kept"] = len(copies._copies)
        assert listed == n, listed
        copies._on_live(True)
        first = runtime_copy(0)["metadata"]["name"]
        out["answers"] = int(await copies(NAMESPACE, first) is not None)
        return out

    print(json.dumps(asyncio.run(run())))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--copies", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument(
        "--code",
        default=str(Path(__file__).resolve().parents[1]),
        help="the checkout whose webhook and agent code the children run (default: this one)",
    )
    parser.add_argument("--page", type=int, help="copies per LIST page instead of webhook/kube.py LIST_PAGE")
    parser.add_argument("--show", action="store_true", help="print one copy and its JSON size, and exit")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.show:
        body = copy_json(1, owned=True)
        spec = _source_json(1)[0]
        print(json.dumps(runtime_copy(1, owned=True), indent=1))
        print(f"one copy: {len(body):,} bytes of JSON, of which its spec {len(spec):,}")
        return
    if args.child:
        child(args.child, args.code, args.page)
        return
    one = len(copy_json(1, owned=True))
    print(f"{platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.2f}; "
          f"code {args.code}; one copy {one:,} bytes of JSON; page {args.page or 'LIST_PAGE'}")  # fmt: skip
    print(f"{'copies':>8} {'idle':>9} {'listed':>9} {'LIST peak':>10} {'running':>9} {'peak':>9}"
          f" {'LIST s':>7} {'events s':>8}  per copy")  # fmt: skip
    for n in args.copies:
        if not 1 <= n <= 1_000_000:
            parser.error("--copies: 1 to 1,000,000 each")
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(n), "--code", args.code,
             *(["--page", str(args.page)] if args.page else [])],
            capture_output=True, text=True, check=True, timeout=3600,
        )  # fmt: skip
        r = json.loads(out.stdout.strip().splitlines()[-1])
        assert r["kept"] == n, r
        assert r["answers"] == 1, r
        mib = {k: r[k] / 1024 for k in ("idle", "listed", "listed_peak", "events", "peak")}
        per = (r["peak"] - r["idle"]) * 1024 / n
        print(
            f"{n:>8,} {mib['idle']:7.1f} Mi {mib['listed']:7.1f} Mi {mib['listed_peak']:8.1f} Mi "
            f"{mib['events']:7.1f} Mi {mib['peak']:7.1f} Mi {r['list_s']:7.1f} {r['events_s']:8.1f}  "
            f"{per:,.0f} bytes (peak above idle / copies)"
        )


if __name__ == "__main__":
    main()
