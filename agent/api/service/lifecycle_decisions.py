"""Open, Hold and Release's pure helpers: the hold Hold writes, and a write preconditioned on the plan's own
previous write to the same object.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from agent.api.errors import ApiError, ErrorKind
from agent.domain.operations import Hold
from contract.objects import parse_rfc3339, pointer


def rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def hold_of(*, instance: str, now: dt.datetime, who: str, reason: str, until: str | None) -> Hold:
    if until is not None and parse_rfc3339(until) is None:
        raise ApiError(ErrorKind.INVALID, f"{until!r} is not an RFC 3339 date-time with an offset", field="until")
    return Hold(instance=instance, since=rfc3339(now), who=who, reason=reason, until=until)


def after_own_write(patch: list[dict[str, Any]], version: str | None) -> list[dict[str, Any]]:
    """``patch``, preconditioned on ``version`` instead of the resourceVersion read, when the plan's write before
    it to the same object left ``version`` (a Workload's metadata, then its status). That write was preconditioned
    on the read, so nothing else was written between: the object is still the one read, plus our own write."""
    if version is None:
        return patch
    at = pointer("metadata", "resourceVersion")
    return [{**op, "value": version} if op.get("path") == at and op.get("op") == "replace" else op for op in patch]
