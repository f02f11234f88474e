"""Who holds tier C's kube-proxy tables: the sandbox takes the local path, saying whose run, while another has them."""

from __future__ import annotations

import fcntl
from pathlib import Path

from harness.service_network import lock_holder


def test_the_holders_pid_while_the_lock_is_held_and_none_once_free(tmp_path: Path) -> None:
    path = tmp_path / "kube-proxy.lock"
    assert lock_holder(path) is None  # never taken
    with path.open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242\n")
        held.flush()
        assert lock_holder(path) == "4242"
    assert lock_holder(path) is None  # released with its file
