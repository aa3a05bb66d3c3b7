"""tools/release, run on a copy of packages/ and tools/ in a tmp dir (never on the real tree)."""

import datetime
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRATCH = shutil.ignore_patterns("__pycache__", ".hypothesis", ".pytest_cache", "*.egg-info", "build", "dist")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    for folder in ("packages", "tools"):
        shutil.copytree(REPO_ROOT / folder, tmp_path / folder, ignore=SCRATCH)
    return tmp_path


def release(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(repo / "tools" / "release"), *args], capture_output=True, text=True, timeout=60
    )


def version_of(repo: Path, folder: str, module: str) -> str:
    text = (repo / "packages" / folder / "src" / "ember" / module / "__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE).group(1)


def snapshot(repo: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in sorted(repo.rglob("*")) if path.is_file()}


def test_patch_bump_updates_version_and_changelog(repo: Path) -> None:
    major, minor, patch = map(int, version_of(repo, "schedule", "schedule").split("."))
    expected = f"{major}.{minor}.{patch + 1}"

    result = release(repo, "schedule", "patch")

    assert result.returncode == 0, result.stderr
    assert version_of(repo, "schedule", "schedule") == expected
    changelog = (repo / "packages" / "schedule" / "CHANGELOG.md").read_text()
    today = datetime.date.today().isoformat()
    assert re.search(rf"^## Unreleased\n\n## {re.escape(expected)} — {today}\n", changelog, re.MULTILINE), changelog
    assert changelog.count("## Unreleased") == 1


def test_distribution_name_and_explicit_version(repo: Path) -> None:
    major, minor, patch = map(int, version_of(repo, "mlperf-llama", "mlperf_llama").split("."))
    explicit = f"{major}.{minor}.{patch + 7}"  # newer than whatever the package is at
    result = release(repo, "ember-mlperf-llama", explicit)

    assert result.returncode == 0, result.stderr
    assert version_of(repo, "mlperf-llama", "mlperf_llama") == explicit


def test_dry_run_writes_nothing(repo: Path) -> None:
    before = snapshot(repo)

    result = release(repo, "runtime", "patch", "--dry-run")

    assert result.returncode == 0, result.stderr
    assert "dry run" in result.stdout
    assert snapshot(repo) == before


def test_bump_outside_a_dependents_range_fails_and_writes_nothing(repo: Path) -> None:
    before = snapshot(repo)
    new_version = "0.{}.0".format(int(version_of(repo, "codegen", "codegen").split(".")[1]) + 1)

    result = release(repo, "codegen", "minor")

    assert result.returncode == 1
    # every package that depends on ember-codegen (a range that stops before the next minor) is named; the others not
    for dependent in ("ember-runtime", "ember-tensor", "ember-amd-runtime", "ember-cuda-runtime"):
        line = next(line for line in result.stderr.splitlines() if line.strip().startswith(dependent))
        assert "requires 'ember-codegen" in line and line.endswith(f"does not admit {new_version}"), line
    assert "ember-schedule" not in result.stderr and "ember-mlperf-llama" not in result.stderr
    assert snapshot(repo) == before


def test_unknown_package_is_an_error(repo: Path) -> None:
    result = release(repo, "ember-nope", "patch")

    assert result.returncode == 1
    assert "unknown package 'ember-nope'" in result.stderr
    assert "schedule (ember-schedule)" in result.stderr


@pytest.mark.parametrize("bad", ["1.2", "v1.2.3", "huge", "0.0.0"])
def test_bad_version_is_an_error(repo: Path, bad: str) -> None:
    before = snapshot(repo)

    result = release(repo, "schedule", bad)

    assert result.returncode == 1
    assert "version" in result.stderr and bad in result.stderr
    assert snapshot(repo) == before
