"""`python -m harness.run_lanes [PYTEST ARGS]`: the suite's lanes side by side, one pytest each (harness.lanes).

scripts/test runs it. Each lane's pytest gets the same arguments and `--lane NAME`, writes its output to a log and
its phases to a file (harness.report). A lane's output is printed whole once it ends, in the order the lanes end;
then the report of all lanes, and one closing line for the whole run: `lanes: N passed, N failed` (errors count as
failed), and `, N skipped` where some were. The exit code is the first failing lane's, in the lanes' order; a lane
with nothing selected (pytest's 5) fails the run only when no lane selected anything.

A whole run (no arguments) adds the lane `kube-oldest` (harness.lanes.OLDEST_LANE): it builds the oldest matrix
version's kube-apiserver where it is missing (`controlplane/build.sh --kube`, under nice: it takes what the other
lanes and builds leave idle first), then runs harness.lanes.MATRIX_TESTS on tier A with it. Its tests are reported
with the version after their names.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import IO

from harness.binaries import BUILD_SCRIPT, KUBE_VERSION_ENV, REPO_ROOT, matrix_versions
from harness.lanes import LANES, MATRIX_TESTS, OLDEST_LANE, matrix_deselect
from harness.report import PHASES_ENV, Phase, minutes, outcomes, read_phases, render, rows

NOTHING_SELECTED = 5
STOP_GRACE_SECONDS = 60


@dataclass
class Lane:
    name: str
    proc: subprocess.Popen[bytes]
    log: IO[bytes]
    started: float


def verdict(codes: Mapping[str, int]) -> int:
    """The run's exit code from each lane's."""
    failing = [code for lane in (*LANES, OLDEST_LANE) if (code := codes.get(lane, 0)) not in (0, NOTHING_SELECTED)]
    if failing:
        return failing[0]
    if codes and all(code == NOTHING_SELECTED for code in codes.values()):
        return NOTHING_SELECTED
    return 0


def closing_line(counts: Mapping[str, int]) -> str:
    line = f"lanes: {counts['passed']} passed, {counts['failed'] + counts['error']} failed"
    return line + (f", {counts['skipped']} skipped" if counts["skipped"] else "")


def _start(name: str, args: Sequence[str], folder: Path) -> Lane:
    return _popen(name, [sys.executable, "-m", "pytest", "--lane", name, *args], folder, {})


def _popen(name: str, argv: Sequence[str], folder: Path, extra_env: Mapping[str, str]) -> Lane:
    log = (folder / f"{name}.log").open("wb")
    env = {**os.environ, PHASES_ENV: str(folder / f"{name}.json"), **extra_env}
    # A session of its own: stopping the run stops each lane's pytest and what it started, whatever holds the tty.
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return Lane(name, proc, log, time.time())


def oldest_lane_argv(version: str, python: str = sys.executable) -> list[str]:
    """The kube-oldest lane: the version's kube-apiserver built (nice: the other lanes' tests and builds first), then
    the matrix's tests on tier A with it (they are units-lane tests: `--lane units` keeps the plugin's order)."""
    build = f"nice {BUILD_SCRIPT} --kube {version} kube-apiserver"
    tests = shlex.join([python, "-m", "pytest", "--lane", "units", "-m", "cluster", *MATRIX_TESTS,
                        *matrix_deselect(version)])  # fmt: skip
    return ["bash", "-c", f"cd {shlex.quote(str(REPO_ROOT))} && {build} && exec {tests}"]


def start_oldest(folder: Path) -> tuple[Lane, str]:
    version = matrix_versions()[0]
    return _popen(OLDEST_LANE, oldest_lane_argv(version), folder, {KUBE_VERSION_ENV: version}), version


def as_oldest(phases: Sequence[Phase], version: str) -> list[Phase]:
    """The kube-oldest lane's phases under its own lane, each test named with the version (the same tests run on
    the pin in the units lane)."""
    return [replace(p, lane=OLDEST_LANE, nodeid=f"{p.nodeid}[k8s {version}]") for p in phases]


def oldest_row(phases: Sequence[Phase]) -> list[str]:
    """The report's line for the kube-oldest lane, in render's columns (render lists harness.lanes.LANES alone)."""
    return [f"  {row.name:<26} {row.tests:>6} {minutes(row.summed):>14} {minutes(row.span):>14}"
            for row in rows(phases, lambda p: p.lane, (OLDEST_LANE,))]  # fmt: skip


def _stop(lanes: Sequence[Lane]) -> None:
    """SIGTERM to each lane still running (pytest stops its clusters), SIGKILL to what is left after the grace."""
    running = [lane for lane in lanes if lane.proc.poll() is None]
    for lane in running:
        os.killpg(lane.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for lane in running:
        try:
            lane.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(lane.proc.pid, signal.SIGKILL)


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    folder = Path(tempfile.mkdtemp(prefix="dispatch-k8s-lanes-"))
    started = time.time()
    signal.signal(signal.SIGTERM, _interrupted)
    lanes = [_start(name, args, folder) for name in LANES]
    oldest = ""
    if not args:
        lane, oldest = start_oldest(folder)
        lanes.append(lane)
    names = [lane.name for lane in lanes]
    print(f"lanes {', '.join(names)}: one pytest each, side by side; their logs in {folder}", flush=True)
    codes: dict[str, int] = {}
    try:
        while len(codes) < len(lanes):
            for lane in lanes:
                if lane.name in codes or lane.proc.poll() is None:
                    continue
                codes[lane.name] = lane.proc.returncode
                lane.log.close()
                took = minutes(time.time() - lane.started)
                print(f"\n== lane {lane.name}: exit {lane.proc.returncode} after {took}", flush=True)
                sys.stdout.write((folder / f"{lane.name}.log").read_text(errors="replace"))
                sys.stdout.flush()
            time.sleep(1)
    except KeyboardInterrupt:
        _stop(lanes)
        raise
    phases = [p for name in LANES for p in read_phases(folder / f"{name}.json")]
    if oldest:
        phases += as_oldest(read_phases(folder / f"{OLDEST_LANE}.json"), oldest)
    lines = render(phases, time.time() - started)
    slowest_at = next((i for i, line in enumerate(lines) if line.startswith("slowest")), len(lines))
    lines[slowest_at:slowest_at] = oldest_row(phases)
    print("\n".join(lines))
    print(closing_line(outcomes(phases)), flush=True)
    return verdict(codes)


if __name__ == "__main__":
    sys.exit(main())
