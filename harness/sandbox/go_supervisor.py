"""The sandbox's supervisor in Go: `scripts/sandbox --supervisor go` runs the Go client's example supervisor
(clients/go/examples/supervisor), built here with the Go on PATH, against the site the sandbox prepared: the
agent's URL and CA, the supervisor ServiceAccount's token file, the namespace, runtime and LocalQueue (and
``-resolve`` for each host the site maps). Its own story: one job through Preflight, Start, Open, a Hold and
Release, Status and Output, then Stop; each line it prints is streamed into the sandbox's output, and a
non-zero exit fails the sandbox naming the example's step.

The rest of the Python scenario (harness/sandbox/scenario.py) is not run: the stranger's refused writes, the
preemption by someone else's job and the gate holding the readmission are the default story's.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.binaries import REPO_ROOT
from harness.sandbox import scenario
from harness.sandbox.steps import StepFailed

MODULE = REPO_ROOT / "clients" / "go"
EXAMPLE = "./examples/supervisor"
BINARY = "dispatch-example-supervisor"
STOP_SECONDS = "2s"
"""How long the example's placeholder trainer takes to stop on kwok (the default story's takes 20s, so that the
gate's hold is there to see; the example's Hold waits for its pods to be gone, which is all it needs)."""
WITHIN = "90s"
"""The example's bound on each of its waits (-within)."""
STEPS = ("Preflight", "Start", "Open", "Hold", "Release", "Status", "Output", "Stop")
"""What the example does, in order (after checking the agent's API version, its step "Agent")."""
NOT_COVERED = "the stranger's refused writes, the preemption by someone else's job and the gate holding its readmission"
KWOK_LOG_LINE = "kwok's nodes run no containers: kwok serves this line as every container's log"
"""What the example's Output reads on kwok's nodes (the sandbox writes it where kwok serves logs from)."""
_FAILED = re.compile(r"^supervisor: (?P<step>[^:\s]+): (?P<why>.*)$")


def go_env() -> dict[str, str]:
    """The environment, with the local toolchain only: Go is never downloaded."""
    return {**os.environ, "GOTOOLCHAIN": "local"}


def build(out_dir: Path, log: Path) -> tuple[Path, str]:
    """`go build` of the example into ``out_dir`` (the machine's Go caches make a rebuild a matter of seconds);
    returns the binary and Go's version."""
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("Go 1.26 is not on PATH: --supervisor go builds clients/go/examples/supervisor with it")
    binary = out_dir / BINARY
    version = subprocess.run([go, "env", "GOVERSION"], env=go_env(), capture_output=True, text=True, check=False)
    done = subprocess.run([go, "build", "-o", str(binary), EXAMPLE], cwd=MODULE, env=go_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)  # fmt: skip
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"go build {EXAMPLE} (in clients/go) exited {done.returncode}: {last}")
    return binary, version.stdout.strip()


def kwok_log(container_log: Path) -> None:
    """KWOK_LOG_LINE in the file kwok serves as every container's log (CRI format, as a runtime writes it)."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    with container_log.open("a") as log:
        log.write(f"{now} stdout F {KWOK_LOG_LINE}\n")


def command(binary: Path, setup: scenario.Setup) -> list[str]:
    """The example's command line for the site the sandbox prepared."""
    argv = [
        str(binary),
        "-server", setup.api_url,
        "-ca-file", str(setup.ca_file),
        "-token-file", str(setup.token_file),
        "-namespace", setup.namespace,
        "-runtime", setup.runtime,
        "-queue", setup.local_queue,
        "-image", scenario.IMAGE,
        "-within", WITHIN,
    ]  # fmt: skip
    for host, address in setup.resolve.items():
        argv += ["-resolve", f"{host}:{address}"]
    return argv


def run(argv: Sequence[str], log: Path, on_line: Callable[[str], None], logs: Sequence[Path] = ()) -> list[str]:
    """Runs the example: each line it prints (stdout and stderr, as they come) goes to ``on_line`` and to
    ``log``. A non-zero exit raises StepFailed naming the example's step ("supervisor, Open"), with its
    reason and ``logs`` (``log`` first); the enclosing step's timeout kills it."""
    lines: list[str] = []
    with log.open("w") as saved, subprocess.Popen(
        list(argv), cwd=MODULE, env=go_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, bufsize=1,
    ) as proc:  # fmt: skip
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.rstrip("\n")
                saved.write(raw)
                saved.flush()
                lines.append(line)
                on_line(line)
            code = proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if code != 0:
        where = [log, *logs]
        failed = next((m for m in map(_FAILED.match, reversed(lines)) if m), None)
        if failed is not None:
            raise StepFailed(f"supervisor, {failed['step']}", failed["why"], where)
        last = lines[-1] if lines else "no output"
        raise StepFailed("supervisor", f"the example exited {code}: {last}", where)
    return lines
