"""`python -m harness.run_lanes [PYTEST ARGS]`: the suite's lanes side by side, one pytest each (harness.lanes).

scripts/test runs it. Each lane's pytest gets the same arguments and `--lane NAME`, writes its output to a log and
its phases to a file (harness.report). A lane's output is printed whole once it ends, in the order the lanes end;
then the report of all lanes, and one closing line for the whole run: `lanes: N passed, N failed` (errors count as
failed), and `, N skipped` where some were. The exit code is the first failing lane's, in the lanes' order; a lane
with nothing selected (pytest's 5) fails the run only when no lane selected anything.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

from harness.lanes import LANES
from harness.report import PHASES_ENV, minutes, outcomes, read_phases, render

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
    failing = [code for lane in LANES if (code := codes.get(lane, 0)) not in (0, NOTHING_SELECTED)]
    if failing:
        return failing[0]
    if codes and all(code == NOTHING_SELECTED for code in codes.values()):
        return NOTHING_SELECTED
    return 0


def closing_line(counts: Mapping[str, int]) -> str:
    line = f"lanes: {counts['passed']} passed, {counts['failed'] + counts['error']} failed"
    return line + (f", {counts['skipped']} skipped" if counts["skipped"] else "")


def _start(name: str, args: Sequence[str], folder: Path) -> Lane:
    log = (folder / f"{name}.log").open("wb")
    env = {**os.environ, PHASES_ENV: str(folder / f"{name}.json")}
    # A session of its own: stopping the run stops each lane's pytest and what it started, whatever holds the tty.
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "--lane", name, *args], stdout=log,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)  # fmt: skip
    return Lane(name, proc, log, time.time())


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
    print(f"lanes {', '.join(LANES)}: one pytest each, side by side; their logs in {folder}", flush=True)
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
    print("\n".join(render(phases, time.time() - started)))
    print(closing_line(outcomes(phases)), flush=True)
    return verdict(codes)


if __name__ == "__main__":
    sys.exit(main())
