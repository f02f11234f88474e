"""The floor's check controller (anchor_bench ``--floor``), as a process of its own, so that its CPU is measured
as the agent's is and the benchmark's own watches do not slow it.

    .venv/bin/python -m benchmarks.floor_approver --server URL --ca CA --cert CERT --key KEY --namespace NS --check NAME
    (started by benchmarks/anchor_bench.py; prints "ready" once its watch is live; SIGTERM ends it and it prints
    its Ready writes and refusals)

What any AdmissionCheck controller must do at the least, done as cheaply as a controller can: one watch of the
namespace's Workloads; every event that shows the check Pending with quota reserved (not evicted) queues the
Workload, and a few threads set the entry Ready by one server-side apply of the check's entry alone
(agent/domain/workload.py ``check_state_apply``, the body dispatch's gate writes), preconditioned on the
resourceVersion seen, so a Workload Kueue moved meanwhile (evicted, reset) gets 409 and its next event queues it
again. No GET, no LIST, no other write.

``--design`` (the anchor's ``design`` arm): signed in as dispatch, it also writes dispatch's approval of the next
execution on the TrainJob before the Ready, as the readmission gate does (docs/security.md, "The start carries the
gate's approval"), from the TrainJob as its own watch has it: the writes this design needs for an admission, and
nothing of the gate's look at the pods.
"""

from __future__ import annotations

import argparse
import datetime as dt
import signal
import sys
import threading
import time
from pathlib import Path
from queue import SimpleQueue
from typing import Any

from agent.api.service.lifecycle_decisions import rfc3339
from agent.domain.workload import READY, check_state, check_state_apply, owner_trainjob
from benchmarks.anchor_bench import KUEUE_V, TRAINER_V, Latest
from contract.admission import admission_started, approval_ops, preconditions, start_count
from contract.keys import FIELD_MANAGER as DISPATCH_FIELD_MANAGER
from harness.kube_http import ApiError, Credentials, KubeHttp

FIELD_MANAGER = "anchor-floor-approver"
THREADS = 4


class Approver:
    def __init__(self, admin: KubeHttp, namespace: str, check: str, design: bool = False) -> None:
        self._admin, self._check, self._design = admin, check, design
        self._todo: SimpleQueue[dict[str, Any] | None] = SimpleQueue()
        self.writes = self.conflicts = self.approvals = 0
        self._lock = threading.Lock()
        self._trainjobs = Latest(admin, admin.collection_path(TRAINER_V, "TrainJob", namespace)) if design else None
        self._watch = Latest(admin, admin.collection_path(KUEUE_V, "Workload", namespace))
        self._watch.on_event = self._event
        for workload in self._watch.snapshot():
            self._event("ADDED", workload, 0.0)
        self._threads = [threading.Thread(target=self._work, name=f"approver {i}", daemon=True) for i in range(THREADS)]
        for thread in self._threads:
            thread.start()

    def _event(self, kind: str, workload: dict[str, Any], _: float) -> None:
        # Quota reserved and not evicted: Kueue resets the checks to Pending in the eviction's own write, while the
        # quota is still reserved; a Ready then would carry over to the next admission, which would then need no
        # check write at all (and no controller may approve an admission that is being taken back).
        conditions = {c["type"]: c["status"] for c in (workload.get("status") or {}).get("conditions") or []}
        if (
            kind != "DELETED"
            and conditions.get("QuotaReserved") == "True"
            and conditions.get("Evicted") != "True"
            and conditions.get("Finished") != "True"
            and (check_state(workload, self._check) or {}).get("state") == "Pending"
        ):
            self._todo.put(workload)

    def _approve(self, workload: dict[str, Any]) -> bool:
        """``--design``: dispatch's approval of the next execution on its TrainJob (the design's write before each
        Ready but a first one Open carried), from the TrainJob as the watch has it; False when it must wait."""
        owner = owner_trainjob(workload)
        assert self._trainjobs is not None
        assert owner is not None
        trainjob = self._trainjobs.objects.get(owner[1])
        if trainjob is None:
            return False
        a, _ = start_count(trainjob, admission_started(trainjob))
        ops = approval_ops(trainjob, a, str(workload["metadata"]["uid"]))
        if not ops:
            return True
        try:
            self._admin.request("PATCH", self._admin.object_path(trainjob), [*preconditions(trainjob), *ops],
                                query={"fieldManager": DISPATCH_FIELD_MANAGER},
                                content_type="application/json-patch+json")  # fmt: skip
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise
            return False
        with self._lock:
            self.approvals += 1
        return True

    def _work(self) -> None:
        while (workload := self._todo.get()) is not None:
            if self._design and not self._approve(workload):
                time.sleep(0.05)  # the TrainJob moved on under the patch: again, from the watch's newer copy
                self._todo.put(workload)
                continue
            now = rfc3339(dt.datetime.now(dt.UTC))
            body = check_state_apply(workload, self._check, READY, "approved at once (the anchor's floor)", now)
            try:
                self._admin.request("PATCH", self._admin.object_path(workload) + "/status", body,
                                    query={"fieldManager": FIELD_MANAGER, "force": "true"},
                                    content_type="application/apply-patch+yaml")  # fmt: skip
                with self._lock:
                    self.writes += 1
            except ApiError as exc:
                if exc.status not in (404, 409):
                    raise
                with self._lock:
                    self.conflicts += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floor_approver", description=__doc__.splitlines()[0])
    for flag in ("--server", "--ca", "--namespace", "--check"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--token-file", help="sign in with this bearer token instead of a client certificate")
    parser.add_argument("--design", action="store_true", help="dispatch's approval on the TrainJob before each Ready")
    args = parser.parse_args(argv)
    if args.token_file:
        creds = Credentials(args.server, Path(args.ca), token=Path(args.token_file).read_text().strip())
    else:
        creds = Credentials(args.server, Path(args.ca), Path(args.cert), Path(args.key))
    approver = Approver(KubeHttp(creds), args.namespace, args.check, args.design)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    print("ready", flush=True)
    while not done.wait(1):
        pass
    print(f"{'the design floor' if args.design else 'the floor'}'s approver: {approver.approvals} approvals, "
          f"{approver.writes} Ready writes, {approver.conflicts} refused (409/404)", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
