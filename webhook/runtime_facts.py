"""What the creation rules read of a runtime copy, kept instead of the copy (webhook/kube.py keeps one per copy).

A TrainJob's creation rules (webhook/rules/creation.py) read three things of its runtime copy, and nothing
else: whether it exists, the runtime requirements' problems (contract/runtime_requirements.py, for the
site's ``allowRankRestart`` either way), and the name of its trainer replicated job (the runtime patch must
name it). ``RuntimeFacts`` is those answers, computed once from the copy as read, with the copy's uid: the
rules answer on it exactly as on the whole object, and a copy costs a few hundred bytes instead of its spec
(≈ 100 KB of Python objects for a 13 KB spec, docs/performance.md).

The answers depend only on the spec, and the copies of one source runtime have the same spec: the answers
are interned (``Requirements`` below), so copies of one source share one value. A rule that would raise
on the whole object (a spec no API server returns: the CRD's schema types it) raises the same exception
here, when a rule reads it, not while the watch stores it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from contract.errors import ContractError, Problem
from contract.multicluster import multikueue_problems
from contract.objects import dig
from contract.runtime_patch import trainer_replicated_job
from contract.runtime_requirements import runtime_problems

T = TypeVar("T")

_Outcome = tuple[Problem, ...] | BaseException


@dataclass(frozen=True, slots=True)
class Requirements:
    """The rules' answers on one spec: shared by every copy with that spec (interned)."""

    trainer: str | BaseException | None
    """The trainer replicated job's name; None when the spec has none (runtime_problems says why)."""
    strict: _Outcome
    """runtime_problems with ``allow_rank_restart=False``."""
    lenient: _Outcome
    """runtime_problems with ``allow_rank_restart=True``."""
    multikueue: _Outcome = ()
    """contract/multicluster.py ``multikueue_problems``: added for a TrainJob MultiKueue manages."""


@dataclass(frozen=True, slots=True)
class RuntimeFacts:
    """A runtime copy as the creation rules see it: its uid (the store's identity check) and the answers."""

    uid: str
    requirements: Requirements

    def trainer_job(self) -> str | None:
        """``trainer_replicated_job(spec)["name"]``, None where that raises ContractError."""
        return _result(self.requirements.trainer)

    def problems(self, *, allow_rank_restart: bool) -> list[Problem]:
        """``runtime_problems(spec or {}, allow_rank_restart=...)``."""
        r = self.requirements
        return list(_result(r.lenient if allow_rank_restart else r.strict))

    def multikueue_problems(self) -> list[Problem]:
        """``multikueue_problems(spec or {})``: what lets J pass maxRestarts in a MultiKueue queue."""
        return list(_result(self.requirements.multikueue))


def _result(outcome: T | BaseException) -> T:
    if isinstance(outcome, BaseException):
        raise outcome.with_traceback(None)
    return outcome


def _outcome(compute: Callable[[], T]) -> T | BaseException:
    try:
        return compute()
    except Exception as exc:  # re-raised where the rule reads it, as the rule on the whole object would
        return exc.with_traceback(None)


def _trainer(spec: object) -> str | None:
    try:
        return sys.intern(trainer_replicated_job(spec)["name"])
    except ContractError:
        return None


_INTERNED: Final[dict[str, Requirements]] = {}
"""repr -> the one value: repr, not equality, so that answers that print differently are never merged
(a denial quotes what it saw). Bounded by the distinct specs seen; a site has a handful of runtimes."""
MAX_INTERNED: Final = 10_000
"""Beyond this many distinct specs new answers are kept unshared (still exact, only not deduplicated)."""


def requirements_of(spec: object) -> Requirements:
    """The rules' answers on a runtime copy's ``spec`` (as read: ``dig(copy, "spec")``), interned."""
    value = Requirements(
        trainer=_outcome(lambda: _trainer(spec)),
        strict=_outcome(lambda: tuple(runtime_problems(spec or {}, allow_rank_restart=False))),  # type: ignore[arg-type]
        lenient=_outcome(lambda: tuple(runtime_problems(spec or {}, allow_rank_restart=True))),  # type: ignore[arg-type]
        multikueue=_outcome(lambda: tuple(multikueue_problems(spec or {}))),  # type: ignore[arg-type]
    )
    key = repr(value)
    found = _INTERNED.get(key)
    if found is not None:
        return found
    if len(_INTERNED) < MAX_INTERNED:
        _INTERNED[key] = value
    return value


def uid_of(runtime: Mapping[str, Any]) -> str:
    return str(dig(runtime, "metadata", "uid") or "")


def runtime_facts(runtime: Mapping[str, Any]) -> RuntimeFacts:
    """The facts of a runtime copy as read from the API (a LIST item, a watch event's object, a GET)."""
    return RuntimeFacts(uid_of(runtime), requirements_of(dig(runtime, "spec")))


def facts_or_none(runtime: Mapping[str, Any] | RuntimeFacts | None) -> RuntimeFacts | None:
    """What a rule reads: facts as they are, a whole object reduced to its facts."""
    if runtime is None or isinstance(runtime, RuntimeFacts):
        return runtime
    return runtime_facts(runtime)
