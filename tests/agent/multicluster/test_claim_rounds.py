"""When the claims round runs (agent/multicluster/claims.py ``ClaimRenewer.run``): every quarter of the claims' duration, and
at once when the controller's Workload watch sees a job dispatched to another worker, or to none
(``ClaimRenewer.saw``); a change seen during a round starts the next one as soon as it ends
(docs/multicluster.md, "The claim")."""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace
from typing import Any

from agent.multicluster.claims import ClaimRenewer

HOUR = 3600
"""The claims' duration here: a round a quarter hour apart, so every round the test sees was started early."""
WAIT = 30.0
"""How long the test waits for a round it expects early: far below the quarter hour, far above any scheduling."""


class Rounds(ClaimRenewer):
    """A renewer whose rounds only count (the requests of a round are the agent tests' and the benchmark's)."""

    def __init__(self) -> None:
        super().__init__(kube=None, workers=SimpleNamespace(origin="multikueue"), duration=HOUR)  # type: ignore[arg-type]
        self.started: asyncio.Queue[int] = asyncio.Queue()
        self.hold: asyncio.Event | None = None
        self.count = 0

    async def round(self) -> None:
        self.count += 1
        self.started.put_nowait(self.count)
        if self.hold is not None:
            await self.hold.wait()


async def _next(rounds: Rounds) -> int:
    return await asyncio.wait_for(rounds.started.get(), WAIT)


async def _quiet(rounds: Rounds) -> bool:
    """No round starts while the loop is given every chance to run (only a poke can start one now)."""
    for _ in range(50):
        await asyncio.sleep(0)
    return rounds.started.empty()


def _run(test: Any) -> None:
    async def main() -> None:
        rounds = Rounds()
        task = asyncio.create_task(rounds.run())
        try:
            assert await _next(rounds) == 1  # the first round at once
            await test(rounds)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(main())


def test_a_job_dispatched_to_a_worker_starts_the_next_round_at_once():
    async def test(rounds: Rounds) -> None:
        assert await _quiet(rounds)
        rounds.saw(("ml", "wl"), "w-1")
        assert await _next(rounds) == 2

    _run(test)


def test_only_a_change_of_worker_starts_a_round():
    async def test(rounds: Rounds) -> None:
        rounds.saw(("ml", "wl"), "w-1")
        assert await _next(rounds) == 2
        rounds.saw(("ml", "wl"), "w-1")  # the same worker again: nothing to do early
        rounds.saw(("ml", "other"), None)  # never dispatched: nothing to take back
        assert await _quiet(rounds)
        rounds.saw(("ml", "wl"), "w-2")  # moved
        assert await _next(rounds) == 3
        rounds.saw(("ml", "wl"), None)  # dispatched nowhere now: its claim is to go
        assert await _next(rounds) == 4
        rounds.saw(("ml", "wl"), None)
        assert await _quiet(rounds)

    _run(test)


def test_a_change_seen_during_a_round_starts_another_round_once_it_ends():
    async def test(rounds: Rounds) -> None:
        rounds.hold = asyncio.Event()
        rounds.saw(("ml", "wl"), "w-1")
        assert await _next(rounds) == 2  # running, held
        rounds.saw(("ml", "wl"), "w-2")  # seen while round 2 reads: round 2 may have missed it
        rounds.hold.set()
        rounds.hold = None
        assert await _next(rounds) == 3

    _run(test)


def test_a_round_that_fails_is_followed_by_the_next_as_any_other():
    async def test(rounds: Rounds) -> None:
        async def failing() -> None:
            rounds.count += 1
            rounds.started.put_nowait(rounds.count)
            raise RuntimeError("the API server is down")

        rounds.round = failing  # type: ignore[method-assign]
        rounds.saw(("ml", "wl"), "w-1")
        assert await _next(rounds) == 2
        rounds.saw(("ml", "wl"), "w-2")
        assert await _next(rounds) == 3

    _run(test)
