"""RFC 6902 JSON Patch as the API server applies it (the part the agent sends), and small object helpers."""

from __future__ import annotations

import copy
from typing import Any


class PatchTestFailed(Exception):
    """A ``test`` op did not match: the API server answers 422."""


class PatchInvalid(Exception):
    """A path that does not resolve: the API server answers 422 too."""


def _tokens(path: str) -> list[str]:
    return [t.replace("~1", "/").replace("~0", "~") for t in path.split("/")[1:]]


def _resolve(doc: Any, path: str) -> tuple[Any, str]:
    tokens = _tokens(path)
    node = doc
    try:
        for t in tokens[:-1]:
            node = node[int(t)] if isinstance(node, list) else node[t]
    except (KeyError, IndexError, ValueError, TypeError):
        raise PatchInvalid(path) from None
    return node, tokens[-1]


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    doc = copy.deepcopy(doc)
    for op in ops:
        parent, key = _resolve(doc, op["path"])
        kind = op["op"]
        try:
            if isinstance(parent, list):
                index = len(parent) if key == "-" else int(key)
                if kind == "add":
                    parent.insert(index, copy.deepcopy(op["value"]))
                elif kind == "remove":
                    del parent[index]
                elif kind == "replace":
                    parent[index] = copy.deepcopy(op["value"])
                elif kind == "test" and parent[index] != op["value"]:
                    raise PatchTestFailed(op["path"])
            else:
                if kind in ("remove", "replace", "test") and key not in parent:
                    raise PatchInvalid(op["path"])
                if kind in ("add", "replace"):
                    parent[key] = copy.deepcopy(op["value"])
                elif kind == "remove":
                    del parent[key]
                elif kind == "test" and parent[key] != op["value"]:
                    raise PatchTestFailed(op["path"])
        except (IndexError, ValueError, TypeError):
            raise PatchInvalid(op["path"]) from None
    return doc
