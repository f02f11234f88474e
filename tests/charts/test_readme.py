"""The chart's README.md: generated from values.yaml's comments (charts/readme.py), shown by `helm show readme`."""

from __future__ import annotations

import json

import yaml

from charts import readme
from tests.charts.helm import CHART, run_helm


def test_helm_show_readme_shows_the_generated_readme():
    shown = run_helm("show", "readme", str(CHART)).stdout
    assert shown.strip() == (CHART / "README.md").read_text().strip()
    assert shown.strip() == readme.render(CHART).strip(), "out of date: run charts/generate.py"


def test_every_value_is_a_row_with_its_comment_type_and_default():
    text = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    rows = {key: (kind, default, about) for key, kind, default, about in readme.rows(values, schema, readme.comments(
        (CHART / "values.yaml").read_text()))}  # fmt: skip
    assert rows["replicas"] == ("integer", "2", rows["replicas"][2])
    assert rows["replicas"][2].startswith("Pods of the Deployment. Each runs the webhook, the agent")
    assert rows["webhook.timeoutSeconds"][:2] == ("integer", "5")
    assert rows["securityContext.runAsUser"][0] == "integer or null"
    assert rows["commonLabels"][:2] == ("object", "{}"), "a map of the user's keys is one value"
    assert rows["helmTest.namespace"] == ("string", '"default"', rows["helmTest.namespace"][2])
    for key in rows:
        assert f"| `{key}` |" in text, key


def test_the_comment_parser_follows_helm_docs():
    text = """
# A plain comment is not a description.
a: 1
# -- The first line,
# and the second.
b:
  # -- Nested.
  c: x
  d: []

# -- Cut off by a blank line

e: 2
"""
    assert readme.comments(text) == {"b": "The first line, and the second.", "b.c": "Nested."}


def test_the_readme_gives_the_commands_the_lifecycle_test_runs():
    text = (CHART / "README.md").read_text()
    for command in readme.COMMANDS.values():
        assert command in text
