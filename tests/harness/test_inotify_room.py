"""The harness raises the kernel's inotify instances before it starts components that need many of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cluster import ensure_inotify_room


def test_a_low_limit_is_raised_and_a_high_one_left_alone(tmp_path: Path) -> None:
    setting = tmp_path / "max_user_instances"
    setting.write_text("128\n")
    ensure_inotify_room(1024, setting=setting)
    assert setting.read_text() == "1024"
    setting.write_text("8192\n")
    ensure_inotify_room(1024, setting=setting)
    assert setting.read_text() == "8192\n"


class _ReadOnly(type(Path())):  # type: ignore[misc]
    """A setting the kernel refuses to change, as procfs does for a process without root."""

    def write_text(self, *_: object, **__: object) -> int:
        raise PermissionError(13, "Permission denied", str(self))


def test_a_limit_that_cannot_be_raised_fails_a_real_node_naming_the_setting(tmp_path: Path) -> None:
    (tmp_path / "max_user_instances").write_text("128\n")
    setting = _ReadOnly(tmp_path / "max_user_instances")
    with pytest.raises(RuntimeError, match=r"fs\.inotify\.max_user_instances is 128; a real node needs at least 1024"):
        ensure_inotify_room(1024, required=True, setting=setting)
    ensure_inotify_room(1024, setting=setting)  # a control plane: best effort, no error
    assert setting.read_text() == "128\n"
