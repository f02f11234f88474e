"""Watch: the phases of dispatch's TrainJobs in a namespace, from the change feed (agent/api/feed.py), waiting
for a change when there is none yet."""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.api.errors import ApiError, ErrorKind
from agent.api.feed import ChangeFeed, Expired, NotReady
from agent.api.models import WatchRequest, WatchResponse
from agent.api.service.base import ServiceBase
from agent.api.service.listing import list_item


@dataclass
class WatchOps(ServiceBase):
    _feed: ChangeFeed | None = field(default=None, init=False, repr=False)

    @property
    def feed(self) -> ChangeFeed:
        if self._feed is None:
            self._feed = ChangeFeed(self.kube, self.clock)
        return self._feed

    async def watch(self, req: WatchRequest) -> WatchResponse:
        try:
            jobs, version = await self.feed.changes(req.namespace, req.version, req.timeout_seconds)
        except Expired as exc:
            raise ApiError(ErrorKind.EXPIRED, f"{exc}: watch again without a version", field="version") from None
        except NotReady as exc:
            raise ApiError(ErrorKind.UNAVAILABLE, f"{exc}; retry shortly") from None
        return WatchResponse(items=[list_item(j.trainjob, j.phase) for j in jobs], version=version)

    async def close_feed(self) -> None:
        if self._feed is not None:
            await self._feed.close()
            self._feed = None
