"""The shape of the monorepo: seven packages, the dependency graph of DESIGN.md, ranges that admit what exists."""

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PACKAGES_DIR = Path(__file__).resolve().parent.parent / "packages"

# folder -> import name under the `ember` namespace
PACKAGES = {
    "uops": "uops",
    "schedule": "schedule",
    "codegen": "codegen",
    "runtime": "runtime",
    "amd-runtime": "amd_runtime",
    "tensor": "tensor",
    "mlperf-llama": "mlperf_llama",
}

# distribution -> the Ember distributions it depends on (DESIGN.md, "Package dependency graph")
DEPENDENCY_GRAPH = {
    "ember-uops": set(),
    "ember-schedule": {"ember-uops"},
    "ember-codegen": {"ember-uops"},
    "ember-runtime": {"ember-codegen"},
    "ember-amd-runtime": {"ember-runtime"},
    "ember-tensor": {"ember-uops", "ember-schedule", "ember-codegen", "ember-runtime"},
    "ember-mlperf-llama": {"ember-tensor"},
}


def pyproject(folder: str) -> dict:
    return tomllib.loads((PACKAGES_DIR / folder / "pyproject.toml").read_text())


def ember_requirements(folder: str) -> list[Requirement]:
    requirements = [Requirement(dep) for dep in pyproject(folder)["project"].get("dependencies", [])]
    return [req for req in requirements if canonicalize_name(req.name).startswith("ember-")]


def current_version(folder: str) -> str:
    version_file = PACKAGES_DIR / folder / pyproject(folder)["tool"]["hatch"]["version"]["path"]
    return re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", version_file.read_text(), re.MULTILINE).group(1)


def test_exactly_the_seven_packages() -> None:
    assert sorted(p.name for p in PACKAGES_DIR.iterdir() if p.is_dir()) == sorted(PACKAGES)


@pytest.mark.parametrize("folder", PACKAGES)
def test_package_layout(folder: str) -> None:
    root = PACKAGES_DIR / folder
    for name in ("pyproject.toml", "README.md", "CHANGELOG.md"):
        assert (root / name).is_file(), f"{folder}: missing {name}"
    assert (root / "tests").is_dir(), f"{folder}: missing tests/"
    assert "## Unreleased" in (root / "CHANGELOG.md").read_text(), f"{folder}: CHANGELOG.md has no '## Unreleased'"
    config = pyproject(folder)
    assert config["project"]["name"] == f"ember-{folder}"
    assert config["project"]["dynamic"] == ["version"]
    assert config["tool"]["hatch"]["version"]["path"] == f"src/ember/{PACKAGES[folder]}/__init__.py"
    assert config["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["src/ember"]


def test_dependency_graph_matches_design() -> None:
    graph = {
        canonicalize_name(pyproject(folder)["project"]["name"]): {
            canonicalize_name(req.name) for req in ember_requirements(folder)
        }
        for folder in PACKAGES
    }
    assert graph == DEPENDENCY_GRAPH


def test_ember_is_a_namespace_package() -> None:
    offenders = [p for p in PACKAGES_DIR.rglob("__init__.py") if p.parent.name == "ember"]
    assert offenders == []


@pytest.mark.parametrize("folder", PACKAGES)
def test_dependency_ranges_admit_current_versions(folder: str) -> None:
    versions = {f"ember-{f}": current_version(f) for f in PACKAGES}
    for req in ember_requirements(folder):
        version = versions[canonicalize_name(req.name)]
        assert req.specifier, f"ember-{folder}: {req.name} has no version range"
        assert req.specifier.contains(version, prereleases=True), (
            f"ember-{folder} requires {req}, which does not admit the current version {version}"
        )
