"""Kueue's configuration as Preflight reads it on a MultiKueue manager: ``multiKueue.workerLostTimeout``, which the
contact Lease's duration (the agent's ``workerContactSeconds``) must stay strictly below. A worker out of contact
deletes its copies ``workerContactSeconds`` after the last renewal it saw; Kueue may dispatch the job elsewhere only
``workerLostTimeout`` after it lost the worker, so the copies are gone first only if the one is below the other
(docs/multicluster.md, "Contact with the manager", Proof).

Pure: Preflight (agent/api/service.py) reads Kueue's ConfigMap and hands it here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import yaml

DEFAULT_WORKER_LOST_TIMEOUT: Final = "15m"
"""Kueue's default when its configuration sets none (v0.19.2, ``defaultWorkerLostTimeout``)."""

_UNITS: Final = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART: Final = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION: Final = re.compile(rf"[-+]?(?:{_PART.pattern})+")


def go_duration_seconds(text: str) -> float:
    """Seconds of a duration as Go's ``time.ParseDuration`` reads it ("15m", "90s", "1h30m", "1.5h", "0");
    ValueError otherwise. Kueue's configuration is decoded with it."""
    if text in ("0", "+0", "-0"):
        return 0.0
    if not _DURATION.fullmatch(text):
        raise ValueError(f"{text!r} is not a duration (a number and a unit of ns, us, ms, s, m, h, e.g. 15m or 1h30m)")
    seconds = sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(text))
    return -seconds if text.startswith("-") else seconds


def worker_lost_timeout(config_text: str) -> tuple[str, float]:
    """``multiKueue.workerLostTimeout`` of Kueue's Configuration (its YAML), as written and in seconds; Kueue's
    default when it sets none. ValueError says what is wrong."""
    try:
        doc = yaml.safe_load(config_text)
    except yaml.YAMLError as exc:
        raise ValueError(f"is not YAML: {exc}") from None
    doc = {} if doc is None else doc
    if not isinstance(doc, Mapping):
        raise ValueError("is not a YAML mapping (Kueue's Configuration)")
    multikueue = doc.get("multiKueue") or {}
    if not isinstance(multikueue, Mapping):
        raise ValueError("multiKueue is not a mapping")
    value = multikueue.get("workerLostTimeout")
    if value is None:
        return DEFAULT_WORKER_LOST_TIMEOUT, go_duration_seconds(DEFAULT_WORKER_LOST_TIMEOUT)
    if not isinstance(value, str):
        raise ValueError(f"multiKueue.workerLostTimeout {value!r} is not a duration string")
    try:
        return value, go_duration_seconds(value)
    except ValueError as exc:
        raise ValueError(f"multiKueue.workerLostTimeout: {exc}") from None


def contact_problem(configmap: Mapping[str, Any] | None, *, where: str, key: str, contact_seconds: int) -> str | None:
    """Why ``workerContactSeconds`` is not proven strictly below Kueue's ``workerLostTimeout``, from Kueue's
    ConfigMap ``where`` (namespace/name) as read (None: not there); None when it is below."""
    source = f"Kueue's configuration (ConfigMap {where}, key {key})"
    unproven = (
        f"so workerContactSeconds ({contact_seconds}s) is not proven below its multiKueue.workerLostTimeout: a "
        "worker out of contact might still run its copies when Kueue dispatches them elsewhere "
        '(docs/multicluster.md, "Contact with the manager")'
    )
    if configmap is None:
        return f"{source} is not there, {unproven}"
    data = configmap.get("data")
    text = data.get(key) if isinstance(data, Mapping) else None
    if not isinstance(text, str):
        return f"{source}: the ConfigMap has no key {key}, {unproven}"
    try:
        written, lost = worker_lost_timeout(text)
    except ValueError as exc:
        return f"{source} {exc}, {unproven}"
    if contact_seconds < lost:
        return None
    return (
        f"workerContactSeconds ({contact_seconds}s) is not below Kueue's multiKueue.workerLostTimeout ({written}, "
        f"{source}): a worker out of contact would still run its copies when Kueue may dispatch them elsewhere; "
        'lower workerContactSeconds or raise workerLostTimeout (docs/multicluster.md, "Contact with the manager")'
    )


def unreadable(where: str, key: str, contact_seconds: int, why: str) -> str:
    """Preflight's problem when Kueue's ConfigMap cannot be read (not when it is absent: ``contact_problem``)."""
    return (
        f"Kueue's configuration (ConfigMap {where}, key {key}) cannot be read: {why}; so workerContactSeconds "
        f"({contact_seconds}s) is not proven below its multiKueue.workerLostTimeout (the chart's "
        "multicluster.kueueConfig names where it is)"
    )
