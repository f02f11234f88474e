"""Local processes of a control-plane run: each in its own process group, logging to its own file.

Every supervisor that still owns processes is stopped at interpreter exit and on SIGTERM/SIGHUP,
and each child is also asked by the kernel to die with its parent (PR_SET_PDEATHSIG), so a run
that is killed outright leaves nothing behind on the machine.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

_PR_SET_PDEATHSIG = 1
_T = TypeVar("_T")


class ProcessExitedError(RuntimeError):
    """A process of the run is no longer running."""


def tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a log file ("" when it does not exist)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            data = f.read()
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: keep it to one libc call, the library is loaded already.
    _libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


class _Spawner:
    """Forks children on one thread that lives as long as the interpreter.

    The kernel's "parent" for PR_SET_PDEATHSIG is the thread that forked the child, not the process: a process
    started from a short-lived thread (a fault's heal on a chaos thread) would be SIGKILLed when that thread
    ends. The main thread ends with the interpreter, so starts from it fork there directly."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], object], list[object], threading.Event]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def call(self, fn: Callable[[], _T]) -> _T:
        if threading.current_thread() is threading.main_thread():
            return fn()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="process-spawner", daemon=True)
                self._thread.start()
        done = threading.Event()
        box: list[object] = []
        self._jobs.put((fn, box, done))
        done.wait()
        ok, value = box
        if not ok:
            raise value  # type: ignore[misc]
        return value  # type: ignore[return-value]

    def _serve(self) -> None:
        while True:
            fn, box, done = self._jobs.get()
            try:
                box.extend((True, fn()))
            except BaseException as e:  # handed to the caller's thread
                box.extend((False, e))
            done.set()


_spawner = _Spawner()


@dataclass
class ManagedProcess:
    name: str
    argv: tuple[str, ...]
    log_path: Path
    popen: subprocess.Popen[bytes]
    env: dict[str, str] | None = None
    cwd: Path | None = None
    down: bool = False
    """Killed on purpose (ProcessSupervisor.kill): check_alive does not count it until restart() replaces it."""

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace_seconds: float = 10.0) -> None:
        """SIGTERM to the whole process group, SIGKILL after the grace period."""
        if self.popen.poll() is None:
            _signal_group(self.popen.pid, signal.SIGTERM)
            # A process stopped with SIGSTOP (a chaos fault) handles its SIGTERM only once continued.
            _signal_group(self.popen.pid, signal.SIGCONT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(grace_seconds)
        # Children that outlived their leader are killed too.
        _signal_group(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)

    def describe_exit(self) -> str:
        code = self.popen.poll()
        state = "running" if code is None else f"exited with status {code}"
        return f"{self.name} (pid {self.pid}) {state}; log {self.log_path}:\n{tail(self.log_path)}"


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


@dataclass
class ProcessSupervisor:
    """Starts processes with logs under `log_dir` and stops them all, in reverse start order."""

    log_dir: Path
    processes: list[ManagedProcess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        _register(self)

    def start(
        self,
        name: str,
        argv: Sequence[str | os.PathLike[str]],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> ManagedProcess:
        process = self._spawn(name, tuple(os.fspath(a) for a in argv), dict(env) if env is not None else None, cwd)
        self.processes.append(process)
        return process

    def _spawn(self, name: str, args: tuple[str, ...], env: dict[str, str] | None, cwd: Path | None) -> ManagedProcess:
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as log:
            log.write(f"+ {' '.join(args)}\n".encode())
            log.flush()
            popen = _spawner.call(
                lambda: subprocess.Popen(
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=cwd,
                    env=env,
                    # Own group: a terminal Ctrl-C reaches only us, and we stop children in order.
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
            )
        return ManagedProcess(name=name, argv=args, log_path=log_path, popen=popen, env=env, cwd=cwd)

    def get(self, name: str) -> ManagedProcess:
        for p in self.processes:
            if p.name == name:
                return p
        raise KeyError(name)

    def stop(self, name: str) -> None:
        """Stop one process on purpose and forget it, so check_alive does not take it for a crash."""
        process = self.get(name)
        process.stop()
        self.processes.remove(process)

    def restart(self, name: str, grace_seconds: float = 10.0) -> ManagedProcess:
        """Stops one process (if it still runs) and starts it again with the same argv, env and cwd, appending
        to the same log; the new process takes the old one's place in the stop order and in check_alive."""
        old = self.get(name)
        old.stop(grace_seconds)
        new = self._spawn(name, old.argv, old.env, old.cwd)
        self.processes[self.processes.index(old)] = new
        return new

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL, grace_seconds: float = 10.0) -> ManagedProcess:
        """Kills one process on purpose and keeps it, so restart() brings it back; check_alive does not count
        it meanwhile. SIGKILL is a crash; SIGTERM an orderly stop (SIGKILL after the grace period)."""
        process = self.get(name)
        process.down = True
        if sig == signal.SIGKILL:
            _signal_group(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.popen.wait(5)
        else:
            process.stop(grace_seconds)
        return process

    def send_signal(self, name: str, sig: signal.Signals) -> None:
        """Sends `sig` to one process's group (SIGSTOP and SIGCONT for a process that hangs and resumes)."""
        _signal_group(self.get(name).pid, sig)

    def check_alive(self, names: Iterable[str] | None = None) -> None:
        """Raise when a process has exited: all of them, or only those named (a component's own); not one
        killed on purpose (kill) and not yet restarted."""
        wanted = None if names is None else set(names)
        dead = [p for p in self.processes if not p.alive() and not p.down and (wanted is None or p.name in wanted)]
        if dead:
            raise ProcessExitedError("\n\n".join(p.describe_exit() for p in dead))

    def log_tails(self, lines: int = 40) -> dict[str, str]:
        return {p.name: tail(p.log_path, lines) for p in self.processes}

    def stop_all(self) -> None:
        while self.processes:
            self.processes.pop().stop()
        _unregister(self)


# --- process-wide cleanup ---------------------------------------------------------------------

_lock = threading.Lock()
_live: list[ProcessSupervisor] = []
_cleanups: list[Callable[[], None]] = []
_handlers_installed = False


def add_cleanup(fn: Callable[[], None]) -> None:
    """`fn` runs at interpreter exit and on SIGTERM/SIGHUP, before any process is stopped: for what a
    process leaves behind that stopping it does not remove (a real node's containers, bridge, cgroups)."""
    with _lock:
        _cleanups.append(fn)


def remove_cleanup(fn: Callable[[], None]) -> None:
    with _lock, contextlib.suppress(ValueError):
        _cleanups.remove(fn)


def _register(supervisor: ProcessSupervisor) -> None:
    global _handlers_installed
    with _lock:
        _live.append(supervisor)
        if _handlers_installed:
            return
        _handlers_installed = True
    atexit.register(stop_everything)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous = signal.getsignal(sig)
            signal.signal(sig, _make_handler(previous))


def _unregister(supervisor: ProcessSupervisor) -> None:
    with _lock, contextlib.suppress(ValueError):
        _live.remove(supervisor)


def stop_everything() -> None:
    """Runs the registered cleanups, then stops every process of every supervisor still alive in this
    interpreter."""
    with _lock:
        cleanups = list(reversed(_cleanups))
    for fn in cleanups:
        with contextlib.suppress(Exception):
            fn()
    with _lock:
        supervisors = list(reversed(_live))
    for s in supervisors:
        s.stop_all()


def _make_handler(previous: object):  # type: ignore[no-untyped-def]
    def handler(signum: int, frame: object) -> None:
        stop_everything()
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_IGN:
            return
        else:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    return handler


def wait_until(predicate, timeout: float, interval: float = 0.2, what: str = "condition"):  # type: ignore[no-untyped-def]
    """Polls `predicate` until it returns a truthy value, which is returned."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = predicate()
            if result:
                return result
        except Exception as e:  # the predicate's own errors are retried until the deadline
            last_error = e
        if time.monotonic() >= deadline:
            detail = f": {last_error}" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)
