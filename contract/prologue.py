"""The prologue's text, embedded from its one file; the ConfigMap that carries it to the pod; its command lines.

The text reaches the trainer container as a file, not as a word of ``spec.trainer.command``: Trainer copies
the command into the JobSet, every Job, every Pod and the Workload, so 6.6 kB of text in it would be in every
one of those objects, every watch event and every webhook call (docs/prologue.md). The file comes from a
ConfigMap in the TrainJob's namespace, named by the text's hash (``PROLOGUE_CONFIGMAP``), immutable, that
Start creates and the runtime patch mounts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from importlib.resources import files
from typing import Any, Final

from contract.keys import (
    PROLOGUE_ARGV0,
    PROLOGUE_CONFIGMAP_LABELS,
    PROLOGUE_CONFIGMAP_PREFIX,
    PROLOGUE_HASH_LENGTH,
    PROLOGUE_KEY,
    PROLOGUE_MOUNT_DIR,
    PROLOGUE_SHELL,
)

PROLOGUE_FILE: Final = "dispatch-prologue.sh"
PROLOGUE: Final = files("prologue").joinpath(PROLOGUE_FILE).read_text(encoding="utf-8")
"""The shell text the container runs as ``/bin/sh <file> <command...>``; prologue/dispatch-prologue.sh is its
only copy."""
SPEC_PROLOGUE: Final = files("prologue").joinpath("spec-prologue.sh").read_text(encoding="utf-8")
"""The spec's original text, verbatim: accepted by the webhook only where a site allows it, because it can
run nothing and succeed, or repeat or garble an epoch, in some shells (docs/prologue.md). It stays inline:
``/bin/sh -c <text> dispatch-prologue``."""

PROLOGUE_CONFIGMAP: Final = (
    PROLOGUE_CONFIGMAP_PREFIX + hashlib.sha256(PROLOGUE.encode("utf-8")).hexdigest()[:PROLOGUE_HASH_LENGTH]
)
"""The ConfigMap's name in every namespace: content-addressed, so a name always means one text."""
PROLOGUE_PATH: Final = f"{PROLOGUE_MOUNT_DIR}/{PROLOGUE_KEY}"
"""Where the trainer container finds the text: the ConfigMap's one key, mounted read-only."""


def prologue_argv(user_command: Sequence[str], path: str = PROLOGUE_PATH) -> list[str]:
    """The argv the container runs, before the kubelet's ``$(VAR)`` expansion: ``sh <file> <command...>``.
    The shell sets ``$@`` to the command exactly as ``sh -c <text> <argv0> <command...>`` would (the prologue
    never reads ``$0``, the one word that differs)."""
    return [PROLOGUE_SHELL, path, *user_command]


def inline_prologue_argv(user_command: Sequence[str], text: str = PROLOGUE) -> list[str]:
    """``sh -c <text> dispatch-prologue <command...>``: how the spec's text runs, and the prologue's other
    supported form (a site that runs it without the ConfigMap)."""
    return [PROLOGUE_SHELL, "-c", text, PROLOGUE_ARGV0, *user_command]


def prologue_configmap(namespace: str) -> dict[str, Any]:
    """The ConfigMap Start creates in ``namespace`` before the TrainJob, exactly as the webhook accepts it."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": PROLOGUE_CONFIGMAP, "namespace": namespace, "labels": dict(PROLOGUE_CONFIGMAP_LABELS)},
        "data": {PROLOGUE_KEY: PROLOGUE},
        "immutable": True,
    }


def configmap_differences(read: Mapping[str, Any]) -> list[str]:
    """What of a ConfigMap read under ``PROLOGUE_CONFIGMAP`` is not the prologue's; empty when it is exactly it.
    Labels are not compared: they name it for people, and the pod reads only its data."""
    problems = []
    data = read.get("data")
    if data != {PROLOGUE_KEY: PROLOGUE}:
        keys = sorted(data) if isinstance(data, Mapping) else data
        if isinstance(data, Mapping) and set(data) == {PROLOGUE_KEY}:
            problems.append(f"data[{PROLOGUE_KEY}] is not this version's prologue text")
        else:
            problems.append(f"data has keys {keys!r}, not exactly [{PROLOGUE_KEY!r}]")
    if read.get("binaryData"):
        problems.append(f"it has binaryData {sorted(read['binaryData'])!r}")
    if read.get("immutable") is not True:
        problems.append(f"immutable is {read.get('immutable')!r}, not true")
    return problems
