"""What an earlier release wrote, this one reads (docs/contract.md, "What is stable across releases"): every name,
key and fixed value of contract/keys.py as the previous release (the git tag in docs/releases.md) had it is here
still, with the same value. A key may be added; one may not be renamed, dropped or given another value within a
major version."""

from __future__ import annotations

import subprocess
from typing import Any

from contract import keys
from tests.charts.helm import ROOT

PREVIOUS_TAG = "v0.1.0"
"""The previous release; tests/charts/test_upgrade_from_previous_release.py upgrades from the same one."""


def _keys_at(tag: str) -> dict[str, Any]:
    source = subprocess.run(["git", "show", f"{tag}:contract/keys.py"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout  # fmt: skip
    scope: dict[str, Any] = {}
    exec(compile(source, f"{tag}:contract/keys.py", "exec"), scope)  # the module imports typing alone
    return {k: v for k, v in scope.items() if k.isupper() and not k.startswith("_")}


def test_every_key_of_the_previous_release_is_here_with_its_value():
    before = _keys_at(PREVIOUS_TAG)
    assert len(before) > 50, "the previous release's keys were not read"
    changed = {k: (v, getattr(keys, k, "<gone>")) for k, v in before.items() if getattr(keys, k, "<gone>") != v}
    assert not changed, f"renamed, dropped or changed since {PREVIOUS_TAG} (a major version's change): {changed}"


def test_the_previous_tag_is_the_one_the_upgrade_test_starts_from():
    from tests.charts.test_upgrade_from_previous_release import PREVIOUS_TAG as upgraded_from

    assert upgraded_from == PREVIOUS_TAG
