"""The sandbox's check that each real container printed what Status says (harness/sandbox/trainer.py), and the
executions table that shows the two side by side, as test_sandbox.py reads it. Pure: no cluster."""

from __future__ import annotations

from typing import Any

from agent.api.models import ExecutionModel, ObjectRef, StatusResponse
from harness.sandbox.scenario import Result
from harness.sandbox.table import EXECUTIONS_TITLE, EXECUTIONS_TITLE_REAL, render
from harness.sandbox.trainer import Printed, disagreements, executions, said
from tests.harness.test_sandbox import executions as table_rows

JOB = "01M8KFQ8135549CGDMNYZZ79ED"


def execution(a: int, j: int = 0) -> ExecutionModel:
    r = a + j
    return ExecutionModel(a=a, j=j, r=r, epoch=1_000_000 + r, attempt=f"{JOB}.1.1.{a}.{j}", pods=[f"pod-{a}"])


def printed(a: int, j: int = 0, *, epoch: int | None = None, attempt: str | None = None) -> Printed:
    ex = execution(a, j)
    lines = [
        f"DISPATCH_EPOCH={ex.epoch if epoch is None else epoch}",
        f"DISPATCH_ATTEMPT={ex.attempt if attempt is None else attempt}",
        "pid 1: training for 30s",
        "trained; exit 0",
    ]
    return Printed(a=a, j=j, pod=f"pod-{a}", node="real-node-0", lines=lines)


def status(*runs: ExecutionModel) -> StatusResponse:
    body: dict[str, Any] = {
        "namespace": "team-a", "name": "dj-x-s1", "uid": "u", "phase": "Running", "mode": "kueue", "gate": "open",
        "heldBy": [], "checkState": "Ready", "checkMessage": "", "a": runs[-1].a, "floor": runs[-1].a,
        "j": runs[-1].j, "r": runs[-1].r, "executions": [r.model_dump() for r in runs], "pods": [],
        "ceased": False, "foreign": [], "orphans": [],
    }  # fmt: skip
    return StatusResponse.model_validate(body)


def test_said_reads_the_first_of_each_value() -> None:
    assert said(["x", "DISPATCH_EPOCH=7", "DISPATCH_ATTEMPT=t", "DISPATCH_EPOCH=8"]) == {
        "DISPATCH_EPOCH": "7",
        "DISPATCH_ATTEMPT": "t",
    }


def test_agreeing_logs_have_no_disagreement() -> None:
    assert disagreements([execution(1), execution(2)], [printed(1), printed(2)]) == []


def test_a_container_that_printed_another_epoch_disagrees() -> None:
    (problem,) = disagreements([execution(1), execution(2)], [printed(1), printed(2, epoch=1_000_001)])
    assert problem == "A=2 J=0: pod pod-2 printed DISPATCH_EPOCH=1000001, Status says 1000002"


def test_a_container_that_printed_another_attempt_disagrees() -> None:
    (problem,) = disagreements([execution(1)], [printed(1, attempt=f"{JOB}.1.1.0.0")])
    assert f"printed DISPATCH_ATTEMPT={JOB}.1.1.0.0, Status says {JOB}.1.1.1.0" in problem


def test_a_container_that_printed_nothing_disagrees() -> None:
    silent = Printed(a=1, j=0, pod="pod-1", node="real-node-0", lines=["Traceback ..."])
    problems = disagreements([execution(1)], [silent])
    assert [p.split(" (")[0] for p in problems] == [
        "A=1 J=0: pod pod-1 printed no DISPATCH_EPOCH",
        "A=1 J=0: pod pod-1 printed no DISPATCH_ATTEMPT",
    ]


def test_an_execution_without_a_log_and_a_log_without_an_execution_disagree() -> None:
    assert disagreements([execution(1), execution(2)], [printed(1)]) == [
        "A=2 J=0: Status shows the execution, but no container log was read"
    ]
    assert disagreements([execution(1)], [printed(1), printed(3)]) == [
        "A=3 J=0: pod pod-3's log read, but Status never showed the execution"
    ]


def test_executions_are_each_execution_status_showed_once_in_order() -> None:
    statuses = [status(execution(1)), status(execution(1)), status(execution(2))]
    assert [(ex.a, ex.j) for ex in executions(statuses)] == [(1, 0), (2, 0)]


def test_the_table_shows_each_containers_log_beside_statuss_account() -> None:
    statuses = [status(execution(1)), status(execution(2))]
    result = Result(ref=ObjectRef(namespace="team-a", name="dj-x-s1", uid="u"), printed=[printed(1), printed(2)])
    output = "\n".join(render(result, statuses))
    assert EXECUTIONS_TITLE not in output
    rows = table_rows(output, EXECUTIONS_TITLE_REAL)
    assert rows == [
        (1, 0, 1, 1_000_001, f"{JOB}.1.1.1.0", printed(1).lines),
        (2, 0, 2, 1_000_002, f"{JOB}.1.1.2.0", printed(2).lines),
    ], output
    assert (
        "rank 0 pod (dj-x-s1-…), its log read to the container's end: pod-1 on real-node-0, pod-2 on real-node-0"
        in (output)
    )


def test_without_a_real_node_the_table_is_statuss_alone_and_says_so() -> None:
    statuses = [status(execution(1)), status(execution(2))]
    output = "\n".join(render(Result(ref=ObjectRef(namespace="team-a", name="dj-x-s1", uid="u")), statuses))
    assert EXECUTIONS_TITLE_REAL not in output
    assert "kwok's nodes run no containers" in EXECUTIONS_TITLE
    assert table_rows(output, EXECUTIONS_TITLE) == [
        (1, 0, 1, 1_000_001, f"{JOB}.1.1.1.0", []),
        (2, 0, 2, 1_000_002, f"{JOB}.1.1.2.0", []),
    ], output
