"""The campaign's mutants (chaos/mutants.py): each one's substitutions still apply to the tree as it is, exactly
once, and change what they name; the mutated tree still compiles; a snippet gone or repeated refuses the mutant."""

from __future__ import annotations

import argparse
import py_compile
import re
from pathlib import Path

import pytest

from chaos import mk_env, mutants
from chaos.__main__ import arm_choice
from harness.binaries import REPO_ROOT
from webhook.rules.record_start import record_start_policy


@pytest.mark.parametrize("m", mutants.MUTANTS, ids=lambda m: m.name)
def test_every_snippet_occurs_exactly_once_in_the_tree(m: mutants.Mutant) -> None:
    for edit in m.edits:
        assert (REPO_ROOT / edit.file).read_text().count(edit.old) == 1, f"{m.name}: {edit.file}"


@pytest.mark.parametrize("m", mutants.MUTANTS, ids=lambda m: m.name)
def test_a_mutant_tree_differs_from_the_product_in_exactly_its_files_and_compiles(
    m: mutants.Mutant, tmp_path: Path
) -> None:
    tree = mutants.make_tree(m, tmp_path / "tree")
    edited = {e.file for e in m.edits}
    for package in mutants.PRODUCT:
        for path in (REPO_ROOT / package).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            rel = str(path.relative_to(REPO_ROOT))
            mutated = (tree / rel).read_text()
            assert (mutated != path.read_text()) == (rel in edited), rel
            if rel in edited:
                py_compile.compile(str(tree / rel), cfile=str(tmp_path / "c.pyc"), doraise=True)
    for edit in m.edits:
        assert edit.new in (tree / edit.file).read_text() or not edit.new


def test_a_snippet_gone_or_repeated_refuses_the_mutant() -> None:
    edit = mutants.Edit("f.py", "x = 1\n", "x = 2\n")
    assert mutants.substitute("a\nx = 1\n", edit) == "a\nx = 2\n"
    with pytest.raises(mutants.MutantError, match="0 times"):
        mutants.substitute("x = 3\n", edit)
    with pytest.raises(mutants.MutantError, match="2 times"):
        mutants.substitute("x = 1\nx = 1\n", edit)
    with pytest.raises(mutants.MutantError, match="changes nothing"):
        mutants.substitute("x = 1\n", mutants.Edit("f.py", "x = 1\n", "x = 1\n"))


def test_the_table_names_known_rules_choke_point_parts_and_dns_arm_names() -> None:
    assert len({m.name for m in mutants.MUTANTS}) == len(mutants.MUTANTS)
    for m in mutants.MUTANTS:
        assert m.rule in (1, 2, 3, 4, 5), m.name
        assert set(m.disarm) <= set(mutants.DISARMS), m.name
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", mutants.arm_name(m)), m.name
    assert {"no-raise", "no-wait", "holds-ignored", "open-not-awaited", "early-ceased"} <= set(mutants.RUNNABLE)
    assert set(mutants.ACROSS) == {"no-worker-look", "no-claim-check", "raise-by-one"}
    assert not set(mutants.RUNNABLE) & set(mutants.ACROSS)


def test_the_no_raise_mutant_renders_its_own_record_start(tmp_path: Path) -> None:
    # The CEL raise lives in the chart's MutatingAdmissionPolicy: the mutant's tree renders a different decision.
    tree = mutants.make_tree(mutants.mutant("no-raise"), tmp_path / "tree")
    (product,) = [d for d in record_start_policy("dispatch-system") if d["kind"] == "MutatingAdmissionPolicy"]
    mutated = mutants.rendered_record_start(tree, "dispatch-system")
    assert mutated["spec"]["variables"] != product["spec"]["variables"]
    assert mutated["spec"]["mutations"] == product["spec"]["mutations"]


def test_a_mutant_is_caught_by_any_rule_that_guards_its_mechanism() -> None:
    across = mutants.mutant("no-worker-look")
    assert across.rules == (3, 1, 2)
    assert mutants.caught({"1": 2}, across)
    assert not mutants.caught({"4": 1, "5": 1}, across)
    assert mutants.caught({"4": 1}, mutants.mutant("holds-ignored"))
    assert not mutants.caught({"1": 1}, mutants.mutant("holds-ignored"))


def test_the_command_line_takes_runnable_mutants_only() -> None:
    assert arm_choice("mutant:no-raise") == "mutant:no-raise"
    assert arm_choice("both") == "both"
    assert arm_choice("mutant:raise-by-one") == "mutant:raise-by-one"  # with --multicluster (main refuses it alone)
    for bad in ("mutant:nothing", "no-raise"):
        with pytest.raises(argparse.ArgumentTypeError):
            arm_choice(bad)


def test_the_multicluster_arms_agents_run_the_mutants_tree(tmp_path: Path) -> None:
    """The MultiKueue arm runs the agents from the mutant's tree (chaos/mk_env.py): its packages, not the
    installed ones, are what `python -m agent` imports there; an empty folder would import the installed ones."""
    tree = mutants.make_tree(mutants.mutant("raise-by-one"), tmp_path / "tree")
    mk_env.runs_from(tree)
    (tmp_path / "empty").mkdir()
    with pytest.raises(RuntimeError, match="not the tree's"):
        mk_env.runs_from(tmp_path / "empty")
