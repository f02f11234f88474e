"""What the end-to-end tests of the readmission gate share: a watch recorder, the objects they create, and
reading A, J and R back from TrainJobs and pods.

Everything is synchronous (harness.kube_http): the agent under test runs as its own process, so the tests
only create objects, act as an operator would, and read what Kueue, Trainer, JobSet and kwok did.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from contract.admission import admission_count, admission_floor, admission_started
from contract.keys import (
    ANNOTATION_ADMISSION,
    LABEL_JOBSET_NAME,
    LABEL_RESTART_ATTEMPT,
)

# Re-exported: the tests call them as kit.create_as_start and kit.workload_of.
from harness.jobs import create_as_start as create_as_start
from harness.jobs import workload_of as workload_of
from harness.kube_http import KubeHttp
from harness.sandbox import site

KUEUE_V = site.KUEUE_V
TRAINER_V = site.TRAINER_V
JOBSET_V = "jobset.x-k8s.io/v1alpha2"
IMAGE = "registry.invalid/dispatch-e2e/train:1"

T = TypeVar("T")


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- waiting --------------------------------------------------------------------------------------


def eventually(probe: Callable[[], T], within: float, what: str, interval: float = 0.25) -> T:
    """Retries ``probe`` until it returns without an AssertionError (or an API error); bounded by ``within``."""
    deadline = time.monotonic() + within
    while True:
        try:
            return probe()
        except (AssertionError, RuntimeError) as exc:  # harness.kube_http.ApiError is a RuntimeError
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not reached within {within:.0f}s: {exc}") from exc
        time.sleep(interval)


# -- creating ---------------------------------------------------------------------------------------


def conditions(obj: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def condition_true(obj: Mapping[str, Any], type_: str) -> bool:
    return conditions(obj).get(type_, {}).get("status") == "True"


# -- a watch that keeps every version ---------------------------------------------------------------


class Recorder:
    """Every version of the objects of one collection, in the order the API server sent them.

    LIST, then WATCH from the list's resourceVersion in a thread; a read timeout or a closed stream resumes
    from the last resourceVersion seen, so no version is lost (the events carry the objects' full state).
    Histories answer questions a poll cannot: did A change while the TrainJob was unsuspended, which (A, J)
    did each execution's pods carry, in what order were pods created.
    """

    def __init__(self, admin: KubeHttp, path: str, *, label_selector: str | None = None) -> None:
        self._admin, self._path, self._selector = admin, path, label_selector
        query = {"labelSelector": label_selector} if label_selector else None
        listed = admin.request("GET", path, query=query)
        self._rv: str = listed["metadata"]["resourceVersion"]
        self._lock = threading.Lock()
        self._events: list[tuple[str, dict[str, Any]]] = [("ADDED", item) for item in listed["items"]]
        self._received: list[float] = [time.monotonic()] * len(self._events)
        """When this process received each event (its monotonic clock): an order across clusters."""
        self._stop = threading.Event()
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"recorder {path}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        context = self._admin.credentials.ssl_context()
        headers = {"Accept": "application/json"}
        if self._admin.credentials.token:
            headers["Authorization"] = f"Bearer {self._admin.credentials.token}"
        while not self._stop.is_set():
            query = {"watch": "1", "resourceVersion": self._rv, "allowWatchBookmarks": "true", "timeoutSeconds": "60"}
            if self._selector:
                query["labelSelector"] = self._selector
            url = f"{self._admin.credentials.server}{self._path}?{urllib.parse.urlencode(query)}"
            try:
                with urllib.request.urlopen(
                    urllib.request.Request(url, headers=headers), context=context, timeout=2
                ) as r:
                    for line in r:
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            self.error = json.dumps(event["object"])[:500]
                            self._stop.set()
                            return
                        obj = event["object"]
                        with self._lock:
                            self._rv = obj["metadata"]["resourceVersion"]
                            if event["type"] != "BOOKMARK":
                                self._events.append((event["type"], obj))
                                self._received.append(time.monotonic())
                        if self._stop.is_set():
                            return
            except (TimeoutError, OSError, urllib.error.URLError, ValueError):
                continue  # resume from the last resourceVersion seen

    def stop(self) -> None:
        self._stop.set()

    def events(self, within: float = 30) -> list[tuple[str, dict[str, Any]]]:
        """The history so far, once it holds every object as a fresh LIST shows it: a GET a test made just before
        may have seen a version whose watch event has not arrived yet (``within`` seconds at most)."""
        assert self.error is None, f"the watch of {self._path} failed: {self.error}"
        query = {"labelSelector": self._selector} if self._selector else None
        current = {(i["metadata"]["uid"], i["metadata"]["resourceVersion"])
                   for i in self._admin.request("GET", self._path, query=query)["items"]}  # fmt: skip
        deadline = time.monotonic() + within
        while True:
            with self._lock:
                events = list(self._events)
            seen = {(obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]) for _, obj in events}
            if current <= seen:
                return events
            assert self.error is None, f"the watch of {self._path} failed: {self.error}"
            assert time.monotonic() < deadline, f"the watch of {self._path} lags a LIST by {len(current - seen)}"
            time.sleep(0.05)

    def lifetimes(self) -> dict[str, tuple[float, float | None, dict[str, Any]]]:
        """Each object by uid: when its first event and its deletion were received (None: not deleted yet), by this
        process's clock, and its last version."""
        self.events()
        with self._lock:
            timed = list(zip(self._received, self._events, strict=True))
        out: dict[str, tuple[float, float | None, dict[str, Any]]] = {}
        for at, (kind, obj) in timed:
            uid = obj["metadata"]["uid"]
            first = out[uid][0] if uid in out else at
            out[uid] = (first, at if kind == "DELETED" else None, obj)
        return out

    def versions(self, name: str) -> list[dict[str, Any]]:
        """Every version of the object called ``name`` (of every object of that name), oldest first."""
        return [obj for kind, obj in self.events() if kind != "DELETED" and obj["metadata"]["name"] == name]

    def first_seen(self) -> list[dict[str, Any]]:
        """Each object (by uid) as it was first seen, in the order they appeared."""
        seen: dict[str, dict[str, Any]] = {}
        for _, obj in self.events():
            seen.setdefault(obj["metadata"]["uid"], obj)
        return list(seen.values())


# -- A, J and R ------------------------------------------------------------------------------------


def a_of(trainjob: Mapping[str, Any]) -> int | None:
    return admission_count(trainjob)


def floor_of(trainjob: Mapping[str, Any]) -> int | None:
    return admission_floor(trainjob)


def pod_a_j(pod: Mapping[str, Any]) -> tuple[int, int]:
    """(A, J) as the pod carries them: the admission annotation from dispatch's runtime patch and JobSet's
    restart-attempt label (what the prologue reads through the Downward API)."""
    meta = pod["metadata"]
    return int(meta["annotations"][ANNOTATION_ADMISSION]), int(meta["labels"][LABEL_RESTART_ATTEMPT])


def executions(pods: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """The distinct (A, J) of the pods, in the order their first pod appeared."""
    order: list[tuple[int, int]] = []
    for pod in pods:
        key = pod_a_j(pod)
        if key not in order:
            order.append(key)
    return order


def assert_r_strictly_increases(pods_in_creation_order: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """No pod is ever created with a lower R = A + J than an earlier pod, and no two executions share an R:
    so R strictly increases from one execution to the next. Returns the executions' (A, J) in order."""
    keys = [pod_a_j(p) for p in pods_in_creation_order]
    rs = [a + j for a, j in keys]
    runs = executions(pods_in_creation_order)
    assert all(a >= 1 for a, _ in runs), f"a pod ran with A = 0 (never admitted by the gate): {runs}"
    assert rs == sorted(rs), f"a pod was created with a lower R than an earlier one: (A, J) in creation order {keys}"
    assert len({a + j for a, j in runs}) == len(runs), f"two executions share an R: {runs}"
    return runs


def assert_a_rises_before_each_admission(versions: list[dict[str, Any]]) -> list[int]:
    """From the TrainJob's history: A changes only in a write to a suspended version (A rises while the job is
    suspended, or in the write that unsuspends it, where admission raises it: contract/admission.py
    ``unsuspend_ops``), never while an execution runs; it is at least 1 whenever the TrainJob is unsuspended,
    each unsuspension (an admission) records its A as ``admission-started`` in that same write, and runs with an
    A above the previous admission's. Returns A at each admission."""
    admitted_with: list[int] = []
    previous: dict[str, Any] | None = None
    for v in versions:
        suspended = v["spec"].get("suspend") is True
        a = a_of(v)
        if previous is not None and a != a_of(previous):
            where = f"A changed from {a_of(previous)} to {a} at resourceVersion {v['metadata']['resourceVersion']}"
            assert previous["spec"].get("suspend") is True, f"{where}, coming from an unsuspended TrainJob"
        if not suspended:
            assert a is not None, "unsuspended without A"
            assert a >= 1, f"unsuspended with A = {a}: admitted without a raise"
            if previous is None or previous["spec"].get("suspend") is True:
                started = admission_started(v)
                rv = v["metadata"]["resourceVersion"]
                assert started == a, f"unsuspended with A = {a} but admission-started {started} at resourceVersion {rv}"
                admitted_with.append(a)
        previous = v
    assert all(x < y for x, y in itertools.pairwise(admitted_with)), (
        f"an admission did not run with a higher A than the one before: {admitted_with}"
    )
    return admitted_with


# -- objects ---------------------------------------------------------------------------------------


def training_runtime(
    name: str,
    *,
    cpu: str,
    failure_policy: Mapping[str, Any] | None = None,
    node_selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A ClusterTrainingRuntime that meets dispatch's runtime requirements (harness.sandbox.site, which the
    sandbox uses too). The trainer asks for ``cpu`` so that it takes quota in the ClusterQueue (and can be
    preempted)."""
    return site.training_runtime(name, cpu=cpu, image=IMAGE, failure_policy=failure_policy, node_selector=node_selector)


def check_entry(workload: Mapping[str, Any], check: str) -> dict[str, Any]:
    for entry in (workload.get("status") or {}).get("admissionChecks") or []:
        if entry["name"] == check:
            return entry
    raise AssertionError(f"the Workload does not list the check {check}: {workload.get('status')}")


def check_entries(workload: Mapping[str, Any], check: str) -> list[dict[str, Any]]:
    """The check's entry as a list of zero or one (a Workload lists its checks only once Kueue linked it)."""
    return [e for e in (workload.get("status") or {}).get("admissionChecks") or [] if e["name"] == check]


def pods_of(admin: KubeHttp, namespace: str, jobset: str) -> list[dict[str, Any]]:
    return admin.list("v1", "Pod", namespace, label_selector=f"{LABEL_JOBSET_NAME}={jobset}")


def running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
