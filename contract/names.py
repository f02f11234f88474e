"""TrainJob names: ``dj-<lowercase JobID>-s<N>``, at most 37 characters, and the JobID, a ULID."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from ulid import ULID

from contract.errors import ContractError
from contract.keys import TRAINJOB_NAME_MAX, TRAINJOB_NAME_PREFIX

_N_BOUND: Final = 1_000_000  # the same bound as identity.N_BOUND; names.py cannot import identity
_SHAPE = re.compile(r"dj-(?P<job>[^-]*)-s(?P<n>.*)", re.DOTALL)
_CANONICAL_N = re.compile(r"0|[1-9][0-9]*")


def validate_job_id(job_id: object) -> str:
    """A JobID is a ULID in its canonical form: 26 characters of Crockford base32, upper case."""
    if not isinstance(job_id, str):
        raise ContractError("JobID", f"must be a string, got {job_id!r}")
    try:
        canonical = str(ULID.from_str(job_id))
    except ValueError as exc:
        raise ContractError("JobID", f"{job_id!r} is not a ULID: {exc}") from None
    if canonical != job_id:
        raise ContractError("JobID", f"{job_id!r} is not in canonical upper case; send {canonical!r}")
    return job_id


@dataclass(frozen=True)
class TrainJobName:
    job_id: str
    n: int

    def __str__(self) -> str:
        return build_name(self.job_id, self.n)


def build_name(job_id: str, n: int) -> str:
    """``dj-<lowercase JobID>-s<N>`` for a canonical JobID and 0 <= N < 1,000,000."""
    validate_job_id(job_id)
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < _N_BOUND:
        raise ContractError("N", f"must be an integer from 0 to {_N_BOUND - 1}, got {n!r}")
    return f"{TRAINJOB_NAME_PREFIX}{job_id.lower()}-s{n}"


def parse_name(name: object) -> TrainJobName:
    """The JobID and N of a dispatch TrainJob name; anything else is refused, saying why."""
    if not isinstance(name, str):
        raise ContractError("metadata.name", f"must be a string, got {name!r}")
    shape = f"a dispatch TrainJob name is {TRAINJOB_NAME_PREFIX}<lowercase JobID>-s<N>"
    if not name.startswith(TRAINJOB_NAME_PREFIX):
        raise ContractError("metadata.name", f"{name!r} does not start with {TRAINJOB_NAME_PREFIX!r}; {shape}")
    if name != name.lower():
        raise ContractError("metadata.name", f"{name!r} has upper case; {shape}")
    if len(name) > TRAINJOB_NAME_MAX:
        raise ContractError(
            "metadata.name",
            f"{name!r} is {len(name)} characters; at most {TRAINJOB_NAME_MAX} (N below 1,000,000)",
        )
    match = _SHAPE.fullmatch(name)
    if match is None:
        raise ContractError("metadata.name", f"{name!r} has no '-s<N>' after the JobID; {shape}")
    job, n_text = match["job"], match["n"]
    try:
        ULID.from_str(job)
    except ValueError as exc:
        raise ContractError("metadata.name", f"{job!r} in {name!r} is not a ULID: {exc}") from None
    if not _CANONICAL_N.fullmatch(n_text):
        raise ContractError("metadata.name", f"N {n_text!r} in {name!r} is not a decimal number without leading zeros")
    # Six digits at most follow from the length: N < 1,000,000 needs no check of its own here.
    n = int(n_text)
    return TrainJobName(job_id=job.upper(), n=n)


def is_dispatch_name(name: object) -> bool:
    try:
        parse_name(name)
    except ContractError:
        return False
    return True
