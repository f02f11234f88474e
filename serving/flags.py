"""Flags every command shares, with the names and meaning Kubernetes components give them: ``--kubeconfig``,
``--context``, ``--version``, ``--shutdown-delay-duration``."""

from __future__ import annotations

import argparse
import platform
import re
from typing import Final

from serving.version import version

_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?)(ns|us|µs|ms|s|m|h)")
_GO_UNITS: Final = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}

KUBECONFIG_HELP = "kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else the pod's ServiceAccount)"


def add_kube_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help=KUBECONFIG_HELP)
    parser.add_argument("--context", help="the kubeconfig context to use (default: its current context)")


def add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {version()} (Python {platform.python_version()})"
    )


def add_shutdown_delay(parser: argparse.ArgumentParser, serving: str) -> None:
    """kube-apiserver's flag: after SIGTERM, not ready but still serving, so the Service drops the pod first."""
    parser.add_argument(
        "--shutdown-delay-duration",
        type=duration,
        default=0.0,
        metavar="DURATION",
        help=f"after SIGTERM, report not ready and keep serving {serving} this long, each answer closing its "
        "connection, so the Service drops this pod before its listener goes (default 0s)",
    )


def duration(text: str) -> float:
    """An argparse type: seconds in a Go duration."""
    seconds = parse_duration(text)
    if seconds is None:
        raise argparse.ArgumentTypeError(f"not a duration like 5s or 1m30s: {text!r}")
    return seconds


def parse_duration(text: str) -> float | None:
    """Seconds in a Go duration ("5s", "1m30s", "250ms"), or None when it is not one."""
    if not re.fullmatch(f"(?:{_GO_DURATION.pattern})+", text):
        return None
    return sum(float(n) * _GO_UNITS[unit] for n, unit in _GO_DURATION.findall(text))
