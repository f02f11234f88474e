"""Every YAML block a reader copies from README.md, docs/*.md and the chart's NOTES is checked against what reads it.

* A block of Kubernetes objects is sent to the real API server (tier A, with the Trainer, JobSet and Kueue
  CRDs) as a server-side apply with ``dryRun=All`` and strict field validation, so a field the served version
  does not have (``spec.admissionChecks`` on a ``kueue.x-k8s.io/v1beta2`` ClusterQueue) fails here, as it
  would for the reader. The namespaces the objects name are created first.
* A block that is not an object is listed in ``NOT_OBJECTS`` below, with its reader and why, and checked by that
  reader: a values fragment by ``helm template`` (the chart's schema refuses an unknown key), a config file by
  its server's own loader, a fragment of the chart's pod spec or RBAC against the chart as rendered.
* A block nobody classified fails, and so does a YAML block without its ``yaml`` tag: none is ignored.

Placeholders a block keeps on purpose (the chart's ``{{ fullname }}`` in docs/certs.md) are replaced by the
values of ``PLACEHOLDERS``; any other ``…``, ``<...>`` or ``{{`` left in a block's data fails: make it concrete.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.config import load_config as load_agent_config
from harness.cluster import ControlPlane
from harness.kube_http import ApiError
from tests.charts.helm import Rendered, template
from tests.charts.test_render import PARSERS
from tests.docs.blocks import YAML_LANGS, Block, all_fenced_blocks, notes_blocks
from webhook.config import Config as WebhookConfig
from webhook.config import load_config as load_webhook_config

PLACEHOLDERS = {
    "{{ fullname }}": "dispatch-k8s",  # docs/certs.md shows the chart's templates; the default release's name
    "<same image>": "ghcr.io/phpboyscout/dispatch-k8s:0.1.0",  # the chart's default image
}
_LEFT_OPEN = re.compile(r"…|<[a-z][^<>]*>|\{\{")

NOT_OBJECTS: dict[tuple[str, str], tuple[str, str]] = {
    # (file, the block's first line): (its reader, why it is not a Kubernetes object)
    ("docs/install.md", "topologySpreadConstraints:"): ("values", "a values.yaml fragment for the chart"),
    ("docs/install.md", "webhook:"): ("values", "a values.yaml fragment for the chart"),
    ("docs/install.md", "multicluster:"): ("values", "a values.yaml fragment for the chart (a manager's, a worker's)"),
    ("docs/install.md", "scope:"): ("values", "a values.yaml fragment for the chart"),
    ("docs/api.md", "leaseNamespace: dispatch-system"): ("agent-config", "the agent's configuration file (--config)"),
    ("docs/webhook.md", "dispatch:"): ("webhook-config", "the webhook's configuration file (--config)"),
    ("docs/certs.md", "initContainers:"): ("chart-pod-spec", "a part of the chart's Deployment's pod spec"),
    ("docs/certs.md", "# Role in the release namespace"): ("chart-rules", "the rules of the chart's -certs roles"),
}

NOTES_OBJECTS: dict[str, tuple[str, str]] = {
    # the line leading into a NOTES block: the object whose part it shows (the test wraps the part in it)
    "Dispatch's readmission gate applies to the ClusterQueues that name its AdmissionCheck:": (
        "kueue.x-k8s.io/v1beta2",
        "ClusterQueue",
    ),
}
NOTES_COMMANDS = ("kubectl ", "helm ")
"""NOTES blocks that are commands, not YAML (the install path's test runs them)."""


def _data(block: Block) -> list[Any]:
    text = block.text
    for placeholder, value in PLACEHOLDERS.items():
        text = text.replace(placeholder, value)
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    left = _LEFT_OPEN.findall(yaml.safe_dump_all(docs, allow_unicode=True))
    assert not left, f"{block.id}: placeholders left in the data: {left}; make the block concrete"
    return docs


def _is_object(doc: Any) -> bool:
    return isinstance(doc, dict) and {"apiVersion", "kind", "metadata"} <= doc.keys()


def _section_key(block: Block) -> tuple[str, str]:
    first = block.text.splitlines()[0]
    return (block.path, first.split("#")[0].rstrip() if not first.startswith("#") else first)


def yaml_blocks() -> list[Block]:
    return [b for b in all_fenced_blocks() if b.lang in YAML_LANGS]


def object_blocks() -> list[Block]:
    return [b for b in yaml_blocks() if all(_is_object(d) for d in _data(b))]


def other_blocks() -> list[Block]:
    return [b for b in yaml_blocks() if not all(_is_object(d) for d in _data(b))]


def _ids(blocks: list[Block]) -> list[str]:
    return [b.id for b in blocks]


# --- nothing ignored -------------------------------------------------------------------------------------


def test_every_yaml_block_is_an_object_or_classified_and_every_classification_is_used():
    blocks = yaml_blocks()
    assert len(blocks) >= 10, "the docs' YAML blocks were not found"
    unclassified = [b.id for b in other_blocks() if _section_key(b) not in NOT_OBJECTS]
    assert not unclassified, f"not Kubernetes objects and not in NOT_OBJECTS (say what reads them): {unclassified}"
    used = {_section_key(b) for b in other_blocks()}
    assert set(NOT_OBJECTS) <= used, f"NOT_OBJECTS names blocks that are gone: {set(NOT_OBJECTS) - used}"


def test_no_yaml_hides_in_an_untagged_block():
    """An untagged block that parses as a YAML mapping or list would escape every check here."""
    hidden = []
    for block in all_fenced_blocks():
        if block.lang:
            continue
        try:
            docs = list(yaml.safe_load_all(block.text))
        except yaml.YAMLError:
            continue
        if any(isinstance(d, (dict, list)) for d in docs):
            hidden.append(block.id)
    assert not hidden, f"tag these blocks (```yaml, or ```text for output): {hidden}"


def test_every_notes_block_is_a_command_or_a_known_object_part():
    for block in notes_blocks():
        if block.text.startswith(NOTES_COMMANDS):
            continue
        assert block.lead in NOTES_OBJECTS, f"{block.id}: unclassified NOTES block after {block.lead!r}:\n{block.text}"
        assert isinstance(yaml.safe_load(block.text), dict), block.id
    assert any(b.lead in NOTES_OBJECTS for b in notes_blocks()), "the NOTES no longer show the ClusterQueue part"


# --- Kubernetes objects: a server-side dry run ----------------------------------------------------------------


def _ensure_namespace(cp: ControlPlane, name: str) -> None:
    try:
        cp.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except ApiError as exc:
        if exc.status != 409:
            raise


def dry_run(cp: ControlPlane, doc: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply, dry run, unknown or duplicate fields refused (as `kubectl apply --server-side`)."""
    if cp.admin.resource_info(doc["apiVersion"], doc["kind"]).namespaced:
        namespace = doc["metadata"].setdefault("namespace", "default")
        _ensure_namespace(cp, namespace)  # team-a and the like: the docs' namespaces exist in this cluster
    query = {"dryRun": "All", "fieldManager": "docs", "force": "true", "fieldValidation": "Strict"}
    path = cp.admin.object_path(doc)
    return cp.admin.request("PATCH", path, doc, query=query, content_type="application/apply-patch+yaml")


@pytest.mark.cluster
@pytest.mark.parametrize("block", object_blocks(), ids=_ids(object_blocks()))
def test_each_object_block_passes_a_server_side_dry_run(block: Block, control_plane: ControlPlane):
    for doc in _data(block):
        try:
            answer = dry_run(control_plane, doc)
        except ApiError as exc:
            pytest.fail(f"{block.id}: the API server refuses {doc['kind']} {doc['metadata']['name']}: {exc}")
        assert answer["kind"] == doc["kind"]


@pytest.mark.cluster
@pytest.mark.parametrize("block", [b for b in notes_blocks() if b.lead in NOTES_OBJECTS], ids=lambda b: b.id)
def test_each_notes_object_part_passes_a_server_side_dry_run(block: Block, control_plane: ControlPlane):
    api_version, kind = NOTES_OBJECTS[block.lead]
    doc = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "docs-notes-example"}, **_data(block)[0]}
    try:
        dry_run(control_plane, doc)
    except ApiError as exc:
        pytest.fail(f"{block.id}: the API server refuses the NOTES' {kind}: {exc}\n{block.text}")


# --- everything else: what reads it ---------------------------------------------------------------------------


def _values(block: Block, docs: list[Any]) -> None:
    (values,) = docs
    rendered = template(values)  # helm refuses a key or type its schema does not know, naming it
    assert rendered.docs != template().docs, f"{block.id}: the values change nothing the chart renders"


def _config(loader: Callable[[str], Any]) -> Callable[[Block, list[Any]], Any]:
    def check(block: Block, docs: list[Any]) -> Any:
        (config,) = docs
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "config.yaml"
            path.write_text(yaml.safe_dump(config))
            return loader(str(path))  # ConfigError names the bad key

    return check


def _webhook_config(block: Block, docs: list[Any]) -> None:
    loaded = _config(load_webhook_config)(block, docs)
    assert loaded == WebhookConfig(), f"{block.id}: the block says it shows the defaults; they differ"


def _subset(doc: Any, chart: Any, where: str) -> list[str]:
    """Where ``doc`` says something ``chart`` does not (lists of named items matched by name)."""
    if isinstance(doc, dict):
        if not isinstance(chart, dict):
            return [f"{where}: the chart has {chart!r}"]
        return [p for k, v in doc.items() for p in
                (_subset(v, chart[k], f"{where}.{k}") if k in chart else [f"{where}.{k}: not in the chart"])]  # fmt: skip
    if isinstance(doc, list) and all(isinstance(x, dict) and "name" in x for x in doc):
        by_name = {x.get("name"): x for x in chart or [] if isinstance(x, dict)}
        return [p for x in doc for p in
                (_subset(x, by_name[x["name"]], f"{where}[{x['name']}]") if x["name"] in by_name
                 else [f"{where}[{x['name']}]: not in the chart"])]  # fmt: skip
    if isinstance(doc, list):
        return [f"{where}: {x!r} not in the chart's {chart!r}" for x in doc if x not in (chart or [])]
    return [] if doc == chart else [f"{where}: {doc!r}, the chart renders {chart!r}"]


def _chart_pod_spec(block: Block, docs: list[Any]) -> None:
    (fragment,) = docs
    spec = template().one("Deployment")["spec"]["template"]["spec"]
    problems = _subset(fragment, spec, "spec")
    assert not problems, f"{block.id} is not what the chart renders:\n" + "\n".join(problems)
    for container in fragment.get("initContainers", []) + fragment.get("containers", []):
        if "command" in container:
            (command,) = container["command"]
            PARSERS[command]().parse_args(container.get("args", []))


def _chart_rules(block: Block, docs: list[Any]) -> None:
    (rules,) = docs
    r: Rendered = template()
    granted = [rule for kind in ("Role", "ClusterRole") for rule in r.one(kind, "dispatch-k8s-certs")["rules"]]
    assert sorted(map(repr, rules)) == sorted(map(repr, granted)), f"{block.id}: not the chart's rules {granted}"


READERS: dict[str, Callable[[Block, list[Any]], Any]] = {
    "values": _values,
    "agent-config": _config(load_agent_config),
    "webhook-config": _webhook_config,
    "chart-pod-spec": _chart_pod_spec,
    "chart-rules": _chart_rules,
}


@pytest.mark.parametrize("block", other_blocks(), ids=_ids(other_blocks()))
def test_each_other_block_is_accepted_by_what_reads_it(block: Block):
    reader, _why = NOT_OBJECTS[_section_key(block)]
    READERS[reader](block, _data(block))
