"""Polling for asynchronous cluster behaviour, with the last failure as the error."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

T = TypeVar("T")


async def eventually(probe: Callable[[], Awaitable[T]], within: float = 20, what: str = "condition") -> T:
    """Retries `probe` until it returns without raising (an assert, an API error, pytest.fail)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await probe()
        except (AssertionError, ApiException, pytest.fail.Exception) as e:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not reached within {within:.0f}s: {e}") from e
        await asyncio.sleep(0.25)
