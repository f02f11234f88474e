"""Progress lines, and steps that are each bounded in time and fail with their name and the logs to read."""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

LABEL_WIDTH = 10


class StepFailed(Exception):
    """A step of the sandbox failed: which one, why, and where to look."""

    def __init__(self, step: str, reason: str, logs: Sequence[Path] = ()) -> None:
        super().__init__(f"{step}: {reason}")
        self.step = step
        self.reason = reason
        self.logs = list(logs)


class StepTimeout(Exception):
    """Raised in the main thread by the step's alarm."""


@dataclass
class Outcome:
    """What a step reports on its progress line once it is done."""

    detail: str = ""
    more: list[str] = field(default_factory=list)


def _on_alarm(signum: int, frame: object) -> None:
    raise StepTimeout


@dataclass
class Progress:
    out: TextIO = sys.stdout
    _partial: bool = False
    _below: bool = False

    def partial(self, text: str) -> None:
        """More of the current step's line, while it runs."""
        print(text, end="", file=self.out, flush=True)
        self._partial = True

    def line(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def below(self, text: str) -> None:
        """A line under the current step's, while it runs (a program's output, as it comes); the step's outcome
        then ends below them too."""
        if not self._below:
            self.line()
        self.line(f"  {'':<{LABEL_WIDTH}} {text}")
        self._below = True

    def _end(self, text: str) -> None:
        if self._below:
            self.line(f"  {'':<{LABEL_WIDTH}} {text}")
        else:
            self.line(("  " if self._partial else "") + text)

    @contextlib.contextmanager
    def step(self, label: str, *, timeout: float, logs: Sequence[Path] = ()) -> Iterator[Outcome]:
        """One progress line: the label at once, the outcome and the seconds when done. The step may take
        ``timeout`` seconds at most (an alarm interrupts it); any failure becomes StepFailed naming the
        step and ``logs``. The waits inside a step have their own, shorter bounds and messages."""
        print(f"  {label:<{LABEL_WIDTH}} ", end="", file=self.out, flush=True)
        self._partial = self._below = False
        outcome = Outcome()
        started = time.monotonic()
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            yield outcome
        except StepTimeout:
            self._end("FAILED")
            raise StepFailed(label, f"did not finish within {timeout:.0f}s", logs) from None
        except StepFailed:
            self._end("FAILED")
            raise
        except Exception as exc:
            self._end("FAILED")
            raise StepFailed(label, _describe(exc), logs) from exc
        except BaseException:  # KeyboardInterrupt: end the line, let it through
            self._end("interrupted")
            raise
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        seconds = time.monotonic() - started
        ending = "  ".join(x for x in (outcome.detail, f"({seconds:.1f}s)") if x)
        self._end(ending)
        for more in outcome.more:
            self.line(f"  {'':<{LABEL_WIDTH}} {more}")


def _describe(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, TimeoutError | AssertionError | RuntimeError | OSError | ValueError):
        return text
    return f"{type(exc).__name__}: {text}"
