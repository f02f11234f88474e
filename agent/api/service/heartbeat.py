"""The readmission controller's heartbeat, from its Lease: judged over a watch by this agent's monotonic clock
(Preflight: ``lease_state``), or from one read plus this replica's sighting of the record (every call that may
let something run: ``heartbeat``). Pure.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from agent.runtime.leader import Record, record_of
from contract.objects import dig, parse_rfc3339


@dataclass(frozen=True)
class LeaseState:
    renewed: str | None
    fresh: bool
    reason: str
    settled: bool = True
    """False: not known yet; watch the Lease longer."""


def _renew_time(lease: Mapping[str, Any] | None) -> str | None:
    value = dig(lease, "spec", "renewTime")
    return value if isinstance(value, str) else None


def lease_state(
    first: Mapping[str, Any] | None, last: Mapping[str, Any] | None, watched: float, where: str
) -> LeaseState:
    """The readmission controller's heartbeat, judged as agent/runtime/leader.py judges expiry: by watching the
    Lease's record change over ``watched`` seconds of this agent's own monotonic clock, never by comparing
    the renewTime another machine wrote with this one's wall clock (clock skew would decide).

    Alive: the record (holder, renewTime, …) changed while watched and someone holds it. Dead: no Lease,
    a Lease released on shutdown (no holder), or one unchanged for its leaseDurationSeconds of watching.
    Otherwise not settled: watch longer."""
    if last is None:
        return LeaseState(None, False, f"the readmission controller's Lease {where} does not exist")
    renewed, record = _renew_time(last), record_of(last)
    if not record.holder:
        return LeaseState(
            renewed,
            False,
            f"the readmission controller is dead: its Lease {where} was released (it has no holder): the controller "
            "stopped",
        )
    if first is not None and record_of(first) != record:
        return LeaseState(renewed, True, f"the Lease {where} was renewed by {record.holder} while watched")
    if watched >= record.duration:
        return LeaseState(
            renewed,
            False,
            f"the readmission controller is dead: its Lease {where} was not renewed in {watched:.0f}s of watching, "
            f"its leaseDurationSeconds ({record.duration})",
        )
    return LeaseState(renewed, False, f"the Lease {where} has not changed yet", settled=False)


def not_watched(lease: Mapping[str, Any] | None) -> LeaseState:
    """Plain mode needs no readmission controller: its Lease is reported, not judged."""
    return LeaseState(_renew_time(lease), False, "not watched: plain mode needs no readmission controller")


@dataclass(frozen=True)
class Sighting:
    """The Lease's record as this replica last read it, and since when (its own monotonic clock) it has
    read that same record."""

    record: Record
    since: float


def sighted(previous: Sighting | None, lease: Mapping[str, Any] | None, clock: float) -> Sighting | None:
    """The sighting after one more read of the Lease at ``clock``: kept while the record is unchanged."""
    if lease is None:
        return None
    record = record_of(lease)
    if previous is not None and previous.record == record:
        return previous
    return Sighting(record, clock)


@dataclass(frozen=True)
class Heartbeat:
    alive: bool
    reason: str
    renewed: str | None


CONTROLLER_DOWN: Final = "the readmission controller is down"


def heartbeat(
    lease: Mapping[str, Any] | None, sighting: Sighting | None, *, now: dt.datetime, clock: float, where: str
) -> Heartbeat:
    """Is the readmission controller running, from one read of its Lease (it runs in the agent's leader)?
    Alive while the leader renews the Lease within its leaseDurationSeconds: someone holds it, its renewTime
    plus the duration lies ahead of ``now``, and this replica has not read the very same record for a whole
    duration of its own monotonic ``clock`` (``sighting``). The last catches a renewTime written by a clock
    that runs ahead, which ``now`` alone would call fresh: it expires after one duration of watching."""
    if lease is None:
        return Heartbeat(False, f"its Lease {where} does not exist", None)
    record = record_of(lease)
    if not record.holder:
        return Heartbeat(False, f"its Lease {where} was released (it has no holder)", record.renew_time)
    renewed = parse_rfc3339(record.renew_time)
    if renewed is None:
        return Heartbeat(False, f"its Lease {where} has no readable renewTime", record.renew_time)
    age = (now - renewed).total_seconds()
    if age >= record.duration:
        return Heartbeat(
            False,
            f"its Lease {where} was last renewed at {record.renew_time}, {age:.0f}s ago, longer than its "
            f"leaseDurationSeconds ({record.duration})",
            record.renew_time,
        )
    if sighting is not None and sighting.record == record and clock - sighting.since >= record.duration:
        return Heartbeat(
            False,
            f"its Lease {where} has not been renewed in {clock - sighting.since:.0f}s of watching, longer than its "
            f"leaseDurationSeconds ({record.duration})",
            record.renew_time,
        )
    return Heartbeat(
        True, f"the Lease {where} is held by {record.holder}, renewed at {record.renew_time}", record.renew_time
    )
