"""The component pages (agent, certs, webhook, control plane, prologue, metrics, troubleshooting) say only what
the repository has: every file and Python name they mention exists, each page names every module of its
package, every flag it gives is its command's and the flags it lists are all of them, the agent's config keys
are the model's, and the counts, ports and versions they quote are the code's, the chart's and the pins'.
"""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest
import yaml

from agent.cli import _parser as agent_parser
from agent.config import AgentConfig
from certs.cli import _parser as certs_parser
from webhook.cli import _parser as webhook_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = ("agent", "certs", "controlplane", "webhook", "prologue", "metrics", "troubleshooting")
VALUES = yaml.safe_load((ROOT / "charts" / "dispatch-k8s" / "values.yaml").read_text())

# A path of this repository: one of its top-level folders, not preceded by anything that makes it a path of
# somewhere else (`/run/dispatch/tls`, `k8s.io/kubernetes/cmd/kubelet`, `$TMPDIR/...`).
_ROOTS = "agent|certs|charts|contract|controlplane|docs|harness|prologue|requirements|scripts|serving|tests|webhook"
_PATH = re.compile(rf"(?<![\w./$~-])(?:{_ROOTS})/[\w./*<>-]*")
_TEST_FILE = re.compile(r"(?<![\w/])test_\w+\.py\b")
# A dotted Python name rooted in one of our packages: `contract.prologue.PROLOGUE`, `webhook.admission.mutate`.
_PACKAGES = ("agent", "certs", "contract", "harness", "serving", "webhook")
_DOTTED = re.compile(rf"`((?:{'|'.join(_PACKAGES)})(?:\.\w+)+)(?:\(\))?`")
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _text(page: str) -> str:
    return (DOCS / f"{page}.md").read_text()


def _repo_paths(text: str) -> set[str]:
    # Placeholders (`controlplane/go/<component>/`, `<cache>/...`) are patterns, not paths.
    return {p.rstrip(".-/") for p in _PATH.findall(text) if "<" not in p}


def _exists(path: str) -> bool:
    return any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()


@pytest.mark.parametrize("page", PAGES)
def test_every_repository_path_a_page_names_exists(page: str) -> None:
    missing = sorted(p for p in _repo_paths(_text(page)) if not _exists(p))
    assert not missing, f"docs/{page}.md names paths the repository does not have: {missing}"


@pytest.mark.parametrize("page", PAGES)
def test_every_test_file_a_page_names_by_itself_exists(page: str) -> None:
    tests = {p.name for p in (ROOT / "tests").rglob("test_*.py")}
    missing = sorted(set(_TEST_FILE.findall(_text(page))) - tests)
    assert not missing, f"docs/{page}.md names test files that are not under tests/: {missing}"


def _resolves(dotted: str) -> bool:
    """A module, or a name in one (`contract.identity.epoch`), or a chart value (`certs.mode`)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                break
            obj = getattr(obj, name)
        else:
            return True
        break
    value = VALUES
    for name in parts:
        if not isinstance(value, dict) or name not in value:
            return False
        value = value[name]
    return True


@pytest.mark.parametrize("page", PAGES)
def test_every_python_name_a_page_gives_exists(page: str) -> None:
    names = set(_DOTTED.findall(_text(page)))
    stale = sorted(n for n in names if not _resolves(n))
    assert not stale, f"docs/{page}.md names what is neither our code nor a chart value: {stale}"


@pytest.mark.parametrize(("page", "package"), [("agent", "agent"), ("certs", "certs"), ("webhook", "webhook")])
def test_a_page_names_every_module_of_its_package(page: str, package: str) -> None:
    text = _text(page)
    named = {p for p in _repo_paths(text) if p.startswith(f"{package}/")}
    modules = [
        p.relative_to(ROOT).as_posix()
        for p in sorted((ROOT / package).rglob("*.py"))
        if p.name not in ("__init__.py", "__main__.py") and "api" not in p.relative_to(ROOT / package).parts
    ]
    covered = {m for m in modules if any(Path(m).match(n) for n in named)}
    assert set(modules) == covered, f"docs/{page}.md does not name {sorted(set(modules) - covered)}"


def _options(parser: argparse.ArgumentParser, *commands: str) -> set[str]:
    """The long options of the named subcommands (all of them when none is named)."""
    found: set[str] = set()
    for action in parser._actions:  # argparse keeps its subcommands nowhere public
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if not commands or name in commands:
                    found |= _options(sub)
        else:
            found |= {o for o in action.option_strings if o.startswith("--")}
    return found - {"--help"}


COMMANDS = {
    # page: (its command's parser, the subcommands the page documents)
    "agent": (agent_parser, ("serve",)),
    "certs": (certs_parser, ("generate", "run", "uninstall")),
    "webhook": (webhook_parser, ("serve", "selftest")),
}
OTHERS = {
    # page: flags of another command it shows, and that command
    "certs": (webhook_parser, ("serve",)),  # the servers' containers beside the controller read its files
}


@pytest.mark.parametrize("page", sorted(COMMANDS))
def test_every_flag_a_page_gives_is_its_commands(page: str) -> None:
    parser, commands = COMMANDS[page]
    known = _options(parser(), *commands)
    if page in OTHERS:
        other, other_commands = OTHERS[page]
        known |= _options(other(), *other_commands)
    unknown = sorted(set(_FLAG.findall(_text(page))) - known)
    assert not unknown, f"docs/{page}.md gives flags its command does not have: {unknown}"


@pytest.mark.parametrize("page", sorted(COMMANDS))
def test_a_page_gives_every_flag_of_its_command(page: str) -> None:
    parser, commands = COMMANDS[page]
    missing = sorted(_options(parser(), *commands) - {"--version"} - set(_FLAG.findall(_text(page))))
    assert not missing, f"docs/{page}.md does not give these flags of its command: {missing}"


def test_the_agent_page_lists_exactly_the_config_keys() -> None:
    text = _text("agent")
    paragraph = text[text.index("Configuration (`--config`") : text.index("Flags of `dispatch-agent serve`")]
    listed = set(re.findall(r"`([a-z][A-Za-z]*)`", paragraph))
    keys = {field.alias or name for name, field in AgentConfig.model_fields.items()}
    assert listed == keys, f"docs/agent.md: missing {keys - listed}, stale {listed - keys}"


def _table_rows(text: str, header: str) -> list[list[str]]:
    """The body rows of the Markdown table whose header line starts with ``header``, split into cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_agent_page_counts_the_rows_of_the_node_loss_table() -> None:
    (count,) = re.findall(r"The full table \((\d+) rows", _text("agent"))
    rows = _table_rows((DOCS / "nodeloss.md").read_text(), "| # | pod | node |")
    assert int(count) == len(rows), f"docs/agent.md says {count} rows; docs/nodeloss.md's table has {len(rows)}"


def _env(name: str) -> dict[str, str]:
    lines = (ROOT / "controlplane" / name).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_the_control_plane_page_quotes_the_pins() -> None:
    pins = _env("versions.env") | _env("node.env") | _env("cert-manager.env")
    keys = {
        "Kubernetes (kube-apiserver, KCM, scheduler)": "K8S_VERSION",
        "etcd": "ETCD_VERSION",
        "Kueue": "KUEUE_VERSION",
        "JobSet": "JOBSET_VERSION",
        "Kubeflow Trainer": "TRAINER_VERSION",
        "kwok": "KWOK_VERSION",
        "helm": "HELM_VERSION",
        "`BUILD_REVISION`": "BUILD_REVISION",
    }
    text = _text("controlplane")
    table = {row[0]: row[1] for row in _table_rows(text, "| Component | Version | Why this one |")}
    assert table == {name: pins[key] for name, key in keys.items()}
    node = {row[0]: row[1] for row in _table_rows(text, "| Component | Version / source | Why |")}
    assert pins["CONTAINERD_VERSION"] in node["containerd, ctr, containerd-shim-runc-v2"]
    assert pins["CNI_PLUGINS_VERSION"] in node["CNI plugins bridge, host-local, loopback"]
    for page in ("controlplane", "certs"):
        for key, value in re.findall(r"\b([A-Z][A-Z0-9_]+_VERSION)=(v[\w.-]+)", _text(page)):
            assert pins[key] == value, f"docs/{page}.md: {key}={value}, the pin is {pins[key]}"
    (quoted,) = re.findall(r"cert-manager's real CRDs \(from its Go module `(v[\w.-]+)`", _text("certs"))
    assert quoted == pins["CERT_MANAGER_VERSION"]


def test_the_control_plane_page_counts_the_staging_modules() -> None:
    (count,) = re.findall(r"\((\d+) modules for 1\.\d+\)", _text("controlplane"))
    for wrapper in ("kubernetes", "node"):
        go_mod = (ROOT / "controlplane" / "go" / wrapper / "go.mod").read_text()
        assert int(count) == len(re.findall(r"^replace k8s\.io/\S+ => k8s\.io/", go_mod, re.MULTILINE)), wrapper


def test_the_metrics_page_gives_the_charts_ports() -> None:
    rows = {row[0]: row[1] for row in _table_rows(_text("metrics"), "| process (container) |")}
    assert f"({VALUES['webhook']['port']})" in rows["webhook (`webhook`)"]
    assert f"({VALUES['agent']['healthPort']})" in rows["agent and its API (`agent`)"]
    assert f"({VALUES['certs']['healthPort']})" in rows["certificate controller (`certs`)"]
    forwarded = re.search(r"port-forward \$POD ([\d ]+)", _text("troubleshooting"))
    assert forwarded is not None
    ports = {VALUES["webhook"]["port"], VALUES["agent"]["healthPort"], VALUES["certs"]["healthPort"]}
    assert {int(p) for p in forwarded[1].split()} == ports


def test_the_certs_page_gives_the_charts_health_port() -> None:
    port = VALUES["certs"]["healthPort"]
    text = _text("certs")
    assert f"--health-port={port}" in text
    assert f"containerPort: {port}" in text


def test_the_metrics_page_quotes_the_alert_thresholds() -> None:
    rule = VALUES["prometheusRule"]
    rows = {row[0]: row[1] for row in _table_rows(_text("metrics"), "| alert | fires when |")}
    assert f"`certificateExpiryDays` ({rule['certificateExpiryDays']})" in rows["`DispatchCertificateExpiringSoon`"]
    assert f"`heldCheckSeconds` ({rule['heldCheckSeconds']})" in rows["`DispatchCheckHeldTooLong`"]
    half = VALUES["webhook"]["timeoutSeconds"] / 2
    assert f"({half:g} s)" in rows["`DispatchWebhookSlow`"]
    template = (ROOT / "charts" / "dispatch-k8s" / "templates" / "prometheusrule.yaml").read_text()
    assert set(re.findall(r"- alert: (\w+)", template)) == {name.strip("`") for name in rows}
