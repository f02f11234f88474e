"""The prologue's text, embedded from its one file, and the trainer command line that runs it."""

from __future__ import annotations

from importlib.resources import files
from typing import Final

from contract.keys import PROLOGUE_ARGV0, PROLOGUE_SHELL

PROLOGUE_FILE: Final = "dispatch-prologue.sh"
PROLOGUE: Final = files("prologue").joinpath(PROLOGUE_FILE).read_text(encoding="utf-8")
"""The shell text run by ``/bin/sh -c``; prologue/dispatch-prologue.sh is its only copy."""
SPEC_PROLOGUE: Final = files("prologue").joinpath("spec-prologue.sh").read_text(encoding="utf-8")
"""The spec's original text, verbatim: accepted by the webhook only where a site allows it, because it can
run nothing and succeed, or repeat or garble an epoch, in some shells (docs/prologue.md)."""


def prologue_argv(user_command: list[str]) -> list[str]:
    """The argv the container runs, before the kubelet's ``$(VAR)`` expansion: see contract.trainer."""
    return [PROLOGUE_SHELL, "-c", PROLOGUE, PROLOGUE_ARGV0, *user_command]
