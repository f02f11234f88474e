"""serving/kubeconfig.py: the context's namespace, read with PyYAML alone, is the one of the context whose
credentials kubernetes_asyncio's loader takes (serving/kube.py), however the files of $KUBECONFIG merge."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from kubernetes_asyncio import config

from serving.kubeconfig import context_namespace


def _write(path: Path, contexts: dict[str, str | None], current: str | None) -> str:
    doc: dict = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                 "users": [{"name": "u", "user": {"token": "t"}}],
                 "contexts": [{"name": n, "context": {"cluster": "c", "user": "u", **({"namespace": ns} if ns else {})}}
                              for n, ns in contexts.items()]}  # fmt: skip
    if current is not None:
        doc["current-context"] = current
    path.write_text(json.dumps(doc))
    return str(path)


def _library(files: str, context: str | None) -> str | None:
    """What the namespace was when kubernetes_asyncio's loader read it (serving.kube before serving.kubeconfig)."""
    contexts, current = config.list_kube_config_contexts(files)
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
    return ((chosen or {}).get("context") or {}).get("namespace")


@pytest.mark.parametrize("context", [None, "a", "b", "c", "missing"])
def test_merged_files_answer_as_kubernetes_asyncios_loader(tmp_path: Path, context: str | None, monkeypatch):
    first = _write(tmp_path / "one", {"a": "from-one", "b": None}, current="a")
    second = _write(tmp_path / "two", {"a": "from-two", "c": "c-ns"}, current="c")
    files = os.pathsep.join([first, second])
    expected = _library(files, context)
    monkeypatch.setenv("KUBECONFIG", files)
    assert context_namespace(None, context) == expected
    if context is None:
        assert expected == "c-ns", "the last file to set current-context names it"
    if context == "a":
        assert expected == "from-one", "the first file to name a context wins"


def test_no_file_a_broken_file_or_no_namespace_is_none(tmp_path: Path):
    assert context_namespace(str(tmp_path / "missing")) is None
    (tmp_path / "broken").write_text("contexts: [\n")
    assert context_namespace(str(tmp_path / "broken")) is None
    assert context_namespace(_write(tmp_path / "k", {"a": None}, current="a")) is None
    assert context_namespace(_write(tmp_path / "k2", {"a": "x"}, current=None)) is None
