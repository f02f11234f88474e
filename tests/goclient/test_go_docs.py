"""docs/api.md's Go: the program a supervisor would paste builds, in a module outside this repository that
imports the client with the `replace` the docs show, by running the docs' own commands."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.docs.blocks import fenced_blocks
from tests.goclient.go import ROOT, go, go_env, run_go

API = "docs/api.md"


def test_a_program_outside_the_repository_imports_the_client_with_a_replace(tmp_path: Path):
    (program,) = [b for b in fenced_blocks(API) if b.lang == "go"]
    (commands,) = [b for b in fenced_blocks(API) if b.lang == "sh" and "go mod init" in b.text]
    assert commands.heading == "From Go", commands.id
    assert "../dispatch-k8s/clients/go" in commands.text, commands.text
    # The layout the docs assume: the program's folder beside a clone of this repository.
    (tmp_path / "dispatch-k8s").symlink_to(ROOT)
    folder = tmp_path / "supervisor"
    folder.mkdir()
    (folder / "main.go").write_text(program.text)
    env = go_env()
    env["PATH"] = f"{Path(go()).parent}:{env.get('PATH', '')}"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", commands.text], cwd=folder, env=env, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{commands.id}:\n{done.stdout}\n{done.stderr}"
    mod = (folder / "go.mod").read_text()
    assert "replace github.com/phpboyscout/dispatch-k8s/clients/go => ../dispatch-k8s/clients/go" in mod, mod
    assert (folder / "supervisor").is_file(), "go build . made no program"
    run_go("vet", ".", cwd=folder)
