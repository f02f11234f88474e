"""Reading plain objects as the API returns them, without trusting their shape.

The webhook sees whatever a client sends, so every reader here answers ``None`` for a missing or
wrongly-typed step instead of raising.
"""

# No ``from __future__ import annotations`` here: mypy would take ``annotations`` for it, not the function below.
import datetime as dt
from collections.abc import Mapping
from typing import Any


def dig(obj: object, *path: str | int) -> Any:
    """``obj[p0][p1]...`` or None when a step is missing or of the wrong type."""
    for step in path:
        if isinstance(step, int):
            if not isinstance(obj, list) or not -len(obj) <= step < len(obj):
                return None
            obj = obj[step]
        elif not isinstance(obj, Mapping) or step not in obj:
            return None
        else:
            obj = obj[step]
    return obj


def labels(obj: object) -> Mapping[str, Any]:
    value = dig(obj, "metadata", "labels")
    return value if isinstance(value, Mapping) else {}


def annotations(obj: object) -> Mapping[str, Any]:
    value = dig(obj, "metadata", "annotations")
    return value if isinstance(value, Mapping) else {}


def pointer(*path: str | int) -> str:
    """An RFC 6901 JSON Pointer, with ``~`` and ``/`` escaped in keys such as annotation names."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def add_op(doc: object, path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    """One JSON Patch ``add`` that sets ``path`` to ``value``, creating the missing parents in one go.

    ``add`` on an existing member replaces it, so the op is right whether or not the value is there.
    """
    for depth in range(1, len(path)):
        if dig(doc, *path[:depth]) is None:
            # path[:depth] is missing: add it whole, with the rest of the nest inside.
            nest: Any = value
            for key in reversed(path[depth:]):
                nest = {key: nest}
            return {"op": "add", "path": pointer(*path[:depth]), "value": nest}
    return {"op": "add", "path": pointer(*path), "value": value}


def micro_time(now: dt.datetime) -> str:
    """A MicroTime as the API writes it (RFC 3339 with microseconds, UTC): a Lease's acquire and renew times."""
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text: object) -> dt.datetime | None:
    """An RFC 3339 date-time with its offset (as the API server writes them, and hold-until), or None: a
    date alone or a time without an offset is not one, and naive times would compare against local time."""
    if not isinstance(text, str) or "T" not in text.upper():
        return None
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None
