"""The previous release (docs/releases.md): its git tag and the commit the tag names, which the upgrade test builds
from and the contract's stability test reads. A clone made without tags (as CI makes) still has the commit in its
history; a shallow one fetches it from ``origin``."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from harness.binaries import cache_root

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


def release_cache(environ: Mapping[str, str] = os.environ) -> Path:
    """Where the previous release's artifacts are kept once built: ``DISPATCH_K8S_CACHE`` (default
    ~/.cache/dispatch-k8s), ``releases/VERSION-COMMIT``."""
    return cache_root(environ).parent / "releases" / f"{PREVIOUS_VERSION}-{PREVIOUS_COMMIT[:12]}"


def complete(folder: Path) -> bool:
    """The folder holds a release whose every file its SHA256SUMS lists, unchanged (what scripts/release writes
    last, so an interrupted build is never taken)."""
    sums = folder / "SHA256SUMS"
    if not sums.is_file():
        return False
    listed = {line.split(maxsplit=1)[1].strip() for line in sums.read_text().splitlines() if line.strip()}
    checked = subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=folder, capture_output=True, check=False)
    return checked.returncode == 0 and {p.name for p in folder.iterdir()} == listed | {"SHA256SUMS"}


def cached_release(build: Callable[[Path], None], cache: Path) -> tuple[Path, bool]:
    """The previous release's artifacts from ``cache``, built there by ``build(folder)`` when they are not (or not
    whole); and whether they were built now. A published release's artifacts never change and its tree is pinned
    by commit, so one build per machine is the release a user upgrades from."""
    if complete(cache):
        return cache, False
    cache.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{cache.name}-", dir=cache.parent))
    try:
        build(building)
        assert complete(building), f"the previous release built into {building} does not check against its SHA256SUMS"
        shutil.rmtree(cache, ignore_errors=True)  # an incomplete one
        building.rename(cache)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return cache, True
