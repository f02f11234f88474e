"""What an earlier release wrote, this one reads (docs/contract.md, "What is stable across releases"): every name,
key and fixed value of contract/keys.py as the previous release (the commit its git tag names, docs/releases.md) had it is here
still, with the same value. A key may be added; one may not be renamed, dropped or given another value within a
major version."""

from __future__ import annotations

import subprocess
from typing import Any

from contract import keys
from tests.previous_release import PREVIOUS_TAG, ROOT, previous_commit


def _keys_at(tag: str) -> dict[str, Any]:
    source = subprocess.run(["git", "show", f"{tag}:contract/keys.py"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout  # fmt: skip
    scope: dict[str, Any] = {}
    exec(compile(source, f"{tag}:contract/keys.py", "exec"), scope)  # the module imports typing alone
    return {k: v for k, v in scope.items() if k.isupper() and not k.startswith("_")}


def test_every_key_of_the_previous_release_is_here_with_its_value():
    before = _keys_at(previous_commit())
    assert len(before) > 50, "the previous release's keys were not read"
    changed = {k: (v, getattr(keys, k, "<gone>")) for k, v in before.items() if getattr(keys, k, "<gone>") != v}
    assert not changed, f"renamed, dropped or changed since {PREVIOUS_TAG} (a major version's change): {changed}"
