"""The scenario as tables a person reads at a glance: what Status showed after each step, the stranger's
refused writes, and every execution's identity (what the prologue exports in its pods)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from agent.api.models import ExecutionModel, StatusResponse
from harness.sandbox.scenario import Result

EXECUTIONS_TITLE = "Executions (what the prologue exports in each pod):"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    lines = []
    for row in (header, *rows):
        cells = [str(c).ljust(w) for c, w in zip(row, widths, strict=True)]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)


def _pods(st: StatusResponse | None) -> str:
    if st is None or not st.pods:
        return "-"
    counts = Counter(
        "Terminating" if p.phase in ("Pending", "Running") and "deletionTimestamp" in p.reason else p.phase or "?"
        for p in st.pods
    )
    return ", ".join(f"{n} {phase}" for phase, n in sorted(counts.items()))


def executions(statuses: Sequence[StatusResponse]) -> list[ExecutionModel]:
    """Every execution that any Status showed, once, in the order they appeared (a preempted execution's pods
    are gone from later Statuses)."""
    seen: dict[tuple[int, int], ExecutionModel] = {}
    for st in statuses:
        for ex in st.executions:
            seen.setdefault((ex.a, ex.j), ex)
    return list(seen.values())


def render(result: Result, statuses: Sequence[StatusResponse]) -> list[str]:
    ref = result.ref
    lines = [f"TrainJob {ref.namespace}/{ref.name}" if ref else "TrainJob (not started)"]
    lines.append("  A: admissions (raised by dispatch's gate before each one)   J: JobSet restarts   R = A + J")
    lines.append("")
    rows = [
        [r.step, r.status.phase, r.status.gate, r.status.check_state or "-", _n(r.status.a), _n(r.status.j),
         _n(r.status.r), _pods(r.status), r.note]
        for r in result.rows
        if r.status is not None
    ]  # fmt: skip
    lines += _table(["step", "phase", "gate", "check", "A", "J", "R", "pods", "note"], rows)
    if result.refusals:
        lines.append("")
        lines.append("Refused on the way (a stranger with RBAC rights to write TrainJobs, Workloads and JobSets):")
        for refusal in result.refusals:
            lines.append(f"  {refusal.who} {refusal.what}: refused by the {refusal.by}")
            lines.append(f"    {refusal.message}")
    lines.append("")
    lines.append(EXECUTIONS_TITLE)
    exec_rows = [
        [str(i), str(ex.a), str(ex.j), _n(ex.r), _n(ex.epoch), ex.attempt or "-"]
        for i, ex in enumerate(executions(statuses), 1)
    ]
    lines += _table(["#", "A", "J", "R", "DISPATCH_EPOCH", "DISPATCH_ATTEMPT"], exec_rows)
    return lines
