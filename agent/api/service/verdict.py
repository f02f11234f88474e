"""The Preflight verdict as recorded on the readmission controller's Lease, one annotation per mode: its text,
its reading, the Lease written with it; and what holds now from it and the heartbeat (``in_force``, and the
``refusal`` of a call that may let something run). Pure.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from agent.api.models import Capabilities
from agent.api.service.capabilities import mode_name, no_verdict, unproven
from agent.api.service.heartbeat import CONTROLLER_DOWN, Heartbeat
from contract.keys import ANNOTATION_PREFLIGHT_KUEUE, ANNOTATION_PREFLIGHT_PLAIN
from contract.objects import annotations, parse_rfc3339
from contract.upstream import LEASES


def verdict_key(kueue: bool) -> str:
    """The Lease annotation that holds a mode's verdict: a Preflight of one mode never touches the other's."""
    return ANNOTATION_PREFLIGHT_KUEUE if kueue else ANNOTATION_PREFLIGHT_PLAIN


def verdict_text(report: Capabilities, at: str) -> str:
    """The annotation's value: the report as the API answers it, and when it was made."""
    return json.dumps(
        {"at": at, "report": report.model_dump(mode="json", by_alias=True)}, separators=(",", ":"), sort_keys=True
    )


UNREADABLE_VERDICT: Final = "the Preflight verdict recorded on the Lease cannot be read"


def verdict_of(lease: Mapping[str, Any] | None, kueue: bool) -> Capabilities | None:
    """The mode's last Preflight report as recorded on the Lease; None when none is recorded. One that cannot
    be read (edited by someone) is observe-only, naming why: the gates are not proven by it."""
    text = annotations(lease).get(verdict_key(kueue))
    if text is None:
        return None
    try:
        report = Capabilities.model_validate(json.loads(text)["report"], by_alias=True)
    except (ValueError, TypeError, KeyError, ValidationError):
        return unproven(UNREADABLE_VERDICT, observe_only=True, kueue=kueue)
    return report if report.mode is not None else report.model_copy(update={"mode": mode_name(kueue)})


def latest_mode(lease: Mapping[str, Any] | None) -> bool | None:
    """The mode (True: Kueue) whose verdict was recorded last, for Capabilities; None before any. A verdict
    whose time cannot be read counts as the oldest."""
    recorded: list[tuple[dt.datetime, bool]] = []
    for kueue in (True, False):
        text = annotations(lease).get(verdict_key(kueue))
        if text is None:
            continue
        try:
            at = parse_rfc3339(json.loads(text).get("at"))
        except (ValueError, TypeError, AttributeError):
            at = None
        recorded.append((at or dt.datetime.min.replace(tzinfo=dt.UTC), kueue))
    return max(recorded)[1] if recorded else None


def lease_with_verdict(
    lease: Mapping[str, Any] | None, text: str, namespace: str, name: str, kueue: bool
) -> dict[str, Any]:
    """The Lease as read with the mode's verdict annotation set (resourceVersion kept: the PUT's precondition),
    or a new Lease that carries only the verdict (no holder: leader election takes it over as an expired one)."""
    key = verdict_key(kueue)
    if lease is None:
        return {
            "apiVersion": LEASES.api_version,
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace, "annotations": {key: text}},
            "spec": {},
        }
    meta = dict(lease.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), key: text}
    meta.pop("managedFields", None)
    return {"apiVersion": LEASES.api_version, "kind": "Lease", **dict(lease), "metadata": meta}


def in_force(verdict: Capabilities | None, beat: Heartbeat, *, kueue: bool, require_preflight: bool) -> Capabilities:
    """What holds now for the calls of one mode: its last Preflight's verdict (before any, what
    ``requirePreflight`` says), and in Kueue mode only while the readmission controller's Lease is renewed.
    A passing verdict does not outlive the controller: while its Lease is stale the mode is observe-only,
    and once it is renewed again the verdict holds again. Plain mode needs no readmission controller."""
    report = verdict or no_verdict(require_preflight, kueue)
    if not kueue or beat.alive:
        return report
    down = f"{CONTROLLER_DOWN}: {beat.reason}"
    trouble = [down] + ([report.observe_only_reason] if report.observe_only and report.observe_only_reason else [])
    return report.model_copy(
        update={
            "readmission_gate": False,
            "readmission_gate_reason": down,
            "lease_renewed": beat.renewed,
            "observe_only": True,
            "observe_only_reason": "; ".join(trouble),
        }
    )


def refusal(verdict: Capabilities | None, beat: Heartbeat, *, kueue: bool, require_preflight: bool) -> str | None:
    """Why a call that may let something run (Start, Open, Release) is refused in this mode, saying how each
    cause ends; None when it may go on."""
    parts = []
    if kueue and not beat.alive:
        parts.append(f"{CONTROLLER_DOWN} ({beat.reason}) until its leader renews the Lease")
    report = verdict or no_verdict(require_preflight, kueue)
    if report.observe_only:
        mode = "Kueue" if kueue else "plain"
        parts.append(
            f"until a {mode}-mode Preflight passes: {report.observe_only_reason or 'the gates are not proven'}"
        )
    if not parts:
        return None
    return f"observe-only in {'Kueue' if kueue else 'plain'} mode: " + "; ".join(parts)
