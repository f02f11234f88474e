"""The README's main command, as CI runs it: `scripts/sandbox --no-wait` starts its own cluster, installs
dispatch from the chart, runs the scenario through the agent's API and exits 0. What it prints must show the
story: two executions whose identity rose, and a stranger's refused writes. With tier C built (as in CI) the
job's trainer pods run on the real node and each execution's row shows what its real container printed,
which must be what Status says; without it the sandbox says the job ran on kwok and the table is Status's.
With `--supervisor go` the Go client's example supervisor drives its own job through the same site instead."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

from harness.sandbox import go_supervisor, on_node, trainer
from harness.sandbox.steps import LABEL_WIDTH
from harness.sandbox.table import EXECUTIONS_HEADER, EXECUTIONS_TITLE, EXECUTIONS_TITLE_REAL

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 900
"""Seconds for the whole command: a bound on a hang, not a measure of its speed (docs/performance.md has that).
Alone on a 2-core machine it takes about 70 s; as the first test of its CI lane, beside four other lanes starting
their clusters, 5 to 7 minutes, and more on a slower machine."""


Run = tuple[int, int, int, int, str, list[str]]
"""A row of the executions table: A, J, R, DISPATCH_EPOCH, DISPATCH_ATTEMPT and the container's log (its lines;
empty when no container ran)."""


def executions(output: str, title: str) -> list[Run]:
    """The executions table under ``title``: a row per execution; on a real node its log continues below it."""
    lines = output.splitlines()
    start = lines.index(title)
    log_column = ["the", "container's", "log"] if title == EXECUTIONS_TITLE_REAL else []
    assert lines[start + 1].split() == [*EXECUTIONS_HEADER, *log_column], lines[start + 1]
    rows: list[Run] = []
    for line in lines[start + 2 :]:
        match = re.fullmatch(r"  (\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\S+)(?:\s+(\S.*))?", line)
        if match:
            assert int(match[1]) == len(rows) + 1, line
            a, j, r, epoch = (int(match[i]) for i in range(2, 6))
            rows.append((a, j, r, epoch, match[6], [match[7]] if match[7] else []))
        elif line.startswith(" " * 10) and rows and log_column:  # the log's next line, in its column
            rows[-1][5].append(line.strip())
        else:
            break
    return rows


def timeline(output: str) -> dict[str, list[str]]:
    """The step table: each step's cells (phase, gate, check, A, J, R, ...) by the step's name."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["step", "phase"])
    steps: dict[str, list[str]] = {}
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        name, _, rest = line.strip().partition("  ")
        steps[name.strip()] = rest.split()
    return steps


class Sandbox:
    """`scripts/sandbox ARGS` started in the background, its streams to files (no pipe to fill)."""

    def __init__(self, folder: Path, *args: str) -> None:
        env = dict(os.environ)
        if sys.prefix != sys.base_prefix:  # the virtual environment running these tests
            env["DISPATCH_K8S_VENV"] = sys.prefix
        self.args = args
        self.out, self.err = folder / "stdout", folder / "stderr"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.process = subprocess.Popen([str(ROOT / "scripts" / "sandbox"), *args], cwd=ROOT, env=env,
                                            stdin=subprocess.DEVNULL, stdout=out, stderr=err, text=True)  # fmt: skip
        self.deadline = time.monotonic() + TIMEOUT

    def result(self) -> tuple[str, str]:
        """Its stdout, and both streams to show on a failure, once it ended; it must exit 0 within TIMEOUT."""
        try:
            code = self.process.wait(timeout=max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.stop()
            code = None
        stdout = self.out.read_text()
        shown = f"--- stdout\n{stdout}\n--- stderr\n{self.err.read_text()}"
        ended = f"exited {code}" if code is not None else f"did not end within {TIMEOUT} s"
        assert code == 0, f"scripts/sandbox {' '.join(self.args)} {ended}\n{shown}"
        return stdout, shown

    def stop(self) -> None:
        """As Ctrl-C stops it: every process of its run is stopped."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def sandbox(folder: Path, *args: str) -> tuple[str, str]:
    """`scripts/sandbox ARGS` run to its end: its stdout, and both streams to show on a failure; it must exit 0."""
    run = Sandbox(folder, *args)
    try:
        return run.result()
    finally:
        run.stop()


GO_TEST = "test_the_go_example_supervisor_drives_the_sandbox"


@pytest.fixture(scope="module", autouse=True)
def go_sandbox(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox | None]:
    """`--supervisor go` started with the module's first test when its test is selected, so that it runs beside
    the default story: its job runs on kwok's nodes and uses neither the real node nor kube-proxy, and both spend
    most of their time waiting on their clusters (one after the other they took about 3.5 min of CI)."""
    if not any(item.name == GO_TEST and item.module is request.module for item in request.session.items):
        yield None
        return
    run = Sandbox(tmp_path_factory.mktemp("sandbox-go"), "--no-wait", "--supervisor", "go")
    try:
        yield run
    finally:
        run.stop()


@pytest.mark.timeout(TIMEOUT + 30)
def test_the_sandbox_runs_the_scenario_and_shows_it(tmp_path: Path) -> None:
    output, shown = sandbox(tmp_path, "--no-wait")

    # Two executions; the second with a higher A and a strictly higher R, so a higher DISPATCH_EPOCH, and a
    # DISPATCH_ATTEMPT of its own.
    image, not_here = on_node.available()
    runs = executions(output, EXECUTIONS_TITLE_REAL if image is not None else EXECUTIONS_TITLE)
    assert len(runs) == 2, shown
    assert all(a >= 1 and r == a + j for a, j, r, _, _, _ in runs), runs
    for (a1, _, r1, e1, t1, _), (a2, _, r2, e2, t2, _) in pairwise(runs):
        assert a2 > a1, f"A did not rise: {runs}"
        assert r2 > r1, f"R did not strictly increase: {runs}"
        assert e2 > e1, f"DISPATCH_EPOCH did not increase: {runs}"
        assert t1 != t2, f"two executions share DISPATCH_ATTEMPT: {runs}"

    # The story, step by step: Status after each (phase, gate, check, A).
    steps = timeline(output)
    assert steps["Start"][:4] == ["Gated", "closed", "Pending", "0"], steps
    assert steps["Open: running"][:4] == ["Running", "open", "Ready", str(runs[0][0])], steps
    preempted = next(v for k, v in steps.items() if k.startswith("preempted by"))
    assert preempted[0] in ("Queued", "Admitting"), steps
    assert preempted[3] == str(runs[0][0]), steps
    assert steps["re-admitted"][:4] == ["Running", "open", "Ready", str(runs[1][0])], steps
    assert steps["finished"][:4] == ["Complete", "open", "Ready", str(runs[1][0])], steps

    # The stranger's writes were refused by dispatch's admission policies, which the API server runs before any
    # webhook, each shown on one line: removing dispatch's gate from the TrainJob and from its Workload, resuming
    # the JobSet directly (past the TrainJob's unsuspend), and, once preempted, setting dispatch's check Ready on
    # the Workload's status, which would re-admit it without a raise (docs/security.md). The owner policies
    # refuse a stranger every write on a dispatch job's objects; a field policy may answer first.
    lines = output.splitlines()
    refused = [(line.strip().rpartition("refused by the ")[2], lines[i + 1]) for i, line in enumerate(lines)
               if "refused by the " in line]  # fmt: skip
    assert [by for by, _ in refused] == ["policy"] * 4, shown
    (_, gate), (_, workload_gate), (_, jobset), (_, ready) = refused
    owners = "belongs to a dispatch job"
    assert owners in gate or "only dispatch adds or removes its gate" in gate, refused
    assert owners in workload_gate or "only dispatch adds, changes or removes annotations" in workload_gate, refused
    # The chart's owner policy of JobSets, or the harness's copy of it (tier B runs one over every namespace).
    assert "-owners-jobsets'" in jobset, refused
    assert "UPDATE is made only by Trainer, Kueue, the garbage collector" in jobset, refused
    assert owners in ready or "only dispatch's admission controller sets its check Ready" in ready, refused

    if image is not None:
        # The job's trainer pods ran on the real node, in the image built here, behind the prologue: each
        # execution's row shows what its container printed (the agent's Output), and it is Status's identity.
        # The first saved a checkpoint when it was preempted (SIGTERM reached the trainer, PID 1, which took
        # its time to stop: the hold above); the second trained to the end.
        (*_, e1, t1, log1), (*_, e2, t2, log2) = runs
        for epoch, token, log in ((e1, t1, log1), (e2, t2, log2)):
            assert log[:3] == [f"DISPATCH_EPOCH={epoch}", f"DISPATCH_ATTEMPT={token}",
                               f"pid 1: training for {trainer.WORK_SECONDS}s"], shown  # fmt: skip
        assert log1[3:] == [f"SIGTERM: saving a checkpoint ({trainer.STOP_SECONDS}s)", "checkpoint saved; exit 0"], (
            shown
        )
        assert log2[3:] == ["trained; exit 0"], shown
        # The quota came back while the preempted pod was still stopping: dispatch's gate held the readmission.
        assert steps["quota back, gate holds"][:4] == ["Admitting", "open", "Pending", str(runs[0][0])], steps
        assert steps["quota back, gate holds"][6:8] == ["1", "Terminating"], steps
        assert re.search(r"each execution's rank 0 pod \(dj-\S+-s1-…\), its log read to the container's end: "
                         r"node-0-0-\w+ on real-node-0, node-0-0-\w+ on real-node-0$",
                         output, re.M), shown  # fmt: skip
        assert re.search(r"ClusterTrainingRuntime sandbox-train: its trainer on real-node-0, in dispatch-k8s\.local/",
                         output), shown  # fmt: skip
        # Tier C (root, its build and the image, as in CI): dispatch from the chart by `helm install`, its pods on the real kubelet; `helm test`'s pod
        # too; the supervisor reaches the agent through its Service (kube-proxy).
        assert re.search(r"helm v\S+ install --wait: 1 pod\(s\) Ready on real-node-0 \(kubelet, containerd, runc\)",
                         output), shown  # fmt: skip
        assert "helm test: its pod ran on real-node-0; the API server reached the webhook through its Service" in (
            output
        ), shown
        assert re.search(r"pod dispatch-k8s-\S+ leads; its API on https://dispatch-k8s\.dispatch-system\.svc:\d+ "
                         r"\(the Service's ClusterIP 10\.96\.", output), shown  # fmt: skip
    else:
        assert f"no real node ({not_here})" in output, shown
        assert "the job's pods on kwok's nodes, which run no containers" in output, shown
        assert all(log == [] for *_, log in runs), runs
        # The webhook signed in as its own ServiceAccount with the token kube-controller-manager wrote into
        # the chart's Secret (not dispatch's); the agent as the chart's ServiceAccount, dispatch.
        assert re.search(r"dispatch-webhook on \S+ as system:serviceaccount:dispatch-system:dispatch-k8s-webhook "
                         r"\(its own", output), shown  # fmt: skip
        assert "dispatch-agent as system:serviceaccount:dispatch-system:dispatch-k8s (dispatch" in output, shown
        # `helm test` as the chart renders it: its command under the test hook's ServiceAccount, through the
        # API server (Trainer's webhooks called beside dispatch's), passed on dispatch-k8s's denial.
        assert re.search(r"dispatch-webhook selftest as system:serviceaccount:dispatch-system:dispatch-k8s-test: "
                         r"passed", output), shown  # fmt: skip
    # The chart's owner policy of TrainJobs refuses the stranger's probe before any webhook is asked.
    assert "ok: dispatch-k8s's owner policy denied a dispatch TrainJob of a stranger" in output, shown

    # And it cleaned up: every process of its run stopped, the run folder named.
    assert re.search(r"^Stopped \d+ processes\. The run folder stays: /\S+$", output, re.M), shown


@pytest.mark.timeout(TIMEOUT + 30)
def test_the_go_example_supervisor_drives_the_sandbox(go_sandbox: Sandbox | None, tmp_path: Path) -> None:
    """`--supervisor go`: the example, built here, runs its job against the site the sandbox prepared (tier B,
    dispatch as local processes, whatever tier C), its lines streamed under its step, in its order. The module's
    fixture started it with the module's first test, beside the default story."""
    output, shown = (
        go_sandbox.result() if go_sandbox is not None else sandbox(tmp_path, "--no-wait", "--supervisor", "go")
    )
    assert "no real node (the Go example supervisor's job runs a placeholder image)" in output, shown
    assert re.search(r"^  go build +clients/go/examples/supervisor with go1\.26\S*: /\S+", output, re.M), shown
    assert "dispatch-agent as system:serviceaccount:dispatch-system:dispatch-k8s (dispatch" in output, shown

    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  supervisor "))
    under = " " * (LABEL_WIDTH + 3)
    streamed = [line.removeprefix(under) for line in lines[start + 1 :] if line.startswith(under)]
    steps = {line.split()[0]: line.split() for line in streamed if line.split() and line.split()[0][0].isupper()}
    assert [s for s in steps if s in go_supervisor.STEPS] == list(go_supervisor.STEPS), shown
    # Status as the example printed it after each step: Gated when started, A rising across Hold and Release.
    assert steps["Start"][1:3] == ["Gated", "A=0"], shown
    assert steps["Open"][1:3] == ["Running", "A=1"], shown
    assert steps["Hold"][1] == "Held", shown
    assert steps["Release"][1:3] == ["Running", "A=2"], shown
    assert re.search(
        r"^\s+execution A=2 J=0 R=2 DISPATCH_EPOCH=\d+ DISPATCH_ATTEMPT=\S+\.2\.0 pods \S+", output, re.M
    ), shown
    # Output streamed rank 0's log through the API server from kwok, which serves the line the sandbox wrote.
    assert f"  | {go_supervisor.KWOK_LOG_LINE}" in streamed, shown
    assert streamed[-1].startswith("exit 0: every step did what the API says"), shown
    assert "Not in this run (the default story's, scripts/sandbox without --supervisor go): " in output, shown
    assert not any(line.split()[:2] == ["step", "phase"] for line in lines if line.strip()), "the scenario ran too"
    assert re.search(r"^Stopped \d+ processes\. The run folder stays: /\S+$", output, re.M), shown
