"""The supervisor's traffic: what dispatch would do to many jobs at once, through the agent's API only (a token of
a ServiceAccount bound to the chart's supervisor roles), with every call recorded in calls.jsonl.

Jobs are started on a few ClusterQueues at random priorities and opened at once (a quarter some seconds later,
LATE_OPEN_SHARE), so that they preempt each
other and other parties' jobs preempt them; some finish, some fail their rank so JobSet restarts them (J
rises), some run until stopped; Hold, Release and Stop come at random. The other parties' urgent TrainJobs run
on kwok's nodes; the harness plays their kubelet and completes them.

Chance alone may readmit no job that had run (seen: a 90 s arm whose preemptions all struck jobs before their
trainer started), so every arm also *bounces* BOUNCES jobs, as a supervisor moving work would: a job whose
trainer has written to the ledger is held, and released HELD_SECONDS later. Its readmission is the one the
readmission gate exists for; a check controller that does not raise A runs it again under the same identity.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ulid import ULID

from agent.api.client import AgentClient, AgentError, token_from_file
from agent.api.errors import ErrorKind
from agent.api.models import HoldRequest, ObjectRef, PreflightRequest, StartRequest, StatusResponse
from chaos import site
from harness.kube_http import ApiError, KubeHttp
from harness.sandbox import site as sandbox_site
from harness.tier_b import KWOK_COMPLETE_ANNOTATION

T = TypeVar("T")
FINAL_PHASES = ("Complete", "Failed")
CUT_KINDS = (ErrorKind.UNAVAILABLE, ErrorKind.INTERNAL, ErrorKind.RATE_LIMITED)
"""Answers after which the call's outcome is unknown: the agent may have written before it failed."""
BOUNCES = 2
"""Jobs per arm held once their trainer ran, and released: readmissions of a job that ran, whatever chance does."""
HELD_SECONDS = 8
"""How long a hold lasts at least before a Release may lift it."""
LATE_OPEN_SHARE = 0.25
LATE_OPEN_SECONDS = (3.0, 10.0)
"""A quarter of the jobs are opened some seconds after their Start, as a supervisor that starts now and opens
later: the start gate must keep each closed all that while (an execution before its Open is rule 4's)."""


@dataclass
class Job:
    namespace: str
    name: str
    uid: str
    queue: str
    priority: str
    kind: str
    """finish | fail | long: what its trainer does (see site.TRAINER)."""
    opened: bool = False
    open_at: float | None = None
    """A late Open's time (monotonic); None: opened at its Start, or already."""
    held_since: float | None = None
    bounced: bool = False
    """Held once its trainer ran, to be released HELD_SECONDS later (the module doc)."""
    stopped: bool = False
    phase: str = ""
    ceased: bool = False
    gone: bool = False
    """Stopped, and Status found no TrainJob any more: nothing left to ask about."""

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(namespace=self.namespace, name=self.name, uid=self.uid)

    @property
    def live(self) -> bool:
        return not self.stopped and self.phase not in FINAL_PHASES


@dataclass
class Others:
    name: str
    complete_at: float


@dataclass
class Counts:
    started: int = 0
    opened: int = 0
    holds: int = 0
    releases: int = 0
    stops: int = 0
    others: int = 0
    bounces: int = 0
    calls: int = 0
    failed_calls: int = 0
    by_error: dict[str, int] = field(default_factory=dict)


def behaviour(rng: random.Random) -> tuple[str, dict[str, str]]:
    """What one job's trainer does: the kind and the environment Start passes it."""
    kind = rng.choices(("finish", "fail", "long"), weights=(45, 30, 25))[0]
    env = {"CHAOS_STOP": str(site.STOP_SECONDS), "CHAOS_FAIL_UNTIL_J": "0", "CHAOS_FAIL_AFTER": "0"}
    if kind == "finish":
        env["CHAOS_WORK"] = str(rng.randint(30, 120))
    elif kind == "fail":
        env |= {"CHAOS_WORK": str(rng.randint(30, 90)), "CHAOS_FAIL_UNTIL_J": str(rng.randint(1, site.MAX_RESTARTS)),
                "CHAOS_FAIL_AFTER": str(rng.randint(4, 15))}  # fmt: skip
    else:
        env["CHAOS_WORK"] = "1000000"
    return kind, env


def bounce_move(
    live: list[Job], now: float, *, done: int, ran: Callable[[Job], bool], rng: random.Random
) -> tuple[str, Job] | None:
    """The bounce's next move (the module doc): ("release", a bounced job held over HELD_SECONDS) first, then,
    while fewer than BOUNCES are done, ("hold", an opened job not held nor bounced yet whose trainer ran)."""
    due = [j for j in live if j.bounced and j.held_since is not None and now - j.held_since > HELD_SECONDS]
    if due:
        return "release", due[0]
    if done >= BOUNCES:
        return None
    candidates = [j for j in live if j.opened and j.held_since is None and not j.bounced and ran(j)]
    return ("hold", rng.choice(candidates)) if candidates else None


class Traffic:
    def __init__(self, *, api_url: str, ca_file: Path, resolve: dict[str, str], token_file: Path, admin: KubeHttp,
                 namespace: str, image: str, runtime: str, others_runtime: str, jobs: int, seed: int,
                 record: Callable[..., None], ledger: Path | None = None, others: bool = True) -> None:  # fmt: skip
        self.api_url, self.ca_file, self.resolve, self.token_file = api_url, ca_file, resolve, token_file
        self.admin = admin
        self.namespace = namespace
        self.image = image
        self.runtime = runtime
        self.others_runtime = others_runtime
        self.target = jobs
        self.rng = random.Random(seed)
        self.record = record
        self.ledger = ledger
        """Where the trainers write (site.ledger_dir): a job ran once its folder holds a life."""
        self.with_others = others
        """Other parties' urgent jobs now and then, which preempt dispatch's (on the MultiKueue arm MultiKueue
        runs them on the workers' kwok nodes; ended by deleting them on the manager)."""
        self.jobs: list[Job] = []
        self.others: list[Others] = []
        self.counts = Counts()
        self._last_poll = 0.0
        self.last_error: dict[str, ErrorKind] = {}

    # -- calls, recorded --------------------------------------------------------------------------

    async def call(self, op: str, job: str, uid: str | None, fn: Callable[[], Awaitable[T]]) -> T | None:
        t0 = time.time()
        fields: dict[str, Any] = {"op": op, "namespace": self.namespace, "job": job, "uid": uid}
        self.counts.calls += 1
        try:
            result = await fn()
        except AgentError as exc:
            self.last_error[job] = exc.kind
            transport = exc.status == 0  # cut off: timeout, EOF, reset
            cut = transport or exc.kind in CUT_KINDS
            self.counts.failed_calls += 1
            self.counts.by_error[str(exc.kind)] = self.counts.by_error.get(str(exc.kind), 0) + 1
            self.record(**fields, t0=t0, t1=time.time(), ok=False, error="cut" if transport else str(exc.kind),
                        cut=cut, message=str(exc)[:300])  # fmt: skip
            return None
        extra: dict[str, Any] = {}
        if isinstance(result, StatusResponse):
            extra = {"phase": result.phase, "ceased": result.ceased, "ceasedReason": result.ceased_reason,
                     "a": result.a, "j": result.j, "r": result.r}  # fmt: skip
        self.record(**fields, t0=t0, t1=time.time(), ok=True, error=None, cut=False, **extra)
        return result

    # -- the supervisor's moves -------------------------------------------------------------------

    async def preflight(self, agent: AgentClient) -> None:
        req = PreflightRequest.model_validate(
            {"namespace": self.namespace, "runtime": {"name": self.runtime}, "kueue": {"localQueue": site.QUEUES[0]}}
        )
        for _ in range(30):
            caps = await self.call("preflight", "", None, lambda: agent.preflight(req))
            if caps is not None and not caps.observe_only and caps.readmission_gate and caps.start_gate:
                return
            await asyncio.sleep(2)
        raise RuntimeError("Preflight did not prove the gates in a minute: the campaign cannot start jobs")

    async def preflight_once(self) -> None:
        async with self.client() as agent:
            await self.preflight(agent)

    async def start_job(self, agent: AgentClient) -> None:
        kind, env = behaviour(self.rng)
        queue = self.rng.choice(site.QUEUES)
        priority = self.rng.choice(list(site.PRIORITIES)[:2])
        job_id = str(ULID())
        req = StartRequest.model_validate({
            "jobId": job_id, "n": 1, "attempt": 1, "namespace": self.namespace, "runtime": {"name": self.runtime},
            "image": self.image, "command": ["bash", "-c", site.TRAINER], "env": env,
            "kueue": {"localQueue": queue, "priorityClass": priority},
        })  # fmt: skip
        name = f"dj-{job_id.lower()}-s1"
        started = await self.call("start", name, None, lambda: agent.start(req))
        if started is None:
            return  # a cut Start leaves a closed TrainJob at most: nothing runs before Open
        job = Job(self.namespace, started.name, started.uid, queue, priority, kind)
        self.jobs.append(job)
        self.counts.started += 1
        if self.rng.random() < 0.15:
            await self.hold(agent, job)  # held before it ever opens
        if self.rng.random() < LATE_OPEN_SHARE:
            job.open_at = time.monotonic() + self.rng.uniform(*LATE_OPEN_SECONDS)
            return
        await self.open(agent, job)

    async def open(self, agent: AgentClient, job: Job) -> None:
        job.open_at = None
        if await self.call("open", job.name, job.uid, lambda: agent.open(job.ref)) is not None:
            job.opened = True
            self.counts.opened += 1

    async def hold(self, agent: AgentClient, job: Job) -> None:
        req = HoldRequest(namespace=self.namespace, name=job.name, uid=job.uid, who="chaos", reason="campaign")
        if await self.call("hold", job.name, job.uid, lambda: agent.hold(req)) is not None:
            job.held_since = time.monotonic()
            self.counts.holds += 1

    async def release(self, agent: AgentClient, job: Job) -> None:
        if await self.call("release", job.name, job.uid, lambda: agent.release(job.ref)) is not None:
            job.held_since = None
            self.counts.releases += 1

    async def stop(self, agent: AgentClient, job: Job) -> None:
        if await self.call("stop", job.name, job.uid, lambda: agent.stop(job.ref)) is not None:
            job.stopped = True
            self.counts.stops += 1

    async def poll(self, agent: AgentClient, op: str = "status", jobs: list[Job] | None = None) -> None:
        async def one(job: Job) -> None:
            st = await self.call(op, job.name, job.uid, lambda: agent.status(job.ref))
            if st is not None:
                job.phase, job.ceased = st.phase, st.ceased
            elif job.stopped and self.last_error.get(job.name) == ErrorKind.NOT_FOUND:
                job.gone = True

        chosen = jobs if jobs is not None else [j for j in self.jobs if not j.gone]
        await asyncio.gather(*(one(j) for j in chosen))

    def others_round(self) -> None:
        """Another party's urgent job now and then (at most two at once); those whose time is up complete."""
        now = time.monotonic()
        for other in [o for o in self.others if o.complete_at <= now]:
            self.others.remove(other)
            try:
                for pod in self.admin.list("v1", "Pod", self.namespace,
                                           label_selector=f"jobset.sigs.k8s.io/jobset-name={other.name}"):  # fmt: skip
                    self.admin.merge_patch("v1", "Pod", pod["metadata"]["name"],
                                           {"metadata": {"annotations": {KWOK_COMPLETE_ANNOTATION: "true"}}},
                                           self.namespace)  # fmt: skip
                self.admin.delete(sandbox_site.TRAINER_V, "TrainJob", other.name, self.namespace)
            except (ApiError, OSError):
                pass  # the API server restarting: the job is someone else's, its end does not matter
        if len(self.others) < 2 and self.rng.random() < 0.08:
            name = f"others-{self.rng.getrandbits(32):08x}"
            try:
                self.admin.create(site.others_job(name, self.namespace, self.rng.choice(site.QUEUES),
                                                  self.others_runtime))  # fmt: skip
            except (ApiError, OSError):
                return
            self.others.append(Others(name, now + self.rng.uniform(10, 40)))
            self.counts.others += 1

    def ran(self, job: Job) -> bool:
        """Its trainer wrote a line to the ledger: an execution of it ran."""
        folder = self.ledger / job.namespace / job.name if self.ledger is not None else None
        return folder is not None and any(folder.glob("*.log"))

    async def bounce(self, agent: AgentClient, live: list[Job]) -> bool:
        """Makes the bounce's next move (``bounce_move``), if any; True when it made a call."""
        move = bounce_move(live, time.monotonic(), done=self.counts.bounces, ran=self.ran, rng=self.rng)
        if move is None:
            return False
        what, job = move
        if what == "release":
            await self.release(agent, job)
            return True
        await self.hold(agent, job)
        if job.held_since is not None:
            job.bounced = True
            self.counts.bounces += 1
        return True

    async def tick(self, agent: AgentClient) -> None:
        live = [j for j in self.jobs if j.live]
        late = [j for j in live if j.open_at is not None and j.open_at <= time.monotonic()]
        if late:
            await self.open(agent, late[0])
            return
        if await self.bounce(agent, live):
            return
        if len(live) < self.target:
            await self.start_job(agent)
            return
        roll = self.rng.random()
        opened = [j for j in live if j.held_since is None]
        held = [j for j in live if j.held_since is not None and time.monotonic() - j.held_since > HELD_SECONDS]
        if roll < 0.12 and opened:
            await self.hold(agent, self.rng.choice(opened))
        elif roll < 0.35 and held:
            await self.release(agent, self.rng.choice(held))
        elif roll < 0.355 and live:
            await self.stop(agent, self.rng.choice(live))

    async def run(self, until: float) -> None:
        """Drives the jobs until the host's clock passes ``until``."""
        async with self.client() as agent:
            while time.time() < until:
                await self.tick(agent)
                if self.with_others:
                    await asyncio.to_thread(self.others_round)
                if time.monotonic() - self._last_poll > 3:
                    self._last_poll = time.monotonic()
                    await self.poll(agent)
                await asyncio.sleep(self.rng.uniform(0.3, 1.5))

    async def settle(self, quiet: float = 20, within: float = 240) -> None:
        """After the faults are healed: polls until no job's phase changed for ``quiet`` seconds, releases what is
        still held (so every job can end), then reads every job's final Status."""
        async with self.client() as agent:
            for job in [j for j in self.jobs if j.live and j.held_since is not None]:
                await self.release(agent, job)
            deadline = time.monotonic() + within
            last, since = None, time.monotonic()
            while time.monotonic() < deadline:
                await self.poll(agent)
                now = [(j.name, j.phase, j.ceased) for j in self.jobs]
                if now != last:
                    last, since = now, time.monotonic()
                elif time.monotonic() - since > quiet:
                    break
                await asyncio.sleep(2)
            await self.poll(agent, op="final-status")

    async def wind_down(self, within: float = 240) -> None:
        """Stops every job of the arm and waits until each is gone, and ends the other parties' jobs, so that
        nothing of this arm runs on into the next one (the ledger of an arm ends with it)."""
        async with self.client() as agent:
            for job in [j for j in self.jobs if not j.gone]:
                await self.stop(agent, job)
            deadline = time.monotonic() + within
            while time.monotonic() < deadline and any(not j.gone for j in self.jobs):
                await self.poll(agent)
                await asyncio.sleep(2)
        for other in self.others:
            with contextlib.suppress(ApiError, OSError):
                self.admin.delete(sandbox_site.TRAINER_V, "TrainJob", other.name, self.namespace)
        self.others.clear()

    def client(self) -> AgentClient:
        return AgentClient(self.api_url, token_from_file(self.token_file), ca_file=self.ca_file, timeout=30,
                           resolve=self.resolve)  # fmt: skip
