"""What each real container of the sandbox's job printed, set beside Status's account of its execution.

On a real node the sandbox's trainer is a small program (TRAIN) that prints the two values the prologue
exported to it, DISPATCH_EPOCH and DISPATCH_ATTEMPT, then trains; the sandbox reads its log with the agent's
Output operation, as a supervisor would. Status derives the same two values from A and J by the contract's
formulas: the two accounts must agree, execution by execution, or the scenario fails.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agent.api.models import ExecutionModel, StatusResponse

WORK_SECONDS = 30
"""How long the trainer trains before it exits 0: long enough that the scenario preempts the first execution
well before it ends."""
STOP_SECONDS = 30
"""How long the trainer takes to stop on SIGTERM (it saves a checkpoint): the preempted pod is still stopping
when the quota comes back, so dispatch's gate visibly holds the readmission. The quota comes back once the
preemptor, on kwok, has run and completed: kwok's pod stages take up to about 6s each, the two about 15s."""
GRACE_SECONDS = STOP_SECONDS + 15
"""The trainer pods' terminationGracePeriodSeconds: the kubelet lets the checkpoint finish."""

TRAIN = f"""\
import os, signal, sys, time
def stop(signum, frame):
    print("SIGTERM: saving a checkpoint ({STOP_SECONDS}s)", flush=True)
    time.sleep({STOP_SECONDS})
    print("checkpoint saved; exit 0", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("DISPATCH_EPOCH=" + os.environ.get("DISPATCH_EPOCH", "<unset>"), flush=True)
print("DISPATCH_ATTEMPT=" + os.environ.get("DISPATCH_ATTEMPT", "<unset>"), flush=True)
print("pid %d: training for {WORK_SECONDS}s" % os.getpid(), flush=True)
time.sleep({WORK_SECONDS})
print("trained; exit 0", flush=True)
"""
"""The trainer's program (``python -c TRAIN``), run after the prologue, which execs it as PID 1."""

_VALUE = re.compile(r"^(DISPATCH_EPOCH|DISPATCH_ATTEMPT)=(.*)$")


@dataclass
class Printed:
    """One execution's rank 0 log, read by the agent's Output (followed to the container's end)."""

    a: int
    j: int
    """The A and J of the pod Status showed Running when the log was read."""
    pod: str
    node: str | None
    lines: list[str] = field(default_factory=list)

    def said(self) -> dict[str, str]:
        return said(self.lines)


def said(lines: Sequence[str]) -> dict[str, str]:
    """DISPATCH_EPOCH and DISPATCH_ATTEMPT as the container printed them (the first of each)."""
    values: dict[str, str] = {}
    for line in lines:
        match = _VALUE.match(line.strip())
        if match:
            values.setdefault(match[1], match[2])
    return values


def executions(statuses: Sequence[StatusResponse]) -> list[ExecutionModel]:
    """Every execution that any Status showed, once, in the order they appeared (a preempted execution's pods
    are gone from later Statuses)."""
    seen: dict[tuple[int, int], ExecutionModel] = {}
    for st in statuses:
        for ex in st.executions:
            seen.setdefault((ex.a, ex.j), ex)
    return list(seen.values())


def disagreements(executions: Sequence[ExecutionModel], printed: Sequence[Printed]) -> list[str]:
    """Where Status's account of an execution and what its container printed differ; empty when they agree.
    Every execution Status showed must have a log, and every log an execution."""
    problems: list[str] = []
    by_aj: Mapping[tuple[int, int], Printed] = {(p.a, p.j): p for p in printed}
    shown = {(ex.a, ex.j) for ex in executions}
    for ex in executions:
        log = by_aj.get((ex.a, ex.j))
        if log is None:
            problems.append(f"A={ex.a} J={ex.j}: Status shows the execution, but no container log was read")
            continue
        values = log.said()
        for key, expected in (("DISPATCH_EPOCH", _s(ex.epoch)), ("DISPATCH_ATTEMPT", _s(ex.attempt))):
            got = values.get(key)
            if got is None:
                problems.append(f"A={ex.a} J={ex.j}: pod {log.pod} printed no {key} (its log: {log.lines})")
            elif got != expected:
                problems.append(f"A={ex.a} J={ex.j}: pod {log.pod} printed {key}={got}, Status says {expected}")
    for log in printed:
        if (log.a, log.j) not in shown:
            problems.append(f"A={log.a} J={log.j}: pod {log.pod}'s log read, but Status never showed the execution")
    return problems


def _s(value: int | str | None) -> str:
    return "<none>" if value is None else str(value)
