"""`scripts/sandbox --supervisor go`: the example supervisor's command line made from the site the sandbox
prepared, and how its run is streamed and how its failure names its step (a real process standing in for the
example). Pure: no cluster, no Go; test_sandbox.py runs the real thing."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from harness.sandbox import go_supervisor, scenario
from harness.sandbox.__main__ import _parser
from harness.sandbox.steps import StepFailed


def site(tmp_path: Path, resolve: dict[str, str] | None = None) -> scenario.Setup:
    return scenario.Setup(
        admin=None, stranger=None, stranger_name="system:serviceaccount:team-a:stranger",  # type: ignore[arg-type]
        namespace="team-a", local_queue="sandbox", low="sandbox-low", high="sandbox-high", runtime="sandbox-train",
        upstream_runtime="torch-distributed", job_cpu="3", preemptor_cpu="3", api_url="https://127.0.0.1:41234",
        ca_file=tmp_path / "ca.crt", resolve=resolve or {}, check="dispatch-k8s", token_file=tmp_path / "sv.token",
        logs=[tmp_path / "agent.log"], record=tmp_path / "status.jsonl",
    )  # fmt: skip


def flags(argv: list[str]) -> dict[str, list[str]]:
    """Each -flag's values, in order; every flag takes one."""
    assert len(argv) % 2 == 1, argv
    out: dict[str, list[str]] = {}
    for flag, value in zip(argv[1::2], argv[2::2], strict=True):
        assert re.fullmatch(r"-[a-z][a-z-]*", flag), argv
        out.setdefault(flag, []).append(value)
    return out


def test_the_command_points_the_example_at_the_site(tmp_path: Path) -> None:
    binary = tmp_path / "dispatch-example-supervisor"
    argv = go_supervisor.command(binary, site(tmp_path))
    assert argv[0] == str(binary)
    assert flags(argv) == {
        "-server": ["https://127.0.0.1:41234"],
        "-ca-file": [str(tmp_path / "ca.crt")],
        "-token-file": [str(tmp_path / "sv.token")],
        "-namespace": ["team-a"],
        "-runtime": ["sandbox-train"],
        "-queue": ["sandbox"],  # Kueue mode, through dispatch's AdmissionCheck
        "-image": [scenario.IMAGE],
        "-within": [go_supervisor.WITHIN],
    }


def test_each_host_the_site_maps_is_one_resolve(tmp_path: Path) -> None:
    resolve = {"dispatch-k8s.dispatch-system.svc": "10.96.0.12", "other.svc": "10.96.0.13"}
    argv = go_supervisor.command(Path("sv"), site(tmp_path, resolve))
    assert flags(argv)["-resolve"] == ["dispatch-k8s.dispatch-system.svc:10.96.0.12", "other.svc:10.96.0.13"]
    assert "-resolve" not in go_supervisor.command(Path("sv"), site(tmp_path))


def test_the_flag_chooses_the_supervisor_python_by_default() -> None:
    assert _parser().parse_args([]).supervisor == "python"
    assert _parser().parse_args(["--supervisor", "go", "--no-wait"]).supervisor == "go"
    with pytest.raises(SystemExit):
        _parser().parse_args(["--supervisor", "rust"])


def stand_in(tmp_path: Path, body: str) -> Path:
    """A program printing as the example does: steps on stdout, its failure on stderr."""
    path = tmp_path / "supervisor"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_each_line_is_streamed_and_kept(tmp_path: Path) -> None:
    program = stand_in(tmp_path, 'echo "Preflight  -  A=-  pods=0  start gate true"\necho "Stop  -  gone"\n')
    seen: list[str] = []
    lines = go_supervisor.run([str(program)], tmp_path / "supervisor.log", seen.append)
    assert seen == lines == ["Preflight  -  A=-  pods=0  start gate true", "Stop  -  gone"]
    assert (tmp_path / "supervisor.log").read_text() == "\n".join(lines) + "\n"


def test_a_failure_names_the_examples_step(tmp_path: Path) -> None:
    program = stand_in(
        tmp_path, 'echo "Start  Gated  A=0  pods=0  closed"\necho "supervisor: Open: conflict: not yet" >&2\nexit 1\n'
    )
    seen: list[str] = []
    agent_log = tmp_path / "agent.log"
    with pytest.raises(StepFailed) as failed:
        go_supervisor.run([str(program)], tmp_path / "supervisor.log", seen.append, [agent_log])
    assert failed.value.step == "supervisor, Open"
    assert failed.value.reason == "conflict: not yet"
    assert failed.value.logs == [tmp_path / "supervisor.log", agent_log]
    assert seen[-1] == "supervisor: Open: conflict: not yet"  # its stderr is streamed too


def test_a_failure_without_a_step_says_how_it_ended(tmp_path: Path) -> None:
    program = stand_in(tmp_path, 'echo "panic: boom"\nexit 2\n')
    with pytest.raises(StepFailed) as failed:
        go_supervisor.run([str(program)], tmp_path / "supervisor.log", lambda _: None)
    assert failed.value.step == "supervisor"
    assert failed.value.reason == "the example exited 2: panic: boom"
