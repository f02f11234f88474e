import re

import pytest

from contract.errors import ContractError
from contract.names import TrainJobName, build_name, is_dispatch_name, parse_name, validate_job_id
from harness.fixtures import JOB_ID


def test_build_and_parse_round_trip():
    name = build_name(JOB_ID, 7)
    assert name == "dj-01arz3ndektsv4rrffq69g5fav-s7"
    assert parse_name(name) == TrainJobName(JOB_ID, 7)
    assert str(TrainJobName(JOB_ID, 7)) == name


def test_largest_name_is_37_characters():
    assert len(build_name(JOB_ID, 999_999)) == 37
    assert parse_name(build_name(JOB_ID, 999_999)).n == 999_999
    assert parse_name(build_name(JOB_ID, 0)).n == 0


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("dj-01ARZ3NDEKTSV4RRFFQ69G5FAV-s7", "upper case"),
        ("job-01arz3ndektsv4rrffq69g5fav-s7", "does not start with 'dj-'"),
        ("dj-01arz3ndektsv4rrffq69g5fav-s1000000", "38 characters; at most 37"),
        ("dj-01arz3ndektsv4rrffq69g5fav0000000-s7", "39 characters; at most 37"),
        ("dj-01arz3ndektsv4rrffq69g5fav7-s7", "is not a ULID"),
        ("dj-01arz3ndektsv4rrffq69g5fai-s7", "is not a ULID"),
        ("dj-01arz3ndektsv4rrffq69g5f-s7", "is not a ULID"),
        ("dj-81arz3ndektsv4rrffq69g5fav-s7", "is not a ULID"),
        ("dj-01arz3ndektsv4rrffq69g5fav-s07", "without leading zeros"),
        ("dj-01arz3ndektsv4rrffq69g5fav-s", "without leading zeros"),
        ("dj-01arz3ndektsv4rrffq69g5fav-s-1", "without leading zeros"),
        ("dj-01arz3ndektsv4rrffq69g5fav-s7\n", "without leading zeros"),
        ("dj-01arz3ndektsv4rrffq69g5fav", "no '-s<N>'"),
    ],
)
def test_parse_refuses_saying_what_is_wrong(name, says):
    with pytest.raises(ContractError, match=re.escape(says)) as err:
        parse_name(name)
    assert err.value.field == "metadata.name"
    assert says in str(err.value)
    assert not is_dispatch_name(name)


def test_parse_refuses_non_strings():
    with pytest.raises(ContractError, match="must be a string"):
        parse_name(None)
    assert not is_dispatch_name(42)


@pytest.mark.parametrize("n", [-1, 1_000_000, True, 1.0, "3"])
def test_build_refuses_n_out_of_range(n):
    with pytest.raises(ContractError) as err:
        build_name(JOB_ID, n)
    assert err.value.field == "N"


@pytest.mark.parametrize(
    ("job_id", "says"),
    [
        ("01arz3ndektsv4rrffq69g5fav", "canonical upper case; send '01ARZ3NDEKTSV4RRFFQ69G5FAV'"),
        ("01ARZ3NDEKTSV4RRFFQ69G5FA", "not a ULID"),
        ("not-a-ulid", "not a ULID"),
        (None, "must be a string"),
    ],
)
def test_job_id_must_be_a_canonical_ulid(job_id, says):
    with pytest.raises(ContractError) as err:
        validate_job_id(job_id)
    assert err.value.field == "JobID"
    assert says in str(err.value)
    with pytest.raises(ContractError):
        build_name(job_id, 1)


def test_validate_job_id_returns_it():
    assert validate_job_id(JOB_ID) == JOB_ID
