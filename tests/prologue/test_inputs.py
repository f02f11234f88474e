"""The prologue's inputs, valid and hostile, in every shell: a valid input gives the identity math's
values, a hostile one exits 125 with one line on stderr and runs nothing."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from contract import keys
from contract.identity import G_MAX, N_BOUND, R_BOUND
from tests.prologue.shells import (
    ENV_COMMAND,
    JOB_ID,
    SHELL_NAMES,
    assert_ran,
    assert_refused,
    expected,
    inputs,
    run,
)

pytestmark = pytest.mark.shells

ADMISSION = keys.ENV_K8S_ADMISSION
RESTART = keys.ENV_K8S_RESTART
EPOCH_PREFIX = keys.ENV_K8S_EPOCH_PREFIX
TOKEN_PREFIX = keys.ENV_K8S_TOKEN_PREFIX


@dataclass(frozen=True)
class Valid:
    id: str
    g: int
    n: int
    attempt: int
    a: int
    j: int
    job_id: str = JOB_ID


VALID_CASES = [
    Valid("first-execution", 1, 5, 0, 1, 0),
    Valid("G=N=0-epoch-is-R", 0, 0, 0, 1, 0),
    Valid("G=N=0-R-six-digits", 0, 0, 3, 999_998, 1),
    Valid("G=0-N=1", 0, 1, 0, 1, 0),
    Valid("G=0-N-max", 0, N_BOUND - 1, 2, 7, 35),
    Valid("G=1-N=0-prefix-1000000", 1, 0, 0, 2, 3),
    Valid("G-max-N-max-R-max", G_MAX, N_BOUND - 1, 9, 999_998, 1),
    Valid("R-max-from-J", 12, 34, 0, 1, R_BOUND - 2),
    Valid("R-max-from-A", 12, 34, 0, R_BOUND - 1, 0),
    Valid("J-digits-padding", 3, 7, 1, 10, 90),
    Valid("attempt-30-digits", 2, 2, 123456789012345678901234567890, 1, 0),
    Valid("smallest-ulid", 1, 1, 0, 1, 0, "00000000000000000000000000"),
    Valid("largest-ulid", 1, 1, 0, 1, 0, "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"),
]


@pytest.mark.parametrize("shell", SHELL_NAMES)
@pytest.mark.parametrize("case", VALID_CASES, ids=lambda c: c.id)
def test_valid_input_gives_the_identity_math(shell: str, case: Valid) -> None:
    values = (case.g, case.n, case.attempt, case.a, case.j, case.job_id)
    result = run(shell, ENV_COMMAND, inputs(*values))
    assert_ran(result, *expected(*values))


@dataclass(frozen=True)
class Hostile:
    id: str
    overrides: dict[str, str | None]
    names: tuple[str, ...]
    command: tuple[str, ...] = ENV_COMMAND
    code: int = 125


def count(name: str, value: str | None, id_: str) -> Hostile:
    return Hostile(f"{name.removeprefix('DISPATCH_K8S_')}-{id_}", {name: value}, (name,))


TWENTY_NINES = "9" * 20
HOSTILE_COUNTS = [
    ("unset", None),
    ("empty", ""),
    ("leading-zero-octal", "010"),
    ("leading-zero-invalid-octal", "08"),
    ("double-zero", "00"),
    ("negative", "-1"),
    ("negative-zero", "-0"),
    ("plus", "+1"),
    ("leading-space", " 1"),
    ("trailing-space", "1 "),
    ("trailing-newline", "1\n"),
    ("newline-inside", "1\n2"),
    ("exponent", "1e3"),
    ("hex", "0x10"),
    ("arithmetic", "1+1"),
    ("variable-name", "PATH"),
    ("command-substitution", "$(echo 1)"),
    ("fullwidth-digit", "\uff11"),
    ("arabic-indic-digit", "\u0663"),
    ("superscript-digit", "\u00b9"),
    ("invalid-utf8-byte", "1\udcff"),
    ("carriage-return", "1\r"),
    ("line-separator", "1\u2028"),
    ("escape-sequence", "\x1b[2J1"),
    ("glob", "[1]"),
    ("seven-digits", "1000000"),
    ("twenty-digits", TWENTY_NINES),
    ("two-to-the-63", str(2**63)),
    ("two-to-the-64-minus-1", str(2**64 - 1)),
    ("two-to-the-64", str(2**64)),
    ("long", "1" * 5000),
]

ULID_CHARS_REMOVED = "ILOU"
HOSTILE = [
    *(count(ADMISSION, v, i) for i, v in HOSTILE_COUNTS),
    *(count(RESTART, v, i) for i, v in HOSTILE_COUNTS),
    Hostile("A=0-never-admitted", {ADMISSION: "0"}, (ADMISSION,)),
    Hostile("A=0-J=1-would-repeat-R=1", {ADMISSION: "0", RESTART: "1"}, (ADMISSION,)),
    Hostile("R-bound-from-J", {ADMISSION: "1", RESTART: str(R_BOUND - 1)}, (ADMISSION, RESTART)),
    Hostile("R-bound-from-A", {ADMISSION: str(R_BOUND), RESTART: "0"}, (ADMISSION,)),
    Hostile("R-bound-both-six-digits", {ADMISSION: "999999", RESTART: "999999"}, (ADMISSION, RESTART)),
    Hostile("R-bound-half", {ADMISSION: "500000", RESTART: "500000"}, (ADMISSION, RESTART)),
    Hostile("A-20-digits-J-1-wraps-to-0", {ADMISSION: str(2**64 - 1), RESTART: "1"}, (ADMISSION,)),
    # DISPATCH_K8S_EPOCH_PREFIX: canonical decimal of G x 10^6 + N, empty for 0, at most 13 digits.
    Hostile("prefix-unset", {EPOCH_PREFIX: None}, (EPOCH_PREFIX,)),
    Hostile("prefix-zero-not-empty", {EPOCH_PREFIX: "0", TOKEN_PREFIX: f"{JOB_ID}.0.0"}, (EPOCH_PREFIX,)),
    Hostile("prefix-leading-zero", {EPOCH_PREFIX: "05"}, (EPOCH_PREFIX,)),
    Hostile("prefix-letters", {EPOCH_PREFIX: "a b"}, (EPOCH_PREFIX,)),
    Hostile("prefix-negative", {EPOCH_PREFIX: "-1000005"}, (EPOCH_PREFIX,)),
    Hostile("prefix-space", {EPOCH_PREFIX: "1000005 "}, (EPOCH_PREFIX,)),
    Hostile("prefix-newline", {EPOCH_PREFIX: "1000\n005"}, (EPOCH_PREFIX,)),
    Hostile("prefix-14-digits", {EPOCH_PREFIX: "10000000000005"}, (EPOCH_PREFIX,)),
    Hostile("prefix-20-digits", {EPOCH_PREFIX: TWENTY_NINES}, (EPOCH_PREFIX,)),
    Hostile("prefix-G-above-G_MAX", {EPOCH_PREFIX: f"{G_MAX + 1}000005"}, (EPOCH_PREFIX,)),
    Hostile("prefix-13-nines", {EPOCH_PREFIX: "9" * 13, TOKEN_PREFIX: f"{JOB_ID}.999999.0"}, (EPOCH_PREFIX,)),
    Hostile("prefix-fullwidth", {EPOCH_PREFIX: "1000005\uff10"}, (EPOCH_PREFIX,)),
    # DISPATCH_K8S_TOKEN_PREFIX: <JobID>.<N>.<attempt>.
    Hostile("token-unset", {TOKEN_PREFIX: None}, (TOKEN_PREFIX,)),
    Hostile("token-empty", {TOKEN_PREFIX: ""}, (TOKEN_PREFIX,)),
    Hostile("token-no-dots", {TOKEN_PREFIX: JOB_ID}, (TOKEN_PREFIX,)),
    Hostile("token-one-dot", {TOKEN_PREFIX: f"{JOB_ID}.5"}, (TOKEN_PREFIX,)),
    Hostile("token-three-dots", {TOKEN_PREFIX: f"{JOB_ID}.5.0.1"}, (TOKEN_PREFIX,)),
    Hostile("token-lowercase-ulid", {TOKEN_PREFIX: f"{JOB_ID.lower()}.5.0"}, (TOKEN_PREFIX,)),
    Hostile("token-ulid-overflows", {TOKEN_PREFIX: f"8{JOB_ID[1:]}.5.0"}, (TOKEN_PREFIX,)),
    *(
        Hostile(f"token-ulid-has-{c}", {TOKEN_PREFIX: f"{JOB_ID[:-1]}{c}.5.0"}, (TOKEN_PREFIX,))
        for c in ULID_CHARS_REMOVED
    ),
    Hostile("token-ulid-25-chars", {TOKEN_PREFIX: f"{JOB_ID[:-1]}.5.0"}, (TOKEN_PREFIX,)),
    Hostile("token-ulid-27-chars", {TOKEN_PREFIX: f"{JOB_ID}0.5.0"}, (TOKEN_PREFIX,)),
    Hostile("token-ulid-newline", {TOKEN_PREFIX: f"{JOB_ID[:13]}\n{JOB_ID[14:]}.5.0"}, (TOKEN_PREFIX,)),
    Hostile("token-empty-N", {TOKEN_PREFIX: f"{JOB_ID}..0"}, (TOKEN_PREFIX,)),
    Hostile("token-N-leading-zero", {TOKEN_PREFIX: f"{JOB_ID}.05.0"}, (TOKEN_PREFIX,)),
    Hostile("token-N-seven-digits", {TOKEN_PREFIX: f"{JOB_ID}.1000005.0"}, (TOKEN_PREFIX,)),
    Hostile("token-empty-attempt", {TOKEN_PREFIX: f"{JOB_ID}.5."}, (TOKEN_PREFIX,)),
    Hostile("token-attempt-leading-zero", {TOKEN_PREFIX: f"{JOB_ID}.5.00"}, (TOKEN_PREFIX,)),
    Hostile("token-attempt-negative", {TOKEN_PREFIX: f"{JOB_ID}.5.-1"}, (TOKEN_PREFIX,)),
    Hostile("token-N-differs-from-prefix", {TOKEN_PREFIX: f"{JOB_ID}.6.0"}, (TOKEN_PREFIX, EPOCH_PREFIX)),
    Hostile("token-N-nonzero-prefix-empty", {EPOCH_PREFIX: ""}, (TOKEN_PREFIX, EPOCH_PREFIX)),
    # The command.
    Hostile("no-command", {}, ("no command",), command=()),
    Hostile("empty-command", {}, ("empty",), command=("",)),
    Hostile("command-is-exec-option-a", {}, ("'-a'",), command=("-a", "x", "env")),
    Hostile("command-is-double-dash", {}, ("'--'",), command=("--", "env")),
    Hostile("command-not-found", {}, ("not found",), command=("dispatch-no-such-command",), code=127),
    Hostile("command-is-exit-builtin", {}, ("'exit'", "not found"), command=("exit", "0"), code=127),
    Hostile("command-is-colon-builtin", {}, ("':'", "not found"), command=(":",), code=127),
    Hostile("command-is-cd-builtin", {}, ("'cd'", "not found"), command=("cd", "/"), code=127),
    Hostile("command-path-missing", {}, ("does not exist",), command=("/nonexistent/cmd",), code=127),
    Hostile("command-path-directory", {}, ("not a file",), command=("/",), code=126),
]


@pytest.mark.parametrize("shell", SHELL_NAMES)
@pytest.mark.parametrize("case", HOSTILE, ids=lambda c: c.id)
def test_hostile_input_is_refused(shell: str, case: Hostile) -> None:
    result = run(shell, case.command, case.overrides)
    assert_refused(result, *case.names, code=case.code)


@pytest.mark.parametrize("shell", SHELL_NAMES)
def test_inherited_errexit_and_nounset_change_nothing(shell: str) -> None:
    """bash imports set -e/-u from SHELLOPTS in the image's environment: the prologue is written to
    give the same results with and without them."""
    assert_ran(run(shell, ENV_COMMAND, flags=("-e", "-u")), *expected(1, 5, 0, 1, 0))
    assert_ran(run(shell, ENV_COMMAND, inputs(0, 0, 0, 4, 2), flags=("-e", "-u")), *expected(0, 0, 0, 4, 2))
    for name in (ADMISSION, RESTART, EPOCH_PREFIX, TOKEN_PREFIX):
        assert_refused(run(shell, ENV_COMMAND, {name: None}, flags=("-e", "-u")), name)
    assert_refused(run(shell, (), flags=("-e", "-u")), "no command")


@pytest.mark.parametrize("shell", SHELL_NAMES)
@pytest.mark.parametrize("locale", ["C", "POSIX", "C.UTF-8"])
def test_the_locale_changes_nothing(shell: str, locale: str) -> None:
    """Digits and ULID characters are listed one by one, never as ranges, so no locale's collation
    can let another character in."""
    loc = {"LC_ALL": locale}
    assert_ran(run(shell, ENV_COMMAND, {**inputs(0, 0, 0, 12, 30), **loc}), *expected(0, 0, 0, 12, 30))
    for value in ("\uff11", "\u0663", "1\udcff", "\u00b9"):
        assert_refused(run(shell, ENV_COMMAND, {ADMISSION: value, **loc}), ADMISSION)
    assert_refused(run(shell, ENV_COMMAND, {TOKEN_PREFIX: f"{JOB_ID[:-1]}\uff21.5.0", **loc}), TOKEN_PREFIX)


@pytest.mark.parametrize("shell", SHELL_NAMES)
def test_a_refusal_quotes_only_short_plain_values(shell: str) -> None:
    """The one line shows a value when it is short and made of letters, digits, space and ./_:@%+=,~-;
    anything else (line breaks, escapes, quotes, non-ASCII) is described by its length instead."""
    shown = run(shell, ENV_COMMAND, {ADMISSION: "12 monkeys"})
    assert_refused(shown, ADMISSION)
    assert "'12 monkeys'" in shown.stderr
    for value in ("1\n2", "1\r2", "\x1b]0;x\x07", "\u0663", "'", "1" * 65):
        hidden = run(shell, ENV_COMMAND, {ADMISSION: value})
        assert_refused(hidden, ADMISSION)
        assert "not shown" in hidden.stderr
        assert value not in hidden.stderr
