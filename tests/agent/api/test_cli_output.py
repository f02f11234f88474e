"""The CLI's -o table|yaml|json (agent/api/output.py) and kubectl's kubeconfig order (serving/kube.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from agent.api import output
from serving.kube import KubeConfigError, kubeconfig_files

STATUS = {
    "namespace": "team-a", "name": "dj-01arz-s3", "uid": "6c1f", "phase": "Running", "gate": "open",
    "heldBy": [], "checkState": "Ready", "checkMessage": "admission count A\\nraised to 2", "a": 2, "r": None,
    "ceased": False, "foreign": ["x", "y"],
    "pods": [{"name": "p-0", "node": "n1", "mayStillRun": True}, {"name": "p-1", "node": None, "mayStillRun": False}],
    "executions": [],
}  # fmt: skip


def test_a_single_answer_is_a_field_value_table_then_a_table_per_list_of_objects():
    text = output.render(STATUS, "table")
    lines = text.splitlines()
    assert lines[0].split() == ["FIELD", "VALUE"]
    assert lines[1] == "NAMESPACE       team-a"  # aligned: the longest field (CHECK-MESSAGE) and 3 spaces
    assert "CHECK-STATE     Ready" in lines
    assert "CHECK-MESSAGE   admission count A\\nraised to 2" in lines  # one line per cell
    assert "HELD-BY         <none>" in lines
    assert "R               <none>" in lines
    assert "CEASED          false" in lines
    assert "FOREIGN         x,y" in lines
    assert "EXECUTIONS      <none>" in lines  # an empty list is a cell, not a table
    assert "\nEXECUTIONS\n" not in text
    pods = text.split("\nPODS\n")[1].splitlines()
    assert pods == ["NAME   NODE     MAY-STILL-RUN", "p-0    n1       true", "p-1    <none>   false"]
    assert all(line == line.rstrip() for line in lines)


def test_an_answer_with_items_is_one_row_per_item():
    answer = {"items": [{"name": "a", "uid": "1", "phase": "Running"}, {"name": "bb", "uid": "2"}], "continue": None}
    assert output.render(answer, "table") == "NAME   UID   PHASE\na      1     Running\nbb     2     <none>\n"
    assert output.render({"items": []}, "table") == "No resources found.\n"
    # table: the columns asked for, none empty in every row; wide: all.
    answer = {"items": [{"namespace": "t", "name": "a", "orphan": "t/a", "gone": None}]}
    assert output.render(answer, "table", ("name", "gone")) == "NAME\na\n"
    assert (
        output.render(answer, "wide", ("name",))
        == "NAMESPACE   NAME   ORPHAN   GONE\nt           a      t/a      <none>\n"
    )


def test_json_and_yaml_are_the_answer_itself():
    assert json.loads(output.render(STATUS, "json")) == STATUS
    assert yaml.safe_load(output.render(STATUS, "yaml")) == STATUS
    with pytest.raises(ValueError, match="not one of"):
        output.render(STATUS, "xml")


def test_the_kubeconfig_is_found_as_kubectl_finds_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("{}")
    b.write_text("{}")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert kubeconfig_files(str(a), {"KUBECONFIG": str(b)}) == str(a)  # the flag first
    with pytest.raises(KubeConfigError, match="no such file"):
        kubeconfig_files(str(tmp_path / "missing"), {})
    listed = os.pathsep.join([str(tmp_path / "gone"), str(b), str(a)])
    assert kubeconfig_files(None, {"KUBECONFIG": listed}) == os.pathsep.join([str(b), str(a)])
    assert kubeconfig_files(None, {"KUBECONFIG": str(tmp_path / "gone")}) is None  # then in-cluster
    assert kubeconfig_files(None, {}) is None  # no ~/.kube/config: in-cluster
    (tmp_path / "home" / ".kube").mkdir(parents=True)
    (tmp_path / "home" / ".kube" / "config").write_text("{}")
    assert kubeconfig_files(None, {}) == str(tmp_path / "home" / ".kube" / "config")
