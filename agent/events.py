"""Events on the TrainJob: a held check's reason when it changes, and foreign reports.

Events are reports, never part of a decision: one that cannot be created is logged and retried on a later
pass, and it never changes what the gate writes.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from agent.constants import EVENT_COMPONENT, EVENT_MESSAGE_MAX, REASON_FOREIGN, REASON_HELD
from contract.keys import KIND_TRAINJOB, TRAINER_API_VERSION
from contract.objects import dig
from serving.kube import describe_api_error

log = logging.getLogger(__name__)

FOREIGN_MEMORY = 10_000
"""(TrainJob uid, reason) pairs remembered as reported; the oldest are forgotten past this, so a long-lived
process stays bounded (a forgotten one is at worst reported once more)."""

CreateEvent = Callable[[str, Mapping[str, Any]], Awaitable[Any]]


def event_body(
    trainjob: Mapping[str, Any], *, reason: str, message: str, warning: bool, instance: str, now: dt.datetime
) -> dict[str, Any]:
    """A core/v1 Event about ``trainjob`` as read (its uid pins the object the report is about)."""
    name = dig(trainjob, "metadata", "name")
    namespace = dig(trainjob, "metadata", "namespace")
    stamp = now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if len(message) > EVENT_MESSAGE_MAX:
        message = message[: EVENT_MESSAGE_MAX - 16] + " ... (truncated)"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{secrets.token_hex(8)}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": TRAINER_API_VERSION,
            "kind": KIND_TRAINJOB,
            "name": name,
            "namespace": namespace,
            "uid": dig(trainjob, "metadata", "uid"),
            "resourceVersion": dig(trainjob, "metadata", "resourceVersion"),
        },
        "reason": reason,
        "message": message,
        "type": "Warning" if warning else "Normal",
        "source": {"component": EVENT_COMPONENT},
        "reportingComponent": EVENT_COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class EventRecorder:
    def __init__(self, create: CreateEvent, instance: str) -> None:
        self._create = create
        self.instance = instance
        self._reported: OrderedDict[tuple[str, str], None] = OrderedDict()

    async def held(self, trainjob: Mapping[str, Any], message: str) -> bool:
        return await self._emit(trainjob, REASON_HELD, message, warning=True)

    async def foreign(self, trainjob: Mapping[str, Any], reasons: Iterable[str]) -> int:
        """Reports each reason not yet reported for this TrainJob uid by this process; returns how many were."""
        uid = str(dig(trainjob, "metadata", "uid"))
        sent = 0
        for reason in reasons:
            key = (uid, reason)
            if key in self._reported:
                continue
            if await self._emit(trainjob, REASON_FOREIGN, reason, warning=True):
                self._reported[key] = None
                if len(self._reported) > FOREIGN_MEMORY:
                    self._reported.popitem(last=False)
                sent += 1
        return sent

    async def _emit(self, trainjob: Mapping[str, Any], reason: str, message: str, *, warning: bool) -> bool:
        now = dt.datetime.now(dt.UTC)
        body = event_body(trainjob, reason=reason, message=message, warning=warning, instance=self.instance, now=now)
        try:
            await self._create(body["metadata"]["namespace"], body)
        except ApiException as exc:
            log.warning(
                "cannot record event %s on TrainJob %s: %s",
                reason,
                body["involvedObject"]["name"],
                describe_api_error(exc),
            )
            return False
        except Exception as exc:  # a report must never break a reconcile
            log.warning("cannot record event %s: %s: %s", reason, type(exc).__name__, exc)
            return False
        return True
