import pytest
from hypothesis import given
from hypothesis import strategies as st

from contract.errors import ContractError
from contract.identity import (
    G_MAX,
    INT64_MAX,
    N_BOUND,
    R_BOUND,
    Execution,
    attempt_token,
    epoch,
    epoch_prefix,
    parse_prefixes,
    r_of,
    token_prefix,
)
from harness.fixtures import JOB_ID


def concatenated(g: int, n: int, r: int) -> str:
    """What the prologue computes: the prefix, then R in six digits; R alone when the prefix is empty."""
    prefix = epoch_prefix(g, n)
    return f"{prefix}{r:06d}" if prefix else str(r)


def test_epoch_formula():
    assert epoch(2, 3, 4) == 2 * 10**12 + 3 * 10**6 + 4
    assert epoch(0, 0, 1) == 1


@pytest.mark.parametrize(
    ("g", "n", "prefix"),
    [(0, 0, ""), (0, 5, "5"), (1, 0, "1000000"), (1, 5, "1000005"), (G_MAX, N_BOUND - 1, "9223371999999")],
)
def test_epoch_prefix_is_canonical(g, n, prefix):
    assert epoch_prefix(g, n) == prefix


@given(
    g=st.integers(0, G_MAX),
    n=st.integers(0, N_BOUND - 1),
    r=st.integers(1, R_BOUND - 1),
)
def test_concatenation_equals_arithmetic(g, n, r):
    text = concatenated(g, n, r)
    assert text == str(epoch(g, n, r))  # canonical: no leading zeros, equal value
    assert int(text) <= INT64_MAX


def test_largest_epoch_fits_int64_and_next_g_does_not():
    assert epoch(G_MAX, N_BOUND - 1, R_BOUND - 1) <= INT64_MAX
    assert (G_MAX + 1) * 10**12 + (N_BOUND - 1) * 10**6 + R_BOUND - 1 > INT64_MAX


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((-1, 0, 1), "G"),
        ((G_MAX + 1, 0, 1), "G"),
        ((0, -1, 1), "N"),
        ((0, N_BOUND, 1), "N"),
        ((0, 0, 0), "R"),
        ((0, 0, R_BOUND), "R"),
        ((0, 0, True), "R"),
        (("1", 0, 1), "G"),
    ],
)
def test_epoch_bounds(args, field):
    with pytest.raises(ContractError) as err:
        epoch(*args)
    assert err.value.field == field


def test_r_is_a_plus_j_and_refuses_at_the_bound():
    assert r_of(1, 0) == 1
    assert r_of(3, 4) == 7
    assert r_of(R_BOUND - 1, 0) == R_BOUND - 1
    with pytest.raises(ContractError, match="reached the epoch bound 1000000"):
        r_of(R_BOUND - 1, 1)


def test_a_zero_is_refused():
    # A = 0 is a pod no gate admitted; with J = 1 it would repeat the R of A = 1, J = 0.
    with pytest.raises(ContractError) as err:
        r_of(0, 1)
    assert err.value.field == "A"
    with pytest.raises(ContractError):
        r_of(1, -1)


def test_attempt_token_and_prefix():
    assert token_prefix(JOB_ID, 3, 2) == f"{JOB_ID}.3.2"
    assert attempt_token(JOB_ID, 3, 2, 5, 1) == f"{JOB_ID}.3.2.5.1"
    with pytest.raises(ContractError) as err:
        token_prefix(JOB_ID, 3, -1)
    assert err.value.field == "attempt"
    with pytest.raises(ContractError):
        attempt_token(JOB_ID, 3, 2, 0, 0)
    with pytest.raises(ContractError):
        token_prefix(JOB_ID.lower(), 3, 2)


def test_execution_reads_as_its_code_sees_it():
    ex = Execution(job_id=JOB_ID, g=0, n=4, attempt=1, a=2, j=3)
    assert ex.r == 5
    assert ex.epoch == 4_000_005
    assert ex.token == f"{JOB_ID}.4.1.2.3"


@given(a1=st.integers(1, 1000), j1=st.integers(0, 1000), da=st.integers(0, 5), dj=st.integers(0, 5))
def test_raising_either_counter_raises_the_epoch(a1, j1, da, dj):
    if da == dj == 0:
        return
    assert epoch(0, 1, r_of(a1 + da, j1 + dj)) > epoch(0, 1, r_of(a1, j1))


@pytest.mark.parametrize(("g", "n", "attempt"), [(0, 0, 0), (0, 7, 1), (3, 0, 2), (G_MAX, N_BOUND - 1, 10**9)])
def test_prefixes_read_back(g, n, attempt):
    assert parse_prefixes(epoch_prefix(g, n), token_prefix(JOB_ID, n, attempt)) == (JOB_ID, g, n, attempt)


@pytest.mark.parametrize(
    ("epoch", "token", "field", "says"),
    [
        ("07", f"{JOB_ID}.7.1", "DISPATCH_K8S_EPOCH_PREFIX", "leading zeros"),
        (None, f"{JOB_ID}.0.1", "DISPATCH_K8S_EPOCH_PREFIX", "leading zeros"),
        ("9999999000000", f"{JOB_ID}.0.1", "G", "must be from 0 to 9223371"),
        ("7", f"{JOB_ID}.7", "DISPATCH_K8S_TOKEN_PREFIX", "is not <JobID>.<N>.<attempt>"),
        ("7", f"{JOB_ID}.8.1", "DISPATCH_K8S_TOKEN_PREFIX", "not the epoch prefix's N 7"),
        ("7", f"{JOB_ID}.7.01", "DISPATCH_K8S_TOKEN_PREFIX", "leading zeros"),
        ("7", "nope.7.1", "JobID", "not a ULID"),
    ],
)
def test_prefixes_refused(epoch, token, field, says):
    with pytest.raises(ContractError) as err:
        parse_prefixes(epoch, token)
    assert err.value.field == field
    assert says in err.value.message
