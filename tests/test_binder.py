"""Binder's files agree with the project: the same dependencies, a CPU build of torch, scripts that run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parent.parent
BINDER = ROOT / "binder"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _requirement_lines() -> list[str]:
    lines = (BINDER / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def _binder_requirements() -> dict[str, Requirement]:
    requirements = [Requirement(line) for line in _requirement_lines() if not line.startswith("-")]
    return {canonicalize_name(requirement.name): requirement for requirement in requirements}


def _commands(script: Path) -> list[str]:
    return [line.strip() for line in script.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.strip().startswith("#")]


def test_requirements_hold_the_projects_dependencies_and_its_notebook_extra() -> None:
    """The cached layer has everything postBuild's `pip install -e .[notebook]` needs, at versions it accepts."""
    binder = _binder_requirements()
    project = PYPROJECT["project"]
    wanted = [Requirement(text) for text in project["dependencies"] + project["optional-dependencies"]["notebook"]]
    for requirement in wanted:
        name = canonicalize_name(requirement.name)
        assert name in binder, f"binder/requirements.txt lacks {requirement} (pyproject: dependencies or [notebook])"
        pins = [Version(spec.version) for spec in binder[name].specifier if spec.operator == "=="]
        for pin in pins:  # a pinned version must satisfy the project's own range
            assert requirement.specifier.contains(pin, prereleases=True), f"{name}=={pin} is outside {requirement}"
        if not pins:
            assert binder[name].specifier == requirement.specifier or not requirement.specifier, (
                f"binder/requirements.txt has {binder[name]}, pyproject {requirement}: make them the same")


def test_requirements_take_torchs_cpu_build_and_leave_the_project_to_postbuild() -> None:
    lines = _requirement_lines()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines  # Binder has no GPU: no CUDA libraries
    torch = _binder_requirements()["torch"]
    (pin,) = [spec.version for spec in torch.specifier if spec.operator == "=="]
    assert Version(pin).local == "cpu"
    setup = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    assert f'"torch=={Version(pin).public}"' in setup, "binder and scripts/setup.sh must install the same torch"
    # `-e .` here would rebuild the big layer at every commit: postBuild installs the project.
    assert not [line for line in lines if line in (".", "-e .") or line.startswith(("-e", "./"))]


def test_postbuild_installs_only_the_project_from_pypi() -> None:
    script = BINDER / "postBuild"
    assert os.access(script, os.X_OK) and script.read_text().startswith("#!/usr/bin/env bash")
    commands = _commands(script)
    assert "set -euo pipefail" in commands
    installs = [c for c in commands if "pip install" in c]
    assert installs == ['python -m pip install --no-cache-dir -e ".[notebook]"']
    extras = re.findall(r"\.\[([\w,]+)\]", installs[0])[0].split(",")
    assert set(extras) <= set(PYPROJECT["project"]["optional-dependencies"]), extras
    network = re.compile(r"\b(curl|wget|git|npm|yarn|jlpm|conda|mamba|apt-get|labextension)\b|https?://")
    assert not [c for c in commands if network.search(c)], "postBuild may reach PyPI through pip only"


def test_start_runs_the_command_under_tritons_interpreter() -> None:
    script = BINDER / "start"
    assert os.access(script, os.X_OK) and _commands(script)[-1] == 'exec "$@"'
    environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    probe = [sys.executable, "-c", "import os, sys; print(os.environ['TRITON_INTERPRET'], sys.argv[1:])", "a b"]
    result = subprocess.run(["bash", str(script), *probe], capture_output=True, text=True, env=environment,
                            check=True, timeout=60)
    assert result.stdout.strip() == "1 ['a b']"  # the variable is set and the arguments arrive whole


def test_runtime_apt_and_the_readme_agree_with_the_project() -> None:
    runtime = (BINDER / "runtime.txt").read_text(encoding="utf-8").strip()
    assert re.fullmatch(r"python-3\.\d+", runtime), runtime
    assert SpecifierSet(PYPROJECT["project"]["requires-python"]).contains(runtime.removeprefix("python-"))
    assert "graphviz" in (BINDER / "apt.txt").read_text(encoding="utf-8").split()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"https://mybinder\.org/v2/gh/([^/\s]+/[^/\s]+)/HEAD\?labpath=([\w%.\-]+)", readme)
    assert links, "README must say how to open the course on Binder"
    for repository, labpath in links:
        assert repository == "OWNER/REPOSITORY", (
            f"{repository}: the repository has no public address yet; once it has, put it here and in this test")
        notebook = ROOT / labpath.replace("%2F", "/")
        assert notebook.exists(), f"the Binder link opens {notebook.name}, which is not in the repository"
        assert notebook.relative_to(ROOT).as_posix() in (ROOT / "scripts" / "lab.sh").read_text()
