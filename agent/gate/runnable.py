"""The leader's concerns beside the workers, each a ``Runnable`` of its own (one per concern, as Kueue's controllers
are): the Active condition (agent/gate/active.py), the pod finalizer's releaser (agent/gate/releaser.py), the JobSet
UID record (agent/gate/jobset_record.py), on a worker the contact with the manager and the copy verifier, on a
manager the contact Lease, the claims and the round over the workers (agent/gate/worker_round.py).

The controller (agent/gate/controller.py) starts each once every watch has listed and it leads, beside its workers,
and cancels them all when leadership is lost or it stops: cancelling one anywhere is safe, since each of its writes
is preconditioned. What the watches feed a runnable (the pods to the releaser, the JobSets to the recorder, ...)
reaches it through its own methods, which run on every replica; only ``run`` is the leader's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol


class Runnable(Protocol):
    @property
    def name(self) -> str:
        """Its task's name (in the logs of a failure)."""
        ...

    async def run(self) -> None:
        """Its loop, while we lead: it returns only when it has nothing left to do (a queue shut down)."""
        ...


@dataclass(frozen=True)
class Loop:
    """A runnable made of a named loop (one whose object is not the gate's: agent/multicluster's)."""

    name: str
    loop: Callable[[], Awaitable[None]]

    async def run(self) -> None:
        await self.loop()
