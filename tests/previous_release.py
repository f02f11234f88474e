"""The previous release (docs/releases.md): its git tag, which the upgrade test builds from and the contract's
stability test reads, fetched from the clone's origin when a shallow or tagless clone lacks it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
PREVIOUS_TAG: Final = "v0.1.0"
PREVIOUS_VERSION: Final = PREVIOUS_TAG.removeprefix("v")


def previous_tag() -> str:
    """``PREVIOUS_TAG``, present in this checkout (fetched from ``origin`` if it is not); AssertionError naming the
    fix when it cannot be had."""
    have = ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{PREVIOUS_TAG}^{{commit}}"]
    if subprocess.run(have, capture_output=True, check=False).returncode == 0:
        return PREVIOUS_TAG
    fetch = ["git", "-C", str(ROOT), "fetch", "--quiet", "origin", "tag", PREVIOUS_TAG]
    fetched = subprocess.run(fetch, capture_output=True, text=True, check=False)
    assert fetched.returncode == 0, f"the tag {PREVIOUS_TAG} is not here and not on origin: {fetched.stderr.strip()}"
    return PREVIOUS_TAG
