"""How the CLI prints an answer: ``-o json`` (the API's JSON, as it was), ``-o yaml``, or ``-o table`` (and
``-o wide``) for a person at a terminal. Pure functions of the answer's JSON, so a new verb prints with no
code here:

* an answer with ``items`` (a list of objects) is one table, a row per item: with ``table`` only the
  ``columns`` given (if any) and never a column empty in every row, so it fits a terminal; ``wide`` has all;
* any other answer is a two-column table of its scalar fields (FIELD, VALUE), then one table per list of
  objects it holds (``PODS``, ``EXECUTIONS``), a row per element.

Headers are the JSON names in kubectl's style (``checkState`` -> ``CHECK-STATE``); an absent value is
``<none>``, a list of strings is comma-separated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import yaml

FORMATS: Final = ("json", "yaml", "table", "wide")
NONE: Final = "<none>"
GAP: Final = 3
"""Spaces between columns (kubectl's tabwriter pads with 3)."""


def render(answer: Mapping[str, Any], fmt: str, columns: Sequence[str] | None = None) -> str:
    """The text printed for ``answer`` (the API's JSON, camelCase keys), ending in a newline; ``columns``
    narrows a table of items (by JSON name) for ``table``."""
    if fmt == "json":
        return json.dumps(answer, indent=2) + "\n"
    if fmt == "yaml":
        return yaml.safe_dump(dict(answer), sort_keys=False, allow_unicode=True)
    if fmt == "table":
        return tables(answer, columns, narrow=True)
    if fmt == "wide":
        return tables(answer)
    raise ValueError(f"output format {fmt!r} is not one of {', '.join(FORMATS)}")


def tables(answer: Mapping[str, Any], columns: Sequence[str] | None = None, *, narrow: bool = False) -> str:
    items = answer.get("items")
    if isinstance(items, list) and all(isinstance(i, Mapping) for i in items):
        rest = {k: v for k, v in answer.items() if k != "items"}
        text = table(items, columns, narrow=narrow) if items else "No resources found.\n"
        return text + (_fields(rest) if any(v is not None for v in rest.values()) else "")
    out = [_fields(answer)]
    for key, value in answer.items():
        if _objects(value):
            out.append(f"\n{header(key)}\n" + table(value))
    return "".join(out)


def table(rows: Sequence[Mapping[str, Any]], only: Sequence[str] | None = None, *, narrow: bool = False) -> str:
    """Columns are the keys of the rows' scalar values, in first-seen order (``only`` those, when given);
    ``narrow`` leaves out a column with no value in any row."""
    columns: list[str] = []
    for row in rows:
        columns += [k for k, v in row.items() if k not in columns and not _objects(v)]
    if only:
        columns = [c for c in columns if c in only]
    if narrow:
        columns = [c for c in columns if any(cell(row.get(c)) != NONE for row in rows)]
    cells = [[header(c) for c in columns]] + [[cell(row.get(c)) for c in columns] for row in rows]
    return _aligned(cells)


def _fields(answer: Mapping[str, Any]) -> str:
    rows = [[header(k), cell(v)] for k, v in answer.items() if not _objects(v)]
    return _aligned([["FIELD", "VALUE"], *rows]) if rows else ""


def _aligned(cells: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lines = [(" " * GAP).join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines) + "\n"


def header(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", key).upper()


def cell(value: Any) -> str:
    if value is None or value == [] or value == {}:
        return NONE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(cell(v) for v in value)
    if isinstance(value, Mapping):
        return ",".join(f"{k}={cell(v)}" for k, v in value.items())
    # One line per cell: a message with newlines would break the columns.
    return " ".join(str(value).split())


def _objects(value: Any) -> bool:
    """A non-empty list of objects: shown as a table of its own, not as a cell."""
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)
