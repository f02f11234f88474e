"""Running the shipped prologue (contract.prologue.PROLOGUE) in every POSIX shell from Debian, from a file as
every trainer pod runs it (and inline, ``-c``, where a test says so).

A shell that is not installed fails the test that needs it, naming the Debian package: CI installs
them all (.ci/run), and a skip would hide a shell the prologue was never run in.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from contract.identity import attempt_token, epoch, epoch_prefix, r_of, token_prefix
from contract.keys import (
    ENV_K8S_ADMISSION,
    ENV_K8S_EPOCH_PREFIX,
    ENV_K8S_RESTART,
    ENV_K8S_TOKEN_PREFIX,
    PROLOGUE_KEY,
    PROLOGUE_REFUSAL_EXIT,
)
from contract.prologue import PROLOGUE, PROLOGUE_CONFIGMAP, inline_prologue_argv, prologue_argv


@dataclass(frozen=True)
class Shell:
    argv: tuple[str, ...]
    package: str


SHELLS: Final[dict[str, Shell]] = {
    "dash": Shell(("dash",), "dash"),
    "bash": Shell(("bash",), "bash"),
    "bash-posix": Shell(("bash", "--posix"), "bash"),
    "busybox": Shell(("busybox", "sh"), "busybox"),
    "mksh": Shell(("mksh",), "mksh"),
    "posh": Shell(("posh",), "posh"),
    "yash": Shell(("yash",), "yash"),
    "zsh": Shell(("zsh", "--emulate", "sh"), "zsh"),
    "ksh93": Shell(("ksh93",), "ksh93u+m"),
}
SHELL_NAMES: Final = tuple(SHELLS)
DEBIAN_PACKAGES: Final = tuple(sorted({s.package for s in SHELLS.values()} | {"shellcheck"}))

REFUSED: Final = PROLOGUE_REFUSAL_EXIT
JOB_ID: Final = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
PATH: Final = os.environ.get("PATH", os.defpath)
TIMEOUT: Final = 20

# The default execution: G = 1, N = 5, attempt 0, A = 1, J = 0.
VALID: Final[dict[str, str]] = {
    ENV_K8S_EPOCH_PREFIX: epoch_prefix(1, 5),
    ENV_K8S_TOKEN_PREFIX: token_prefix(JOB_ID, 5, 0),
    ENV_K8S_ADMISSION: "1",
    ENV_K8S_RESTART: "0",
}


def require(name: str) -> list[str]:
    """The argv that starts shell ``name``; fails the test, naming the package, when it is missing."""
    shell = SHELLS[name]
    path = shutil.which(shell.argv[0])
    if path is None:
        pytest.fail(
            f"{shell.argv[0]} is not installed, so the prologue cannot be tested in {name}: "
            f"apt-get install {shell.package} (all of them: apt-get install {' '.join(DEBIAN_PACKAGES)})",
            pytrace=False,
        )
    return [path, *shell.argv[1:]]


def require_tool(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is not installed: apt-get install {package}", pytrace=False)
    return path


def inputs(g: int, n: int, attempt: int, a: int, j: int, job_id: str = JOB_ID) -> dict[str, str]:
    return {
        ENV_K8S_EPOCH_PREFIX: epoch_prefix(g, n),
        ENV_K8S_TOKEN_PREFIX: token_prefix(job_id, n, attempt),
        ENV_K8S_ADMISSION: str(a),
        ENV_K8S_RESTART: str(j),
    }


def expected(g: int, n: int, attempt: int, a: int, j: int, job_id: str = JOB_ID) -> tuple[str, str]:
    """(DISPATCH_EPOCH, DISPATCH_ATTEMPT) as the Python identity math says."""
    return str(epoch(g, n, r_of(a, j))), attempt_token(job_id, n, attempt, a, j)


def environment(overrides: Mapping[str, str | None] | None = None, base: Mapping[str, str] = VALID) -> dict:
    """A small, fixed environment: PATH, a UTF-8 locale, the inputs; a None override unsets a name."""
    env = {"PATH": PATH, "LANG": "C.UTF-8", **base}
    for key, value in (overrides or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _script() -> str:
    """A file holding PROLOGUE as the pod's mount of the ConfigMap holds it (read-only), named by its hash."""
    path = Path(tempfile.gettempdir()) / f"{PROLOGUE_CONFIGMAP}-{os.getuid()}" / PROLOGUE_KEY
    if not path.is_file() or path.read_text(encoding="utf-8") != PROLOGUE:
        path.parent.mkdir(exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(PROLOGUE)
        os.chmod(partial, 0o444)
        os.replace(partial, path)  # atomic: another process running the tests sees the old file or the new
    return str(path)


SCRIPT: Final = _script()
FORMS: Final = ("file", "inline")
"""How a shell runs the prologue: ``file`` as every trainer pod does (``sh <file> <command...>``, the file mounted
from the prologue's ConfigMap), ``inline`` as ``sh -c <text> dispatch-prologue <command...>``."""


def argv(shell: str, command: Sequence[str], flags: Sequence[str] = (), form: str = "file") -> list[str]:
    """``<shell> [flags] <file> <command...>`` (or, ``inline``, ``<shell> [flags] -c <PROLOGUE> dispatch-prologue
    <command...>``), built by contract.prologue."""
    if form == "file":
        shipped = prologue_argv(list(command), SCRIPT)
        assert shipped[1] == SCRIPT
    else:
        shipped = inline_prologue_argv(list(command))
        assert shipped[1] == "-c"
    return [*require(shell), *flags, *shipped[1:]]


def run(
    shell: str,
    command: Sequence[str],
    overrides: Mapping[str, str | None] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    flags: Sequence[str] = (),
    form: str = "file",
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv(shell, command, flags, form),
        env=dict(env) if env is not None else environment(overrides),
        cwd=cwd,
        capture_output=True,
        text=True,
        errors="surrogateescape",
        timeout=TIMEOUT,
        check=False,
    )


def dispatch_env(stdout: str) -> dict[str, str]:
    """The DISPATCH_* variables in the NUL-separated output of ``env -0``."""
    pairs = (item.partition("=") for item in stdout.split("\0") if item)
    return {k: v for k, _, v in pairs if k.startswith("DISPATCH_")}


ENV_COMMAND: Final = ("env", "-0")
"""A user command that prints its environment: found through PATH, so the PATH lookup runs too."""


def assert_refused(result: subprocess.CompletedProcess[str], *names: str, code: int = REFUSED) -> None:
    """Exit ``code``, nothing run (no stdout), one line on stderr: ``dispatch: ...`` naming ``names``."""
    detail = f"exit {result.returncode}, stdout {result.stdout!r}, stderr {result.stderr!r}"
    assert result.returncode == code, detail
    assert result.stdout == "", detail
    assert result.stderr.startswith("dispatch: "), detail
    assert result.stderr.endswith("\n"), detail
    assert result.stderr.count("\n") == 1, detail
    assert len(result.stderr.splitlines()) == 1, detail  # no \r, \x85, \u2028 ... either
    for name in names:
        assert name in result.stderr, detail


def assert_ran(result: subprocess.CompletedProcess[str], epoch_: str, attempt: str) -> None:
    detail = f"exit {result.returncode}, stderr {result.stderr!r}"
    assert result.returncode == 0, detail
    assert result.stderr == "", detail
    seen = dispatch_env(result.stdout)
    assert seen.get("DISPATCH_EPOCH") == epoch_, seen
    assert seen.get("DISPATCH_ATTEMPT") == attempt, seen
    assert not [k for k in seen if k.startswith("DISPATCH_K8S_")], seen
