"""The canonical ``spec.trainer``: the prologue command, the user's words in ``args``, the env contract.

Decisions (docs/contract.md):

* ``command`` is exactly ``[/bin/sh, <the prologue's file>]`` (the file is the prologue's ConfigMap, mounted by
  the runtime patch: contract.prologue) and the user's command and arguments all sit in ``args``. The
  container runs ``command + args``, so the argv is ``/bin/sh <file> <your command...>``, in which the
  prologue's ``$@`` is the user's command exactly as in the spec's ``/bin/sh -c <prologue> dispatch-prologue
  <your command...>``; and because ``args`` is always set, a runtime's own ``args`` for the ``node``
  container can never be appended to the user's command.
* The kubelet expands ``$(VAR)`` and turns ``$$`` into ``$`` in command, args and env values. Every
  ``$`` we write there is doubled, so what runs is the prologue and the user's words as given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from contract.errors import ContractError
from contract.identity import check_n, epoch_prefix, parse_prefixes, token_prefix
from contract.keys import (
    ANNOTATION_ADMISSION,
    ENV_JOB_ID,
    ENV_K8S_ADMISSION,
    ENV_K8S_EPOCH_PREFIX,
    ENV_K8S_RESTART,
    ENV_K8S_TOKEN_PREFIX,
    ENV_K8S_WORKDIR,
    ENV_RESERVED_PREFIX,
    ENV_SUBMISSION,
    LABEL_RESTART_ATTEMPT,
    PROLOGUE_SHELL,
)
from contract.prologue import PROLOGUE_PATH

ARGS_MAX: Final = 128
"""Trainer's CRD allows at most 128 items in ``spec.trainer.args``."""


def escape_expansion(text: str) -> str:
    """What to write so that the kubelet's ``$(VAR)`` expansion yields ``text`` unchanged."""
    return text.replace("$", "$$")


def _word(field: str, value: object) -> str:
    if not isinstance(value, str):
        raise ContractError(field, f"must be a string, got {value!r}")
    if "\x00" in value:
        raise ContractError(field, "contains a NUL byte, which no process argument or variable can hold")
    return value


def trainer_command() -> list[str]:
    """``/bin/sh <the prologue's file>``: the text itself stays out of every object Trainer copies the command to."""
    return [PROLOGUE_SHELL, escape_expansion(PROLOGUE_PATH)]


def trainer_args(command: Sequence[str], args: Sequence[str]) -> list[str]:
    """The user's command and arguments, in ``args``, escaped for the kubelet."""
    if isinstance(command, str) or isinstance(args, str):
        raise ContractError("command", "command and args are lists of words, not strings")
    if not command:
        raise ContractError("command", "is empty; the prologue must have a command to exec")
    words = [_word(f"command[{i}]", w) for i, w in enumerate(command)]
    if not words[0] or words[0].startswith("-"):
        # The prologue refuses these at run time (exec would take "-x" as its own option); refuse them here.
        raise ContractError("command[0]", f"{words[0]!r}: the program to run, neither empty nor starting with '-'")
    words += [_word(f"args[{i}]", w) for i, w in enumerate(args)]
    if len(words) > ARGS_MAX:
        raise ContractError("args", f"command and args have {len(words)} words; Trainer allows {ARGS_MAX}")
    return [escape_expansion(w) for w in words]


def check_env_name(name: object) -> str:
    """A user's variable name: printable ASCII without '=', and never under DISPATCH_."""
    if not isinstance(name, str) or not name:
        raise ContractError("env", f"variable name {name!r} must be a non-empty string")
    if any(not " " <= c <= "~" for c in name) or "=" in name:
        raise ContractError(f"env.{name}", "a variable name is printable ASCII without '='")
    if name.startswith(ENV_RESERVED_PREFIX):
        raise ContractError(f"env.{name}", f"keys starting with {ENV_RESERVED_PREFIX} are reserved for dispatch")
    return name


def _value(name: str, value: str) -> dict[str, Any]:
    # The API drops an empty "value"; building it the same way keeps read-back comparisons exact.
    return {"name": name, "value": escape_expansion(value)} if value else {"name": name}


def _downward(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": field_path}}}


def trainer_env(
    *, job_id: str, g: int, n: int, attempt: int, env: Mapping[str, str], workdir: str | None
) -> list[dict[str, Any]]:
    """The user's env sorted by key, then the DISPATCH_* entries in a fixed order."""
    if not isinstance(env, Mapping):
        raise ContractError("env", f"must be a mapping of names to values, got {type(env).__name__}")
    user = [_value(check_env_name(k), _word(f"env.{k}", env[k])) for k in sorted(env)]
    ours = [
        _value(ENV_JOB_ID, job_id),
        _value(ENV_SUBMISSION, str(check_n(n))),
        _value(ENV_K8S_EPOCH_PREFIX, epoch_prefix(g, n)),
        _value(ENV_K8S_TOKEN_PREFIX, token_prefix(job_id, n, attempt)),
        _downward(ENV_K8S_ADMISSION, f"metadata.annotations['{ANNOTATION_ADMISSION}']"),
        _downward(ENV_K8S_RESTART, f"metadata.labels['{LABEL_RESTART_ATTEMPT}']"),
    ]
    if workdir is not None:
        if not _word("WorkDir", workdir):
            raise ContractError("WorkDir", "is empty; leave it unset to run in the image's directory")
        ours.append(_value(ENV_K8S_WORKDIR, workdir))
    return user + ours


def prefixes_from_env(env: object) -> tuple[str, int, int, int]:
    """(JobID, G, N, attempt) from a TrainJob's ``spec.trainer.env``, as the contract wrote it."""
    entries = env if isinstance(env, list) else []
    values = {e.get("name"): e.get("value", "") for e in entries if isinstance(e, Mapping)}
    if ENV_K8S_EPOCH_PREFIX not in values or ENV_K8S_TOKEN_PREFIX not in values:
        raise ContractError("spec.trainer.env", f"has no {ENV_K8S_EPOCH_PREFIX} and {ENV_K8S_TOKEN_PREFIX}")
    return parse_prefixes(values[ENV_K8S_EPOCH_PREFIX], values[ENV_K8S_TOKEN_PREFIX])


def trainer_spec(
    *,
    job_id: str,
    g: int,
    n: int,
    attempt: int,
    image: str,
    command: Sequence[str],
    args: Sequence[str],
    env: Mapping[str, str],
    workdir: str | None,
) -> dict[str, Any]:
    if not isinstance(image, str) or not image.strip() or image != image.strip():
        raise ContractError("image", f"must be a non-empty image reference, got {image!r}")
    return {
        "image": image,
        "command": trainer_command(),
        "args": trainer_args(command, args),
        "env": trainer_env(job_id=job_id, g=g, n=n, attempt=attempt, env=env, workdir=workdir),
    }
