"""The image, checked without a Docker engine (none runs here; the image builds where one exists).

What can be known from the Dockerfile and the build context alone: every COPY source reaches the builder
through .dockerignore; the build stage gets every package setuptools would put in the wheel (found by
setuptools' own discovery on the files the Dockerfile copies); every import of those packages resolves to
the image's own packages, the standard library or a declared dependency; the console scripts the chart
runs exist; the final stage has no build tools and runs as the numeric user the chart expects.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pytest
import setuptools
import yaml

from tests.charts.helm import CHART, ROOT
from tests.charts.sets import VALUE_SETS, rendered

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


# --- the Dockerfile ------------------------------------------------------------------------------------


@dataclass
class Instruction:
    keyword: str
    args: str

    def words(self) -> list[str]:
        return self.args.split()


@dataclass
class Stage:
    base: str
    name: str
    instructions: list[Instruction] = field(default_factory=list)

    def of(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages; continuation lines joined, comments dropped."""
    lines, current = [], ""
    for raw in text.splitlines():
        if not current and raw.lstrip().startswith("#"):
            continue
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        current += raw
        if current.strip():
            lines.append(current.strip())
        current = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(words[0], name))
        elif not stages:
            assert keyword == "ARG", f"only ARG may come before the first FROM: {line}"
            key, _, default = rest.partition("=")
            args[key] = default
        else:
            stages[-1].instructions.append(Instruction(keyword, rest.strip()))
    return args, stages


DOCKERFILE = (ROOT / "Dockerfile").read_text()
ARGS, STAGES = parse_dockerfile(DOCKERFILE)


def copies(stage: Stage) -> list[tuple[list[str], str]]:
    """(sources, destination) of each COPY from the build context (not --from another stage)."""
    out = []
    for instruction in stage.of("COPY"):
        words = instruction.words()
        if any(w.startswith("--from") for w in words):
            continue
        words = [w for w in words if not w.startswith("--")]
        out.append((words[:-1], words[-1]))
    return out


# --- .dockerignore, as moby/patternmatcher reads it -------------------------------------------------------


@dataclass
class Pattern:
    text: str
    exclusion: bool
    regex: re.Pattern[str]


def _regex(pattern: str) -> re.Pattern[str]:
    out, i = "^", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):  # "**/" matches zero or more directories
                i += 1
                out += "(.*/)?"
            else:
                out += ".*"
            continue
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[":
            end = pattern.index("]", i)
            out += "[" + pattern[i + 1 : end].replace("!", "^", 1) + "]"
            i = end
        elif c == "\\" and i + 1 < len(pattern):
            i += 1
            out += re.escape(pattern[i])
        else:
            out += re.escape(c)
        i += 1
    return re.compile(out + "$")


def read_dockerignore(text: str) -> list[Pattern]:
    patterns = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exclusion = line.startswith("!")
        line = line[1:].strip() if exclusion else line
        line = str(PurePosixPath(line.lstrip("/")))
        patterns.append(Pattern(line, exclusion, _regex(line)))
    return patterns


def excluded(path: str, patterns: list[Pattern]) -> bool:
    """patternmatcher.MatchesOrParentMatches: the last pattern that matches the path or one of its parent
    directories decides."""
    parts = PurePosixPath(path).parts
    parents = ["/".join(parts[: i + 1]) for i in range(len(parts) - 1)]
    matched = False
    for p in patterns:
        if p.exclusion != matched:
            continue
        if p.regex.match(path) or any(p.regex.match(parent) for parent in parents):
            matched = not p.exclusion
    return matched


IGNORE = read_dockerignore((ROOT / ".dockerignore").read_text())


def context_files(source: str) -> list[str]:
    """The files under a COPY source that reach the builder, relative to the repository."""
    path = ROOT / source
    candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return [str(p.relative_to(ROOT)) for p in candidates if not excluded(str(p.relative_to(ROOT)), IGNORE)]


def test_the_dockerignore_reading_follows_docker():
    patterns = read_dockerignore("*\n!agent\n**/__pycache__\n!requirements/lock.txt\ndocs/**/*.md\n")
    assert excluded(".venv/bin/python", patterns)
    assert excluded("tests/charts/test_image.py", patterns)
    assert not excluded("agent/cli.py", patterns)
    assert not excluded("agent/api/app.py", patterns)
    assert excluded("agent/__pycache__/cli.cpython-311.pyc", patterns)
    assert excluded("agent/api/__pycache__/app.cpython-311.pyc", patterns)
    assert not excluded("requirements/lock.txt", patterns)
    assert excluded("requirements/other.txt", patterns)
    assert excluded("docs/a/b/c.md", patterns)


# --- the build context -------------------------------------------------------------------------------------


def test_every_copy_source_reaches_the_builder():
    build, final = STAGES
    for stage in (build, final):
        for sources, _ in copies(stage):
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
                assert not excluded(source, IGNORE), f"COPY {source}: .dockerignore keeps it from the builder"
                files = context_files(source)
                assert files, f"COPY {source}: no file of it reaches the builder"
                assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]


def test_the_context_leaves_out_everything_else():
    for path in (".venv/bin/python", ".git/HEAD", "tests/conftest.py", "harness/cluster.py", "build/lib",
                 "dispatch_k8s.egg-info/PKG-INFO", ".hypothesis/x", "docs/install.md", "charts/generate.py",
                 "controlplane/build.sh", ".coverage", "Dockerfile"):  # fmt: skip
        assert excluded(path, IGNORE), f"{path} would be sent to the builder"
    size = sum((ROOT / f).stat().st_size for s in _all_sources() for f in context_files(s))
    assert size < 3_000_000, f"the build context is {size} bytes"


def _all_sources() -> list[str]:
    return [s for stage in STAGES for sources, _ in copies(stage) for s in sources]


def build_tree(into: Path) -> Path:
    """The build stage's WORKDIR as its COPY instructions fill it: the files that reach the wheel."""
    build = STAGES[0]
    (workdir,) = [i.args for i in build.of("WORKDIR")]
    for sources, dest in copies(build):
        for source in sources:
            for f in context_files(source):
                # Docker: a directory's contents go into dest; a file goes to dest, or into it when dest is
                # a directory ("./", or several sources).
                if (ROOT / source).is_dir():
                    target = into / dest / Path(f).relative_to(source)
                elif dest.endswith("/") or len(sources) > 1:
                    target = into / dest / Path(source).name
                else:
                    target = into / dest
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / f, target)
    assert workdir == "/src"
    return into


def checkout_tree(into: Path) -> Path:
    """The repository's files as a clean clone would hold them (tracked, and new files not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    for f in listed:
        if (ROOT / f).is_file():
            (into / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, into / f)
    return into


def wheel_packages(tree: Path) -> set[str]:
    """What setuptools puts in the wheel from ``tree``: pyproject's packages.find (namespaces on, as in
    pyproject.toml), found by setuptools' own discovery."""
    find = PYPROJECT["tool"]["setuptools"]["packages"]["find"]
    found = setuptools.find_namespace_packages(
        where=str(tree), include=find["include"], exclude=find.get("exclude", ())
    )
    return {p for p in found if "__pycache__" not in p}


def test_the_build_stage_gets_every_package_of_the_wheel_and_the_prologue(tmp_path):
    image = wheel_packages(build_tree(tmp_path / "build"))
    repo = wheel_packages(checkout_tree(tmp_path / "repo"))
    assert repo - image == set(), "packages the wheel holds that the Dockerfile does not COPY"
    assert {"contract", "serving", "webhook", "webhook.rules", "agent", "agent.api", "certs", "prologue"} <= image
    for package, files in PYPROJECT["tool"]["setuptools"]["package-data"].items():
        for name in files:
            assert (tmp_path / "build" / package.replace(".", "/") / name).is_file(), f"{package}/{name}"
    assert (tmp_path / "build" / "pyproject.toml").is_file()
    assert (tmp_path / "build" / PYPROJECT["project"]["readme"]).is_file(), "setuptools reads the readme"
    version_file = PYPROJECT["tool"]["setuptools"]["dynamic"]["version"]["file"]
    assert (tmp_path / "build" / version_file).is_file(), "setuptools reads the version"


def _top_level_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _dependency_modules() -> set[str]:
    wanted = {
        re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower().replace("_", "-")
        for d in PYPROJECT["project"]["dependencies"]
    }
    modules = set()
    for module, dists in importlib.metadata.packages_distributions().items():
        if any(d.lower().replace("_", "-") in wanted for d in dists):
            modules.add(module)
    return modules


def test_every_import_in_the_image_resolves_to_its_packages_the_stdlib_or_a_declared_dependency(tmp_path):
    tree = build_tree(tmp_path / "build")
    packages = wheel_packages(tree)
    allowed = {p.split(".")[0] for p in packages} | set(sys.stdlib_module_names) | _dependency_modules()
    unresolved = {}
    for package in packages:
        for module in (tree / package.replace(".", "/")).glob("*.py"):
            missing = _top_level_imports(module) - allowed - {"__future__"}
            if missing:
                unresolved[str(module.relative_to(tree))] = sorted(missing)
    assert unresolved == {}, "imports the image cannot satisfy (a package not copied, or an undeclared dependency)"


def test_the_commands_the_chart_runs_are_console_scripts_of_the_wheel(tmp_path):
    scripts = PYPROJECT["project"]["scripts"]
    tree = build_tree(tmp_path / "build")
    commands = set()
    for name in VALUE_SETS:
        r = rendered(name)
        for doc in r.of("Deployment") + r.of("Job"):
            spec = doc["spec"]["template"]["spec"]
            commands |= {c["command"][0] for c in spec.get("initContainers", []) + spec["containers"]}
    assert commands == {"dispatch-webhook", "dispatch-agent", "dispatch-certs"}
    for command in commands:
        module, _, function = scripts[command].partition(":")
        assert (tree / (module.replace(".", "/") + ".py")).is_file(), f"{command}: {module} is not in the image"
        assert callable(getattr(importlib.import_module(module), function)), f"{command}: {scripts[command]}"


# --- the stages -------------------------------------------------------------------------------------------


def test_two_stages_from_one_pinned_base():
    assert len(STAGES) == 2, "a build stage and a final stage"
    build, final = STAGES
    assert build.base == final.base == "${PYTHON_IMAGE}"
    base = ARGS["PYTHON_IMAGE"]
    match = re.fullmatch(r"python:(\d+)\.(\d+)\.(\d+)-slim-(\w+)(@sha256:[0-9a-f]{64})?", base)
    assert match, f"the base {base} is not pinned to a full version tag"
    assert (int(match[1]), int(match[2])) == sys.version_info[:2], "the image runs the Python the tests run"
    assert PYPROJECT["project"]["requires-python"] == f">={match[1]}.{match[2]}"
    assert "docker buildx imagetools inspect" in DOCKERFILE, "the Dockerfile says how to pin the digest"


def test_the_build_stage_builds_wheels_at_the_locked_versions():
    (run,) = STAGES[0].of("RUN")
    assert run.args.startswith("pip wheel")
    assert "-c requirements/lock.txt" in run.args
    locked = {
        line.split("==")[0].lower().replace("_", "-")
        for line in (ROOT / "requirements" / "lock.txt").read_text().splitlines()
        if "==" in line
    }
    for dependency in PYPROJECT["project"]["dependencies"]:
        name = re.split(r"[<>=!~\[; ]", dependency, maxsplit=1)[0].lower().replace("_", "-")
        assert name in locked, f"{name} is not pinned in requirements/lock.txt"


def test_the_final_stage_has_no_build_tools_and_a_numeric_user():
    final = STAGES[1]
    (run,) = final.of("RUN")
    assert "--mount=type=bind,from=build,source=/wheels" in run.args, "the wheels are mounted, never a layer"
    assert "--no-index" in run.args, "nothing is downloaded in the final stage"
    assert "pip uninstall -y pip" in run.args, "no package installer is left in the image"
    assert not re.search(r"\b(apt-get|apt|apk|gcc|g\+\+|cc|make|build-essential|clang|cargo)\b", run.args)
    assert not [i for i in final.of("COPY") if "--from" in i.args], "nothing but wheels comes from the build stage"
    assert [s for sources, _ in copies(final) for s in sources] == ["prologue/dispatch-prologue.sh"]
    assert final.instructions[-1].keyword == "USER", "the last instruction sets the user"
    user = final.instructions[-1].args
    assert re.fullmatch(r"\d+:\d+", user), f"USER {user} is not numeric (runAsNonRoot needs a number)"
    values = yaml.safe_load((CHART / "values.yaml").read_text())["securityContext"]
    assert user == f"{values['runAsUser']}:{values['runAsGroup']}", "the chart runs as the image's user"
    assert int(user.split(":")[0]) != 0


@pytest.mark.parametrize("path", ["prologue/dispatch-prologue.sh"])
def test_the_prologue_is_in_the_image_twice(path):
    assert (ROOT / path).is_file()
    package, _, name = path.partition("/")
    assert name in PYPROJECT["tool"]["setuptools"]["package-data"][package], "in the wheel"
    assert any(path in sources for sources, _ in copies(STAGES[1])), "and as a plain file for operators"
