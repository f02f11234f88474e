"""Writing certificate files: the served directory that the servers' ReloadingServerContext watches, and
plain files for ``dispatch-certs generate``.

The served directory is written the way the kubelet writes a Secret volume (its AtomicWriter): the files
go into a fresh hidden directory, a ``..data`` symlink is swapped to it with one rename, and ``tls.crt``,
``tls.key`` and ``ca.crt`` are symlinks through ``..data``. A reader therefore sees the old set or the new
set, never a certificate from one and a key from the other, and ReloadingServerContext (which compares
bytes, not mtimes) works the same on this directory and on a mounted Secret.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Final

DATA_LINK: Final = "..data"
PRIVATE_SUFFIX: Final = ".key"


def _mode(name: str) -> int:
    return 0o600 if name.endswith(PRIVATE_SUFFIX) else 0o644


def write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file + rename) with 0600 for keys, 0644 otherwise; the
    mode is set before any byte is written, so a key is never readable by others, even for a moment."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _mode(path.name))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_served(directory: Path, names: Mapping[str, bytes] | list[str]) -> dict[str, bytes] | None:
    """The current contents of the named files in a served directory, or None if any is missing."""
    out = {}
    for name in names:
        try:
            out[name] = (directory / name).read_bytes()
        except OSError:
            return None
    return out


def write_served(directory: Path, files: Mapping[str, bytes]) -> bool:
    """Make ``directory`` serve exactly ``files``; False (and nothing written) when it already does."""
    directory.mkdir(parents=True, exist_ok=True)
    if read_served(directory, list(files)) == dict(files):
        return False
    fresh = directory / f"..{secrets.token_hex(6)}"
    fresh.mkdir(mode=0o755)
    for name, data in files.items():
        write_file(fresh / name, data)
    link = directory / DATA_LINK
    try:
        old = link.resolve(strict=True) if link.is_symlink() else None
    except OSError:
        old = None
    tmp_link = directory / f"..data_tmp.{secrets.token_hex(4)}"
    tmp_link.symlink_to(fresh.name)
    os.replace(tmp_link, link)  # the one atomic step: readers switch from the old set to the new
    for name in files:
        path = directory / name
        if not path.is_symlink():
            path.unlink(missing_ok=True)
            path.symlink_to(f"{DATA_LINK}/{name}")
    if old is not None and old.parent == directory.resolve() and old.name != fresh.name:
        shutil.rmtree(old, ignore_errors=True)
    return True


def write_plain(directory: Path, files: Mapping[str, bytes]) -> list[Path]:
    """Plain files (for ``dispatch-certs generate``), keys 0600; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in files.items():
        path = directory / name
        write_file(path, data)
        paths.append(path)
    return paths
