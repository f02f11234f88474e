"""The campaign's independent checker: did dispatch keep its promise, judged from the run's records alone.

The promise, per job (a namespace and a TrainJob name), where an execution is one life of a trainer process:

1. no two executions share an identity (R, or the attempt token), and each identity is well formed;
2. R only rises: each execution's R is above the R of every execution that started before it;
3. no two executions run at once;
4. nothing starts before Open, while a Hold is in force, or after Stop;
5. Status says what the ledger shows: Ceased means no process runs and none starts without a dispatch call,
   and the final Status agrees with how the last execution ended.

The records: RUN/ledger/<namespace>/<trainjob>/<life>.log, written by the real trainer processes on the host's
clock; RUN/calls.jsonl, the supervisor's calls of dispatch's API with when they started (t0) and returned (t1);
RUN/observed.jsonl, the campaign's own watch of the job's Workloads and pods (chaos/observer.py), each change
stamped with the host's clock when it was received; RUN/campaign.json for the heartbeat interval;
RUN/schedule.jsonl, the nemesis' actions, to explain a violation.

The checker trusts nothing of the product nor of the rest of the campaign: it imports neither, re-derives every
identity from the values the trainers wrote, and takes no excuse from dispatch's answers (Status judges only
Status, rule 5): when an execution began comes from the ledger and the campaign's watch alone.

    DISPATCH_EPOCH   = G x 10^12 + N x 10^6 + R      R = EPOCH mod 10^6
    DISPATCH_ATTEMPT = <JobID>.<N>.<attempt>.<A>.<J>  R = A + J
    TrainJob name    = dj-<JobID lowercased>-s<N>

It flags only what is certain. A call took effect at an unknown instant between its t0 and its t1; a call whose
outcome is unknown (`cut`) may have taken effect. A life ran from its start line to at least its last line; its
true end lies within the clock's resolution after that (the heartbeat interval plus the largest gap seen between
two lines of a life), so an overlap is flagged only when one life started at or before another's last line. A
change the watch received at t happened within the watch's delay (measured by its probes) before t.

Usage: python -m chaos.checker RUN_DIR   (exit 0: the promise held; 1: violations; 2: unreadable records)
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

Call = dict[str, Any]
"""One line of calls.jsonl as read: op, namespace, job, t0, t1, ok, cut, error and, for Status, phase, ceased."""

RULES = {
    1: "no two executions share an identity",
    2: "R only rises",
    3: "no two executions at once",
    4: "nothing starts before Open, while held or after Stop",
    5: "Status says what the ledger shows",
}
HEARTBEAT_SECONDS = 0.2
"""The trainer's heartbeat interval when campaign.json does not say."""
WATCH_DELAY_SECONDS = 1.0
"""The campaign's watch delay when observed.jsonl holds no probe to measure it."""
STOP_LATENCY_SECONDS = 5.0
"""How long after a Stop returned a process of an execution admitted before it may still come up: its container
was being created when the TrainJob's deletion landed, and the kubelet starts it before it sees the deletion."""

MILLION = 10**6
INT64_MAX = 2**63 - 1
_CANONICAL = re.compile(r"0|[1-9][0-9]*")
_JOB_ID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")  # a ULID: 26 characters of Crockford base32, upper case
_NAME = re.compile(r"dj-(?P<job>[0-7][0-9a-hjkmnp-tv-z]{25})-s(?P<n>0|[1-9][0-9]{0,5})")


# -- the records ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Life:
    """One execution: one trainer process, from its ledger file."""

    namespace: str
    job: str
    life: str
    start: float
    last: float
    pod: str
    podname: str
    node: str
    epoch: str
    attempt: str
    r: int | None
    """R from the epoch; None when the epoch is malformed."""
    a: int | None
    """A and J from the attempt token; None when the token is malformed."""
    j: int | None
    exit_rc: int | None
    term: float | None
    lines: int
    max_gap: float
    """The largest gap between two consecutive lines of this life."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.job}"


@dataclass(frozen=True)
class Violation:
    rule: int
    job: str
    """namespace/name."""
    message: str
    lives: tuple[str, ...]
    at: float
    """When it happened, as closely as the records say: to show the faults around it."""


@dataclass(frozen=True)
class Report:
    violations: tuple[Violation, ...]
    lives: int
    jobs: int
    max_gap: float
    """The largest gap between two consecutive lines of any life observed."""
    notes: tuple[str, ...] = ()
    heartbeat_seconds: float = HEARTBEAT_SECONDS
    executions: tuple[Life, ...] = ()
    watch_delay: float = WATCH_DELAY_SECONDS
    """The campaign's watch delay: the largest a probe measured, or WATCH_DELAY_SECONDS without one."""
    probes: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def resolution(self) -> float:
        """A life's true end lies within this many seconds after its last line."""
        return self.heartbeat_seconds + self.max_gap

    def by_rule(self) -> dict[int, int]:
        counts = Counter(v.rule for v in self.violations)
        return {rule: counts.get(rule, 0) for rule in RULES}


@dataclass(frozen=True)
class Seen:
    """Something the campaign's watch saw happen: at an unknown instant between lo and hi, on the host's clock."""

    lo: float
    hi: float


@dataclass(frozen=True)
class Observed:
    """What the campaign's own watch (RUN/observed.jsonl) saw, per job (namespace/TrainJob)."""

    admissions: dict[str, list[Seen]]
    """Each time a Workload of the job became Admitted (Kueue's condition: quota reserved and every admission
    check Ready, after which Kueue unsuspends the job), in the order seen."""
    failures: dict[str, list[Seen]]
    """Each time a pod of the job was seen Failed (what makes JobSet restart it, J + 1)."""
    delay: float = WATCH_DELAY_SECONDS
    probes: int = 0


def watch_delay(records: Iterable[dict[str, Any]]) -> tuple[float, int]:
    """The watch's delay as its probes measured it: the largest time from sending a write to the watch
    delivering it (an upper bound: the write landed after it was sent), and how many probes; without a probe,
    WATCH_DELAY_SECONDS."""
    delays = [float(r["t"]) - float(r["sent"]) for r in records if r.get("kind") == "probe" and _timed_record(r)
              and isinstance(r.get("sent"), int | float)]  # fmt: skip
    return (max(0.0, *delays) if delays else WATCH_DELAY_SECONDS), len(delays)


def _timed_record(record: dict[str, Any]) -> bool:
    return isinstance(record.get("t"), int | float) and not isinstance(record.get("t"), bool)


KUEUE_MANAGERS = frozenset({"kueue-admission", "kueue", "kueue.x-k8s.io/multikueue"})
"""The field managers Kueue's controllers write a Workload's Admitted condition with (server-side apply)."""


def _by_kueue(record: dict[str, Any]) -> bool:
    """Admitted as Kueue wrote it: no manager but Kueue's owns the condition. A record without `admitted_by`
    (a run older than that field) is taken as the watch saw it."""
    owners = record.get("admitted_by")
    return owners is None or (bool(owners) and set(owners) <= KUEUE_MANAGERS)


def observe(records: Sequence[dict[str, Any]], delay: float | None = None) -> Observed:
    """The transitions the checker uses, each as a Seen: a record received on a live watch happened within the
    delay before its receipt; one that a list after a broken watch found (`since`) happened after that stream
    was last known live, less the delay."""
    measured, probes = watch_delay(records)
    # Each cluster's watch by its own probes (the MultiKueue arm watches each worker): a stalled API server on one
    # widens that worker's resolution only.
    clusters = {str(r.get("cluster", "")) for r in records}
    by_cluster = {c: watch_delay([r for r in records if str(r.get("cluster", "")) == c]) for c in clusters}
    delays = {c: (m if n else measured) for c, (m, n) in by_cluster.items()}
    d = measured if delay is None else delay
    admissions: dict[str, list[Seen]] = defaultdict(list)
    failures: dict[str, list[Seen]] = defaultdict(list)
    before: dict[tuple[str, str], Any] = {}
    # Whose an object is, by its uid, from any record that says: a worker's copy of a Workload is admitted before
    # MultiKueue creates the TrainJob there that owns it, so its first records name no job.
    owner = {str(r.get("uid", "")): str(r["job"]) for r in records if r.get("job") and r.get("uid")}
    for r in sorted((r for r in records if _timed_record(r)), key=lambda r: r["t"]):
        kind, uid = r.get("kind"), str(r.get("uid", ""))
        if kind not in ("workload", "pod") or r.get("event") == "DELETED":
            continue
        since = r.get("since") if isinstance(r.get("since"), int | float) else None
        own = d if delay is not None else delays.get(str(r.get("cluster", "")), d)
        seen = Seen(min(r["t"], since if since is not None else r["t"]) - own, float(r["t"]))
        job = f"{r.get('namespace', '')}/{r.get('job') or owner.get(uid, '')}"
        if kind == "workload":
            now = (r.get("conditions") or {}).get("Admitted") == "True" and _by_kueue(r)
            if now and before.get((kind, uid)) is not True:
                admissions[job].append(seen)
        else:
            now = r.get("phase")
            if now == "Failed" and before.get((kind, uid)) != "Failed":
                failures[job].append(seen)
        before[(kind, uid)] = now
    return Observed(dict(admissions), dict(failures), d, probes)


# -- identities, re-derived ----------------------------------------------------------------------------------


class Epoch(NamedTuple):
    g: int
    n: int
    r: int


class Token(NamedTuple):
    job_id: str
    n: int
    attempt: int
    a: int
    j: int


class Name(NamedTuple):
    job_id: str
    """Upper case, as in the token."""
    n: int


def decimal(text: str) -> int | None:
    """A canonical decimal (no sign, no leading zero), or None."""
    return int(text) if _CANONICAL.fullmatch(text) else None


def parse_epoch(text: str) -> Epoch | None:
    value = decimal(text)
    if value is None or not 1 <= value <= INT64_MAX:
        return None
    rest, r = divmod(value, MILLION)
    g, n = divmod(rest, MILLION)
    return Epoch(g, n, r) if r >= 1 else None


def parse_token(text: str) -> Token | None:
    parts = text.split(".")
    if len(parts) != 5 or not _JOB_ID.fullmatch(parts[0]):
        return None
    if not all(_CANONICAL.fullmatch(part) for part in parts[1:]):
        return None
    n, attempt, a, j = (int(part) for part in parts[1:])
    return Token(parts[0], n, attempt, a, j) if n < MILLION else None


def parse_name(name: str) -> Name | None:
    match = _NAME.fullmatch(name)
    return Name(match["job"].upper(), int(match["n"])) if match else None


# -- reading the run -----------------------------------------------------------------------------------------


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text.replace(",", "."))  # bash writes EPOCHREALTIME with the locale's decimal mark
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _complete_lines(data: bytes) -> list[str]:
    # A process killed mid-write leaves its last line without the newline: that line is not a record.
    return data.decode("utf-8", errors="replace").split("\n")[:-1]


def parse_life(lines: Sequence[str], *, namespace: str, job: str, life: str) -> tuple[Life | None, list[str]]:
    """A life from its file's complete lines (namespace, job and life id as the path says), and what is odd."""
    times: list[float] = []
    start: tuple[float, dict[str, str]] | None = None
    exit_rc: int | None = None
    term: float | None = None
    odd: list[str] = []
    for line in lines:
        words = line.split()
        if not words:
            continue
        kind, fields = words[0], dict(word.split("=", 1) for word in words[1:] if "=" in word)
        t = _number(fields.get("t"))
        if t is None:
            odd.append(f"a line without a time: {line[:80]!r}")
            continue
        times.append(t)
        if kind == "start" and start is None:
            start = (t, fields)
        elif kind == "start":
            odd.append("a second start line (ignored)")
        elif kind == "term" and term is None:
            term = t
        elif kind == "exit":
            exit_rc = int(fields["rc"]) if re.fullmatch(r"-?[0-9]+", fields.get("rc", "")) else None
    if start is None:
        return None, [*odd, "no complete start line: not counted as a life"]
    t0, fields = start
    said = (fields.get("ns", namespace), fields.get("job", job))
    if said != (namespace, job):
        odd.append(f"its start line says {said[0]}/{said[1]}; judged with that job")
    epoch, token = fields.get("epoch", ""), fields.get("attempt", "")
    parsed_epoch, parsed_token = parse_epoch(epoch), parse_token(token)
    # The term line carries the signal's time and is written after a heartbeat: times need not be in order.
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    result = Life(
        namespace=said[0],
        job=said[1],
        life=fields.get("life", life),
        start=t0,
        last=max(times),
        pod=fields.get("pod", ""),
        podname=fields.get("podname", ""),
        node=fields.get("node", ""),
        epoch=epoch,
        attempt=token,
        r=parsed_epoch.r if parsed_epoch else None,
        a=parsed_token.a if parsed_token else None,
        j=parsed_token.j if parsed_token else None,
        exit_rc=exit_rc,
        term=term,
        lines=len(times),
        max_gap=max([0.0, *gaps]),
    )
    return result, odd


def read_ledger(path: Path) -> tuple[list[Life], list[str]]:
    """Every life under a ledger folder (<namespace>/<trainjob>/<life>.log), and notes on what could not count."""
    lives: list[Life] = []
    notes: list[str] = []
    if not path.is_dir():
        return lives, notes
    for file in sorted(path.glob("*/*/*.log")):
        namespace, job = file.parent.parent.name, file.parent.name
        life, odd = parse_life(_complete_lines(file.read_bytes()), namespace=namespace, job=job, life=file.stem)
        notes += [f"ledger {file.relative_to(path)}: {note}" for note in odd]
        if life is not None:
            lives.append(life)
    return lives, notes


def load_ledger(path: Path) -> list[Life]:
    return read_ledger(path)[0]


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    """One JSON object a line; a missing file is empty, a cut-off last line is skipped, any other bad line fails."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):  # no newline after it: the writer was cut off
                continue
            raise ValueError(f"{path}:{number}: not JSON: {exc}") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{number}: not a JSON object")
        records.append(record)
    return records


def _heartbeat(run_dir: Path) -> tuple[float, list[str]]:
    path = run_dir / "campaign.json"
    if not path.exists():
        return HEARTBEAT_SECONDS, []
    try:
        value = json.loads(path.read_text()).get("heartbeat_seconds", HEARTBEAT_SECONDS)
    except (json.JSONDecodeError, AttributeError):
        return HEARTBEAT_SECONDS, [f"campaign.json unreadable: heartbeat taken as {HEARTBEAT_SECONDS} s"]
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return HEARTBEAT_SECONDS, [f"campaign.json heartbeat_seconds {value!r}: taken as {HEARTBEAT_SECONDS} s"]
    return float(value), []


def check_run(run_dir: Path) -> Report:
    """Judge a run folder; a missing record is empty."""
    lives, ledger_notes = read_ledger(run_dir / "ledger")
    heartbeat, campaign_notes = _heartbeat(run_dir)
    if not (run_dir / "observed.jsonl").exists():
        campaign_notes.append("no observed.jsonl: no late start after a Hold or a Stop can be excused")
    observed = observe(load_jsonl(run_dir / "observed.jsonl"))
    report = check(lives, load_jsonl(run_dir / "calls.jsonl"), heartbeat_seconds=heartbeat, observed=observed)
    return replace(report, notes=(*campaign_notes, *ledger_notes, *report.notes))


# -- what the calls say --------------------------------------------------------------------------------------


def _valid(call: Call) -> bool:
    return (
        isinstance(call.get("op"), str)
        and all(isinstance(call.get(k), int | float) and not isinstance(call.get(k), bool) for k in ("t0", "t1"))
        and isinstance(call.get("job"), str | None)
    )


def may_have_taken_effect(call: Call) -> bool:
    """True unless the answer says nothing happened: ok, or cut (outcome unknown). A Hold answered `conflict`
    may have done its first write (the hold on the TrainJob) before it failed."""
    return bool(call.get("ok") or call.get("cut")) or (call["op"] == "hold" and call.get("error") == "conflict")


def _ops(calls: Iterable[Call], *ops: str) -> list[Call]:
    return sorted((c for c in calls if c["op"] in ops), key=lambda c: (c["t0"], c["t1"]))


def _in_start_order(lives: Iterable[Life]) -> list[Life]:
    return sorted(lives, key=lambda life: (life.start, life.life))


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S.%f")[:-3]


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _call(call: Call) -> str:
    outcome = "ok" if call.get("ok") else f"{call.get('error') or 'failed'}{' (cut)' if call.get('cut') else ''}"
    return f"{call['op']} [{_clock(call['t0'])} .. {_clock(call['t1'])}] {outcome}"


# -- rule 1: no two executions share an identity -------------------------------------------------------------


def identity_problems(life: Life) -> list[str]:
    """What is wrong with one life's identity on its own: malformed, R not A + J, not this job's JobID or N."""
    problems = []
    epoch, token, name = parse_epoch(life.epoch), parse_token(life.attempt), parse_name(life.job)
    if epoch is None:
        problems.append(f"epoch {life.epoch!r} is not G*10^12 + N*10^6 + R with 1 <= R < 10^6")
    if token is None:
        problems.append(f"attempt {life.attempt!r} is not <JobID>.<N>.<attempt>.<A>.<J>")
    if name is None:
        problems.append(f"the job name {life.job!r} is not dj-<JobID lowercased>-s<N>")
    if token is not None and token.a < 1:
        problems.append("A = 0 in the attempt token: no gate admitted it")
    if epoch and token and epoch.r != token.a + token.j:
        problems.append(f"the epoch's R {epoch.r} is not A + J = {token.a} + {token.j} of the token")
    if epoch and token and epoch.n != token.n:
        problems.append(f"the epoch's N {epoch.n} is not the token's N {token.n}")
    if token and name and (token.job_id, token.n) != (name.job_id, name.n):
        problems.append(f"the token's JobID.N {token.job_id}.{token.n} is not the job name's {name.job_id}.{name.n}")
    if epoch and name and epoch.n != name.n:
        problems.append(f"the epoch's N {epoch.n} is not the job name's N {name.n}")
    return problems


def malformed_identities(job: str, lives: Sequence[Life]) -> list[Violation]:
    return [
        Violation(1, job, f"life {life.life}: " + "; ".join(problems), (life.life,), life.start)
        for life in _in_start_order(lives)
        if (problems := identity_problems(life))
    ]


def shared_identities(job: str, lives: Sequence[Life]) -> list[Violation]:
    """Lives with the same R, or the same attempt token: each one against the one before it in start order."""
    violations = []
    for what, value_of in (("R", lambda life: life.r), ("attempt token", _token_or_none)):
        groups: dict[object, list[Life]] = defaultdict(list)
        for life in _in_start_order(lives):
            if value_of(life) is not None:
                groups[value_of(life)].append(life)
        for value, group in groups.items():
            for earlier, later in itertools.pairwise(group):
                message = f"lives {earlier.life} and {later.life} share the {what} {value}"
                violations.append(Violation(1, job, message, (earlier.life, later.life), later.start))
    return violations


def _token_or_none(life: Life) -> str | None:
    # A malformed token is flagged on its own; sharing one is no further news.
    return life.attempt if parse_token(life.attempt) else None


# -- rule 2: R only rises ------------------------------------------------------------------------------------


def r_not_rising(job: str, lives: Sequence[Life]) -> list[Violation]:
    """A life whose R is below the R of a life that started strictly before it.

    Equal R is rule 1's (shared R) and is not counted twice. Each offending life is reported once, against the
    earlier life with the highest R.
    """
    violations = []
    highest: tuple[int, Life] | None = None  # the earlier life with the highest R, and that R
    known = [(life.r, life) for life in _in_start_order(lives) if life.r is not None]
    for _, same_start in itertools.groupby(known, key=lambda pair: pair[1].start):
        group = list(same_start)
        for r, life in group:
            if highest is not None and r < highest[0]:
                top, before = highest
                message = (
                    f"life {life.life} (R {r}) started at {_clock(life.start)}, after life {before.life} "
                    f"with the higher R {top} (started {_clock(before.start)})"
                )
                violations.append(Violation(2, job, message, (before.life, life.life), life.start))
        for r, life in group:
            if highest is None or r > highest[0]:
                highest = (r, life)
    return violations


# -- rule 3: no two executions at once -----------------------------------------------------------------------


def overlaps(job: str, lives: Sequence[Life]) -> list[Violation]:
    """A life that started at or before the last line of a life that started before it (or at the same time).

    Only certain overlaps: a life's true end may lie up to the clock's resolution after its last line, and that
    margin is not held against it. Each offending life is reported once, against the earlier life that lasted
    longest.
    """
    violations = []
    longest: Life | None = None
    for life in _in_start_order(lives):
        if longest is not None and life.start <= longest.last:
            message = (
                f"life {life.life} started at {_clock(life.start)} while life {longest.life} was alive: "
                f"its last line is at {_clock(longest.last)}, {longest.last - life.start:.3f} s later"
            )
            violations.append(Violation(3, job, message, (longest.life, life.life), life.start))
        if longest is None or life.last > longest.last:
            longest = life
    return violations


# -- rule 4: nothing starts before Open, while held or after Stop --------------------------------------------


def starts_before_open(job: str, lives: Sequence[Life], calls: Sequence[Call]) -> list[Violation]:
    """A life that started before the earliest instant an Open may have taken effect: the t0 of the first Open
    that succeeded or whose outcome is unknown. No such Open at all: every life is one."""
    opens = [c for c in _ops(calls, "open") if may_have_taken_effect(c)]
    first = opens[0] if opens else None
    violations = []
    for life in _in_start_order(lives):
        if first is None:
            message = f"life {life.life} started at {_clock(life.start)}; no Open call may have opened the job"
        elif life.start < first["t0"]:
            message = f"life {life.life} started at {_clock(life.start)}, before the first Open: {_call(first)}"
        else:
            continue
        violations.append(Violation(4, job, message, (life.life,), life.start))
    return violations


def hold_windows(calls: Sequence[Call]) -> list[tuple[float, float, Call]]:
    """When a hold was certainly in force: from the return of a Hold that succeeded until the start of the first
    Release (any outcome) that may have landed after that Hold. A Hold not known to have landed opens none."""
    releases = _ops(calls, "release")
    windows = []
    for hold in _ops(calls, "hold"):
        if not hold.get("ok"):
            continue
        end = min((r["t0"] for r in releases if r["t1"] >= hold["t0"]), default=math.inf)
        if end > hold["t1"]:
            windows.append((hold["t1"], end, hold))
    return windows


def _earliest_admission(life: Life, admissions: Sequence[Seen]) -> float | None:
    """The earliest instant the admission that ran ``life`` may have happened, as the campaign's watch saw it: it
    is the last admission before the life's start line, so one of those seen since the last one certainly before
    it (seen by the start line), or, with none certain, any that may have come before it. None: none seen."""
    possible = [s for s in admissions if s.lo <= life.start]
    certain = [s for s in possible if s.hi <= life.start]
    if certain:
        last = max(s.hi for s in certain)
        possible = [s for s in possible if s.hi >= last]
    return min((s.lo for s in possible), default=None)


def _restart_trigger(life: Life, lives: Sequence[Life], failures: Sequence[Seen]) -> tuple[float | None, str]:
    """The earliest instant the failure that made JobSet restart ``life`` (J > 0) may have happened: its (A, J-1)
    predecessor's last ledger line (its pod failed after it), else the last pod failure the watch saw before the
    life's start line. None: no evidence of a restart."""
    before = [x for x in lives if (x.a, x.j) == (life.a, (life.j or 0) - 1) and x.start < life.start]
    if before:
        pred = max(before, key=lambda x: x.start)
        return pred.last, f"its predecessor (A={pred.a}, J={pred.j}) life {pred.life} last wrote at {_clock(pred.last)}"
    seen = [s for s in failures if s.lo <= life.start]
    if seen:
        last = max(seen, key=lambda s: s.hi)
        return last.lo, f"a pod of the job was seen failed by {_clock(last.hi)}"
    return None, "no failure of its predecessor in the ledger or the watch"


def began_by(life: Life, lives: Sequence[Life], observed: Observed) -> tuple[float | None, str]:
    """The earliest instant the execution of ``life`` may have begun, from the ledger and the campaign's watch
    only: its admission (Admitted), and for J > 0 also the failure of its (A, J-1) predecessor that made JobSet
    restart it. None, with why: no such evidence, so it cannot be shown to have begun before anything."""
    admitted = _earliest_admission(life, observed.admissions.get(life.key, ()))
    if admitted is None:
        return None, "no admission of the job seen by the watch before its start"
    why = f"its admission may have happened by {_clock(admitted)}"
    if life.j is None or life.j == 0:
        return admitted, why
    trigger, because = _restart_trigger(life, lives, observed.failures.get(life.key, ()))
    if trigger is None:
        return None, because
    return max(admitted, trigger), f"{why}; {because}"


def late_start_note(job: str, life: Life, call: Call, why: str) -> str:
    return (
        f"{job}: life {life.life} (A={life.a}, J={life.j}) came up at {_clock(life.start)}, after "
        f"{_call(call)}: its execution may have begun before the call landed ({why})"
    )


def starts_while_held(job: str, lives: Sequence[Life], calls: Sequence[Call], observed: Observed,
                      notes: list[str] | None = None) -> list[Violation]:  # fmt: skip
    """A life that started while a Hold was in force, unless its execution may have begun (``began_by``) before
    the Hold returned: then it is a late process of that execution, noted in ``notes``."""
    windows = hold_windows(calls)
    violations = []
    for life in _in_start_order(lives):
        for begin, end, hold in windows:
            if begin <= life.start < end:
                began, why = began_by(life, lives, observed)
                if began is not None and began <= hold["t1"]:
                    if notes is not None:
                        notes.append(late_start_note(job, life, hold, why))
                    break
                until = "no Release after it" if math.isinf(end) else f"the next Release started {_clock(end)}"
                message = (
                    f"life {life.life} (A={life.a}, J={life.j}) started at {_clock(life.start)} while held: "
                    f"{_call(hold)}; {until}; {why}"
                )
                violations.append(Violation(4, job, message, (life.life,), life.start))
                break
    return violations


def starts_after_stop(job: str, lives: Sequence[Life], calls: Sequence[Call], observed: Observed,
                      notes: list[str] | None = None) -> list[Violation]:  # fmt: skip
    """A life that started after a Stop returned ok, unless an Open that may have taken effect came in between (a
    new TrainJob of the same name, started and opened again). Excused, and noted, only a late process of an
    execution that may have begun (``began_by``) before the Stop returned and that came up within
    STOP_LATENCY_SECONDS of that return; if it runs on past a Ceased, rule 5 judges it."""
    stops = [c for c in _ops(calls, "stop") if c.get("ok")]
    opens = [c for c in _ops(calls, "open") if may_have_taken_effect(c)]
    violations = []
    for life in _in_start_order(lives):
        for stop in stops:
            reopened = any(stop["t1"] <= o["t0"] < life.start for o in opens)
            if life.start >= stop["t1"] and not reopened:
                began, why = began_by(life, lives, observed)
                late = life.start - stop["t1"]
                if began is not None and began <= stop["t1"] and late <= STOP_LATENCY_SECONDS:
                    if notes is not None:
                        notes.append(late_start_note(job, life, stop, why))
                    break
                if began is not None and began <= stop["t1"]:
                    why += f", but it came up {late:.1f} s after the Stop returned (the bound is "
                    why += f"{STOP_LATENCY_SECONDS:g} s)"
                message = (
                    f"life {life.life} (A={life.a}, J={life.j}) started at {_clock(life.start)}, after "
                    f"{_call(stop)}; {why}"
                )
                violations.append(Violation(4, job, message, (life.life,), life.start))
                break
    return violations


# -- rule 5: Status says what the ledger shows ---------------------------------------------------------------


def ceased_contradicted(job: str, lives: Sequence[Life], calls: Sequence[Call]) -> list[Violation]:
    """Status said Ceased (every process gone, none can start without a dispatch call), yet a life wrote a line
    after that Status returned, and no Open or Release that may have landed after the Status read can have
    started it. Each life is reported once, against the first such Status."""
    ceased = [c for c in _ops(calls, "status", "final-status") if c.get("ok") and c.get("ceased") is True]
    starters = [c for c in _ops(calls, "open", "release") if may_have_taken_effect(c)]
    violations = []
    for life in _in_start_order(lives):
        for status in ceased:
            if life.last <= status["t1"]:
                continue
            started_by_a_call = life.start > status["t0"] and any(
                d["t1"] > status["t0"] and d["t0"] < life.start for d in starters
            )
            if started_by_a_call:
                continue
            reason = f" ({status['ceasedReason']})" if status.get("ceasedReason") else ""
            said = f"{_call(status)} said Ceased{reason}"
            if life.start < status["t0"]:
                message = f"life {life.life} was still alive at {_clock(life.last)} (its last line), after {said}"
            else:
                message = (
                    f"life {life.life} started at {_clock(life.start)}, after {said}, with no Open or Release since"
                )
            violations.append(Violation(5, job, message, (life.life,), max(status["t1"], life.start)))
            break
    return violations


def _final_status(calls: Sequence[Call]) -> Call | None:
    answered = [c for c in _ops(calls, "final-status") if c.get("ok")]
    return answered[-1] if answered else None


def final_status_wrong(job: str, lives: Sequence[Life], calls: Sequence[Call]) -> list[Violation]:
    """The final Status against how the executions ended: the last one finished (rc 0) and nothing held or
    stopped it since it started, so Complete; Complete only if one finished; Complete or Failed means Ceased."""
    final = _final_status(calls)
    if final is None:
        return []
    phase, ceased = final.get("phase"), final.get("ceased")
    ordered = _in_start_order(lives)
    latest = ordered[-1] if ordered else None
    violations = []
    if latest is not None and latest.exit_rc == 0 and phase != "Complete":
        # A Hold or Stop that may have landed while the last life ran makes another phase possible.
        interfered = [c for c in _ops(calls, "hold", "stop") if may_have_taken_effect(c) and c["t1"] > latest.start]
        if not interfered:
            message = f"the last life {latest.life} exited with rc=0, but the final Status says phase {phase!r}"
            violations.append(Violation(5, job, message, (latest.life,), latest.last))
    finished = [life.life for life in ordered if life.exit_rc == 0]
    if phase == "Complete" and not finished:
        message = "the final Status says Complete, but no life of the job exited with rc=0"
        violations.append(Violation(5, job, message, (latest.life,) if latest else (), final["t0"]))
    if phase in ("Complete", "Failed") and ceased is not True:
        message = f"the final Status says {phase} but ceased={ceased!r}: an ended job has no process left"
        violations.append(Violation(5, job, message, (), final["t0"]))
    return violations


def final_status_notes(job: str, calls: Sequence[Call]) -> list[str]:
    finals = _ops(calls, "final-status")
    if not calls or _final_status(calls) is not None:
        return []
    if not finals:
        return [f"{job}: no final-status call: its final Status is not judged"]
    errors = ", ".join(sorted({str(c.get("error")) for c in finals}))
    return [f"{job}: final-status failed ({errors}): its final Status is not judged"]


# -- the whole -----------------------------------------------------------------------------------------------


def judge_job(job: str, lives: Sequence[Life], calls: Sequence[Call], observed: Observed,
              notes: list[str] | None = None) -> list[Violation]:  # fmt: skip
    return [
        *malformed_identities(job, lives),
        *shared_identities(job, lives),
        *r_not_rising(job, lives),
        *overlaps(job, lives),
        *starts_before_open(job, lives, calls),
        *starts_while_held(job, lives, calls, observed, notes),
        *starts_after_stop(job, lives, calls, observed, notes),
        *ceased_contradicted(job, lives, calls),
        *final_status_wrong(job, lives, calls),
    ]


def check(lives: Sequence[Life], calls: Sequence[Call], heartbeat_seconds: float = HEARTBEAT_SECONDS,
          observed: Observed | None = None) -> Report:  # fmt: skip
    """Judge the promise from the lives, the calls and what the campaign's watch observed (nothing observed: no
    late start is excused)."""
    observed = observed if observed is not None else Observed({}, {})
    notes: list[str] = []
    valid = [c for c in calls if _valid(c)]
    if len(valid) < len(calls):
        notes.append(f"{len(calls) - len(valid)} call record(s) without op, t0 or t1: ignored")
    lives_of: dict[str, list[Life]] = defaultdict(list)
    for life in lives:
        lives_of[life.key].append(life)
    calls_of: dict[str, list[Call]] = defaultdict(list)
    for call in valid:
        if call.get("job"):  # Preflight names no job
            calls_of[f"{call.get('namespace', '')}/{call['job']}"].append(call)
    jobs = sorted(set(lives_of) | set(calls_of))
    violations: list[Violation] = []
    for job in jobs:
        violations += judge_job(job, lives_of[job], calls_of[job], observed, notes)
        notes += final_status_notes(job, calls_of[job])
    violations.sort(key=lambda v: (v.at, v.rule, v.job))
    return Report(
        violations=tuple(violations),
        lives=len(lives),
        jobs=len(jobs),
        max_gap=max([0.0, *(life.max_gap for life in lives)]),
        notes=tuple(notes),
        heartbeat_seconds=heartbeat_seconds,
        executions=tuple(_in_start_order(lives)),
        watch_delay=observed.delay,
        probes=observed.probes,
    )


# -- for a human ---------------------------------------------------------------------------------------------


def describe(life: Life) -> str:
    ended = f"exit rc={life.exit_rc}" if life.exit_rc is not None else "no exit line"
    term = f", SIGTERM {_clock(life.term)}" if life.term is not None else ""
    return (
        f"life {life.life}: pod {life.podname or '?'} (uid {life.pod or '?'}) on node {life.node or '?'}, "
        f"epoch {life.epoch or '?'} (R {life.r}), attempt {life.attempt or '?'}, "
        f"span {_clock(life.start)} .. {_clock(life.last)} ({life.last - life.start:.1f} s, {life.lines} lines)"
        f"{term}, {ended}"
    )


def _action(entry: dict[str, Any]) -> str:
    detail = f" ({entry['detail']})" if entry.get("detail") else ""
    return f"{entry.get('action', '?')} {entry.get('fault', '?')} on {entry.get('target', '?')}{detail}"


def _timed(schedule: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    usable = [e for e in schedule if isinstance(e.get("t"), int | float) and not isinstance(e.get("t"), bool)]
    return sorted(usable, key=lambda e: e["t"])


def in_force(schedule: Iterable[dict[str, Any]], at: float) -> list[dict[str, Any]]:
    """The injections not healed by `at`, whenever they were made."""
    injected: dict[tuple[str, str], dict[str, Any]] = {}
    for entry in _timed(schedule):
        if entry["t"] > at:
            break
        key = (str(entry.get("fault")), str(entry.get("target")))
        if entry.get("action") == "inject":
            injected[key] = entry
        elif entry.get("action") == "heal":
            injected.pop(key, None)
    return sorted(injected.values(), key=lambda e: e["t"])


def explain(report: Report, schedule: list[dict[str, Any]], window: float = 60.0) -> str:
    """Every violation: its job, the executions involved, and the nemesis' actions around it."""
    if report.ok:
        return "no violation\n"
    by_key = {(life.key, life.life): life for life in report.executions}
    timed = _timed(schedule)
    blocks = []
    for number, v in enumerate(report.violations, start=1):
        lines = [
            f"violation {number} of {len(report.violations)}: rule {v.rule} ({RULES[v.rule]}), "
            f"job {v.job}, at {_stamp(v.at)}",
            f"  {v.message}",
        ]
        for life_id in v.lives:
            life = by_key.get((v.job, life_id))
            lines.append(f"  {describe(life)}" if life else f"  life {life_id}: not in the ledger")
        near = [e for e in timed if abs(e["t"] - v.at) <= window]
        earlier = [e for e in in_force(timed, v.at) if e["t"] < v.at - window]
        if earlier:
            lines.append(f"  faults in force since before the window of {window:g} s:")
            lines += [f"    {e['t'] - v.at:+9.1f} s  {_clock(e['t'])}  {_action(e)}" for e in earlier]
        if near:
            lines.append(f"  nemesis within {window:g} s:")
            lines += [f"    {e['t'] - v.at:+9.1f} s  {_clock(e['t'])}  {_action(e)}" for e in near]
        else:
            lines.append(f"  no nemesis action within {window:g} s")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def summarize(report: Report) -> str:
    widest = max(report.executions, key=lambda life: life.max_gap, default=None)
    where = f" (life {widest.life} of {widest.key})" if widest and widest.max_gap else ""
    lines = [
        f"jobs {report.jobs}, lives {report.lives}, violations {len(report.violations)}",
        f"largest gap between two lines of a life: {report.max_gap:.3f} s{where}",
        f"clock resolution: a life's true end lies within {report.resolution:.3f} s after its last line "
        f"(heartbeat {report.heartbeat_seconds:g} s + that gap); only certain overlaps are flagged "
        "(a start at or before another life's last line)",
        f"watch delay: {report.watch_delay:.3f} s ({report.probes} probes; the largest from a write sent to the "
        f"campaign's watch delivering it); late starts are excused from the watch and the ledger only, after a "
        f"Stop within {STOP_LATENCY_SECONDS:g} s",
        "violations by rule:",
        *(f"  rule {rule} ({RULES[rule]}): {count}" for rule, count in report.by_rule().items()),
    ]
    if report.notes:
        lines += ["notes:", *(f"  {note}" for note in report.notes)]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.checker", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="the campaign's run folder")
    parser.add_argument("--window", type=float, default=60.0, help="seconds of nemesis shown around a violation")
    args = parser.parse_args(argv)
    if not args.run_dir.is_dir():
        parser.error(f"{args.run_dir} is not a folder")
    try:
        report = check_run(args.run_dir)
        schedule = load_jsonl(args.run_dir / "schedule.jsonl")
    except (OSError, ValueError) as exc:
        print(f"chaos.checker: {exc}", file=sys.stderr)
        return 2
    print(f"run {args.run_dir}")
    print(summarize(report), end="")
    if not report.ok:
        print()
        print(explain(report, schedule, args.window), end="")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
