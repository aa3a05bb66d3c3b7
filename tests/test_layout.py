"""The shape of the monorepo: eight packages, the dependency graph of DESIGN.md, ranges that admit what exists, and
imports across packages only of what each package's `__init__` exports."""

import ast
import importlib
import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
PACKAGES_DIR = REPO / "packages"

# folder -> import name under the `ember` namespace
PACKAGES = {
    "uops": "uops",
    "schedule": "schedule",
    "codegen": "codegen",
    "runtime": "runtime",
    "amd-runtime": "amd_runtime",
    "cuda-runtime": "cuda_runtime",
    "tensor": "tensor",
    "mlperf-llama": "mlperf_llama",
}

# distribution -> the Ember distributions it depends on (DESIGN.md, "Package dependency graph")
DEPENDENCY_GRAPH = {
    "ember-uops": set(),
    "ember-schedule": {"ember-uops"},
    "ember-codegen": {"ember-uops"},
    "ember-runtime": {"ember-uops", "ember-codegen"},  # dtypes and settings from uops, the renderer from codegen
    # a GPU backend: the device interface from runtime, its renderer from codegen, settings and dtypes from uops
    "ember-amd-runtime": {"ember-uops", "ember-codegen", "ember-runtime"},
    "ember-cuda-runtime": {"ember-codegen", "ember-runtime"},
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


def test_exactly_the_eight_packages() -> None:
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


@pytest.mark.parametrize("folder", PACKAGES)
def test_version_matches_installed_metadata(folder: str) -> None:
    module = importlib.import_module(f"ember.{PACKAGES[folder]}")
    installed = importlib.metadata.version(f"ember-{folder}")
    assert module.__version__ == installed, (
        f"ember.{PACKAGES[folder]}.__version__ is {module.__version__!r} but the installed ember-{folder} metadata "
        f"says {installed!r}: the environment is stale, recreate it (hatch env prune)"
    )


# *** the public-API rule: another package imports only what `__init__` exports (DESIGN.md) ***
IMPORT_NAMES = {name: folder for folder, name in PACKAGES.items()}  # ember.<name> -> its folder


def module_file(module: str) -> Path | None:
    """The source of `ember.<package>.<...>`: a package's `__init__.py` or a module's file; None if there is none."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in IMPORT_NAMES:
        return None
    base = PACKAGES_DIR / IMPORT_NAMES[parts[1]] / "src" / Path(*parts)
    return next((f for f in (base / "__init__.py", base.with_suffix(".py")) if f.is_file()), None)


def exports(module: str) -> tuple[set[str], set[str]]:
    """A module's `__all__` (read from its source: nothing is imported; without one it exports nothing), and those of
    its names it binds to its own submodules (`from ember.tensor import nn`)."""
    if (path := module_file(module)) is None:
        return set(), set()
    names: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, ast.AnnAssign | ast.AugAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            names |= set(ast.literal_eval(node.value))  # a computed __all__ fails here: keep it a literal
    submodules = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                  and node.module == module for alias in node.names if module_file(f"{module}.{alias.name}")}
    return names, names & submodules


def private_imports(path: Path, package: str) -> list[str]:
    """Each import in `path` (of package `package`) of a name or submodule another Ember package does not export, as
    'file:line: ...'. `ember.a.b.c` is public when ember.a exports its submodule b and ember.a.b its submodule c."""
    found, shown = [], path.relative_to(REPO) if path.is_relative_to(REPO) else path
    tree = ast.parse(path.read_text(), str(path))
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    for node in sorted(imports, key=lambda n: n.lineno):
        if isinstance(node, ast.Import):
            wanted = [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            wanted = [(node.module, [alias.name for alias in node.names])]
        else:
            continue  # relative imports stay inside their package
        where = f"{shown}:{node.lineno}"
        for module, names in wanted:
            parts = module.split(".")
            if parts[0] != "ember" or len(parts) < 2 or parts[1] == package:
                continue
            if parts[1] not in IMPORT_NAMES:
                found.append(f"{where}: imports {module}, which is no Ember package")
                continue
            owner = f"ember-{IMPORT_NAMES[parts[1]]}"
            private = next((".".join(parts[:i + 1]) for i in range(2, len(parts))
                            if parts[i] not in exports(".".join(parts[:i]))[1]), None)
            if private is not None:
                found.append(f"{where}: imports from the module {private}, which package {owner} does not export "
                             f"(not a submodule in {private.rsplit('.', 1)[0]}.__all__)")
                continue
            public = exports(module)[0]
            found += [f"{where}: imports {name!r} from {module}, which package {owner} does not export (not in "
                      f"{module}.__all__)" for name in names if name not in public]
    return found


def test_imports_across_packages_use_only_exported_names() -> None:
    found = []
    for folder, package in PACKAGES.items():
        for path in sorted((PACKAGES_DIR / folder / "src").rglob("*.py")):
            found += private_imports(path, package)
    assert found == [], "imports of names another package does not export:\n" + "\n".join(found)


def test_private_imports_are_found(tmp_path: Path) -> None:
    # the checker itself: a submodule reached into, a name not exported, and what is fine
    source = tmp_path / "example.py"
    source.write_text("from ember.tensor.jit import jit\nimport ember.schedule.rangeify\n"
                      "from ember.uops import UOp, pm_not_a_name\nfrom ember.uops import Ops\nimport ember.runtime\n"
                      "from ember.codegen.cache import x\nfrom . import sibling\nfrom ember.uops.render import render\n"
                      "from ember.uops.settings import DEBUG\n")
    found = [line.split(": ", 1)[1] for line in private_imports(source, "mlperf_llama")]
    assert found == [
        "imports from the module ember.tensor.jit, which package ember-tensor does not export (not a submodule in "
        "ember.tensor.__all__)",
        "imports from the module ember.schedule.rangeify, which package ember-schedule does not export (not a "
        "submodule in ember.schedule.__all__)",
        "imports 'pm_not_a_name' from ember.uops, which package ember-uops does not export (not in "
        "ember.uops.__all__)",
        "imports from the module ember.codegen.cache, which package ember-codegen does not export (not a submodule "
        "in ember.codegen.__all__)",
        "imports from the module ember.uops.render, which package ember-uops does not export (not a submodule in "
        "ember.uops.__all__)",
    ]
    assert [line.split(":")[1] for line in private_imports(source, "codegen")] == ["1", "2", "3", "8"]  # own: free


@pytest.mark.parametrize("folder", PACKAGES)
def test_each_package_declares_the_ember_packages_it_imports(folder: str) -> None:
    imported = set()
    for path in (PACKAGES_DIR / folder / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            imported |= {f"ember-{n.split('.')[1].replace('_', '-')}" for n in names if n.startswith("ember.")}
    own = f"ember-{folder}"
    declared = {canonicalize_name(r.name) for r in ember_requirements(folder)}
    assert imported - {own} <= declared, f"{folder}: imports {sorted(imported - {own})}, declares {sorted(declared)}"
