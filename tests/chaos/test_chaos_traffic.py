"""The traffic's bounce (chaos/traffic.py): every arm readmits jobs that ran, whatever chance does."""

from __future__ import annotations

import random
from collections.abc import Callable

from chaos.traffic import BOUNCES, HELD_SECONDS, Job, bounce_move

NOW = 1000.0


def job(name: str, **kw: object) -> Job:
    return Job("chaos-x", name, f"uid-{name}", "chaos-a", "chaos-low", "long", **kw)


def ran_only(*names: str) -> Callable[[Job], bool]:
    return lambda j: j.name in names


def test_a_job_that_ran_is_held_and_not_one_that_did_not() -> None:
    live = [job("a", opened=True), job("b", opened=True), job("c", opened=True)]
    for seed in range(10):
        assert bounce_move(live, NOW, done=0, ran=ran_only("b"), rng=random.Random(seed)) == ("hold", live[1])


def test_nothing_that_never_ran_nor_was_opened_nor_is_held_already_is_bounced() -> None:
    live = [job("a", opened=False), job("b", opened=True, held_since=NOW - 1), job("c", opened=True, bounced=True)]
    assert bounce_move(live, NOW, done=0, ran=lambda _j: True, rng=random.Random(1)) is None


def test_no_more_holds_once_the_bounces_are_done() -> None:
    live = [job("a", opened=True)]
    assert bounce_move(live, NOW, done=BOUNCES, ran=lambda _j: True, rng=random.Random(1)) is None
    assert bounce_move(live, NOW, done=BOUNCES - 1, ran=lambda _j: True, rng=random.Random(1)) == ("hold", live[0])


def test_a_bounced_job_is_released_only_after_held_seconds_and_before_any_new_hold() -> None:
    early = job("a", opened=True, bounced=True, held_since=NOW - HELD_SECONDS + 1)
    fresh = job("b", opened=True)
    assert bounce_move([early, fresh], NOW, done=1, ran=lambda _j: True, rng=random.Random(1)) == ("hold", fresh)
    due = job("a", opened=True, bounced=True, held_since=NOW - HELD_SECONDS - 1)
    assert bounce_move([fresh, due], NOW, done=BOUNCES, ran=lambda _j: True, rng=random.Random(1)) == ("release", due)


def test_a_hold_by_chance_on_a_job_not_bounced_is_not_released_by_the_bounce() -> None:
    held = job("a", opened=True, held_since=NOW - 100)
    assert bounce_move([held], NOW, done=BOUNCES, ran=lambda _j: True, rng=random.Random(1)) is None
