"""The campaign's own watch of the cluster: what Kueue admitted and which pods ran, seen by the campaign itself.

The checker must not take an excuse from dispatch's own answers (its Status, Events or annotations): a system
that admitted a job wrongly would also report it wrongly. So the campaign watches, with the admin's
credentials and a plain HTTPS watch of its own (no agent code), the Workloads and pods of the arm's namespace,
and records to RUN/observed.jsonl, on the host's clock at receipt, every change of what the checker reads:

    workload  status.admission set or not, the Admitted, QuotaReserved and Evicted conditions, and the field
              managers that own Admitted (managedFields)
    pod       its phase, its node, and whether it is being deleted
    probe     a ConfigMap the observer writes every PROBE_SECONDS: the time it sent the write, and the time the
              watch delivered it, so the run measures its own watch delay (docs/reliability.md)
    watch     a stream broken (the API server restarting): what follows it comes from a fresh list

A record received on a live watch happened at most the watch's delay before its `t`. One that comes from a
list after a break carries `since`, the last instant the broken stream was known to be live: it happened
between that instant and `t`.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from harness.kube_http import ApiError, KubeHttp
from harness.sandbox.site import KUEUE_V

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
"""JobSet's label on its pods: the JobSet's name, which Trainer makes the TrainJob's."""
CONDITIONS = ("Admitted", "QuotaReserved", "Evicted")
PROBE = "chaos-observer-probe"
PROBE_SECONDS = 1.0
WATCH_SECONDS = 10
"""The server ends each watch after this long; the next one resumes from the last resourceVersion seen."""
RETRY_SECONDS = 0.5

Record = Callable[..., None]


# -- what is recorded of an object (pure) ---------------------------------------------------------------------


def _owner_trainjob(obj: Mapping[str, Any]) -> str:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "TrainJob":
            return str(ref.get("name", ""))
    return ""


ADMITTED_FIELD = 'k:{"type":"Admitted"}'


def admitted_by(obj: Mapping[str, Any]) -> list[str]:
    """The field managers that own the Workload's Admitted condition (server-side apply's record of who last
    applied it): the checker trusts an admission only from Kueue's manager, so a write of dispatch's (or of
    anyone using another manager) that set Admitted is never taken as Kueue's."""
    owners = []
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        conditions = ((entry.get("fieldsV1") or {}).get("f:status") or {}).get("f:conditions") or {}
        if ADMITTED_FIELD in conditions:
            owners.append(str(entry.get("manager", "")))
    return sorted(set(owners))


def workload_state(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A Workload as the checker reads it: whose it is (its TrainJob, by Kueue's owner reference), whether quota
    is reserved for it (`status.admission`), its admission conditions and who wrote Admitted."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return {
        "kind": "workload",
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "job": _owner_trainjob(obj),
        "admission": bool(status.get("admission")),
        "conditions": {c: conds[c] for c in CONDITIONS if c in conds},
        "admitted_by": admitted_by(obj),
    }


def pod_state(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A pod as the checker reads it: whose it is (JobSet's label), its phase, node and deletion."""
    meta = obj.get("metadata") or {}
    return {
        "kind": "pod",
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "job": (meta.get("labels") or {}).get(JOBSET_NAME_LABEL, ""),
        "phase": (obj.get("status") or {}).get("phase", ""),
        "node": (obj.get("spec") or {}).get("nodeName", ""),
        "deleting": bool(meta.get("deletionTimestamp")),
    }


def probe_sent(obj: Mapping[str, Any]) -> float | None:
    try:
        return float((obj.get("data") or {})["sent"])
    except (KeyError, TypeError, ValueError):
        return None


# -- one watched collection -----------------------------------------------------------------------------------


class Stream:
    """List, then watch from the list's resourceVersion, for ever; a broken watch is recorded, and a fresh list
    records what changed while it was down, with `since`."""

    def __init__(self, admin: KubeHttp, api_version: str, kind: str, namespace: str, state: Callable[..., Any],
                 record: Record, *, field_selector: str = "") -> None:  # fmt: skip
        self.admin, self.api_version, self.kind, self.namespace = admin, api_version, kind, namespace
        self.state, self.record, self.field_selector = state, record, field_selector
        self.known: dict[str, Any] = {}
        """uid -> the last state recorded."""
        self.alive = time.time()
        """The last instant this stream was known to be live."""

    def run(self, stop: threading.Event) -> None:
        since: float | None = None
        while not stop.is_set():
            try:
                version = self._list(since)
                self._watch(version, stop)
            except Exception as exc:  # the API server restarting, a reset, a 410 Gone: list again
                if stop.is_set():
                    return
                self.record(t=time.time(), kind="watch", resource=self.kind, event="broken", since=self.alive,
                            error=str(exc)[:200])  # fmt: skip
                since = self.alive
                stop.wait(RETRY_SECONDS)

    def _query(self, **more: str) -> dict[str, str]:
        return {"fieldSelector": self.field_selector, **more} if self.field_selector else dict(more)

    def _list(self, since: float | None) -> str:
        path = self.admin.collection_path(self.api_version, self.kind, self.namespace)
        answer = self.admin.request("GET", path, query=self._query() or None)
        t = time.time()
        seen = set()
        for obj in answer.get("items") or []:
            uid = (obj.get("metadata") or {}).get("uid", "")
            seen.add(uid)
            self._note(obj, "LISTED", t, since)
        for uid in [u for u in self.known if u not in seen]:  # gone while the watch was down
            gone = self.known.pop(uid)
            if isinstance(gone, dict):
                self.record(**{**gone, "t": t, "event": "DELETED", "since": since})
        self.alive = t
        return str((answer.get("metadata") or {}).get("resourceVersion", ""))

    def _watch(self, version: str, stop: threading.Event) -> None:
        while not stop.is_set():
            query = self._query(watch="1", resourceVersion=version, allowWatchBookmarks="true",
                                timeoutSeconds=str(WATCH_SECONDS))  # fmt: skip
            for event in self._events(query):
                t = time.time()
                self.alive = t
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise ApiError(int(obj.get("code") or 0), "WATCH", self.kind, json.dumps(obj))
                version = str((obj.get("metadata") or {}).get("resourceVersion", version))
                if event.get("type") != "BOOKMARK":
                    self._note(obj, str(event.get("type")), t, None)
                if stop.is_set():
                    return

    def _events(self, query: Mapping[str, str]) -> Iterator[dict[str, Any]]:
        creds = self.admin.credentials
        url = creds.server + self.admin.collection_path(self.api_version, self.kind, self.namespace)
        headers = {"Accept": "application/json"}
        if creds.token:
            headers["Authorization"] = f"Bearer {creds.token}"
        request = urllib.request.Request(url + "?" + urllib.parse.urlencode(query), headers=headers)
        with urllib.request.urlopen(request, context=creds.ssl_context(), timeout=WATCH_SECONDS + 15) as resp:
            for line in resp:
                if line.strip():
                    yield json.loads(line)

    def _note(self, obj: Mapping[str, Any], event: str, t: float, since: float | None) -> None:
        uid = (obj.get("metadata") or {}).get("uid", "")
        state = self.state(obj)
        if event == "DELETED":
            self.known.pop(uid, None)
        elif self.known.get(uid) == state:
            return  # nothing the checker reads changed
        else:
            self.known[uid] = state
        if isinstance(state, dict):
            extra = {"since": since} if since is not None else {}
            self.record(**state, t=t, event=event, **extra)
        elif state is not None and event not in ("DELETED", "LISTED"):
            # A probe read by a list after a break measures the break, not the watch: not recorded.
            self.record(t=t, kind="probe", sent=state)


# -- the observer ---------------------------------------------------------------------------------------------


class Observer:
    """The watches of one arm's namespace, and the probe that measures their delay; start() before the traffic,
    stop() after it."""

    def __init__(self, admin: KubeHttp, namespace: str, record: Record) -> None:
        self.admin, self.namespace, self.record = admin, namespace, record
        self.streams = [
            Stream(admin, KUEUE_V, "Workload", namespace, workload_state, record),
            Stream(admin, "v1", "Pod", namespace, pod_state, record),
            Stream(admin, "v1", "ConfigMap", namespace, probe_sent, record, field_selector=f"metadata.name={PROBE}"),
        ]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._create_probe()
        targets: list[Callable[[threading.Event], None]] = [s.run for s in self.streams]
        for target in [*targets, self._probe]:
            thread = threading.Thread(target=target, args=(self._stop,), name="chaos-observer", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=WATCH_SECONDS + 20)
        self._threads = []

    def _probe(self, stop: threading.Event) -> None:
        while not stop.wait(PROBE_SECONDS):
            sent = time.time()
            try:
                self.admin.merge_patch("v1", "ConfigMap", PROBE, {"data": {"sent": repr(sent)}}, self.namespace)
            except ApiError as exc:
                if exc.status == 404:  # deleted (by the attacker, say): made again for the next probe
                    self._create_probe()
            except OSError:
                pass  # the API server restarting: the next probe measures

    def _create_probe(self) -> None:
        with contextlib.suppress(ApiError, OSError):  # there already: a second arm in the namespace
            self.admin.create({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": PROBE, "namespace": self.namespace}, "data": {}})  # fmt: skip
