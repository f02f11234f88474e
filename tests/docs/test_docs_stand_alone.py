"""The docs stand alone: a reader who has only the repository can follow every reference they make.

Checked mechanically: no pointer to an issue tracker, to research notes or to "the spec" a reader cannot open;
the glossary defines every word of the contract once; the contract page lists every contract module.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "dispatch-k8s"
DOCS = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        CHART / "README.md",
        CHART / "values.yaml",
        CHART / "templates" / "NOTES.txt",
    ]
)

# What a reader cannot open. "the JobSet's spec" and a Pod's `spec` are Kubernetes words and stay.
UNREACHABLE = {
    "an issue": re.compile(r"\bissues? ?#?\d+|\bitems? \d+ of issue", re.IGNORECASE),
    "research notes": re.compile(r"\bnotes ?§|\bnotes:|shared/notes|§\d"),
    "a folder outside the repository": re.compile(r"\.\.[/]shared|\bshared/(seeds|notes|crds)\b|\bseeds/"),
    "the spec": re.compile(r"\b[Tt]he spec\b(?! while)|\b[Tt]he spec's\b|\bspec's (tables|words|original)"),
}


def _lines(path: Path) -> list[tuple[int, str]]:
    return list(enumerate(path.read_text().splitlines(), start=1))


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_docs_refer_to_nothing_a_reader_cannot_open(path: Path) -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {what}: {line.strip()[:120]}"
        for n, line in _lines(path)
        for what, pattern in UNREACHABLE.items()
        if pattern.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_unreachable_patterns_catch_what_they_name() -> None:
    # A pattern that matches nothing would pass every doc: each must catch its own example.
    examples = {
        "an issue": "as issue 10 item 4 says",
        "research notes": "(notes §2.6, l.557)",
        "a folder outside the repository": "see " + ".." + "/shared/seeds/000",
        "the spec": "the spec's original prologue text",
    }
    for what, text in examples.items():
        assert UNREACHABLE[what].search(text), what
    assert not UNREACHABLE["the spec"].search("Trainer (it applies the JobSet's spec while suspended)")


GLOSSARY_WORDS = (
    "A",
    "J",
    "R",
    "floor",
    "gate",
    "runtime copy",
    "foreign",
    "Ceased",
    "observe-only",
    "adapter",
    "opened",
    "hold",
    "orphan",
    "G",
    "N",
)


def test_the_glossary_defines_each_word_of_the_contract_once() -> None:
    terms = [
        m.group(1)
        for _, line in _lines(ROOT / "docs" / "glossary.md")
        if (m := re.match(r"^\| \*\*(.+?)\*\* \|", line))
    ]
    defined = {t.strip("`") for term in terms for t in re.split(r" / ", term)}
    missing = [w for w in GLOSSARY_WORDS if w not in defined]
    assert not missing, f"docs/glossary.md lacks {missing}"
    assert len(terms) == len(set(terms)), "a word is defined twice in docs/glossary.md"


def test_the_readme_links_the_glossary() -> None:
    assert "docs/glossary.md" in (ROOT / "README.md").read_text()


def test_the_contract_page_lists_every_contract_module() -> None:
    table = {
        m.group(1) for _, line in _lines(ROOT / "docs" / "contract.md") if (m := re.match(r"^\| `(\w+)` \|", line))
    }
    modules = {p.stem for p in (ROOT / "contract").glob("*.py") if p.stem != "__init__"}
    assert modules == table, f"docs/contract.md's table: missing {modules - table}, stale {table - modules}"
