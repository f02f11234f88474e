"""scripts/chaos's command line: every line docs/reliability.md shows parses as written, durations read as
people write them, and what the campaign refuses it refuses before it starts anything."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from chaos import __main__ as cli
from chaos import mk_nemesis, nemesis

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


def _documented() -> list[list[str]]:
    lines = re.findall(r"^scripts/chaos\b(.*?)(?:\s+#.*)?$", DOC.read_text(), flags=re.M)
    return [shlex.split(line) for line in lines]


def test_every_documented_command_line_parses():
    lines = _documented()
    assert len(lines) >= 3
    for argv in lines:
        args = cli.parser().parse_args(argv)
        faults = [f for f in args.faults.split(",") if f]
        menu = mk_nemesis.ALL if args.multicluster else nemesis.ALL
        assert set(faults) <= set(menu), argv


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("10m", 600), ("1h", 3600), ("45", 45), ("2.5m", 150)])
def test_durations(text, seconds):
    assert cli.duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10 minutes", "m", "-5s", "1d"])
def test_a_duration_that_is_not_one_is_refused_naming_it(text):
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(repr(text))):
        cli.duration(text)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--seed", "1", "--duration", "1m", "--nodes", "1"], "--nodes must be at least 2"),
        (["--seed", "1", "--duration", "1m", "--faults", "kubelet-kill,moon-landing"], "moon-landing"),
    ],
)
def test_what_cannot_run_is_refused_before_anything_starts(argv, said):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli.main(argv) == 2
    assert said in err.getvalue()
