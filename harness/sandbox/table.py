"""The scenario as tables a person reads at a glance: what Status showed after each step, the stranger's
refused writes, and every execution's identity (what the prologue exports in its pods): on a real node, beside
what each real container printed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from agent.api.models import StatusResponse
from harness.sandbox.scenario import Result
from harness.sandbox.trainer import Printed, executions

EXECUTIONS_TITLE = "Executions (what the prologue exports in each pod, by Status; kwok's nodes run no containers):"
EXECUTIONS_TITLE_REAL = "Executions: Status's account, and what each real container printed (the agent's Output):"
EXECUTIONS_HEADER = ["#", "A", "J", "R", "DISPATCH_EPOCH", "DISPATCH_ATTEMPT"]


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
    runs = executions(statuses)
    if not result.printed:
        lines.append(EXECUTIONS_TITLE)
        exec_rows = [
            [str(i), str(ex.a), str(ex.j), _n(ex.r), _n(ex.epoch), ex.attempt or "-"] for i, ex in enumerate(runs, 1)
        ]
        return lines + _table(EXECUTIONS_HEADER, exec_rows)

    lines.append(EXECUTIONS_TITLE_REAL)
    printed: dict[tuple[int, int], Printed] = {(p.a, p.j): p for p in result.printed}
    exec_rows = []
    for i, ex in enumerate(runs, 1):
        log = printed.get((ex.a, ex.j))
        said = log.lines if log and log.lines else ["-"]
        exec_rows.append([str(i), str(ex.a), str(ex.j), _n(ex.r), _n(ex.epoch), ex.attempt or "-", said[0]])
        exec_rows += [["", "", "", "", "", "", line] for line in said[1:]]
    lines += _table([*EXECUTIONS_HEADER, "the container's log"], exec_rows)
    prefix = f"{ref.name}-" if ref else ""
    where = [f"{p.pod.removeprefix(prefix)} on {p.node or '?'}" for p in result.printed]
    lines.append(f"  each execution's rank 0 pod ({prefix}…), its log read to the container's end: " + ", ".join(where))
    lines.append("  the scenario checks that the container printed what Status says (it fails if they disagree)")
    return lines
