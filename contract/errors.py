"""The one error the contract raises: it names the field, the value seen and what is accepted."""

from __future__ import annotations

from dataclasses import dataclass


class ContractError(ValueError):
    """A value breaks the dispatch contract.

    ``field`` is the name of what was wrong (``"JobID"``, ``"metadata.name"``, ``"N"``) so that an API
    answer or an admission denial can point at it; the message says what was seen and what would be
    accepted.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Problem:
    """One thing a rule found wrong: which rule, where, what it saw and what it would accept."""

    rule: str
    field: str
    seen: object
    accepted: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.field}: saw {self.seen!r}; {self.accepted}"
