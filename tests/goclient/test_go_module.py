"""The Go client (clients/go) without a cluster: its drift checks, go vet, and its unit tests.

* The generated code is what the generator go.mod pins makes from the committed document, byte for byte.
* The committed document is the one the agent serves (``agent.api.openapi``, as ``GET /v1/openapi.json``).
* ``go vet`` and ``go test`` of every package (the contract tests skip here: tests/goclient/test_go_contract.py
  runs them against a live agent, and fails if they skip).
"""

from __future__ import annotations

import json
from pathlib import Path

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
    # What GET /v1/openapi.json answers (agent/api/app.py serves document(); tests/api/test_contract.py
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
