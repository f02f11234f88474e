"""Property: for random G, N, attempt, A >= 1, J with A + J < 10^6 and a random JobID, every shell's
DISPATCH_EPOCH and DISPATCH_ATTEMPT equal contract.identity's."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ulid import ULID

from contract.identity import A_MIN, G_MAX, N_BOUND, R_BOUND
from tests.prologue.shells import ENV_COMMAND, SHELL_NAMES, assert_ran, expected, inputs, require, run

pytestmark = pytest.mark.shells

EXAMPLES_PER_SHELL = 60

job_ids = st.binary(min_size=16, max_size=16).map(lambda b: str(ULID.from_bytes(b)))
# Zero and the bounds are where concatenation and arithmetic part ways; weight them in.
gs = st.one_of(st.just(0), st.just(G_MAX), st.integers(0, G_MAX))
ns = st.one_of(st.just(0), st.just(N_BOUND - 1), st.integers(0, N_BOUND - 1))
attempts = st.one_of(st.integers(0, 9), st.integers(0, 2**64))


@st.composite
def counts(draw: st.DrawFn) -> tuple[int, int]:
    a = draw(st.one_of(st.just(A_MIN), st.just(R_BOUND - 1), st.integers(A_MIN, R_BOUND - 1)))
    j = draw(st.one_of(st.just(0), st.just(R_BOUND - 1 - a), st.integers(0, R_BOUND - 1 - a)))
    return a, j


@pytest.mark.parametrize("shell", SHELL_NAMES)
def test_prologue_matches_the_identity_math(shell: str) -> None:
    require(shell)

    @settings(
        max_examples=EXAMPLES_PER_SHELL,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        database=None,
    )
    @given(g=gs, n=ns, attempt=attempts, a_j=counts(), job_id=job_ids)
    def check(g: int, n: int, attempt: int, a_j: tuple[int, int], job_id: str) -> None:
        values = (g, n, attempt, *a_j, job_id)
        assert_ran(run(shell, ENV_COMMAND, inputs(*values)), *expected(*values))

    check()
