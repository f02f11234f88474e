"""The previous release (docs/releases.md): its git tag and the commit the tag names, which the upgrade test builds
from and the contract's stability test reads. A clone made without tags (as CI makes) still has the commit in its
history; a shallow one fetches it from ``origin``."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
PREVIOUS_TAG: Final = "v0.1.0"
PREVIOUS_COMMIT: Final = "e6628ef3dbcc0226a7186dcd5e88a0de8c9098e9"
PREVIOUS_VERSION: Final = PREVIOUS_TAG.removeprefix("v")


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)


def _resolves(ref: str) -> str | None:
    found = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    return found.stdout.strip() if found.returncode == 0 else None


def previous_commit() -> str:
    """``PREVIOUS_COMMIT``, present in this checkout (fetched from ``origin`` if a shallow clone lacks it). Where the
    tag is here too it must name that commit: a moved tag is an AssertionError, never a silent other tree."""
    tagged = _resolves(PREVIOUS_TAG)
    assert tagged in (None, PREVIOUS_COMMIT), f"the tag {PREVIOUS_TAG} names {tagged}, not {PREVIOUS_COMMIT}"
    if _resolves(PREVIOUS_COMMIT):
        return PREVIOUS_COMMIT
    tried = []
    for fetch in (["fetch", "--quiet", "origin", PREVIOUS_COMMIT], ["fetch", "--quiet", "--unshallow", "origin"]):
        tried.append(_git(*fetch).stderr.strip())
        if _resolves(PREVIOUS_COMMIT):
            return PREVIOUS_COMMIT
    raise AssertionError(f"{PREVIOUS_TAG}'s commit {PREVIOUS_COMMIT} is not here and not on origin: {tried}")
