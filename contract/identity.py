"""The execution identity: R = A + J, DISPATCH_EPOCH and DISPATCH_ATTEMPT.

    DISPATCH_EPOCH   = G x 10^12 + N x 10^6 + R
    DISPATCH_ATTEMPT = <JobID>.<N>.<attempt>.<A>.<J>

The prologue cannot do 64-bit arithmetic in every shell, so it builds the epoch by concatenation:
``DISPATCH_K8S_EPOCH_PREFIX`` followed by R as six digits. For that to equal the arithmetic value the
prefix is the canonical decimal of ``G x 10^6 + N``, and when that is 0 (G = 0 and N = 0) the prefix is
empty and the epoch is R itself, with no leading zeros. See docs/prologue.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from contract.errors import ContractError
from contract.keys import ENV_K8S_EPOCH_PREFIX, ENV_K8S_TOKEN_PREFIX
from contract.names import validate_job_id

R_BOUND: Final = 1_000_000
"""R must stay below this; at the bound the prologue refuses to run."""
N_BOUND: Final = 1_000_000
"""N must stay below this (six digits in the epoch and in the TrainJob name)."""
INT64_MAX: Final = 2**63 - 1
G_MAX: Final = (INT64_MAX - (R_BOUND * R_BOUND - 1)) // (R_BOUND * R_BOUND)
"""The largest G whose epochs all fit in a signed 64-bit integer (9,223,371)."""
A_MIN: Final = 1
"""A = 0 means a pod that no gate ever admitted (see docs/prologue.md); no execution may have it."""


def _count(field: str, value: object, *, low: int, high: int | None = None) -> int:
    # bool is an int in Python; a True where a count belongs is a caller's bug, not the number 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ContractError(field, f"must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise ContractError(field, f"must be {bound}, got {value}")
    return value


def check_g(g: object) -> int:
    return _count("G", g, low=0, high=G_MAX)


def check_n(n: object) -> int:
    return _count("N", n, low=0, high=N_BOUND - 1)


def check_attempt(attempt: object) -> int:
    return _count("attempt", attempt, low=0)


def r_of(a: int, j: int) -> int:
    """R = A + J, refused at the bound and for an A that no gate raised."""
    _count("A", a, low=A_MIN)
    _count("J", j, low=0)
    r = a + j
    if r >= R_BOUND:
        raise ContractError("R", f"A + J = {r} reached the epoch bound {R_BOUND}")
    return r


def epoch(g: int, n: int, r: int) -> int:
    """DISPATCH_EPOCH = G x 10^12 + N x 10^6 + R."""
    check_g(g)
    check_n(n)
    _count("R", r, low=1, high=R_BOUND - 1)
    return g * 10**12 + n * 10**6 + r


def epoch_prefix(g: int, n: int) -> str:
    """DISPATCH_K8S_EPOCH_PREFIX: canonical decimal of G x 10^6 + N, or "" when both are 0."""
    value = check_g(g) * 10**6 + check_n(n)
    return str(value) if value else ""


def token_prefix(job_id: str, n: int, attempt: int) -> str:
    """DISPATCH_K8S_TOKEN_PREFIX: ``<JobID>.<N>.<attempt>``."""
    return f"{validate_job_id(job_id)}.{check_n(n)}.{check_attempt(attempt)}"


_CANONICAL = re.compile(r"0|[1-9][0-9]*")


def _decimal(field: str, text: object) -> int:
    if not isinstance(text, str) or not _CANONICAL.fullmatch(text):
        raise ContractError(field, f"{text!r} is not a decimal number without leading zeros")
    return int(text)


def parse_prefixes(epoch_prefix: object, token_prefix: object) -> tuple[str, int, int, int]:
    """(JobID, G, N, attempt) read back from the prologue's two prefixes, which must agree on N."""
    value = 0 if epoch_prefix == "" else _decimal(ENV_K8S_EPOCH_PREFIX, epoch_prefix)
    g, n = divmod(value, N_BOUND)
    check_g(g)
    parts = token_prefix.split(".") if isinstance(token_prefix, str) else []
    if len(parts) != 3:
        raise ContractError(ENV_K8S_TOKEN_PREFIX, f"{token_prefix!r} is not <JobID>.<N>.<attempt>")
    job_id = validate_job_id(parts[0])
    if _decimal(ENV_K8S_TOKEN_PREFIX, parts[1]) != n:
        raise ContractError(ENV_K8S_TOKEN_PREFIX, f"N {parts[1]} is not the epoch prefix's N {n}")
    return job_id, g, n, _decimal(ENV_K8S_TOKEN_PREFIX, parts[2])


def attempt_token(job_id: str, n: int, attempt: int, a: int, j: int) -> str:
    """DISPATCH_ATTEMPT = ``<JobID>.<N>.<attempt>.<A>.<J>``."""
    r_of(a, j)
    return f"{token_prefix(job_id, n, attempt)}.{a}.{j}"


@dataclass(frozen=True)
class Execution:
    """One execution of a submission, as its code sees it."""

    job_id: str
    g: int
    n: int
    attempt: int
    a: int
    j: int

    @property
    def r(self) -> int:
        return r_of(self.a, self.j)

    @property
    def epoch(self) -> int:
        return epoch(self.g, self.n, self.r)

    @property
    def token(self) -> str:
        return attempt_token(self.job_id, self.n, self.attempt, self.a, self.j)
