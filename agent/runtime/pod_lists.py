"""One consistent LIST of pods shared by every pass that asked for pods before it was issued.

Why a pass needs a fresh LIST: the gate must see every pod of the previous execution that existed when the
pass read its Workload (agent/gate/reconcile.py, step a). A LIST with no resourceVersion is a consistent read:
the API server serves it at a revision no older than etcd's when the LIST *arrived*. So any LIST issued
after the Workload read returned sees at least what existed at the read (and possibly more, which only
holds more). A LIST issued before the read returned may not.

Why sharing it is the same guarantee: a pass asks here only after its Workload read returned (reconcile
calls ``Kube.list_pods`` in step b). A request is put in the *waiting* batch; a LIST is issued for a batch
only after the batch was taken, i.e. after every request in it was made. A request made while a LIST is
in flight goes into the next batch, never the one in flight. Hence every pass is served by a LIST issued
after its own Workload read, and one LIST (per chunk of names) serves every pass of its batch.

Why it is needed: a consistent LIST waits for the API server's watch cache to catch up with etcd (up to
its 100 ms progress-notify period; docs/performance.md), so a pass spends most of its time in it. Shared,
N concurrent passes pay one wait instead of N, and the API server answers one LIST instead of N.

The LIST is cluster-wide with a set-based selector on the JobSet name label (``in (a, b, ...)``) and each
pass keeps the pods of its own namespace and name; JobSet names are DNS labels, so they can be put in a
selector as they are. A name that could not be (not one of dispatch's) is listed alone, as before.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final

from contract.keys import LABEL_JOBSET_NAME
from contract.objects import dig

Obj = dict[str, Any]
ListPods = Callable[[str | None, str], Awaitable[list[Obj]]]
"""(namespace or None for all namespaces, label selector) -> the pods, by a consistent LIST."""

MAX_NAMES: Final = 100
"""JobSet names in one selector: 100 names of up to 63 characters keep the URL under 8 KiB."""

_LABEL_VALUE: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")

Key = tuple[str, str]
"""(namespace, JobSet name)"""


class SharedPodLists:
    """``await lists.get(namespace, name)``: the pods labelled with the JobSet name ``name`` in ``namespace``,
    from a consistent LIST issued after this call was made (the module's docstring says why that is safe)."""

    def __init__(self, list_pods: ListPods, *, max_names: int = MAX_NAMES) -> None:
        self._list = list_pods
        self._max = max_names
        self._waiting: dict[Key, list[asyncio.Future[list[Obj]]]] = {}
        self._draining: asyncio.Task[None] | None = None
        self.lists_issued = 0
        """LIST requests issued (for the metrics and the benchmark)."""

    async def get(self, namespace: str, name: str) -> list[Obj]:
        if not _LABEL_VALUE.fullmatch(name):
            # Not a label value: a selector cannot hold it; the LIST (and its error) is this pass's alone.
            self.lists_issued += 1
            return await self._list(namespace, f"{LABEL_JOBSET_NAME}={name}")
        future: asyncio.Future[list[Obj]] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault((namespace, name), []).append(future)
        if self._draining is None or self._draining.done():
            self._draining = asyncio.create_task(self._drain(), name="pod-lists")
        return await future

    async def _drain(self) -> None:
        """While anyone waits: take the whole waiting batch, then LIST for it (never the other way round)."""
        while self._waiting:
            batch, self._waiting = self._waiting, {}
            live = {k: fs for k, fs in batch.items() if any(not f.done() for f in fs)}  # cancelled passes drop out
            await asyncio.gather(*(self._serve(chunk) for chunk in _chunks(live, self._max)))

    async def _serve(self, chunk: dict[Key, list[asyncio.Future[list[Obj]]]]) -> None:
        names = sorted({name for _, name in chunk})
        namespaces = {namespace for namespace, _ in chunk}
        only = next(iter(namespaces)) if len(namespaces) == 1 else None
        selector = f"{LABEL_JOBSET_NAME}={names[0]}"
        if len(names) > 1:
            selector = f"{LABEL_JOBSET_NAME} in ({','.join(names)})"
        self.lists_issued += 1
        try:
            pods = await self._list(only, selector)
        except Exception as exc:  # each pass gets the failure, as it would from its own LIST
            for futures in chunk.values():
                for f in futures:
                    if not f.done():
                        f.set_exception(exc)
            return
        by_key: dict[Key, list[Obj]] = {}
        for pod in pods:
            key = (str(dig(pod, "metadata", "namespace")), str(dig(pod, "metadata", "labels", LABEL_JOBSET_NAME)))
            by_key.setdefault(key, []).append(pod)
        for key, futures in chunk.items():
            for f in futures:
                if not f.done():
                    f.set_result(list(by_key.get(key, [])))


def _chunks(batch: dict[Key, Any], size: int) -> Iterator[dict[Key, Any]]:
    """The batch in chunks of at most ``size`` distinct names (a name in two namespaces counts once)."""
    by_name: dict[str, list[Key]] = {}
    for key in batch:
        by_name.setdefault(key[1], []).append(key)
    names = sorted(by_name)
    for i in range(0, len(names), size):
        yield {key: batch[key] for name in names[i : i + size] for key in by_name[name]}
