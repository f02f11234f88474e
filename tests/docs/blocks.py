"""The blocks of the docs a reader copies: fenced blocks of README.md and docs/*.md, and the chart's NOTES.

A block's id is ``<file>:<line>`` (the line of its opening fence), so a failing test names where to look.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from tests.charts.helm import CHART, ROOT, run_helm

DOC_FILES = ("README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")))
NOTES = "charts/dispatch-k8s/templates/NOTES.txt"
YAML_LANGS = ("yaml", "yml")

_OPEN = re.compile(r"^(?P<indent> *)```(?P<lang>[A-Za-z0-9_+-]*)\s*$")
_HEADING = re.compile(r"^#{1,6} (?P<title>.+?)\s*$")


@dataclass(frozen=True)
class Block:
    path: str
    line: int
    lang: str
    text: str
    heading: str
    """The nearest heading above the block (the section a reader finds it in)."""
    lead: str = ""
    """The last line of prose before the block."""

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def fenced_blocks(path: str) -> list[Block]:
    """Every fenced block of a Markdown file, its lines dedented by its fence's indent (a block in a list)."""
    lines = (ROOT / path).read_text().splitlines()
    blocks: list[Block] = []
    heading, lead = "", ""
    i = 0
    while i < len(lines):
        line = lines[i]
        opened = _OPEN.match(line)
        if opened is None:
            if m := _HEADING.match(line):
                heading = m["title"]
            elif line.strip():
                lead = line.strip()
            i += 1
            continue
        indent = len(opened["indent"])
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        assert end < len(lines), f"{path}:{i + 1}: a fence that is never closed"
        body = [text[indent:] if text[:indent].strip() == "" else text for text in lines[i + 1 : end]]
        blocks.append(Block(path, i + 1, opened["lang"], "\n".join(body) + "\n", heading, lead))
        i = end + 1
    return blocks


def all_fenced_blocks() -> list[Block]:
    return [b for path in DOC_FILES for b in fenced_blocks(path)]


@cache
def rendered_notes(namespace: str = "dispatch-system") -> str:
    """The chart's NOTES as `helm install` prints them with the default values (client-side: no cluster)."""
    out = run_helm("install", "dispatch-k8s", str(CHART), "--dry-run=client", "--namespace", namespace).stdout
    assert "NOTES:" in out, out[-2000:]
    return out.split("NOTES:\n", 1)[1]


def notes_blocks() -> list[Block]:
    """The rendered NOTES' indented paragraphs (what a reader copies), each with the line that leads into it."""
    lines = rendered_notes().splitlines()
    blocks: list[Block] = []
    lead = ""
    i = 0
    while i < len(lines):
        if not lines[i].startswith("  "):
            if lines[i].strip():
                lead = lines[i].strip()
            i += 1
            continue
        start = i
        while i < len(lines) and lines[i].startswith("  "):
            i += 1
        text = "\n".join(line[2:] for line in lines[start:i]) + "\n"
        blocks.append(Block(f"{NOTES} (rendered)", start + 1, "", text, "NOTES", lead))
    return blocks
