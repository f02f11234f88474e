"""Flags every command shares, with kubectl's names and meaning: ``--kubeconfig``, ``--context``,
``--version``."""

from __future__ import annotations

import argparse
import platform

from serving.prometheus import version

KUBECONFIG_HELP = "kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else the pod's ServiceAccount)"


def add_kube_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help=KUBECONFIG_HELP)
    parser.add_argument("--context", help="the kubeconfig context to use (default: its current context)")


def add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {version()} (Python {platform.python_version()})"
    )
