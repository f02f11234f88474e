"""The Go client (clients/go) without a cluster: its drift checks, go vet, and its unit tests.

* The generated code is what the generator go.mod pins makes from the committed document, byte for byte.
* The committed document is the one the agent serves (``agent.api.openapi``, as ``GET /v1/openapi.json``).
* ``go vet`` and ``go test`` of every package (the contract tests skip here: tests/goclient/test_go_contract.py
  runs them against a live agent, and fails if they skip), with its ``Example`` functions; in the repository the
  check of docs/api.md's Errors table runs (never skips).
* The module as a consumer gets it: a copy outside the repository vets and tests, the docs' check alone skipped.
* Its ``go`` directive is the oldest language level the module graph allows (the build honours it).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from agent.api.openapi import document, render
from tests.goclient.go import MODULE, run_go

DOCUMENT = MODULE / "openapi.json"
WIRE = MODULE / "internal" / "wire"


def test_the_committed_document_is_the_one_the_agent_serves():
    committed = DOCUMENT.read_text()
    assert committed == render(), (
        "clients/go/openapi.json is not the agent's document: "
        "run `.venv/bin/python -m agent.api.openapi > clients/go/openapi.json`, then `go generate ./...` in clients/go"
    )
    # What GET /v1/openapi.json answers (agent/api/app.py serves document(); tests/agent/api/test_contract.py
    # checks that over HTTP).
    assert json.loads(committed) == document()


def test_the_generated_code_is_what_the_pinned_generator_makes(tmp_path: Path):
    fresh = tmp_path / "wire.gen.go"
    config = (WIRE / "oapi-codegen.yaml").read_text()
    assert "\noutput: wire.gen.go\n" in config, config
    (tmp_path / "oapi-codegen.yaml").write_text(config.replace("\noutput: wire.gen.go\n", f"\noutput: {fresh}\n"))
    run_go("tool", "oapi-codegen", "-config", str(tmp_path / "oapi-codegen.yaml"), str(DOCUMENT), cwd=WIRE)
    assert fresh.read_text() == (WIRE / "wire.gen.go").read_text(), (
        "clients/go/internal/wire/wire.gen.go differs from what the pinned oapi-codegen makes of the document: "
        "run `go generate ./...` in clients/go"
    )


def test_go_vet_and_the_unit_tests_pass():
    run_go("vet", "./...")
    done = run_go("test", "-count=1", "./...")
    assert "ok  \tgithub.com/phpboyscout/dispatch-k8s/clients/go/agent" in done.stdout, done.stdout


DOCS_CHECK = "TestEveryErrorCodeOfTheDocsMatchesItsSentinelOnly"


def test_the_docs_error_table_is_checked_in_the_repository():
    done = run_go("test", "-count=1", "-v", "-run", f"^{DOCS_CHECK}$", "./agent")
    assert f"--- PASS: {DOCS_CHECK}" in done.stdout, done.stdout
    assert "SKIP" not in done.stdout, done.stdout


@pytest.mark.timeout(900)  # a bound on a hang: vet and every test binary linked outside the repository's cache paths
def test_a_copy_of_the_module_outside_the_repository_vets_and_tests(tmp_path: Path):
    copy = tmp_path / "clients-go"
    shutil.copytree(MODULE, copy)
    run_go("vet", "./...", cwd=copy)
    done = run_go("test", "-count=1", "-v", "./...", cwd=copy)
    assert "FAIL" not in done.stdout, done.stdout
    # Only the check that needs the repository's docs is skipped, saying why (and the contract test, which
    # needs a live agent, as everywhere but tests/goclient/test_go_contract.py).
    skipped = re.findall(r"^\s*--- SKIP: (\S+)", done.stdout, re.MULTILINE)
    assert sorted(skipped) == ["TestContract", DOCS_CHECK], skipped
    assert "SKIP-DOCS" in done.stdout, done.stdout


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def test_the_go_directive_is_the_oldest_the_module_graph_allows():
    mod = (MODULE / "go.mod").read_text()
    (directive,) = re.findall(r"^go (\S+)$", mod, re.MULTILINE)
    # The language level the code needs: range over functions (iter.Seq2) is Go 1.23; go.mod's tool directive 1.24.
    assert _version(directive) >= (1, 24), directive
    graph = run_go("list", "-m", "-f", "{{.Path}} {{.GoVersion}}", "all").stdout.split("\n")
    needed = max((_version(line.split()[1]) for line in graph[1:] if len(line.split()) == 2), default=(1, 24))
    assert _version(directive) == max(needed, (1, 24)), (directive, needed)
    # go build and go vet honour the directive's language level (GOTOOLCHAIN=local: this toolchain, that level).
    run_go("build", "./...")
