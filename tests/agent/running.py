"""The agent's controller running in a thread of the test process, on its own event loop, so that tests can
be plain synchronous code that plays Kueue's part while the controller reacts to its watches."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from agent.config import AgentConfig
from agent.gate.controller import Controller
from agent.runtime.kube import Kube
from harness.async_client import api_client
from harness.cluster import ControlPlane

T = TypeVar("T")


class RunningController:
    def __init__(self, cp: ControlPlane, config: AgentConfig, identity: str) -> None:
        self.cp, self.config, self.identity = cp, config, identity
        self.controller: Controller | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=f"agent-{identity}", daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # surfaced by stop() and by waits
            self._error = exc
            self._started.set()

    async def _run(self) -> None:
        async with api_client(self.cp.admin_credentials) as api:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            self.controller = Controller(Kube(api, instance=self.identity), self.config, identity=self.identity)
            self._started.set()
            await self.controller.run(self._stop)

    def start(self) -> RunningController:
        self._thread.start()
        self._started.wait(30)
        self.wait(lambda c: c.ready and c.leading, 60, "the controller to list everything and lead")
        return self

    def call(self, fn: Callable[[Controller], T]) -> T:
        """Run ``fn(controller)`` on the controller's loop (its state is not thread-safe) and return the result."""
        assert self._loop is not None
        assert self.controller is not None
        controller = self.controller

        async def run() -> T:
            return fn(controller)

        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(run(), self._loop)
        return future.result(10)

    def wait(self, predicate: Callable[[Controller], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            if self._error is not None:
                raise AssertionError(f"the controller died: {self._error!r}") from self._error
            if self.controller is not None:
                result = self.call(predicate)
                if result:
                    return result
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        if self._error is not None:
            raise self._error
