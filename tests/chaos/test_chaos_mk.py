"""The MultiKueue arm's fault menu (chaos/mk_nemesis.py), drawn by the nemesis's pure plan."""

from __future__ import annotations

import itertools

import pytest

from chaos import mk_nemesis, nemesis

WORKERS = ["worker-1", "worker-2"]


def test_every_fault_targets_a_worker_and_is_healed():
    planned = nemesis.plan(7, 1800, WORKERS, list(mk_nemesis.ALL), kinds=mk_nemesis.KINDS)
    assert planned
    assert {p.target for p in planned} <= set(WORKERS)
    assert all(p.heal for p in planned)
    assert {p.fault for p in planned} == set(mk_nemesis.ALL)


def test_the_first_round_plays_every_fault_even_in_a_short_campaign():
    planned = nemesis.plan(1, 600, WORKERS, list(mk_nemesis.ALL), kinds=mk_nemesis.KINDS)
    assert {p.fault for p in planned} == set(mk_nemesis.ALL)


def test_the_plan_is_a_function_of_the_seed():
    plan = lambda seed: nemesis.plan(seed, 900, WORKERS, list(mk_nemesis.ALL), kinds=mk_nemesis.KINDS)  # noqa: E731
    assert plan(3) == plan(3)
    assert plan(3) != plan(4)


def test_one_fault_at_a_time():
    planned = nemesis.plan(11, 1800, WORKERS, list(mk_nemesis.ALL), kinds=mk_nemesis.KINDS)
    for before, after in itertools.pairwise(planned):
        assert after.at >= before.at + before.hold + mk_nemesis.KINDS[before.fault].settle


def test_an_unknown_fault_is_refused_by_name():
    with pytest.raises(ValueError, match=r"unknown faults \['etcd-pause'\]; the menu is \['kueue-cut'"):
        nemesis.plan(1, 60, WORKERS, ["etcd-pause"], kinds=mk_nemesis.KINDS)
