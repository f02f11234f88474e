"""The prologue stays clean under ``shellcheck -s sh``: the file, and the text embedded from it."""

from __future__ import annotations

import re
import subprocess
from importlib.resources import files

import pytest

from contract.prologue import PROLOGUE, PROLOGUE_FILE
from tests.prologue.shells import TIMEOUT, require_tool

pytestmark = pytest.mark.shells


def test_the_embedded_text_is_the_file() -> None:
    assert files("prologue").joinpath(PROLOGUE_FILE).read_text(encoding="utf-8") == PROLOGUE


def test_shellcheck_posix_sh_is_clean() -> None:
    shellcheck = require_tool("shellcheck", "shellcheck")
    path = files("prologue").joinpath(PROLOGUE_FILE)
    for args, stdin in (([str(path)], None), (["-"], PROLOGUE)):
        result = subprocess.run(
            [shellcheck, "--shell=sh", "--severity=style", "--norc", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=TIMEOUT * 3,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_the_prologue_is_plain_ascii_with_unix_line_ends() -> None:
    assert PROLOGUE.isascii()
    assert "\r" not in PROLOGUE
    assert "\t" not in PROLOGUE
    assert PROLOGUE.endswith('exec "$@"\n')


def test_the_prologue_never_reads_dollar_zero() -> None:
    """``$0`` is the one word that differs between ``sh <file> <command...>`` (every pod: the file's path) and
    ``sh -c <text> dispatch-prologue <command...>``; ``$@`` is the command either way."""
    code = [line.split("#", 1)[0] if line.lstrip().startswith("#") else line for line in PROLOGUE.splitlines()]
    assert not [line for line in code if re.search(r"\$\{?0", line)]
    assert re.search(r"\$\{?0", "echo ${0}")  # the pattern finds both spellings
    assert re.search(r"\$\{?0", "echo $0")
