"""The anchor: N jobs started, then preempted and re-admitted, with dispatch's check and with no check, on tier B.

    .venv/bin/python -m benchmarks.anchor_bench [--jobs 1000] [--rounds 2] [--first-rounds N] [--floor]
        [--phases first,readmission]
    (from the repository root; needs tier B and helm built: controlplane/build.sh)

Two phases, each with its rounds alternating between the arms. **First start**: each arm's ``--jobs`` jobs are
submitted into its empty namespace, ``--concurrency`` (16) at a time (dispatch's through the agent's HTTPS API as a
supervisor does: Start, then Open, signed in as a supervisor bound to the chart's role; the other arms' as plain
TrainJobs), and the window runs from the first submission until every one runs; between rounds they are deleted.
**Re-admission** (below): the jobs the last first start left are preempted by a blocker and re-admitted. With
``--floor``, a fourth arm, **design**: dispatch's TrainJobs with exactly the writes this design needs and nothing
of the agent (the runtime copy, the TrainJob closed, the copy's ownerReference, Open's one write carrying the first
approval; at each later admission dispatch's approval on the TrainJob before the Ready, written by a second
approver process signed in as dispatch), in a ClusterQueue gated by the floor's check: ``design / check`` is what
this design's own writes cost over any check, ``dispatch / design`` what the agent adds to them. ``--arms`` picks
the arms; besides those four, the **ablation** arms are the check arm plus one element of the design each (``size``:
dispatch's larger objects; ``copy``: a runtime copy per job and its ownerReference; ``closed``: the TrainJob created
gated and opened by one write), so that ``<element> / check`` is what that element costs alone.

One tier B control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok, and the real Kueue,
JobSet and Trainer), with dispatch installed as the sandbox installs it (harness/sandbox/install.py): the
chart rendered by `helm template` and applied but for its pods, the webhook and the agent as local processes
configured from the chart's ConfigMaps and signed in as the chart's ServiceAccounts, the webhook
configurations and admission policies as rendered. Two arms side by side (three with ``--floor``), each in a
namespace of its own:

* **dispatch**: ``--jobs`` dispatch TrainJobs, created as Start creates them (the runtime copy, then the
  TrainJob, closed) and opened as Open opens them (tests/agent/gate/kit.py), in a ClusterQueue whose admissions
  wait for dispatch's AdmissionCheck (the chart's);
* **baseline**: as many plain TrainJobs of the same shape (the same runtime's pod template and requests), in
  a second ClusterQueue with no admission check;
* **check** (``--floor``): as many plain TrainJobs again, in a third ClusterQueue whose admissions wait for an
  AdmissionCheck that this benchmark approves at once (``Approver``: one watch, one server-side apply of the
  check's entry per Pending check with quota reserved). It is the floor of any check controller in Kueue:
  what an admission check costs before dispatch does anything of its own, so ``check / baseline`` is the
  mechanism's share of the anchor's ratio and ``dispatch / check`` dispatch's.

Each ClusterQueue holds exactly its arm's jobs (quota = jobs x one trainer's requests) and preempts lower
priorities within itself. One round of an arm: a high-priority Workload asking for the whole quota (the
blocker) is created; once every TrainJob of the arm is suspended (evicted by Kueue) the blocker is deleted,
and the window runs from that delete to every job running again: its TrainJob unsuspended and a new trainer
pod Running (for dispatch, A raised and the pod carrying the new A). Over the window: the wall time, and
the CPU (utime + stime, /proc/<pid>/stat) of kube-apiserver, etcd, dispatch's agent and every other process
of the cluster; when each job passed each step of its readmission (quota reserved, check Ready, admitted,
unsuspended, pod created, bound, Running), as the benchmark's watches saw it; and the API server's /metrics
counters (requests by verb and resource, calls to each admission webhook) before and after. The arms
alternate (dispatch, baseline, dispatch, baseline for ``--rounds 2``) so that load drifts show. Nothing here
is a test: nothing in tests/ times it.

Always reported besides: every watch event of each arm's TrainJobs, JobSets, Jobs, pods and Workloads in the
window, per job, by what it changed (the TrainJob and JobSet events are what queues Trainer's reconciles), and
the mean size of each kind's objects. To say where the API server's CPU goes: ``--audit`` (its audit log: every
write in the windows by who, verb and resource, refusals apart), ``--profile SECONDS`` (a CPU profile of it over
each window, for ``go tool pprof -top``), ``--pad-baseline`` (the plain TrainJobs carry a dispatch trainer, so
both arms' objects are as large) and ``--keep-harness-policies`` (by default tier B's own copies of dispatch's
owner policies and of record-start are deleted, so that only the chart's apply, as in an installation; with it,
dispatch's writes pass each of those policies twice, as in the runs before 2026-12-03).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import datetime as dt
import itertools
import json
import math
import os
import platform
import re
import statistics
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ulid import ULID

from agent.api.client import AgentClient, AgentError, token_from_file
from agent.api.errors import ErrorKind
from agent.api.models import ObjectRef, StartRequest
from agent.api.service.lifecycle_decisions import rfc3339
from agent.api.service.start_decisions import owner_patch
from agent.domain.operations import plan_open
from agent.domain.workload import check_state
from benchmarks.agent_bench import process_cpu
from contract.admission import admission_count, preconditions
from contract.keys import (
    ANNOTATION_ADMISSION,
    ANNOTATION_ADMISSION_GATED_BY,
    FIELD_MANAGER,
    LABEL_JOBSET_NAME,
    LABEL_PRIORITY_CLASS,
    LABEL_QUEUE_NAME,
    LABEL_WORKLOAD_JOB_UID,
)
from contract.trainer import trainer_spec
from contract.trainjob import Submission, runtime_copy_owner_reference
from harness import cluster
from harness.cluster import ADMIN_USER, ControlPlane, new_run_dir, start_control_plane
from harness.jobs import create_copy_and_trainjob, create_once_runtime_seen
from harness.kube_http import ApiError, Credentials, KubeHttp
from harness.processes import ManagedProcess, stop_everything, wait_until
from harness.sandbox import install, site
from harness.tier_b import HARNESS_POLICY_PREFIX, TierB, kwok_node, node_ready, start_kwok, start_tier_b

KUEUE_V, TRAINER_V = site.KUEUE_V, site.TRAINER_V
RUNTIME = "anchor-train"
LOW, HIGH = "anchor-low", "anchor-high"
QUEUE = "anchor"
"""The LocalQueue's name in each arm's namespace."""
CPU_MILLI, MEMORY_MI = 100, 128
"""One trainer's requests; each ClusterQueue's quota is exactly its arm's jobs times this."""
NODE_PODS = 500
"""Pods per extra kwok node: tier B's three nodes hold 110 each, too few for two arms of 1,000."""
WORKERS = 16
"""Concurrent setup requests (creating and opening the jobs); setup is not measured."""
IMAGE = "registry.invalid/dispatch-anchor/train:1"
RUNTIME_LABEL = "anchor-bench.invalid/runtime"
"""The one label the runtime's pod template carries (unless ``--unlabelled-runtime``)."""
JSON_PATCH = "application/json-patch+json"
FLOOR_CHECK = "anchor-floor"
FLOOR_CONTROLLER = "anchor-bench.invalid/approve-at-once"
"""The ``check`` arm's AdmissionCheck and its controllerName (``--floor``): served by benchmarks/floor_approver.py."""
APPROVER, DESIGN_APPROVER = "floor-approver", "design-approver"
"""The floor's approvers' processes, by name: the check arm's, the design arm's."""
ABLATION: dict[str, str] = {
    "size": "the objects' size: TrainJobs carrying a dispatch trainer (image, the prologue's command, env)",
    "copy": "the runtime copy: a TrainingRuntime per job (the runtime's spec as is), the TrainJob referring "
    "to it, then the copy's ownerReference",
    "closed": "the start gate: the TrainJob created gated (admission-gated-by), then opened by one JSON "
    "Patch once its Workload lists the check",
}
"""The ablation arms (``--arms``): the check arm plus one element of this design each, every other write and
object as the check arm's, so that ``<element> / check`` is what that element costs alone."""
ARMS = ("dispatch", "design", "baseline", "check", *ABLATION)
OTHER_GATE = "anchor-bench.invalid/gate"
"""The ``closed`` arm's gate: not dispatch's, so that no policy of dispatch's polices its TrainJobs."""


# -- watching -----------------------------------------------------------------------------------------------


class LabelIndex:
    """Objects by the value of one label, then by uid (no label: nothing is indexed)."""

    def __init__(self, label: str | None) -> None:
        self.label = label
        self._by_value: dict[str, dict[str, dict[str, Any]]] = {}

    def _value(self, obj: dict[str, Any] | None) -> str | None:
        if obj is None or self.label is None:
            return None
        return (obj["metadata"].get("labels") or {}).get(self.label)

    def update(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        """An object changed from ``old`` to ``new`` (None: it was not there, or is gone)."""
        before = self._value(old)
        if old is not None and before is not None:
            same = self._by_value.get(before, {})
            same.pop(old["metadata"]["uid"], None)
            if not same:
                self._by_value.pop(before, None)
        after = self._value(new)
        if new is not None and after is not None:
            self._by_value.setdefault(after, {})[new["metadata"]["uid"]] = new

    def get(self, value: str) -> list[dict[str, Any]]:
        return list(self._by_value.get(value, {}).values())


class Latest:
    """The current state of every object of one collection: LIST, then WATCH from its resourceVersion in a
    thread (resumed after a timeout; a 410 re-LISTs). One long-lived connection, so watching adds next to
    nothing to the API server's load in a window, unlike polling LISTs would."""

    def __init__(self, admin: KubeHttp, path: str, index_label: str | None = None) -> None:
        self._admin, self._path = admin, path
        self._lock = threading.Lock()
        self.objects: dict[str, dict[str, Any]] = {}
        self._index = LabelIndex(index_label)
        """What a submission waits on is looked up by its label, not searched for among every object of the
        collection 20 times a second in each of its threads (CPU the benchmark would take from the cluster's)."""
        self.on_event: Callable[[str, dict[str, Any], float], None] | None = None
        """Called from the watch's thread with each event's type, object and arrival (time.monotonic())."""
        self.on_change: Callable[[str, dict[str, Any] | None, dict[str, Any]], None] | None = None
        """Called from the watch's thread with each event's type, the object's previous state and its new one."""
        self._rv = self._relist()
        self._stop = threading.Event()
        threading.Thread(target=self._run, name=f"watch {path}", daemon=True).start()

    def _relist(self) -> str:
        listed = self._admin.request("GET", self._path)
        with self._lock:
            self.objects = {o["metadata"]["uid"]: o for o in listed["items"]}
            self._index = LabelIndex(self._index.label)
            for obj in self.objects.values():
                self._index.update(None, obj)
        return str(listed["metadata"]["resourceVersion"])

    def labelled(self, value: str) -> list[dict[str, Any]]:
        """The objects whose ``index_label`` is ``value``."""
        with self._lock:
            return self._index.get(value)

    def _run(self) -> None:
        creds = self._admin.credentials
        headers = {"Accept": "application/json"}
        if creds.token:
            headers["Authorization"] = f"Bearer {creds.token}"
        while not self._stop.is_set():
            query = {"watch": "1", "resourceVersion": self._rv, "allowWatchBookmarks": "true", "timeoutSeconds": "300"}
            url = f"{creds.server}{self._path}?{urllib.parse.urlencode(query)}"
            try:
                request = urllib.request.Request(url, headers=headers)
                with urllib.request.urlopen(request, context=creds.ssl_context(), timeout=30) as r:
                    for line in r:
                        event = json.loads(line)
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            self._rv = self._relist()  # 410 Gone: the history is compacted
                            break
                        self._rv = obj["metadata"]["resourceVersion"]
                        if event["type"] == "BOOKMARK":
                            continue
                        with self._lock:
                            old = self.objects.get(obj["metadata"]["uid"])
                            if event["type"] == "DELETED":
                                self.objects.pop(obj["metadata"]["uid"], None)
                            else:
                                self.objects[obj["metadata"]["uid"]] = obj
                            self._index.update(old, None if event["type"] == "DELETED" else obj)
                        hook = self.on_event
                        if hook is not None:
                            hook(event["type"], obj, time.monotonic())
                        change = self.on_change
                        if change is not None:
                            change(event["type"], old, obj)
                        if self._stop.is_set():
                            return
            except (TimeoutError, OSError, urllib.error.URLError, ValueError):
                continue

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.objects.values())

    def stop(self) -> None:
        self._stop.set()


# -- the arms -----------------------------------------------------------------------------------------------


@dataclass
class Arm:
    name: str
    namespace: str
    cluster_queue: str
    dispatch: bool
    check: str | None
    """The AdmissionCheck its admissions wait for: dispatch's, the floor's, or none."""
    trainjobs: Latest
    pods: Latest
    workloads: Latest
    jobsets: Latest
    jobs: Latest
    design: bool = False
    """The ``design`` arm (``--floor``): dispatch's TrainJobs, with exactly the writes this design needs and
    nothing of the agent (``design_submit``, benchmarks/floor_approver.py ``--design``)."""
    copies: bool = False
    """Its jobs have runtime copies of their own (dispatch, design, copy): deleted with them between rounds."""

    def watches(self) -> dict[str, Latest]:
        return {"TrainJob": self.trainjobs, "JobSet": self.jobsets, "Job": self.jobs, "Pod": self.pods,
                "Workload": self.workloads}  # fmt: skip


def floor_check(admin: KubeHttp) -> None:
    """The floor's AdmissionCheck, Active (Kueue keeps a ClusterQueue that lists an inactive check inactive)."""
    admin.apply({"apiVersion": KUEUE_V, "kind": "AdmissionCheck", "metadata": {"name": FLOOR_CHECK},
                 "spec": {"controllerName": FLOOR_CONTROLLER}})  # fmt: skip
    ac = admin.get(KUEUE_V, "AdmissionCheck", FLOOR_CHECK)
    now = rfc3339(dt.datetime.now(dt.UTC))
    condition = {"type": "Active", "status": "True", "reason": "Active", "message": "the anchor's floor",
                 "lastTransitionTime": now, "observedGeneration": ac["metadata"]["generation"]}  # fmt: skip
    admin.apply({"apiVersion": KUEUE_V, "kind": "AdmissionCheck", "metadata": {"name": FLOOR_CHECK},
                 "status": {"conditions": [condition]}}, subresource="status")  # fmt: skip


def _a(obj: dict[str, Any]) -> int | None:
    try:
        return admission_count(obj)
    except ValueError:  # a TrainJob not (yet) in dispatch's shape has no A
        return None


def _pod_a(pod: dict[str, Any]) -> int | None:
    value = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_ADMISSION)
    return int(value) if value is not None else None


def running_jobs(arm: Arm, old_pods: set[str], before: dict[str, int | None]) -> set[str]:
    """The arm's TrainJobs running again: unsuspended, with a trainer pod Running (not being deleted) that is not
    one of ``old_pods``; for dispatch, A above ``before`` (its value at the preemption) and the pod carrying it."""
    live: dict[str, list[dict[str, Any]]] = {}
    for pod in arm.pods.snapshot():
        meta = pod["metadata"]
        if (
            pod["status"].get("phase") == "Running"
            and not meta.get("deletionTimestamp")
            and meta["uid"] not in old_pods
        ):
            live.setdefault((meta.get("labels") or {}).get(LABEL_JOBSET_NAME, ""), []).append(pod)
    done = set()
    for tj in arm.trainjobs.snapshot():
        name = tj["metadata"]["name"]
        if tj["spec"].get("suspend") is True or name not in live:
            continue
        if arm.dispatch:
            a, was = _a(tj), before.get(name)
            if a is None or (was is not None and a <= was) or any(_pod_a(p) != a for p in live[name]):
                continue
        done.add(name)
    return done


def suspended_jobs(arm: Arm) -> int:
    return sum(1 for tj in arm.trainjobs.snapshot() if tj["spec"].get("suspend") is True)


class Timeline:
    """When each job passed each step, as the watches saw it (and, for the first start, as the submitting
    supervisor saw its calls return), in seconds after the window's start: where the window's time goes."""

    READMISSION = ("quota reserved", "check Ready", "Workload admitted", "TrainJob unsuspended", "new pod created",
                   "new pod bound", "new pod Running", "old pod ended", "old pod gone")  # fmt: skip
    FIRST_START = ("Start called", "TrainJob created", "JobSet created", "Workload created", "Workload lists the check",
                   "submitted", "opened", "quota reserved", "check Ready", "Workload admitted", "TrainJob unsuspended",
                   "new pod created", "new pod bound", "new pod Running")  # fmt: skip
    """``Start called``: the supervisor sent Start (dispatch only); ``submitted``: Start answered (dispatch), the
    copy's ownerReference written (design) or the TrainJob's create answered (the other arms); ``opened``: Open
    answered (dispatch) or written (design). The rest as the watches saw them."""

    def __init__(self, t0: float, old_pods: set[str], check: str | None, steps: tuple[str, ...]) -> None:
        self.t0, self.old, self.check, self.steps = t0, old_pods, check, steps
        self._lock = threading.Lock()
        self.first: dict[str, dict[str, float]] = {step: {} for step in steps}

    def mark(self, step: str, job: str, now: float) -> None:
        with self._lock:
            self.first[step].setdefault(job, now - self.t0)

    def workload(self, kind: str, wl: dict[str, Any], now: float) -> None:
        owners = wl["metadata"].get("ownerReferences") or []
        if not owners:
            return
        job, status = owners[0]["name"], wl.get("status") or {}
        if "Workload created" in self.steps and kind != "DELETED":
            self.mark("Workload created", job, now)
            if self.check is not None and check_state(wl, self.check) is not None:
                self.mark("Workload lists the check", job, now)
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        if conditions.get("QuotaReserved") == "True":
            self.mark("quota reserved", job, now)
        if conditions.get("Admitted") == "True":
            self.mark("Workload admitted", job, now)
        checks = status.get("admissionChecks") or []
        if any(c["name"] == self.check and c["state"] == "Ready" for c in checks):
            self.mark("check Ready", job, now)

    def trainjob(self, kind: str, tj: dict[str, Any], now: float) -> None:
        if "TrainJob created" in self.steps and kind == "ADDED":
            self.mark("TrainJob created", tj["metadata"]["name"], now)
        if kind != "DELETED" and tj["spec"].get("suspend") is False:
            self.mark("TrainJob unsuspended", tj["metadata"]["name"], now)

    def jobset(self, kind: str, js: dict[str, Any], now: float) -> None:
        if "JobSet created" in self.steps and kind != "DELETED":
            self.mark("JobSet created", js["metadata"]["name"], now)

    def pod(self, kind: str, pod: dict[str, Any], now: float) -> None:
        meta = pod["metadata"]
        job = (meta.get("labels") or {}).get(LABEL_JOBSET_NAME, "")
        if meta["uid"] in self.old:
            if kind == "DELETED":
                self.mark("old pod gone", job, now)
            if pod["status"].get("phase") in ("Failed", "Succeeded") or kind == "DELETED":
                self.mark("old pod ended", job, now)
            return
        self.mark("new pod created", job, now)
        if pod["spec"].get("nodeName"):
            self.mark("new pod bound", job, now)
        if pod["status"].get("phase") == "Running":
            self.mark("new pod Running", job, now)

    def spans(self) -> list[tuple[str, float, float]]:
        """(steps, p50, p90) of the seconds each job took from each step it passed to the next it passed, in the
        order it passed them (an arm may pass two steps in another order than ``steps``: the design arm's Workload
        is often made before its submission returns): where one job's time goes (``rows`` says when the jobs
        passed each step)."""
        order = {step: i for i, step in enumerate(self.steps)}
        jobs = {job for passed in self.first.values() for job in passed}
        gaps: dict[tuple[str, str], list[float]] = {}
        for job in jobs:
            passed = sorted((at[job], order[step], step) for step, at in self.first.items() if job in at)
            for (t0, _, before), (t1, _, step) in itertools.pairwise(passed):
                gaps.setdefault((before, step), []).append(t1 - t0)
        out = []
        for before, step in sorted(gaps, key=lambda pair: (order[pair[0]], order[pair[1]])):
            values = sorted(gaps[before, step])
            out.append((f"{before} -> {step}", pct(values, 0.5), pct(values, 0.9)))
        return out

    def rows(self) -> list[tuple[str, int, float, float]]:
        """(step, jobs seen passing it in the window, p50, last) of each step."""
        out = []
        for step in self.steps:
            times = sorted(self.first[step].values())
            if times:
                out.append((step, len(times), pct(times, 0.5), times[-1]))
        return out


_META_PARTS = ("labels", "annotations", "finalizers", "ownerReferences", "deletionTimestamp")


def changed_parts(old: dict[str, Any] | None, new: dict[str, Any]) -> str:
    """What one watch event changed: the metadata parts (annotations and labels by key), and the keys of spec and
    status (``spec.suspend``, ``status.conditions``...) whose values differ from the object's previous state."""
    if old is None:
        return "(first seen)"
    parts = []
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    for part in _META_PARTS:
        a, b = om.get(part), nm.get(part)
        if a == b:
            continue
        if isinstance(a, dict | None) and isinstance(b, dict | None) and part in ("labels", "annotations"):
            a, b = a or {}, b or {}
            keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
            parts.append(f"{part}[{','.join(k.rsplit('/', 1)[-1] for k in keys)}]")
        else:
            parts.append(part)
    for section in ("spec", "status"):
        a, b = old.get(section) or {}, new.get(section) or {}
        parts += [f"{section}.{k}" for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]
    return " ".join(parts) or "(managedFields/resourceVersion only)"


class Changes:
    """Every watch event of an arm's TrainJobs, JobSets, Jobs, Pods and Workloads in a window, by kind, event type
    and what it changed: each TrainJob event and each event of a TrainJob's JobSet is one reconcile request of
    Trainer's TrainJob controller (its only watches), and Trainer server-side applies the JobSet in every
    reconcile while the TrainJob or the JobSet is suspended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    def hook(self, kind: str) -> Callable[[str, dict[str, Any] | None, dict[str, Any]], None]:
        def on_change(event: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
            what = changed_parts(old, new) if event == "MODIFIED" else ""
            with self._lock:
                self.counts[f"{kind} {event} {what}".rstrip()] += 1

        return on_change


# -- setup --------------------------------------------------------------------------------------------------


def big_node(name: str) -> dict[str, Any]:
    node = kwok_node(name)
    capacity = {"cpu": "1000", "memory": "4Ti", "pods": str(NODE_PODS)}
    node["status"]["allocatable"] = dict(capacity)
    node["status"]["capacity"] = dict(capacity)
    return node


def quota(jobs: int) -> dict[str, str]:
    return {"cpu": f"{jobs * CPU_MILLI}m", "memory": f"{jobs * MEMORY_MI}Mi"}


def plain_cluster_queue(name: str, flavor: str, jobs: int) -> dict[str, Any]:
    """The baseline's ClusterQueue: the dispatch arm's (harness/sandbox/site.py) without the admission check."""
    queue = site.gated_cluster_queue(name, check="-", flavor=flavor, quota=quota(jobs))
    del queue["spec"]["admissionChecksStrategy"]
    return queue


def parallel(items: Iterable[Any], fn: Callable[[Any], Any], workers: int = WORKERS) -> list[Any]:
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return list(pool.map(fn, items))


def create_plain_jobs(admin: KubeHttp, namespace: str, n: int, pad: bool = False, prefix: str = "plain",
                      created: Callable[[str], None] | None = None, workers: int = WORKERS) -> None:  # fmt: skip
    """``pad``: each plain TrainJob carries a dispatch TrainJob's ``spec.trainer`` (its image, the prologue's
    command and its env), so that the baseline's TrainJobs, JobSets, Jobs, pods and Workloads are as large as
    dispatch's while no dispatch write, check or policy touches them: what the objects' size alone costs."""
    trainer = None
    if pad:
        trainer = trainer_spec(job_id=str(ULID()), g=0, n=1, attempt=0, image=IMAGE, command=["python", "train.py"],
                               args=(), env={}, workdir=None)  # fmt: skip

    def one(i: int) -> None:
        spec: dict[str, Any] = {"runtimeRef": {"name": RUNTIME}}
        if trainer is not None:
            spec["trainer"] = trainer
        name = f"{prefix}-{i:05d}"
        admin.create({
            "apiVersion": TRAINER_V,
            "kind": "TrainJob",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {LABEL_QUEUE_NAME: QUEUE, LABEL_PRIORITY_CLASS: LOW}},
            "spec": spec,
        })  # fmt: skip
        if created is not None:
            created(name)

    parallel(range(n), one, workers)


def blocker(arm: Arm, jobs: int, label: str) -> dict[str, Any]:
    """A Workload of nobody's job at high priority asking for the arm's whole quota: Kueue preempts every job of
    the arm to reserve it (dispatch's agent approves it at once in the gated queue: no TrainJob controls it)."""
    requests = quota(jobs)
    return {
        "apiVersion": KUEUE_V,
        "kind": "Workload",
        "metadata": {"name": f"blocker-{label}", "namespace": arm.namespace},
        "spec": {
            "queueName": QUEUE,
            "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": HIGH},
            "priority": 1000,
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": IMAGE, "resources": {"requests": requests}}]}}}],
        },
    }  # fmt: skip


def wait_for(probe: Callable[[], bool], timeout: float, what: str, interval: float = 0.25) -> float:
    started = time.monotonic()
    while not probe():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(interval)
    return time.monotonic() - started


# -- what the API server served -----------------------------------------------------------------------------

_SAMPLE = re.compile(r"^(\w+)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def served(admin: KubeHttp) -> Counter[str]:
    """Counters from the API server's /metrics, by what they count: requests by verb, resource and subresource,
    calls to each admission webhook, and seconds spent in each ValidatingAdmissionPolicy (their difference over
    a window says which requests and which admission steps the window's CPU went to)."""
    out: Counter[str] = Counter()
    for line in str(admin.request("GET", "/metrics")).splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        name, labels = m.group(1), dict(_LABEL.findall(m.group(2)))
        value = float(m.group(3))
        if name == "apiserver_request_total":
            resource = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
            code = labels.get("code", "")
            refused = f" ({code})" if code and not code.startswith("2") else ""
            out[f"request {labels.get('verb', '')} {resource}{refused}"] += value
        elif name == "apiserver_admission_webhook_admission_duration_seconds_count":
            out[f"webhook call {labels.get('name', '')}"] += value
        elif name.endswith("_admission_policy_check_duration_seconds_sum"):  # validating and mutating
            out[f"policy seconds {labels.get('policy', '')}"] += value
    return out


_WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
AUDITED = (ADMIN_USER, "system:kube-controller-manager", "system:kube-scheduler",
           f"system:serviceaccount:{install.NAMESPACE}:{install.RELEASE}")  # fmt: skip
"""``--audit``: the users whose requests the API server logs. Kueue, JobSet, Trainer and kwok sign in as the
admin and impersonate their own principals (harness/tier_b.py), and the audit policy sees the signed-in user;
the last is dispatch's ServiceAccount (the agent)."""


def _actor(event: dict[str, Any]) -> str:
    """Who sent a request, shortly: the impersonated principal's last name part, the controller of
    kube-controller-manager (its user agent's last part), dispatch for its ServiceAccount, bench for the admin."""
    user = str((event.get("impersonatedUser") or event.get("user") or {}).get("username", "?"))
    if user == ADMIN_USER:
        return "bench"
    if user == AUDITED[-1]:
        return "dispatch"
    if user == "system:kube-controller-manager":
        return "kcm/" + str(event.get("userAgent", "")).rsplit("/", 1)[-1]
    return user.rsplit(":", 1)[-1].removesuffix("-controller-manager")


def audited_writes(path: Path, rounds: list[Round]) -> None:
    """Fills each round's ``writes``: the write requests received in its window on objects of its arm's
    namespace, by who, verb (a PATCH with ``force`` is a server-side apply), resource and answer if refused."""
    seen: set[str] = set()
    with path.open() as f:
        for line in f:
            event = json.loads(line)
            verb, ref = str(event.get("verb")), event.get("objectRef") or {}
            if verb not in _WRITES or event["auditID"] in seen:
                continue
            seen.add(event["auditID"])
            received = dt.datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(str(event.get("requestURI", ""))).query)
            if verb == "patch" and "force" in query:
                verb = "apply"
            resource = str(ref.get("resource")) + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            code = int((event.get("responseStatus") or {}).get("code") or 0)
            refused = f" ({code})" if not 200 <= code < 300 else ""
            for r in rounds:
                if r.window and r.window[0] <= received <= r.window[1] and ref.get("namespace") == r.namespace:
                    r.writes[f"{_actor(event)} {verb} {resource}{refused}"] += 1


def enable_profiling() -> None:
    """``--profile``: the API server started with its pprof endpoints (the harness turns them off; a later flag
    wins), so that a CPU profile of each window says which work the window's CPU went to."""
    argv = cluster._apiserver_argv

    def with_profiling(*args: Any, **kwargs: Any) -> list[str]:
        return [*argv(*args, **kwargs), "--profiling=true"]

    cluster._apiserver_argv = with_profiling  # type: ignore[assignment]


def cpu_profile(admin: KubeHttp, seconds: int, to: Path) -> threading.Thread:
    """The API server's CPU profile over the next ``seconds``, written to ``to`` (read: go tool pprof -top)."""
    creds = admin.credentials
    headers = {"Authorization": f"Bearer {creds.token}"} if creds.token else {}

    def fetch() -> None:
        url = f"{creds.server}/debug/pprof/profile?seconds={seconds}"
        request = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(request, context=creds.ssl_context(), timeout=seconds + 60) as r:
            to.write_bytes(r.read())

    thread = threading.Thread(target=fetch, name=f"profile {to.name}", daemon=True)
    thread.start()
    return thread


# -- one round ----------------------------------------------------------------------------------------------


READMISSION, FIRST_START = "re-admission", "first start"


@dataclass
class Round:
    arm: str
    index: int
    phase: str = READMISSION
    evicted_after: float = 0.0
    """Blocker created → every TrainJob of the arm suspended (re-admission)."""
    submitted_after: float = 0.0
    """The window's start → the last job submitted (first start: every Start and Open, or every create,
    answered)."""
    refused_starts: int = 0
    """First start, dispatch: Starts answered ``rejected`` (no Workload within the agent's workloadTimeout: Kueue
    behind), each retried with another JobID."""
    old_pods_left: int = 0
    """Pods of the preempted executions still listed at the blocker's delete."""
    seconds: float = 0.0
    """The window: the blocker's delete → every job running again (re-admission); the first submission → every
    job running (first start)."""
    per_job: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)
    started_utc: str = ""
    steps: list[tuple[str, int, float, float]] = field(default_factory=list)
    spans: list[tuple[str, float, float]] = field(default_factory=list)
    served: Counter[str] = field(default_factory=Counter)
    namespace: str = ""
    window: tuple[dt.datetime, dt.datetime] | None = None
    """The window in UTC (the blocker's delete → every job running again), to pick its requests from the audit log."""
    changes: Counter[str] = field(default_factory=Counter)
    writes: Counter[str] = field(default_factory=Counter)
    """Write requests in the window on objects of the arm's namespace, by who, verb and resource (audit log)."""
    sizes: dict[str, float] = field(default_factory=dict)
    """Mean size (JSON bytes) of the arm's objects of each kind at the window's end: what every write, webhook
    call and watch event of one costs scales with it."""


def cpu_of(processes: dict[str, ManagedProcess]) -> dict[str, float]:
    out = {}
    for name, process in processes.items():
        try:
            out[name] = process_cpu(process.pid)
        except OSError:
            out[name] = math.nan
    return out


def run_round(admin: KubeHttp, arm: Arm, jobs: int, index: int, processes: dict[str, ManagedProcess],
              timeout: float, profile: tuple[int, Path] | None = None) -> Round:  # fmt: skip
    """One re-admission round: every job of the arm preempted by a blocker, then the blocker deleted."""
    r = Round(arm.name, index, started_utc=dt.datetime.now(dt.UTC).strftime("%H:%M:%S"), namespace=arm.namespace)
    block = blocker(arm, jobs, f"{arm.name}-{index}")
    admin.create(block)
    r.evicted_after = wait_for(lambda: suspended_jobs(arm) == jobs, timeout, f"{arm.name}: all {jobs} suspended")
    old = {p["metadata"]["uid"] for p in arm.pods.snapshot()}
    r.old_pods_left = len(old)
    before = {tj["metadata"]["name"]: _a(tj) for tj in arm.trainjobs.snapshot()}

    def delete_blocker(*_: object) -> None:
        admin.delete(KUEUE_V, "Workload", block["metadata"]["name"], arm.namespace)

    return measure(admin, arm, jobs, r, processes, timeout, profile, Timeline.READMISSION, old, before, delete_blocker)


def first_start_round(admin: KubeHttp, arm: Arm, jobs: int, index: int, processes: dict[str, ManagedProcess],
                      timeout: float, submit: Callable[[Timeline, Round], None],
                      profile: tuple[int, Path] | None = None) -> Round:  # fmt: skip
    """One first-start round: ``jobs`` new jobs submitted into the arm's empty namespace (``submit``), until every
    one runs."""
    r = Round(arm.name, index, FIRST_START, started_utc=dt.datetime.now(dt.UTC).strftime("%H:%M:%S"),
              namespace=arm.namespace)  # fmt: skip
    return measure(admin, arm, jobs, r, processes, timeout, profile, Timeline.FIRST_START, set(), {}, submit)


def measure(admin: KubeHttp, arm: Arm, jobs: int, r: Round, processes: dict[str, ManagedProcess], timeout: float,
            profile: tuple[int, Path] | None, steps: tuple[str, ...], old: set[str], before: dict[str, int | None],
            kick: Callable[[Timeline, Round], None]) -> Round:  # fmt: skip
    """The window: from ``kick`` (run in a thread of its own, so that the jobs that run before it returns are
    seen when they do) until all ``jobs`` of the arm run (``running_jobs``); fills ``r``."""
    served0 = served(admin)
    cpu0 = cpu_of(processes)
    t = time.monotonic()
    timeline = Timeline(t, old, arm.check, steps)
    arm.workloads.on_event, arm.trainjobs.on_event, arm.pods.on_event, arm.jobsets.on_event = (
        timeline.workload, timeline.trainjob, timeline.pod, timeline.jobset)  # fmt: skip
    changes = Changes()
    for kind, watch in arm.watches().items():
        watch.on_change = changes.hook(kind)
    profiling = None
    if profile is not None:
        label = "first" if r.phase == FIRST_START else "readmit"
        profiling = cpu_profile(admin, profile[0], profile[1] / f"apiserver-{label}-{arm.name}-{r.index}.pprof")
    window_start = dt.datetime.now(dt.UTC)
    failed: list[BaseException] = []

    def run_kick() -> None:
        try:
            kick(timeline, r)
            r.submitted_after = time.monotonic() - t
        except BaseException as exc:  # surfaced by the loop below
            failed.append(exc)

    kicker = threading.Thread(target=run_kick, name=f"kick {arm.name}", daemon=True)
    kicker.start()
    seen: dict[str, float] = {}
    while len(seen) < jobs:
        if failed:
            raise RuntimeError(f"{arm.name} {r.phase}: {failed[0]!r}") from failed[0]
        now = time.monotonic()
        for name in running_jobs(arm, old, before) - seen.keys():
            seen[name] = now - t
        if now - t > timeout:
            raise TimeoutError(f"{arm.name} {r.phase}: {len(seen)} of {jobs} running after {timeout:.0f}s")
        time.sleep(0.25)
    kicker.join()
    r.seconds = max(seen.values())
    r.window = (window_start, dt.datetime.now(dt.UTC))
    for watch in arm.watches().values():
        watch.on_change = None
    r.changes = changes.counts
    for kind, watch in arm.watches().items():
        objects = watch.snapshot()
        if objects:
            r.sizes[kind] = statistics.mean(len(json.dumps(o, separators=(",", ":"))) for o in objects)
    cpu1 = cpu_of(processes)
    r.per_job = sorted(seen.values())
    r.cpu = {k: cpu1[k] - cpu0[k] for k in cpu0}
    r.served = served(admin) - served0
    time.sleep(2)  # the watches' last events of the window
    arm.workloads.on_event = arm.trainjobs.on_event = arm.pods.on_event = arm.jobsets.on_event = None
    r.steps = timeline.rows()
    r.spans = timeline.spans()
    if profiling is not None:
        profiling.join()
    return r


def clear(admin: KubeHttp, arm: Arm, timeout: float) -> float:
    """Every TrainJob of the arm deleted (with its runtime copies, for dispatch), until nothing of them is left:
    the next first-start round begins in an empty namespace."""
    t = time.monotonic()
    for tj in arm.trainjobs.snapshot():
        with contextlib.suppress(ApiError):
            admin.request("DELETE", admin.object_path(tj), {"propagationPolicy": "Background"})
    if arm.copies:
        runtimes = admin.request("GET", admin.collection_path(TRAINER_V, "TrainingRuntime", arm.namespace))["items"]
        for runtime in runtimes:
            with contextlib.suppress(ApiError):
                admin.request("DELETE", admin.object_path(runtime))
    wait_for(lambda: not any(w.snapshot() for w in arm.watches().values()), timeout, f"{arm.name}: cleared",
             interval=0.5)  # fmt: skip
    return time.monotonic() - t


def settle(arm: Arm, jobs: int, timeout: float) -> float:
    """Until the preempted executions' pods are gone (deleted by their Jobs, confirmed by kwok), so that one
    round's tail does not run into the next round's window."""
    pods = arm.pods
    return wait_for(lambda: len(pods.snapshot()) == jobs, timeout, f"{arm.name}: old pods gone", interval=0.5)


# -- reporting ----------------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def report(rounds: list[Round], jobs: int, idle: dict[str, float]) -> None:
    first = rounds[0].phase == FIRST_START
    if first:
        print(f"\n== {jobs} jobs per arm, first start: the first submission -> all {jobs} running ==")
        head = f"{'round':<12}{'start':>9}{'submitted in':>14}{'refused':>9}{'all running':>13}{'p50 job':>9}"
    else:
        print(f"\n== {jobs} jobs per arm, re-admission: the blocker's delete -> all {jobs} running again ==")
        head = f"{'round':<12}{'start':>9}{'evicted in':>14}{'old pods':>9}{'all running':>13}{'p50 job':>9}"
    cols = ["kube-apiserver", "etcd", "dispatch-agent"]
    print(head + "".join(f"{c + ' CPU':>20}" for c in cols))
    for r in rounds:
        lead, count = (r.submitted_after, r.refused_starts) if first else (r.evicted_after, r.old_pods_left)
        line = (f"{r.arm + ' ' + str(r.index):<12}{r.started_utc:>9}{lead:>13.1f}s{count:>9}"
                f"{r.seconds:>12.1f}s{pct(r.per_job, 0.5):>8.1f}s")  # fmt: skip
        print(line + "".join(f"{r.cpu.get(c, math.nan):>19.2f}s" for c in cols))
    since = "the first submission" if first else "the blocker's delete"
    print(f"\nwhere the time goes: seconds after {since} at which the jobs passed each step (p50 / last)")
    print(f"{'step':<24}" + "".join(f"{r.arm + ' ' + str(r.index):>20}" for r in rounds))
    for step in Timeline.FIRST_START if first else Timeline.READMISSION:
        cells = []
        for r in rounds:
            row = next((x for x in r.steps if x[0] == step), None)
            cells.append(f"{row[2]:.1f} / {row[3]:.1f} ({row[1]})" if row else "-")
        print(f"{step:<24}" + "".join(f"{c:>20}" for c in cells))
    print("\nper job: seconds from each step it passed to the next (p50 / p90)")
    print(f"{'steps':<52}" + "".join(f"{r.arm + ' ' + str(r.index):>20}" for r in rounds))
    for span in dict.fromkeys(k for r in rounds for k, _, _ in r.spans):
        cells = []
        for r in rounds:
            row = next((x for x in r.spans if x[0] == span), None)
            cells.append(f"{row[1]:.2f} / {row[2]:.2f}" if row else "-")
        print(f"{span[:52]:<52}" + "".join(f"{c:>20}" for c in cells))
    others = sorted({k for r in rounds for k in r.cpu} - set(cols))
    print("\nCPU seconds of every process in each window (idle rate per 10 s measured before the rounds):")
    print(f"{'process':<28}" + "".join(f"{r.arm + ' ' + str(r.index):>13}" for r in rounds) + f"{'idle/10s':>10}")
    for name in [*cols, *others]:
        print(f"{name:<28}" + "".join(f"{r.cpu.get(name, math.nan):>13.2f}" for r in rounds)
              + f"{idle.get(name, math.nan):>10.2f}")  # fmt: skip
    print("\nwhat the API server served in each window (the 25 largest; requests, webhook calls, policy seconds):")
    total: Counter[str] = Counter()
    for r in rounds:
        total.update(r.served)
    print(f"{'':<52}" + "".join(f"{r.arm + ' ' + str(r.index):>13}" for r in rounds))
    for key in ("requests, all", *(k for k, _ in total.most_common(25))):
        values = [sum(v for k, v in r.served.items() if k.startswith("request ")) if key == "requests, all"
                  else r.served.get(key, 0) for r in rounds]  # fmt: skip
        print(f"{key[:52]:<52}" + "".join(f"{v:>13.1f}" if "seconds" in key else f"{v:>13.0f}" for v in values))
    policies = sorted({k for r in rounds for k in r.served if k.startswith("policy seconds ")})
    print(f"\nseconds in each admission policy:{'':<20}" + "".join(f"{r.arm + ' ' + str(r.index):>13}" for r in rounds))
    for key in policies:
        print(f"{key[15:67]:<52}" + "".join(f"{r.served.get(key, 0):>13.3f}" for r in rounds))
    print(f"\nmean object size (JSON bytes):{'':<22}" + "".join(f"{r.arm + ' ' + str(r.index):>13}" for r in rounds))
    for kind in sorted({k for r in rounds for k in r.sizes}):
        print(f"{kind:<52}" + "".join(f"{r.sizes.get(kind, 0):>13.0f}" for r in rounds))
    per_job(rounds, jobs, "watch events in each window per job, by kind, type and what changed", "changes")
    if any(r.writes for r in rounds):
        per_job(rounds, jobs, "write requests in each window per job (audit log), by who, verb, resource", "writes")
    ratios(rounds, "dispatch", "baseline", "the anchor; goal <= 1.5x")
    ratios(rounds, "check", "baseline", "the floor: any admission check against none")
    ratios(rounds, "dispatch", "check", "dispatch against the floor of any check; goal <= 1.1x")
    ratios(rounds, "design", "check", "this design's own writes against the floor of any check")
    ratios(rounds, "dispatch", "design", "dispatch against the floor of this design")
    for element, what in ABLATION.items():
        ratios(rounds, element, "check", f"{what}, alone")
    per_admission(rounds, jobs)


def per_admission(rounds: list[Round], jobs: int) -> None:
    """The agent's CPU per admission next to the floor's approvers' (their own processes), in milliseconds."""
    found = {(r.arm, r.index): r for r in rounds}
    indexes = sorted({r.index for r in rounds if r.arm == "dispatch" and ("check", r.index) in found})
    if not indexes:
        return
    print("\nCPU per admission (ms per job): dispatch's agent, the floor's approver, the design floor's approver:")
    for i in indexes:
        agent = found["dispatch", i].cpu.get("dispatch-agent", math.nan)
        approver = found["check", i].cpu.get(APPROVER, math.nan)
        design = found["design", i].cpu.get(DESIGN_APPROVER, math.nan) if ("design", i) in found else math.nan
        print(f"  round {i}: agent {1000 * agent / jobs:.1f}, approver {1000 * approver / jobs:.1f} "
              f"({agent / approver:.2f}x), design approver {1000 * design / jobs:.1f}")  # fmt: skip


def ratios(rounds: list[Round], top: str, bottom: str, title: str) -> None:
    """Time and CPU of arm ``top`` over arm ``bottom``, round by round and in the medians."""
    d = [r for r in rounds if r.arm == top]
    b = [r for r in rounds if r.arm == bottom]
    if not d or not b:
        return
    print(f"\nratios {top} / {bottom} ({title}):")
    for i, (x, y) in enumerate(zip(d, b, strict=False), 1):
        api, etcd = (x.cpu[k] / y.cpu[k] for k in ("kube-apiserver", "etcd"))
        print(f"  round {i}: time {x.seconds / y.seconds:.2f}x   API server CPU {api:.2f}x   etcd CPU {etcd:.2f}x")
    md, mb = (statistics.median(r.seconds for r in xs) for xs in (d, b))
    ad, ab = (statistics.median(r.cpu["kube-apiserver"] for r in xs) for xs in (d, b))
    print(
        f"  medians: time {md:.1f} / {mb:.1f} s = {md / mb:.2f}x; API server CPU {ad:.2f} / {ab:.2f} s = {ad / ab:.2f}x"
    )


def per_job(rounds: list[Round], jobs: int, title: str, attr: str) -> None:
    """One of the rounds' counters, every key, divided by the jobs of an arm."""
    print(f"\n{title}:")
    keys = sorted({k for r in rounds for k in getattr(r, attr)})
    print(f"{'':<90}" + "".join(f"{r.arm + ' ' + str(r.index):>13}" for r in rounds))
    for key in keys:
        print(f"{key[:90]:<90}" + "".join(f"{getattr(r, attr).get(key, 0) / jobs:>13.2f}" for r in rounds))


# -- main ---------------------------------------------------------------------------------------------------


@dataclass
class Installed:
    check: str
    """dispatch's AdmissionCheck."""
    agent: ManagedProcess
    webhook: ManagedProcess
    api_url: str
    """The agent's HTTPS API, which the benchmark calls as a supervisor does."""
    ca_file: Path
    dispatch: KubeHttp
    """Signed in as dispatch (the agent's ServiceAccount): the ``design`` arm's writes."""
    dispatch_token: Path


def install_dispatch(cp: ControlPlane, work: Path) -> Installed:
    """dispatch as the sandbox installs it without a real node."""
    rendered, _ = install.install(cp, work)
    certs = install.generate_certs(work)
    sa, kubeconfig = install.service_account_kubeconfig(cp, rendered)
    _, webhook_kubeconfig = install.webhook_kubeconfig(cp, rendered, work)
    webhook, url = install.start_webhook(cp, work, certs, webhook_kubeconfig)
    install.apply_webhook_configurations(cp, rendered, url, certs)
    agent, api_url, _ = install.start_agent(cp, work, certs, kubeconfig)
    token = cp.service_account_token(install.NAMESPACE, sa, expiration_seconds=install.TOKEN_SECONDS)
    token_file = work / "dispatch.token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    dispatch = KubeHttp(Credentials(server=cp.api_url, ca_file=cp.ca_file, token=token))
    check = rendered.of("AdmissionCheck")[0]["metadata"]["name"]
    return Installed(check, agent, webhook, api_url, Path(certs.ca), dispatch, token_file)


def supervisor_token(cp: ControlPlane, namespace: str, work: Path) -> Path:
    """A supervisor of ``namespace``: a ServiceAccount bound to the chart's supervisor role, its token in a file."""
    cp.ensure_service_account(namespace, "supervisor")
    subject = {"kind": "ServiceAccount", "name": "supervisor", "namespace": namespace}
    role = f"{install.RELEASE}-supervisor"
    cp.admin.apply(site.binding("RoleBinding", "supervisor", "ClusterRole", role, subject, namespace))
    path = work / "supervisor.token"
    path.write_text(cp.service_account_token(namespace, "supervisor", expiration_seconds=install.TOKEN_SECONDS) + "\n")
    path.chmod(0o600)
    return path


def start_approver(cp: ControlPlane, namespace: str, design_token: Path | None = None,
                   name: str = APPROVER) -> ManagedProcess:  # fmt: skip
    """The floor's approver (benchmarks/floor_approver.py), a process of its own signed in as the admin; with
    ``design_token``, the design arm's, signed in as dispatch."""
    creds = cp.admin.credentials
    argv = [sys.executable, "-m", "benchmarks.floor_approver", "--server", creds.server, "--ca", str(creds.ca_file),
            "--namespace", namespace, "--check", FLOOR_CHECK]  # fmt: skip
    if design_token is None:
        argv += ["--cert", str(creds.client_cert_file), "--key", str(creds.client_key_file)]
    else:
        argv += ["--token-file", str(design_token), "--design"]
    process = cp.supervisor.start(name, argv, cwd=Path(__file__).resolve().parents[1])
    wait_until(lambda: "ready" in process.log_path.read_text(), 60, what=f"{name} ready")
    return process


ADMISSION_V = "admissionregistration.k8s.io/v1"
POLICY_KINDS = ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
                "MutatingAdmissionPolicy")  # fmt: skip


def drop_harness_policies(admin: KubeHttp) -> list[str]:
    """Unless ``--keep-harness-policies``: tier B installs its own copies of dispatch's owner policies and of
    record-start (harness/tier_b.py, for tests without the chart); beside the chart's they make every write of
    both arms pass each of those policies twice, which no installation does. Deletes the copies; returns their
    names."""
    dropped = []
    for kind in POLICY_KINDS:
        for obj in admin.request("GET", admin.collection_path(ADMISSION_V, kind))["items"]:
            name = obj["metadata"]["name"]
            if name.startswith(HARNESS_POLICY_PREFIX + "-") and name != f"{HARNESS_POLICY_PREFIX}-components":
                admin.delete(ADMISSION_V, kind, name)
                dropped.append(f"{kind}/{name}")
    return dropped


@dataclass
class Bench:
    arms: list[Arm]
    processes: dict[str, ManagedProcess]
    installed: Installed
    token_file: Path
    pad: bool
    runtime: dict[str, Any]
    """The ClusterTrainingRuntime as read: what the design arm copies."""
    concurrency: int = WORKERS
    """Jobs submitted at a time in a first start (``--concurrency``), in every arm."""


def setup(tb: TierB, jobs: int, grace: int, work: Path, chart_only: bool = False,
          names: tuple[str, ...] = ("dispatch", "baseline"), labelled: bool = True,
          pad: bool = False) -> Bench:  # fmt: skip
    cp, admin = tb.control_plane, tb.admin
    extra = math.ceil((len(names) * jobs + 10) / NODE_PODS)
    for i in range(extra):  # one kwok per node, as tier B's own (TierB.add_node), with room for more pods
        start_kwok(tb, f"anchor-node-{i}")
        admin.create(big_node(f"anchor-node-{i}"))
    wait_until(lambda: all(node_ready(admin, f"anchor-node-{i}") for i in range(extra)), 60, what="anchor nodes Ready")
    t = time.monotonic()
    installed = install_dispatch(cp, work)
    if chart_only:
        print(f"tier B's own policy copies deleted: {', '.join(drop_harness_policies(admin))}")
    print(f"dispatch installed (chart rendered, webhook and agent as local processes) in {time.monotonic() - t:.1f}s;"
          f" AdmissionCheck {installed.check}")  # fmt: skip

    runtime = site.training_runtime(RUNTIME, cpu=f"{CPU_MILLI}m", memory=f"{MEMORY_MI}Mi", image=IMAGE)
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["terminationGracePeriodSeconds"] = grace
    if labelled:
        runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] = {
            "labels": {RUNTIME_LABEL: "1"}
        }
    admin.apply(runtime)
    admin.apply(site.priority_class(LOW, 10, "the jobs of both arms"))
    admin.apply(site.priority_class(HIGH, 1000, "the blocker"))
    flavor = tb.resource_flavor
    checks: dict[str, str | None] = {"dispatch": installed.check, "baseline": None}
    if "dispatch" in names:
        admin.apply(site.gated_cluster_queue("anchor-dispatch", check=installed.check, flavor=flavor,
                                             quota=quota(jobs)))  # fmt: skip
    if "baseline" in names:
        admin.apply(plain_cluster_queue("anchor-baseline", flavor, jobs))
    floored = [name for name in names if name not in checks]
    if floored:
        floor_check(admin)
    for name in floored:
        queue = site.gated_cluster_queue(f"anchor-{name}", check=FLOOR_CHECK, flavor=flavor, quota=quota(jobs))
        admin.apply(queue)
        checks[name] = FLOOR_CHECK
    arms = []
    for name in names:
        namespace = cluster_queue = f"anchor-{name}"
        admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        admin.apply(site.local_queue(namespace, QUEUE, cluster_queue))
        wait_until(lambda ns=namespace: _active(admin, "LocalQueue", QUEUE, ns), 60, what="LocalQueue Active")
        wait_until(lambda cq=cluster_queue: _active(admin, "ClusterQueue", cq), 60, what="ClusterQueue Active")
        trainjobs = Latest(admin, admin.collection_path(TRAINER_V, "TrainJob", namespace))
        pods = Latest(admin, admin.collection_path("v1", "Pod", namespace))
        workloads = Latest(admin, admin.collection_path(KUEUE_V, "Workload", namespace), LABEL_WORKLOAD_JOB_UID)
        jobsets = Latest(admin, admin.collection_path(site.JOBSET_V, "JobSet", namespace))
        batch_jobs = Latest(admin, admin.collection_path("batch/v1", "Job", namespace))
        arms.append(Arm(name, namespace, cluster_queue, name in ("dispatch", "design"), checks[name], trainjobs, pods,
                        workloads, jobsets, batch_jobs, design=name == "design",
                        copies=name in ("dispatch", "design", "copy")))  # fmt: skip
    token_file = supervisor_token(cp, "anchor-dispatch" if "dispatch" in names else arms[0].namespace, work)
    processes = {p.name: p for p in cp.supervisor.processes if p.alive()}
    processes["dispatch-agent"], processes["dispatch-webhook"] = installed.agent, installed.webhook
    for arm in arms:
        if arm.check == FLOOR_CHECK:
            name = approver_of(arm.name)
            processes[name] = start_approver(cp, arm.namespace, installed.dispatch_token if arm.design else None, name)
    return Bench(arms, processes, installed, token_file, pad, admin.get(TRAINER_V, "ClusterTrainingRuntime", RUNTIME))


def approver_of(arm: str) -> str:
    """The name of the process that approves ``arm``'s check (its CPU is reported under it)."""
    return {"check": APPROVER, "design": DESIGN_APPROVER}.get(arm, f"{APPROVER}-{arm}")


def submitter(bench: Bench, admin: KubeHttp, arm: Arm, jobs: int, label: str) -> Callable[[Timeline, Round], None]:
    """How a first-start round submits its ``jobs``: dispatch's through the agent's API as a supervisor does (Start,
    then Open, ``--concurrency`` jobs at a time); the other arms' as plain TrainJobs, as many at a time."""
    if arm.design:

        def design(timeline: Timeline, _: Round) -> None:
            parallel(range(jobs), lambda _: design_submit(bench, arm, timeline), bench.concurrency)

        return design
    if arm.name in ("copy", "closed"):

        def ablated(timeline: Timeline, _: Round) -> None:
            submit = copy_submit if arm.name == "copy" else closed_submit
            parallel(range(jobs), lambda i: submit(bench, admin, arm, f"{arm.name}-{label}-{i:05d}", timeline),
                     bench.concurrency)  # fmt: skip

        return ablated
    if not arm.dispatch:

        def create(timeline: Timeline, _: Round) -> None:
            def created(name: str) -> None:
                timeline.mark("submitted", name, time.monotonic())

            create_plain_jobs(admin, arm.namespace, jobs, bench.pad or arm.name == "size", prefix=f"plain-{label}",
                              created=created, workers=bench.concurrency)  # fmt: skip

        return create

    def start_and_open(timeline: Timeline, r: Round) -> None:
        asyncio.run(_start_and_open(bench, arm.namespace, jobs, timeline, r))

    return start_and_open


def design_submit(bench: Bench, arm: Arm, timeline: Timeline) -> None:
    """One job of the design arm: the writes this design needs for a start and nothing else, signed in as dispatch
    (what Start and Open write, without their reads, their waits or the agent): the runtime copy, the TrainJob
    closed, the copy's ownerReference; then, once Kueue's Workload lists the check (seen on the benchmark's watch,
    no read), Open's one write carrying the first approval (agent/domain/operations.py ``plan_open``)."""
    dispatch = bench.installed.dispatch
    sub = Submission(job_id=str(ULID()), n=1, g=0, attempt=0, namespace=arm.namespace, image=IMAGE,
                     command=["python", "train.py"], queue=QUEUE, priority_class=LOW)  # fmt: skip
    copy, trainjob = create_copy_and_trainjob(dispatch, sub, bench.runtime)
    uid, name = trainjob["metadata"]["uid"], trainjob["metadata"]["name"]
    own_copy(dispatch, copy, trainjob)
    timeline.mark("submitted", name, time.monotonic())
    deadline = time.monotonic() + 120
    while True:
        workload = next((w for w in arm.workloads.labelled(uid) if _listed_for(w, uid, FLOOR_CHECK)), None)
        if workload is not None:
            latest = arm.trainjobs.objects.get(uid, trainjob)
            jobset = next((j for j in arm.jobsets.snapshot() if j["metadata"]["name"] == name), None)
            plan = plan_open(latest, jobset=jobset, workload=workload, blockers=())
            try:
                dispatch.request("PATCH", dispatch.object_path(latest), plan.patch,
                                 query={"fieldManager": FIELD_MANAGER}, content_type=JSON_PATCH)  # fmt: skip
                timeline.mark("opened", name, time.monotonic())
                return
            except ApiError as exc:
                if exc.status != 409:
                    raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"design arm: no Workload listing {FLOOR_CHECK} for {name}, or Open kept conflicting")
        time.sleep(0.05)


def plain_trainjob(namespace: str, name: str, runtime_ref: dict[str, str],
                   annotations: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """A TrainJob of the check arm's shape (``create_plain_jobs``), with another runtime or annotations."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace,
                            "labels": {LABEL_QUEUE_NAME: QUEUE, LABEL_PRIORITY_CLASS: LOW}}  # fmt: skip
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": TRAINER_V, "kind": "TrainJob", "metadata": meta, "spec": {"runtimeRef": runtime_ref}}


def copy_submit(bench: Bench, admin: KubeHttp, arm: Arm, name: str, timeline: Timeline) -> None:
    """One job of the ``copy`` arm: the check arm's TrainJob, with the writes of a runtime copy of its own and
    nothing else of the design (the copy is the runtime's spec as is, no dispatch patch): the copy, the TrainJob
    referring to it, the copy's ownerReference (read again after a conflict, as Start does)."""
    copy = admin.create({"apiVersion": TRAINER_V, "kind": "TrainingRuntime",
                         "metadata": {"name": name, "namespace": arm.namespace},
                         "spec": bench.runtime["spec"]})  # fmt: skip
    ref = {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime", "name": name}
    trainjob = create_once_runtime_seen(admin, plain_trainjob(arm.namespace, name, ref))
    own_copy(admin, copy, trainjob)
    timeline.mark("submitted", name, time.monotonic())


def own_copy(admin: KubeHttp, copy: dict[str, Any], trainjob: dict[str, Any]) -> None:
    """The runtime copy's ownerReference to its TrainJob, preconditioned; Trainer adds its finalizer to the copy
    meanwhile, so read again after a conflict, as Start does."""
    owner = runtime_copy_owner_reference(trainjob)
    for attempt in range(5):
        try:
            admin.request("PATCH", admin.object_path(copy), owner_patch(copy, owner), content_type=JSON_PATCH)
            return
        except ApiError as exc:
            if exc.status != 409 or attempt == 4:
                raise
            copy = admin.get(TRAINER_V, "TrainingRuntime", copy["metadata"]["name"], copy["metadata"]["namespace"])


def closed_submit(bench: Bench, admin: KubeHttp, arm: Arm, name: str, timeline: Timeline) -> None:
    """One job of the ``closed`` arm: the check arm's TrainJob created gated (Kueue's admission-gated-by, a gate
    not dispatch's), then, once its Workload lists the check (seen on the benchmark's watch), opened by one JSON
    Patch that removes the gate, preconditioned as Open's."""
    trainjob = admin.create(plain_trainjob(arm.namespace, name, {"name": RUNTIME},
                                           {ANNOTATION_ADMISSION_GATED_BY: OTHER_GATE}))  # fmt: skip
    uid = trainjob["metadata"]["uid"]
    timeline.mark("submitted", name, time.monotonic())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if any(_listed_for(w, uid, FLOOR_CHECK) for w in arm.workloads.labelled(uid)):
            latest = arm.trainjobs.objects.get(uid, trainjob)
            gate = "/metadata/annotations/" + ANNOTATION_ADMISSION_GATED_BY.replace("/", "~1")
            ops = [*preconditions(latest), {"op": "remove", "path": gate}]
            try:
                admin.request("PATCH", admin.object_path(latest), ops, content_type=JSON_PATCH)
                timeline.mark("opened", name, time.monotonic())
                return
            except ApiError as exc:
                if exc.status != 409:
                    raise
        time.sleep(0.05)
    raise TimeoutError(f"closed arm: no Workload listing {FLOOR_CHECK} for {name}, or its open kept conflicting")


def _listed_for(workload: dict[str, Any], uid: str, check: str) -> bool:
    labels = workload["metadata"].get("labels") or {}
    return labels.get(LABEL_WORKLOAD_JOB_UID) == uid and check_state(workload, check) is not None


START_ATTEMPTS = 3
"""Start answers ``rejected`` when Kueue made no Workload within the agent's workloadTimeout (a loaded machine):
Start stopped that TrainJob, so the supervisor starts another JobID."""


async def _start_and_open(bench: Bench, namespace: str, jobs: int, timeline: Timeline, r: Round) -> None:
    inst = bench.installed
    async with AgentClient(inst.api_url, token_from_file(bench.token_file), ca_file=inst.ca_file, timeout=120) as api:
        limit = asyncio.Semaphore(bench.concurrency)

        async def one(_: int) -> None:
            async with limit:
                called = time.monotonic()
                for attempt in range(START_ATTEMPTS):
                    try:
                        started = await api.start(StartRequest.model_validate({
                            "jobId": str(ULID()), "n": 1, "attempt": 1, "namespace": namespace,
                            "runtime": {"name": RUNTIME}, "image": IMAGE, "command": ["python", "train.py"],
                            "kueue": {"localQueue": QUEUE, "priorityClass": LOW},
                        }))  # fmt: skip
                        break
                    except AgentError as exc:
                        if exc.kind != ErrorKind.REJECTED or attempt == START_ATTEMPTS - 1:
                            raise
                        r.refused_starts += 1
                timeline.mark("Start called", started.name, called)
                timeline.mark("submitted", started.name, time.monotonic())
                await api.open(ObjectRef(namespace=started.namespace, name=started.name, uid=started.uid))
                timeline.mark("opened", started.name, time.monotonic())

        await asyncio.gather(*(one(i) for i in range(jobs)))


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _active(admin: KubeHttp, kind: str, name: str, namespace: str | None = None) -> bool:
    obj = admin.get(KUEUE_V, kind, name, namespace)
    return any(c["type"] == "Active" and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions", []))


PHASES: Final = frozenset({"first", "readmission"})


def phases_of(text: str) -> frozenset[str] | None:
    """``--phases``: a comma-separated subset of PHASES, or ``both``; None when it is neither."""
    named = frozenset(p.strip() for p in text.split(","))
    phases = PHASES if named == {"both"} else named
    return phases if phases and phases <= PHASES else None


def first_rounds_of(asked: int | None, rounds: int, phases: frozenset[str]) -> int:
    """First-start rounds: ``--first-rounds`` (by default ``--rounds``); one unreported start without that phase."""
    return (rounds if asked is None else asked) if "first" in phases else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.anchor_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000, help="jobs per arm (default 1000)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per arm and phase, alternating (default 2)")
    parser.add_argument("--first-rounds", type=int, default=None, metavar="N",
                        help="first-start rounds, when fewer than --rounds: the re-admission rounds need only the "
                             "last first start's jobs, and each first-start round but the last pays for deleting "
                             "them")  # fmt: skip
    parser.add_argument("--phases", default="first,readmission",
                        help="first (first starts), readmission, or first,readmission (the default; 'both' "
                             "says the same)")  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=WORKERS,
                        help=f"jobs a first start submits at a time, in every arm (default {WORKERS}): a supervisor "
                             "calls Start and Open for this many jobs at once")  # fmt: skip
    parser.add_argument("--grace-seconds", type=int, default=2,
                        help="trainer pods' termination grace period (kwok ends a deleted pod within it)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=1800, help="seconds any one wait may take")
    parser.add_argument("--audit", action="store_true",
                        help="the API server's audit log on (it costs the API server CPU in both arms): every write "
                             "in the windows by who, verb and resource")  # fmt: skip
    parser.add_argument("--pad-baseline", action="store_true",
                        help="the plain TrainJobs carry a dispatch TrainJob's trainer (image, the prologue's "
                             "command, env): the baseline's objects as large as dispatch's")  # fmt: skip
    parser.add_argument("--keep-harness-policies", action="store_true",
                        help="keep tier B's own copies of dispatch's owner policies and record-start beside the "
                             "chart's (by default they are deleted: only the chart's apply, as in an "
                             "installation)")  # fmt: skip
    parser.add_argument("--floor", action="store_true",
                        help="a third arm, check: plain TrainJobs whose admissions wait for an AdmissionCheck this "
                             "benchmark approves at once, the floor of any check controller in Kueue")  # fmt: skip
    parser.add_argument("--arms", default=None,
                        help=f"the arms, in the order their rounds run (any of {', '.join(ARMS)}; by default "
                             "dispatch,baseline, and with --floor dispatch,design,baseline,check). The ablation arms "
                             "are the check arm plus one element of this design each: "
                             + "; ".join(f"{k}: {v}" for k, v in ABLATION.items()))  # fmt: skip
    parser.add_argument(
        "--labelled-runtime",
        action="store_true",
        help="the default, kept so the commands docs/performance.md records still run",
    )
    parser.add_argument("--unlabelled-runtime", action="store_true",
                        help="the runtime's pod template carries no label (by default it carries one, as most "
                             "runtimes' do): Kueue's restore at an eviction then leaves the JobSet's pod template "
                             "metadata empty and Trainer's apply of it is refused (422, metadata null), so no arm but "
                             "dispatch's pays for the template's round trip")  # fmt: skip
    parser.add_argument("--profile", type=int, default=0, metavar="SECONDS",
                        help="a CPU profile of the API server over the first SECONDS of each window, written to "
                             "the run folder's anchor/apiserver-<phase>-<arm>-<round>.pprof")  # fmt: skip
    args = parser.parse_args(argv)
    phases = phases_of(args.phases)
    if phases is None:
        parser.error(f"--phases: first, readmission, first,readmission or both, not {args.phases!r}")
    if args.first_rounds is not None and not 1 <= args.first_rounds <= args.rounds:
        parser.error(f"--first-rounds: from 1 to --rounds ({args.rounds}), not {args.first_rounds}")
    default = "dispatch,design,baseline,check" if args.floor else "dispatch,baseline"
    arms = tuple(a.strip() for a in (default if args.arms is None else args.arms).split(","))
    if not arms or set(arms) - set(ARMS) or len(set(arms)) != len(arms):
        parser.error(f"--arms: distinct arms of {', '.join(ARMS)}, not {args.arms!r}")
    flags = " ".join(sys.argv[1:] if argv is None else argv)
    print(f"anchor_bench {flags}: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M:%S} UTC, "
          f"{platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load {load()}")  # fmt: skip
    run_dir = new_run_dir()
    work = run_dir / "anchor"
    work.mkdir(parents=True)
    cp: ControlPlane | None = None
    try:
        t = time.monotonic()
        if args.profile:
            enable_profiling()
        cp = start_control_plane(run_dir, audit_users=AUDITED if args.audit else ())
        tb = start_tier_b(cp)
        print(f"tier B ready in {time.monotonic() - t:.1f}s; run folder {run_dir}")
        bench = setup(tb, args.jobs, args.grace_seconds, work, not args.keep_harness_policies, arms,
                      not args.unlabelled_runtime, args.pad_baseline)  # fmt: skip
        processes, admin = bench.processes, tb.admin
        bench.concurrency = args.concurrency
        time.sleep(5)
        idle0 = cpu_of(processes)
        time.sleep(10)
        idle = {k: v - idle0[k] for k, v in cpu_of(processes).items()}
        profile = (args.profile, work) if args.profile else None
        first: list[Round] = []
        first_rounds = first_rounds_of(args.first_rounds, args.rounds, phases)
        for index in range(1, first_rounds + 1):
            for arm in bench.arms:
                submit = submitter(bench, admin, arm, args.jobs, str(index))
                if "first" not in phases:  # the jobs the re-admissions need, started but not reported
                    t = time.monotonic()
                    submit(Timeline(t, set(), arm.check, Timeline.FIRST_START), Round(arm.name, 0))
                    wait_for(lambda arm=arm: len(running_jobs(arm, set(), {})) == args.jobs, args.timeout,
                                    f"{arm.name}: all running", interval=1)  # fmt: skip
                    print(f"{arm.name}: all {args.jobs} running {time.monotonic() - t:.1f}s after the first submission")
                    continue
                r = first_start_round(admin, arm, args.jobs, index, processes, args.timeout, submit, profile)
                first.append(r)
                print(f"{arm.name} first start {index}: all {args.jobs} submitted {r.submitted_after:.1f}s and running "
                      f"{r.seconds:.1f}s after the first submission ({r.refused_starts} Starts refused); API server "
                      f"{r.cpu['kube-apiserver']:.2f} s CPU, etcd {r.cpu['etcd']:.2f} s, agent "
                      f"{r.cpu['dispatch-agent']:.2f} s; load {load()}", flush=True)  # fmt: skip
                if index < first_rounds:
                    print(f"{arm.name}: cleared in {clear(admin, arm, args.timeout):.1f}s", flush=True)
                time.sleep(5)
        rounds: list[Round] = []
        for index in range(1, args.rounds + 1 if "readmission" in phases else 1):
            for arm in bench.arms:
                r = run_round(admin, arm, args.jobs, index, processes, args.timeout, profile)
                rounds.append(r)
                print(f"{arm.name} {index}: all {args.jobs} suspended {r.evicted_after:.1f}s after the blocker, "
                      f"{r.old_pods_left} old pods listed at its delete; all running again {r.seconds:.1f}s after "
                      f"it; API server {r.cpu['kube-apiserver']:.2f} s CPU, etcd {r.cpu['etcd']:.2f} s, agent "
                      f"{r.cpu['dispatch-agent']:.2f} s; load {load()}",
                      flush=True)  # fmt: skip
                settle(arm, args.jobs, args.timeout)
                time.sleep(5)
        if cp.audit_log is not None:
            time.sleep(2)  # blocking mode: a request's event is written as it ends
            audited_writes(cp.audit_log, first + rounds)
        for phase in (first, rounds):
            if phase:
                report(phase, args.jobs, idle)
        for name in (approver_of(arm.name) for arm in bench.arms if arm.check == FLOOR_CHECK):
            approver = processes.get(name)
            if approver is not None:
                approver.stop()
                print(approver.log_path.read_text().strip().splitlines()[-1])
        print(f"\nend {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M:%S} UTC, load {load()}")
        return 0
    finally:
        if cp is not None:
            cp.stop()
        stop_everything()


if __name__ == "__main__":
    sys.exit(main())
