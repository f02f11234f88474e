"""Test references for what the kubelet and the API server do to what we write.

``expand`` is a line-by-line port of k8s.io/kubernetes third_party/forked/golang/expansion (Expand and
tryReadVariableName), which the kubelet applies to a container's command, args and env values.
``apply_json_patch`` is the part of RFC 6902 the contract's patches use (add, replace, test, remove).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def _read_variable_name(text: str) -> tuple[str, bool, int]:
    if text[0] == "$":
        return "$", False, 1
    if text[0] == "(":
        for i in range(1, len(text)):
            if text[i] == ")":
                return text[1:i], True, i + 1
        return "$(", False, 1
    return "$" + text[0], False, 1


def expand(text: str, env: Mapping[str, str]) -> str:
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            read, is_var, advance = _read_variable_name(text[cursor + 1 :])
            out.append(env.get(read, f"$({read})") if is_var else read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


class PatchTestFailed(Exception):
    pass


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _parent(doc: Any, path: str) -> tuple[Any, str | int]:
    tokens = [_unescape(t) for t in path.split("/")[1:]]
    node = doc
    for t in tokens[:-1]:
        node = node[int(t)] if isinstance(node, list) else node[t]
    last = tokens[-1]
    return node, (int(last) if isinstance(node, list) else last)


def apply_json_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    doc = copy.deepcopy(doc)
    for op in ops:
        parent, key = _parent(doc, op["path"])
        if op["op"] == "test":
            if parent[key] != op["value"]:
                raise PatchTestFailed(op["path"])
        elif op["op"] == "add":
            if isinstance(parent, list):
                parent.insert(key, copy.deepcopy(op["value"]))
            else:
                parent[key] = copy.deepcopy(op["value"])
        elif op["op"] == "replace":
            if isinstance(parent, dict) and key not in parent:
                raise KeyError(op["path"])
            parent[key] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del parent[key]
        else:
            raise ValueError(op["op"])
    return doc
