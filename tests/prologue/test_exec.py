"""exec, arguments, WorkDir and the environment the command sees, in every shell."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contract.keys import (
    ENV_ATTEMPT,
    ENV_EPOCH,
    ENV_JOB_ID,
    ENV_K8S_ADMISSION,
    ENV_K8S_EPOCH_PREFIX,
    ENV_K8S_RESTART,
    ENV_K8S_TOKEN_PREFIX,
    ENV_K8S_WORKDIR,
)
from contract.prologue import PROLOGUE, inline_prologue_argv, prologue_argv
from contract.trainer import trainer_command
from tests.prologue.shells import (
    ENV_COMMAND,
    FORMS,
    JOB_ID,
    SCRIPT,
    SHELL_NAMES,
    TIMEOUT,
    argv,
    assert_ran,
    assert_refused,
    environment,
    expected,
    run,
)

pytestmark = pytest.mark.shells

PYTHON = sys.executable
PROBE_SOURCE = (
    "import json, os, sys\n"
    "seen = {'argv': sys.argv[1:], 'cwd': os.getcwd(), 'pid': os.getpid(), 'env': dict(os.environ)}\n"
    "print(json.dumps(seen))"
)
PROBE = (PYTHON, "-c", PROBE_SOURCE)


def probe(shell: str, args: tuple[str, ...] = (), overrides=None, **kwargs: Any) -> dict[str, Any]:
    result = run(shell, (*PROBE, *args), overrides, **kwargs)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return json.loads(result.stdout)


# -- exec ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shell", SHELL_NAMES)
def test_command_replaces_the_shell(shell: str) -> None:
    """The command runs in the process we started (PID 1 in a container): the same pid."""
    with subprocess.Popen(
        argv(shell, PROBE), env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, err
    assert json.loads(out)["pid"] == proc.pid


@pytest.mark.parametrize("shell", SHELL_NAMES)
def test_a_shell_command_sees_its_pid_as_the_started_process(shell: str) -> None:
    """``sh -c 'echo $$'`` as the user's command: $$ is the pid of the process we spawned."""
    with subprocess.Popen(
        argv(shell, ("sh", "-c", 'echo "$$"')), env=environment(), stdout=subprocess.PIPE, text=True
    ) as proc:
        out, _ = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0
    assert int(out) == proc.pid


TRAP_TERM = (
    "import os, signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(42))\n"
    "print(os.getpid(), flush=True)\n"
    "time.sleep(60)\n"
    "sys.exit(3)"
)


@pytest.mark.parametrize("shell", SHELL_NAMES)
def test_a_signal_reaches_the_command(shell: str) -> None:
    with subprocess.Popen(
        argv(shell, (PYTHON, "-c", TRAP_TERM)), env=environment(), stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        try:
            ready, _, _ = select.select([proc.stdout], [], [], TIMEOUT)
            assert ready, "the command never started"
            assert int(proc.stdout.readline()) == proc.pid
            proc.send_signal(signal.SIGTERM)
            try:
                assert proc.wait(timeout=TIMEOUT) == 42
            except subprocess.TimeoutExpired:
                raise AssertionError(
                    f"SIGTERM did not end the command in {TIMEOUT} s: {_signal_state(proc.pid)}"
                ) from None
        finally:
            proc.kill()


def _signal_state(pid: int) -> str:
    """What the kernel says of the process's state and signals, to tell a stopped process from a blocked signal."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as exc:
        return f"/proc/{pid}/status: {exc}"
    return "; ".join(
        line for line in status if line.startswith(("State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"))
    )


@pytest.mark.parametrize("shell", SHELL_NAMES)
@pytest.mark.parametrize("status", [0, 1, 7, 125, 255])
def test_the_commands_exit_status_is_the_containers(shell: str, status: int) -> None:
    result = run(shell, (PYTHON, "-c", f"import sys; sys.exit({status})"))
    assert (result.returncode, result.stderr) == (status, "")


@pytest.mark.parametrize("shell", SHELL_NAMES)
def test_a_command_killed_by_a_signal_is_seen_killed(shell: str) -> None:
    """No shell is left to turn the signal into 128 + n: the process we started is the one killed."""
    result = run(shell, (PYTHON, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    assert result.returncode == -signal.SIGKILL


@pytest.mark.parametrize("shell", SHELL_NAMES)
def test_a_command_found_in_path_runs(shell: str) -> None:
    assert_ran(run(shell, ENV_COMMAND), *expected(1, 5, 0, 1, 0))


@pytest.mark.parametrize("shell", SHELL_NAMES)
def test_a_command_that_is_not_executable_exits_126(shell: str, tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o644)
    assert_refused(run(shell, (str(script),)), "not executable", code=126)
    assert_refused(run(shell, ("./train.sh",), cwd=tmp_path), "not executable", code=126)
    assert_refused(run(shell, ("train.sh",), cwd=tmp_path), "not found in PATH", code=127)


@pytest.mark.parametrize("shell", SHELL_NAMES)
def test_success_needs_no_external_tool(shell: str, tmp_path: Path) -> None:
    """With nothing in PATH the prologue still computes and execs (printf is only for refusals)."""
    env = environment({"PATH": str(tmp_path)})
    result = run(shell, PROBE, env=env)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)["env"]
    assert (seen[ENV_EPOCH], seen[ENV_ATTEMPT]) == expected(1, 5, 0, 1, 0)
    assert run(shell, PROBE, env={**env, ENV_K8S_ADMISSION: ""}).returncode == 125


def test_prologue_argv_is_what_the_tests_run() -> None:
    """The pod's argv is the trainer command (before the kubelet's expansion, which leaves it as it is) and the
    user's words; the tests run the same, with the file at a path of their own."""
    assert prologue_argv(["a", "b"]) == [*trainer_command(), "a", "b"]
    assert prologue_argv(["a", "b"]) == ["/bin/sh", "/var/run/dispatch-k8s/prologue/prologue.sh", "a", "b"]
    assert prologue_argv(["a"], SCRIPT) == ["/bin/sh", SCRIPT, "a"]
    assert Path(SCRIPT).read_text(encoding="utf-8") == PROLOGUE
    assert inline_prologue_argv(["a", "b"]) == ["/bin/sh", "-c", PROLOGUE, "dispatch-prologue", "a", "b"]


@pytest.mark.parametrize("form", FORMS)
def test_the_real_bin_sh_runs_the_shipped_argv(form: str) -> None:
    shipped = prologue_argv(list(PROBE), SCRIPT) if form == "file" else inline_prologue_argv(list(PROBE))
    result = subprocess.run(shipped, env=environment(), capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)["env"]
    assert (seen[ENV_EPOCH], seen[ENV_ATTEMPT]) == expected(1, 5, 0, 1, 0)


@pytest.mark.parametrize("shell", SHELL_NAMES)
@pytest.mark.parametrize("form", FORMS)
def test_both_forms_run_the_same(shell: str, form: str, tmp_path: Path) -> None:
    """From the file (every pod) and inline (``-c``): the same pid, arguments, refusal and identity."""
    for name in ("a.txt", "b.txt", "out", "-n"):
        (tmp_path / name).write_text("")
    with subprocess.Popen(
        argv(shell, (*PROBE, *HOSTILE_ARGS), form=form), env=environment(), stdout=subprocess.PIPE, cwd=tmp_path,
        text=True,
    ) as proc:  # fmt: skip
        out, _ = proc.communicate(timeout=TIMEOUT)
    seen = json.loads(out)
    assert (proc.returncode, seen["pid"], seen["argv"]) == (0, proc.pid, list(HOSTILE_ARGS))
    assert (seen["env"][ENV_EPOCH], seen["env"][ENV_ATTEMPT]) == expected(1, 5, 0, 1, 0)
    assert_refused(run(shell, PROBE, {ENV_K8S_ADMISSION: "0"}, form=form), ENV_K8S_ADMISSION)
    assert_refused(run(shell, (), form=form), "no command after dispatch-prologue")


# -- arguments -------------------------------------------------------------------------------------

HOSTILE_ARGS = (
    "plain",
    "two words",
    "  leading and trailing  ",
    "",
    "'single'",
    '"double"',
    "back\\slash \\n \\c \\0101",
    "line1\nline2",
    "trailing newline\n",
    "tab\there",
    "*",
    "*.txt",
    "?",
    "[ab].txt",
    "~",
    "~/x",
    "$HOME",
    "${PATH}",
    "$(echo no)",
    "`echo no`",
    "$@",
    "$1",
    ";",
    "&& echo no",
    "| cat",
    "> out",
    "-n",
    "-e",
    "--",
    "-",
    "%s%d%n",
    "é ü 中文 \u2028",
    "",
)


@pytest.mark.parametrize("shell", SHELL_NAMES)
def test_arguments_pass_through_unchanged(shell: str, tmp_path: Path) -> None:
    for name in ("a.txt", "b.txt", "out", "-n"):
        (tmp_path / name).write_text("")
    assert probe(shell, HOSTILE_ARGS, cwd=tmp_path)["argv"] == list(HOSTILE_ARGS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["-n", "a.txt", "b.txt", "out"]


@pytest.mark.parametrize("shell", SHELL_NAMES)
def test_no_arguments_and_only_empty_arguments(shell: str) -> None:
    assert probe(shell)["argv"] == []
    assert probe(shell, ("", ""))["argv"] == ["", ""]


# -- WorkDir ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("shell", SHELL_NAMES)
def test_workdir_is_entered(shell: str, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    assert probe(shell, (), {ENV_K8S_WORKDIR: str(work)}, cwd=tmp_path / "..")["cwd"] == str(work)


@pytest.mark.parametrize("shell", SHELL_NAMES)
@pytest.mark.parametrize(
    "name", ["with spaces", " lead", "it's", 'dq"', "star*", "dollar$x", "new\nline", "-", "-P", "é"]
)
def test_workdir_with_awkward_names(shell: str, name: str, tmp_path: Path) -> None:
    work = tmp_path / name
    work.mkdir()
    assert probe(shell, (), {ENV_K8S_WORKDIR: str(work)})["cwd"] == str(work)
    # relative to the container's working directory, as a bare name
    assert probe(shell, (), {ENV_K8S_WORKDIR: name}, cwd=tmp_path)["cwd"] == str(work)


@pytest.mark.parametrize("shell", SHELL_NAMES)
def test_workdir_empty_or_unset_stays_put(shell: str, tmp_path: Path) -> None:
    assert probe(shell, (), {ENV_K8S_WORKDIR: ""}, cwd=tmp_path)["cwd"] == str(tmp_path)
    assert probe(shell, (), {ENV_K8S_WORKDIR: None}, cwd=tmp_path)["cwd"] == str(tmp_path)


@pytest.mark.parametrize("shell", SHELL_NAMES)
def test_workdir_missing_is_refused(shell: str, tmp_path: Path) -> None:
    assert_refused(run(shell, PROBE, {ENV_K8S_WORKDIR: str(tmp_path / "missing")}), ENV_K8S_WORKDIR)
    assert_refused(run(shell, PROBE, {ENV_K8S_WORKDIR: str(tmp_path / "missing dir\nx")}), ENV_K8S_WORKDIR)
    (tmp_path / "file").write_text("")
    assert_refused(run(shell, PROBE, {ENV_K8S_WORKDIR: str(tmp_path / "file")}), ENV_K8S_WORKDIR)
    assert_refused(run(shell, PROBE, {ENV_K8S_WORKDIR: "-"}, cwd=tmp_path), ENV_K8S_WORKDIR)


@pytest.mark.parametrize("shell", SHELL_NAMES)
def test_workdir_ignores_cdpath(shell: str, tmp_path: Path) -> None:
    """A relative WorkDir is relative to the working directory, never found through CDPATH."""
    (tmp_path / "cdpath" / "target").mkdir(parents=True)
    (tmp_path / "cwd").mkdir()
    env = environment({ENV_K8S_WORKDIR: "target", "CDPATH": str(tmp_path / "cdpath")})
    assert_refused(run(shell, PROBE, env=env, cwd=tmp_path / "cwd"), ENV_K8S_WORKDIR)
    (tmp_path / "cwd" / "target").mkdir()
    result = run(shell, PROBE, env=env, cwd=tmp_path / "cwd")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["cwd"] == str(tmp_path / "cwd" / "target")


@pytest.mark.parametrize("shell", SHELL_NAMES)
def test_relative_command_is_found_in_the_workdir(shell: str, tmp_path: Path) -> None:
    work = tmp_path / "work dir"
    work.mkdir()
    (work / "train").symlink_to(PYTHON)
    result = run(shell, ("./train", "-c", PROBE_SOURCE, "x"), {ENV_K8S_WORKDIR: str(work)}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["cwd"] == str(work)
    assert_refused(run(shell, ("./train",), cwd=tmp_path), "does not exist", code=127)


# -- the environment the command sees ----------------------------------------------------------------


@pytest.mark.parametrize("shell", SHELL_NAMES)
def test_the_command_sees_outputs_not_inputs(shell: str, tmp_path: Path) -> None:
    user = {
        ENV_JOB_ID: JOB_ID,
        ENV_EPOCH: "stale",
        ENV_ATTEMPT: "stale",
        # names the prologue uses for its own values: a user's variables of these names are untouched
        "R": "user r",
        "N": "user n",
        "A": "user a",
        "J": "user j",
        "G": "user g",
        "IFS": "0123456789./ ",
        # a stale value of a prologue-internal name in the image must not leak either
        "DISPATCH_K8S_R": "stale",
        "DISPATCH_K8S_N": "stale",
        "DISPATCH_K8S_SHOWN": "stale",
    }
    seen = probe(shell, (), {**user, ENV_K8S_WORKDIR: str(tmp_path)})["env"]
    assert (seen[ENV_EPOCH], seen[ENV_ATTEMPT]) == expected(1, 5, 0, 1, 0)
    assert not [k for k in seen if k.startswith("DISPATCH_K8S_")]
    for name in (
        ENV_K8S_ADMISSION,
        ENV_K8S_RESTART,
        ENV_K8S_EPOCH_PREFIX,
        ENV_K8S_TOKEN_PREFIX,
        ENV_K8S_WORKDIR,
    ):
        assert name not in seen
    for name in (ENV_JOB_ID, "R", "N", "A", "J", "G"):
        assert seen[name] == user[name]
    expected_env = {k: v for k, v in environment(user).items() if not k.startswith("DISPATCH_K8S_")}
    expected_env[ENV_EPOCH], expected_env[ENV_ATTEMPT] = expected(1, 5, 0, 1, 0)
    extra = set(seen) - set(expected_env)
    # shells export PWD, OLDPWD, SHLVL, _, LOGNAME (zsh), A__z (ksh93) of their own; nothing else
    assert extra <= {"PWD", "OLDPWD", "SHLVL", "_", "LOGNAME", "A__z"}, extra
    for key, value in expected_env.items():
        if key != "IFS":
            assert seen[key] == value, key
