"""The installed version of dispatch-k8s, for ``--version`` and ``dispatch_build_info``.

Standard library only: the command-line client's own distribution (``dispatch-k8s-cli``, clients/python) holds
this module without the metrics' library.
"""

from __future__ import annotations

from importlib import metadata
from typing import Final

DISTRIBUTIONS: Final = ("dispatch-k8s", "dispatch-k8s-cli")
"""The distributions that hold this module: the servers' package, then the command-line client's."""


def version() -> str:
    """The installed distribution's version (pyproject.toml), or "unknown" when run from a bare tree."""
    for name in DISTRIBUTIONS:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"
