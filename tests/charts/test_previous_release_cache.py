"""The previous release's artifacts, built once per machine (tests/previous_release.py ``cached_release``): taken
only when whole and unchanged, rebuilt otherwise, and a failed build leaves nothing behind."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.previous_release import cached_release, complete, release_cache


def fake_release(out: Path) -> None:
    """What scripts/release leaves: its files, then SHA256SUMS of them."""
    files = {"dispatch-k8s-0.1.0.tgz": b"chart", "dispatch-k8s-image-0.1.0.oci.tar": b"image"}
    for name, data in files.items():
        (out / name).write_bytes(data)
    sums = "".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in files.items())
    (out / "SHA256SUMS").write_text(sums)


def test_a_release_is_complete_only_whole_and_unchanged(tmp_path: Path) -> None:
    assert not complete(tmp_path)  # no SHA256SUMS: an interrupted build
    fake_release(tmp_path)
    assert complete(tmp_path)
    (tmp_path / "stray").write_text("x")
    assert not complete(tmp_path), "a file SHA256SUMS does not list"
    (tmp_path / "stray").unlink()
    (tmp_path / "dispatch-k8s-0.1.0.tgz").write_bytes(b"changed")
    assert not complete(tmp_path), "a file changed since it was summed"


def test_the_release_is_built_once_and_then_taken_from_the_cache(tmp_path: Path) -> None:
    builds: list[Path] = []

    def build(out: Path) -> None:
        builds.append(out)
        fake_release(out)

    cache = tmp_path / "releases" / "0.1.0-e6628ef3dbcc"
    assert cached_release(build, cache) == (cache, True)
    assert cached_release(build, cache) == (cache, False)
    assert len(builds) == 1
    assert complete(cache)
    assert sorted(p.name for p in cache.parent.iterdir()) == [cache.name], "no build folder left beside it"

    (cache / "dispatch-k8s-image-0.1.0.oci.tar").write_bytes(b"truncated")
    assert cached_release(build, cache) == (cache, True), "an incomplete cache is built again"
    assert complete(cache)
    assert len(builds) == 2


def test_a_failed_build_leaves_no_cache(tmp_path: Path) -> None:
    def build(out: Path) -> None:
        (out / "half").write_text("x")
        raise AssertionError("scripts/release exited 1")

    cache = tmp_path / "releases" / "0.1.0-e6628ef3dbcc"
    with pytest.raises(AssertionError, match="exited 1"):
        cached_release(build, cache)
    assert list(cache.parent.iterdir()) == []


def test_the_cache_is_under_dispatch_k8s_cache_by_version_and_commit(tmp_path: Path) -> None:
    assert release_cache({"DISPATCH_K8S_CACHE": str(tmp_path)}) == tmp_path / "releases" / "0.1.0-e6628ef3dbcc"
    assert release_cache({}).parent == Path.home() / ".cache" / "dispatch-k8s" / "releases"
