"""What the docs state that the code or the rendered chart can confirm, checked mechanically.

* docs/install.md: the count of admission policies, and each RBAC table (rule by rule, verb by verb) against the
  Roles and ClusterRoles the chart renders; every rendered role has its table.
* docs/api.md: its RBAC YAML equals ``agent/api/rbac.py``; its Settings block names every ``ApiSettings`` key,
  the overridden ones at the top level; which layer wins is what ``dispatch-agent serve`` does.
* docs/agent.md: the configuration keys and the flags of ``dispatch-agent serve``.
* Every command line of ``dispatch-agent``, ``dispatch-webhook`` and ``dispatch-certs`` in the docs and the
  chart's NOTES is parsed by its own parser, and every ``--flag`` the docs name is one of theirs, or listed in
  ``EXTERNAL_FLAGS`` with the tool it belongs to.

The counts of metrics (tests/docs/test_metrics_docs.py), the values (tests/charts/test_render.py) and the owners'
allowlist (tests/webhook/test_owners.py) are checked where they are made.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from agent.api.rbac import AGENT_RULES, PREFLIGHT_RULES, SUPERVISOR_RULES
from agent.api.settings import ApiSettings
from agent.config import OVERRIDDEN_API_KEYS, AgentConfig, served_api_settings
from contract.prologue import PROLOGUE_CONFIGMAP
from tests.charts.helm import ROOT, Rendered, template
from tests.charts.test_render import PARSERS
from tests.docs.blocks import DOC_FILES, all_fenced_blocks, fenced_blocks, notes_blocks

_WORDS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
NUMBERS = {w: i for i, w in enumerate(_WORDS.split(" "))}
FULLNAME = "dispatch-k8s"


def _text(path: str) -> str:
    return (ROOT / path).read_text()


def _section(text: str, start: str, end: str = "\n## ") -> str:
    i = text.index(start)
    j = text.find(end, i + len(start))
    return text[i : j if j >= 0 else None]


# --- docs/install.md: the admission policies -------------------------------------------------------------


def test_install_md_counts_the_admission_policies_the_chart_renders():
    text = " ".join(_text("docs/install.md").split())
    m = re.search(r"(\w+) ValidatingAdmissionPolicies \((\w+) owner policies, .*?, and (\w+) field rules\)", text)
    assert m, "docs/install.md no longer counts the ValidatingAdmissionPolicies"
    total, owners, fields = (NUMBERS[w] for w in m.groups())
    names = [p["metadata"]["name"] for p in template().of("ValidatingAdmissionPolicy")]
    rendered_owners = [n for n in names if n.startswith(f"{FULLNAME}-owners-")]
    # Beside the owner policies and the field rules, the policy on strangers' blocking owner references, by name.
    assert f"{FULLNAME}-dependents" in names, names
    assert "`<fullname>-dependents`" in text
    rendered_fields = len(names) - len(rendered_owners) - 1
    assert (total, owners, fields) == (len(names), len(rendered_owners), rendered_fields), names
    served = template(extra=["--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"])
    mutating = [p["metadata"]["name"] for p in served.of("MutatingAdmissionPolicy")]
    assert mutating == [f"{FULLNAME}-record-start"]
    assert "the MutatingAdmissionPolicy\n  `<fullname>-record-start`" in _text("docs/install.md")


# --- docs/install.md: RBAC, and why ---------------------------------------------------------------------------

Grant = tuple[str, str, str, tuple[str, ...]]
"""(apiGroup, resource, verb, resourceNames)"""

_PLACEHOLDERS = {
    "<fullname>": FULLNAME,
    "<agent.lease.name>": "dispatch-admission",
    "dispatch-k8s-prologue-<hash>": PROLOGUE_CONFIGMAP,  # this version's prologue ConfigMap
}


def _grants(rules: list[dict[str, Any]]) -> set[Grant]:
    return {(g, r, v, tuple(rule.get("resourceNames", ())))
            for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}  # fmt: skip


def _table_grants(table: str) -> set[Grant]:
    """The grants of a `| rule | verbs | why |` table: a rule cell is `group` `resource`..., then resourceNames."""
    grants: set[Grant] = set()
    for row in table.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split(" | ")]
        if len(cells) < 2 or cells[0] in ("rule", "---") or set(cells[0]) <= {"-"}:
            continue
        rule, verbs = cells[0], cells[1]
        names: tuple[str, ...] = ()
        if m := re.search(r"`resourceNames: \[(.*?)\]`", rule):
            names = tuple(_PLACEHOLDERS.get(n.strip(), n.strip()) for n in m[1].split(","))
            names = tuple(n.replace("<fullname>", FULLNAME) for n in names)
            rule = rule[: m.start()]
        words = re.findall(r"`([^`]*)`", rule)
        group = "" if words[0] == '""' else words[0]
        for resource in words[1:]:
            for verb in (v.strip() for v in verbs.split(",")):
                grants.add((group, resource, verb, names))
    return grants


def _rbac_tables() -> dict[str, set[Grant]]:
    """docs/install.md's RBAC section: each **`<fullname>-x`** heading's table, by the role's name."""
    section = _section(_text("docs/install.md"), "## RBAC, and why")
    tables: dict[str, set[Grant]] = {}
    for m in re.finditer(r"\*\*`<fullname>(-[a-z-]+)`\*\*[^\n]*\n(?:[^|\n][^\n]*\n)*\n?((?:\|[^\n]*\n)+)", section):
        tables[FULLNAME + m[1]] = _table_grants(m[2])
    return tables


def _rendered_roles(r: Rendered) -> dict[str, set[Grant]]:
    roles: dict[str, set[Grant]] = {}
    for kind in ("Role", "ClusterRole"):
        for role in r.of(kind):
            roles.setdefault(role["metadata"]["name"], set()).update(_grants(role["rules"]))
    return roles


def test_install_md_has_a_table_for_every_role_the_chart_renders_with_every_verb_and_no_other():
    tables = _rbac_tables()
    rendered = _rendered_roles(template())
    assert set(tables) == set(rendered), "docs/install.md's RBAC tables name other roles than the chart renders"
    for name, grants in rendered.items():
        assert tables[name] - grants == set(), f"{name}: docs/install.md lists grants the chart does not give"
        assert grants - tables[name] == set(), f"{name}: the chart grants what docs/install.md does not list"


def test_the_table_parser_sees_a_missing_verb():
    table = "| rule | verbs | why |\n|---|---|---|\n| `batch` `jobs` | get | x |\n"
    assert _table_grants(table) == {("batch", "jobs", "get", ())}
    assert _table_grants(table) != _grants([{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list"]}])


# --- docs/api.md: RBAC as YAML, the Settings, and which layer wins -----------------------------------------------


def _yaml_under(path: str, heading: str) -> list[Any]:
    (block,) = [b for b in fenced_blocks(path) if b.heading == heading and b.lang == "yaml"]
    return [d for d in yaml.safe_load_all(block.text) if d]


def test_api_md_grants_exactly_the_rules_of_agent_api_rbac():
    supervisor, preflight = _yaml_under("docs/api.md", "What a supervisor needs")
    assert supervisor["rules"] == SUPERVISOR_RULES
    assert preflight["rules"] == PREFLIGHT_RULES
    (agent,) = _yaml_under("docs/api.md", "What the agent needs for the API")
    assert agent["rules"] == AGENT_RULES


def _alias(model: type[Any], field: str) -> str:
    return model.model_fields[field].alias or field


def test_api_md_settings_name_every_key_and_the_overridden_ones_at_the_top_level():
    (config,) = _yaml_under("docs/api.md", "Settings")
    AgentConfig.model_validate(config)
    api_keys = {_alias(ApiSettings, f) for f in ApiSettings.model_fields}
    overridden = {_alias(ApiSettings, f) for f in OVERRIDDEN_API_KEYS}
    assert set(config["api"]) == api_keys - overridden, "the api: section shows another set of keys"
    assert set(config) - {"api"} == overridden, "the top level of the block shows other keys than the overridden"


def test_the_overridden_keys_are_every_key_the_api_shares_with_the_top_level():
    shared = set(ApiSettings.model_fields) & set(AgentConfig.model_fields)
    assert shared == set(OVERRIDDEN_API_KEYS), "a key both layers have: decide which wins, and say so in docs/api.md"


def _layer_table() -> dict[str, str]:
    section = _section(_text("docs/api.md"), "**Which layer wins.**")
    rows = re.findall(r"^\| `(\w+)` \| (.+?) \|$", section, re.MULTILINE)
    return dict(rows)


def test_api_md_says_which_layer_wins_and_dispatch_agent_serve_does_that():
    table = _layer_table()
    expected = {_alias(ApiSettings, f): f"the top-level `{_alias(AgentConfig, f)}`" for f in OVERRIDDEN_API_KEYS}
    assert table == {**expected, "port": "`--api-port` when given, else `api.port`"}
    # The top level is the one answer: an api: value that differs is refused at load, naming both; an equal
    # one is accepted, and served.
    for api in ({"leaseNamespace": "elsewhere"}, {"leaseName": "other"}, {"nodeLossTaints": ["site/lost"]}):
        with pytest.raises(ValidationError, match=f"api.{next(iter(api))} .* differs from the top-level"):
            AgentConfig.model_validate({"api": api})
    same = {"leaseNamespace": "ml", "leaseName": "gate", "nodeLossTaints": ["site/gone"]}
    config = AgentConfig.model_validate({**same, "api": same})
    served = served_api_settings(config)
    for field in OVERRIDDEN_API_KEYS:
        assert getattr(served, field) == getattr(config, field), field
    assert served_api_settings(AgentConfig.model_validate(same)).lease_namespace == "ml"
    # The flag, as `dispatch-agent serve` parses it, wins over api.port; without it, api.port.
    args = PARSERS["dispatch-agent"]().parse_args(["serve", "--api-port", "9444"])
    config = AgentConfig.model_validate({"api": {"port": 8444}})
    assert served_api_settings(config, args.api_port).port == 9444
    assert served_api_settings(config, PARSERS["dispatch-agent"]().parse_args(["serve"]).api_port).port == 8444


# --- docs/agent.md: the configuration and the serve flags ---------------------------------------------------------


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of a parser and its subcommands."""
    found: set[str] = set()
    for action in parser._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _flags(sub)
    return found


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices[name]


def test_agent_md_lists_every_configuration_key_and_every_serve_flag():
    text = " ".join(_text("docs/agent.md").split())
    m = re.search(r"Configuration \(`--config`, YAML; errors name the key\): (.*?)Flags of `dispatch-agent serve`: "
                  r"(.*?)(?:\. |$)", text)  # fmt: skip
    assert m, "docs/agent.md no longer lists the agent's configuration and flags"
    keys = {k for k in re.findall(r"`(\w+)`", m[1])}
    assert keys == {_alias(AgentConfig, f) for f in AgentConfig.model_fields}
    serve = _subparser(PARSERS["dispatch-agent"](), "serve")
    listed = set(re.findall(r"`(--[a-z-]+)", m[2]))
    assert listed == {f for f in _flags(serve) if f.startswith("--")} - {"--help"}


# --- command lines and flags ----------------------------------------------------------------------------------

OUR_COMMANDS = tuple(PARSERS)
FLAG_DOCS = ("README.md", "docs/install.md", "docs/api.md", "docs/agent.md", "docs/certs.md", "docs/webhook.md",
             "docs/troubleshooting.md", "docs/security.md", "docs/nodeloss.md", "docs/contract.md")  # fmt: skip
"""The docs of the product (controlplane.md, performance.md and prologue.md are about the test harness, whose
flags are other programs', and are not checked)."""

EXTERNAL_FLAGS = {
    # flag: whose it is
    "--wait": "helm",
    "--set": "helm",
    "--reset-then-reuse-values": "helm",
    "--reuse-values": "helm",
    "--kube-version": "helm",
    "--api-versions": "helm template",
    "--no-hooks": "helm",
    "--create-namespace": "helm",
    "--strict": "helm lint",
    "--dry-run": "kubectl",
    "--type": "kubectl patch",
    "--as": "kubectl auth can-i",
    "--subresource": "kubectl auth can-i",
    "--prefix": "kubectl logs",
    "--for": "kubectl wait",
    "--force": "kubectl delete",
    "--grace-period": "kubectl delete",
    "--cacert": "curl",
    "--build-arg": "docker build",
    "--use-service-account-credentials": "kube-controller-manager",
    "--service-account-private-key-file": "kube-controller-manager",
    "--node-port": "kwok",
    "--check": "charts/generate.py",
    "--no-wait": "scripts/sandbox",
    "--supervisor": "scripts/sandbox",
    "--multicluster": "scripts/sandbox and scripts/chaos",
    "--seed": "scripts/chaos (its own test: tests/chaos/test_chaos_cli.py)",
    "--duration": "scripts/chaos",
    "--arm": "scripts/chaos",
    "--install-packages": "controlplane/build-node.sh",
    "--tier": "python -m harness",
    "--epochs": "the example job's train.py (docs/api.md)",
    "--flag": "a placeholder (install.md: each a `--flag` or `--flag=value`)",
}


_STARTS = re.compile(rf"^(?:\S+/)?({'|'.join(OUR_COMMANDS)})(\s|$)")
_SHELL_STOP = re.compile(r"^(?:<<|>|\||&&|;|2>)")


def _command_lines() -> list[tuple[str, str]]:
    """(where, line) of every line of a fenced block (or an indented NOTES block) that calls one of our commands."""
    found: list[tuple[str, str]] = []
    for block in [*all_fenced_blocks(), *notes_blocks()]:
        if block.lang not in ("", "sh", "bash"):
            continue
        text = block.text.replace("\\\n", " ")
        for i, line in enumerate(text.splitlines()):
            if _STARTS.match(line.strip()):
                found.append((f"{block.id}+{i + 1}", line.strip()))
    return found


def _inline_mentions() -> list[tuple[str, str]]:
    """(where, span) of every inline code span that names one of our commands."""
    return [(f"{path} `{m[1]}`", m[1]) for path in DOC_FILES for m in re.finditer(r"`([^`\n]+)`", _text(path))
            if _STARTS.match(m[1])]  # fmt: skip


def _argv(line: str) -> list[list[str]]:
    """The argument lists a documented line stands for: comments, redirections and pipes dropped, `[optional]`
    parts kept, `a|b` verbs split."""
    line = line.split(" #", 1)[0].replace("[", " ").replace("]", " ")
    words: list[str] = []
    for word in shlex.split(line):
        if _SHELL_STOP.match(word):
            break
        words.append(word)
    words[0] = words[0].rsplit("/", 1)[-1]
    if len(words) > 1 and "|" in words[1]:
        return [[words[0], verb, *words[2:]] for verb in words[1].split("|") if verb not in ("…", "...")]
    return [words]


def test_every_documented_command_line_parses():
    """A line of a block is a whole command: its own parser must accept it, required flags and all."""
    lines = _command_lines()
    assert len(lines) >= 5, lines
    refused = []
    for where, line in lines:
        for argv in _argv(line):
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    PARSERS[argv[0]]().parse_args(argv[1:])
            except SystemExit as exc:
                if exc.code != 0:
                    refused.append(f"{where}: {' '.join(argv)}: {err.getvalue().strip()}")
    assert not refused, "\n".join(refused)


def test_every_inline_mention_of_a_command_names_its_verb_and_flags():
    """An inline span may be part of a command (`dispatch-certs run --once`): its verb and flags must exist."""
    mentions = _inline_mentions()
    assert len(mentions) >= 10, mentions
    wrong = []
    for where, span in mentions:
        for argv in _argv(span):
            if "VERB" in argv:
                continue  # `dispatch-agent VERB --help`: a pattern
            parser = PARSERS[argv[0]]()
            rest = argv[1:]
            verbs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if rest and not rest[0].startswith("-") and verbs:
                if rest[0] not in verbs[0].choices:
                    wrong.append(f"{where}: no verb {rest[0]!r}")
                    continue
                parser = verbs[0].choices[rest[0]]
            flags = _flags(parser)
            wrong += [f"{where}: no flag {w}" for w in rest if w.startswith("-") and w.split("=")[0] not in flags]
    assert not wrong, "\n".join(wrong)


def test_every_flag_the_docs_name_is_a_flag_of_ours_or_of_a_named_tool():
    ours = set().union(*(_flags(make()) for make in PARSERS.values()))
    unknown = {}
    for path in FLAG_DOCS:
        text = _text(path)
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text):
            if flag not in ours and flag not in EXTERNAL_FLAGS:
                unknown.setdefault(flag, path)
    assert not unknown, f"flags no parser of ours has and EXTERNAL_FLAGS does not name: {unknown}"
    assert not set(EXTERNAL_FLAGS) & ours, "a flag of ours is listed as another tool's"


@pytest.mark.parametrize("flag", ["--tls-cert-file", "--once", "--webhook-configuration", "--request", "--resolve"])
def test_our_flags_are_seen(flag):
    assert flag in set().union(*(_flags(make()) for make in PARSERS.values()))
